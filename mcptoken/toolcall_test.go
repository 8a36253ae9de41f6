package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// toolResult is the result type of the tests' ToolRules: N counts the
// runs, Input asks for input.
type toolResult struct {
	N     int  `json:"n"`
	Input bool `json:"input,omitempty"`
}

// undecodable is a result whose JSON does not decode back into it.
type undecodable struct {
	N int `json:"n"`
}

func (undecodable) MarshalJSON() ([]byte, error) { return []byte(`{"n":"text"}`), nil }

// errSent wraps what the tests' rules send for an error.
type errSent struct {
	what string
	err  error
}

func (e *errSent) Error() string { return e.what }

func (e *errSent) Unwrap() error { return e.err }

// errNotBegun says the tool did not begin: released, not recorded.
var errNotBegun = errors.New("invalid params")

func testRules[R any](needsInput func(*R) bool) ToolRules[R] {
	return ToolRules[R]{
		Failure: func(err error) error {
			if errors.Is(err, errNotBegun) {
				return err
			}
			return &Failure{Record: []byte(err.Error()), Err: err}
		},
		NoResult:   errors.New("no result"),
		NeedsInput: needsInput,
		Replay:     func(record []byte) error { return &errSent{"replayed " + string(record), nil} },
		Refused:    func(err error) (*R, error) { return nil, &errSent{"refused: " + err.Error(), err} },
	}
}

func TestToolRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"replay the decoded first result", toolRulesReplayTheDecodedFirstResult},
		{"send a recorded failure as recorded, first call too; release a call that did not begin", toolRulesRecordAFailure},
		{"do not record a result that asks for input", toolRulesDoNotRecordInput},
		{"record a result that does not decode back as the tool's failure, never sent", toolRulesRecordAnUndecodableResultAsFailure},
	} {
		t.Run(tc.name, tc.test)
	}
}

func toolRulesReplayTheDecodedFirstResult(t *testing.T) {
	i := testIdempotency(t, new(bytes.Buffer), nil)
	rules := testRules(func(*toolResult) bool { return false })
	n := 0
	run := func(context.Context) (*toolResult, error) { n++; return &toolResult{N: n}, nil }
	for range 2 {
		res, err := rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k1"}`), nil, run)
		if err != nil || res == nil || res.N != 1 {
			t.Fatalf("Call = %+v, %v; want the first result, n 1", res, err)
		}
	}
	if _, err := rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k1","x":1}`), nil, run); err == nil || err.Error() != "refused: "+ErrKeyReused.Error() {
		t.Fatalf("changed call: %v; want Refused of ErrKeyReused", err)
	}
	if n != 1 {
		t.Fatalf("the tool ran %d times; want 1", n)
	}
}

func toolRulesRecordAFailure(t *testing.T) {
	i := testIdempotency(t, new(bytes.Buffer), nil)
	rules := testRules(func(*toolResult) bool { return false })
	runs := 0
	fail := errors.New("card declined")
	res, err := rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k1"}`), nil, func(context.Context) (*toolResult, error) { runs++; return nil, fail })
	if res != nil || err == nil || err.Error() != "replayed card declined" {
		t.Fatalf("first call = %v, %v; want the failure as recorded", res, err)
	}
	_, err = rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k1"}`), nil, func(context.Context) (*toolResult, error) { runs++; return &toolResult{}, nil })
	if err == nil || err.Error() != "replayed card declined" || runs != 1 {
		t.Fatalf("retry = %v after %d runs; want the replayed failure after 1", err, runs)
	}
	// A handler with neither result nor error fails with NoResult, recorded.
	_, err = rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k2"}`), nil, func(context.Context) (*toolResult, error) { return nil, nil })
	if err == nil || err.Error() != "replayed no result" {
		t.Fatalf("nil result: %v; want NoResult, as recorded", err)
	}
	if _, err = rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k2"}`), nil, nil); err == nil || err.Error() != "replayed no result" {
		t.Fatalf("retry of a nil result: %v; want NoResult replayed", err)
	}
	// An error that says the tool did not begin releases the key.
	for want := 1; want <= 2; want++ {
		_, err = rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k3"}`), nil, func(context.Context) (*toolResult, error) { runs++; return nil, errNotBegun })
		if !errors.Is(err, errNotBegun) || err.Error() != "refused: invalid params" || runs != 1+want {
			t.Fatalf("call %d that did not begin = %v after %d runs", want, err, runs)
		}
	}
}

