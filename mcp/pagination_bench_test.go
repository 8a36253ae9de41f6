package ctokenmcp

// The cost ctoken adds to a real paginated MCP call: an in-memory go-sdk
// tools/call round trip (client marshals the call, server dispatches,
// validates the input against the tool's schema, runs the handler, marshals
// the result, client decodes it) of a tool that checks the presented cursor
// with Cursors.Turn and issues the next with Turn.Next, beside the same
// tool handing out a constant cursor of the same length and checking
// nothing. None of these asserts anything about time.

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchSearchIn are the arguments of the benchmark's paginated tool: the
// small arguments of the root package's fingerprint benchmarks plus the
// cursor.
type benchSearchIn struct {
	Query   string            `json:"query"`
	Repo    string            `json:"repo"`
	PerPage int               `json:"per_page"`
	Labels  []string          `json:"labels"`
	Filter  map[string]string `json:"filter"`
	Cursor  string            `json:"cursor,omitempty"`
}

type benchSearchOut struct {
	Items []string `json:"items"`
	Next  string   `json:"next,omitempty"`
}

// benchItems is the listing the tool pages through, 10 items a page.
var benchItems = func() []string {
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprintf("issue-%04d", i)
	}
	return items
}()

const benchPerPage = 10

// benchSearchArgs is a first-page call of the benchmark tool.
var benchSearchArgs = benchSearchIn{
	Query:   "is:open label:bug sort:updated-desc",
	Repo:    "ctoken/ctoken",
	PerPage: benchPerPage,
	Labels:  []string{"p1", "backend"},
	Filter:  map[string]string{"state": "open", "author": "octocat"},
}

// benchPaginationServer returns a server with two tools over benchItems:
// "search" pages with Cursors (Turn, then Turn.Next) and adds the wall time
// those two calls take to *inCtoken; "search_constant" does the same
// listing work but takes page 1 for any cursor and returns constant as the
// next cursor.
func benchPaginationServer(b *testing.B, constant string, inCtoken *atomic.Int64) *mcp.Server {
	b.Helper()
	f := newFleet(b, 1, "s1")
	cursors, err := NewCursors(f.issuer, &CursorOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	page := func(n uint32) []string {
		start := min(int(n)*benchPerPage, len(benchItems))
		return benchItems[start:min(start+benchPerPage, len(benchItems))]
	}
	search := func(ctx context.Context, req *mcp.CallToolRequest, in benchSearchIn) (*mcp.CallToolResult, benchSearchOut, error) {
		bound := in
		bound.Cursor = ""
		t0 := time.Now()
		turn, err := cursors.Turn(ctx, req, bound, in.Cursor)
		if err != nil {
			return nil, benchSearchOut{}, err
		}
		t1 := time.Now()
		out := benchSearchOut{Items: page(turn.Payload.Page)}
		t2 := time.Now()
		if out.Next, err = turn.Next(turn.Payload.Page+1, nil); err != nil {
			return nil, benchSearchOut{}, err
		}
		inCtoken.Add(int64(t1.Sub(t0) + time.Since(t2)))
		return nil, out, nil
	}
	searchConstant := func(ctx context.Context, req *mcp.CallToolRequest, in benchSearchIn) (*mcp.CallToolResult, benchSearchOut, error) {
		var n uint32
		if in.Cursor != "" {
			n = 1
		}
		return nil, benchSearchOut{Items: page(n), Next: constant}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "search"}, search)
	mcp.AddTool(s, &mcp.Tool{Name: "search_constant"}, searchConstant)
	return s
}

// benchCall calls tool with args and returns the next cursor of its
// result.
func benchCall(b *testing.B, cs *mcp.ClientSession, tool string, args benchSearchIn) string {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		b.Fatal(err)
	}
	if res.IsError {
		b.Fatalf("%s: tool error: %v", tool, res.Content)
	}
	m, _ := res.StructuredContent.(map[string]any)
	next, _ := m["next"].(string)
	items, _ := m["items"].([]any)
	if next == "" || len(items) != benchPerPage {
		b.Fatalf("%s: unexpected result %v", tool, res.StructuredContent)
	}
	return next
}

