package ctokenmcpgo

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

const listPageSize = 3

var listMethods = []string{mcptoken.MethodListTools, mcptoken.MethodListPrompts, mcptoken.MethodListResources, mcptoken.MethodListResourceTemplates}

// sealingIssuer returns a sealing cursor issuer of key and session on f's
// clock.
func sealingIssuer(t testing.TB, f *fleet, key byte, session string) *ctoken.CursorIssuer {
	t.Helper()
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keyring(t, key), Session: []byte(session), Now: f.clock.now, Seal: true})
	if err != nil {
		t.Fatal(err)
	}
	return issuer
}

// listServer returns a server with 7 tools, 8 prompts, 7 resources and 5
// resource templates, pageSize a page, secured with issuer unless issuer
// is nil; extra options come first.
func listServer(t testing.TB, pageSize int, issuer *ctoken.CursorIssuer, opts *CursorOptions, extra ...server.ServerOption) *server.MCPServer {
	t.Helper()
	options := append(extra, server.WithPaginationLimit(pageSize), server.WithToolCapabilities(false),
		server.WithPromptCapabilities(false), server.WithResourceCapabilities(false, false))
	if issuer != nil {
		secure, err := SecureListCursors(issuer, opts)
		if err != nil {
			t.Fatal(err)
		}
		options = append(options, secure)
	}
	s := server.NewMCPServer("lists", "v0", options...)
	for i := range 7 {
		s.AddTool(mcp.NewTool(fmt.Sprintf("tool-%02d", i)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
	}
	for i := range 8 {
		s.AddPrompt(mcp.NewPrompt(fmt.Sprintf("prompt-%02d", i)), func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
	}
	read := func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) { return nil, nil }
	for i := range 7 {
		s.AddResource(mcp.NewResource(fmt.Sprintf("test://res/%02d", i), fmt.Sprintf("res-%02d", i)), read)
	}
	for i := range 5 {
		s.AddResourceTemplate(mcp.NewResourceTemplate(fmt.Sprintf("test://tpl%02d/{id}", i), fmt.Sprintf("tpl-%02d", i)), read)
	}
	return s
}

// listPage lists one page of method from cursor with p's client and
// returns the names of its items and its next cursor.
func listPage(p *peer, method, cursor string) ([]string, string, error) {
	var names []string
	params := mcp.PaginatedRequest{Params: mcp.PaginatedParams{Cursor: mcp.Cursor(cursor)}}
	switch method {
	case mcptoken.MethodListTools:
		res, err := p.c.ListToolsByPage(p.ctx, mcp.ListToolsRequest{PaginatedRequest: params})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.Tools {
			names = append(names, it.Name)
		}
		return names, string(res.NextCursor), nil
	case mcptoken.MethodListPrompts:
		res, err := p.c.ListPromptsByPage(p.ctx, mcp.ListPromptsRequest{PaginatedRequest: params})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.Prompts {
			names = append(names, it.Name)
		}
		return names, string(res.NextCursor), nil
	case mcptoken.MethodListResources:
		res, err := p.c.ListResourcesByPage(p.ctx, mcp.ListResourcesRequest{PaginatedRequest: params})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.Resources {
			names = append(names, it.URI)
		}
		return names, string(res.NextCursor), nil
	case mcptoken.MethodListResourceTemplates:
		res, err := p.c.ListResourceTemplatesByPage(p.ctx, mcp.ListResourceTemplatesRequest{PaginatedRequest: params})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.ResourceTemplates {
			names = append(names, it.Name)
		}
		return names, string(res.NextCursor), nil
	}
	return nil, "", fmt.Errorf("no method %q", method)
}

// allPages pages through method and returns every page and every next
// cursor.
func allPages(t testing.TB, p *peer, method string) (pages [][]string, cursors []string) {
	t.Helper()
	cursor := ""
	for range 20 {
		names, next, err := listPage(p, method, cursor)
		if err != nil {
			t.Fatalf("%s page %d: %v", method, len(pages), err)
		}
		pages = append(pages, names)
		if next == "" {
			return pages, cursors
		}
		cursors = append(cursors, next)
		cursor = next
	}
	t.Fatalf("%s: more than 20 pages", method)
	return nil, nil
}

// TestSecureListCursors pins SecureListCursors: every list pages as without it, and a cursor that is not the caller's, or cannot be sealed, is refused.
func TestSecureListCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"every list pages unchanged", secureListCursorsPagesEveryListUnchanged},
		{"foreign cursors are refused", secureListCursorsRefuseForeignCursors},
		{"without a session a cursor binds the caller", secureListCursorsWithoutSessionBindTheCaller},
		{"a request without caller is refused", secureListCursorsRefuseARequestWithoutCaller},
		{"an SDK cursor too long to seal is marked", secureListCursorsMarkAnSDKCursorTooLongToSeal},
		{"earlier hooks are kept", secureListCursorsKeepEarlierHooks},
		{"misconfiguration is refused", secureListCursorsRefusesMisconfiguration},
		{"replaced by a later WithHooks, they fail closed", secureListCursorsReplacedByLaterWithHooksFailClosed},
	} {
		t.Run(tc.name, tc.test)
	}
}

