//go:build unix

package keyfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

// TestFileThatIsAFIFOIsRefusedWithoutBlocking checks that a FIFO in the
// key file's place is refused at once: opening one for reading blocks until
// a writer comes, which hung the first read and every later check (and
// Reload, behind the reloader's lock).
func TestFileThatIsAFIFOIsRefusedWithoutBlocking(t *testing.T) {
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
		_, err := NewSource(t.Context(), cfg)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ctoken.ErrConfig) {
			t.Fatalf("got %v, want ctoken.ErrConfig", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("NewSource blocked on a FIFO")
	}
	// The same at a reload: the ring stays, and Reload returns.
	src := mustSource(t, mustKeyring(t, fixedKey(1)))
	r, err := NewReloader(Config{Source: src, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := r.Reload()
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ctoken.ErrConfig) {
			t.Fatalf("Reload: %v, want ctoken.ErrConfig", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Reload blocked on a FIFO")
	}
}
