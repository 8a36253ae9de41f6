package ctoken_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
)

func ExampleRequestStateCodec() {
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
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
	keys, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	codec, _ := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Binding: ctoken.BindSubject})
	type pending struct {
		Question string `json:"q"`
	}
	wire, _ := ctoken.EncodeJSON(codec, pending{Question: "which branch?"}, "alice", "")
	p, err := ctoken.DecodeJSON[pending](codec, wire, "alice", "")
	fmt.Println(p.Question, err)
	// Output: which branch? <nil>
}

// A signed request state is readable by the client but cannot be changed,
// and opens only with a key of the ring that sealed it.
func ExampleRequestStateCodec_signed() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
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

	otherKeys, _ := ctoken.NewKeyring(ctoken.RandomKey()) // random: another server's keys
	other, _ := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: otherKeys, Binding: ctoken.BindSubject})
	_, err = other.Decode(wire, "alice", "")
	fmt.Println(errors.Is(err, ctoken.ErrStateInvalid))
	// Output:
	// awaiting approval <nil>
	// true
}
