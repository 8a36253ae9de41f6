package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// refusedErr is the error the test integration sends for a refusal.
type refusedErr struct{ r Refusal }

func (e *refusedErr) Error() string { return e.r.Message }

var errTestNoCaller = errors.New("test: no caller")

// testIntegration reports through a buffer the test reads.
func testIntegration(log *bytes.Buffer) *Integration {
	return &Integration{
		Name:     "test",
		Log:      slog.New(slog.NewTextHandler(log, nil)),
		NoCaller: func() error { return errTestNoCaller },
		Refused:  func(r Refusal) error { return &refusedErr{r} },
	}
}

func testCursors(t testing.TB, log *bytes.Buffer, c *clock) *Cursors {
	t.Helper()
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: []byte("s1"), TTL: time.Minute, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := NewCursors(issuer, testIntegration(log))
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

func TestConstructorsRefuseNilAndIncompleteIntegration(t *testing.T) {
	var log bytes.Buffer
	in := testIntegration(&log)
	if _, err := NewCursors(nil, in); err == nil || !strings.HasPrefix(err.Error(), "test: NewCursors") {
		t.Errorf("nil issuer: %v", err)
	}
	if _, err := NewStates(nil, StatesConfig{}, in); err == nil || !strings.HasPrefix(err.Error(), "test: NewStates") {
		t.Errorf("nil codec: %v", err)
	}
	c := codec(t, &clock{now: time.Unix(1e9, 0)}, nil)
	for _, bad := range []*Integration{nil, {Name: "x"}, {Name: "x", NoCaller: in.NoCaller}, {Name: "x", Refused: in.Refused}} {
		if _, err := NewStates(c, StatesConfig{}, bad); err == nil {
			t.Errorf("NewStates accepted %+v", bad)
		}
		if _, err := NewCursors(nil, bad); err == nil {
			t.Errorf("NewCursors accepted %+v", bad)
		}
	}
}

// A caller function's failure, or an empty caller, is the integration's
// NoCaller error; the function's own error text goes to the log only.
func TestCallerRefusesAnonymousRequests(t *testing.T) {
	var log bytes.Buffer
	in := testIntegration(&log)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		id   string
		err  error
	}{
		{"empty", "", nil},
		{"error", "alice", errors.New("directory unreachable")},
	} {
		if _, err := in.Caller(ctx, tc.id, tc.err); err != errTestNoCaller {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if !strings.Contains(log.String(), "test: no authenticated caller") || !strings.Contains(log.String(), "directory unreachable") {
		t.Errorf("log %q", log.String())
	}
	if id, err := in.Caller(ctx, "alice", nil); id != "alice" || err != nil {
		t.Errorf("alice: %q, %v", id, err)
	}
}

// A page turn fingerprints the arguments once: Turn keeps the scope and
// Turn.Next issues the next cursor with it.
func TestTurnCarriesScopeToNext(t *testing.T) {
	var log bytes.Buffer
	c := testCursors(t, &log, &clock{now: time.Unix(1e9, 0)})
	ctx := context.Background()
	args := map[string]any{"q": "red"}
	scope, err := c.Scope("alice", "search", args)
	if err != nil {
		t.Fatal(err)
	}
	if scope.ToolID != ctoken.MCPTarget("tools/call", "search") || scope.CallerID != "alice" || scope.Args == (ctoken.Fingerprint{}) {
		t.Fatalf("scope %+v", scope)
	}
	first, err := c.Turn(ctx, scope, "search", "")
	if err != nil || first.Payload.Page != 0 || first.Payload.State != nil {
		t.Fatalf("first page: %+v, %v", first.Payload, err)
	}
	cursor, err := first.Next(1, []byte("after:red-9"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Turn(ctx, scope, "search", cursor)
	if err != nil || second.Payload.Page != 1 || string(second.Payload.State) != "after:red-9" {
		t.Fatalf("second page: %+v, %v", second.Payload, err)
	}
	// Next on Cursors issues the same binding from a scope.
	again, err := c.Next(scope, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Turn(ctx, scope, "search", again); err != nil || p.Payload.Page != 2 {
		t.Errorf("Cursors.Next: %+v, %v", p.Payload, err)
	}
	if _, err := (Turn{}).Next(1, nil); err == nil {
		t.Error("the zero Turn issued a cursor")
	}
}

// Nil arguments are not bound: the scope's fingerprint is zero.
func TestScopeOfNilArgumentsIsUnbound(t *testing.T) {
	var log bytes.Buffer
	c := testCursors(t, &log, &clock{now: time.Unix(1e9, 0)})
	scope, err := c.Scope("alice", "search", nil)
	if err != nil || scope.Args != (ctoken.Fingerprint{}) {
		t.Errorf("scope %+v, %v", scope, err)
	}
	if _, err := c.Scope("alice", "search", func() {}); err == nil || !strings.HasPrefix(err.Error(), "test: fingerprinting arguments") {
		t.Errorf("unencodable arguments: %v", err)
	}
}

// A refused cursor is the integration's Refused error for RefuseCursor of
// it, logged with the tool and the reason but never the cursor.
func TestTurnRefusesCursorOfOtherScopeOrExpired(t *testing.T) {
	var log bytes.Buffer
	clk := &clock{now: time.Unix(1e9, 0)}
	c := testCursors(t, &log, clk)
	ctx := context.Background()
	scope, _ := c.Scope("alice", "search", map[string]any{"q": "red"})
	cursor, err := c.Next(scope, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	bob, _ := c.Scope("bob", "search", map[string]any{"q": "red"})
	other, _ := c.Scope("alice", "search", map[string]any{"q": "blue"})
	for _, tc := range []struct {
		name  string
		scope ctoken.CursorScope
		wire  string
		code  int
	}{
		{"other caller", bob, cursor, ctoken.CodeCursorInvalid},
		{"other arguments", other, cursor, ctoken.CodeCursorInvalid},
		{"garbage", scope, "not-a-cursor", ctoken.CodeCursorInvalid},
	} {
		turn, err := c.Turn(ctx, tc.scope, "search", tc.wire)
		var re *refusedErr
		if !errors.As(err, &re) || re.r.Code != tc.code || turn.Payload.Page != 0 {
			t.Errorf("%s: %v, %+v", tc.name, err, turn.Payload)
		}
		if _, err := turn.Next(2, nil); err == nil {
			t.Errorf("%s: a refused Turn issued a cursor", tc.name)
		}
	}
	clk.now = clk.now.Add(time.Hour)
	var re *refusedErr
	if _, err := c.Turn(ctx, scope, "search", cursor); !errors.As(err, &re) || re.r.Code != ctoken.CodeCursorExpired {
		t.Errorf("expired: %v", err)
	}
	logged := log.String()
	if !strings.Contains(logged, `test: cursor rejected" tool=search reason=`) || strings.Contains(logged, cursor[:16]) {
		t.Errorf("log %q", logged)
	}
}

// States seal and open bound to caller, target and arguments; a refusal is
// the integration's Refused error, a store failure is marked StoreFailed.
func TestStatesSealOpenAndRefuse(t *testing.T) {
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
func TestUnboundStatesSealStateAsIs(t *testing.T) {
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
func TestSealResultRefusesSealedState(t *testing.T) {
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

// CannotAnswer lists only the required capabilities the client lacks, and
// its message says what the server saw.
func TestCannotAnswerSaysWhatTheServerSaw(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  string
		declared *Declared
		needs    []string
		required []string // nil: no refusal
		say      []string
		notSay   []string
	}{
		{"declared it", "2025-11-25", &Declared{Elicitation: true}, []string{CapElicitation}, nil, nil, nil},
		{"declared none", "2025-11-25", &Declared{Roots: true}, []string{CapElicitation},
			[]string{CapElicitation},
			[]string{"needs the elicitation capability", "(MCP 2025-11-25) declared no elicitation capability", "MCP 2026-07-28"},
			[]string{"stateless", "roots"}},
		{"no declaration seen", "2025-11-25", nil, []string{CapElicitation, CapElicitation},
			[]string{CapElicitation},
			[]string{"over stateless HTTP the server cannot see a declaration", "(MCP 2025-11-25)", "on a stateful connection"},
			[]string{"declared no"}},
		{"two missing, sorted once", "", &Declared{Elicitation: true}, []string{CapSampling, CapRoots, CapElicitation, CapSampling},
			[]string{CapRoots, CapSampling},
			[]string{"needs the roots and sampling capabilities", "of an unknown version", "declared no roots or sampling capability"},
			[]string{"elicitation"}},
		{"nothing needed", "2025-11-25", nil, nil, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CannotAnswer(tc.version, tc.declared, tc.needs...)
			if tc.required == nil {
				if r != nil {
					t.Fatalf("refused: %v", r)
				}
				return
			}
			if r == nil || strings.Join(r.Required, ",") != strings.Join(tc.required, ",") {
				t.Fatalf("refusal %+v, want required %v", r, tc.required)
			}
			msg := r.Error()
			if !errors.Is(r, ErrClientCannotAnswer) || !strings.HasPrefix(msg, ErrClientCannotAnswer.Error()+": ") {
				t.Errorf("not ErrClientCannotAnswer: %q", msg)
			}
			for _, s := range tc.say {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q: %q", s, msg)
				}
			}
			for _, s := range tc.notSay {
				if strings.Contains(msg, s) {
					t.Errorf("message says %q: %q", s, msg)
				}
			}
		})
	}
}

// The -32021 data lists exactly the required capabilities.
func TestInputRefusalDataListsOnlyRequired(t *testing.T) {
	for _, tc := range []struct {
		needs []string
		want  string
	}{
		{[]string{CapElicitation}, `{"requiredCapabilities":{"elicitation":{}}}`},
		{[]string{CapSampling, CapElicitation}, `{"requiredCapabilities":{"elicitation":{},"sampling":{}}}`},
	} {
		if got := string(CannotAnswer("2025-11-25", nil, tc.needs...).Data()); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.needs, got, tc.want)
		}
	}
}

func TestSpeaksInputRequestsFromTheVersionOn(t *testing.T) {
	for v, want := range map[string]bool{"": false, "2025-06-18": false, "2025-11-25": false, "2026-07-28": true, "2027-01-01": true} {
		if SpeaksInputRequests(v) != want {
			t.Errorf("%q: %v", v, !want)
		}
	}
}

// The core refuses an empty caller handed to it directly (an integration
// that skips Integration.Caller) with NoCaller, logged, instead of issuing or
// accepting a token bound to every unauthenticated request at once.
func TestCoreRefusesAnEmptyCaller(t *testing.T) {
	var log bytes.Buffer
	clk := &clock{now: time.Unix(1e9, 0)}
	c := testCursors(t, &log, clk)
	s, err := NewStates(codec(t, clk, nil), StatesConfig{}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	args := map[string]any{"q": "red"}
	alice, err := c.Scope("alice", "search", args)
	if err != nil {
		t.Fatal(err)
	}
	cursor, err := c.Next(alice, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon := alice
	anon.CallerID = ""
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "step1")
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Scope":           func() error { _, err := c.Scope("", "search", args); return err },
		"Turn first page": func() error { _, err := c.Turn(ctx, anon, "search", ""); return err },
		"Turn":            func() error { _, err := c.Turn(ctx, anon, "search", cursor); return err },
		"Next":            func() error { _, err := c.Next(anon, 1, nil); return err },
		"Seal":            func() error { _, err := s.Seal("", "tools/call", "deploy", args, "x"); return err },
		"SealResult":      func() error { _, err := s.SealResult(ctx, "", "tools/call", "deploy", args, "x"); return err },
		"Open":            func() error { _, err := s.Open(ctx, "", "tools/call", "deploy", args, wire); return err },
	} {
		if err := call(); err != errTestNoCaller {
			t.Errorf("%s with an empty caller: %v, want NoCaller", name, err)
		}
	}
	if !strings.Contains(log.String(), "test: no authenticated caller") {
		t.Errorf("log %q", log.String())
	}
	// Alice's tokens still work.
	if _, err := c.Turn(ctx, alice, "search", cursor); err != nil {
		t.Errorf("alice's cursor: %v", err)
	}
	if _, err := s.Open(ctx, "alice", "tools/call", "deploy", args, wire); err != nil {
		t.Errorf("alice's state: %v", err)
	}
}

// CheckTargetBinding accepts only a codec that refuses a state of one tool
// for another. A refusal for another reason (a single-use codec's store
// failing, or reporting the probe as used) says nothing about the binding
// and is no pass: the probe of ctokenmcp took any error as one, so a
// BindSubject codec got through when its store failed or when it was
// probed twice in one second (signed encoding is deterministic).
func TestCheckTargetBindingRefusesACodecThatDoesNotBindTheTool(t *testing.T) {
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
func TestSealRefusesArgumentsThatCannotBeFingerprinted(t *testing.T) {
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
