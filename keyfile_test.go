package ctoken

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// writeKeyFile replaces path with content and mode atomically (write a
// temporary file, rename), as a deploy tool or the kubelet would.
func writeKeyFile(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // exact bits, whatever the umask
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// primaryOf returns the primary key of src's current ring.
func primaryOf(src *KeySource) string { return string(src.Keyring().keys[0]) }

// fastFileConfig polls path every millisecond and reports swaps and errors
// on the returned channels (buffered; the poller never blocks on them).
func fastFileConfig(path string) (KeyFileReloaderConfig, chan int, chan error) {
	swaps, errs := make(chan int, 16), make(chan error, 16)
	return KeyFileReloaderConfig{
		Path:     path,
		Interval: time.Millisecond,
		OnSwap:   func(n int) { swaps <- n },
		OnError:  func(err error) { errs <- err },
	}, swaps, errs
}

// await returns the next value of c, failing the test after 5 s.
func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5 s", what)
		panic("unreachable")
	}
}

func TestKeySourceFromFile(t *testing.T) {
	t.Run("refuses bad config", func(t *testing.T) {
		src := mustSource(t, mustKeyring(t, fixedKey(1)))
		path := filepath.Join(t.TempDir(), "keys")
		writeKeyFile(t, path, keyText(RandomKey()), 0o600) // a good file: the config is what is refused
		for _, tc := range []struct {
			name string
			ctx  context.Context
			cfg  KeyFileReloaderConfig
		}{
			{"source set", t.Context(), KeyFileReloaderConfig{Source: src, Path: path}},
			{"no path", t.Context(), KeyFileReloaderConfig{}},
			{"negative interval", t.Context(), KeyFileReloaderConfig{Path: path, Interval: -1}},
			{"nil context", nil, KeyFileReloaderConfig{Path: path}},
		} {
			s, err := KeySourceFromFile(tc.ctx, tc.cfg)
			if !errors.Is(err, ErrConfig) || Reason(err) == "" || s != nil {
				t.Errorf("%s: %v, %v; want ErrConfig with a reason and no source", tc.name, s, err)
			}
		}
	})

	// Checks that the first read fails
	// loudly on every bad file, with an error that names no key material.
	t.Run("refuses bad files", func(t *testing.T) {
		good := EncodeKey(RandomKey())
		for _, tc := range []struct {
			name    string
			content string // "" with missing: no file at all
			missing bool
			mode    fs.FileMode
			want    error
		}{
			{"missing file", "", true, 0o600, fs.ErrNotExist},
			{"empty file", "", false, 0o600, ErrKeyInvalid},
			{"white space only", " \n", false, 0o600, ErrKeyInvalid},
			{"malformed", "not*base64!" + strings.Repeat("x", 40), false, 0o600, ErrKeyInvalid},
			{"empty entry", good + ",,", false, 0o600, ErrKeyInvalid},
			{"short key", EncodeKey(RandomKey()[:31]), false, 0o600, ErrKeyTooShort},
			{"webhook secret", "whsec_" + good, false, 0o600, ErrKeyInvalid},
			{"too large", strings.Repeat("A", MaxKeyFileBytes+1), false, 0o600, ErrKeyFileTooLarge},
			{"world-writable", good, false, 0o666, ErrKeyFileWritable},
			// A file written in place that parses but has no final newline may
			// be a writer's first bytes: refused at the first read too.
			{"no final newline", good, false, 0o600, ErrKeyFileIncomplete},
			{"64-byte key cut after 44 characters", EncodeKey(key64(t))[:44], false, 0o600, ErrKeyFileIncomplete},
			{"two lines", good + ",\n" + EncodeKey(RandomKey()) + "\n", false, 0o600, ErrKeyFileIncomplete},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.want == ErrKeyFileWritable && runtime.GOOS == "windows" {
					t.Skip("permission bits are not checked on Windows")
				}
				path := filepath.Join(t.TempDir(), "keys")
				if !tc.missing {
					writeKeyFile(t, path, tc.content, tc.mode)
				}
				cfg, _, errs := fastFileConfig(path)
				src, err := KeySourceFromFile(t.Context(), cfg)
				if !errors.Is(err, tc.want) || src != nil {
					t.Fatalf("got %v, %v; want %v and no source", src, err, tc.want)
				}
				if strings.Contains(err.Error(), good) {
					t.Fatalf("error contains the key: %v", err)
				}
				select {
				case e := <-errs:
					t.Fatalf("OnError called for the first read (it is returned): %v", e)
				default:
				}
			})
		}
	})

	// Rewrites the key file through the
	// two passes of a rotation and checks that an issuer on the source follows
	// each one, and that cursors of the old primary still verify.
	t.Run("picks up rotation", func(t *testing.T) {
		a, b := RandomKey(), RandomKey()
		path := filepath.Join(t.TempDir(), "keys")
		writeKeyFile(t, path, keyText(a), 0o644) // world-readable is accepted
		cfg, swaps, errs := fastFileConfig(path)
		src, err := KeySourceFromFile(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		iss, err := NewCursorIssuer(CursorConfig{KeySource: src, Session: []byte("s")})
		if err != nil {
			t.Fatal(err)
		}
		scope := CursorScope{ToolID: "GET /v1/items", CallerID: "u"}
		old, err := IssueKeyset(iss, scope, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			content string
			primary []byte
			n       int
		}{
			{keyText(a, b), a, 2}, // pass 1: learn b
			{keyText(b, a), b, 2}, // pass 2: sign with b
		} {
			writeKeyFile(t, path, step.content, 0o600)
			if n := await(t, swaps, "swap"); n != step.n {
				t.Fatalf("OnSwap(%d), want %d", n, step.n)
			}
			if primaryOf(src) != string(step.primary) {
				t.Fatal("the ring's primary is not the file's first key")
			}
			if k, err := VerifyKeyset[int](iss, old, scope); err != nil || k != 7 {
				t.Fatalf("a cursor of the previous primary: %v, %v", k, err)
			}
		}
		fresh, err := IssueKeyset(iss, scope, 8)
		if err != nil {
			t.Fatal(err)
		}
		onlyA, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, a), Session: []byte("s")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyKeyset[int](onlyA, fresh, scope); !errors.Is(err, ErrCursorInvalid) {
			t.Fatalf("a cursor issued after the rotation verified with the old key alone: %v", err)
		}
		select {
		case e := <-errs:
			t.Fatalf("OnError: %v", e)
		default:
		}
	})

	// Rewrites the file with bad
	// content after the first read: each bad version is reported once and the
	// current ring stays in effect; a good version afterwards is picked up.
	t.Run("keeps ring when reload fails", func(t *testing.T) {
		a, b := RandomKey(), RandomKey()
		path := filepath.Join(t.TempDir(), "keys")
		writeKeyFile(t, path, keyText(a), 0o600)
		cfg, swaps, errs := fastFileConfig(path)
		src, err := KeySourceFromFile(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		bad := []struct {
			name    string
			content string
			mode    fs.FileMode
			want    error
		}{
			{"empty", "", 0o600, ErrKeyInvalid},
			{"malformed", "%%%", 0o600, ErrKeyInvalid},
			{"short key", EncodeKey(b[:16]), 0o600, ErrKeyTooShort},
			{"world-writable", keyText(b), 0o646, ErrKeyFileWritable},
		}
		for _, tc := range bad {
			if tc.want == ErrKeyFileWritable && runtime.GOOS == "windows" {
				continue
			}
			writeKeyFile(t, path, tc.content, tc.mode)
			if err := await(t, errs, tc.name+" error"); !errors.Is(err, tc.want) {
				t.Fatalf("%s: OnError(%v), want %v", tc.name, err, tc.want)
			}
			if primaryOf(src) != string(a) || src.Keyring().Len() != 1 {
				t.Fatalf("%s: the ring changed", tc.name)
			}
		}
		// Removing the file is a read error; the ring stays.
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := await(t, errs, "missing-file error"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("OnError(%v), want ErrNotExist", err)
		}
		writeKeyFile(t, path, keyText(b, a), 0o600)
		if n := await(t, swaps, "swap"); n != 2 || primaryOf(src) != string(b) {
			t.Fatalf("good file after bad ones: OnSwap(%d)", n)
		}
		select {
		case n := <-swaps:
			t.Fatalf("a bad file was swapped in: OnSwap(%d)", n)
		default:
		}
	})

	// Checks that no reload happens after
	// ctx is done.
	t.Run("stops with context", func(t *testing.T) {
		a, b := RandomKey(), RandomKey()
		path := filepath.Join(t.TempDir(), "keys")
		writeKeyFile(t, path, keyText(a), 0o600)
		ctx, cancel := context.WithCancel(t.Context())
		cfg, swaps, _ := fastFileConfig(path)
		src, err := KeySourceFromFile(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		writeKeyFile(t, path, keyText(b), 0o600)
		await(t, swaps, "swap while running")
		cancel()
		// A check that had already started when cancel returned may still
		// finish; none starts after it.
		time.Sleep(100 * time.Millisecond)
		for len(swaps) > 0 {
			<-swaps
		}
		writeKeyFile(t, path, keyText(a), 0o600)
		time.Sleep(50 * time.Millisecond) // 50 intervals
		if len(swaps) != 0 || primaryOf(src) != string(b) {
			t.Fatal("the file was reloaded after ctx was done")
		}
	})
}

// TestKeyFileReloaderRefusesWorldWritableFile checks the permission check
// of the long form, which shares the file reader.
func TestKeyFileReloaderRefusesWorldWritableFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("permission bits are not checked on Windows")
	}
	a := RandomKey()
	path := filepath.Join(t.TempDir(), "keys")
	writeKeyFile(t, path, keyText(RandomKey()), 0o666)
	src := mustSource(t, mustKeyring(t, a))
	r, err := NewKeyFileReloader(KeyFileReloaderConfig{Source: src, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if swapped, err := r.Reload(); swapped || !errors.Is(err, ErrKeyFileWritable) {
		t.Fatalf("Reload: %v, %v; want ErrKeyFileWritable", swapped, err)
	}
	if primaryOf(src) != string(a) {
		t.Fatal("a world-writable file was swapped in")
	}
}

// TestKeyFileThatIsADirectoryIsRefused checks that a directory in the key
// file's place is ErrConfig, at the first read and at a reload.
func TestKeyFileThatIsADirectoryIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, _, _ := fastFileConfig(path)
	if src, err := KeySourceFromFile(t.Context(), cfg); !errors.Is(err, ErrConfig) || src != nil {
		t.Fatalf("got %v, %v; want ErrConfig", src, err)
	}
	src := mustSource(t, mustKeyring(t, fixedKey(1)))
	r, err := NewKeyFileReloader(KeyFileReloaderConfig{Source: src, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if swapped, err := r.Reload(); swapped || !errors.Is(err, ErrConfig) {
		t.Fatalf("Reload: %v, %v; want ErrConfig", swapped, err)
	}
}

// TestOperationsProgramRefusesAWorldWritableKeyFile runs the key handling
// of the program at the top of docs/operations.md: its first read goes
// through KeySourceFromFile, so a world-writable key file serves no token
// (the program once read the file with os.ReadFile and served its keys
// until the first reload), and its SIGHUP reloader, made with the same
// config and the source, refuses one at a reload and keeps the ring.
func TestOperationsProgramRefusesAWorldWritableKeyFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("permission bits are not checked on Windows")
	}
	path := filepath.Join(t.TempDir(), "keys")
	writeKeyFile(t, path, keyText(RandomKey()), 0o666)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := KeyFileReloaderConfig{Path: path, OnError: func(error) {}}
	if keys, err := KeySourceFromFile(ctx, cfg); keys != nil || !errors.Is(err, ErrKeyFileWritable) {
		t.Fatalf("first read of a world-writable file: %v, %v; want ErrKeyFileWritable", keys, err)
	}

	a := RandomKey()
	writeKeyFile(t, path, keyText(a), 0o600)
	keys, err := KeySourceFromFile(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source = keys
	reloader, err := NewKeyFileReloader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeKeyFile(t, path, keyText(RandomKey(), a), 0o666)
	if swapped, err := reloader.Reload(); swapped || !errors.Is(err, ErrKeyFileWritable) {
		t.Fatalf("SIGHUP reload of a world-writable file: %v, %v; want ErrKeyFileWritable", swapped, err)
	}
	if primaryOf(keys) != string(a) {
		t.Fatal("a world-writable file was swapped in")
	}
}
