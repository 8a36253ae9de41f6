package ctoken_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// Single-use request state: with a replay store configured, a state is
// accepted once; a replayed copy is refused. The memory store holds for one
// process; a fleet gives a shared store (redisstore, pgstore), one machine
// a durable one (sqlitestore).
func ExampleRequestStateCodec_DecodeContext() {
	// A fixed test key, for a reproducible example; in production the
	// fleet's ring comes from ctoken.KeyringFromEnv.
	keys, err := ctoken.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys:    keys,
		Mode:    ctoken.Encrypted,
		Replay:  replay.NewMemoryStore(0),
		Binding: ctoken.BindSubject,
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
