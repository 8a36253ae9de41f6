package mcptoken

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// States seals and opens the requestState of multi round-trip requests
// (SEP-2322) for an SDK integration, which resolves the caller and converts
// its request and result types; everything else happens here. It is safe
// for concurrent use. A zero or nil States refuses every seal and open with
// an error.
type States struct {
	codec       *ctoken.RequestStateCodec
	unboundArgs bool
	in          *Integration
	// recorder is the codec's store when the States answer retries.
	recorder replay.Recorder
	// renewer is recorder when it renews leases (a round then holds its
	// state for hold, renewed while it runs), and claims the same store,
	// which takes the mark that a round began; both nil otherwise.
	renewer replay.Renewer
	claims  replay.Store
	hold    time.Duration
	// sealer seals and opens the results of rounds under the codec's ring
	// of the last state answered (rounds.go).
	sealer atomic.Pointer[ringSealer]
}

// StatesConfig is what [NewStates] reads of an SDK module's
// [StateOptions]; its zero value is the safe default.
type StatesConfig struct {
	// UnboundArgs: see [StateOptions].UnboundArgs.
	UnboundArgs bool
	// InsecureSkipToolBinding: see [StateOptions].InsecureSkipToolBinding.
	InsecureSkipToolBinding bool
	// AnswerRetries: see [StateOptions].AnswerRetries.
	AnswerRetries bool
}

// NewStates returns States that seal with codec and report through in.
// Unless cfg.UnboundArgs is set, a state is bound to the arguments of the
// call with [WrapArgs]; with it, the state is sealed as is (the interop
// mode: with a ctoken.BindSubjectAndTool codec, exactly what the reference D
// dispatch seals).
//
// The codec must bind states to their target (ctoken.BindSubjectAndTool),
// so that a state sealed for one tool never opens for another: any other
// binding (ctoken.BindSubject or ctoken.BindNone) is an error matching
// [ErrTargetUnbound] and ctoken.ErrConfig, unless
// cfg.InsecureSkipToolBinding is set, which is logged at Warn through in.
// A codec not made by ctoken.NewRequestStateCodec (it has no key) matches
// ctoken.ErrConfig and ctoken.ErrNoKey. A nil codec or an incomplete in is
// an error. With cfg.AnswerRetries, a codec that is not single-use or whose
// replay store is not a replay.Recorder is an error matching
// [ErrNoRecorder] and ctoken.ErrConfig.
func NewStates(codec *ctoken.RequestStateCodec, cfg StatesConfig, in *Integration) (*States, error) {
	if err := in.check("NewStates"); err != nil {
		return nil, err
	}
	if codec == nil {
		return nil, errors.New(in.Name + ": NewStates: nil codec")
	}
	if err := codec.Ready(); err != nil {
		return nil, fmt.Errorf("%s: NewStates: %w: the request-state codec is not made by ctoken.NewRequestStateCodec: %w", in.Name, ctoken.ErrConfig, err)
	}
	if err := CheckTargetBinding(codec); err != nil {
		if !cfg.InsecureSkipToolBinding {
			return nil, fmt.Errorf("%s: NewStates: %w: %w (or set InsecureSkipToolBinding)", in.Name, ctoken.ErrConfig, err)
		}
		in.Logger().LogAttrs(context.Background(), slog.LevelWarn,
			in.Name+": InsecureSkipToolBinding: the request-state codec does not bind states to the tool; a state sealed for one tool, prompt or resource opens for another",
			slog.String("binding", bindingName(codec.Binding())))
	}
	st := &States{codec: codec, unboundArgs: cfg.UnboundArgs, in: in}
	if cfg.AnswerRetries {
		rec, err := recorderOf(codec)
		if err != nil {
			return nil, fmt.Errorf("%s: NewStates: %w", in.Name, err)
		}
		st.recorder = rec
		if r, ok := rec.(replay.Renewer); ok {
			st.claims, _ = rec.(replay.Store) // a codec's store always is one
			if st.claims != nil {
				st.renewer, st.hold = r, roundHold
			}
		}
	}
	return st, nil
}

// bindingName names a binding for the log.
func bindingName(b ctoken.RequestStateBinding) string {
	switch b {
	case ctoken.BindSubject:
		return "BindSubject"
	case ctoken.BindSubjectAndTool:
		return "BindSubjectAndTool"
	case ctoken.BindNone:
		return "BindNone"
	}
	return "unknown"
}

// Integration returns the Integration s reports through.
func (s *States) Integration() *Integration {
	if s == nil {
		return nil
	}
	return s.in
}

// Codec returns the request-state codec the States seal and open with.
func (s *States) Codec() *ctoken.RequestStateCodec {
	if s == nil {
		return nil
	}
	return s.codec
}

// errStatesZero is the error of the methods of States not made by
// [NewStates] (a zero or nil value).
var errStatesZero = errors.New("mcptoken: States not made by NewStates")

// made reports whether s was made by [NewStates].
func (s *States) made() bool { return s != nil && s.codec != nil && s.in.check("") == nil }

// Seal seals state for caller and ctoken.MCPTarget(method, name), bound to
// args (taken as by [WrapArgs]) unless the States are unbound. A state that
// is not valid UTF-8 is an error matching ctoken.ErrUnencodable. An empty
// caller is logged and refused with the Integration's NoCaller error.
func (s *States) Seal(caller, method, name string, args any, state string) (string, error) {
	if !s.made() {
		return "", errStatesZero
	}
	if err := s.in.anonymous(context.Background(), caller); err != nil {
		return "", err
	}
	plain := state
	if !s.unboundArgs {
		var err error
		if plain, err = WrapArgs(args, state); err != nil {
			if errors.Is(err, ctoken.ErrUnencodable) {
				return "", err
			}
			return "", fmt.Errorf("%s: fingerprinting arguments: %w", s.in.Name, err)
		}
	}
	return s.codec.Encode(plain, caller, ctoken.MCPTarget(method, name))
}