// BenchmarkPaginatedToolCall measures a go-sdk tools/call round trip over
// in-memory transports that presents a page-1 cursor and receives the
// page-2 cursor. ctoken is the tool paging with Cursors.Turn and
// Turn.Next; constant is the same tool returning a constant cursor of
// the same length. overhead alternates the two calls (each goes first in
// every other round) and reports how much
// longer the ctoken call takes, in percent of the constant call, by wall
// time (overhead-%) and by the CPU time of the whole process, every
// goroutine of client and server included (overhead-cpu-%). Both
// differences are small beside the noise of a round trip that allocates
// about 500 KB (mostly the SDK's JSON decoding), so overhead also reports
// the wall time the tool handler spends in Turn and Turn.Next (ctoken-ns/call)
// and that time in percent of the constant call (ctoken-share-%).
func BenchmarkPaginatedToolCall(b *testing.B) {
	// The cursor a client holds after the first page, found by calling
	// the tool once; the constant tool returns one of the same length.
	var inCtoken atomic.Int64
	probe := connect(b, benchPaginationServer(b, "unused", &inCtoken), nil)
	first := benchSearchArgs
	first.Cursor = benchCall(b, probe, "search", benchSearchArgs)
	constant := strings.Repeat("c", len(first.Cursor))

	cs := connect(b, benchPaginationServer(b, constant, &inCtoken), nil)
	presented := first
	if next := benchCall(b, cs, "search", presented); len(next) != len(constant) {
		b.Fatalf("cursor length changed from %d to %d", len(constant), len(next))
	}
	constantArgs := first
	constantArgs.Cursor = constant
	b.Logf("arguments %d bytes, cursor %d bytes", len(mustJSON(b, presented)), len(constant))

	for _, tc := range []struct {
		name, tool string
		args       benchSearchIn
	}{{"ctoken", "search", presented}, {"constant", "search_constant", constantArgs}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				benchCall(b, cs, tc.tool, tc.args)
			}
			if end := processCPU(); cpu >= 0 && end >= 0 {
				b.ReportMetric(float64(end-cpu)/float64(b.N), "process-cpu-ns/op")
			}
		})
	}
	b.Run("overhead", func(b *testing.B) {
		var wall, cpu [2]time.Duration
		before := inCtoken.Load()
		calls := [2]struct {
			tool string
			args benchSearchIn
		}{{"search", presented}, {"search_constant", constantArgs}}
		round := 0
		for b.Loop() {
			round++
			for j := range calls {
				i := (j + round) % 2 // alternate which goes first
				t0, c0 := time.Now(), processCPU()
				benchCall(b, cs, calls[i].tool, calls[i].args)
				wall[i] += time.Since(t0)
				cpu[i] += time.Duration(processCPU() - c0)
			}
		}
		b.ReportMetric(100*float64(wall[0]-wall[1])/float64(wall[1]), "overhead-%")
		spent := float64(inCtoken.Load()-before) / float64(b.N)
		b.ReportMetric(spent, "ctoken-ns/call")
		b.ReportMetric(100*spent*float64(b.N)/float64(wall[1]), "ctoken-share-%")
		if cpu[1] > 0 {
			b.ReportMetric(100*float64(cpu[0]-cpu[1])/float64(cpu[1]), "overhead-cpu-%")
		}
	})
}

func mustJSON(b *testing.B, v any) []byte {
	b.Helper()
	text, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return text
}

