package mcptoken

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

func TestCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"bind the caller without carrying it", cursorsBindTheCallerWithoutCarryingIt},
		{"new cursors refuses a keyless issuer", newCursorsRefusesAKeylessIssuer},
		{"turn with a keyless issuer is an internal error", cursorsTurnWithAKeylessIssuerIsAnInternalError},
		{"refuse maps no key to internal", refuseMapsNoKeyToInternal},
		{"turn carries scope to next", turnCarriesScopeToNext},
		{"scope of nil arguments is unbound", scopeOfNilArgumentsIsUnbound},
		{"turn refuses cursor of other scope or expired", turnRefusesCursorOfOtherScopeOrExpired},
	} {
		t.Run(tc.name, tc.test)
	}
}

// MCP cursors bind the caller inside their MAC (cursor format version 2):
// the token carries no byte of the caller ID or the tool name, a 1 KiB or
// non-UTF-8 caller gets the full state, signed and sealed, and another
// caller, tool, arguments or session is refused with ctoken's codes.
func cursorsBindTheCallerWithoutCarryingIt(t *testing.T) {
	callers := map[string]string{
		"1 KiB":     strings.Repeat("alice.secret@example.com;", 41)[:1024],
		"not UTF-8": "alice.secret\xff\xfe@example.com",
	}
	for _, seal := range []bool{false, true} {
		for name, caller := range callers {
			t.Run(fmt.Sprintf("seal=%v/%s", seal, name), func(t *testing.T) {
				var log bytes.Buffer
				clk := &clock{now: time.Unix(1e9, 0)}
				issuer := func(session string) *ctoken.CursorIssuer {
					kr, err := ctoken.NewKeyring(make([]byte, 32))
					if err != nil {
						t.Fatal(err)
					}
					iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: []byte(session), Now: clk.Now, Seal: seal})
					if err != nil {
						t.Fatal(err)
					}
					return iss
				}
				c, err := NewCursors(issuer("s1"), testIntegration(&log))
				if err != nil {
					t.Fatal(err)
				}
				args := map[string]any{"query": "shoes"}
				scope, err := c.Scope(caller, "search_issues", args)
				if err != nil {
					t.Fatal(err)
				}
				state := bytes.Repeat([]byte{0xa5}, ctoken.MaxOpaqueStateBytes)
				cursor, err := c.Next(scope, 4, state)
				if err != nil {
					t.Fatalf("Next with the full state: %v", err)
				}
				raw, err := base64.RawURLEncoding.DecodeString(cursor)
				if err != nil || bytes.Contains(raw, []byte("secret")) || bytes.Contains(raw, []byte("search_issues")) {
					t.Fatalf("the cursor carries the caller or the tool (%v)", err)
				}
				if _, err := c.Next(scope, 4, append(state, 0)); !errors.Is(err, ctoken.ErrOpaqueStateTooLarge) {
					t.Fatalf("Next over the state cap: %v", err)
				}
				turn, err := c.Turn(context.Background(), scope, "search_issues", cursor)
				if err != nil || turn.Payload.Page != 4 || !bytes.Equal(turn.Payload.State, state) {
					t.Fatalf("Turn: %+v, %v", turn.Payload, err)
				}
				other := func(caller, tool string, args any) ctoken.CursorScope {
					s, err := c.Scope(caller, tool, args)
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				restarted, err := NewCursors(issuer("s2"), testIntegration(&log))
				if err != nil {
					t.Fatal(err)
				}
				for _, tc := range []struct {
					name  string
					c     *Cursors
					scope ctoken.CursorScope
					code  int
				}{
					{"another caller", c, other(caller+"x", "search_issues", args), ctoken.CodeCursorInvalid},
					{"another tool", c, other(caller, "delete_issues", args), ctoken.CodeCursorInvalid},
					{"other arguments", c, other(caller, "search_issues", map[string]any{"query": "boots"}), ctoken.CodeCursorInvalid},
					{"another session", restarted, scope, ctoken.CodeCursorExpired},
				} {
					_, err := tc.c.Turn(context.Background(), tc.scope, "search_issues", cursor)
					var r *refusedErr
					if !errors.As(err, &r) || r.r.Code != tc.code {
						t.Errorf("%s: %v, want code %d", tc.name, err, tc.code)
					}
				}
				if strings.Contains(log.String(), "secret") {
					t.Errorf("the log carries the caller: %s", log.String())
				}
			})
		}
	}
}

// NewCursors refuses an issuer not made by ctoken.NewCursorIssuer.
func newCursorsRefusesAKeylessIssuer(t *testing.T) {
	var log bytes.Buffer
	c, err := NewCursors(&ctoken.CursorIssuer{}, testIntegration(&log))
	if c != nil || !errors.Is(err, ctoken.ErrConfig) || !errors.Is(err, ctoken.ErrNoKey) || !strings.HasPrefix(err.Error(), "test: NewCursors") {
		t.Fatalf("%v, %v; want ErrConfig and ErrNoKey", c, err)
	}
}

// At run time, an issuer without a key (reachable only past NewCursors) is
// an internal error logged at Error, never an invalid cursor.
func cursorsTurnWithAKeylessIssuerIsAnInternalError(t *testing.T) {
	var log bytes.Buffer
	c := &Cursors{issuer: &ctoken.CursorIssuer{}, in: testIntegration(&log)}
	scope := ctoken.CursorScope{ToolID: ctoken.MCPTarget("tools/call", "search"), CallerID: "alice"}
	_, err := c.Turn(context.Background(), scope, "search", "AAAA")
	var re *refusedErr
	if !errors.As(err, &re) || !re.r.Internal || re.r.Code != 0 || re.r.StoreFailed || re.r.Message != "internal error" {
		t.Fatalf("%v (%+v); want an Internal refusal", err, re)
	}
	if got := log.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "has no key") || strings.Contains(got, "cursor rejected") {
		t.Fatalf("log %q", got)
	}
}

// RefuseCursor and RefuseState map ctoken.ErrNoKey to Internal, with code
// 0 and not StoreFailed.
func refuseMapsNoKeyToInternal(t *testing.T) {
	_, cursorErr := (&ctoken.CursorIssuer{}).Verify("AAAA", ctoken.CursorScope{})
	_, stateErr := (&ctoken.RequestStateCodec{}).Decode("v1.AAAA.AAAA", "alice", "t")
	for name, r := range map[string]Refusal{"cursor": RefuseCursor(cursorErr), "state": RefuseState(stateErr)} {
		t.Run(name, func(t *testing.T) {
			if !r.Internal || r.StoreFailed || r.Code != 0 || r.Expired() || r.Message != "internal error" || r.Reason == "" {
				t.Fatalf("%+v", r)
			}
		})
	}
}

// A page turn fingerprints the arguments once: Turn keeps the scope and
// Turn.Next issues the next cursor with it.
func turnCarriesScopeToNext(t *testing.T) {
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
func scopeOfNilArgumentsIsUnbound(t *testing.T) {
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
func turnRefusesCursorOfOtherScopeOrExpired(t *testing.T) {
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
