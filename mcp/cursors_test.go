package ctokenmcp

import (
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCursors pins paginated tool results through Cursors: every item once, on any instance, and what a cursor that does not open tells the client.
func TestCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"pages through every item", cursorsPageThroughEveryItem},
		{"work across instances of a fleet", cursorsWorkAcrossInstancesOfAFleet},
		{"rejections are invalid params", cursorRejectionsAreInvalidParams},
		{"an expired cursor tells the client to start over", expiredCursorTellsClientToStartOver},
		{"a rejection is logged with its reason but not the token", rejectionIsLoggedWithReasonButNotToken},
	} {
		t.Run(tc.name, tc.test)
	}
}

func cursorsPageThroughEveryItem(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	var got []string
	in := listIn{Prefix: "a"}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		out, err := callList(t, cs, "list", in)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Items...)
		if out.Next == "" {
			break
		}
		in.Cursor = out.Next
	}
	if strings.Join(got, ",") != "a1,a2,a3,a4,a5,a6,a7" {
		t.Errorf("items = %v", got)
	}
}

func cursorsWorkAcrossInstancesOfAFleet(t *testing.T) {
	f := newFleet(t, 1, "s1")
	one := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	two := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	first, err := callList(t, one, "list", listIn{Prefix: "a"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := callList(t, two, "list", listIn{Prefix: "a", Cursor: first.Next})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(second.Items, ",") != "a6,a7" {
		t.Errorf("second page = %v", second.Items)
	}
}

func cursorRejectionsAreInvalidParams(t *testing.T) {
	f := newFleet(t, 1, "s1")
	alice := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	bob := connect(t, f.server(t, FixedCaller("bob"), nil), nil)
	otherSession := connect(t, newFleet(t, 1, "s2").server(t, FixedCaller("alice"), nil), nil)
	otherKey := connect(t, newFleet(t, 2, "s1").server(t, FixedCaller("alice"), nil), nil)

	first, err := callList(t, alice, "list", listIn{Prefix: ""})
	if err != nil {
		t.Fatal(err)
	}
	c := first.Next
	flipped := []byte(c)
	flipped[len(c)/2] ^= 1
	for _, tc := range []struct {
		name string
		cs   *mcp.ClientSession
		tool string
		in   listIn
		code int
	}{
		{"another caller", bob, "list", listIn{Cursor: c}, ctoken.CodeCursorInvalid},
		{"another tool", alice, "list2", listIn{Cursor: c}, ctoken.CodeCursorInvalid},
		{"other arguments", alice, "list", listIn{Prefix: "b", Cursor: c}, ctoken.CodeCursorInvalid},
		// Under another key, a cursor whose body names the verifier's own
		// session is a forgery, not a stale cursor.
		{"another key", otherKey, "list", listIn{Cursor: c}, ctoken.CodeCursorInvalid},
		{"another server session", otherSession, "list", listIn{Cursor: c}, ctoken.CodeCursorExpired},
		{"edited", alice, "list", listIn{Cursor: string(flipped)}, ctoken.CodeCursorInvalid},
		{"truncated", alice, "list", listIn{Cursor: c[:len(c)-1]}, ctoken.CodeCursorInvalid},
		{"garbage", alice, "list", listIn{Cursor: "not a cursor"}, ctoken.CodeCursorInvalid},
		{"oversize", alice, "list", listIn{Cursor: strings.Repeat("A", ctoken.MaxCursorBytes+1)}, ctoken.CodeCursorInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := callList(t, tc.cs, tc.tool, tc.in)
			wantRPCError(t, err, jsonrpc.CodeInvalidParams, tc.code)
		})
	}
}

func expiredCursorTellsClientToStartOver(t *testing.T) {
	f := newFleet(t, 1, "s1")
	cs := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	first, err := callList(t, cs, "list", listIn{})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.advance(ctoken.DefaultCursorTTL + time.Minute)
	_, err = callList(t, cs, "list", listIn{Cursor: first.Next})
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, ctoken.CodeCursorExpired)
}

func rejectionIsLoggedWithReasonButNotToken(t *testing.T) {
	f := newFleet(t, 1, "s1")
	alice := connect(t, f.server(t, FixedCaller("alice"), nil), nil)
	bob := connect(t, f.server(t, FixedCaller("bob"), nil), nil)
	first, err := callList(t, alice, "list", listIn{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = callList(t, bob, "list", listIn{Cursor: first.Next})
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, ctoken.CodeCursorInvalid)
	logged := f.log.String()
	if !strings.Contains(logged, "wrong scope") || !strings.Contains(logged, "tool=list") {
		t.Errorf("log lacks the reason or tool: %q", logged)
	}
	if strings.Contains(logged, first.Next[:16]) || strings.Contains(err.Error(), first.Next[:16]) {
		t.Errorf("the cursor leaked into the log or the error")
	}
	if strings.Contains(err.Error(), "wrong scope") {
		t.Errorf("the client learns the rejection reason: %v", err)
	}
}
