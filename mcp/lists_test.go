package ctokenmcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listPageSize is the page size of the list test servers: every list has
// several pages.
const listPageSize = 3

var listMethods = []string{mcptoken.MethodListTools, mcptoken.MethodListPrompts, mcptoken.MethodListResources, mcptoken.MethodListResourceTemplates}

// sealingIssuer returns a sealing cursor issuer of f's keys, session and
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
// is nil.
func listServer(t testing.TB, pageSize int, issuer *ctoken.CursorIssuer, who CallerFunc, log *bytes.Buffer) *mcp.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "lists", Version: "v0"}, &mcp.ServerOptions{PageSize: pageSize})
	for i := range 7 {
		mcp.AddTool(s, &mcp.Tool{Name: fmt.Sprintf("tool-%02d", i)}, func(context.Context, *mcp.CallToolRequest, stepIn) (*mcp.CallToolResult, stepOut, error) {
			return nil, stepOut{}, nil
		})
	}
	for i := range 8 {
		s.AddPrompt(&mcp.Prompt{Name: fmt.Sprintf("prompt-%02d", i)}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
	}
	read := func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	}
	for i := range 7 {
		s.AddResource(&mcp.Resource{Name: fmt.Sprintf("res-%02d", i), URI: fmt.Sprintf("test://res/%02d", i)}, read)
	}
	for i := range 5 {
		s.AddResourceTemplate(&mcp.ResourceTemplate{Name: fmt.Sprintf("tpl-%02d", i), URITemplate: fmt.Sprintf("test://tpl%02d/{id}", i)}, read)
	}
	if issuer != nil {
		opts := &CursorOptions{Caller: who}
		if log != nil {
			opts.Logger = slog.New(slog.NewTextHandler(log, nil))
		}
		if err := SecureListCursors(s, issuer, opts); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// listPage lists one page of method from cursor and returns the names (or
// URIs) of its items and its next cursor.
func listPage(ctx context.Context, cs *mcp.ClientSession, method, cursor string) ([]string, string, error) {
	var names []string
	switch method {
	case mcptoken.MethodListTools:
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.Tools {
			names = append(names, it.Name)
		}
		return names, res.NextCursor, nil
	case mcptoken.MethodListPrompts:
		res, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.Prompts {
			names = append(names, it.Name)
		}
		return names, res.NextCursor, nil
	case mcptoken.MethodListResources:
		res, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.Resources {
			names = append(names, it.URI)
		}
		return names, res.NextCursor, nil
	case mcptoken.MethodListResourceTemplates:
		res, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		for _, it := range res.ResourceTemplates {
			names = append(names, it.URITemplate)
		}
		return names, res.NextCursor, nil
	}
	return nil, "", fmt.Errorf("no method %q", method)
}

// allPages pages through method and returns every page and every next
// cursor.
func allPages(t testing.TB, cs *mcp.ClientSession, method string) (pages [][]string, cursors []string) {
	t.Helper()
	cursor := ""
	for range 20 {
		names, next, err := listPage(context.Background(), cs, method, cursor)
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

// listHTTP serves s over streamable HTTP on 127.0.0.1 behind bearer
// authentication, stateless or with sessions.
func listHTTP(t testing.TB, s *mcp.Server, stateless bool) string {
	t.Helper()
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, ok := testUsers[token]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: stateless})
	srv := httptest.NewServer(auth.RequireBearerToken(verify, nil)(h))
	t.Cleanup(srv.Close)
	return srv.URL
}

// postRecorder adds a bearer token to every request and records the body
// of every response to a POST (a GET is the open event stream of a session,
// which would never end).
type postRecorder struct {
	token string
	mu    sync.Mutex
	wire  strings.Builder
}

func (p *postRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.mu.Lock()
	p.wire.Write(body)
	p.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, err
}

func (p *postRecorder) seen() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wire.String()
}

// dialHTTP joins a client to endpoint as the user of token.
func dialHTTP(t testing.TB, endpoint, token string) (*mcp.ClientSession, *postRecorder) {
	t.Helper()
	rec := &postRecorder{token: token}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: rec}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, rec
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
		{"an SDK cursor too long to seal is refused", secureListCursorsRefuseAnSDKCursorTooLongToSeal},
		{"a 212-byte SDK item ID is carried", secureListCursorsCarryA212ByteSDKItemID},
		{"misconfiguration is refused", secureListCursorsRefusesMisconfiguration},
		{"unknown list types are refused", secureListCursorsRefuseUnknownListTypes},
	} {
		t.Run(tc.name, tc.test)
	}
}