// secureListCursorsPagesEveryListUnchanged pages through the four
// lists of a secured server with mcp-go's client, in process and over
// streamable HTTP with sessions and without, and compares every page with
// the same server without ctoken; no cursor shows mcp-go's cursor or the
// name it encodes.
func secureListCursorsPagesEveryListUnchanged(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	issuer := sealingIssuer(t, f, 1, "s1")
	plain := inProcess(t, listServer(t, listPageSize, nil, nil), "alice", nil)
	for _, tr := range []struct {
		name string
		dial func(t *testing.T) *peer
	}{
		{"in-process", func(t *testing.T) *peer {
			return inProcess(t, listServer(t, listPageSize, issuer, nil), "alice", nil)
		}},
		{"streamable HTTP with sessions (protocol 2025-11-25)", func(t *testing.T) *peer {
			p := overHTTP(t, serveHTTP(t, listServer(t, listPageSize, issuer, nil)), "alice", nil, client.WithProtocolVersion("2025-11-25"))
			if p.c.GetSessionId() == "" {
				t.Fatal("no session over streamable HTTP at protocol 2025-11-25")
			}
			return p
		}},
		{"streamable HTTP without sessions (protocol 2026-07-28)", func(t *testing.T) *peer {
			return overHTTP(t, serveHTTP(t, listServer(t, listPageSize, issuer, nil)), "alice", nil)
		}},
		{"stateless streamable HTTP", func(t *testing.T) *peer {
			return overHTTP(t, serveHTTP(t, listServer(t, listPageSize, issuer, nil), server.WithStateLess(true)), "alice", nil)
		}},
	} {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.dial(t)
			for _, method := range listMethods {
				want, sdkCursors := allPages(t, plain, method)
				got, cursors := allPages(t, p, method)
				if len(want) < 2 || !slices.EqualFunc(got, want, slices.Equal) {
					t.Errorf("%s: pages %q, want %q", method, got, want)
				}
				for _, c := range cursors {
					for _, sdk := range sdkCursors {
						name, _ := base64.StdEncoding.DecodeString(sdk)
						raw, _ := base64.RawURLEncoding.DecodeString(c)
						if strings.Contains(c, sdk) || bytes.Contains(raw, name) {
							t.Errorf("%s: cursor %q shows mcp-go's %q (%s)", method, c, sdk, name)
						}
					}
				}
			}
		})
	}
}

// wantListRefused checks that err is mcp-go's -32602 for a cursor it
// cannot decode.
func wantListRefused(t testing.TB, p *peer, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("cursor accepted")
	}
	if e := p.wire.lastErr; e == nil || e.Code != mcp.INVALID_PARAMS {
		t.Errorf("error %v (%+v), want -32602", err, e)
	}
}

