package ctokenmcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// maxTaskRounds bounds the rounds of input a task's handler may ask for,
// as mcp-go's client bounds the rounds of a multi round-trip call.
const maxTaskRounds = 10

// errTaskNoResult reports a task's handler that returned neither a result
// nor an error; the task fails with a JSON-RPC internal error.
var errTaskNoResult = errors.New("ctokenmcpgo: the task's tool handler returned no result")

// TaskTool makes h, an mcp-go tool handler, the task-augmented tool name
// of a [mcptoken.Tasks]: register h with the server as usual (s.AddTool,
// for tools/list and for clients that did not declare the Tasks
// extension), add TaskTool(name, h, required) to the Tasks, serve mcp-go's
// streamable HTTP handler behind Tasks.Handler, and advertise the
// extension:
//
//	s := server.NewMCPServer(name, version, server.WithExtensions(map[string]any{mcptoken.TasksExtension: map[string]any{}}))
//	s.AddTool(tool, h)
//	tasks.Add(ctokenmcpgo.TaskTool(tool.Name, h, false))
//	http.Handle("/mcp", tasks.Handler(server.NewStreamableHTTPServer(s)))
//
// A tools/call from a client that declared the extension is then answered
// by Tasks.Handler with a task that runs h durably; it does not pass
// through mcp-go, so its middleware (SecureRequestState among them), hooks
// and input validation do not run for it. A required tool refuses a client
// that did not declare the extension with -32021
// ([mcptoken.CodeMissingCapability]); an optional one's call reaches
// mcp-go, which runs h at once.
//
// Inside a task, h runs in a context naming the task's caller
// ([WithCaller]) and without an mcp-go session, with the call's name,
// arguments and the answers the creating call carried. A result that asks
// for input (the multi round-trip form, as server.NewInputRequestBuilder
// builds it) parks the task as input_required with its requests; once
// tasks/update has answered every one, h is called again with those
// answers and the result's requestState, as a client retries a multi
// round-trip call, up to 10 rounds. The requestState stays in the running
// instance and is never sent. A key of an earlier round is sent renamed
// ("key.N"), since a task's input keys are unique over its life; h sees
// its own keys. An error of h, no result, a result that asks for no input,
// or one round more fail the task with a JSON-RPC internal error.
func TaskTool(name string, h server.ToolHandlerFunc, required bool) mcptoken.TaskTool {
	return mcptoken.TaskTool{Name: name, Required: required, Run: taskRun(h)}
}

// taskRun returns h as the Run of a task tool (see TaskTool).
func taskRun(h server.ToolHandlerFunc) func(ctx context.Context, call *mcptoken.TaskCall) (json.RawMessage, error) {
	return func(ctx context.Context, call *mcptoken.TaskCall) (json.RawMessage, error) {
		if call.Caller != "" {
			ctx = WithCaller(ctx, call.Caller)
		}
		req := mcp.CallToolRequest{}
		req.Method = string(mcp.MethodToolsCall)
		req.Params.Name = call.Tool
		req.Params.RawArguments = call.Arguments
		if err := json.Unmarshal(call.Arguments, &req.Params.Arguments); err != nil {
			return nil, fmt.Errorf("ctokenmcpgo: the task's arguments: %w", err)
		}
		responses, err := inputResponsesOf(call.InputResponses)
		if err != nil {
			return nil, err
		}
		req.Params.InputResponses = responses
		used := map[string]bool{} // the input keys sent so far
		for key := range call.InputResponses {
			used[key] = true
		}
		for round := 0; ; round++ {
			res, err := h(ctx, req)
			switch {
			case err != nil:
				return nil, err
			case res == nil:
				return nil, errTaskNoResult
			case !res.NeedsInput():
				return json.Marshal(res)
			case len(res.InputRequests) == 0:
				return nil, errors.New("ctokenmcpgo: the task's tool handler asked for no input")
			case round+1 >= maxTaskRounds:
				return nil, fmt.Errorf("ctokenmcpgo: the task's tool handler asked for input more than %d times", maxTaskRounds)
			}
			// A key is unique over the task's life on the wire: one the
			// handler used in an earlier round is sent renamed.
			requests := make(map[string]json.RawMessage, len(res.InputRequests))
			wireKey := make(map[string]string, len(res.InputRequests))
			for key, r := range res.InputRequests {
				b, err := json.Marshal(r)
				if err != nil {
					return nil, fmt.Errorf("ctokenmcpgo: encoding an input request: %w", err)
				}
				w := key
				for n := round; used[w]; n++ {
					w = fmt.Sprintf("%s.%d", key, n)
				}
				used[w] = true
				requests[w], wireKey[w] = b, key
			}
			answers, err := call.Input(ctx, requests)
			if err != nil {
				return nil, err
			}
			own := make(map[string]json.RawMessage, len(answers))
			for w, a := range answers {
				if key, ok := wireKey[w]; ok {
					own[key] = a
				}
			}
			if req.Params.InputResponses, err = inputResponsesOf(own); err != nil {
				return nil, err
			}
			req.Params.RequestState = res.RequestState
		}
	}
}

// inputResponsesOf decodes answers as mcp-go's input responses (each keeps
// its JSON, decoded against its request's method when the handler reads
// it).
func inputResponsesOf(answers map[string]json.RawMessage) (mcp.InputResponses, error) {
	if len(answers) == 0 {
		return nil, nil
	}
	out := make(mcp.InputResponses, len(answers))
	for key, b := range answers {
		var r mcp.InputResponse
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("ctokenmcpgo: the answer to input request %q: %w", key, err)
		}
		out[key] = r
	}
	return out, nil
}
