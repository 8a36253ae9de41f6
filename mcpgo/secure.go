package ctokenmcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// SecureRequestState returns one server option that seals requestState in
// dispatch for every tool and prompt of the server, and checks it for every
// resource, so that handlers work with plaintext:
//
//   - tools/call and prompts/get: a non-empty incoming requestState is opened
//     (bound to the caller, to ctoken.MCPTarget(method, name) and, unless
//     UnboundArgs, to the call's arguments) before the handler runs, and the
//     handler sees the plaintext; every non-empty requestState of an
//     input-required result is sealed the same way on its way out.
//   - resources/read: a non-empty incoming requestState is opened the same
//     way (target ctoken.MCPTarget("resources/read", uri); the arguments are
//     not bound, they derive from the URI). mcp-go's resource handlers
//     return contents, not results, so they cannot ask for input and there
//     is nothing to seal.
//
// A state that does not open never reaches the handler: for a tool, a
// prompt and a resource alike the client gets a JSON-RPC error, -32603 with
// a fixed message naming the code: "invalid requestState (ctokenCode
// 1023)", "expired requestState (ctokenCode 1022)", or, for an authentic
// state a single-use codec already accepted, ctokenCode 1026 ([StateUsed]);
// never a result. It is -32603 and not the
// -32602 with {"ctokenCode":N} in data that package ctokenmcp sends because
// mcp-go v1.2.1 sends every error of a tool, prompt or resource handler as
// -32603 with the error's text as the message and no data member; the code
// is in the message, and the error mcp-go hands to its OnError hooks wraps
// the [*Rejection] (errors.As). A request without a caller ([ErrNoCaller])
// or a replay store that cannot answer ([ErrStoreUnavailable]) is -32603
// too, with their own messages. The reason goes to the logger only.
//
// With [StateOptions.AnswerRetries] (a single-use codec whose store is a
// replay.Recorder; [NewStates] refuses any other codec, matching
// [mcptoken.ErrNoRecorder]), a tools/call round runs at most once per
// state and its result is recorded, sealed under the codec's own keys:
// the honest retry of a round whose response was lost (same caller, tool,
// arguments and state) gets that result again, the same JSON, instead of
// 1026; a retry while the round still runs gets the JSON-RPC error -32603
// whose message ends "(retryAfterMs N) (ctokenCode 1027)" ([StateBusy]):
// retry after N ms, at most 1000 ([StateRetryAfter] reads it). Anyone
// else, and any change, is refused as without it; a record that does not
// open is 1026, logged at Error. See [mcptoken.States.Answer] for every
// outcome. prompts/get keeps plain single use.
//
// A handler that returns an already sealed state (one that begins with "v1."
// or "v1e.") is refused with -32603 and logged, so a state is never sealed
// twice; under this option an application's plaintext state must not begin
// with those prefixes.
//
// A tool or prompt that asks for input the client did not declare it can
// provide (for example a client on protocol 2025-11-25 without the
// elicitation capability) gets a clear refusal instead of a failed round
// trip: a tool error result, or for a prompt a -32603 error, whose message
// names the missing capability (see [ErrClientCannotAnswer]).
//
// The codec of st must bind states to the tool (ctoken.BindSubjectAndTool),
// as [mcptoken.CheckTargetBinding] checks; under any other binding a state
// of one tool, prompt or resource would open for another. A server option
// cannot fail, so for such a codec (or a nil st) SecureRequestState logs
// the misconfiguration at error level once and fails closed: every request
// that carries a requestState, and every result that returns one, is
// refused with -32603 and a fixed message.
//
// Install it once, as the first middleware: server.NewMCPServer(name,
// version, ctokenmcpgo.SecureRequestState(states), ...). Middleware added
// before it sees sealed states. It covers the handlers mcp-go runs through
// its middleware chains; task tools registered with AddTaskTool bypass the
// tool chain and are not covered.
func SecureRequestState(st *States) server.ServerOption {
	if err := securable(st); err != nil {
		if st != nil && st.core != nil {
			st.core.Integration().Logger().LogAttrs(context.Background(), slog.LevelError,
				"ctokenmcpgo: SecureRequestState: refusing every requestState", slog.String("error", err.Error()))
		}
		return refuseEveryState
	}
	return func(s *server.MCPServer) {
		server.WithToolHandlerMiddleware(st.toolMiddleware)(s)
		server.WithPromptHandlerMiddleware(st.promptMiddleware)(s)
		server.WithResourceHandlerMiddleware(st.resourceMiddleware)(s)
	}
}

// securable reports why st cannot secure a server: nil, or a codec that
// does not bind states to the tool.
func securable(st *States) error {
	if st == nil || st.core == nil {
		return errors.New("ctokenmcpgo: SecureRequestState: nil States (use NewStates)")
	}
	if err := mcptoken.CheckTargetBinding(st.core.Codec()); err != nil {
		return fmt.Errorf("ctokenmcpgo: SecureRequestState: %w", err)
	}
	return nil
}

