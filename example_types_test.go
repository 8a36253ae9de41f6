package ctoken_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
)

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

// A fleet shares keys and a session, so any instance verifies what any other
// issued; changing the session revokes every outstanding cursor as expired
// (1020: start over), never as invalid.
func ExampleCursorIssuer_fleet() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		log.Fatal(err)
	}
	instanceA, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("fleet-1")})
	instanceB, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("fleet-1")})
	revoked, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("fleet-2")})

	scope := ctoken.CursorScope{ToolID: "search", CallerID: "user:42"}
	cursor, err := instanceA.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 4})
	if err != nil {
		log.Fatal(err)
	}
	p, err := instanceB.Verify(cursor, scope)
	fmt.Println(p.Page, err)

	_, err = revoked.Verify(cursor, scope)
	fmt.Println(errors.Is(err, ctoken.ErrCursorExpired), ctoken.ErrorCode(err))
	// Output:
	// 4 <nil>
	// true 1020
}

// A signed request state is readable by the client but cannot be changed,
// and opens only with a key of the ring that sealed it.
func ExampleRequestStateCodec_signed() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		log.Fatal(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:    keys,
		Mode:    ctoken.Signed,
		Binding: ctoken.BindSubject,
	})
	if err != nil {
		log.Fatal(err)
	}
	wire, err := codec.Encode("awaiting approval", "alice", "")
	if err != nil {
		log.Fatal(err)
	}
	state, err := codec.Decode(wire, "alice", "")
	fmt.Println(state, err)

	otherKeys, _ := ctoken.NewKeyring(ctoken.RandomKey())
	other, _ := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: otherKeys, Binding: ctoken.BindSubject})
	_, err = other.Decode(wire, "alice", "")
	fmt.Println(errors.Is(err, ctoken.ErrStateInvalid))
	// Output:
	// awaiting approval <nil>
	// true
}

// A cursor bound to a fingerprint of the call's arguments verifies only for
// the same arguments, whatever their key order or spacing; the zero
// Fingerprint leaves the arguments unchecked.
func ExampleFingerprint() {
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey())
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	fp := func(args string) ctoken.Fingerprint {
		f, err := ctoken.ArgsFingerprint([]byte(args))
		if err != nil {
			log.Fatal(err)
		}
		return f
	}
	scope := ctoken.CursorScope{ToolID: "search", CallerID: "user:42", Args: fp(`{"q":"bug","limit":10}`)}
	cursor, err := issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 2})
	if err != nil {
		log.Fatal(err)
	}

	same := scope
	same.Args = fp(`{ "limit": 10, "q": "bug" }`)
	_, err = issuer.Verify(cursor, same)
	fmt.Println("same arguments:", err)

	other := scope
	other.Args = fp(`{"q":"feature","limit":10}`)
	_, err = issuer.Verify(cursor, other)
	fmt.Println("other arguments:", errors.Is(err, ctoken.ErrCursorInvalid))

	// The arguments are inside the cursor's MAC input: a verifier that
	// presents none (a zero Fingerprint) is refused too.
	unchecked := scope
	unchecked.Args = ctoken.Fingerprint{}
	_, err = issuer.Verify(cursor, unchecked)
	fmt.Println("zero Fingerprint:", errors.Is(err, ctoken.ErrCursorInvalid))
	// Output:
	// same arguments: <nil>
	// other arguments: true
	// zero Fingerprint: true
}
