package mcptoken

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

// listIssuer returns a sealing (or, with seal false, signing) cursor
// issuer on c's clock with session "s1" and a one-minute TTL.
func listIssuer(t testing.TB, c *clock, seal bool, session string) *ctoken.CursorIssuer {
	t.Helper()
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: []byte(session), TTL: time.Minute, Now: c.Now, Seal: seal})
	if err != nil {
		t.Fatal(err)
	}
	return issuer
}

func testListCursors(t testing.TB, log *bytes.Buffer, c *clock) *ListCursors {
	t.Helper()
	l, err := NewListCursors(listIssuer(t, c, true, "s1"), testIntegration(log))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestListCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"new list cursors refuses what cannot seal", newListCursorsRefusesWhatCannotSeal},
		{"carry the SDK cursor unchanged and unreadable", listCursorsCarryTheSDKCursorUnchangedAndUnreadable},
		{"refuse another scope", listCursorsRefuseAnotherScope},
		{"refuse an authentic cursor that is not a list cursor", listCursorsRefuseAnAuthenticCursorThatIsNotAListCursor},
		{"seal refuses an SDK cursor over the budget", listCursorsSealRefusesAnSDKCursorOverTheBudget},
		{"is list method", isListMethod},
		{"zero value refuses", listCursorsZeroValueRefuses},
	} {
		t.Run(tc.name, tc.test)
	}
}

func newListCursorsRefusesWhatCannotSeal(t *testing.T) {
	var log bytes.Buffer
	c := &clock{now: time.Unix(1e9, 0)}
	for _, tc := range []struct {
		name   string
		issuer *ctoken.CursorIssuer
		in     *Integration
		is     []error
	}{
		{"nil issuer", nil, testIntegration(&log), nil},
		{"zero issuer", new(ctoken.CursorIssuer), testIntegration(&log), []error{ctoken.ErrConfig, ctoken.ErrNoKey}},
		{"signing issuer", listIssuer(t, c, false, "s1"), testIntegration(&log), []error{ctoken.ErrConfig}},
		{"incomplete integration", listIssuer(t, c, true, "s1"), &Integration{Name: "x"}, nil},
		{"nil integration", listIssuer(t, c, true, "s1"), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewListCursors(tc.issuer, tc.in)
			if err == nil || l != nil {
				t.Fatalf("accepted: %v, %v", l, err)
			}
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("%v does not match %v", err, want)
				}
			}
		})
	}
}

func listCursorsCarryTheSDKCursorUnchangedAndUnreadable(t *testing.T) {
	var log bytes.Buffer
	l := testListCursors(t, &log, &clock{now: time.Unix(1e9, 0)})
	ctx := context.Background()
	for _, tc := range []struct{ name, inner string }{
		{"go-sdk (URL base64 of gob)", base64.URLEncoding.EncodeToString([]byte("\x1d\xff\x81\x03\x01\x01\tpageToken\x01\xff\x82\x00\x01\x01\x01\x07LastUID\x01\x0c\x00\x00\x00\x08\xff\x82\x01\x03t05\x00"))},
		{"mcp-go (standard base64 of the name)", base64.StdEncoding.EncodeToString([]byte("tool-05"))},
		{"text", "page 2 after tool-05"},
		{"base64 with a newline", "dG9vbC0wNQ==\n"},
		{"base64 with nonzero trailing bits", "dG9vbC0wNR=="},
		{"one byte", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, session := range []string{"", "session-1"} {
				wire, err := l.Seal(ctx, "alice", session, MethodListTools, tc.inner)
				if err != nil {
					t.Fatal(err)
				}
				if len(tc.inner) >= 8 && strings.Contains(wire, tc.inner) {
					t.Errorf("wire cursor %q contains the SDK's %q", wire, tc.inner)
				}
				got, err := l.Open(ctx, "alice", session, MethodListTools, wire)
				if err != nil || got != tc.inner {
					t.Errorf("session %q: opened %q, %v; want %q", session, got, err, tc.inner)
				}
			}
		})
	}
	t.Run("empty is the last page and the first", func(t *testing.T) {
		if wire, err := l.Seal(ctx, "alice", "s", MethodListPrompts, ""); wire != "" || err != nil {
			t.Errorf("Seal(\"\") = %q, %v", wire, err)
		}
		if inner, err := l.Open(ctx, "alice", "s", MethodListPrompts, ""); inner != "" || err != nil {
			t.Errorf("Open(\"\") = %q, %v", inner, err)
		}
	})
}

