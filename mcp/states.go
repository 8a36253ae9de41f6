package ctokenmcp

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/ctoken/ctoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StateOptions configures States. The zero value is ready to use.
type StateOptions struct {
	// Caller finds the authenticated caller, the subject a state is bound
	// to; nil means TokenUserID.
	Caller CallerFunc
	// UnboundArgs turns off binding states to the call's arguments and
	// seals the application's state as is. Set it only to share states
	// with another implementation of the ctoken request-state codec; by
	// default a client that keeps a state but changes the arguments of
	// the retried call is refused.
	UnboundArgs bool
	// Logger receives one record per rejected state, with the tool name
	// and ctoken's log-safe reason (never the state). Nil discards them.
	Logger *slog.Logger
}

// States seals and opens the requestState of multi round-trip tool calls
// (SEP-2322). It is safe for concurrent use.
type States struct {
	codec       *ctoken.RequestStateCodec
	caller      CallerFunc
	unboundArgs bool
	log         *slog.Logger
}

// NewStates returns States that seal with codec. opts may be nil. For the
// binding to the tool to take effect, configure codec with
// ctoken.BindSubjectAndTool; with ctoken.BindSubject a state is bound to
// the caller and (by default) the arguments only, and with ctoken.BindNone
// to the arguments only: any caller may present it.
func NewStates(codec *ctoken.RequestStateCodec, opts *StateOptions) (*States, error) {
	if codec == nil {
		return nil, errors.New("ctokenmcp: NewStates: nil codec")
	}
	s := &States{codec: codec, caller: TokenUserID}
	if opts != nil {
		if opts.Caller != nil {
			s.caller = opts.Caller
		}
		s.unboundArgs = opts.UnboundArgs
		s.log = opts.Logger
	}
	s.log = logger(s.log)
	return s, nil
}

// envelope is what States seals when arguments are bound: the fingerprint
// of the call's arguments and the application's state.
type envelope struct {
	Args  string `json:"a"`
	State string `json:"s"`
}

// argsOf fingerprints the raw arguments of req; absent arguments are {}.
func argsOf(req *mcp.CallToolRequest) (ctoken.Fingerprint, error) {
	raw := req.Params.Arguments
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	return ctoken.ArgsFingerprint(raw)
}

// Seal returns the requestState to send with an input-required result of
// req: state sealed by the codec for the authenticated caller and
// ctoken.MCPTarget("tools/call", name), and bound to req's arguments unless
// UnboundArgs is set. state must be valid UTF-8, as for the codec. A request without an authenticated caller is a
// *jsonrpc.Error with code -32603 (internal error); return it unwrapped.
func (s *States) Seal(ctx context.Context, req *mcp.CallToolRequest, state string) (string, error) {
	if req == nil || req.Params == nil {
		return "", errors.New("ctokenmcp: nil request")
	}
	subject, err := caller(ctx, s.caller, req, s.log)
	if err != nil {
		return "", err
	}
	plain := state
	if !s.unboundArgs {
		// The codec refuses a state that is not UTF-8; json.Marshal would
		// replace its bytes and seal an altered state.
		if !utf8.ValidString(state) {
			return "", errors.New("ctokenmcp: state is not valid UTF-8")
		}
		fp, err := argsOf(req)
		if err != nil {
			return "", fmt.Errorf("ctokenmcp: fingerprinting arguments: %w", err)
		}
		b, err := json.Marshal(envelope{Args: hex.EncodeToString(fp[:]), State: state})
		if err != nil {
			return "", fmt.Errorf("ctokenmcp: encoding state: %w", err)
		}
		plain = string(b)
	}
	return s.codec.Encode(plain, subject, toolTarget(req))
}

var errStateArgs = errors.New("arguments differ from the sealed call")

// Open returns the state the client echoed in req.Params.RequestState.
// When the request carries no state it returns "", false, nil: the first
// round of the call.
//
// A state that does not open, including one sealed for another caller, for
// another tool, for other arguments, with another key, edited, or expired,
// is a *jsonrpc.Error with code -32602 (invalid params) whose data member is
// {"ctokenCode":1022} for an expired state (call again without it) or
// {"ctokenCode":1023} for an invalid one. No part of a rejected state is
// returned. A request without an authenticated caller is -32603 (internal
// error). Return the error from the tool handler unwrapped.
//
// With a single-use codec (ctoken.RequestStateSecurity.Replay set), Open
// claims the state in the replay store with ctx, and a state presented
// again is invalid. A store failure (full, unreachable, ctx done) is -32603
// (internal error) and leaves the state unconsumed. The arguments are checked after the claim (their
// fingerprint is inside the sealed state), so a retry with other arguments
// consumes the state.
func (s *States) Open(ctx context.Context, req *mcp.CallToolRequest) (state string, ok bool, err error) {
	if req == nil || req.Params == nil {
		return "", false, errors.New("ctokenmcp: nil request")
	}
	wire := req.Params.RequestState
	if wire == "" {
		return "", false, nil
	}
	subject, err := caller(ctx, s.caller, req, s.log)
	if err != nil {
		return "", false, err
	}
	plain, err := s.codec.DecodeContext(ctx, wire, subject, toolTarget(req))
	if err == nil && !s.unboundArgs {
		plain, err = s.unwrap(req, plain)
	}
	if err != nil && !errors.Is(err, ctoken.ErrStateInvalid) && !errors.Is(err, ctoken.ErrStateExpired) &&
		!errors.Is(err, ctoken.ErrStateReplayed) && !errors.Is(err, errStateArgs) {
		// The replay store of a single-use codec failed (full, down, ctx
		// done): a server problem, and the state was not consumed.
		s.log.LogAttrs(ctx, slog.LevelWarn, "ctokenmcp: request state store failed",
			slog.String("tool", req.Params.Name), slog.String("error", err.Error()))
		return "", false, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "request state store unavailable"}
	}
	if err != nil {
		reason := ctoken.Reason(err)
		if reason == "" {
			reason = err.Error() // only errStateArgs: a fixed text
		}
		s.log.LogAttrs(ctx, slog.LevelInfo, "ctokenmcp: request state rejected",
			slog.String("tool", req.Params.Name), slog.String("reason", reason))
		if errors.Is(err, ctoken.ErrStateExpired) {
			return "", false, invalidParams("expired requestState: call again without it", StateExpired)
		}
		return "", false, invalidParams("invalid requestState", StateInvalid)
	}
	return plain, true, nil
}

// unwrap checks the envelope of an authentic state against req's arguments.
func (s *States) unwrap(req *mcp.CallToolRequest, plain string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(plain)))
	dec.DisallowUnknownFields()
	var env envelope
	if err := dec.Decode(&env); err != nil || dec.More() {
		return "", errStateArgs
	}
	sealed, err := hex.DecodeString(env.Args)
	if err != nil {
		return "", errStateArgs
	}
	fp, err := argsOf(req)
	if err != nil || subtle.ConstantTimeCompare(sealed, fp[:]) != 1 {
		return "", errStateArgs
	}
	return env.State, nil
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