func toolRulesDoNotRecordInput(t *testing.T) {
	i := testIdempotency(t, new(bytes.Buffer), nil)
	rules := testRules(func(r *toolResult) bool { return r.Input })
	n := 0
	run := func(context.Context) (*toolResult, error) { n++; return &toolResult{N: n, Input: n == 1}, nil }
	first, err := rules.Call(context.Background(), i, "alice", "deploy", []byte(`{"key":"k1"}`), nil, run)
	if err != nil || !first.Input {
		t.Fatalf("round one = %+v, %v; want the input request", first, err)
	}
	for range 2 {
		res, err := rules.Call(context.Background(), i, "alice", "deploy", []byte(`{"key":"k1"}`), nil, run)
		if err != nil || res.N != 2 || res.Input {
			t.Fatalf("completing round = %+v, %v; want run 2, recorded", res, err)
		}
	}
}

func toolRulesRecordAnUndecodableResultAsFailure(t *testing.T) {
	i := testIdempotency(t, new(bytes.Buffer), nil)
	rules := testRules(func(*undecodable) bool { return false })
	n := 0
	run := func(context.Context) (*undecodable, error) { n++; return &undecodable{N: 7}, nil }
	want := "replayed " + errUnreplayable.Error()
	for call := 1; call <= 2; call++ {
		res, err := rules.Call(context.Background(), i, "alice", "pay", []byte(`{"key":"k1"}`), nil, run)
		if res != nil || err == nil || !strings.HasPrefix(err.Error(), want) || n != 1 {
			t.Fatalf("call %d = %+v, %v after %d runs; want the recorded failure %q, one run", call, res, err, n, want)
		}
	}
}

// TestNewFor checks that the constructors for an SDK module's options
// pass every option on: the Logger to the Integration, the Caller back,
// and the rest to the core.
func TestNewFor(t *testing.T) {
	var logs []*slog.Logger
	integration := func(l *slog.Logger) *Integration {
		logs = append(logs, l)
		return testIntegration(new(bytes.Buffer))
	}
	log := slog.New(slog.DiscardHandler)
	type callerFunc func() string
	alice := callerFunc(func() string { return "alice" })
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: idemKeys, Seal: true})
	if err != nil {
		t.Fatal(err)
	}
	// nil options are the zero value.
	if c, caller, err := NewCursorsFor[callerFunc](issuer, nil, integration); err != nil || c == nil || caller != nil || logs[0] != nil {
		t.Fatalf("NewCursorsFor(nil options) = %v, %v, %v, logger %v", c, caller != nil, err, logs[0])
	}
	if c, caller, err := NewCursorsFor(issuer, &CursorOptions[callerFunc]{Caller: alice, Logger: log}, integration); err != nil || c == nil || caller() != "alice" || logs[1] != log {
		t.Fatalf("NewCursorsFor = %v, %v, logger passed %v", c, err, logs[1] == log)
	}
	if l, caller, err := NewListCursorsFor(issuer, &CursorOptions[callerFunc]{Caller: alice, Logger: log}, integration); err != nil || l == nil || caller() != "alice" || logs[2] != log {
		t.Fatalf("NewListCursorsFor = %v, %v, logger passed %v", l, err, logs[2] == log)
	}
	if _, _, err := NewListCursorsFor[callerFunc](nil, nil, integration); err == nil {
		t.Fatal("NewListCursorsFor(nil issuer): no error")
	}
	subjectOnly, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: idemKeys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubject})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewStatesFor[callerFunc](subjectOnly, nil, integration); !errors.Is(err, ErrTargetUnbound) {
		t.Fatalf("NewStatesFor(a subject-only codec) = %v; want ErrTargetUnbound", err)
	}
	opts := &StateOptions[callerFunc]{Caller: alice, Logger: log, InsecureSkipToolBinding: true, UnboundArgs: true}
	s, caller, err := NewStatesFor(subjectOnly, opts, integration)
	if err != nil || caller() != "alice" || logs[len(logs)-1] != log || !s.unboundArgs {
		t.Fatalf("NewStatesFor(InsecureSkipToolBinding, UnboundArgs) = %v, %v", s, err)
	}
	opts.AnswerRetries = true // the codec is not single-use
	if _, _, err := NewStatesFor(subjectOnly, opts, integration); !errors.Is(err, ErrNoRecorder) {
		t.Fatalf("NewStatesFor(AnswerRetries, no replay store) = %v; want ErrNoRecorder", err)
	}
	iopts := IdempotencyOptions[callerFunc]{IdempotencyConfig: IdempotencyConfig{Keys: idemKeys, Store: replay.NewMemoryStore(10), KeyFromMeta: true}, Caller: alice, Logger: log}
	if i, caller, err := NewIdempotencyFor(iopts, integration); err != nil || i == nil || caller() != "alice" || logs[len(logs)-1] != log {
		t.Fatalf("NewIdempotencyFor = %v, %v", i, err)
	}
	iopts.KeyFromMeta = false
	if _, _, err := NewIdempotencyFor(iopts, integration); !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("NewIdempotencyFor(no key source) = %v; want ctoken.ErrConfig", err)
	}
}
