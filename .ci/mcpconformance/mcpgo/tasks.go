package main

// The tools the conformance suite's Tasks-extension scenarios
// (io.modelcontextprotocol/tasks, SEP-2663) call, with the names and
// behaviour the suite's scenario descriptions fix. The task tools are plain
// mcp-go handlers made task tools by ctokenmcpgo.TaskTool, on the
// mcptoken.Tasks of ctoken.go: a handler that needs input returns an input-required result (the multi
// round-trip form), which a task surfaces as status input_required and
// answers through tasks/update (ctokenmcpgo.TaskTool).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	ctokenmcpgo "github.com/ctoken/ctoken/mcpgo"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// sleep waits d or until ctx ends (a tasks/cancel reaching the task).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func registerTasks(s *server.MCPServer, tasks *mcptoken.Tasks) {
	add := func(tool mcp.Tool, h server.ToolHandlerFunc, required bool) {
		s.AddTool(tool, h)
		if err := tasks.Add(ctokenmcpgo.TaskTool(tool.Name, h, required)); err != nil {
			log.Fatal(err)
		}
	}
	s.AddTool(mcp.NewTool("greet", mcp.WithDescription("Tasks: sync only; returns Hello, {name}!"),
		mcp.WithString("name", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprintf("Hello, %s!", req.GetString("name", ""))), nil
		})
	add(mcp.NewTool("slow_compute", mcp.WithDescription("Tasks: optional task; sleeps seconds, then answers"),
		mcp.WithNumber("seconds"), mcp.WithString("label")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			secs := req.GetFloat("seconds", 0)
			if err := sleep(ctx, time.Duration(secs*float64(time.Second))); err != nil {
				return nil, err
			}
			return text(fmt.Sprintf("computed %q after %gs", req.GetString("label", ""), secs)), nil
		}, false)
	add(mcp.NewTool("failing_job", mcp.WithDescription("Tasks: required task; a tool error after about a second")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if err := sleep(ctx, time.Second); err != nil {
				return nil, err
			}
			return mcp.NewToolResultError("failing_job: the job failed, as it always does"), nil
		}, true)
	add(mcp.NewTool("protocol_error_job", mcp.WithDescription("Tasks: task that ends in a protocol (JSON-RPC) error")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("protocol_error_job: the job failed at the protocol level")
		}, false)
	add(mcp.NewTool("confirm_delete", mcp.WithDescription("Tasks: task that asks to confirm, by elicitation, before it answers"),
		mcp.WithString("filename")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := req.GetString("filename", "")
			if c := accepted(req.Params.InputResponses, "confirm"); c != nil {
				if ok, _ := c["confirm"].(bool); ok {
					return text("deleted " + name), nil
				}
				return text("kept " + name), nil
			}
			schema := map[string]any{"type": "object", "properties": map[string]any{"confirm": map[string]any{"type": "boolean"}}, "required": []string{"confirm"}}
			return server.NewInputRequestBuilder("").Elicit("confirm", mcp.ElicitationParams{Message: "Delete " + name + "?", RequestedSchema: schema}).ToolResult(), nil
		}, false)
	add(mcp.NewTool("multi_input", mcp.WithDescription("Tasks: task that asks two questions at once")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			first, second := accepted(req.Params.InputResponses, "first"), accepted(req.Params.InputResponses, "second")
			if first != nil && second != nil {
				return text(fmt.Sprintf("both answered: %v, %v", first["name"], second["name"])), nil
			}
			return server.NewInputRequestBuilder("").
				Elicit("first", mcp.ElicitationParams{Message: "First name?", RequestedSchema: nameSchema}).
				Elicit("second", mcp.ElicitationParams{Message: "Second name?", RequestedSchema: nameSchema}).ToolResult(), nil
		}, false)

	// Input first (a multi round-trip round, no task yet), then the task:
	// the tool's Ask asks for the name until the call carries it.
	greetTask := mcp.NewTool("test_tool_with_task", mcp.WithDescription("Tasks: asks for a name (multi round-trip), then answers as a task"))
	run := func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		name, _ := accepted(req.Params.InputResponses, "user_name")["name"].(string)
		return text(fmt.Sprintf("Hello, %s! (answered by a task)", name)), nil
	}
	ask, err := json.Marshal(mcp.NewElicitationInputRequest(mcp.ElicitationParams{Message: "What is your name?", RequestedSchema: nameSchema}))
	if err != nil {
		log.Fatal(err)
	}
	tool := ctokenmcpgo.TaskTool(greetTask.Name, run, true)
	tool.Ask = func(call *mcptoken.TaskCall) map[string]json.RawMessage {
		if _, ok := call.InputResponses["user_name"]; ok {
			return nil
		}
		return map[string]json.RawMessage{"user_name": ask}
	}
	if err := tasks.Add(tool); err != nil {
		log.Fatal(err)
	}
	s.AddTool(greetTask, run) // listed; every call of it is the task's (Required)
}
