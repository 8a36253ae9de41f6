package ctokenmcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TaskOptions configures [TaskTransport] and [ResumeTask]: the client side
// of the MCP Tasks extension (io.modelcontextprotocol/tasks). The zero
// value is ready to use.
type TaskOptions struct {
	// Input answers the input requests of a task in input_required
	// (elicitation, sampling, roots), each once; the session's own
	// handlers are not reachable from under it. Nil: a task that asks for
	// input ends the call with an error.
	Input func(ctx context.Context, requests mcp.InputRequestMap) (mcp.InputResponseMap, error)
	// Started is told a task's ID when the server creates it, before the
	// first poll. Persist it: [ResumeTask] with it gets the result after
	// the client or the server restarted.
	Started func(taskID string)
}

// maxTaskBodyBytes bounds a response body TaskTransport reads to look for
// a task.
const maxTaskBodyBytes = 16 << 20

// TaskTransport returns an http.RoundTripper over base (nil:
// http.DefaultTransport) for the HTTPClient of go-sdk's
// StreamableClientTransport, under which the session's tool calls use the
// Tasks extension, transparently for cs.CallTool and [CallTool]:
//
//   - every tools/call declares the extension in its _meta
//     clientCapabilities (go-sdk v1.8.0 declares no extension itself);
//   - a tools/call answered with a CreateTaskResult (resultType "task") is
//     driven to its end before the response reaches go-sdk
//     ([mcptoken.AwaitTask]: tasks/get at the server's pollIntervalMs,
//     input requests answered by opts.Input and sent with tasks/update,
//     each request POSTed to the same URL with the call's headers and
//     _meta, and Mcp-Method and Mcp-Name set), and go-sdk receives the
//     task's result as the call's; a task that failed is the JSON-RPC
//     error it failed with, one cancelled -32603 "the task was
//     cancelled", and any other end but the call's context's a -32603
//     error saying why (never a failed exchange, which a retry of the call
//     would answer with a second task). While the task runs, a server that
//     is down or a lost connection is waited out until the call's context
//     ends; the task stays in the server's store, and [ResumeTask] with the
//     ID opts.Started was given gets its result later. Under [CallTool],
//     the task's end is its error as [CallTool] says (typed, and carrying
//     the key when the task's effect is unknown).
//
// Every other request and response passes unchanged. It needs protocol
// 2026-07-28 (a client on an earlier one is never answered with a task).
func TaskTransport(base http.RoundTripper, opts TaskOptions) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &taskTransport{base: base, opts: opts}
}

type taskTransport struct {
	base http.RoundTripper
	opts TaskOptions
}

// rpcMessage is a JSON-RPC request or response, as far as TaskTransport
// reads one.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data,omitempty"`
	} `json:"error,omitempty"`
}

func (t *taskTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.Body == nil || r.ContentLength > maxTaskBodyBytes {
		return t.base.RoundTrip(r)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTaskBodyBytes+1))
	if err != nil {
		r.Body.Close()
		return nil, err
	}
	if len(body) > maxTaskBodyBytes {
		// Too large to look into: sent on as it is, read bytes first.
		rest := r.Body
		r = r.Clone(r.Context())
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), rest), rest}
		return t.base.RoundTrip(r)
	}
	r.Body.Close()
	var msg rpcMessage
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" || len(msg.ID) == 0 {
		return t.base.RoundTrip(withBody(r, body))
	}
	params, meta, err := declareTasks(msg.Params)
	if err != nil {
		return t.base.RoundTrip(withBody(r, body))
	}
	msg.Params = params
	out, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	resp, err := t.base.RoundTrip(withBody(r, out))
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
		return resp, nil // a stream (SSE): the SDK's own answer, never a CreateTaskResult of ctoken's
	}
	rbody, err := io.ReadAll(io.LimitReader(resp.Body, maxTaskBodyBytes+1))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var answer rpcMessage
	id, isTask := "", false
	if json.Unmarshal(rbody, &answer) == nil && answer.Error == nil {
		id, isTask = mcptoken.TaskIDOf(answer.Result)
	}
	if !isTask {
		resp.Body = io.NopCloser(bytes.NewReader(rbody))
		return resp, nil
	}
	if t.opts.Started != nil {
		t.opts.Started(id)
	}
	send := func(ctx context.Context, method string, params map[string]any) (json.RawMessage, error) {
		params = maps.Clone(params)
		params["_meta"] = meta
		return postRPC(ctx, t.base, r, method, id, params)
	}
	result, err := mcptoken.AwaitTask(r.Context(), id, send, taskInput(t.opts.Input), transientHTTP)
	if end, ok := r.Context().Value(taskEndKey{}).(*taskEnd); ok {
		end.set(err) // for CallTool, which go-sdk's error would not tell
	}
	final := map[string]any{"jsonrpc": "2.0", "id": msg.ID}
	var failure *mcptoken.TaskFailure
	switch {
	case errors.As(err, &failure):
		final["error"] = map[string]any{"code": failure.Code, "message": failure.Message}
	case errors.Is(err, mcptoken.ErrTaskCancelled):
		final["error"] = map[string]any{"code": -32603, "message": "the task was cancelled"}
	case err != nil && r.Context().Err() != nil:
		return nil, err
	case err != nil:
		// The task exists: an error, not a failed exchange, so that no
		// retry of the call creates a second one.
		final["error"] = map[string]any{"code": -32603, "message": "ctokenmcp: the task's result could not be read: " + err.Error()}
	default:
		final["result"] = completeResult(result)
	}
	fb, err := json.Marshal(final)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(fb))
	resp.ContentLength = int64(len(fb))
	resp.Header.Set("Content-Length", strconv.Itoa(len(fb)))
	return resp, nil
}