// secureListCursorsPagesEveryListUnchanged pages through the four
// lists of a secured server, with go-sdk's client over in-memory
// transports and over streamable HTTP with sessions and without, and
// compares every page with the same server without ctoken; no cursor of
// the SDK appears in any cursor of the secured server, nor anywhere on the
// wire.
func secureListCursorsPagesEveryListUnchanged(t *testing.T) {
	f := newFleet(t, 1, "s1")
	issuer := sealingIssuer(t, f, 1, "s1")
	plain := connect(t, listServer(t, listPageSize, nil, nil, nil), nil)
	for _, tr := range []struct {
		name string
		dial func(t *testing.T) (*mcp.ClientSession, *postRecorder)
	}{
		{"in-memory", func(t *testing.T) (*mcp.ClientSession, *postRecorder) {
			return connect(t, listServer(t, listPageSize, issuer, FixedCaller("alice"), nil), nil), nil
		}},
		{"streamable HTTP with sessions", func(t *testing.T) (*mcp.ClientSession, *postRecorder) {
			cs, bt := dialHTTP(t, listHTTP(t, listServer(t, listPageSize, issuer, TokenUserID, nil), false), "alice-token")
			if cs.ID() == "" {
				t.Fatal("no session ID over stateful streamable HTTP")
			}
			return cs, bt
		}},
		{"stateless streamable HTTP", func(t *testing.T) (*mcp.ClientSession, *postRecorder) {
			return dialHTTP(t, listHTTP(t, listServer(t, listPageSize, issuer, TokenUserID, nil), true), "alice-token")
		}},
	} {
		t.Run(tr.name, func(t *testing.T) {
			cs, bt := tr.dial(t)
			for _, method := range listMethods {
				want, sdkCursors := allPages(t, plain, method)
				got, cursors := allPages(t, cs, method)
				if len(want) < 2 || !slices.EqualFunc(got, want, slices.Equal) {
					t.Errorf("%s: pages %q, want %q", method, got, want)
				}
				for _, c := range cursors {
					for _, sdk := range sdkCursors {
						if strings.Contains(c, sdk) {
							t.Errorf("%s: cursor %q shows the SDK's %q", method, c, sdk)
						}
					}
				}
				if bt != nil {
					for _, sdk := range sdkCursors {
						if strings.Contains(bt.seen(), sdk) {
							t.Errorf("%s: the SDK's cursor %q went over the wire", method, sdk)
						}
					}
				}
			}
		})
	}
}

// wantListRefused checks that err is the -32602 error of a refused list
// cursor with ctoken code code.
func wantListRefused(t testing.TB, err error, code int) {
	t.Helper()
	if err == nil {
		t.Fatal("cursor accepted")
	}
	wantRPCError(t, err, jsonrpc.CodeInvalidParams, code)
}

// secureListCursorsRefuseForeignCursors presents, for each list
// method, another caller's cursor, a tampered one, one of another session,
// one of another list method, an expired one, and the SDK's own cursor: each is refused with -32602 and its
// documented ctoken code, and the log says why without the cursor.
func secureListCursorsRefuseForeignCursors(t *testing.T) {
	f := newFleet(t, 1, "s1")
	issuer := sealingIssuer(t, f, 1, "s1")
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	s := listServer(t, listPageSize, nil, nil, nil)
	if err := SecureListCursors(s, issuer, &CursorOptions{Logger: logger}); err != nil {
		t.Fatal(err)
	}
	endpoint := listHTTP(t, s, false)
	alice, _ := dialHTTP(t, endpoint, "alice-token")
	alice2, _ := dialHTTP(t, endpoint, "alice-token")
	bob, _ := dialHTTP(t, endpoint, "bob-token")
	plain := connect(t, listServer(t, listPageSize, nil, nil, nil), nil)
	ctx := context.Background()
	for i, method := range listMethods {
		_, cursor, err := listPage(ctx, alice, method, "")
		if err != nil || cursor == "" {
			t.Fatalf("%s: %v, cursor %q", method, err, cursor)
		}
		_, sdkCursor, _ := listPage(ctx, plain, method, "")
		tampered := []byte(cursor)
		tampered[len(tampered)/2] ^= 1
		other := listMethods[(i+1)%len(listMethods)]
		for _, tc := range []struct {
			name    string
			cs      *mcp.ClientSession
			method  string
			cursor  string
			code    int
			reason  string
			advance time.Duration
		}{
			{"another caller", bob, method, cursor, ctoken.CodeCursorInvalid, "sealed cursor does not open", 0},
			{"another session", alice2, method, cursor, ctoken.CodeCursorInvalid, "sealed cursor does not open", 0},
			{"another list method", alice, other, cursor, ctoken.CodeCursorInvalid, "sealed cursor does not open", 0},
			{"tampered", alice, method, string(tampered), ctoken.CodeCursorInvalid, "", 0},
			{"the SDK's own cursor", alice, method, sdkCursor, ctoken.CodeCursorInvalid, "", 0},
			{"expired", alice, method, cursor, ctoken.CodeCursorExpired, "older than TTL", ctoken.DefaultCursorTTL + time.Second},
		} {
			t.Run(method+"/"+tc.name, func(t *testing.T) {
				f.clock.advance(tc.advance)
				defer f.clock.advance(-tc.advance)
				before := len(log.String())
				names, next, err := listPage(ctx, tc.cs, tc.method, tc.cursor)
				if names != nil || next != "" {
					t.Errorf("refused cursor listed %q, next %q", names, next)
				}
				wantListRefused(t, err, tc.code)
				logged := log.String()[before:]
				if !strings.Contains(logged, "list cursor rejected") || !strings.Contains(logged, tc.reason) || !strings.Contains(logged, "method="+tc.method) {
					t.Errorf("log %q lacks the rejection with reason %q", logged, tc.reason)
				}
				if strings.Contains(logged, tc.cursor) {
					t.Errorf("log %q shows the cursor", logged)
				}
			})
		}
		// The cursor still works for its own caller, session and method.
		if _, _, err := listPage(ctx, alice, method, cursor); err != nil {
			t.Errorf("%s: own cursor refused after the refusals: %v", method, err)
		}
	}
}

