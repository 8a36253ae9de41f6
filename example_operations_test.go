package ctoken_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ctoken/ctoken"
)

// Example_operations follows a key file (a mounted Secret) without a
// restart and logs every refusal through log/slog. docs/operations.md
// starts with this code.
func Example_operations() {
	dir, err := os.MkdirTemp("", "ctoken-keys")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keys") // in production: the Secret's mount path
	if err := os.WriteFile(path, []byte(ctoken.EncodeKey(ctoken.RandomKey())+"\n"), 0o600); err != nil {
		panic(err)
	}

	// The current ring, read through the checked path (a world-writable,
	// incomplete or malformed file fails here, before any token is
	// served), and a goroutine that swaps in every change of the file; a
	// bad change keeps the current ring and is reported.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys, err := ctoken.KeySourceFromFile(ctx, ctoken.KeyFileReloaderConfig{
		Path:    path,
		OnError: func(err error) { slog.Error("key file refused; keeping the current keys", "err", err) },
	}) // polls every DefaultKeyReloadInterval
	if err != nil {
		panic(err)
	}

	// Refusals at Info and above, as structured records (time dropped here
	// so the output is stable).
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	observer, err := ctoken.NewSlogObserver(logger)
	if err != nil {
		panic(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{
		KeySource: keys,
		Session:   []byte("fleet-1"),
		Observer:  observer,
	})
	if err != nil {
		panic(err)
	}

	cursor, err := issuer.Issue(ctoken.CursorPayload{CursorScope: ctoken.CursorScope{ToolID: "search", CallerID: "alice"}})
	if err != nil {
		panic(err)
	}
	issuer.Verify(cursor, ctoken.CursorScope{ToolID: "search", CallerID: "mallory"})
	// Output:
	// level=WARN msg="ctoken: refused" kind=cursor outcome=refused reason="forged or wrong scope (tool, caller or arguments)"
}