func BenchmarkCursorsResumeAndNext(b *testing.B) {
	f := newFleet(b, 1, "s1")
	cursors, err := NewCursors(f.issuer, &CursorOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "list"}}
	in := listIn{Prefix: "a"}
	cursor, err := cursors.Next(ctx, req, in, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := cursors.Resume(ctx, req, in, cursor)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cursors.Next(ctx, req, in, p.Page+1, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCursorsTurnAndNext is a page turn as handlers write it: Turn
// verifies the cursor and keeps the scope, Turn.Next issues the next
// cursor; the arguments are fingerprinted once (twice with Resume and Next).
func BenchmarkCursorsTurnAndNext(b *testing.B) {
	f := newFleet(b, 1, "s1")
	cursors, err := NewCursors(f.issuer, &CursorOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "list"}}
	in := listIn{Prefix: "a"}
	cursor, err := cursors.Next(ctx, req, in, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		turn, err := cursors.Turn(ctx, req, in, cursor)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := turn.Next(turn.Payload.Page+1, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkArgsFingerprintOfPageArgs is the floor of the page-turn
// benchmarks: one fingerprint of the same arguments, the work Turn does
// once and Resume and Next do twice.
func BenchmarkArgsFingerprintOfPageArgs(b *testing.B) {
	in := listIn{Prefix: "a"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ctoken.ArgsFingerprint(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStatesSealAndOpen(b *testing.B) {
	f := newFleet(b, 1, "s1")
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "ask", Arguments: json.RawMessage(`{"target":"prod"}`)}}
	b.ReportAllocs()
	for b.Loop() {
		st, err := SealJSON(ctx, states, req, askState{Target: "prod", Plan: 42})
		if err != nil {
			b.Fatal(err)
		}
		req.Params.RequestState = st
		if _, _, err := OpenJSON[askState](ctx, states, req); err != nil {
			b.Fatal(err)
		}
		req.Params.RequestState = ""
	}
}

// benchListServer returns a server of 100 tools, 10 a page, secured with
// issuer unless issuer is nil, and a client connected to it as alice.
func benchListServer(b *testing.B, issuer *ctoken.CursorIssuer) *mcp.ClientSession {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v0"}, &mcp.ServerOptions{PageSize: benchPerPage})
	for i := range 100 {
		mcp.AddTool(s, &mcp.Tool{Name: fmt.Sprintf("tool-%03d", i)}, func(context.Context, *mcp.CallToolRequest, stepIn) (*mcp.CallToolResult, stepOut, error) {
			return nil, stepOut{}, nil
		})
	}
	if issuer != nil {
		if err := SecureListCursors(s, issuer, &CursorOptions{Caller: FixedCaller("alice")}); err != nil {
			b.Fatal(err)
		}
	}
	return connect(b, s, nil)
}

// BenchmarkListPageTurn measures one tools/list page turn of go-sdk's
// client over in-memory transports (page 2 of 10 tools, presenting the
// page-1 cursor and receiving the page-2 cursor): sdk is the server without
// ctoken, SecureListCursors the same server with its list cursors sealed.
// core is the work SecureListCursors adds, mcptoken.ListCursors Open and
// Seal of the same SDK cursor, and its floor aes-gcm is one AES-256-GCM
// seal and one open of the same state bytes under a fixed key, with a
// random nonce, in the same run. overhead alternates the two page turns
// (each goes first in every other round) and reports how much longer the
// secured one takes, in percent of the SDK's, by wall time.
func BenchmarkListPageTurn(b *testing.B) {
	f := newFleet(b, 1, "s1")
	issuer := sealingIssuer(b, f, 1, "s1")
	ctx := context.Background()
	turn := func(b *testing.B, cs *mcp.ClientSession) {
		_, first, err := listPage(ctx, cs, mcptoken.MethodListTools, "")
		if err != nil || first == "" {
			b.Fatal(first, err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if names, next, err := listPage(ctx, cs, mcptoken.MethodListTools, first); err != nil || next == "" || len(names) != benchPerPage {
				b.Fatal(names, next, err)
			}
		}
	}
	plain := benchListServer(b, nil)
	_, sdkCursor, err := listPage(ctx, plain, mcptoken.MethodListTools, "")
	if err != nil {
		b.Fatal(err)
	}
	secured := benchListServer(b, issuer)
	b.Run("sdk", func(b *testing.B) { turn(b, plain) })
	b.Run("SecureListCursors", func(b *testing.B) { turn(b, secured) })
	b.Run("overhead", func(b *testing.B) {
		var first [2]string
		sessions := [2]*mcp.ClientSession{secured, plain}
		for i, cs := range sessions {
			if _, first[i], err = listPage(ctx, cs, mcptoken.MethodListTools, ""); err != nil {
				b.Fatal(err)
			}
		}
		var wall [2]time.Duration
		round := 0
		for b.Loop() {
			round++
			for j := range sessions {
				i := (j + round) % 2 // alternate which goes first
				t0 := time.Now()
				if _, _, err := listPage(ctx, sessions[i], mcptoken.MethodListTools, first[i]); err != nil {
					b.Fatal(err)
				}
				wall[i] += time.Since(t0)
			}
		}
		b.ReportMetric(100*float64(wall[0]-wall[1])/float64(wall[1]), "overhead-%")
	})

	core, err := mcptoken.NewListCursors(issuer, integration(nil))
	if err != nil {
		b.Fatal(err)
	}
	wire, err := core.Seal(ctx, "alice", "", mcptoken.MethodListTools, sdkCursor)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("SDK cursor %d bytes, sealed cursor %d bytes", len(sdkCursor), len(wire))
	b.Run("core", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			inner, err := core.Open(ctx, "alice", "", mcptoken.MethodListTools, wire)
			if err != nil || inner != sdkCursor {
				b.Fatal(inner, err)
			}
			if _, err := core.Seal(ctx, "alice", "", mcptoken.MethodListTools, inner); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-aes-gcm", func(b *testing.B) {
		state, err := base64.URLEncoding.DecodeString(sdkCursor)
		if err != nil {
			b.Fatal(err)
		}
		block, err := aes.NewCipher(make([]byte, 32))
		if err != nil {
			b.Fatal(err)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 0, len(state)+aead.Overhead())
		b.ReportAllocs()
		for b.Loop() {
			sealed := aead.Seal(buf[:0], nil, state, nil)
			if _, err := aead.Open(nil, nil, sealed, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
