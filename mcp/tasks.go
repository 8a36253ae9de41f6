package ctokenmcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPTokenUserID is the caller of an HTTP request for
// mcptoken.TasksConfig.Caller: the UserID of the TokenInfo that go-sdk's
// auth.RequireBearerToken, wrapped around Tasks.Handler, put in the
// request's context, as [TokenUserID] reads it for the SDK's own
// requests; [ErrNoCaller] when there is none.
func HTTPTokenUserID(r *http.Request) (string, error) {
	if info := auth.TokenInfoFromContext(r.Context()); info != nil && info.UserID != "" {
		return info.UserID, nil
	}
	return "", ErrNoCaller
}

// TaskTool makes h, a go-sdk tool handler, the task-augmented tool name of
// a [mcptoken.Tasks]: register h with the server as usual (server.AddTool,
// for tools/list and for clients that did not declare the Tasks
// extension), add TaskTool(name, h, required) to the Tasks, and serve the
// streamable HTTP handler behind Tasks.Handler:
//
//	server.AddTool(tool, h)
//	tasks.Add(ctokenmcp.TaskTool(tool.Name, h, false))
//	http.Handle("/", auth.RequireBearerToken(verify, nil)(tasks.Handler(mcp.NewStreamableHTTPHandler(...))))
//
// with [HTTPTokenUserID] as the Tasks' caller, and advertise the extension (mcptoken.TasksExtension) with
// ServerCapabilities.AddExtension. Inside a task, h runs without a session
// (req.Session is nil) and with the creating request's TokenInfo in
// req.Extra (no Header): a result with InputRequests parks the task as
// input_required until tasks/update answers every request, then h is
// called again with the answers and the RequestState it returned, as an
// MRTR retry (the state stays in the running instance, never on the wire).
// A required tool refuses a client that did not declare the extension.
func TaskTool(name string, h mcp.ToolHandler, required bool) mcptoken.TaskTool {
	return mcptoken.TaskTool{Name: name, Required: required, Run: func(ctx context.Context, call *mcptoken.TaskCall) (json.RawMessage, error) {
		params := &mcp.CallToolParamsRaw{Name: name, Arguments: call.Arguments}
		extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(ctx)}
		if len(call.InputResponses) > 0 {
			if err := decodeResponses(call.InputResponses, &params.InputResponses); err != nil {
				return nil, err
			}
		}
		for {
			res, err := h(ctx, &mcp.CallToolRequest{Params: params, Extra: extra})
			if err != nil {
				return nil, err
			}
			if res == nil {
				return nil, fmt.Errorf("ctokenmcp: task tool %q returned no result", name)
			}
			if len(res.InputRequests) == 0 {
				return json.Marshal(res)
			}
			b, err := json.Marshal(res.InputRequests)
			if err != nil {
				return nil, err
			}
			var asks map[string]json.RawMessage
			if err := json.Unmarshal(b, &asks); err != nil {
				return nil, err
			}
			answers, err := call.Input(ctx, asks)
			if err != nil {
				return nil, err
			}
			next := &mcp.CallToolParamsRaw{Name: name, Arguments: call.Arguments, RequestState: res.RequestState}
			if err := decodeResponses(answers, &next.InputResponses); err != nil {
				return nil, err
			}
			params = next
		}
	}}
}

// decodeResponses decodes the raw answers of input requests into the
// go-sdk's typed map.
func decodeResponses(raw map[string]json.RawMessage, into *mcp.InputResponseMap) error {
	b, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}
