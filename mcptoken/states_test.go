package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// NewStates refuses a codec that does not bind the tool (the zero Binding,
// ctoken.BindSubject, and ctoken.BindNone) with an error matching both
// ErrTargetUnbound and ctoken.ErrConfig, unless InsecureSkipToolBinding is
// set, which is logged at Warn.
func TestNewStatesRefusesACodecThatDoesNotBindTheTool(t *testing.T) {
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []ctoken.RequestStateMode{ctoken.Signed, ctoken.Encrypted} {
		for _, b := range []ctoken.RequestStateBinding{ctoken.BindSubject, ctoken.BindNone} {
			t.Run(bindingName(b), func(t *testing.T) {
				c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: kr, Mode: mode, Binding: b})
				if err != nil {
					t.Fatal(err)
				}
				var log bytes.Buffer
				s, err := NewStates(c, StatesConfig{}, testIntegration(&log))
				if s != nil || !errors.Is(err, ErrTargetUnbound) || !errors.Is(err, ctoken.ErrConfig) || !strings.Contains(err.Error(), "InsecureSkipToolBinding") {
					t.Fatalf("default: %v, %v; want ErrTargetUnbound and ErrConfig", s, err)
				}
				s, err = NewStates(c, StatesConfig{InsecureSkipToolBinding: true}, testIntegration(&log))
				if err != nil || s == nil {
					t.Fatalf("opt-out: %v", err)
				}
				if got := log.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "InsecureSkipToolBinding") || !strings.Contains(got, "binding="+bindingName(b)) {
					t.Fatalf("opt-out not logged at Warn: %q", got)
				}
			})
		}
	}
	t.Run("BindSubjectAndTool logs nothing", func(t *testing.T) {
		var log bytes.Buffer
		if _, err := NewStates(codec(t, &clock{now: time.Unix(1e9, 0)}, nil), StatesConfig{InsecureSkipToolBinding: true}, testIntegration(&log)); err != nil || log.Len() != 0 {
			t.Fatalf("%v, log %q", err, log.String())
		}
	})
}

// The case: a state sealed by preview_delete with {"id":5} never
// opens for delete_now with {"id":5} under the default configuration.
func TestStatesStateOfOneToolNeverOpensForAnother(t *testing.T) {
	var log bytes.Buffer
	s, err := NewStates(codec(t, &clock{now: time.Unix(1e9, 0)}, nil), StatesConfig{}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	args := []byte(`{"id":5}`)
	wire, err := s.Seal("alice", "tools/call", "preview_delete", args, `{"confirmed":true}`)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Open(context.Background(), "alice", "tools/call", "delete_now", args, wire)
	var re *refusedErr
	if plain != "" || !errors.As(err, &re) || re.r.Code != CodeStateInvalid {
		t.Fatalf("delete_now opened preview_delete's state: %q, %v", plain, err)
	}
}

// NewStates refuses a codec not made by ctoken.NewRequestStateCodec: it
// has no key, and would misreport every request at run time.
func TestNewStatesRefusesAKeylessCodec(t *testing.T) {
	var log bytes.Buffer
	s, err := NewStates(&ctoken.RequestStateCodec{}, StatesConfig{InsecureSkipToolBinding: true}, testIntegration(&log))
	if s != nil || !errors.Is(err, ctoken.ErrConfig) || !errors.Is(err, ctoken.ErrNoKey) {
		t.Fatalf("%v, %v; want ErrConfig and ErrNoKey", s, err)
	}
}

// At run time, a codec without a key (reachable only past NewStates) is an
// internal error logged at Error: never a store outage, never an invalid
// state.
func TestStatesOpenWithAKeylessCodecIsAnInternalError(t *testing.T) {
	var log bytes.Buffer
	s := &States{codec: &ctoken.RequestStateCodec{}, in: testIntegration(&log)}
	_, err := s.Open(context.Background(), "alice", "tools/call", "deploy", nil, "v1.e30.AAAA")
	var re *refusedErr
	if !errors.As(err, &re) || !re.r.Internal || re.r.StoreFailed || re.r.Code != 0 || re.r.Message != "internal error" {
		t.Fatalf("%v (%+v); want an Internal refusal", err, re)
	}
	if got := log.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "has no key") || strings.Contains(got, "store") {
		t.Fatalf("log %q", got)
	}
}

// No refusal consumes a single-use state: refused for its caller, its tool,
// its arguments or its audience, it then opens for the right request
// exactly once (replay.MemoryStore; redisstore and pgstore run
// replaytest.RunRequestStateContract, the same rule on the codec's
// DecodeCheckedContext that Open calls, against real servers).
func TestStatesOpenNoRefusalConsumesASingleUseState(t *testing.T) {
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []ctoken.RequestStateMode{ctoken.Signed, ctoken.Encrypted} {
		store := replay.NewMemoryStore(64)
		states := func(aud string) *States {
			c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: kr, Mode: mode, Binding: ctoken.BindSubjectAndTool, Audience: aud, Replay: store})
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			s, err := NewStates(c, StatesConfig{}, testIntegration(&log))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		a, b := states("server-a"), states("server-b")
		args := []byte(`{"id":5}`)
		wire, err := a.Seal("alice", "tools/call", "preview_delete", args, "confirm?")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, r := range []struct {
			name, caller, tool string
			s                  *States
			args               []byte
		}{
			{"caller", "mallory", "preview_delete", a, args},
			{"tool", "alice", "delete_now", a, args},
			{"arguments", "alice", "preview_delete", a, []byte(`{"id":6}`)},
			{"audience", "alice", "preview_delete", b, args},
		} {
			t.Run(r.name, func(t *testing.T) {
				plain, err := r.s.Open(ctx, r.caller, "tools/call", r.tool, r.args, wire)
				var re *refusedErr
				if plain != "" || !errors.As(err, &re) || re.r.Code != CodeStateInvalid {
					t.Fatalf("%q, %v; want a 1023 refusal", plain, err)
				}
				if store.Len() != 0 {
					t.Fatal("the refused state was claimed")
				}
			})
		}
		if plain, err := a.Open(ctx, "alice", "tools/call", "preview_delete", args, wire); err != nil || plain != "confirm?" {
			t.Fatalf("mode %d: the right request after the refusals: %q, %v", mode, plain, err)
		}
		var re *refusedErr
		if _, err := a.Open(ctx, "alice", "tools/call", "preview_delete", args, wire); !errors.As(err, &re) || re.r.Reason != "already used" {
			t.Fatalf("mode %d: second right request: %v; want already used", mode, err)
		}
	}
}