func listCursorsRefuseAnotherScope(t *testing.T) {
	var log bytes.Buffer
	c := &clock{now: time.Unix(1e9, 0)}
	l := testListCursors(t, &log, c)
	ctx := context.Background()
	wire, err := l.Seal(ctx, "alice", "session-1", MethodListResources, "cursor-of-the-sdk")
	if err != nil {
		t.Fatal(err)
	}
	restarted, err := NewListCursors(listIssuer(t, c, true, "s2"), testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	tampered := []byte(wire)
	tampered[len(tampered)-3] ^= 1
	for _, tc := range []struct {
		name                    string
		l                       *ListCursors
		caller, session, method string
		wire                    string
		code                    int
		reason                  string
		advance                 time.Duration
	}{
		{"another caller", l, "bob", "session-1", MethodListResources, wire, ctoken.CodeCursorInvalid, "sealed cursor does not open", 0},
		{"another session", l, "alice", "session-2", MethodListResources, wire, ctoken.CodeCursorInvalid, "sealed cursor does not open", 0},
		{"no session", l, "alice", "", MethodListResources, wire, ctoken.CodeCursorInvalid, "sealed cursor does not open", 0},
		{"another list method", l, "alice", "session-1", MethodListResourceTemplates, wire, ctoken.CodeCursorInvalid, "sealed cursor does not open", 0},
		{"tampered", l, "alice", "session-1", MethodListResources, string(tampered), ctoken.CodeCursorInvalid, "", 0},
		{"the SDK's own cursor", l, "alice", "session-1", MethodListResources, "cursor-of-the-sdk", ctoken.CodeCursorInvalid, "", 0},
		{"expired", l, "alice", "session-1", MethodListResources, wire, ctoken.CodeCursorExpired, "older than TTL", 2 * time.Minute},
		{"another server session", restarted, "alice", "session-1", MethodListResources, wire, ctoken.CodeCursorExpired, "other server session", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.Reset()
			c.now = time.Unix(1e9, 0).Add(tc.advance)
			inner, err := tc.l.Open(ctx, tc.caller, tc.session, tc.method, tc.wire)
			var re *refusedErr
			if inner != "" || !errors.As(err, &re) || re.r.Code != tc.code {
				t.Fatalf("Open = %q, %v; want code %d", inner, err, tc.code)
			}
			if !strings.Contains(log.String(), "list cursor rejected") || !strings.Contains(log.String(), tc.reason) {
				t.Errorf("log %q lacks the rejection with reason %q", log.String(), tc.reason)
			}
			if strings.Contains(log.String(), tc.wire) || strings.Contains(log.String(), "cursor-of-the-sdk") {
				t.Errorf("log %q shows a cursor", log.String())
			}
		})
	}
	c.now = time.Unix(1e9, 0)
	t.Run("no caller", func(t *testing.T) {
		for _, w := range []string{"", wire} {
			if inner, err := l.Open(ctx, "", "session-1", MethodListResources, w); inner != "" || err != errTestNoCaller {
				t.Errorf("Open(%q) = %q, %v", w, inner, err)
			}
			if out, err := l.Seal(ctx, "", "session-1", MethodListResources, "x"); out != "" || err != errTestNoCaller {
				t.Errorf("Seal = %q, %v", out, err)
			}
		}
	})
	t.Run("not a list method", func(t *testing.T) {
		if _, err := l.Open(ctx, "alice", "session-1", "tools/call", wire); !errors.Is(err, ctoken.ErrConfig) {
			t.Errorf("Open: %v", err)
		}
		if _, err := l.Seal(ctx, "alice", "session-1", "tools/call", "x"); !errors.Is(err, ctoken.ErrConfig) {
			t.Errorf("Seal: %v", err)
		}
	})
}

// An authentic cursor of a list's scope whose state is not a list cursor's
// (written by other code sharing the issuer) is refused as invalid, and the
// SDK gets nothing of it.
func listCursorsRefuseAnAuthenticCursorThatIsNotAListCursor(t *testing.T) {
	var log bytes.Buffer
	l := testListCursors(t, &log, &clock{now: time.Unix(1e9, 0)})
	for _, state := range [][]byte{nil, {innerText}, {9, 'x'}} {
		wire, err := l.issuer.Issue(ctoken.CursorPayload{CursorScope: listScope("alice", "s", MethodListTools), State: state})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := l.Open(context.Background(), "alice", "s", MethodListTools, wire)
		var re *refusedErr
		if inner != "" || !errors.As(err, &re) || re.r.Code != ctoken.CodeCursorInvalid {
			t.Errorf("state %q: Open = %q, %v", state, inner, err)
		}
	}
}

