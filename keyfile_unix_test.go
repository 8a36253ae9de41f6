//go:build unix

package ctoken

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestKeyFileThatIsAFIFOIsRefusedWithoutBlocking checks that a FIFO in the
// key file's place is refused at once: opening one for reading blocks until
// a writer comes, which hung the first read and every later check (and
// Reload, behind the reloader's lock).
func TestKeyFileThatIsAFIFOIsRefusedWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		// Unblock a reader left behind by a failing run.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	done := make(chan error, 1)
	go func() {
		cfg, _, _ := fastFileConfig(path)
		_, err := KeySourceFromFile(t.Context(), cfg)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("got %v, want ErrConfig", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("KeySourceFromFile blocked on a FIFO")
	}
	// The same at a reload: the ring stays, and Reload returns.
	src := mustSource(t, mustKeyring(t, fixedKey(1)))
	r, err := NewKeyFileReloader(KeyFileReloaderConfig{Source: src, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := r.Reload()
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("Reload: %v, want ErrConfig", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Reload blocked on a FIFO")
	}
}

// TestKeyFileInAWorldWritableDirectoryIsRefused checks that a key file in a
// directory every user may write, without the sticky bit, is refused like a
// world-writable file (anyone may rename their own file over it), whether
// the path names it directly or through a symbolic link; with the sticky
// bit (a Kubernetes Secret volume's root is 1777) it is accepted.
func TestKeyFileInAWorldWritableDirectoryIsRefused(t *testing.T) {
	key := keyText(RandomKey())
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	inOpen := filepath.Join(open, "keys")
	writeKeyFile(t, inOpen, key, 0o600)
	safe := t.TempDir()
	link := filepath.Join(safe, "keys")
	if err := os.Symlink(inOpen, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{inOpen, link} {
		cfg, _, _ := fastFileConfig(path)
		if src, err := KeySourceFromFile(t.Context(), cfg); !errors.Is(err, ErrKeyFileWritable) || src != nil {
			t.Errorf("%s: %v, %v; want ErrKeyFileWritable", path, src, err)
		}
	}
	// At a reload too: the ring stays.
	src := mustSource(t, mustKeyring(t, fixedKey(1)))
	r, err := NewKeyFileReloader(KeyFileReloaderConfig{Source: src, Path: link})
	if err != nil {
		t.Fatal(err)
	}
	if swapped, err := r.Reload(); swapped || !errors.Is(err, ErrKeyFileWritable) {
		t.Errorf("Reload: %v, %v; want ErrKeyFileWritable", swapped, err)
	}
	// The sticky bit: only the owner may rename or remove the file.
	if err := os.Chmod(open, 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{inOpen, link} {
		cfg, _, _ := fastFileConfig(path)
		if _, err := KeySourceFromFile(t.Context(), cfg); err != nil {
			t.Errorf("%s in a sticky directory: %v", path, err)
		}
	}
}