// Open opens the state wire of a request to ctoken.MCPTarget(method, name)
// by caller, checks its argument binding against args unless the States are
// unbound, and returns the application's state.
//
// A state that does not open is logged (the reason, never the state) and is
// the error the Integration's Refused returns for [RefuseState] of it: a
// refusal with code 1022 or 1023, a store failure (a single-use codec's
// replay store could not answer, and the state was not consumed), or an
// internal error (a codec without a key, logged at Error). Every binding
// (caller, target, audience, and the arguments, checked by
// ctoken.RequestStateCodec.DecodeCheckedContext) is checked before a
// single-use codec's claim, so no refusal consumes a state: the honest
// retry still opens it, once. An empty caller is logged and refused with
// the Integration's NoCaller error before the state is looked at.
func (s *States) Open(ctx context.Context, caller, method, name string, args any, wire string) (string, error) {
	if !s.made() {
		return "", errStatesZero
	}
	if err := s.in.anonymous(ctx, caller); err != nil {
		return "", err
	}
	var check func(string) (string, error)
	if !s.unboundArgs {
		check = func(plain string) (string, error) { return UnwrapArgs(args, plain) }
	}
	plain, err := s.codec.DecodeCheckedContext(ctx, wire, caller, ctoken.MCPTarget(method, name), check)
	if err != nil {
		return "", s.refuse(ctx, method, name, err)
	}
	return plain, nil
}

// refuse logs the refusal of err (the reason, never the state; a store
// failure at Warn, a keyless codec at Error) and returns the
// Integration's Refused error for it. Open and Answer refuse through it.
func (s *States) refuse(ctx context.Context, method, name string, err error) error {
	r := RefuseState(err)
	switch {
	case r.Internal:
		s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state codec has no key (not made by ctoken.NewRequestStateCodec)",
			NameAttr(method, name), slog.String("reason", r.Reason))
	case r.StoreFailed:
		s.in.Logger().LogAttrs(ctx, slog.LevelWarn, s.in.Name+": request state store failed",
			NameAttr(method, name), slog.String("error", err.Error()))
	default:
		s.in.Logger().LogAttrs(ctx, slog.LevelInfo, s.in.Name+": request state rejected",
			NameAttr(method, name), slog.String("reason", r.Reason))
	}
	return s.in.Refused(r)
}

// ErrTargetUnbound reports a request-state codec that does not bind a state
// to its target (ctoken.MCPTarget(method, name)): a codec made with
// ctoken.BindSubject or ctoken.BindNone, under which a state sealed for one
// tool, prompt or resource opens for another. A dispatch hook that seals
// and opens every state must refuse such a codec; see [CheckTargetBinding].
var ErrTargetUnbound = errors.New("mcptoken: the request-state codec does not bind states to the tool; configure it with ctoken.BindSubjectAndTool")

// CheckTargetBinding returns nil when codec binds states to their target:
// it was configured with ctoken.BindSubjectAndTool, so a state sealed for
// one tool is refused as invalid for another. Any other binding is
// [ErrTargetUnbound]; a codec not made by ctoken.NewRequestStateCodec is
// its error matching ctoken.ErrNoKey. It asks the codec
// (ctoken.RequestStateCodec.Binding); it seals and opens nothing, so it
// neither touches a single-use codec's replay store nor reaches an
// observer.
func CheckTargetBinding(codec *ctoken.RequestStateCodec) error {
	if codec == nil {
		return errors.New("mcptoken: CheckTargetBinding: nil codec")
	}
	if err := codec.Ready(); err != nil {
		return fmt.Errorf("mcptoken: the request-state codec cannot seal: %w", err)
	}
	if codec.Binding() != ctoken.BindSubjectAndTool {
		return ErrTargetUnbound
	}
	return nil
}

// ErrAlreadySealed reports a handler that returned a requestState that is
// already sealed, or a plaintext one that begins as a sealed one does ("v1."
// or "v1e."), to a dispatch hook that seals every outgoing state: it is
// refused rather than sealed twice.
var ErrAlreadySealed = errors.New("mcptoken: the handler returned a requestState that is already sealed (v1./v1e.); under SecureRequestState handlers return plaintext")

// LooksSealed reports whether state begins as a sealed request state does:
// "v1." or "v1e.".
func LooksSealed(state string) bool {
	return strings.HasPrefix(state, "v1.") || strings.HasPrefix(state, "v1e.")
}

// SealResult is Seal for the state of a handler's result in a dispatch hook
// that seals every outgoing state. A state that [LooksSealed] is
// [ErrAlreadySealed]; that and any failure of Seal are logged.
func (s *States) SealResult(ctx context.Context, caller, method, name string, args any, state string) (string, error) {
	if !s.made() {
		return "", errStatesZero
	}
	if LooksSealed(state) {
		s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": handler returned a sealed requestState (already sealed, or it begins with v1. or v1e.); refusing to seal it twice",
			NameAttr(method, name))
		return "", ErrAlreadySealed
	}
	wire, err := s.Seal(caller, method, name, args, state)
	if err != nil {
		s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": sealing requestState failed",
			NameAttr(method, name), slog.String("error", err.Error()))
		return "", err
	}
	return wire, nil
}
