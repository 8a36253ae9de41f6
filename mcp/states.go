package ctokenmcp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StateOptions configures [States] and [SecureRequestState]: Caller (nil
// means TokenUserID), UnboundArgs and Logger, as documented at
// [mcptoken.StateOptions]. The zero value is ready to use.
type StateOptions = mcptoken.StateOptions[CallerFunc]

// States seals and opens the requestState of multi round-trip tool calls
// (SEP-2322). It is safe for concurrent use.
type States struct {
	core   *mcptoken.States
	caller CallerFunc
}

// NewStates returns States that seal with codec. opts may be nil. codec
// must bind states to the tool (ctoken.BindSubjectAndTool), so that a state
// sealed for one tool never opens for another: any other binding
// (ctoken.BindSubject or ctoken.BindNone) is an error matching
// [mcptoken.ErrTargetUnbound] and ctoken.ErrConfig unless
// opts.InsecureSkipToolBinding is set (logged at Warn). A codec not made by
// ctoken.NewRequestStateCodec is an error matching ctoken.ErrConfig.
func NewStates(codec *ctoken.RequestStateCodec, opts *StateOptions) (*States, error) {
	core, caller, err := mcptoken.NewStatesFor(codec, opts, integration)
	if err != nil {
		return nil, err
	}
	return &States{core: core, caller: callerOr(caller)}, nil
}

// Seal returns the requestState to send with an input-required result of
// req: state sealed by the codec for the authenticated caller and
// ctoken.MCPTarget("tools/call", name), and bound to req's arguments unless
// UnboundArgs is set. state must be valid UTF-8, as for the codec. A
// request without an authenticated caller is a *jsonrpc.Error with code
// -32603 (internal error); return it unwrapped.
func (s *States) Seal(ctx context.Context, req *mcp.CallToolRequest, state string) (string, error) {
	if req == nil || req.Params == nil {
		return "", errNilRequest
	}
	subject, err := callerOf(ctx, s.core.Integration(), s.caller, req)
	if err != nil {
		return "", err
	}
	return s.core.Seal(subject, methodCallTool, req.Params.Name, []byte(req.Params.Arguments), state)
}

// Open returns the state the client echoed in req.Params.RequestState.
// When the request carries no state it returns "", false, nil: the first
// round of the call.
//
// A state that does not open, including one sealed for another caller, for
// another tool, for other arguments, with another key, edited, or expired,
// is a *jsonrpc.Error with code -32602 (invalid params) whose data member is
// {"ctokenCode":1022} ([StateExpired]) for an expired state (call again
// without it) or {"ctokenCode":1023} ([StateInvalid]) for an invalid one. No
// part of a rejected state is returned. A request without an authenticated
// caller is -32603 (internal error). Return the error from the tool handler
// unwrapped.
//
// With a single-use codec (ctoken.RequestStateSecurity.Replay set), Open
// claims the state in the replay store with ctx, and a state presented
// again is {"ctokenCode":1026} ([StateUsed]): authentic, already used (Open
// records no result; [SecureRequestState] with StateOptions.AnswerRetries
// answers such a retry). A store failure (full, unreachable, ctx done) is -32603
// (internal error) and leaves the state unconsumed. Every binding (caller,
// tool, arguments, the codec's audience) is checked before the claim, so a
// refused state is not consumed: the honest retry still opens it, once.
//
// Do not call Open in a handler of a server secured by [SecureRequestState]:
// the middleware has already opened the state, and the handler sees the
// plaintext.
func (s *States) Open(ctx context.Context, req *mcp.CallToolRequest) (state string, ok bool, err error) {
	if req == nil || req.Params == nil {
		return "", false, errNilRequest
	}
	wire := req.Params.RequestState
	if wire == "" {
		return "", false, nil
	}
	subject, err := callerOf(ctx, s.core.Integration(), s.caller, req)
	if err != nil {
		return "", false, err
	}
	plain, err := s.core.Open(ctx, subject, methodCallTool, req.Params.Name, []byte(req.Params.Arguments), wire)
	if err != nil {
		return "", false, err
	}
	return plain, true, nil
}

// SealJSON is Seal for a state that is v encoded as JSON.
func SealJSON[T any](ctx context.Context, s *States, req *mcp.CallToolRequest, v T) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("ctokenmcp: encoding state: %w", err)
	}
	return s.Seal(ctx, req, string(b))
}

// OpenJSON is Open for a state sealed by SealJSON: it decodes the state
// into a T. A state that opens but does not decode into a T is a -32602
// error like any invalid state.
func OpenJSON[T any](ctx context.Context, s *States, req *mcp.CallToolRequest) (v T, ok bool, err error) {
	plain, ok, err := s.Open(ctx, req)
	if err != nil || !ok {
		return v, false, err
	}
	if err := json.Unmarshal([]byte(plain), &v); err != nil {
		var zero T
		return zero, false, invalidParams("invalid requestState", StateInvalid)
	}
	return v, true, nil
}
