package ctokenmcpgo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// TaskOptions makes [CallTool] drive a tool call that the server answers
// with a task (the MCP Tasks extension, io.modelcontextprotocol/tasks) to
// its result, and configures [ResumeTask]. The zero value is ready to use.
type TaskOptions struct {
	// Input answers input requests (elicitation, sampling, roots): those
	// of a task in input_required, and those of the multi round-trip
	// rounds a server may ask before it creates the task. mcp-go's client
	// does not let its own handlers be called from outside, so they are
	// not used. Nil: a call that asks for input ends with an error.
	Input func(ctx context.Context, requests mcp.InputRequests) (mcp.InputResponses, error)
	// Started is told the task's ID when the server creates it, before
	// the first poll. Persist it: [ResumeTask] with it gets the result
	// after the client or the server restarted.
	Started func(taskID string)
}

// maxTaskCallRounds bounds the multi round-trip rounds CallTool answers
// before a task, as mcp-go's client bounds a call's.
const maxTaskCallRounds = 10

// callTask is CallTool with opts.Task set: see CallTool.
func callTask(ctx context.Context, c *client.Client, req mcp.CallToolRequest, key string, opts CallOptions) (*mcp.CallToolResult, error) {
	if !mcp.IsModernProtocol(c.ProtocolVersion()) {
		return nil, fmt.Errorf("ctokenmcpgo: CallTool: %w: the Tasks extension needs protocol 2026-07-28, the client speaks %q", ctoken.ErrConfig, c.ProtocolVersion())
	}
	attempts, elapsed := opts.MaxAttempts, opts.MaxElapsed
	if elapsed == 0 {
		elapsed = defaultCallElapsed
	}
	rpc := taskRPC(c)
	p := req.Params
	for round := 0; ; round++ {
		params, err := paramsMap(p)
		if err != nil {
			return nil, err
		}
		// A task tool's call is not idempotent on the server (each call
		// that reaches it creates a task): it is sent again only when the
		// attempt cannot have reached the server. A task it created is
		// driven to its end in the attempt, whose error then carries the
		// key whenever the task's effect is unknown.
		fromTask := false
		raw, err := mcptoken.CallWithRetries(ctx, "ctokenmcpgo", ErrOutcomeUnknown, key, attempts, elapsed, func() (json.RawMessage, mcptoken.RetryVerdict, error) {
			raw, err := rpc(ctx, string(mcp.MethodToolsCall), params)
			if err != nil {
				v := classify(err)
				v.Retry = v.Retry && !v.Reached
				return nil, v, err
			}
			id, ok := mcptoken.TaskIDOf(raw)
			if !ok {
				return raw, mcptoken.RetryVerdict{}, nil
			}
			fromTask = true
			if opts.Task.Started != nil {
				opts.Task.Started(id)
			}
			raw, err = awaitRaw(ctx, c, id, *opts.Task)
			if err != nil {
				return nil, taskVerdict(err), err
			}
			return raw, mcptoken.RetryVerdict{}, nil
		})
		if err != nil {
			return nil, err
		}
		if fromTask {
			return mcp.ParseCallToolResult((*json.RawMessage)(&raw))
		}
		res, err := mcp.ParseCallToolResult((*json.RawMessage)(&raw))
		if err != nil || !res.NeedsInput() {
			return res, err
		}
		if round+1 >= maxTaskCallRounds {
			return nil, fmt.Errorf("ctokenmcpgo: CallTool: the server asked for input more than %d times", maxTaskCallRounds)
		}
		if opts.Task.Input == nil {
			return nil, errors.New("ctokenmcpgo: CallTool: the server asks for input and TaskOptions.Input is nil")
		}
		answers, err := opts.Task.Input(ctx, res.InputRequests)
		if err != nil {
			return nil, err
		}
		p.InputResponses, p.RequestState = answers, res.RequestState
	}
}

// ResumeTask drives the task taskID, which a call of [CallTool] with
// [CallOptions].Task started (its TaskOptions.Started got the ID), to its
// result through c: after the client restarted, or after CallTool ended
// with ctx. The client must be the same caller's (the server refuses
// another caller's task ID as unknown, -32602). A task that failed is a
// [*mcptoken.TaskFailure], one cancelled [mcptoken.ErrTaskCancelled].
func ResumeTask(ctx context.Context, c *client.Client, taskID string, opts TaskOptions) (*mcp.CallToolResult, error) {
	if c == nil || taskID == "" {
		return nil, fmt.Errorf("ctokenmcpgo: ResumeTask: %w: nil client or empty task ID", ctoken.ErrConfig)
	}
	if !mcp.IsModernProtocol(c.ProtocolVersion()) {
		return nil, fmt.Errorf("ctokenmcpgo: ResumeTask: %w: the Tasks extension needs protocol 2026-07-28, the client speaks %q", ctoken.ErrConfig, c.ProtocolVersion())
	}
	return awaitTask(ctx, c, taskID, opts)
}