// errNotSecured is what a client is told when SecureRequestState was given
// States it cannot secure a server with; the reason is in the server log.
var errNotSecured = errors.New("ctokenmcpgo: server misconfigured: requestState refused")

// refuseEveryState is the option SecureRequestState returns for States it
// cannot secure a server with: it refuses (errNotSecured, sent as -32603)
// every request that carries a requestState and every result that returns
// one, and passes everything else through.
func refuseEveryState(s *server.MCPServer) {
	server.WithToolHandlerMiddleware(func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Params.RequestState != "" {
				return nil, errNotSecured
			}
			res, err := next(ctx, req)
			if err == nil && res != nil && res.RequestState != "" {
				return nil, errNotSecured
			}
			return res, err
		}
	})(s)
	server.WithPromptHandlerMiddleware(func(next server.PromptHandlerFunc) server.PromptHandlerFunc {
		return func(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			if req.Params.RequestState != "" {
				return nil, errNotSecured
			}
			res, err := next(ctx, req)
			if err == nil && res != nil && res.RequestState != "" {
				return nil, errNotSecured
			}
			return res, err
		}
	})(s)
	server.WithResourceHandlerMiddleware(func(next server.ResourceHandlerFunc) server.ResourceHandlerFunc {
		return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			if req.Params.RequestState != "" {
				return nil, errNotSecured
			}
			return next(ctx, req)
		}
	})(s)
}

// ErrClientCannotAnswer reports a handler that asked for input (elicitation,
// sampling or roots) which the client did not declare it can provide. The
// error is a [*mcptoken.InputRefusal], worded as package ctokenmcp words
// its -32021 error: it names the capability, the protocol version and what
// the server saw.
var ErrClientCannotAnswer = mcptoken.ErrClientCannotAnswer

func (st *States) toolMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		const method = "tools/call"
		args := toolArgs(req.Params)
		if wire := req.Params.RequestState; wire != "" && st.core.AnswersRetries() {
			return st.answerRetry(ctx, req, args, wire, next)
		}
		if wire := req.Params.RequestState; wire != "" {
			plain, err := st.open(ctx, method, req.Params.Name, args, wire)
			if err != nil {
				// A JSON-RPC error, not a tool result: a client (and the
				// conformance suite) must not take a refused state for
				// the tool's answer.
				return nil, err
			}
			req.Params.RequestState = plain
		}
		return st.runTool(ctx, req, args, next)
	}
}

// runTool runs next for req and seals the requestState of its result, if
// it asks for input.
func (st *States) runTool(ctx context.Context, req mcp.CallToolRequest, args any, next server.ToolHandlerFunc) (*mcp.CallToolResult, error) {
	const method = "tools/call"
	res, err := next(ctx, req)
	if err != nil || !res.NeedsInput() {
		return res, err
	}
	wire, err := st.outgoing(ctx, method, req.Params.Name, args, req.Header, res.MultiRoundTripResult)
	var refusal *mcptoken.InputRefusal
	switch {
	case errors.As(err, &refusal):
		return mcp.NewToolResultError(refusal.Error()), nil
	case err != nil:
		return nil, err
	case wire == "":
		return res, nil
	}
	out := *res // the handler's result may be shared
	out.RequestState = wire
	return &out, nil
}

// answerRetry handles a tools/call that carries a requestState for States
// that answer retries ([mcptoken.States.Answer]): the round runs once, and
// its result, as JSON, is recorded; the client gets that JSON decoded
// again, the first time and on every honest retry, so both are the same
// bytes on the wire. A refusal is a JSON-RPC error, as without
// AnswerRetries.
func (st *States) answerRetry(ctx context.Context, req mcp.CallToolRequest, args any, wire string, next server.ToolHandlerFunc) (*mcp.CallToolResult, error) {
	const method = "tools/call"
	subject, err := st.callerOf(ctx)
	if err != nil {
		return nil, err
	}
	res, err := mcptoken.AnswerJSON(ctx, st.core, subject, method, req.Params.Name, args, wire, func(ctx context.Context, plain string) (any, error) {
		req.Params.RequestState = plain
		res, err := st.runTool(ctx, req, args, next)
		if err == nil && res == nil {
			err = errors.New("ctokenmcpgo: the tool handler returned no result")
		}
		if err == nil && TokenCode(res) == InProgress {
			// An idempotent tool that had no effect, or whose key's call
			// still runs: the round is freed for its resend, not
			// recorded.
			return nil, &roundNoEffect{res}
		}
		return res, err
	}, toolResultOf)
	var ne *roundNoEffect
	switch {
	case errors.As(err, &ne):
		return ne.res, nil
	case errors.Is(err, mcptoken.ErrNoEffect):
		return retryLater(err, "nothing was recorded and the key is free (the server stopped the round): retry it with the same idempotency key after retryAfterMs (ctokenCode 1025)"), nil
	}
	return res, err
}