// taskEnd is where [TaskTransport] leaves the end of the task a call of
// [CallTool] created (its context carries it under taskEndKey): go-sdk
// returns a JSON-RPC error, which would lose whether the task failed, was
// cancelled, or its outcome is unknown.
type taskEnd struct {
	mu   sync.Mutex
	seen bool  // a task was created
	err  error // its end: nil for a result
}

type taskEndKey struct{}

func (e *taskEnd) set(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen, e.err = true, err
}

// get reports whether the call created a task, and the task's end.
func (e *taskEnd) get() (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen, e.err
}

// withBody returns r with body as its body.
func withBody(r *http.Request, body []byte) *http.Request {
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return r
}

// declareTasks returns params with the Tasks extension added to its _meta
// clientCapabilities, and that _meta.
func declareTasks(raw json.RawMessage) (json.RawMessage, map[string]any, error) {
	var params map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // numbers pass through as they were sent
	if err := d.Decode(&params); err != nil || params == nil {
		return nil, nil, errors.New("ctokenmcp: tools/call params are not an object")
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	caps, _ := meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any)
	if caps == nil {
		caps = map[string]any{}
	}
	ext, _ := caps["extensions"].(map[string]any)
	if ext == nil {
		ext = map[string]any{}
	}
	ext[mcptoken.TasksExtension] = map[string]any{}
	caps["extensions"] = ext
	meta["io.modelcontextprotocol/clientCapabilities"] = caps
	params["_meta"] = meta
	b, err := json.Marshal(params)
	return b, meta, err
}

// completeResult returns a task's result with resultType "complete", as
// the 2026-07-28 revision marks every final result.
func completeResult(result json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(result, &m) != nil || m == nil {
		return result
	}
	if _, ok := m["resultType"]; !ok {
		m["resultType"] = json.RawMessage(`"complete"`)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return result
	}
	return b
}

// httpStatusError is an HTTP answer other than 200 to a task request.
type httpStatusError struct{ status int }

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("ctokenmcp: task request answered HTTP %d", e.status)
}

// rpcError is a JSON-RPC error answer to a task request.
type rpcError struct {
	Code    int
	Message string
}

func (e *rpcError) Error() string {
	return fmt.Sprintf("ctokenmcp: JSON-RPC error %d: %s", e.Code, e.Message)
}

// transientHTTP reports whether a task request's error may pass (a server
// restarting behind its address, a proxy's 502): a connection that failed
// or an HTTP 5xx, 408 or 429. A JSON-RPC error does not pass.
func transientHTTP(err error) bool {
	var st *httpStatusError
	if errors.As(err, &st) {
		return st.status >= 500 || st.status == http.StatusRequestTimeout || st.status == http.StatusTooManyRequests
	}
	var re *rpcError
	return !errors.As(err, &re)
}

