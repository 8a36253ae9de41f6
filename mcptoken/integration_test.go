package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestIntegration(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"constructors refuse nil and incomplete integration", constructorsRefuseNilAndIncompleteIntegration},
		{"caller refuses anonymous requests", callerRefusesAnonymousRequests},
		{"core refuses an empty caller", coreRefusesAnEmptyCaller},
	} {
		t.Run(tc.name, tc.test)
	}
}

func constructorsRefuseNilAndIncompleteIntegration(t *testing.T) {
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
func callerRefusesAnonymousRequests(t *testing.T) {
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

// The core refuses an empty caller handed to it directly (an integration
// that skips Integration.Caller) with NoCaller, logged, instead of issuing or
// accepting a token bound to every unauthenticated request at once.
func coreRefusesAnEmptyCaller(t *testing.T) {
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

// TestIntegrationLoggerDefault: an Integration without Log writes to
// slog.Default, so that no failure is dropped for want of a logger.
func TestIntegrationLoggerDefault(t *testing.T) {
	if got := (&Integration{}).Logger(); got != slog.Default() {
		t.Fatalf("Logger() = %v; want slog.Default()", got)
	}
}
