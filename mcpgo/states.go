package ctokenmcpgo

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
)

// StateOptions configures [States]: Caller (nil means ContextCaller),
// UnboundArgs and Logger, as documented at [mcptoken.StateOptions]. The zero
// value is ready to use.
type StateOptions = mcptoken.StateOptions[CallerFunc]

// States seals and opens the requestState of multi round-trip requests
// (SEP-2322): per handler with [States.SealTool] and [States.OpenTool], or
// for a whole server with [SecureRequestState]. It is safe for concurrent
// use.
type States struct {
	core   *mcptoken.States
	caller CallerFunc
}

// NewStates returns States that seal with codec. opts may be nil; a nil
// codec is an error. codec must bind states to the tool, prompt or resource
// (ctoken.BindSubjectAndTool), so that a state sealed for one never opens
// for another: any other binding (ctoken.BindSubject or ctoken.BindNone)
// is an error matching [mcptoken.ErrTargetUnbound] and
// ctoken.ErrConfig unless opts.InsecureSkipToolBinding is set (logged at
// Warn). A codec not made by ctoken.NewRequestStateCodec is an error
// matching ctoken.ErrConfig.
func NewStates(codec *ctoken.RequestStateCodec, opts *StateOptions) (*States, error) {
	core, caller, err := mcptoken.NewStatesFor(codec, opts, integration)
	if err != nil {
		return nil, err
	}
	return &States{core: core, caller: callerOr(caller)}, nil
}

// callerOf returns the authenticated caller of ctx, or [ErrNoCaller].
func (s *States) callerOf(ctx context.Context) (string, error) {
	id, err := s.caller(ctx)
	return s.core.Integration().Caller(ctx, id, err)
}

// emptyArgs stands for absent arguments.
var emptyArgs = json.RawMessage("{}")

// toolArgs returns the arguments of a tools/call as the client sent them;
// absent arguments are {}.
func toolArgs(p mcp.CallToolParams) any {
	if len(bytes.TrimSpace(p.RawArguments)) > 0 {
		return json.RawMessage(p.RawArguments)
	}
	if p.Arguments == nil {
		return emptyArgs
	}
	return p.Arguments
}

// promptArgs returns the arguments of a prompts/get; absent arguments are {}.
func promptArgs(p mcp.GetPromptParams) any {
	if p.Arguments == nil {
		return emptyArgs
	}
	return p.Arguments
}

// seal seals state for the caller of ctx and ctoken.MCPTarget(method, name),
// bound to args unless UnboundArgs is set.
func (s *States) seal(ctx context.Context, method, name string, args any, state string) (string, error) {
	subject, err := s.callerOf(ctx)
	if err != nil {
		return "", err
	}
	return s.core.Seal(subject, method, name, args, state)
}

// open opens the state wire of a request to method/name with args. Errors:
// ErrNoCaller, ErrStoreUnavailable, or a *Rejection.
func (s *States) open(ctx context.Context, method, name string, args any, wire string) (string, error) {
	subject, err := s.callerOf(ctx)
	if err != nil {
		return "", err
	}
	return s.core.Open(ctx, subject, method, name, args, wire)
}

// SealTool returns the requestState to send with an input-required result
// of req: state sealed by the codec for the authenticated caller and
// ctoken.MCPTarget("tools/call", name), and bound to req's arguments unless
// UnboundArgs is set. state must be valid UTF-8. A request without an
// authenticated caller is [ErrNoCaller]. Do not combine with
// [SecureRequestState], which seals every outgoing state itself.
func (s *States) SealTool(ctx context.Context, req mcp.CallToolRequest, state string) (string, error) {
	return s.seal(ctx, "tools/call", req.Params.Name, toolArgs(req.Params), state)
}

// OpenTool returns the state the client echoed in req.Params.RequestState.
// When the request carries no state it returns "", false, nil: the first
// round of the call.
//
// A state that does not open, including one sealed for another caller, for
// another tool, for other arguments, with another key, edited or expired, is
// a [*Rejection] with code 1022 (expired) or 1023 (invalid); a single-use
// codec's state presented again is 1026 ([StateUsed]: authentic, already
// used). No part of a refused state is returned. Hand the error to
// [ToolResult] for a tool error result carrying the code in its _meta, or
// return it unwrapped for the JSON-RPC error -32603 that [SecureRequestState]
// sends (its message carries the code). A request without a caller is [ErrNoCaller]; a replay
// store that cannot answer is [ErrStoreUnavailable] and leaves the state
// unconsumed. Every binding (caller, tool, arguments, the codec's audience)
// is checked before a single-use codec's claim, so a refused state is not
// consumed.
func (s *States) OpenTool(ctx context.Context, req mcp.CallToolRequest) (state string, ok bool, err error) {
	wire := req.Params.RequestState
	if wire == "" {
		return "", false, nil
	}
	plain, err := s.open(ctx, "tools/call", req.Params.Name, toolArgs(req.Params), wire)
	if err != nil {
		return "", false, err
	}
	return plain, true, nil
}
