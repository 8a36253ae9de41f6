package replaytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// errOtherArgs is the contract's refusal of a state presented with other
// arguments.
var errOtherArgs = errors.New("replaytest: other arguments")

// RunRequestStateContract checks that a single-use request state
// (ctoken.RequestStateSecurity.Replay set to a store from newStore) is
// never consumed by a refusal. A state sealed for a caller and a tool, with
// the call's arguments inside it (as package mcptoken seals them), is
// presented through ctoken.RequestStateCodec.DecodeCheckedContext (what
// mcptoken.States.Open calls) first for another caller, another tool,
// other arguments (refused by the check) and, through a codec with another
// Audience sharing the store, another audience; it is refused each time,
// and then opens for the right request exactly once. It runs in both modes
// (signed and encrypted), each on a store from newStore.
func RunRequestStateContract(t *testing.T, newStore func(t *testing.T) replay.Store) {
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name string
		mode ctoken.RequestStateMode
	}{{"signed", ctoken.Signed}, {"encrypted", ctoken.Encrypted}} {
		t.Run(m.name, func(t *testing.T) {
			store := newStore(t)
			codec := func(aud string) *ctoken.RequestStateCodec {
				c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
					Keys: kr, Mode: m.mode, Binding: ctoken.BindSubjectAndTool, Audience: aud, Replay: store, TTL: time.Minute,
				})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			a, b := codec("server-a"), codec("server-b")
			// A unique state: a signed encoding is deterministic, and a
			// store shared between runs must not have seen this one.
			nonce := time.Now().Format(time.RFC3339Nano)
			sealedArgs := `{"id":5}`
			args := func(want string) func(string) (string, error) {
				return func(s string) (string, error) {
					if s != want+" "+nonce {
						return "", errOtherArgs
					}
					return "confirmed", nil
				}
			}
			preview, deleteNow := ctoken.MCPTarget("tools/call", "preview_delete"), ctoken.MCPTarget("tools/call", "delete_now")
			wire, err := a.Encode(sealedArgs+" "+nonce, "alice", preview)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, r := range []struct {
				name, caller, tool string
				c                  *ctoken.RequestStateCodec
				args               string
			}{
				{"caller", "mallory", preview, a, sealedArgs},
				{"tool", "alice", deleteNow, a, sealedArgs},
				{"arguments", "alice", preview, a, `{"id":6}`},
				{"audience", "alice", preview, b, sealedArgs},
			} {
				plain, err := r.c.DecodeCheckedContext(ctx, wire, r.caller, r.tool, args(r.args))
				if plain != "" || !errors.Is(err, ctoken.ErrStateInvalid) {
					t.Fatalf("%s: %q, %v; want ctoken.ErrStateInvalid", r.name, plain, err)
				}
			}
			if plain, err := a.DecodeCheckedContext(ctx, wire, "alice", preview, args(sealedArgs)); err != nil || plain != "confirmed" {
				t.Fatalf("the right request after four refusals: %q, %v; a refusal consumed the state", plain, err)
			}
			if _, err := a.DecodeCheckedContext(ctx, wire, "alice", preview, args(sealedArgs)); !errors.Is(err, ctoken.ErrStateReplayed) {
				t.Fatalf("the right request again: %v; want ctoken.ErrStateReplayed", err)
			}
		})
	}
}