// roundNoEffect is the error of a round answered with an [InProgress]
// result: it matches mcptoken.ErrNoEffect, so that
// [mcptoken.States.Answer] frees the round for its resend, which gets res.
type roundNoEffect struct{ res *mcp.CallToolResult }

func (r *roundNoEffect) Error() string {
	return "ctokenmcpgo: the round's tool did not run (ctokenCode 1025)"
}
func (r *roundNoEffect) Unwrap() error { return mcptoken.ErrNoEffect }

// toolResultOf decodes the JSON of a tool result so that mcp-go encodes it
// again to the same bytes (mcp-go keeps structuredContent as the JSON text
// it was).
func toolResultOf(b []byte) (*mcp.CallToolResult, error) {
	var res mcp.CallToolResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (st *States) promptMiddleware(next server.PromptHandlerFunc) server.PromptHandlerFunc {
	return func(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		const method = "prompts/get"
		args := promptArgs(req.Params)
		if wire := req.Params.RequestState; wire != "" {
			plain, err := st.open(ctx, method, req.Params.Name, args, wire)
			if err != nil {
				return nil, err
			}
			req.Params.RequestState = plain
		}
		res, err := next(ctx, req)
		if err != nil || !res.NeedsInput() {
			return res, err
		}
		wire, err := st.outgoing(ctx, method, req.Params.Name, args, req.Header, res.MultiRoundTripResult)
		if err != nil {
			return nil, err
		}
		if wire == "" {
			return res, nil
		}
		out := *res
		out.RequestState = wire
		return &out, nil
	}
}

// outgoing handles a handler's input-required result mrt: a client that
// cannot answer its input requests is an [*mcptoken.InputRefusal] (logged);
// otherwise it returns the sealed state of mrt, or "" when it has none.
func (st *States) outgoing(ctx context.Context, method, name string, args any, header http.Header, mrt mcp.MultiRoundTripResult) (string, error) {
	if err := cannotAnswer(ctx, header, mrt.InputRequests); err != nil {
		st.core.Integration().Logger().LogAttrs(ctx, slog.LevelInfo, "ctokenmcpgo: client cannot provide input",
			mcptoken.NameAttr(method, name), slog.String("error", err.Error()))
		return "", err
	}
	if mrt.RequestState == "" {
		return "", nil
	}
	return st.sealOut(ctx, method, name, args, mrt.RequestState)
}

func (st *States) resourceMiddleware(next server.ResourceHandlerFunc) server.ResourceHandlerFunc {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		if wire := req.Params.RequestState; wire != "" {
			plain, err := st.open(ctx, "resources/read", req.Params.URI, emptyArgs, wire)
			if err != nil {
				return nil, err
			}
			req.Params.RequestState = plain
		}
		return next(ctx, req)
	}
}

// sealOut seals a handler's outgoing state, refusing one already sealed
// ([mcptoken.ErrAlreadySealed]).
func (st *States) sealOut(ctx context.Context, method, name string, args any, state string) (string, error) {
	subject, err := st.callerOf(ctx)
	if err != nil {
		return "", err
	}
	return st.core.SealResult(ctx, subject, method, name, args, state)
}

// cannotAnswer returns the [mcptoken.InputRefusal] of requests when the
// client of ctx did not declare a capability that one of them needs, or nil.
// The capabilities are those of the request (protocol 2026-07-28) or of the
// session (earlier versions); a legacy request without an initialized
// session (stateless HTTP) declares nothing the server can see.
func cannotAnswer(ctx context.Context, header http.Header, requests mcp.InputRequests) error {
	var declared *mcptoken.Declared
	version := server.RequestProtocolVersion(ctx)
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		declared = declaredOf(info.ClientCapabilities)
	} else if sess, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok && sess.GetClientInfo().Name != "" {
		// A session that saw the client's initialize. Over stateless HTTP
		// mcp-go makes a session per request that saw none.
		c := sess.GetClientCapabilities()
		declared = declaredOf(&c)
	}
	var needs []string
	for _, r := range requests {
		switch r.Method {
		case mcp.MethodElicitationCreate:
			needs = append(needs, mcptoken.CapElicitation)
		case mcp.MethodSamplingCreateMessage:
			needs = append(needs, mcptoken.CapSampling)
		case mcp.MethodListRoots:
			needs = append(needs, mcptoken.CapRoots)
		}
	}
	if version == "" {
		version = header.Get(mcp.HeaderProtocolVersion) // stateless HTTP: no session
	}
	if r := mcptoken.CannotAnswer(version, declared, needs...); r != nil {
		return r
	}
	return nil
}

// declaredOf is what caps declares; nil is an empty declaration.
func declaredOf(caps *mcp.ClientCapabilities) *mcptoken.Declared {
	if caps == nil {
		return &mcptoken.Declared{}
	}
	return &mcptoken.Declared{Elicitation: caps.Elicitation != nil, Sampling: caps.Sampling != nil, Roots: caps.Roots != nil}
}
