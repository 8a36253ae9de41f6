package mcptoken

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken"
)

// The Tasks extension's wire, in front of an SDK's streamable HTTP handler:
// neither Go SDK routes the extension's methods (tasks/get, tasks/update,
// tasks/cancel) to application code, nor lets a tools/call answer with a
// CreateTaskResult (resultType "task"), so [Tasks.Handler] answers those
// requests itself and hands every other request to the SDK unchanged.
// Every body rule below mirrors how go-sdk or mcp-go reads a body; this
// package imports neither, so the tests that provoke each SDK's reading
// are in mcp/sdk_test.go and mcpgo/sdk_test.go, and the hooks that would
// end the mirroring are listed in mcp/sdk.go and mcpgo/sdk.go.

// maxTaskRequestBytes caps the body [Tasks.Handler] reads, as go-sdk's
// DefaultMaxRequestBodyBytes does; a longer one is refused.
const maxTaskRequestBytes = 4 << 20

// CodeHeaderMismatch is the JSON-RPC code of a request whose Mcp-Method or
// Mcp-Name header disagrees with its body (-32020).
const CodeHeaderMismatch = -32020

type rpcRequest struct {
	ID     json.RawMessage
	Method string
	Params json.RawMessage
}

type taskParams struct {
	TaskID         string
	Name           string
	Arguments      json.RawMessage
	InputResponses map[string]json.RawMessage
	decl           bool   // the client declared the extension
	key            any    // _meta's idempotency key (MetaKeyOf)
	version        string // _meta's protocol version, if a string
}

func (p *taskParams) declared() bool { return p.decl }

// errDuplicateKey reports an object that names a key twice, exactly or in
// another case.
var errDuplicateKey = errors.New("mcptoken: duplicate JSON key")

// jsonObject decodes one JSON object into its members by exact key, as
// go-sdk's case-sensitive decoder reads them (encoding/json would match a
// struct field's key in any case, a reading another decoder need not
// share); a key named twice is errDuplicateKey.
func jsonObject(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("mcptoken: not a JSON object")
	}
	m := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, errors.New("mcptoken: not a JSON object")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := m[key]; dup {
			return nil, errDuplicateKey
		}
		m[key] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("mcptoken: not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("mcptoken: data after the JSON object")
	}
	return m, nil
}

