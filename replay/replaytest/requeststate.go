package replaytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
)

// RunRequestStateContract checks that a single-use request state
// (ctoken.RequestStateSecurity.Replay set to a store from newStore) is
// never consumed by a refusal: sealed through [mcptoken.States] for a
// caller, a tool and arguments, and presented first for another caller,
// another tool, other arguments and (through a codec with another
// Audience sharing the store) another audience, it is refused each time and
// then opens for the right request exactly once. It runs in both modes
// (signed and encrypted), each on a fresh store.
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
			states := func(aud string) *mcptoken.States {
				c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
					Keys: kr, Mode: m.mode, Binding: ctoken.BindSubjectAndTool, Audience: aud, Replay: store, TTL: time.Minute,
				})
				if err != nil {
					t.Fatal(err)
				}
				s, err := mcptoken.NewStates(c, mcptoken.StatesConfig{}, contractIntegration)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			a, b := states("server-a"), states("server-b")
			args := []byte(`{"id":5}`)
			// A unique state: a signed encoding is deterministic, and a
			// store shared between runs must not see this one before.
			state := "confirm " + time.Now().Format(time.RFC3339Nano)
			wire, err := a.Seal("alice", "tools/call", "preview_delete", args, state)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, r := range []struct {
				name, caller, tool string
				s                  *mcptoken.States
				args               []byte
			}{
				{"caller", "mallory", "preview_delete", a, args},
				{"tool", "alice", "delete_now", a, args},
				{"arguments", "alice", "preview_delete", a, []byte(`{"id":6}`)},
				{"audience", "alice", "preview_delete", b, args},
			} {
				plain, err := r.s.Open(ctx, r.caller, "tools/call", r.tool, r.args, wire)
				var re *contractRefusal
				if plain != "" || !errors.As(err, &re) || re.r.Code != mcptoken.CodeStateInvalid {
					t.Fatalf("%s: %q, %v; want a refusal with code %d", r.name, plain, err, mcptoken.CodeStateInvalid)
				}
			}
			if plain, err := a.Open(ctx, "alice", "tools/call", "preview_delete", args, wire); err != nil || plain != state {
				t.Fatalf("the right request after four refusals: %q, %v; a refusal consumed the state", plain, err)
			}
			var re *contractRefusal
			if _, err := a.Open(ctx, "alice", "tools/call", "preview_delete", args, wire); !errors.As(err, &re) || re.r.Reason != "already used" {
				t.Fatalf("the right request again: %v; want already used", err)
			}
		})
	}
}

// contractRefusal is the error the contract's integration returns for a
// refusal.
type contractRefusal struct{ r mcptoken.Refusal }

func (e *contractRefusal) Error() string { return e.r.Message }

var contractIntegration = &mcptoken.Integration{
	Name:     "replaytest",
	NoCaller: func() error { return errors.New("replaytest: no caller") },
	Refused:  func(r mcptoken.Refusal) error { return &contractRefusal{r} },
}
