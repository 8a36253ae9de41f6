package ctoken_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// A one-time bootstrap token: minted for one agent run, exchanged once.
func ExampleOneTimeIssuer() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		panic(err)
	}
	tokens, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys})
	if err != nil {
		panic(err)
	}
	claims := map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_1"}
	tok, err := tokens.Mint(claims)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	err = tokens.Redeem(ctx, tok, map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_2"})
	fmt.Println(errors.Is(err, ctoken.ErrOneTimeClaims))
	fmt.Println(tokens.Redeem(ctx, tok, claims))
	err = tokens.Redeem(ctx, tok, claims)
	fmt.Println(errors.Is(err, ctoken.ErrOneTimeRedeemed))
	// Output:
	// true
	// <nil>
	// true
}

// Single-use request state: with a replay store configured, a state is
// accepted once; a replayed copy is refused.
func ExampleRequestStateCodec_DecodeContext() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		panic(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:   keys,
		Mode:   ctoken.Encrypted,
		Replay: replay.NewMemoryStore(0),
	})
	if err != nil {
		panic(err)
	}
	wire, err := codec.Encode(`{"step":2}`, "alice", "")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	fmt.Println(codec.DecodeContext(ctx, wire, "alice", ""))
	_, err = codec.DecodeContext(ctx, wire, "alice", "")
	fmt.Println(errors.Is(err, ctoken.ErrStateReplayed))
	// Output:
	// {"step":2} <nil>
	// true
}
