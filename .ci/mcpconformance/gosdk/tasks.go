//lint:file-ignore SA1019 the fixture keeps the SDK's default capability, logging (deprecated by SEP-2577), beside the extension.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ctoken/ctoken"
	ctokenmcp "github.com/ctoken/ctoken/mcp"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools of the Tasks extension's scenarios (tasks-*), task-augmented by
// ctoken (mcptoken.Tasks on a replay.MemoryStore, task IDs sealed under the
// fixture's key and bound to its caller), and the handler in front of the
// SDK's that answers the extension's methods.

// tasksCapabilities are the server's capabilities with the Tasks extension
// advertised (setting Capabilities replaces the SDK's default, logging).
func tasksCapabilities() *mcp.ServerCapabilities {
	caps := &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}
	caps.AddExtension(mcptoken.TasksExtension, nil)
	return caps
}

// registerTasks registers the scenarios' tools on server, the task-capable
// ones on a Tasks too, and returns the Tasks.
func registerTasks(server *mcp.Server) (*mcptoken.Tasks, error) {
	keys, err := ctoken.NewKeyring(fixtureKey)
	if err != nil {
		return nil, err
	}
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{
		Keys:         keys,
		Store:        replay.NewMemoryStore(0),
		TTL:          10 * time.Minute,
		Hold:         3 * time.Second,
		PollInterval: 200 * time.Millisecond,
		Caller:       func(*http.Request) (string, error) { return fixtureCaller, nil },
	})
	if err != nil {
		return nil, err
	}
	obj := &jsonschema.Schema{Type: "object"}
	server.AddTool(&mcp.Tool{Name: "greet", Description: "Says hello (synchronous only)", InputSchema: obj}, greet)
	for _, tt := range []struct {
		name, desc string
		h          mcp.ToolHandler
		required   bool
	}{
		{"slow_compute", "Sleeps seconds, then answers (task optional)", slowCompute, false},
		{"failing_job", "Answers a tool error after about a second (task required)", failingJob, true},
		{"protocol_error_job", "Fails with a protocol error (task optional)", protocolErrorJob, false},
		{"confirm_delete", "Asks for a confirmation, then answers (task optional)", confirmDelete, false},
		{"multi_input", "Asks two questions at once, then answers (task optional)", multiInput, false},
	} {
		server.AddTool(&mcp.Tool{Name: tt.name, Description: tt.desc, InputSchema: obj}, tt.h)
		if err := tasks.Add(ctokenmcp.TaskTool(tt.name, tt.h, tt.required)); err != nil {
			return nil, err
		}
	}
	// test_tool_with_task: an MRTR round for the name, then a task.
	server.AddTool(&mcp.Tool{Name: "test_tool_with_task", Description: "Asks a name (MRTR), then runs as a task (task required)", InputSchema: obj}, withTask)
	tool := ctokenmcp.TaskTool("test_tool_with_task", withTask, true)
	tool.Ask = func(call *mcptoken.TaskCall) map[string]json.RawMessage {
		if userName(call.InputResponses) != "" {
			return nil
		}
		return map[string]json.RawMessage{"user_name": json.RawMessage(`{"method":"elicitation/create","params":{"mode":"form","message":"What is your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}}`)}
	}
	return tasks, tasks.Add(tool)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func greet(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct{ Name string }
	_ = json.Unmarshal(req.Params.Arguments, &in)
	return text(fmt.Sprintf("Hello, %s!", in.Name)), nil
}

func slowCompute(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Seconds float64
		Label   string
	}
	_ = json.Unmarshal(req.Params.Arguments, &in)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
	}
	return text(fmt.Sprintf("computed %s after %gs", in.Label, in.Seconds)), nil
}

func failingJob(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Second):
	}
	res := text("the job failed")
	res.IsError = true
	return res, nil
}

func protocolErrorJob(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return nil, errors.New("protocol error")
}

// elicit is an elicitation/create input request for a form with the given
// boolean or string fields.
func elicit(message string, props map[string]*jsonschema.Schema) *mcp.ElicitParams {
	return &mcp.ElicitParams{Message: message, RequestedSchema: &jsonschema.Schema{Type: "object", Properties: props}}
}

func confirmDelete(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if c := acceptedContent(req.Params.InputResponses, "confirm"); c != nil {
		return text("deleted"), nil
	}
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
		"confirm": elicit("Delete the file?", map[string]*jsonschema.Schema{"confirm": {Type: "boolean"}}),
	}}, nil
}

func multiInput(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	a, b := acceptedContent(req.Params.InputResponses, "first"), acceptedContent(req.Params.InputResponses, "second")
	if a != nil && b != nil {
		return text(fmt.Sprintf("got %v and %v", a["name"], b["name"])), nil
	}
	props := map[string]*jsonschema.Schema{"name": {Type: "string"}, "confirm": {Type: "boolean"}}
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
		"first":  elicit("First?", props),
		"second": elicit("Second?", props),
	}}, nil
}

// userName is the name an accepted user_name answer carries, or "".
func userName(raw map[string]json.RawMessage) string {
	var r struct {
		Action  string
		Content struct{ Name string }
	}
	if json.Unmarshal(raw["user_name"], &r) != nil || r.Action != "accept" {
		return ""
	}
	return r.Content.Name
}

func withTask(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if c := acceptedContent(req.Params.InputResponses, "user_name"); c != nil {
		if name, _ := c["name"].(string); name != "" {
			return text(fmt.Sprintf("Hello, %s! (from a task)", name)), nil
		}
	}
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"user_name": elicit("What is your name?", map[string]*jsonschema.Schema{"name": {Type: "string"}})}}, nil
}