// secureListCursorsRefuseForeignCursors presents, for each list
// method, another caller's cursor, a tampered one, one of another session,
// one of another list method, an expired one and mcp-go's own cursor: each
// is refused with -32602, lists nothing, and the log says why (1020 or
// 1021 by ctoken's reason) without the cursor.
func secureListCursorsRefuseForeignCursors(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	var log syncBuffer
	s := listServer(t, listPageSize, sealingIssuer(t, f, 1, "s1"), &CursorOptions{Logger: newTextLogger(&log)})
	plain := inProcess(t, listServer(t, listPageSize, nil, nil), "alice", nil)
	for _, tr := range []struct {
		name string
		dial func(user string) *peer
	}{
		{"in-process", func(user string) *peer { return inProcess(t, s, user, nil) }},
		{"streamable HTTP", func() func(user string) *peer {
			endpoint := serveHTTP(t, s)
			return func(user string) *peer {
				return overHTTP(t, endpoint, user, nil, client.WithProtocolVersion("2025-11-25"))
			}
		}()},
	} {
		alice, alice2, bob := tr.dial("alice"), tr.dial("alice"), tr.dial("bob")
		for i, method := range listMethods {
			_, cursor, err := listPage(alice, method, "")
			if err != nil || cursor == "" {
				t.Fatalf("%s: %v, cursor %q", method, err, cursor)
			}
			_, sdkCursor, _ := listPage(plain, method, "")
			tampered := []byte(cursor)
			tampered[len(tampered)/2] ^= 1
			other := listMethods[(i+1)%len(listMethods)]
			for _, tc := range []struct {
				name    string
				p       *peer
				method  string
				cursor  string
				reason  string
				advance time.Duration
			}{
				{"another caller", bob, method, cursor, "sealed cursor does not open", 0},
				{"another session", alice2, method, cursor, "sealed cursor does not open", 0},
				{"another list method", alice, other, cursor, "sealed cursor does not open", 0},
				{"tampered", alice, method, string(tampered), "", 0},
				{"mcp-go's own cursor", alice, method, sdkCursor, "", 0},
				{"expired", alice, method, cursor, "older than TTL", ctoken.DefaultCursorTTL + time.Second},
			} {
				t.Run(tr.name+"/"+method+"/"+tc.name, func(t *testing.T) {
					f.clock.advance(tc.advance)
					defer f.clock.advance(-tc.advance)
					before := len(log.String())
					names, next, err := listPage(tc.p, tc.method, tc.cursor)
					if names != nil || next != "" {
						t.Errorf("refused cursor listed %q, next %q", names, next)
					}
					wantListRefused(t, tc.p, err)
					logged := log.String()[before:]
					if !strings.Contains(logged, "list cursor rejected") || !strings.Contains(logged, tc.reason) || !strings.Contains(logged, "method="+tc.method) {
						t.Errorf("log %q lacks the rejection with reason %q", logged, tc.reason)
					}
					if strings.Contains(logged, tc.cursor) {
						t.Errorf("log %q shows the cursor", logged)
					}
				})
			}
			if _, _, err := listPage(alice, method, cursor); err != nil {
				t.Errorf("%s: own cursor refused after the refusals: %v", method, err)
			}
		}
	}
}

// Without a session (streamable HTTP at protocol 2026-07-28, which mcp-go's
// client speaks by default, or a stateless server), a cursor is bound to the
// caller and the method only: it works for the same caller on another
// connection, and not for another caller.
func secureListCursorsWithoutSessionBindTheCaller(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	for _, opts := range [][]server.StreamableHTTPOption{nil, {server.WithStateLess(true)}} {
		endpoint := serveHTTP(t, listServer(t, listPageSize, sealingIssuer(t, f, 1, "s1"), nil), opts...)
		alice, alice2, bob := overHTTP(t, endpoint, "alice", nil), overHTTP(t, endpoint, "alice", nil), overHTTP(t, endpoint, "bob", nil)
		first, cursor, err := listPage(alice, mcptoken.MethodListTools, "")
		if err != nil {
			t.Fatal(err)
		}
		second, _, err := listPage(alice2, mcptoken.MethodListTools, cursor)
		if err != nil || len(second) == 0 || slices.Contains(second, first[0]) {
			t.Errorf("same caller, other connection: %q, %v", second, err)
		}
		_, _, err = listPage(bob, mcptoken.MethodListTools, cursor)
		wantListRefused(t, bob, err)
	}
}

// Every list request needs an authenticated caller, also the first page of
// a list that fits one page: -32602 (the only error a hook can cause),
// logged as a request without a caller.
func secureListCursorsRefuseARequestWithoutCaller(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	var log syncBuffer
	for _, pageSize := range []int{listPageSize, 100} {
		nobody := inProcess(t, listServer(t, pageSize, sealingIssuer(t, f, 1, "s1"), &CursorOptions{Logger: newTextLogger(&log)}), "", nil)
		for _, method := range listMethods {
			_, _, err := listPage(nobody, method, "")
			wantListRefused(t, nobody, err)
		}
	}
	if !strings.Contains(log.String(), "no authenticated caller") {
		t.Errorf("log %q", log.String())
	}
}

