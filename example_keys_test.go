package ctoken_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
)

func ExampleParseKeyring() {
	// Primary first, then previous keys that still verify.
	primary, previous := ctoken.EncodeKey(ctoken.RandomKey()), ctoken.EncodeKey(ctoken.RandomKey())
	keys, err := ctoken.ParseKeyring(primary + "," + previous)
	fmt.Println(keys.Len(), err)

	_, err = ctoken.ParseKeyring("c2hvcnQ")
	fmt.Println(errors.Is(err, ctoken.ErrKeyTooShort))
	// Output:
	// 2 <nil>
	// true
}

func ExampleKeyringFromEnvOrRandom() {
	keys, ephemeral, err := ctoken.KeyringFromEnvOrRandom("CTOKEN_EXAMPLE_UNSET_VARIABLE")
	if err != nil {
		log.Fatal(err) // set but malformed: never a silent random key
	}
	if ephemeral {
		fmt.Println("warning: random key; tokens will not survive a restart")
	}
	fmt.Println(keys.Len())
	// Output:
	// warning: random key; tokens will not survive a restart
	// 1
}

// Rotating a key in two passes: every instance first accepts the new key as
// a previous key, then signs with it while the old one still verifies, and
// finally drops the old one.
func ExampleKeyring() {
	oldKey, newKey := ctoken.RandomKey(), ctoken.RandomKey()
	scope := ctoken.CursorScope{ToolID: "search", CallerID: "user:42"}
	session := []byte("fleet-1")

	issuerWith := func(primary []byte, previous ...[]byte) *ctoken.CursorIssuer {
		keys, err := ctoken.NewKeyring(primary, previous...)
		if err != nil {
			log.Fatal(err)
		}
		issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: session})
		if err != nil {
			log.Fatal(err)
		}
		return issuer
	}

	before := issuerWith(oldKey)           // CTOKEN_KEYS=old
	promoted := issuerWith(newKey, oldKey) // CTOKEN_KEYS=new,old (after old,new everywhere)
	dropped := issuerWith(newKey)          // CTOKEN_KEYS=new
	cursor, err := before.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 1})
	if err != nil {
		log.Fatal(err)
	}

	_, err = promoted.Verify(cursor, scope)
	fmt.Println("old cursor, ring new,old:", err)
	_, err = dropped.Verify(cursor, scope)
	fmt.Println("old cursor, ring new:", errors.Is(err, ctoken.ErrCursorInvalid))
	// Output:
	// old cursor, ring new,old: <nil>
	// old cursor, ring new: true
}