// jsonString decodes the string member key of m; absent is "".
func jsonString(m map[string]json.RawMessage, key string) (string, error) {
	v, ok := m[key]
	if !ok {
		return "", nil
	}
	if len(v) == 0 || v[0] != '"' {
		return "", errors.New("mcptoken: not a JSON string")
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

// foldedKey reports a member of m whose key is one of known in another
// case (as encoding/json, and so mcp-go, would match it, bytes.EqualFold):
// a reader that matches keys exactly would not see it.
func foldedKey(m map[string]json.RawMessage, known ...string) bool {
	for key := range m {
		for _, k := range known {
			if key != k && strings.EqualFold(key, k) {
				return true
			}
		}
	}
	return false
}

// decodeRequest reads body as one JSON-RPC 2.0 request (a string or
// number id, a string method); ok is false for anything else, which is
// the SDK's to answer, and err is errDuplicateKey for a body the SDK
// might read otherwise.
func decodeRequest(body []byte) (req rpcRequest, ok bool, err error) {
	m, err := jsonObject(body)
	if err != nil {
		if errors.Is(err, errDuplicateKey) {
			return req, false, err
		}
		return req, false, nil
	}
	if foldedKey(m, "jsonrpc", "id", "method", "params") {
		return req, false, errDuplicateKey
	}
	if v, err := jsonString(m, "jsonrpc"); err != nil || v != "2.0" {
		return req, false, nil
	}
	req.ID, req.Params = m["id"], m["params"]
	if len(req.ID) == 0 || !(req.ID[0] == '"' || req.ID[0] == '-' || req.ID[0] >= '0' && req.ID[0] <= '9') {
		return req, false, nil
	}
	if _, has := m["method"]; !has {
		return req, false, nil
	}
	if req.Method, err = jsonString(m, "method"); err != nil {
		return req, false, nil
	}
	return req, true, nil
}

// decodeParams reads the params of a task method or a tools/call by exact
// key.
func decodeParams(raw json.RawMessage) (taskParams, error) {
	var p taskParams
	m, err := jsonObject(raw)
	if err != nil {
		return p, err
	}
	if foldedKey(m, "taskId", "name", "arguments", "inputResponses", "_meta") {
		return p, errDuplicateKey
	}
	if p.TaskID, err = jsonString(m, "taskId"); err != nil {
		return p, err
	}
	if p.Name, err = jsonString(m, "name"); err != nil {
		return p, err
	}
	p.Arguments = m["arguments"]
	if v, ok := m["inputResponses"]; ok {
		if err := json.Unmarshal(v, &p.InputResponses); err != nil {
			return p, err
		}
	}
	if v, ok := m["_meta"]; ok {
		var mm map[string]json.RawMessage
		if json.Unmarshal(v, &mm) == nil {
			meta := map[string]any{}
			for _, k := range [...]string{MetaIdempotencyKey, LegacyMetaIdempotencyKey} {
				if raw, ok := mm[k]; ok {
					var v string
					if json.Unmarshal(raw, &v) != nil || len(raw) == 0 || raw[0] != '"' {
						meta[k] = false // not a string: refused
						continue
					}
					meta[k] = v
				}
			}
			p.key = MetaKeyOf(meta)
			_ = json.Unmarshal(mm[metaProtocolVersion], &p.version) // not a string: none, as both SDKs read it
			var caps map[string]json.RawMessage
			if json.Unmarshal(mm["io.modelcontextprotocol/clientCapabilities"], &caps) == nil {
				var ext map[string]json.RawMessage
				if json.Unmarshal(caps["extensions"], &ext) == nil {
					_, p.decl = ext[TasksExtension]
				}
			}
		}
	}
	return p, nil
}

// Handler returns next behind the Tasks extension: it answers tasks/get,
// tasks/update and tasks/cancel, and the tools/call of every tool added
// with [Tasks.Add] from a client that declared the extension (in the
// request's _meta clientCapabilities, as the 2026-07-28 revision sends on
// every request) with a CreateTaskResult; it refuses the tools/call of a
// Required tool from any other client with [CodeMissingCapability], and
// hands every other request to next unchanged. A tools/call whose _meta
// carries an idempotency key ([MetaKeyOf]) is keyed by caller, tool and
// key, as [Idempotency] keys a call: a retry with the same arguments gets
// the task the first created (under another ID, which names the same
// task) without running it again, and one with other arguments is refused
// with -32602 and data {"ctokenCode": [CodeKeyReused]}. A task request
// is refused with HTTP 400 as both SDKs refuse a tools/call: with
// [CodeHeaderMismatch] when its _meta names a protocol version and its
// MCP-Protocol-Version header does not (or names another), when a
// 2026-07-28 request lacks its Mcp-Method or Mcp-Name header, or when
// either disagrees with its body; with -32602 when the header names
// 2026-07-28 and _meta no version. A POST whose Content-Type is not
// application/json goes to the SDK, which refuses it. So that no reading
// of a body takes a call past it to the SDK that it would have refused,
// it reads keys exactly, and refuses a body over 4 MiB (413), one that is not exactly
// one JSON value (400, -32700), a request that names a key twice or in
// another case (400, -32600) and a batch that calls a Required tool (400,
// -32021). Without [TasksConfig.Caller] it refuses every task request, and
// says so to the Logger when it is built.
func (t *Tasks) Handler(next http.Handler) http.Handler {
	if t.caller == nil {
		t.fail(slog.LevelError, "Tasks.Handler without TasksConfig.Caller refuses every task request: set Caller to the authentication of the HTTP request", "", nil)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		if !t.anyHost && rebound(r) {
			http.Error(w, "Forbidden: invalid Host header", http.StatusForbidden)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			// The SDK's to refuse: a web page may send a text/plain or
			// form body without a CORS preflight.
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxTaskRequestBytes+1))
		if err != nil {
			http.Error(w, "request body unreadable", http.StatusBadRequest)
			return
		}
		if len(body) > maxTaskRequestBytes {
			// Unread, it could call a Required tool past the adapter.
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if !json.Valid(body) {
			// go-sdk reads the first JSON value and ignores what follows.
			writeRPC(w, http.StatusBadRequest, json.RawMessage("null"), nil, &rpcError{Code: codeParse, Message: "parse error: the body is not one JSON value"}, nil)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
			if t.batchCallsRequired(b) {
				writeRPC(w, http.StatusBadRequest, json.RawMessage("null"), nil, rpcBatch, nil)
				return
			}
			next.ServeHTTP(w, r) // the SDK's: tasks are not batched
			return
		}
		req, ok, err := decodeRequest(body)
		if err != nil {
			writeRPC(w, http.StatusBadRequest, json.RawMessage("null"), nil, rpcDuplicate, nil)
			return
		}
		if !ok {
			next.ServeHTTP(w, r) // a notification, or not JSON-RPC: the SDK's
			return
		}
		var p taskParams
		switch req.Method {
		case "tasks/get", "tasks/update", "tasks/cancel":
			if p, err = decodeParams(req.Params); err != nil {
				if errors.Is(err, errDuplicateKey) {
					writeRPC(w, http.StatusBadRequest, req.ID, nil, rpcDuplicate, nil)
					return
				}
				writeRPC(w, http.StatusOK, req.ID, nil, &rpcError{Code: codeInvalid, Message: "invalid params"}, nil)
				return
			}
			if rerr := headersRefuse(r, req.Method, p.TaskID, p.version); rerr != nil {
				writeRPC(w, http.StatusBadRequest, req.ID, nil, rerr, nil)
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
		case "subscriptions/listen":
			if listensToTasks(req.Params) {
				p, err = decodeParams(req.Params)
				if errors.Is(err, errDuplicateKey) {
					writeRPC(w, http.StatusBadRequest, req.ID, nil, rpcDuplicate, nil)
					return
				}
				if !p.declared() {
					writeMissing(w, req.ID)
					return
				}
			}
		case "tools/call":
			if p, err = decodeParams(req.Params); err != nil {
				if errors.Is(err, errDuplicateKey) {
					writeRPC(w, http.StatusBadRequest, req.ID, nil, rpcDuplicate, nil)
					return
				}
				break
			}
			tool, ok := t.tool(p.Name)
			if !ok {
				break
			}
			if rerr := headersRefuse(r, req.Method, p.Name, p.version); rerr != nil {
				// Before the capability, as the SDK's transport refuses it.
				writeRPC(w, http.StatusBadRequest, req.ID, nil, rerr, nil)
				return
			}
			if !p.declared() {
				if tool.Required {
					writeMissing(w, req.ID)
					return
				}
				break
			}
			caller, ok := t.callerOf(r)
			if !ok {
				writeRPC(w, http.StatusOK, req.ID, nil, rpcNoCaller, nil)
				return
			}
			res, rerr := t.call(r.Context(), caller, tool, &p)
			status := http.StatusOK
			if rerr == rpcClosed {
				status = http.StatusServiceUnavailable
			}
			writeRPC(w, status, req.ID, res, rerr, nil)
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

var (
	rpcNoCaller  = &rpcError{Code: codeInvalidRequest, Message: "no authenticated caller"}
	rpcDuplicate = &rpcError{Code: codeInvalidRequest, Message: "a JSON key is named twice"}
	rpcHeaders   = &rpcError{Code: CodeHeaderMismatch, Message: "the Mcp-Method or Mcp-Name header is missing or does not match the body"}
	rpcNoVersion = &rpcError{Code: CodeHeaderMismatch, Message: "MCP-Protocol-Version header is required for requests carrying " + metaProtocolVersion + ": send it with the version _meta names"}
	rpcNoMeta    = &rpcError{Code: codeInvalid, Message: "missing or invalid _meta field " + metaProtocolVersion + ": send the version the MCP-Protocol-Version header names"}
	rpcClosed    = &rpcError{Code: codeInternal, Message: "the server is shutting down: no task was created; call again"}
	rpcBatch     = &rpcError{Code: CodeMissingCapability, Message: "a batch may not call a tool that requires the " + TasksExtension + " extension"}
)

// batchCallsRequired reports whether a batch calls a Required task tool
// (which only a request of its own, declaring the extension, may do), or
// holds a request the SDK might read otherwise (a key named twice).
func (t *Tasks) batchCallsRequired(b []byte) bool {
	var msgs []json.RawMessage
	if json.Unmarshal(b, &msgs) != nil {
		return false // not JSON: the SDK refuses it
	}
	for _, m := range msgs {
		req, ok, err := decodeRequest(m)
		if err != nil {
			return true
		}
		if !ok || req.Method != "tools/call" {
			continue
		}
		p, err := decodeParams(req.Params)
		if errors.Is(err, errDuplicateKey) {
			return true
		}
		if tool, ok := t.tool(p.Name); err == nil && ok && tool.Required {
			return true
		}
	}
	return false
}

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

// headersRefuse returns the refusal of a task request whose headers do not
// match its body, as both SDKs' transports refuse a tools/call (HTTP 400):
// a request whose _meta names a protocol version (go-sdk: any version;
// mcp-go: 2026-07-28 or later, the only one the extension is sent with) or
// whose MCP-Protocol-Version header names 2026-07-28 or later must state
// the same version in both; one of 2026-07-28 or later must carry the
// Mcp-Method and Mcp-Name headers, and each present (after trimming the
// whitespace HTTP allows) must match the body; nil when it may be served.
func headersRefuse(r *http.Request, method, name, metaVersion string) *rpcError {
	version := r.Header.Get("Mcp-Protocol-Version")
	if metaVersion != "" || version >= standardHeadersVersion {
		switch {
		case version == "":
			return rpcNoVersion
		case metaVersion == "":
			return rpcNoMeta
		case version != metaVersion:
			return &rpcError{Code: CodeHeaderMismatch, Message: "MCP-Protocol-Version header " + strconv.Quote(version) + " does not match request " + metaProtocolVersion + " " + strconv.Quote(metaVersion)}
		}
	}
	required := version >= standardHeadersVersion
	for _, h := range [...]struct{ key, want string }{{"Mcp-Method", method}, {"Mcp-Name", name}} {
		v := r.Header.Values(h.key)
		if len(v) == 0 && required || len(v) > 0 && strings.TrimSpace(v[0]) != h.want {
			return rpcHeaders
		}
	}
	return nil
}

// metaProtocolVersion is the _meta key of a request's protocol version
// (2026-07-28), which over HTTP its MCP-Protocol-Version header repeats.
const metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

// standardHeadersVersion is the first protocol revision whose requests
// carry the Mcp-Method and Mcp-Name headers.
const standardHeadersVersion = "2026-07-28"

// listensToTasks reports whether a subscriptions/listen asks for task
// notifications (params.notifications.taskIds), which only a client that
// declared the extension may do.
func listensToTasks(params json.RawMessage) bool {
	var p struct {
		Notifications map[string]json.RawMessage `json:"notifications"`
	}
	if json.Unmarshal(params, &p) != nil {
		return false // the SDK's to refuse
	}
	for key := range p.Notifications {
		if strings.EqualFold(key, "taskIds") { // as encoding/json, and so mcp-go, may read it
			return true
		}
	}
	return false
}

// call answers the tools/call of a task tool: input_required while its Ask
// asks, then a CreateTaskResult.
func (t *Tasks) call(ctx context.Context, caller string, tool TaskTool, p *taskParams) (any, *rpcError) {
	args := p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	c := &TaskCall{Tool: tool.Name, Caller: caller, Arguments: args, InputResponses: p.InputResponses}
	if p.key != nil {
		// Keyed as Idempotency keys a call: a retry gets the same task.
		key, ok := p.key.(string)
		if !ok {
			return nil, &rpcError{Code: codeInvalid, Message: ErrIdempotencyKey.Error() + ": _meta " + MetaIdempotencyKey + " is not a string, or differs from " + LegacyMetaIdempotencyKey}
		}
		if err := checkIdempotencyKey(key, DefaultMaxIdempotencyKeyBytes); err != nil {
			return nil, &rpcError{Code: codeInvalid, Message: err.Error()}
		}
		fp, err := ctoken.ArgsFingerprint(args)
		if err != nil {
			// Arguments with no canonical form (a number past 2^53):
			// their bytes, which a retry sends again unchanged.
			fp = sha256.Sum256(append([]byte("ctoken/mcp task arguments as sent\x00"), args...))
		}
		c.key, c.args = key, fp
	}
	if tool.Ask != nil {
		if ask := tool.Ask(c); len(ask) > 0 {
			return map[string]any{"resultType": "input_required", "inputRequests": ask}, nil
		}
	}
	st, err := t.Create(ctx, tool, c)
	if errors.Is(err, ErrKeyReused) {
		t.fail(slog.LevelWarn, "task not created: idempotency key reused with other arguments", tool.Name, nil)
		return nil, &rpcError{Code: codeInvalid, Message: msgTaskKeyReused, Data: map[string]int{"ctokenCode": CodeKeyReused}}
	}
	if errors.Is(err, errTasksClosed) {
		return nil, rpcClosed
	}
	if err != nil {
		t.fail(slog.LevelError, "task not created: the task store could not answer", tool.Name, err)
		return nil, &rpcError{Code: codeInternal, Message: "internal error: the task could not be created"}
	}
	return t.wire(st, "task"), nil
}

// msgTaskKeyReused is the message of [CodeKeyReused], as ctokenmcp sends it.
const msgTaskKeyReused = "idempotency key reused with other arguments: this call did not run, but the first call under this key may have: retry with its arguments to get its result; a new key is for a new operation only"

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
		tool := ""
		if ref, oerr := t.open(caller, p.TaskID); oerr == nil {
			tool = ref.Tool
		}
		t.fail(slog.LevelError, method+" failed: the task store could not answer", tool, err)
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
		"pollIntervalMs": max(t.pollFor(st).Milliseconds(), 1),
	}
	if resultType == "task" {
		return m
	}
	switch st.Status {
	case taskInputRequired:
		m["inputRequests"] = st.InputRequests
	case taskCompleted:
		m["result"] = completeResult(st.Result)
	case taskFailed:
		e := rpcError{Code: st.ErrorCode, Message: st.ErrorMessage}
		if st.effect != "" {
			e.Data = map[string]string{"ctokenEffect": st.effect}
		}
		m["error"] = e
		m["statusMessage"] = st.ErrorMessage
	}
	return m
}

// completeResult is a completed task's result as the tools/call it
// stands for would have returned it: a CallToolResult, which the
// 2026-07-28 revision sends with resultType "complete" (a tool's Run
// returns it without, and a stored outcome may lack it).
func completeResult(res json.RawMessage) json.RawMessage {
	m, err := jsonObject(res)
	if err != nil {
		return res // recorded only as a JSON object (outcomeOf)
	}
	if _, ok := m["resultType"]; ok {
		return res
	}
	if len(m) == 0 {
		return json.RawMessage(`{"resultType":"complete"}`)
	}
	b := bytes.TrimSpace(res)
	return append(json.RawMessage(`{"resultType":"complete",`), b[1:]...)
}

// pollFor is the polling interval suggested for st: a running task's age,
// from 10 ms up to PollInterval, so that a client that honours it (the
// extension's own waits the interval before its first poll) reads a quick
// task soon after its end and polls a long one at PollInterval.
func (t *Tasks) pollFor(st TaskState) time.Duration {
	if st.Status != taskWorking && st.Status != taskInputRequired {
		return t.poll
	}
	return min(max(time.Since(st.Created), minPollHint), t.poll)
}

// minPollHint is the shortest polling interval a task suggests.
const minPollHint = 10 * time.Millisecond

func writeMissing(w http.ResponseWriter, id json.RawMessage) {
	data := map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}
	writeRPC(w, http.StatusOK, id, nil, &rpcError{Code: CodeMissingCapability, Message: "the client did not declare the " + TasksExtension + " extension"}, data)
}

// writeRPC writes one JSON-RPC response.
func writeRPC(w http.ResponseWriter, status int, id json.RawMessage, result any, rerr *rpcError, data any) {
	resp := map[string]any{"jsonrpc": "2.0", "id": id}
	if rerr != nil {
		e := map[string]any{"code": rerr.Code, "message": rerr.Message}
		if data == nil && rerr.Data != nil {
			data = rerr.Data
		}
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