// Without a session (in-memory transports), a cursor is bound to the
// caller and the method only: it works for the same caller on another
// connection, and not for another caller; after a restart with a random
// issuer session it is expired (1020: list again). (With sessions, a
// restart ends the session, and the SDK answers before ctoken.)
func secureListCursorsWithoutSessionBindTheCaller(t *testing.T) {
	f := newFleet(t, 1, "s1")
	issuer := sealingIssuer(t, f, 1, "s1")
	alice := connect(t, listServer(t, listPageSize, issuer, FixedCaller("alice"), nil), nil)
	alice2 := connect(t, listServer(t, listPageSize, issuer, FixedCaller("alice"), nil), nil)
	bob := connect(t, listServer(t, listPageSize, issuer, FixedCaller("bob"), nil), nil)
	restarted := connect(t, listServer(t, listPageSize, sealingIssuer(t, f, 1, "s2"), FixedCaller("alice"), nil), nil)
	ctx := context.Background()
	first, cursor, err := listPage(ctx, alice, mcptoken.MethodListTools, "")
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := listPage(ctx, alice2, mcptoken.MethodListTools, cursor)
	if err != nil || len(second) == 0 || slices.Contains(second, first[0]) {
		t.Errorf("same caller, other connection: %q, %v", second, err)
	}
	_, _, err = listPage(ctx, bob, mcptoken.MethodListTools, cursor)
	wantListRefused(t, err, ctoken.CodeCursorInvalid)
	_, _, err = listPage(ctx, restarted, mcptoken.MethodListTools, cursor)
	wantListRefused(t, err, ctoken.CodeCursorExpired)
}

// Every list request needs an authenticated caller, also the first page of
// a list that fits one page: -32603, logged.
func secureListCursorsRefuseARequestWithoutCaller(t *testing.T) {
	f := newFleet(t, 1, "s1")
	var log bytes.Buffer
	for _, pageSize := range []int{listPageSize, 100} {
		cs := connect(t, listServer(t, pageSize, sealingIssuer(t, f, 1, "s1"), TokenUserID, &log), nil)
		for _, method := range listMethods {
			_, _, err := listPage(context.Background(), cs, method, "")
			wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
		}
	}
	if !strings.Contains(log.String(), "no authenticated caller") {
		t.Errorf("log %q", log.String())
	}
}

// A page whose SDK cursor does not fit a cursor's state is -32603 and
// logged at Error, not sent as the last page.
func secureListCursorsRefuseAnSDKCursorTooLongToSeal(t *testing.T) {
	f := newFleet(t, 1, "s1")
	var log bytes.Buffer
	s := mcp.NewServer(&mcp.Implementation{Name: "lists", Version: "v0"}, &mcp.ServerOptions{PageSize: 1})
	read := func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	}
	long := "test://res/" + strings.Repeat("x", 300)
	s.AddResource(&mcp.Resource{Name: "long", URI: long}, read)
	s.AddResource(&mcp.Resource{Name: "short", URI: "test://res/~"}, read)
	if err := SecureListCursors(s, sealingIssuer(t, f, 1, "s1"), &CursorOptions{Caller: FixedCaller("alice"), Logger: slog.New(slog.NewTextHandler(&log, nil))}); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, s, nil)
	_, _, err := listPage(context.Background(), cs, mcptoken.MethodListResources, "")
	wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "list cursor cannot be sealed") || strings.Contains(log.String(), "xxxx") {
		t.Errorf("log %q", log.String())
	}
}