// A page whose cursor cannot be sealed is logged at Error and carries a
// cursor that is refused on the next page: never mcp-go's own, never none.
func secureListCursorsMarkAnSDKCursorTooLongToSeal(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	var log syncBuffer
	s := listServer(t, 1, sealingIssuer(t, f, 1, "s1"), &CursorOptions{Logger: newTextLogger(&log)})
	s.AddTool(mcp.NewTool(strings.Repeat("a", 300)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, nil
	})
	p := inProcess(t, s, "alice", nil)
	names, next, err := listPage(p, mcptoken.MethodListTools, "")
	if err != nil || len(names) != 1 || next != string(unsealable) {
		t.Fatalf("first page %q, next %q, %v", names, next, err)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "list cursor cannot be sealed") || strings.Contains(log.String(), "aaaa") {
		t.Errorf("log %q", log.String())
	}
	_, _, err = listPage(p, mcptoken.MethodListTools, next)
	wantListRefused(t, p, err)
}

// The option keeps hooks that server.WithHooks installed before it, and
// their after-list hooks see the sealed cursor the client gets, never
// mcp-go's own.
func secureListCursorsKeepEarlierHooks(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	hooks := &server.Hooks{}
	var seen []string
	hooks.AddAfterListTools(func(_ context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
		seen = append(seen, string(res.NextCursor))
	})
	p := inProcess(t, listServer(t, listPageSize, sealingIssuer(t, f, 1, "s1"), nil, server.WithHooks(hooks)), "alice", nil)
	_, next, err := listPage(p, mcptoken.MethodListTools, "")
	if err != nil || len(seen) != 1 || seen[0] != next {
		t.Fatalf("next %q, %v; the earlier hook saw %q", next, err, seen)
	}
	if _, _, err := listPage(p, mcptoken.MethodListTools, next); err != nil {
		t.Errorf("second page: %v", err)
	}
}

func secureListCursorsRefusesMisconfiguration(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	for _, tc := range []struct {
		name   string
		issuer *ctoken.CursorIssuer
		is     []error
	}{
		{"nil issuer", nil, nil},
		{"zero issuer", new(ctoken.CursorIssuer), []error{ctoken.ErrConfig, ctoken.ErrNoKey}},
		{"signing issuer", f.issuer, []error{ctoken.ErrConfig}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := SecureListCursors(tc.issuer, nil)
			if err == nil || opt != nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("%v does not match %v", err, want)
				}
			}
		})
	}
}

// server.WithHooks after SecureListCursors replaces its hooks: the option
// cannot fail, so the first tools/list or prompts/list logs the
// misconfiguration at Error and fails closed, withholding every tool and
// prompt from its list and its calls, rather than hand out mcp-go's own
// cursors unsealed.
func secureListCursorsReplacedByLaterWithHooksFailClosed(t *testing.T) {
	f := newFleet(t, 1, "s1", nil)
	var log syncBuffer
	secure, err := SecureListCursors(sealingIssuer(t, f, 1, "s1"), &CursorOptions{Logger: newTextLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	p := inProcess(t, listServer(t, listPageSize, nil, nil, secure, server.WithHooks(&server.Hooks{})), "alice", nil)
	for _, method := range []string{mcptoken.MethodListTools, mcptoken.MethodListPrompts} {
		t.Run(method, func(t *testing.T) {
			names, next, err := listPage(p, method, "")
			if err != nil || len(names) != 0 || next != "" {
				t.Fatalf("items %q, next cursor %q, %v: served with the signing hooks replaced", names, next, err)
			}
		})
	}
	t.Run("tools/call", func(t *testing.T) {
		if res, err := p.call("tool-00", nil); err == nil {
			t.Fatalf("a withheld tool answered: %+v", res)
		}
	})
	t.Run("prompts/get", func(t *testing.T) {
		if res, err := p.prompt("prompt-00", nil); err == nil {
			t.Fatalf("a withheld prompt answered: %+v", res)
		}
	})
	if got := strings.Count(log.String(), "level=ERROR"); got != 1 || !strings.Contains(log.String(), "server.WithHooks") {
		t.Errorf("%d errors logged; log %q", got, log.String())
	}
}