// taskVerdict is the verdict on err, the end of a task a call created
// other than its result: a failure whose effect is known and a cancel
// settle the call; any other end (the task's instance stopped, a
// transport failure, an input handler's error) leaves its outcome
// unknown, with no attempt left to make.
func taskVerdict(err error) verdict {
	var f *mcptoken.TaskFailure
	if errors.Is(err, mcptoken.ErrTaskCancelled) || errors.As(err, &f) && !errors.Is(err, mcptoken.ErrOutcomeUnknown) {
		return verdict{}
	}
	return verdict{Reached: true}
}

// awaitTask polls the task to its end (mcptoken.AwaitTask) and decodes
// its result.
func awaitTask(ctx context.Context, c *client.Client, id string, opts TaskOptions) (*mcp.CallToolResult, error) {
	raw, err := awaitRaw(ctx, c, id, opts)
	if err != nil {
		return nil, err
	}
	return mcp.ParseCallToolResult((*json.RawMessage)(&raw))
}

// awaitRaw polls the task to its end (mcptoken.AwaitTask) and returns its
// result's JSON.
func awaitRaw(ctx context.Context, c *client.Client, id string, opts TaskOptions) (json.RawMessage, error) {
	var input func(context.Context, map[string]json.RawMessage) (map[string]json.RawMessage, error)
	if opts.Input != nil {
		input = func(ctx context.Context, requests map[string]json.RawMessage) (map[string]json.RawMessage, error) {
			reqs := make(mcp.InputRequests, len(requests))
			for k, b := range requests {
				var r mcp.InputRequest
				if err := json.Unmarshal(b, &r); err != nil {
					return nil, fmt.Errorf("ctokenmcpgo: the task's input request %q: %w", k, err)
				}
				reqs[k] = r
			}
			answers, err := opts.Input(ctx, reqs)
			if err != nil {
				return nil, err
			}
			out := make(map[string]json.RawMessage, len(answers))
			for k, a := range answers {
				b, err := json.Marshal(a)
				if err != nil {
					return nil, fmt.Errorf("ctokenmcpgo: encoding the answer to input request %q: %w", k, err)
				}
				out[k] = b
			}
			return out, nil
		}
	}
	return mcptoken.AwaitTask(ctx, id, taskRPC(c), input, func(err error) bool { return classify(err).Retry })
}

// paramsMap returns p as the JSON object of a request's params.
func paramsMap(p mcp.CallToolParams) (map[string]any, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("ctokenmcpgo: encoding the call: %w", err)
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers pass through as they were given
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("ctokenmcpgo: encoding the call: %w", err)
	}
	return m, nil
}

// taskRPC returns the rpc of mcptoken.AwaitTask over c's transport: each
// request carries the _meta that protocol 2026-07-28 requires, with the
// client's capabilities plus the Tasks extension, and the Mcp-Method and
// Mcp-Name headers (Mcp-Name: the tool's name or the task ID). mcp-go's
// client has no call for a method it does not know, nor one that returns a
// CreateTaskResult.
func taskRPC(c *client.Client) func(ctx context.Context, method string, params map[string]any) (json.RawMessage, error) {
	return func(ctx context.Context, method string, params map[string]any) (json.RawMessage, error) {
		caps := c.GetClientCapabilities()
		caps.Extensions = maps.Clone(caps.Extensions)
		if caps.Extensions == nil {
			caps.Extensions = map[string]any{}
		}
		caps.Extensions[mcptoken.TasksExtension] = map[string]any{}
		params = maps.Clone(params)
		meta, _ := params["_meta"].(map[string]any)
		meta = maps.Clone(meta)
		if meta == nil {
			meta = map[string]any{}
		}
		meta[mcp.MetaKeyProtocolVersion] = c.ProtocolVersion()
		meta[mcp.MetaKeyClientCapabilities] = caps
		params["_meta"] = meta
		name, _ := params["name"].(string)
		if id, ok := params["taskId"].(string); ok {
			name = id
		}
		header := http.Header{}
		header.Set(mcp.HeaderMethod, method)
		if v, ok := mcp.EncodeHeaderValue(name); ok && name != "" {
			header.Set(mcp.HeaderName, v)
		}
		var b [12]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		resp, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION,
			ID:      mcp.NewRequestId("ctoken-" + base64.RawURLEncoding.EncodeToString(b[:])),
			Method:  method,
			Params:  params,
			Header:  header,
		})
		switch {
		case err != nil:
			return nil, transport.NewError(err)
		case resp.Error != nil:
			return nil, resp.Error.AsError()
		}
		return resp.Result, nil
	}
}