// The longest go-sdk item ID a sealed list cursor carries, with the
// default cursor issuer (StateBudget 256): 212 bytes (go-sdk's cursor is
// the gob of the ID, 43 bytes more, and the state takes one byte); 213 is
// refused as too long.
func secureListCursorsCarryA212ByteSDKItemID(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{212, true}, {213, false}} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			f := newFleet(t, 1, "s1")
			s := mcp.NewServer(&mcp.Implementation{Name: "lists", Version: "v0"}, &mcp.ServerOptions{PageSize: 1})
			read := func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{}, nil
			}
			long := "test://a/" + strings.Repeat("x", tc.n-len("test://a/"))
			s.AddResource(&mcp.Resource{Name: "long", URI: long}, read)
			s.AddResource(&mcp.Resource{Name: "short", URI: "test://b"}, read)
			if err := SecureListCursors(s, sealingIssuer(t, f, 1, "s1"), &CursorOptions{Caller: FixedCaller("alice")}); err != nil {
				t.Fatal(err)
			}
			cs := connect(t, s, nil)
			names, next, err := listPage(context.Background(), cs, mcptoken.MethodListResources, "")
			if !tc.ok {
				wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
				return
			}
			if err != nil || len(names) != 1 || names[0] != long || next == "" {
				t.Fatalf("first page %d items, next %q, %v", len(names), next, err)
			}
			if names, _, err = listPage(context.Background(), cs, mcptoken.MethodListResources, next); err != nil || len(names) != 1 || names[0] != "test://b" {
				t.Fatalf("second page %q, %v", names, err)
			}
		})
	}
}

func secureListCursorsRefusesMisconfiguration(t *testing.T) {
	f := newFleet(t, 1, "s1")
	s := mcp.NewServer(&mcp.Implementation{Name: "lists", Version: "v0"}, nil)
	for _, tc := range []struct {
		name   string
		server *mcp.Server
		issuer *ctoken.CursorIssuer
		is     []error
	}{
		{"nil server", nil, sealingIssuer(t, f, 1, "s1"), nil},
		{"nil issuer", s, nil, nil},
		{"zero issuer", s, new(ctoken.CursorIssuer), []error{ctoken.ErrConfig, ctoken.ErrNoKey}},
		{"signing issuer", s, f.issuer, []error{ctoken.ErrConfig}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := SecureListCursors(tc.server, tc.issuer, nil)
			if err == nil {
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

// A list method whose request or result is not one of the SDK's list types
// is refused with -32603 and logged at Error, never passed through with its
// cursor unsealed.
func secureListCursorsRefuseUnknownListTypes(t *testing.T) {
	f := newFleet(t, 1, "s1")
	var log bytes.Buffer
	core, err := mcptoken.NewListCursors(sealingIssuer(t, f, 1, "s1"), integration(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	l := &listCursors{core: core, caller: FixedCaller("alice")}
	called := false
	next := func(res mcp.Result) mcp.MethodHandler {
		return func(context.Context, string, mcp.Request) (mcp.Result, error) {
			called = true
			return res, nil
		}
	}
	for _, tc := range []struct {
		name    string
		req     mcp.Request
		res     mcp.Result
		handler bool
	}{
		{"request", &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "x"}}, &mcp.ListToolsResult{NextCursor: "c"}, false},
		{"result", &mcp.ListToolsRequest{}, &mcp.CallToolResult{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.Reset()
			called = false
			res, err := l.middleware(next(tc.res))(context.Background(), mcptoken.MethodListTools, tc.req)
			if res != nil || called != tc.handler {
				t.Errorf("result %v, handler called %v", res, called)
			}
			wantRPCError(t, err, jsonrpc.CodeInternalError, 0)
			if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "unknown type") {
				t.Errorf("log %q", log.String())
			}
		})
	}
	t.Run("no result", func(t *testing.T) {
		res, err := l.middleware(next(nil))(context.Background(), mcptoken.MethodListTools, &mcp.ListToolsRequest{})
		if res != nil || err != nil {
			t.Errorf("%v, %v", res, err)
		}
	})
}
