package keyfile

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

// secretDir lays out a directory the way a Kubernetes Secret volume does:
// dir/keys -> ..data/keys, dir/..data -> ..<version>, the version directory
// holding the file. publish writes a new version and swaps ..data with an
// atomic rename, as the kubelet does.
type secretDir struct {
	t       *testing.T
	dir     string
	version int
}

func newSecretDir(t *testing.T, content string) *secretDir {
	d := &secretDir{t: t, dir: t.TempDir()}
	d.publish(content)
	if err := os.Symlink(filepath.Join("..data", "keys"), filepath.Join(d.dir, "keys")); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *secretDir) path() string { return filepath.Join(d.dir, "keys") }

func (d *secretDir) publish(content string) {
	d.t.Helper()
	d.version++
	v := filepath.Join(d.dir, "..v"+strings.Repeat("x", d.version))
	if err := os.Mkdir(v, 0o700); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v, "keys"), []byte(content), 0o600); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(v), tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

func keyText(keys ...[]byte) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = ctoken.EncodeKey(k)
	}
	return strings.Join(parts, ",") + "\n"
}

func TestNewReloaderRefusesBadConfig(t *testing.T) {
	src := mustSource(t, mustKeyring(t, fixedKey(1)))
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"no source", Config{Path: "k"}, ctoken.ErrNoKey},
		{"empty source", Config{Source: &ctoken.KeySource{}, Path: "k"}, ctoken.ErrNoKey},
		{"no path", Config{Source: src}, ctoken.ErrConfig},
		{"negative interval", Config{Source: src, Path: "k", Interval: -1}, ctoken.ErrConfig},
	} {
		_, err := NewReloader(tc.cfg)
		if !errors.Is(err, tc.want) || reasonText(err) == "" {
			t.Errorf("%s: %v, want %v with a reason", tc.name, err, tc.want)
		}
	}
}

