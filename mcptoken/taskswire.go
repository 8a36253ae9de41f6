package mcptoken

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// The Tasks extension's wire, in front of an SDK's streamable HTTP handler:
// neither Go SDK routes the extension's methods (tasks/get, tasks/update,
// tasks/cancel) to application code, nor lets a tools/call answer with a
// CreateTaskResult (resultType "task"), so [Tasks.Handler] answers those
// requests itself and hands every other request to the SDK unchanged.

// maxTaskRequestBytes caps the body [Tasks.Handler] reads; a longer one
// goes to the SDK unread.
const maxTaskRequestBytes = 4 << 20

// CodeHeaderMismatch is the JSON-RPC code of a request whose Mcp-Method or
// Mcp-Name header disagrees with its body (-32020).
const CodeHeaderMismatch = -32020

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type taskParams struct {
	TaskID         string                     `json:"taskId"`
	Name           string                     `json:"name"`
	Arguments      json.RawMessage            `json:"arguments"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
	Meta           struct {
		Caps *struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		} `json:"io.modelcontextprotocol/clientCapabilities"`
	} `json:"_meta"`
}

func (p *taskParams) declared() bool {
	if p.Meta.Caps == nil {
		return false
	}
	_, ok := p.Meta.Caps.Extensions[TasksExtension]
	return ok
}

// Handler returns next behind the Tasks extension: it answers tasks/get,
// tasks/update and tasks/cancel, and the tools/call of every tool added
// with [Tasks.Add] from a client that declared the extension (in the
// request's _meta clientCapabilities, as the 2026-07-28 revision sends on
// every request) with a CreateTaskResult; it refuses the tools/call of a
// Required tool from any other client with [CodeMissingCapability], and
// hands every other request to next unchanged. A task method whose
// Mcp-Method or Mcp-Name header disagrees with its body is refused with
// HTTP 400 and [CodeHeaderMismatch].
func (t *Tasks) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		if !t.anyHost && rebound(r) {
			http.Error(w, "Forbidden: invalid Host header", http.StatusForbidden)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxTaskRequestBytes+1))
		if err != nil {
			http.Error(w, "request body unreadable", http.StatusBadRequest)
			return
		}
		if len(body) > maxTaskRequestBytes {
			// No task request is this large: the SDK reads it whole.
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
			next.ServeHTTP(w, r)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req rpcRequest
		if json.Unmarshal(body, &req) != nil || len(req.ID) == 0 {
			next.ServeHTTP(w, r) // a batch, a notification, or not JSON: the SDK's
			return
		}
		var p taskParams
		switch req.Method {
		case "tasks/get", "tasks/update", "tasks/cancel":
			if json.Unmarshal(req.Params, &p) != nil {
				writeRPC(w, http.StatusOK, req.ID, nil, &rpcError{Code: codeInvalid, Message: "invalid params"}, nil)
				return
			}
			if !headersMatch(r, req.Method, p.TaskID) {
				writeRPC(w, http.StatusBadRequest, req.ID, nil, &rpcError{Code: CodeHeaderMismatch, Message: "Mcp-Method or Mcp-Name header does not match the body"}, nil)
				return
			}
			if !p.declared() {
				writeMissing(w, req.ID)
				return
			}
			caller, ok := t.callerOf(r)
			if !ok {
				writeRPC(w, http.StatusOK, req.ID, nil, rpcNoCaller, nil)
				return
			}
			res, rerr := t.serve(r.Context(), caller, req.Method, &p)
			writeRPC(w, http.StatusOK, req.ID, res, rerr, nil)
			return
		case "tools/call":
			if json.Unmarshal(req.Params, &p) != nil {
				break
			}
			tool, ok := t.tool(p.Name)
			if !ok {
				break
			}
			if !p.declared() {
				if tool.Required {
					writeMissing(w, req.ID)
					return
				}
				break
			}
			if !headersMatch(r, req.Method, p.Name) {
				writeRPC(w, http.StatusBadRequest, req.ID, nil, &rpcError{Code: CodeHeaderMismatch, Message: "Mcp-Method or Mcp-Name header does not match the body"}, nil)
				return
			}
			caller, ok := t.callerOf(r)
			if !ok {
				writeRPC(w, http.StatusOK, req.ID, nil, rpcNoCaller, nil)
				return
			}
			res, rerr := t.call(r.Context(), caller, tool, &p)
			writeRPC(w, http.StatusOK, req.ID, res, rerr, nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// callerOf returns the caller of r, or false when there is none.
func (t *Tasks) callerOf(r *http.Request) (string, bool) {
	if t.caller == nil {
		return "", false
	}
	c, err := t.caller(r)
	return c, err == nil && c != ""
}

var rpcNoCaller = &rpcError{Code: codeInvalidRequest, Message: "no authenticated caller"}

// rebound reports a request that arrived on a loopback address with a
// Host that is not loopback: a DNS-rebinding attempt on a local server.
func rebound(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && loopback(local.String()) && !loopback(r.Host)
}

// loopback reports whether addr (a host, or host:port) is a loopback
// address or localhost.
func loopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// headersMatch reports whether the Mcp-Method and Mcp-Name headers, where
// present, match the body (after trimming the whitespace HTTP allows).
func headersMatch(r *http.Request, method, name string) bool {
	if v := r.Header.Values("Mcp-Method"); len(v) > 0 && strings.TrimSpace(v[0]) != method {
		return false
	}
	if v := r.Header.Values("Mcp-Name"); len(v) > 0 && strings.TrimSpace(v[0]) != name {
		return false
	}
	return true
}

// call answers the tools/call of a task tool: input_required while its Ask
// asks, then a CreateTaskResult.
func (t *Tasks) call(ctx context.Context, caller string, tool TaskTool, p *taskParams) (any, *rpcError) {
	args := p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	c := &TaskCall{Tool: tool.Name, Caller: caller, Arguments: args, InputResponses: p.InputResponses}
	if tool.Ask != nil {
		if ask := tool.Ask(c); len(ask) > 0 {
			return map[string]any{"resultType": "input_required", "inputRequests": ask}, nil
		}
	}
	st, err := t.Create(ctx, tool, c)
	if err != nil {
		return nil, &rpcError{Code: codeInternal, Message: "internal error: the task could not be created"}
	}
	return t.wire(st, "task"), nil
}

// serve answers a task method.
func (t *Tasks) serve(ctx context.Context, caller, method string, p *taskParams) (any, *rpcError) {
	var err error
	switch method {
	case "tasks/get":
		var st TaskState
		if st, err = t.Get(ctx, caller, p.TaskID); err == nil {
			return t.wire(st, "complete"), nil
		}
	case "tasks/update":
		err = t.Update(ctx, caller, p.TaskID, p.InputResponses)
	case "tasks/cancel":
		err = t.Cancel(ctx, caller, p.TaskID)
	}
	switch {
	case errors.Is(err, ErrTaskInvalid):
		return nil, &rpcError{Code: codeInvalid, Message: "unknown or expired taskId"}
	case err != nil:
		return nil, &rpcError{Code: codeInternal, Message: "internal error: the task store could not answer"}
	}
	return map[string]any{"resultType": "complete"}, nil
}

// wire is a task on the wire: a CreateTaskResult (resultType "task") or a
// tasks/get result (resultType "complete").
func (t *Tasks) wire(st TaskState, resultType string) map[string]any {
	m := map[string]any{
		"resultType":     resultType,
		"taskId":         st.ID,
		"status":         st.Status,
		"createdAt":      st.Created.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt":  st.Updated.UTC().Format(time.RFC3339Nano),
		"ttlMs":          t.ttl.Milliseconds(),
		"pollIntervalMs": max(t.poll.Milliseconds(), 1),
	}
	if resultType == "task" {
		return m
	}
	switch st.Status {
	case taskInputRequired:
		m["inputRequests"] = st.InputRequests
	case taskCompleted:
		m["result"] = st.Result
	case taskFailed:
		m["error"] = rpcError{Code: st.ErrorCode, Message: st.ErrorMessage}
	}
	return m
}

func writeMissing(w http.ResponseWriter, id json.RawMessage) {
	data := map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}
	writeRPC(w, http.StatusOK, id, nil, &rpcError{Code: CodeMissingCapability, Message: "the client did not declare the " + TasksExtension + " extension"}, data)
}

// writeRPC writes one JSON-RPC response.
func writeRPC(w http.ResponseWriter, status int, id json.RawMessage, result any, rerr *rpcError, data any) {
	resp := map[string]any{"jsonrpc": "2.0", "id": id}
	if rerr != nil {
		e := map[string]any{"code": rerr.Code, "message": rerr.Message}
		if data != nil {
			e["data"] = data
		}
		resp["error"] = e
	} else {
		resp["result"] = result
	}
	b, err := json.Marshal(resp)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
