package ctoken_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/ctoken/ctoken"
)

// A sealed cursor (CursorConfig.Seal) carries its position encrypted: a
// keyset cursor over user records does not show the client the last
// e-mail address it read. It is bound to the same scope as a signed one.
func ExampleCursorIssuer_sealed() {
	// A fixed test key, for a reproducible example; in production the
	// fleet's ring comes from ctoken.KeyringFromEnv.
	keys, err := ctoken.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Seal: true})
	if err != nil {
		log.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: "list_users", CallerID: "admin:1"}

	cursor, err := ctoken.IssueKeyset(issuer, scope, "carol@example.com")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Contains(cursor, "carol"))

	after, err := ctoken.VerifyKeyset[string](issuer, cursor, scope)
	fmt.Println(after, err)

	_, err = ctoken.VerifyKeyset[string](issuer, cursor, ctoken.CursorScope{ToolID: "list_users", CallerID: "admin:2"})
	fmt.Println(errors.Is(err, ctoken.ErrCursorInvalid))
	// Output:
	// false
	// carol@example.com <nil>
	// true
}
