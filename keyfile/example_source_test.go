package keyfile_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/keyfile"
)

func ExampleNewSource() {
	dir, err := os.MkdirTemp("", "ctoken-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keys") // in production, a mounted Secret
	if err := os.WriteFile(path, []byte(ctoken.EncodeKey(ctoken.RandomKey())+"\n"), 0o600); err != nil {
		log.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop() // stops the reloading
	keys, err := keyfile.NewSource(ctx, keyfile.Config{
		Path:    path, // re-read every 10 s; a bad version keeps the current keys
		OnError: func(err error) { log.Printf("key file refused; keeping the current keys: %v", err) },
	})
	if err != nil {
		log.Fatal(err) // missing, empty, malformed, short or world-writable
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{KeySource: keys, Session: []byte("fleet-1")})
	if err != nil {
		log.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: "GET /v1/items", CallerID: "user:42"}
	cursor, err := ctoken.IssueKeyset(issuer, scope, "item-0042")
	if err != nil {
		log.Fatal(err)
	}
	after, err := ctoken.VerifyKeyset[string](issuer, cursor, scope)
	fmt.Println(keys.Keyring().Len(), after, err)
	// Output: 1 item-0042 <nil>
}
