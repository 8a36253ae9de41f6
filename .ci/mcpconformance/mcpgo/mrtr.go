package main

// The tools and the prompt that the 2026-07-28 requirements of the
// conformance suite call and that mcp-go v1.2.1's fixture lacks: the
// multi round-trip requests (SEP-2322) and the diagnostic tools of the
// stateless scenario (SEP-2575). They port, handler for handler, the ones
// of go-sdk v1.8.0's conformance/everything-server (MIT License, Copyright
// 2025 The Go MCP SDK Authors; .ci/mcpconformance/gosdk/LICENSE-go-sdk) to
// mcp-go's API. Every handler works with plaintext requestState:
// ctokenmcpgo.SecureRequestState seals it on the way out and opens it on
// the way in, so a tampered state never reaches a handler.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// nameSchema is the requestedSchema of the tools that elicit a name.
var nameSchema = map[string]any{
	"type":       "object",
	"properties": map[string]any{"name": map[string]any{"type": "string"}},
	"required":   []string{"name"},
}

// confirmSchema is the requestedSchema of the tools that ask to confirm.
var confirmSchema = map[string]any{
	"type":       "object",
	"properties": map[string]any{"ok": map[string]any{"type": "boolean"}},
	"required":   []string{"ok"},
}

// accepted returns the content of the elicitation answered under id when
// the user accepted it, or nil.
func accepted(responses mcp.InputResponses, id string) map[string]any {
	res := server.ElicitationResponse(responses, id)
	if res == nil || res.Action != mcp.ElicitationResponseActionAccept {
		return nil
	}
	m, _ := res.Content.(map[string]any)
	return m
}

// sampledText returns the text of the sampling answered under id.
func sampledText(responses mcp.InputResponses, id string) (string, bool) {
	res := server.SamplingResponse(responses, id)
	if res == nil {
		return "", false
	}
	switch c := res.Content.(type) {
	case mcp.TextContent:
		return c.Text, true
	case map[string]any:
		if t, ok := c["text"].(string); ok {
			return t, true
		}
	}
	return "(non-text response)", true
}

func text(s string) *mcp.CallToolResult { return mcp.NewToolResultText(s) }

func sample(prompt string, maxTokens int) mcp.CreateMessageParams {
	return mcp.CreateMessageParams{
		Messages:  []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.TextContent{Type: "text", Text: prompt}}},
		MaxTokens: maxTokens,
	}
}