// postRPC POSTs one JSON-RPC request of the Tasks extension to the URL of
// orig, with orig's headers (its authorization among them), Mcp-Method set
// to method and Mcp-Name to the task ID, and returns its result.
func postRPC(ctx context.Context, rt http.RoundTripper, orig *http.Request, method, taskID string, params map[string]any) (json.RawMessage, error) {
	var idb [12]byte
	rand.Read(idb[:]) // never fails (crypto/rand)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "ctoken-" + hex.EncodeToString(idb[:]), "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, orig.URL.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = orig.Header.Clone()
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", taskID)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Del("Content-Length")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxTaskBodyBytes+1))
	if err != nil {
		return nil, err
	}
	var msg rpcMessage
	if json.Unmarshal(b, &msg) != nil {
		if resp.StatusCode != http.StatusOK {
			return nil, &httpStatusError{status: resp.StatusCode}
		}
		return nil, fmt.Errorf("ctokenmcp: %s answered no JSON-RPC response (%s)", method, strings.TrimSpace(resp.Header.Get("Content-Type")))
	}
	if msg.Error != nil {
		return nil, &rpcError{Code: msg.Error.Code, Message: msg.Error.Message}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &httpStatusError{status: resp.StatusCode}
	}
	return msg.Result, nil
}

// taskInput returns in as mcptoken.AwaitTask's input.
func taskInput(in func(context.Context, mcp.InputRequestMap) (mcp.InputResponseMap, error)) func(context.Context, map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	if in == nil {
		return nil
	}
	return func(ctx context.Context, raw map[string]json.RawMessage) (map[string]json.RawMessage, error) {
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var reqs mcp.InputRequestMap
		if err := json.Unmarshal(b, &reqs); err != nil {
			return nil, fmt.Errorf("ctokenmcp: a task's input requests: %w", err)
		}
		answers, err := in(ctx, reqs)
		if err != nil {
			return nil, err
		}
		out := make(map[string]json.RawMessage, len(answers))
		for k, a := range answers {
			if out[k], err = json.Marshal(a); err != nil {
				return nil, fmt.Errorf("ctokenmcp: encoding the answer to input request %q: %w", k, err)
			}
		}
		return out, nil
	}
}

// ResumeTask gets the result of the task taskID (the ID a [TaskOptions]
// Started was given) from the MCP endpoint through hc (nil:
// http.DefaultClient), whose transport must authenticate as the caller that
// started it (the server refuses another caller's ID as unknown, -32602):
// after the client restarted, or after the call's context ended. It polls
// as [TaskTransport] does, on protocol 2026-07-28. A task that failed is a
// [*mcptoken.TaskFailure], one cancelled [mcptoken.ErrTaskCancelled]; a
// JSON-RPC refusal is an error naming its code.
func ResumeTask(ctx context.Context, hc *http.Client, endpoint, taskID string, opts TaskOptions) (*mcp.CallToolResult, error) {
	if endpoint == "" || taskID == "" {
		return nil, fmt.Errorf("ctokenmcp: ResumeTask: %w: empty endpoint or task ID", ctoken.ErrConfig)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	orig, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return nil, fmt.Errorf("ctokenmcp: ResumeTask: %w: %v", ctoken.ErrConfig, err)
	}
	orig.Header.Set("MCP-Protocol-Version", mcptoken.InputRequestsVersion)
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    mcptoken.InputRequestsVersion,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{mcptoken.TasksExtension: map[string]any{}}},
	}
	rt := roundTripperOf(hc)
	send := func(ctx context.Context, method string, params map[string]any) (json.RawMessage, error) {
		params = maps.Clone(params)
		params["_meta"] = meta
		return postRPC(ctx, rt, orig, method, taskID, params)
	}
	raw, err := mcptoken.AwaitTask(ctx, taskID, send, taskInput(opts.Input), transientHTTP)
	if err != nil {
		return nil, err
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("ctokenmcp: ResumeTask: the task's result: %w", err)
	}
	return &res, nil
}

// roundTripperOf returns the transport of hc, as an http.RoundTripper that
// follows hc's Transport (nil: http.DefaultTransport).
func roundTripperOf(hc *http.Client) http.RoundTripper {
	if hc.Transport != nil {
		return hc.Transport
	}
	return http.DefaultTransport
}
