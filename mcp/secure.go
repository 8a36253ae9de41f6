package ctokenmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The methods whose params and input-required results carry a
// requestState (protocol 2026-07-28, go-sdk v1.8.0).
const (
	methodCallTool     = "tools/call"
	methodGetPrompt    = "prompts/get"
	methodReadResource = "resources/read"
)

// SecureRequestState installs, on server, receiving middleware that seals
// and opens the requestState of every multi round-trip request (SEP-2322)
// with codec, so that handlers work with plaintext state and no handler can
// forget to protect it. It covers tools/call, prompts/get and
// resources/read, the three methods that carry requestState in go-sdk
// v1.8.0. opts may be nil; it is read as for [NewStates].
//
// On the way in, a non-empty requestState is opened for the authenticated
// caller (opts.Caller) and ctoken.MCPTarget(method, name), where name is
// the tool or prompt name or the resource URI, and, unless
// opts.UnboundArgs is set, checked against the fingerprint of the call's
// arguments (a tool's arguments, a prompt's arguments, {} for a resource).
// The handler then sees the plaintext in its params' RequestState. A state
// that does not open never reaches the handler: the client gets JSON-RPC
// error -32602 with {"ctokenCode":1022} ([StateExpired]) or
// {"ctokenCode":1023} ([StateInvalid]) in data, or, for an authentic state
// of this very call that a single-use codec already accepted,
// {"ctokenCode":1026} ([StateUsed]); the reason goes to opts.Logger only.
// A request without an authenticated caller, and a replay store
// (single-use codec) that cannot answer, are -32603.
//
// With opts.AnswerRetries (a single-use codec whose store is a
// replay.Recorder; any other codec is refused here, matching
// [mcptoken.ErrNoRecorder]), a tools/call round runs at most once per
// state and its result is recorded, sealed under the codec's own keys: the
// honest retry of a round whose response was lost (same caller, tool,
// arguments and state) gets that result again, the same JSON on the wire,
// instead of 1026; a retry while the round still runs gets
// {"ctokenCode":1027,"retryAfterMs":N} ([StateBusy]; N at most 1000):
// retry after N ms. Anyone else, and any change, is refused as without
// it; a record that does not open is 1026, logged at Error. See
// [mcptoken.States.Answer] for every outcome. prompts/get and
// resources/read keep plain single use.
//
// On the way out, a non-empty RequestState of the handler's result is
// sealed with the same binding (to the arguments of the call that produced
// it) before the result is sent; the client only ever sees v1. or v1e.
// strings. A handler must return plaintext: a result whose RequestState
// already begins with "v1." or "v1e." (a handler that sealed it itself with
// [States.Seal]) is refused with -32603 and logged, rather than sealed
// twice, and so is a plaintext state that happens to begin that way.
//
// A client on a protocol before 2026-07-28 is asked for input by the SDK
// itself, in process, and the handler is called again with the plaintext
// state, which never leaves the server. When that client declared no
// elicitation capability, or the server saw no declaration (a 2025-11-25
// client over stateless streamable HTTP), the SDK's failure, sent as
// JSON-RPC code 0, is replaced by the error
// mcp.CodeMissingRequiredClientCapabilities (-32021) with data
// {"requiredCapabilities":{"elicitation":{}}} (only what is required) and
// the message of [mcptoken.CannotAnswer], which begins "input required: the
// client cannot answer this server's input requests" and says what the
// server saw; a client that has the capability but whose answer fails gets
// -32603. The failure is recognised by the text
// go-sdk v1.8.0 gives it ("multi-round-trip: ..."); the tests pin it.
//
// codec must bind states to the tool (ctoken.BindSubjectAndTool);
// SecureRequestState asks the codec ([mcptoken.CheckTargetBinding]) and
// refuses any other codec, whatever opts.InsecureSkipToolBinding says. With opts.UnboundArgs set and such a codec, a
// state is sealed exactly as the reference D dispatch seals it (subject,
// method "\x00" name, no argument wrapper), so a mixed fleet shares states.
//
// Install it once, before serving. Handlers of a secured server must not
// call [States.Open] or [States.Seal] (their per-handler counterparts); use
// one or the other.
func SecureRequestState(server *mcp.Server, codec *ctoken.RequestStateCodec, opts *StateOptions) error {
	if server == nil {
		return errors.New("ctokenmcp: SecureRequestState: nil server")
	}
	if err := requireToolBinding(codec); err != nil {
		return err
	}
	s, err := NewStates(codec, opts)
	if err != nil {
		return err
	}
	server.AddReceivingMiddleware(s.middleware)
	return nil
}

// requireToolBinding refuses a codec that does not bind states to the tool:
// a state sealed for one target must not open for another
// ([mcptoken.CheckTargetBinding]).
func requireToolBinding(codec *ctoken.RequestStateCodec) error {
	if codec == nil {
		return errors.New("ctokenmcp: SecureRequestState: nil codec")
	}
	if err := mcptoken.CheckTargetBinding(codec); err != nil {
		return fmt.Errorf("ctokenmcp: SecureRequestState: %w", err)
	}
	return nil
}