func registerMRTR(s *server.MCPServer) {
	add := func(name, description string, h server.ToolHandlerFunc) {
		s.AddTool(mcp.NewTool(name, mcp.WithDescription(description)), h)
	}
	add("test_input_required_result_elicitation", "MRTR (SEP-2322): asks for the caller name via an in-band elicitation request",
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if name, _ := accepted(req.Params.InputResponses, "user_name")["name"].(string); name != "" {
				return text(fmt.Sprintf("Hello, %s!", name)), nil
			}
			return server.NewInputRequestBuilder("").Elicit("user_name", mcp.ElicitationParams{Message: "What is your name?", RequestedSchema: nameSchema}).ToolResult(), nil
		})
	add("test_input_required_result_sampling", "MRTR (SEP-2322): asks for an LLM completion via an in-band sampling request",
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if t, ok := sampledText(req.Params.InputResponses, "capital_question"); ok {
				return text("Sampling response: " + t), nil
			}
			return server.NewInputRequestBuilder("").Sample("capital_question", sample("What is the capital of France?", 100)).ToolResult(), nil
		})
	add("test_input_required_result_list_roots", "MRTR (SEP-2322): asks for the client roots via an in-band roots/list request",
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if roots := server.RootsResponse(req.Params.InputResponses, "client_roots"); roots != nil {
				var uris []string
				for _, r := range roots.Roots {
					uris = append(uris, r.URI)
				}
				return text(fmt.Sprintf("Client exposed %d root(s): %s", len(roots.Roots), strings.Join(uris, ", "))), nil
			}
			return server.NewInputRequestBuilder("").Roots("client_roots").ToolResult(), nil
		})
	add("test_input_required_result_request_state", "MRTR (SEP-2322): round-trips integrity-protected requestState alongside an elicitation request",
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if accepted(req.Params.InputResponses, "confirm") != nil && req.Params.RequestState == "request_state" {
				return text("state-ok: requestState received and confirmation accepted"), nil
			}
			return server.NewInputRequestBuilder("request_state").Elicit("confirm", mcp.ElicitationParams{Message: "Please confirm", RequestedSchema: confirmSchema}).ToolResult(), nil
		})
	add("test_input_required_result_multiple_inputs", "MRTR (SEP-2322): asks for elicitation, sampling and roots input in a single round",
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name, _ := accepted(req.Params.InputResponses, "user_name")["name"].(string)
			greeting, sampled := sampledText(req.Params.InputResponses, "greeting")
			roots := server.RootsResponse(req.Params.InputResponses, "client_roots")
			if name != "" && sampled && roots != nil {
				return text(fmt.Sprintf("%s %s — %d root(s) visible", greeting, name, len(roots.Roots))), nil
			}
			return server.NewInputRequestBuilder("multiple_inputs").
				Elicit("user_name", mcp.ElicitationParams{Message: "What is your name?", RequestedSchema: nameSchema}).
				Sample("greeting", sample("Generate a greeting", 50)).
				Roots("client_roots").ToolResult(), nil
		})
	add("test_input_required_result_multi_round", "MRTR (SEP-2322): two elicitation rounds with evolving requestState before completing",
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// State format: "round=1" or "round=2;name=<name>"; the
			// stateless server keeps the round in the state.
			switch state := req.Params.RequestState; {
			case state == "":
				return server.NewInputRequestBuilder("round=1").Elicit("step1", mcp.ElicitationParams{Message: "Step 1: What is your name?", RequestedSchema: nameSchema}).ToolResult(), nil
			case state == "round=1":
				name, _ := accepted(req.Params.InputResponses, "step1")["name"].(string)
				if name == "" {
					name = "unknown"
				}
				colorSchema := map[string]any{"type": "object", "properties": map[string]any{"color": map[string]any{"type": "string"}}, "required": []string{"color"}}
				return server.NewInputRequestBuilder("round=2;name="+name).Elicit("step2", mcp.ElicitationParams{Message: "Step 2: What is your favorite color?", RequestedSchema: colorSchema}).ToolResult(), nil
			default:
				color, _ := accepted(req.Params.InputResponses, "step2")["color"].(string)
				if color == "" {
					color = "unknown"
				}
				return text(fmt.Sprintf("Multi-round complete: %s likes %s", strings.TrimPrefix(state, "round=2;name="), color)), nil
			}
		})
	// go-sdk's fixture checks the state for the suite's "-TAMPERED" suffix;
	// here SecureRequestState refuses any state it did not seal (a
	// JSON-RPC error) before the handler runs, so the handler has no check.
	add("test_input_required_result_tampered_state", "MRTR (SEP-2322): rejects retries whose requestState fails integrity verification",
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Params.RequestState != "" && accepted(req.Params.InputResponses, "confirm") != nil {
				return text("state-ok: requestState received and confirmation accepted"), nil
			}
			return server.NewInputRequestBuilder("tampered_state").Elicit("confirm", mcp.ElicitationParams{Message: "Please confirm", RequestedSchema: confirmSchema}).ToolResult(), nil
		})
	add("test_input_required_result_capabilities", "MRTR (SEP-2322): only requests input kinds the declared client capabilities cover",
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if len(req.Params.InputResponses) > 0 {
				return text("Capability-aware input requests fulfilled"), nil
			}
			var caps *mcp.ClientCapabilities
			if info := server.RequestProtocolInfoFromContext(ctx); info != nil {
				caps = info.ClientCapabilities
			}
			b := server.NewInputRequestBuilder("")
			n := 0
			if caps != nil && caps.Elicitation != nil {
				b.Elicit("user_name", mcp.ElicitationParams{Message: "What is your name?", RequestedSchema: nameSchema})
				n++
			}
			if caps != nil && caps.Sampling != nil {
				b.Sample("greeting", sample("Generate a short greeting", 50))
				n++
			}
			if caps != nil && caps.Roots != nil {
				b.Roots("client_roots")
				n++
			}
			if n == 0 {
				return text("No declared client capability supports an in-band input request"), nil
			}
			return b.ToolResult(), nil
		})
	s.AddPrompt(mcp.NewPrompt("test_input_required_result_prompt",
		mcp.WithPromptDescription("MRTR (SEP-2322): asks for context via an in-band elicitation request")),
		func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			if content := accepted(req.Params.InputResponses, "user_context"); content != nil {
				c, _ := content["context"].(string)
				return mcp.NewGetPromptResult("A prompt with elicited context",
					[]mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("Context: "+c))}), nil
			}
			contextSchema := map[string]any{"type": "object", "properties": map[string]any{"context": map[string]any{"type": "string"}}, "required": []string{"context"}}
			return server.NewInputRequestBuilder("").Elicit("user_context", mcp.ElicitationParams{Message: "Please provide context for the prompt", RequestedSchema: contextSchema}).PromptResult(), nil
		})

	// SEP-2575 diagnostic tools of the stateless scenario.
	add("test_missing_capability", "Requires the sampling client capability; used to verify MissingRequiredClientCapabilityError (-32021) (SEP-2575)",
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.ClientCapabilities != nil && info.ClientCapabilities.Sampling != nil {
				return text("Client declared the sampling capability; tool executed."), nil
			}
			// mcp-go v1.2.1 sends a handler's error as -32603, never -32021
			// (the expected failure listed in .ci/mcp-conformance-expected.yml).
			return nil, errors.New("sampling capability required but not declared by client")
		})
	add("test_streaming_elicitation", "Streams progress notifications while a call is in flight (SEP-2575)",
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("stream observed: result frames only, no top-level requests"), nil
		})
	add("test_logging_tool", "Attempts to emit a log message; the framework must drop it when the client did not set _meta.../logLevel (SEP-2575)",
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			_ = s.SendLogMessageToClient(ctx, mcp.NewLoggingMessageNotification(mcp.LoggingLevelInfo, "conformance-test-server", "test_logging_tool executed"))
			return text("Log attempted; framework gates on _meta.../logLevel."), nil
		})
	add("test_trigger_tool_change", "Mutates the tool list to trigger a notifications/tools/list_changed (SEP-2575)",
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.AddTool(mcp.NewTool("__transient_tool_for_list_changed", mcp.WithDescription("Transient tool used to trigger tools/list_changed")), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return text(""), nil
			})
			return text("tools_list_changed published"), nil
		})
	add("test_trigger_prompt_change", "Mutates the prompt list to trigger a notifications/prompts/list_changed (SEP-2575)",
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.AddPrompt(mcp.NewPrompt("__transient_prompt_for_list_changed", mcp.WithPromptDescription("Transient prompt used to trigger prompts/list_changed")), func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return mcp.NewGetPromptResult("", nil), nil
			})
			return text("prompts_list_changed published"), nil
		})
}
