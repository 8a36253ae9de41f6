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

func TestStates(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"new states refuses a codec that does not bind the tool", newStatesRefusesACodecThatDoesNotBindTheTool},
		{"state of one tool never opens for another", statesStateOfOneToolNeverOpensForAnother},
		{"new states refuses a keyless codec", newStatesRefusesAKeylessCodec},
		{"open with a keyless codec is an internal error", statesOpenWithAKeylessCodecIsAnInternalError},
		{"open no refusal consumes a single-use state", statesOpenNoRefusalConsumesASingleUseState},
		{"seal open and refuse", statesSealOpenAndRefuse},
		{"unbound states seal state as is", unboundStatesSealStateAsIs},
		{"seal result refuses sealed state", sealResultRefusesSealedState},
		{"check target binding refuses a codec that does not bind the tool", checkTargetBindingRefusesACodecThatDoesNotBindTheTool},
		{"seal refuses arguments that cannot be fingerprinted", sealRefusesArgumentsThatCannotBeFingerprinted},
		{"zero value refuses", statesZeroValueRefuses},
	} {
		t.Run(tc.name, tc.test)
	}
}

// NewStates refuses a codec that does not bind the tool (ctoken.BindSubject
// and ctoken.BindNone) with an error matching both
// ErrTargetUnbound and ctoken.ErrConfig, unless InsecureSkipToolBinding is
// set, which is logged at Warn.
func newStatesRefusesACodecThatDoesNotBindTheTool(t *testing.T) {
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
func statesStateOfOneToolNeverOpensForAnother(t *testing.T) {
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
func newStatesRefusesAKeylessCodec(t *testing.T) {
	var log bytes.Buffer
	s, err := NewStates(&ctoken.RequestStateCodec{}, StatesConfig{InsecureSkipToolBinding: true}, testIntegration(&log))
	if s != nil || !errors.Is(err, ctoken.ErrConfig) || !errors.Is(err, ctoken.ErrNoKey) {
		t.Fatalf("%v, %v; want ErrConfig and ErrNoKey", s, err)
	}
}

// At run time, a codec without a key (reachable only past NewStates) is an
// internal error logged at Error: never a store outage, never an invalid
// state.
func statesOpenWithAKeylessCodecIsAnInternalError(t *testing.T) {
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
func statesOpenNoRefusalConsumesASingleUseState(t *testing.T) {
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

// States seal and open bound to caller, target and arguments; a refusal is
// the integration's Refused error, a store failure is marked StoreFailed.
func statesSealOpenAndRefuse(t *testing.T) {
	var log bytes.Buffer
	clk := &clock{now: time.Unix(1e9, 0)}
	s, err := NewStates(codec(t, clk, nil), StatesConfig{}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "step1")
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := s.Open(ctx, "alice", "tools/call", "deploy", args, wire); err != nil || plain != "step1" {
		t.Fatalf("open: %q, %v", plain, err)
	}
	for _, tc := range []struct {
		name, caller, method, tool string
		args                       []byte
		reason                     string
	}{
		{"other arguments", "alice", "tools/call", "deploy", []byte(`{"target":"dev"}`), "arguments differ from the sealed call"},
		{"other caller", "bob", "tools/call", "deploy", args, "bound to another subject or tool"},
		{"other tool", "alice", "tools/call", "rollback", args, "bound to another subject or tool"},
		{"other method", "alice", "prompts/get", "deploy", args, "bound to another subject or tool"},
	} {
		_, err := s.Open(ctx, tc.caller, tc.method, tc.tool, tc.args, wire)
		var re *refusedErr
		if !errors.As(err, &re) || re.r.Code != CodeStateInvalid || !strings.Contains(re.r.Reason, tc.reason) {
			t.Errorf("%s: %v (reason %q)", tc.name, err, re.r.Reason)
		}
	}
	if !strings.Contains(log.String(), `test: request state rejected" prompt=deploy`) {
		t.Errorf("log does not name the prompt: %q", log.String())
	}
	clk.now = clk.now.Add(time.Hour)
	var re *refusedErr
	if _, err := s.Open(ctx, "alice", "tools/call", "deploy", args, wire); !errors.As(err, &re) || re.r.Code != CodeStateExpired {
		t.Errorf("expired: %v", err)
	}
	// A single-use codec whose store cannot answer: StoreFailed, logged.
	down, err := NewStates(codec(t, clk, failingStore{}), StatesConfig{}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	wire, _ = down.Seal("alice", "tools/call", "deploy", args, "step1")
	if _, err := down.Open(ctx, "alice", "tools/call", "deploy", args, wire); !errors.As(err, &re) || !re.r.StoreFailed {
		t.Errorf("store failure: %v", err)
	}
	if !strings.Contains(log.String(), "request state store failed") || !strings.Contains(log.String(), "store down") {
		t.Errorf("log %q", log.String())
	}
}

// Unbound states seal the application's state as is.
func unboundStatesSealStateAsIs(t *testing.T) {
	var log bytes.Buffer
	c := codec(t, &clock{now: time.Unix(1e9, 0)}, nil)
	s, err := NewStates(c, StatesConfig{UnboundArgs: true}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	wire, err := s.Seal("alice", "tools/call", "ask", []byte(`{"x":1}`), "round1")
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := c.Decode(wire, "alice", ctoken.MCPTarget("tools/call", "ask")); err != nil || plain != "round1" {
		t.Errorf("sealed %q, %v", plain, err)
	}
	if plain, err := s.Open(context.Background(), "alice", "tools/call", "ask", []byte(`{"x":2}`), wire); err != nil || plain != "round1" {
		t.Errorf("unbound open with other arguments: %q, %v", plain, err)
	}
}

// SealResult refuses a state that is already sealed (or looks it) and logs
// every failure to seal.
func sealResultRefusesSealedState(t *testing.T) {
	var log bytes.Buffer
	s, err := NewStates(codec(t, &clock{now: time.Unix(1e9, 0)}, nil), StatesConfig{}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, st := range []string{"v1.abc", "v1e.abc"} {
		if _, err := s.SealResult(ctx, "alice", "tools/call", "ask", nil, st); !errors.Is(err, ErrAlreadySealed) {
			t.Errorf("%q: %v", st, err)
		}
	}
	if !strings.Contains(log.String(), "refusing to seal it twice") {
		t.Errorf("log %q", log.String())
	}
	if _, err := s.SealResult(ctx, "alice", "tools/call", "ask", nil, "\xff"); !errors.Is(err, ctoken.ErrUnencodable) || !strings.Contains(log.String(), "sealing requestState failed") {
		t.Errorf("invalid UTF-8: %v; log %q", err, log.String())
	}
	if wire, err := s.SealResult(ctx, "alice", "tools/call", "ask", nil, "v2 plain"); err != nil || !LooksSealed(wire) {
		t.Errorf("plain state: %q, %v", wire, err)
	}
}

// CheckTargetBinding accepts only a codec that refuses a state of one tool
// for another. A refusal for another reason (a single-use codec's store
// failing, or reporting the probe as used) says nothing about the binding
// and is no pass: the probe of ctokenmcp took any error as one, so a
// BindSubject codec got through when its store failed or when it was
// probed twice in one second (signed encoding is deterministic).
func checkTargetBindingRefusesACodecThatDoesNotBindTheTool(t *testing.T) {
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	newCodec := func(b ctoken.RequestStateBinding, mode ctoken.RequestStateMode, store replay.Store) *ctoken.RequestStateCodec {
		c, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: kr, Binding: b, Mode: mode, Replay: store})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, mode := range []ctoken.RequestStateMode{ctoken.Signed, ctoken.Encrypted} {
		for _, b := range []ctoken.RequestStateBinding{ctoken.BindSubject, ctoken.BindNone} {
			for name, store := range map[string]replay.Store{"reusable": nil, "store down": failingStore{}} {
				if err := CheckTargetBinding(newCodec(b, mode, store)); !errors.Is(err, ErrTargetUnbound) {
					t.Errorf("mode %d, binding %d, %s: %v, want ErrTargetUnbound", mode, b, name, err)
				}
			}
			once := newCodec(b, mode, replay.NewMemoryStore(16))
			for i := range 2 {
				if err := CheckTargetBinding(once); !errors.Is(err, ErrTargetUnbound) {
					t.Errorf("mode %d, binding %d, single-use, probe %d: %v, want ErrTargetUnbound", mode, b, i, err)
				}
			}
		}
		// The tool binding passes, and its probe never reaches the store.
		if err := CheckTargetBinding(newCodec(ctoken.BindSubjectAndTool, mode, failingStore{})); err != nil {
			t.Errorf("mode %d, BindSubjectAndTool: %v", mode, err)
		}
	}
	if err := CheckTargetBinding(nil); err == nil {
		t.Error("nil codec accepted")
	}
	if err := CheckTargetBinding(new(ctoken.RequestStateCodec)); err == nil || errors.Is(err, ErrTargetUnbound) {
		t.Errorf("zero codec: %v, want the codec's error", err)
	}
}

// FuzzStatesOpen: no wire, caller or arguments panics Open, a refusal
// returns no state, and only the state sealed for alice, deploy and its
// arguments opens, for those arguments (in any spelling) and no others.
func FuzzStatesOpen(f *testing.F) {
	var log bytes.Buffer
	s, err := NewStates(codec(f, &clock{now: time.Unix(1e9, 0)}, nil), StatesConfig{}, testIntegration(&log))
	if err != nil {
		f.Fatal(err)
	}
	const sealedArgs = `{"target":"prod"}`
	wire, err := s.Seal("alice", "tools/call", "deploy", []byte(sealedArgs), "step1")
	if err != nil {
		f.Fatal(err)
	}
	want, _ := ctoken.ArgsFingerprint([]byte(sealedArgs))
	f.Add(wire, "alice", sealedArgs)
	f.Add(wire, "alice", ` { "target" : "prod" } `)
	f.Add(wire, "bob", sealedArgs)
	f.Add(wire, "", sealedArgs)
	f.Add(retail(wire), "alice", sealedArgs)
	f.Add("v1.", "alice", "")
	f.Fuzz(func(t *testing.T, wire, caller, args string) {
		log.Reset()
		plain, err := s.Open(context.Background(), caller, "tools/call", "deploy", []byte(args), wire)
		if err != nil {
			if plain != "" {
				t.Fatalf("refusal returned %q", plain)
			}
			var re *refusedErr
			if err != errTestNoCaller && (!errors.As(err, &re) || !KnownCode(re.r.Code)) {
				t.Fatalf("refusal %v is neither NoCaller nor a coded refusal", err)
			}
			return
		}
		fp, ferr := ctoken.ArgsFingerprint([]byte(args))
		if plain != "step1" || caller != "alice" || ferr != nil || fp != want {
			t.Fatalf("opened %q for caller %q and arguments %q", plain, caller, args)
		}
	})
}

// Seal refuses arguments it cannot fingerprint (malformed JSON text, a Go
// value encoding/json cannot encode) and seals nothing; unbound States do
// not look at the arguments.
func sealRefusesArgumentsThatCannotBeFingerprinted(t *testing.T) {
	var log bytes.Buffer
	c := codec(t, &clock{now: time.Unix(1e9, 0)}, nil)
	s, err := NewStates(c, StatesConfig{}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string]any{"malformed JSON": []byte(`{"target":`), "func": func() {}, "inexact number": []byte(`{"n":12345678901234567890}`)} {
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "step1")
		if err == nil || wire != "" || !strings.HasPrefix(err.Error(), "test: fingerprinting arguments") {
			t.Errorf("%s: %q, %v", name, wire, err)
		}
	}
	unbound, err := NewStates(c, StatesConfig{UnboundArgs: true}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unbound.Seal("alice", "tools/call", "deploy", []byte(`{"target":`), "step1"); err != nil {
		t.Errorf("unbound: %v", err)
	}
}

// A zero or nil States (not made by NewStates) refuses Seal, Open and
// SealResult with an error, as its Answer does, and never panics.
func statesZeroValueRefuses(t *testing.T) {
	ctx := context.Background()
	var nilStates *States
	for _, tc := range []struct {
		name string
		s    *States
	}{{"zero", new(States)}, {"nil", nilStates}} {
		t.Run(tc.name, func(t *testing.T) {
			if wire, err := tc.s.Seal("alice", "tools/call", "deploy", nil, "s"); err == nil || wire != "" {
				t.Fatalf("Seal = %q, %v", wire, err)
			}
			if plain, err := tc.s.Open(ctx, "alice", "tools/call", "deploy", nil, "v1.x"); err == nil || plain != "" {
				t.Fatalf("Open = %q, %v", plain, err)
			}
			if wire, err := tc.s.SealResult(ctx, "alice", "tools/call", "deploy", nil, "s"); err == nil || wire != "" {
				t.Fatalf("SealResult = %q, %v", wire, err)
			}
			if tc.s.Integration() != nil || tc.s.Codec() != nil {
				t.Fatal("a States not made by NewStates has an Integration or a codec")
			}
		})
	}
}