// mrtrCall is the part of a request that carries a requestState, in
// SDK-independent terms.
type mrtrCall struct {
	name       string            // tool or prompt name, or resource URI
	args       []byte            // JSON text of a tool's arguments, nil when absent
	promptArgs map[string]string // a prompt's arguments, encoded on demand
	state      string
}

// argsJSON returns the JSON text of the call's arguments (nil: absent).
func (c *mrtrCall) argsJSON() ([]byte, error) {
	if c.promptArgs != nil {
		return json.Marshal(c.promptArgs)
	}
	return c.args, nil
}

// callOf extracts the requestState-carrying part of req for method, or
// ok == false when req is not a request this middleware handles.
func callOf(method string, req mcp.Request) (c mrtrCall, ok bool) {
	switch r := req.(type) {
	case *mcp.CallToolRequest:
		if method == methodCallTool && r.Params != nil {
			return mrtrCall{name: r.Params.Name, args: r.Params.Arguments, state: r.Params.RequestState}, true
		}
	case *mcp.GetPromptRequest:
		if method == methodGetPrompt && r.Params != nil {
			return mrtrCall{name: r.Params.Name, promptArgs: r.Params.Arguments, state: r.Params.RequestState}, true
		}
	case *mcp.ReadResourceRequest:
		if method == methodReadResource && r.Params != nil {
			return mrtrCall{name: r.Params.URI, state: r.Params.RequestState}, true
		}
	}
	return c, false
}

// withState returns a copy of req whose params carry state as
// RequestState. The caller's request and params are not modified.
func withState(req mcp.Request, state string) mcp.Request {
	switch r := req.(type) {
	case *mcp.CallToolRequest:
		p := *r.Params
		p.RequestState = state
		cp := *r
		cp.Params = &p
		return &cp
	case *mcp.GetPromptRequest:
		p := *r.Params
		p.RequestState = state
		cp := *r
		cp.Params = &p
		return &cp
	case *mcp.ReadResourceRequest:
		p := *r.Params
		p.RequestState = state
		cp := *r
		cp.Params = &p
		return &cp
	}
	return req
}

// resultState returns the RequestState of a result of the three methods,
// and a function returning a copy of the result carrying another state.
func resultState(res mcp.Result) (string, func(string) mcp.Result) {
	switch r := res.(type) {
	case *mcp.CallToolResult:
		if r != nil && r.RequestState != "" {
			return r.RequestState, func(s string) mcp.Result { cp := *r; cp.RequestState = s; return &cp }
		}
	case *mcp.GetPromptResult:
		if r != nil && r.RequestState != "" {
			return r.RequestState, func(s string) mcp.Result { cp := *r; cp.RequestState = s; return &cp }
		}
	case *mcp.ReadResourceResult:
		if r != nil && r.RequestState != "" {
			return r.RequestState, func(s string) mcp.Result { cp := *r; cp.RequestState = s; return &cp }
		}
	}
	return "", nil
}

// errSealing is the error the client is sent when an outgoing state cannot
// be sealed; the reason goes to the log.
func errSealing() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "server error sealing requestState"}
}

// middleware is the receiving middleware of SecureRequestState.
func (s *States) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, ok := callOf(method, req)
		if !ok {
			return next(ctx, method, req)
		}
		var (
			subject string
			args    []byte
			err     error
		)
		if call.state != "" && method == methodCallTool && s.core.AnswersRetries() {
			return s.answerRetry(ctx, method, req, call, next)
		}
		if call.state != "" {
			if subject, err = callerOf(ctx, s.core.Integration(), s.caller, req); err != nil {
				return nil, err
			}
			if args, err = call.argsJSON(); err != nil {
				return nil, fmt.Errorf("ctokenmcp: encoding arguments: %w", err)
			}
			plain, err := s.core.Open(ctx, subject, method, call.name, args, call.state)
			if err != nil {
				return nil, err
			}
			req = withState(req, plain)
		}
		return s.runRound(ctx, method, req, call, subject, args, next)
	}
}

// runRound runs next for req and seals the requestState of its result, if
// any, for subject and args (found when empty).
func (s *States) runRound(ctx context.Context, method string, req mcp.Request, call mrtrCall, subject string, args []byte, next mcp.MethodHandler) (mcp.Result, error) {
	res, err := next(ctx, method, req)
	if err != nil {
		return res, s.olderClientError(ctx, method, call.name, req, err)
	}
	state, replace := resultState(res)
	if state == "" {
		return res, nil
	}
	if subject == "" {
		if subject, err = callerOf(ctx, s.core.Integration(), s.caller, req); err != nil {
			return nil, err
		}
		if args, err = call.argsJSON(); err != nil {
			return nil, fmt.Errorf("ctokenmcp: encoding arguments: %w", err)
		}
	}
	wire, err := s.core.SealResult(ctx, subject, method, call.name, args, state)
	if err != nil {
		return nil, errSealing()
	}
	return replace(wire), nil
}