func TestReloader(t *testing.T) {
	// Publishes three versions of a key
	// file through atomic symlink swaps and checks each one takes effect, and
	// that unchanged content is no swap.
	t.Run("follows symlink swaps", func(t *testing.T) {
		a, b := ctoken.RandomKey(), ctoken.RandomKey()
		d := newSecretDir(t, keyText(a))
		src := mustSource(t, mustKeyring(t, a))
		var swaps []int
		r, err := NewReloader(Config{Source: src, Path: d.path(), OnSwap: func(n int) { swaps = append(swaps, n) },
			OnError: func(err error) { t.Errorf("OnError: %v", err) }})
		if err != nil {
			t.Fatal(err)
		}
		for i, step := range []struct {
			content string
			swapped bool
			primary []byte
			n       int
		}{
			{"", true, a, 1}, // the first check loads the file
			{"", false, a, 1},
			{keyText(a, b), true, a, 2},
			{keyText(b, a), true, b, 2},
			{keyText(b, a), false, b, 2}, // same content, new symlink: no swap
			{keyText(b), true, b, 1},
		} {
			if step.content != "" {
				d.publish(step.content)
			}
			swapped, err := r.Reload()
			if err != nil || swapped != step.swapped {
				t.Fatalf("step %d: swapped %v, err %v; want %v", i, swapped, err, step.swapped)
			}
			kr := src.Keyring()
			if primaryID(kr) != idOf(step.primary) || kr.Len() != step.n {
				t.Fatalf("step %d: ring of %d keys with the wrong primary", i, kr.Len())
			}
		}
		if len(swaps) != 4 {
			t.Errorf("OnSwap called %d times, want 4", len(swaps))
		}
	})

	// TestReloader/keeps the ring on bad content: a malformed, empty, missing
	// or oversize file leaves the ring in place and is reported once.
	t.Run("keeps the ring on bad content", func(t *testing.T) {
		a := ctoken.RandomKey()
		d := newSecretDir(t, keyText(a))
		kr := mustKeyring(t, a)
		src := mustSource(t, kr)
		var reported []error
		r, err := NewReloader(Config{Source: src, Path: d.path(), OnError: func(err error) { reported = append(reported, err) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		kr = src.Keyring()
		for _, tc := range []struct {
			name    string
			content string
			want    error
		}{
			{"not base64", "not a key!\n", ctoken.ErrKeyInvalid},
			{"short key", ctoken.EncodeKey(make([]byte, 16)), ctoken.ErrKeyTooShort},
			{"empty", "\n", ctoken.ErrKeyInvalid},
			{"oversize", strings.Repeat("A", MaxBytes+1), ErrTooLarge},
		} {
			reported = nil
			d.publish(tc.content)
			for range 3 {
				swapped, err := r.Reload()
				if swapped || !errors.Is(err, tc.want) {
					t.Fatalf("%s: swapped %v, err %v, want %v", tc.name, swapped, err, tc.want)
				}
				if strings.Contains(err.Error(), tc.content[:min(len(tc.content), 8)]) && tc.want != ErrTooLarge {
					t.Errorf("%s: error %q echoes the file", tc.name, err)
				}
			}
			if src.Keyring() != kr {
				t.Fatalf("%s: the ring was replaced", tc.name)
			}
			if len(reported) != 1 {
				t.Errorf("%s: OnError called %d times for one bad file, want 1", tc.name, len(reported))
			}
		}
		os.Remove(filepath.Join(d.dir, "..data"))
		if _, err := r.Reload(); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing file: %v", err)
		}
		if src.Keyring() != kr {
			t.Fatal("a missing file replaced the ring")
		}
	})

	// Runs the poll loop
	// with a short interval and waits (bounded) for a published key.
	t.Run("run picks up a swap within the interval", func(t *testing.T) {
		a, b := ctoken.RandomKey(), ctoken.RandomKey()
		d := newSecretDir(t, keyText(a))
		src := mustSource(t, mustKeyring(t, a))
		swapped := make(chan int, 10)
		r, err := NewReloader(Config{Source: src, Path: d.path(), Interval: 5 * time.Millisecond, OnSwap: func(n int) { swapped <- n }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		var runErr error
		go func() { defer wg.Done(); runErr = r.Run(ctx) }()
		wait := func() {
			t.Helper()
			select {
			case <-swapped:
			case <-time.After(5 * time.Second):
				t.Fatal("no swap within 5 s")
			}
		}
		wait() // the initial load
		d.publish(keyText(b, a))
		wait()
		cancel()
		wg.Wait()
		if !errors.Is(runErr, context.Canceled) {
			t.Errorf("Run returned %v", runErr)
		}
		if primaryOf(src) != idOf(b) {
			t.Error("the published primary is not in effect")
		}
	})

	// TestReloader/run does not reload after its context is done: with ctx done
	// (here before Run starts, so the race of a tick and ctx.Done is decided
	// the same way every time) Run returns ctx's error and reads nothing.
	t.Run("run does not reload after its context is done", func(t *testing.T) {
		a := ctoken.RandomKey()
		d := newSecretDir(t, keyText(a))
		src := mustSource(t, mustKeyring(t, a))
		calls := 0
		r, err := NewReloader(Config{Source: src, Path: d.path(), Interval: time.Millisecond,
			OnError: func(error) { calls++ }, OnSwap: func(int) { calls++ }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 100 {
			if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v; want context.Canceled", err)
			}
		}
		if calls != 0 {
			t.Fatalf("%d reloads after the context was done, want 0", calls)
		}
	})

	// Kills reload.go `len(b) > MaxBytes` → `>=`: a key file of exactly
	// MaxBytes bytes (a key padded with white space, which ParseKeyring
	// trims) is read and swapped in; one byte more is ErrTooLarge and
	// leaves the ring in place.
	t.Run("reads a file of exactly MaxBytes", func(t *testing.T) {
		a, b := ctoken.RandomKey(), ctoken.RandomKey()
		pad := func(text string, n int) string { return text + strings.Repeat(" ", n-len(text)) }
		d := newSecretDir(t, keyText(a))
		src := mustSource(t, mustKeyring(t, a))
		r, err := NewReloader(Config{Source: src, Path: d.path()})
		if err != nil {
			t.Fatal(err)
		}
		d.publish(pad(keyText(b), MaxBytes))
		if swapped, err := r.Reload(); !swapped || err != nil {
			t.Fatalf("file of MaxBytes: swapped %v, err %v", swapped, err)
		}
		if primaryOf(src) != idOf(b) {
			t.Fatal("the key of a file of MaxBytes is not in effect")
		}
		kr := src.Keyring()
		d.publish(pad(keyText(a), MaxBytes+1))
		if swapped, err := r.Reload(); swapped || !errors.Is(err, ErrTooLarge) {
			t.Fatalf("file of MaxBytes+1: swapped %v, err %v", swapped, err)
		}
		if src.Keyring() != kr {
			t.Fatal("an oversize file replaced the ring")
		}
	})
}

// slowWriter writes a key file in place the way `ctoken keygen > file` or
// an editor does: open with O_TRUNC (the content is gone at once), then the
// bytes, in as many pieces as the test likes.
type slowWriter struct {
	t *testing.T
	f *os.File
}

func newSlowWriter(t *testing.T, path string) *slowWriter {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &slowWriter{t: t, f: f}
}

func (w *slowWriter) write(s string) {
	w.t.Helper()
	if _, err := w.f.WriteString(s); err != nil {
		w.t.Fatal(err)
	}
}

// key64 returns a fresh 64-byte key: 86 base64url characters.
func key64(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 64)
	for {
		if _, err := rand.Read(k); err != nil {
			t.Fatal(err)
		}
		if _, err := ctoken.NewKeyring(k); err == nil {
			return k
		}
	}
}

// TestReloaderNeverSwapsInAFileCaughtMidWrite writes each new key
// file in place one byte at a time and checks at every cut point, with
// three checks per cut (a writer stalled for longer than several polls),
// that the ring is never replaced; the complete file then takes effect at
// the next check. Among the cut points are the red team's cases: a 64-byte
// key cut after 44 of its 86 characters (33 bytes, a key ParseKeyring
// accepts), and a rotation "new,old" cut before the comma (a ring without
// the old key). Reload is the poll: no timing is involved.
func TestReloaderNeverSwapsInAFileCaughtMidWrite(t *testing.T) {
	old, next := ctoken.RandomKey(), ctoken.RandomKey()
	long := key64(t)
	for _, tc := range []struct {
		name    string
		full    string
		primary []byte
		n       int
		// redTeam is a cut point whose prefix parses as a ring: without the
		// terminator it would have been swapped in.
		redTeam int
	}{
		{"64-byte key", ctoken.EncodeKey(long) + "\n", long, 1, 44},
		{"rotation new,old", keyText(next, old), next, 2, len(ctoken.EncodeKey(next))},
		{"rotation new,old with CRLF", strings.TrimSuffix(keyText(next, old), "\n") + "\r\n", next, 2, len(ctoken.EncodeKey(next)) + 1 + len(ctoken.EncodeKey(old))},
	} {
		for _, viaSymlink := range []bool{false, true} {
			name := tc.name
			if viaSymlink {
				name += " through an unchanged symlink"
			}
			t.Run(name, func(t *testing.T) {
				if _, err := ctoken.ParseKeyring(tc.full[:tc.redTeam]); err != nil {
					t.Fatalf("the red team's cut does not parse (%v): the case tests nothing", err)
				}
				dir := t.TempDir()
				file := filepath.Join(dir, "keys")
				path := file
				if viaSymlink {
					path = filepath.Join(dir, "link")
					if err := os.Symlink("keys", path); err != nil {
						t.Fatal(err)
					}
				}
				writeKeyFile(t, file, keyText(old), 0o600)
				src := mustSource(t, mustKeyring(t, old))
				var reported []error
				r, err := NewReloader(Config{Source: src, Path: path,
					OnError: func(err error) { reported = append(reported, err) }})
				if err != nil {
					t.Fatal(err)
				}
				if swapped, err := r.Reload(); !swapped || err != nil {
					t.Fatalf("first check: swapped %v, err %v", swapped, err)
				}
				before := src.Keyring()
				w := newSlowWriter(t, file)
				for cut := 0; cut < len(tc.full); cut++ {
					if cut > 0 {
						w.write(tc.full[cut-1 : cut])
					}
					for poll := range 3 {
						swapped, err := r.Reload()
						if swapped || err == nil || src.Keyring() != before {
							t.Fatalf("cut %d of %d, check %d: swapped %v, err %v, ring replaced %v",
								cut, len(tc.full), poll, swapped, err, src.Keyring() != before)
						}
						if cut == tc.redTeam && !errors.Is(err, ErrIncomplete) {
							t.Fatalf("red team's cut %d: %v, want ErrIncomplete", cut, err)
						}
						if cut >= 8 && strings.Contains(err.Error(), tc.full[:8]) {
							t.Fatalf("cut %d: the error echoes the file: %v", cut, err)
						}
					}
				}
				w.write(tc.full[len(tc.full)-1:])
				swapped, err := r.Reload()
				kr := src.Keyring()
				if !swapped || err != nil || primaryID(kr) != idOf(tc.primary) || kr.Len() != tc.n {
					t.Fatalf("complete file: swapped %v, err %v, %d keys", swapped, err, kr.Len())
				}
				if len(reported) > len(tc.full) {
					t.Errorf("OnError called %d times for %d cut points: not once per content", len(reported), len(tc.full))
				}
			})
		}
	}
}

// TestReloaderKeepsTheRingWhileACrashedWritersFileStays: a file a
// crashed writer left truncated (it parses, but has no final newline) is
// never swapped in, however many checks pass, and is reported once; the
// next complete version takes effect.
func TestReloaderKeepsTheRingWhileACrashedWritersFileStays(t *testing.T) {
	old, next := ctoken.RandomKey(), ctoken.RandomKey()
	path := filepath.Join(t.TempDir(), "keys")
	writeKeyFile(t, path, keyText(old), 0o600)
	src := mustSource(t, mustKeyring(t, old))
	var reported []error
	r, err := NewReloader(Config{Source: src, Path: path, OnError: func(err error) { reported = append(reported, err) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	before := src.Keyring()
	full := keyText(next, old)
	newSlowWriter(t, path).write(full[:len(ctoken.EncodeKey(next))]) // crashed before the comma
	for range 50 {
		if swapped, err := r.Reload(); swapped || !errors.Is(err, ErrIncomplete) {
			t.Fatalf("swapped %v, err %v; want ErrIncomplete", swapped, err)
		}
	}
	if src.Keyring() != before || len(reported) != 1 || !errors.Is(reported[0], ErrIncomplete) {
		t.Fatalf("ring replaced %v; OnError %v, want one ErrIncomplete", src.Keyring() != before, reported)
	}
	writeKeyFile(t, path, full, 0o600)
	if swapped, err := r.Reload(); !swapped || err != nil || primaryOf(src) != idOf(next) {
		t.Fatalf("the complete file: swapped %v, err %v", swapped, err)
	}
}

// TestReloaderAcceptsAPublishedFileWithoutANewline: a Kubernetes
// Secret volume's file has no final newline when the secret was made from a
// literal; it is published whole by the ..data symlink swap, so it is
// loaded at the first check and at every later swap. The same content
// written in place is refused.
func TestReloaderAcceptsAPublishedFileWithoutANewline(t *testing.T) {
	a, b := ctoken.RandomKey(), ctoken.RandomKey()
	bare := func(keys ...[]byte) string { return strings.TrimSuffix(keyText(keys...), "\n") }
	d := newSecretDir(t, bare(a))
	src := mustSource(t, mustKeyring(t, b))
	var reported []error
	r, err := NewReloader(Config{Source: src, Path: d.path(), OnError: func(err error) { reported = append(reported, err) }})
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		content string
		primary []byte
	}{
		{"", a},
		{bare(b, a), b},
		{bare(a, b), a},
		{ctoken.EncodeKey(b) + ",\n" + ctoken.EncodeKey(a), b}, // two lines: fine when published
	} {
		if step.content != "" {
			d.publish(step.content)
		}
		if swapped, err := r.Reload(); !swapped || err != nil || primaryOf(src) != idOf(step.primary) || reported != nil {
			t.Fatalf("step %d: swapped %v, err %v, OnError %v", i, swapped, err, reported)
		}
	}
	// In place through the same ..data target: a write, not a publish.
	target, err := filepath.EvalSymlinks(d.path())
	if err != nil {
		t.Fatal(err)
	}
	newSlowWriter(t, target).write(bare(a))
	if swapped, err := r.Reload(); swapped || !errors.Is(err, ErrIncomplete) {
		t.Fatalf("in place through the symlink: swapped %v, err %v", swapped, err)
	}
}

func TestFileTerminatorIsOneLineEndingInANewline(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"", false},
		{"k", false},
		{"k\n", true},
		{"k\r\n", true},
		{"\n", true}, // refused by ctoken.ParseKeyring, not here
		{"k\r", false},
		{"k1\n,k2\n", false},
		{"k1,\nk2\n", false},
		{"k\n\n", false},
		{"k\nmore", false},
	} {
		t.Run(strconv.Quote(tc.text), func(t *testing.T) {
			if got := terminated([]byte(tc.text)); got != tc.want {
				t.Errorf("terminated(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}
