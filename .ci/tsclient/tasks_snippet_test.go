package tsclient

// The TypeScript program of docs/mcp-tasks.md ("TypeScript: the official
// Tasks client"), run as written against the page's go-sdk server: ctoken's
// tasks behind go-sdk's bearer-token middleware, the caller its token's
// user (ctokenmcp.HTTPTokenUserID). A task that completes prints its
// result; one whose tool returned mcptoken.ErrNoEffect prints its key and
// ctokenEffect "none", and the program run again under that key runs the
// tool again.

import (
	"bytes"
	"context"
	"encoding/json"
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

	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// taskProgramOut is what the page's program prints.
type taskProgramOut struct {
	Status  string          `json:"status"`
	Key     string          `json:"key"`
	Result  json.RawMessage `json:"result"`
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Effect  *string         `json:"effect"`
}

func TestDocsTasksSnippetRunsAsWritten(t *testing.T) {
	node, modules := os.Getenv("CTOKEN_TSCLIENT_NODE"), os.Getenv("CTOKEN_TSCLIENT_MODULES")
	if node == "" || modules == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES are not set, but CI=true: run .ci/mcp-tsclient.sh")
		}
		t.Skip("CTOKEN_TSCLIENT_NODE and CTOKEN_TSCLIENT_MODULES not set: run .ci/mcp-tsclient.sh")
	}
	// Beside node_modules, so that its imports resolve.
	script := filepath.Join(filepath.Dir(modules), fmt.Sprintf("docs-tasks-snippet-%d.mjs", os.Getpid()))
	if err := os.WriteFile(script, []byte(docSnippet(t, "../../docs/mcp-tasks.md", "### TypeScript: the official Tasks client")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(script) })

	// The page's go-sdk server, with two tools.
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keyring(t, 8), Store: replay.NewMemoryStore(0), PollInterval: 20 * time.Millisecond, Caller: ctokenmcp.HTTPTokenUserID})
	if err != nil {
		t.Fatal(err)
	}
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	caps.AddExtension(mcptoken.TasksExtension, nil)
	s := mcp.NewServer(&mcp.Implementation{Name: "reports", Version: "v1"}, &mcp.ServerOptions{Capabilities: caps})
	var reports, charges atomic.Int32
	tools := map[string]mcp.ToolHandler{
		"report": func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Month string }
			json.Unmarshal(req.Params.Arguments, &in)
			reports.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "report for " + in.Month}}}, nil
		},
		"charge": func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			charges.Add(1)
			return nil, fmt.Errorf("the card was declined: %w", mcptoken.ErrNoEffect)
		},
	}
	for name, h := range tools {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, h)
		if err := tasks.Add(ctokenmcp.TaskTool(name, h, false)); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token != "alice-token" {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: "alice", Expiration: time.Now().Add(time.Hour)}, nil
	}
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(auth.RequireBearerToken(verify, nil)(tasks.Handler(sdk)))
	t.Cleanup(srv.Close)

	run := func(args ...string) taskProgramOut {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{script, srv.URL, "alice-token"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var got taskProgramOut
		if err == nil {
			err = json.Unmarshal(bytes.TrimSpace(out), &got)
		}
		if err != nil {
			t.Fatalf("the program of docs/mcp-tasks.md %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, &stderr)
		}
		return got
	}

	t.Run("a task that completes prints its result", func(t *testing.T) {
		got := run("report", `{"month":"2026-11"}`)
		var res struct {
			Content []struct{ Text string }
		}
		json.Unmarshal(got.Result, &res)
		if got.Status != "completed" || got.Key == "" || len(res.Content) != 1 || res.Content[0].Text != "report for 2026-11" || reports.Load() != 1 {
			t.Fatalf("printed %+v (result %s); the tool ran %d times", got, got.Result, reports.Load())
		}
	})
	t.Run("a tool with no effect prints ctokenEffect none, and its key runs again", func(t *testing.T) {
		for i := int32(1); i <= 2; i++ {
			got := run("charge", `{"cents":500}`, "charge-1")
			if got.Status != "failed" || got.Key != "charge-1" || got.Effect == nil || *got.Effect != "none" || got.Code != -32603 || !strings.Contains(got.Message, "no effect") || charges.Load() != i {
				t.Fatalf("run %d printed %+v; the tool ran %d times", i, got, charges.Load())
			}
		}
	})
	t.Run("a request without the Mcp headers is refused as the page says", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"` + mcptoken.TasksExtension + `":{}}}}}}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Error *struct{ Code int } }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusBadRequest || out.Error == nil || out.Error.Code != mcptoken.CodeHeaderMismatch || reports.Load() != 1 {
			t.Fatalf("answer %d %+v (%v); the tool ran %d times", resp.StatusCode, out.Error, err, reports.Load())
		}
	})
}