// answerRetry handles a tools/call that carries a requestState for States
// that answer retries ([mcptoken.States.Answer]): the round runs once, and
// its result, as JSON, is recorded; the client gets that JSON decoded
// again ([toolResultOf]), the first time and on every honest retry, so
// both are the same bytes on the wire. The error a handler's result
// carries for sending middleware (CallToolResult.GetError) is kept on the
// first answer; a retry's answer has none, as it was never sent.
func (s *States) answerRetry(ctx context.Context, method string, req mcp.Request, call mrtrCall, next mcp.MethodHandler) (mcp.Result, error) {
	subject, err := callerOf(ctx, s.core.Integration(), s.caller, req)
	if err != nil {
		return nil, err
	}
	args, err := call.argsJSON()
	if err != nil {
		return nil, fmt.Errorf("ctokenmcp: encoding arguments: %w", err)
	}
	var ranErr error // the error a handler's result carries (SetError), for sending middleware
	res, err := mcptoken.AnswerJSON(ctx, s.core, subject, method, call.name, args, call.state, func(ctx context.Context, plain string) (any, error) {
		res, err := s.runRound(ctx, method, withState(req, plain), call, subject, args, next)
		if r, ok := res.(*mcp.CallToolResult); ok && r != nil && err == nil {
			ranErr = r.GetError()
		}
		if retrySaysNothingRan(err) {
			err = &roundNoEffect{err}
		}
		return res, err
	}, toolResultOf)
	var ne *roundNoEffect
	switch {
	case errors.As(err, &ne):
		return nil, ne.err // the round is freed: its resend runs it again
	case errors.Is(err, mcptoken.ErrNoEffect):
		return nil, retryLater(err, msgNoEffect) // the round stopped by ctoken
	case err != nil:
		return nil, err
	}
	if ranErr != nil && res.IsError {
		// Not encoded: the content and isError are already the handler's.
		res.SetError(ranErr)
	}
	return res, nil
}

// roundNoEffect is the error of a round whose idempotent tool did not run
// or had no effect (1025): it matches mcptoken.ErrNoEffect, so that
// [mcptoken.States.Answer] frees the round for its resend, and is sent as
// the error it holds.
type roundNoEffect struct{ err error }

func (r *roundNoEffect) Error() string   { return r.err.Error() }
func (r *roundNoEffect) Unwrap() []error { return []error{mcptoken.ErrNoEffect, r.err} }

// retrySaysNothingRan reports whether err is the 1025 (InProgress) of an
// idempotent tool: it had no effect, or its key's call is still running.
func retrySaysNothingRan(err error) bool {
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInternalError || len(we.Data) == 0 {
		return false
	}
	var d idempotencyData
	return json.Unmarshal(we.Data, &d) == nil && d.Code == InProgress
}

// toolResultOf decodes the JSON of a tool result so that the SDK encodes
// it again to the same bytes: its structuredContent is kept as the JSON
// text it was (decoded into an any, an object's members would be sorted).
func toolResultOf(b []byte) (*mcp.CallToolResult, error) {
	var res mcp.CallToolResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, err
	}
	var raw struct {
		Structured json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	if len(raw.Structured) > 0 {
		res.StructuredContent = raw.Structured
	}
	return &res, nil
}

// olderClientError replaces the error go-sdk returns (as JSON-RPC code 0)
// when it cannot fulfil a handler's input requests in process for a client
// on a protocol before 2026-07-28: a client without the elicitation
// capability gets -32021 from [mcptoken.CannotAnswer] (over stateless HTTP
// the SDK sees no declaration, so there it is always the case); a client
// that declared it but whose answer failed gets -32603. Every other error is
// returned as is.
func (s *States) olderClientError(ctx context.Context, method, name string, req mcp.Request, err error) error {
	if !sdkInputFailed(err) {
		return err
	}
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok {
		return err
	}
	version, caps := "", (*mcp.ClientCapabilities)(nil)
	if ip := ss.InitializeParams(); ip != nil {
		version, caps = ip.ProtocolVersion, ip.Capabilities
	}
	if mcptoken.SpeaksInputRequests(version) {
		return err
	}
	s.core.Integration().Logger().LogAttrs(ctx, slog.LevelInfo, "ctokenmcp: client cannot provide input",
		mcptoken.NameAttr(method, name), slog.String("protocol", version), slog.String("error", err.Error()))
	refusal := mcptoken.CannotAnswer(version, sdkDeclared(caps), sdkInputCapability)
	if refusal == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "input required: asking the client for input failed"}
	}
	return clientLacksInput(refusal)
}

// clientLacksInput is the -32021 error of r: its message, and data
// {"requiredCapabilities":{...}} listing only the capabilities required.
func clientLacksInput(r *mcptoken.InputRefusal) *jsonrpc.Error {
	return &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Message: r.Error(), Data: r.Data()}
}
