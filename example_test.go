package ctoken_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
)

func ExampleCursorIssuer() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
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
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey())
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

func ExampleRequestStateCodec() {
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey())
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:    keys,
		Mode:    ctoken.Encrypted,
		Binding: ctoken.BindSubjectAndTool,
	})
	if err != nil {
		log.Fatal(err)
	}
	tool := ctoken.MCPTarget("tools/call", "deploy")
	wire, err := codec.Encode(`{"step":2}`, "alice", tool)
	if err != nil {
		log.Fatal(err)
	}
	state, err := codec.Decode(wire, "alice", tool)
	fmt.Println(state, err)

	_, err = codec.Decode(wire, "mallory", tool)
	fmt.Println(errors.Is(err, ctoken.ErrStateInvalid))
	// Output:
	// {"step":2} <nil>
	// true
}

func ExampleEncodeJSON() {
	// One process only: a random key, asked for explicitly. A fleet shares
	// its keys (ctoken.KeyringFromEnv).
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey())
	codec, _ := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Binding: ctoken.BindSubject})
	type pending struct {
		Question string `json:"q"`
	}
	wire, _ := ctoken.EncodeJSON(codec, pending{Question: "which branch?"}, "alice", "")
	p, err := ctoken.DecodeJSON[pending](codec, wire, "alice", "")
	fmt.Println(p.Question, err)
	// Output: which branch? <nil>
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

func ExampleErrorCode() {
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey())
	before, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	scope := ctoken.CursorScope{ToolID: "search", CallerID: "u"}
	cursor, _ := before.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 3})

	after, _ := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys}) // a restart: new session
	_, err := after.Verify(cursor, scope)
	fmt.Println(ctoken.ErrorCode(err), ctoken.Reason(err))
	// Output: 1020 other server session
}
