package drivertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	gomcp "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// taskStores are the stores a task may live in.
var taskStores = []struct {
	name  string
	store func(t *testing.T) replay.Recorder
}{
	{"memory", func(*testing.T) replay.Recorder { return replay.NewMemoryStore(0) }},
	{"redis", func(t *testing.T) replay.Recorder { return redisStore(t) }},
	{"postgres", func(t *testing.T) replay.Recorder { return pgStore(t, pgPool(t)) }},
	{"sqlite", func(t *testing.T) replay.Recorder { return sqliteStore(t, sqliteDB(t)) }},
}

func newTasks(t *testing.T, store replay.Recorder) *mcptoken.Tasks {
	t.Helper()
	kr, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{
		Keys: kr, Store: store, PollInterval: 10 * time.Millisecond,
		Caller: func(*http.Request) (string, error) { return "alice", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// TestTasksAcrossSDKs: each SDK's ctoken client drives a task of the
// other SDK's ctoken server to its result, input round included, on every
// store.
func TestTasksAcrossSDKs(t *testing.T) {
	for _, st := range taskStores {
		t.Run("go-sdk client, mcp-go server, "+st.name, func(t *testing.T) {
			tasks := newTasks(t, st.store(t))
			s := server.NewMCPServer("tasks", "v0", server.WithToolCapabilities(true),
				server.WithExtensions(map[string]any{mcptoken.TasksExtension: map[string]any{}}))
			h := func(_ context.Context, req gomcp.CallToolRequest) (*gomcp.CallToolResult, error) {
				if r := server.ElicitationResponse(req.Params.InputResponses, "name"); r != nil {
					name, _ := r.Content.(map[string]any)["name"].(string)
					return gomcp.NewToolResultText("hello " + name), nil
				}
				return server.NewInputRequestBuilder("").Elicit("name", gomcp.ElicitationParams{Message: "name?"}).ToolResult(), nil
			}
			s.AddTool(gomcp.NewTool("hello"), h)
			if err := tasks.Add(ctokenmcpgo.TaskTool("hello", h, true)); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(tasks.Handler(server.NewStreamableHTTPServer(s)))
			t.Cleanup(srv.Close)

			var id string
			opts := ctokenmcp.TaskOptions{
				Input: func(_ context.Context, reqs mcp.InputRequestMap) (mcp.InputResponseMap, error) {
					out := mcp.InputResponseMap{}
					for k := range reqs {
						out[k] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}
					}
					return out, nil
				},
				Started: func(s string) { id = s },
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-sdk", Version: "v0"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: ctokenmcp.TaskTransport(nil, opts)}, MaxRetries: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() })
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "hello"})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Content[0].(*mcp.TextContent).Text; got != "hello Ada" || id == "" {
				t.Fatalf("result %q, task ID %q", got, id)
			}
			again, err := ctokenmcp.ResumeTask(context.Background(), nil, srv.URL+"/mcp", id, ctokenmcp.TaskOptions{})
			if err != nil || again.Content[0].(*mcp.TextContent).Text != "hello Ada" {
				t.Fatalf("resumed: %+v, %v", again, err)
			}
		})

		t.Run("mcp-go client, go-sdk server, "+st.name, func(t *testing.T) {
			tasks := newTasks(t, st.store(t))
			s := mcp.NewServer(&mcp.Implementation{Name: "tasks", Version: "v0"}, &mcp.ServerOptions{
				Capabilities: &mcp.ServerCapabilities{Extensions: map[string]any{mcptoken.TasksExtension: map[string]any{}}},
			})
			h := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if r, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult); ok && r.Action == "accept" {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + r.Content["name"].(string)}}}, nil
				}
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "name?", RequestedSchema: &jsonschema.Schema{Type: "object"}}}}, nil
			}
			s.AddTool(&mcp.Tool{Name: "hello", InputSchema: &jsonschema.Schema{Type: "object"}}, h)
			if err := tasks.Add(ctokenmcp.TaskTool("hello", h, true)); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(tasks.Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})))
			t.Cleanup(srv.Close)

			tr, err := transport.NewStreamableHTTP(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			c := client.NewClient(tr)
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			init := gomcp.InitializeRequest{}
			init.Params.ClientInfo = gomcp.Implementation{Name: "mcp-go", Version: "v0"}
			if _, err := c.Initialize(context.Background(), init); err != nil {
				t.Fatal(err)
			}
			var id string
			req := gomcp.CallToolRequest{}
			req.Params.Name = "hello"
			res, err := ctokenmcpgo.CallTool(context.Background(), c, req, ctokenmcpgo.CallOptions{Task: &ctokenmcpgo.TaskOptions{
				Input: func(_ context.Context, reqs gomcp.InputRequests) (gomcp.InputResponses, error) {
					out := gomcp.InputResponses{}
					for k := range reqs {
						out[k] = gomcp.NewElicitationInputResponse(gomcp.ElicitationResult{ElicitationResponse: gomcp.ElicitationResponse{
							Action: gomcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "Ada"}}})
					}
					return out, nil
				},
				Started: func(s string) { id = s },
			}})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Content[0].(gomcp.TextContent).Text; !strings.Contains(got, "hello Ada") || id == "" {
				t.Fatalf("result %q, task ID %q", got, id)
			}
		})
	}
}
