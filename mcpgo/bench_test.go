package ctokenmcpgo

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// oneRound is a tool that asks once and then answers, with a plaintext
// state.
func oneRound(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if req.Params.RequestState == "" {
		return server.NewInputRequestBuilder("step:1").Elicit("ok", mcp.ElicitationParams{Message: "?", RequestedSchema: confirmSchema}).ToolResult(), nil
	}
	return mcp.NewToolResultText("done"), nil
}

// benchFlow measures one whole two-round tools/call through mcp-go's
// in-process client, with and without SecureRequestState: the difference is
// the cost of sealing the state once and opening it once.
func benchFlow(b *testing.B, opts ...server.ServerOption) {
	s := server.NewMCPServer("bench", "v0", append(opts, server.WithToolCapabilities(false))...)
	s.AddTool(mcp.NewTool("one"), oneRound)
	p := inProcess(b, s, "alice", &elicitor{answer: true})
	req := mcp.CallToolRequest{}
	req.Params.Name = "one"
	req.Params.Arguments = map[string]any{"target": "prod"}
	b.ReportAllocs()
	for b.Loop() {
		res, err := p.c.CallTool(p.ctx, req)
		if err != nil || text(res) != "done" {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkTwoRoundCallPlain(b *testing.B) { benchFlow(b) }

func BenchmarkTwoRoundCallSecured(b *testing.B) {
	f := newFleet(b, 1, "s1", nil)
	states, err := NewStates(f.codec, nil)
	if err != nil {
		b.Fatal(err)
	}
	benchFlow(b, SecureRequestState(states))
}

// BenchmarkSealToolAndOpenTool is the work SecureRequestState adds to one
// round of a call: one seal on the way out and one open on the way in.
func BenchmarkSealToolAndOpenTool(b *testing.B) {
	f := newFleet(b, 1, "s1", nil)
	states, err := NewStates(f.codec, &StateOptions{Caller: FixedCaller("alice")})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := mcp.CallToolRequest{}
	req.Params.Name = "ask"
	req.Params.RawArguments = json.RawMessage(`{"target":"prod"}`)
	b.ReportAllocs()
	for b.Loop() {
		st, err := states.SealTool(ctx, req, "step:1")
		if err != nil {
			b.Fatal(err)
		}
		req.Params.RequestState = st
		if _, _, err := states.OpenTool(ctx, req); err != nil {
			b.Fatal(err)
		}
		req.Params.RequestState = ""
	}
}

// BenchmarkListPageTurn measures one tools/list page turn of mcp-go's
// in-process client (page 2 of 10 tools, presenting the page-1 cursor and
// receiving the page-2 cursor): mcp-go is the server without ctoken,
// SecureListCursors the same server with its list cursors sealed, and
// floor-aes-gcm one AES-256-GCM seal and one open, with a random nonce, of
// the bytes of mcp-go's cursor, in the same run.
func BenchmarkListPageTurn(b *testing.B) {
	f := newFleet(b, 1, "s1", nil)
	build := func(b *testing.B, secure bool) *peer {
		var opts []server.ServerOption
		if secure {
			lists, err := SecureListCursors(sealingIssuer(b, f, 1, "s1"), nil)
			if err != nil {
				b.Fatal(err)
			}
			opts = append(opts, lists)
		}
		s := server.NewMCPServer("bench", "v0", append(opts, server.WithPaginationLimit(10), server.WithToolCapabilities(false))...)
		for i := range 100 {
			s.AddTool(mcp.NewTool(fmt.Sprintf("tool-%03d", i)), oneRound)
		}
		return inProcess(b, s, "alice", nil)
	}
	var sdkCursor string
	for _, tc := range []struct {
		name   string
		secure bool
	}{{"mcp-go", false}, {"SecureListCursors", true}} {
		b.Run(tc.name, func(b *testing.B) {
			p := build(b, tc.secure)
			_, first, err := listPage(p, mcptoken.MethodListTools, "")
			if err != nil || first == "" {
				b.Fatal(first, err)
			}
			if !tc.secure {
				sdkCursor = first
			}
			b.ReportAllocs()
			for b.Loop() {
				if names, next, err := listPage(p, mcptoken.MethodListTools, first); err != nil || next == "" || len(names) != 10 {
					b.Fatal(names, next, err)
				}
			}
		})
	}
	b.Run("floor-aes-gcm", func(b *testing.B) {
		state, err := base64.StdEncoding.DecodeString(sdkCursor)
		if err != nil || len(state) == 0 {
			b.Fatal(sdkCursor, err)
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

// benchTaskCall measures CallTool of newTaskServer's "echo", a tool that
// answers at once, over loopback HTTP behind Tasks.Handler, tasks in a
// replay.MemoryStore polled every poll at most (0: the default), and
// reports the calls' median and 99th percentile.
func benchTaskCall(b *testing.B, task bool, poll time.Duration) {
	ts := newTaskServerPolled(b, poll)
	p := overHTTP(b, ts.endpoint, "alice", nil)
	req := mcp.CallToolRequest{}
	req.Params.Name = "echo"
	req.Params.Arguments = map[string]any{"say": "hi"}
	var opts CallOptions
	if task {
		opts.Task = &TaskOptions{}
	}
	var took []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		res, err := CallTool(p.ctx, p.c, req, opts)
		took = append(took, time.Since(t0))
		if err != nil || text(res) != "hi for alice" {
			b.Fatal(res, err)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkToolCallPlain is one tools/call of a tool that answers at once,
// from a client that did not declare the Tasks extension: mcp-go runs it.
func BenchmarkToolCallPlain(b *testing.B) { benchTaskCall(b, false, 0) }

// BenchmarkToolCallTask is the same call as a task: created in the store,
// run in the background, polled with tasks/get until completed, at the
// default PollInterval (500 ms).
func BenchmarkToolCallTask(b *testing.B) { benchTaskCall(b, true, 0) }
