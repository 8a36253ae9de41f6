package ctoken_test

import (
	"errors"
	"fmt"
	"log"
	"slices"

	"github.com/ctoken/ctoken"
)

func ExampleCursorIssuer() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	args, err := ctoken.ArgsFingerprint([]byte(`{"query":"is:open"}`))
	if err != nil {
		log.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: "search_issues", CallerID: "user:42", Args: args}

	cursor, err := issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 2})
	if err != nil {
		log.Fatal(err)
	}
	p, err := issuer.Verify(cursor, scope)
	fmt.Println(p.Page, err)

	_, err = issuer.Verify(cursor, ctoken.CursorScope{ToolID: "search_issues", CallerID: "user:43", Args: args})
	fmt.Println(errors.Is(err, ctoken.ErrCursorInvalid), ctoken.ErrorCode(err))
	// Output:
	// 2 <nil>
	// true 1021
}

func ExampleIssueState() {
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	issuer, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	type position struct {
		After string `cbor:"1,keyasint"`
	}
	scope := ctoken.CursorScope{ToolID: "list_files", CallerID: "user:42"}

	cursor, err := ctoken.IssueState(issuer, scope, 1, position{After: "src/main.go"})
	if err != nil {
		log.Fatal(err)
	}
	pos, _, err := ctoken.VerifyState[position](issuer, cursor, scope)
	fmt.Println(pos.After, err)
	// Output: src/main.go <nil>
}

func ExampleArgsFingerprint() {
	a, _ := ctoken.ArgsFingerprint([]byte(`{"limit": 1.0e2, "q": "bug"}`))
	b, _ := ctoken.ArgsFingerprint(map[string]any{"q": "bug", "limit": 100})
	fmt.Println(a == b)
	// Output: true
}

func ExampleCanonicalJSON() {
	out, _ := ctoken.CanonicalJSON([]byte(`{ "b": [1.0e2, -0.0], "a": "\u00e9" }`))
	fmt.Println(string(out))
	// Output: {"a":"é","b":[100,0]}
}

func ExampleErrorCode() {
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	before, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	scope := ctoken.CursorScope{ToolID: "search", CallerID: "u"}
	cursor, _ := before.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 3})

	after, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys}) // a restart: new session
	_, err := after.Verify(cursor, scope)
	fmt.Println(ctoken.ErrorCode(err), ctoken.Reason(err))
	// Output: 1020 other server session
}

// A fleet shares keys and a session, so any instance verifies what any other
// issued; changing the session revokes every outstanding cursor as expired
// (1020: start over), never as invalid.
func ExampleCursorIssuer_fleet() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
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

// A cursor bound to a fingerprint of the call's arguments verifies only for
// the same arguments, whatever their key order or spacing; the zero
// Fingerprint leaves the arguments unchecked.
func ExampleFingerprint() {
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
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

// A keyset listing: each page ends on a sort key, and the next cursor
// carries it. The scope binds the cursor to the endpoint, the caller and
// the filter; the page size is not bound, so the client may change it.
func ExampleIssueKeyset() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	ids := []int64{3, 8, 15, 16, 23, 42, 57} // sorted, as an index returns them
	filter, err := ctoken.ArgsFingerprint(map[string]string{"status": "open"})
	if err != nil {
		log.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: "GET /v1/items", CallerID: "user:42", Args: filter}

	cursor := "" // the first page has none
	for {
		after := int64(-1)
		if cursor != "" {
			if after, err = ctoken.VerifyKeyset[int64](issuer, cursor, scope); err != nil {
				log.Fatal(err) // answer with ctoken.CursorHTTPStatus(err)
			}
		}
		// WHERE id > after ORDER BY id LIMIT 3
		start, _ := slices.BinarySearch(ids, after+1)
		page := ids[start:min(start+3, len(ids))]
		fmt.Println(page)
		if start+len(page) == len(ids) {
			break
		}
		if cursor, err = ctoken.IssueKeyset(issuer, scope, page[len(page)-1]); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// [3 8 15]
	// [16 23 42]
	// [57]
}

func ExampleCursorHTTPStatus() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: "GET /v1/items", CallerID: "user:42"}
	cursor, err := ctoken.IssueKeyset(issuer, scope, "item-0042")
	if err != nil {
		log.Fatal(err)
	}
	_, err = ctoken.VerifyKeyset[string](issuer, cursor, scope)
	fmt.Println(ctoken.CursorHTTPStatus(err))

	restarted, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys}) // a new random session
	if err != nil {
		log.Fatal(err)
	}
	_, err = ctoken.VerifyKeyset[string](restarted, cursor, scope)
	fmt.Println(ctoken.CursorHTTPStatus(err), ctoken.Reason(err)) // the reason is for the server's log

	scope.CallerID = "user:43"
	_, err = ctoken.VerifyKeyset[string](issuer, cursor, scope)
	fmt.Println(ctoken.CursorHTTPStatus(err), ctoken.Reason(err))
	// Output:
	// 200
	// 410 other server session
	// 400 forged or wrong scope (tool, caller or arguments)
}
