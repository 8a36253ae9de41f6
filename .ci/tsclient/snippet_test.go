package tsclient

// The TypeScript program of docs/mcp.md ("The official TypeScript
// client"), run as written against the page's own Go tools: "pay"
// (idempotency_key, to, cents) and the two-round "deploy" (service,
// version; it asks "confirm"), each wrapped by ctokenmcp.Idempotency, its
// request state sealed single use with AnswerRetries. The server loses
// the first answer of each call that acts (pay, and deploy's round two):
// the program must retry exactly what settles with the same key or state,
// and each tool must act once.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// docSnippet returns the first ```js block after heading in the page at
// path.
func docSnippet(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	_, code, ok := strings.Cut(after, "\n```js\n")
	if !ok {
		t.Fatalf("%s has no js block after %q", path, heading)
	}
	code, _, ok = strings.Cut(code, "\n```\n")
	if !ok {
		t.Fatalf("%s: the js block after %q does not end", path, heading)
	}
	return code
}

// The page's deploy tool: its input and output.
type docDeployIn struct {
	Service string `json:"service"`
	Version string `json:"version"`
}

type docDeployOut struct {
	Status string `json:"status"`
	Plan   string `json:"plan,omitempty"`
	Deploy int32  `json:"deploy,omitempty"`
}

func TestDocsSnippetRunsAsWritten(t *testing.T) {
	node, modules := os.Getenv("CTOKEN_TSCLIENT_NODE"), os.Getenv("CTOKEN_TSCLIENT_MODULES")
	if node == "" || modules == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES are not set, but CI=true: run .ci/mcp-tsclient.sh")
		}
		t.Skip("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES not set: run .ci/mcp-tsclient.sh")
	}
	code := docSnippet(t, "../../docs/mcp.md", "## The official TypeScript client")

	var payments, deploys atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "v0"}, nil)
	idem, err := ctokenmcp.NewIdempotency(ctokenmcp.IdempotencyOptions{
		IdempotencyConfig: mcptoken.IdempotencyConfig{Keys: keyring(t, 4), Store: replay.NewMemoryStore(1 << 10), KeyArgument: "idempotency_key", KeyFromMeta: true},
		Caller:            ctokenmcp.FixedCaller("agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// pay, as the page declares it.
	s.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object",
	"properties":{"idempotency_key":{"type":"string","description":"a fresh UUID per payment; the same on every retry of it"},
	"to":{"type":"string"},"cents":{"type":"integer"}},"required":["idempotency_key","to","cents"]}`)},
		idem.Wrap(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				To    string `json:"to"`
				Cents int    `json:"cents"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.To == "" || in.Cents <= 0 {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "to and a positive cents are required"}
			}
			n := payments.Add(1)
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("paid %d cents to %s", in.Cents, in.To)}},
				StructuredContent: map[string]any{"payment": n, "to": in.To, "cents": in.Cents},
			}, nil
		}))
	// deploy, as the page writes it, wrapped by the same Idempotency.
	mcp.AddTool(s, &mcp.Tool{Name: "deploy"}, ctokenmcp.WrapFor(idem, func(ctx context.Context, req *mcp.CallToolRequest, in docDeployIn) (*mcp.CallToolResult, docDeployOut, error) {
		if req.Params.RequestState == "" { // round one: ask, and remember the plan
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{Message: "Deploy " + in.Service + " " + in.Version + "?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}},
				RequestState: "plan: 3 steps",
			}, docDeployOut{}, nil
		}
		if c := req.Params.InputResponses["confirm"]; c == nil {
			return nil, docDeployOut{}, errors.New("no confirmation")
		}
		return nil, docDeployOut{Status: "deployed", Plan: req.Params.RequestState, Deploy: deploys.Add(1)}, nil
	}))
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: keyring(t, 5), Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool, Replay: replay.NewMemoryStore(1 << 10),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctokenmcp.SecureRequestState(s, codec, &ctokenmcp.StateOptions{Caller: ctokenmcp.FixedCaller("agent"), AnswerRetries: true}); err != nil {
		t.Fatal(err)
	}
	lostPay := &loseOnce{match: func(method, tool string, p map[string]json.RawMessage) bool {
		return method == "tools/call" && tool == "pay"
	}}
	lostRound2 := &loseOnce{match: func(method, tool string, p map[string]json.RawMessage) bool {
		return method == "tools/call" && tool == "deploy" && len(p["requestState"]) > 2
	}}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := httptest.NewServer(lossy(h, lostPay, lostRound2))
	t.Cleanup(srv.Close)

	// Beside node_modules, so that the program's import resolves.
	script := filepath.Join(filepath.Dir(modules), fmt.Sprintf("docs-snippet-%d.mjs", os.Getpid()))
	if err := os.WriteFile(script, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(script) })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, srv.URL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the program of docs/mcp.md: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var got struct {
		Paid     map[string]any `json:"paid"`
		Deployed docDeployOut   `json:"deployed"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("the program printed %q: %v", out, err)
	}
	if !lostPay.done.Load() || !lostRound2.done.Load() {
		t.Fatalf("a first answer was not lost: pay %v, round two %v", lostPay.done.Load(), lostRound2.done.Load())
	}
	if payments.Load() != 1 || deploys.Load() != 1 || got.Paid["payment"] != float64(1) || got.Paid["to"] != "bob" ||
		got.Deployed != (docDeployOut{Status: "deployed", Plan: "plan: 3 steps", Deploy: 1}) {
		t.Fatalf("%d payments, %d deploys; the program saw %+v", payments.Load(), deploys.Load(), got)
	}
}