// An SDK cursor longer than a cursor's state is an error, logged with its
// length; one that fits the budget exactly seals.
func listCursorsSealRefusesAnSDKCursorOverTheBudget(t *testing.T) {
	var log bytes.Buffer
	l := testListCursors(t, &log, &clock{now: time.Unix(1e9, 0)})
	ctx := context.Background()
	// "~" is in no base64 alphabet: the text is stored as is.
	fits := strings.Repeat("~", l.issuer.StateBudget()-1)
	if _, err := l.Seal(ctx, "alice", "", MethodListTools, fits); err != nil {
		t.Fatalf("%d bytes: %v", len(fits), err)
	}
	wire, err := l.Seal(ctx, "alice", "", MethodListTools, fits+"~")
	if wire != "" || !errors.Is(err, ctoken.ErrOpaqueStateTooLarge) {
		t.Fatalf("Seal = %q, %v", wire, err)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "stateBytes=257") || strings.Contains(log.String(), fits) {
		t.Errorf("log %q", log.String())
	}
}

func isListMethod(t *testing.T) {
	for method, want := range map[string]bool{
		"tools/list": true, "prompts/list": true, "resources/list": true, "resources/templates/list": true,
		"tools/call": false, "": false, "tasks/list": false, "Tools/list": false,
	} {
		if IsListMethod(method) != want {
			t.Errorf("IsListMethod(%q) = %v", method, !want)
		}
	}
}

// FuzzListCursorsOpen: no wire, caller, session or method panics Open, a
// refusal hands the SDK nothing, and only the cursor sealed for alice,
// session s and tools/list opens, to the SDK cursor it was sealed from.
func FuzzListCursorsOpen(f *testing.F) {
	var log bytes.Buffer
	l := testListCursors(f, &log, &clock{now: time.Unix(1e9, 0)})
	const inner = "dG9vbC0wNQ=="
	wire, err := l.Seal(context.Background(), "alice", "s", MethodListTools, inner)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(wire, "alice", "s", MethodListTools)
	f.Add(wire, "bob", "s", MethodListTools)
	f.Add(wire, "alice", "", MethodListTools)
	f.Add(wire, "alice", "s", MethodListPrompts)
	f.Add(wire[:len(wire)-1], "alice", "s", MethodListTools)
	f.Add(inner, "alice", "s", MethodListTools)
	f.Add("", "alice", "s", "tools/call")
	f.Fuzz(func(t *testing.T, w, caller, session, method string) {
		log.Reset()
		got, err := l.Open(context.Background(), caller, session, method, w)
		if err != nil {
			if got != "" {
				t.Fatalf("refusal handed the SDK %q", got)
			}
			var re *refusedErr
			if err != errTestNoCaller && !errors.Is(err, ctoken.ErrConfig) && (!errors.As(err, &re) || !KnownCode(re.r.Code)) {
				t.Fatalf("refusal %v is neither NoCaller, ErrConfig nor a coded refusal", err)
			}
			return
		}
		if w == "" {
			if got != "" {
				t.Fatalf("first page opened to %q", got)
			}
			return
		}
		if got != inner || caller != "alice" || session != "s" || method != MethodListTools {
			t.Fatalf("opened %q for caller %q, session %q, method %q", got, caller, session, method)
		}
	})
}

// A zero or nil ListCursors (not made by NewListCursors) refuses every
// call with an error, as a zero States does, and never panics.
func listCursorsZeroValueRefuses(t *testing.T) {
	ctx := context.Background()
	var nilCursors *ListCursors
	for _, tc := range []struct {
		name string
		l    *ListCursors
	}{{"zero", new(ListCursors)}, {"nil", nilCursors}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, wire := range []string{"", "x"} {
				if inner, err := tc.l.Open(ctx, "alice", "s1", MethodListTools, wire); err == nil || inner != "" {
					t.Fatalf("Open(%q) = %q, %v", wire, inner, err)
				}
			}
			for _, inner := range []string{"", "x"} {
				if out, err := tc.l.Seal(ctx, "alice", "s1", MethodListTools, inner); err == nil || out != "" {
					t.Fatalf("Seal(%q) = %q, %v", inner, out, err)
				}
			}
			if tc.l.Integration() != nil {
				t.Fatal("an Integration of a ListCursors not made by NewListCursors")
			}
		})
	}
}
