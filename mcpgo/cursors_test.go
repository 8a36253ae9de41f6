package ctokenmcpgo

import (
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/server"
)

// TestCursors pins paginated tool results through Cursors: every item once, across a restart, and what a cursor that does not open tells the client.
func TestCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"pages through every item", cursorsPageThroughEveryItem},
		{"a cursor survives a restart with the same keys", cursorSurvivesRestartWithSameKeys},
		{"rejections are tool errors with a code", cursorRejectionsAreToolErrorsWithCode},
	} {
		t.Run(tc.name, tc.test)
	}
}

func cursorsPageThroughEveryItem(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		p := connect(f.server(t, ContextCaller, nil), "alice", nil)
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			items, next, res := page(t, p, "list", "", cursor)
			if res.IsError {
				t.Fatalf("page %d refused: %s", pages, text(res))
			}
			got = append(got, items...)
			if next == "" {
				break
			}
			cursor = next
		}
		if strings.Join(got, ",") != strings.Join(testItems, ",") {
			t.Errorf("items = %v, want every item once, in order", got)
		}
	})
}

func cursorSurvivesRestartWithSameKeys(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		before := connect(newFleet(t, 1, "fleet", nil).server(t, ContextCaller, nil), "alice", nil)
		items, next, _ := page(t, before, "list", "a", "")
		// A new process: new issuer, codec and server from the same keys and
		// session.
		after := connect(newFleet(t, 1, "fleet", nil).server(t, ContextCaller, nil), "alice", nil)
		rest, last, res := page(t, after, "list", "a", next)
		if res != nil && res.IsError {
			t.Fatalf("restarted server refused the cursor: %s", text(res))
		}
		if got := strings.Join(append(items, rest...), ","); got != "a1,a2,a3,a4,a5,a6,a7" || last != "" {
			t.Errorf("items across the restart = %s (next %q)", got, last)
		}
	})
}

func cursorRejectionsAreToolErrorsWithCode(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*server.MCPServer, string, *elicitor, ...client.ClientOption) *peer) {
		f := newFleet(t, 1, "s1", nil)
		s := f.server(t, ContextCaller, nil)
		alice := connect(s, "alice", nil)
		bob := connect(s, "bob", nil)
		otherKey := connect(newFleet(t, 2, "s1", nil).server(t, ContextCaller, nil), "alice", nil)
		otherSession := connect(newFleet(t, 1, "s2", nil).server(t, ContextCaller, nil), "alice", nil)
		_, c, _ := page(t, alice, "list", "", "")
		flipped := []byte(c)
		flipped[len(c)/2] ^= 1
		for _, tc := range []struct {
			name   string
			p      *peer
			tool   string
			prefix string
			cursor string
			code   int
		}{
			{"tampered", alice, "list", "", string(flipped), ctoken.CodeCursorInvalid},
			{"truncated", alice, "list", "", c[:len(c)-1], ctoken.CodeCursorInvalid},
			{"other caller", bob, "list", "", c, ctoken.CodeCursorInvalid},
			{"other arguments", alice, "list", "b", c, ctoken.CodeCursorInvalid},
			{"other tool", alice, "list2", "", c, ctoken.CodeCursorInvalid},
			{"other key", otherKey, "list", "", c, ctoken.CodeCursorInvalid},
			{"other server session", otherSession, "list", "", c, ctoken.CodeCursorExpired},
			{"garbage", alice, "list", "", "not a cursor", ctoken.CodeCursorInvalid},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, _, res := page(t, tc.p, tc.tool, tc.prefix, tc.cursor)
				if !res.IsError || TokenCode(res) != tc.code {
					t.Fatalf("isError %v, TokenCode %d (%q); want a tool error with code %d", res.IsError, TokenCode(res), text(res), tc.code)
				}
				if strings.Contains(text(res), "mac") || strings.Contains(text(res), "wrong") {
					t.Errorf("the client learns the reason: %q", text(res))
				}
			})
		}
		f.clock.advance(ctoken.DefaultCursorTTL + time.Minute)
		if _, _, res := page(t, alice, "list", "", c); TokenCode(res) != ctoken.CodeCursorExpired {
			t.Errorf("expired cursor: TokenCode %d (%q)", TokenCode(res), text(res))
		}
		logged := f.log.String()
		for _, reason := range []string{"forged or wrong scope (tool, caller or arguments)"} {
			if !strings.Contains(logged, reason) {
				t.Errorf("log lacks %q", reason)
			}
		}
		if strings.Contains(logged, c[:16]) {
			t.Error("the cursor reached the log")
		}
	})
}
