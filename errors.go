package ctoken

import (
	"errors"

	"github.com/ctoken/ctoken/internal/reason"
)

// Sentinel errors of keys, cursors and request state; webhooks, one-time
// tokens and replay stores declare theirs beside them. Every rejection of a
// token matches exactly one sentinel with errors.Is (constructors may also
// return configuration errors). The text of an error never contains key
// material or the token being checked.
var (
	// ErrConfig reports a configuration that a constructor refuses. The
	// rule is the same for every config of this package: the zero value of
	// a field means its documented default, except where a field has no
	// safe default and says so ([RequestStateSecurity.Binding], a cursor's
	// [CursorScope.ToolID]): its zero value is [ErrConfig]; a negative duration means "no
	// limit" only where the field says so ([CursorConfig.TTL]); any other
	// value that is not valid (a negative duration or size, an unknown mode
	// or binding, a session over [MaxSessionBytes]) is [ErrConfig] from the
	// constructor, never a silent fallback to the default. The error's text
	// names the field at fault ([Reason] is [observe.ReasonNone]).
	ErrConfig = errors.New("ctoken: invalid configuration")

	// ErrKeyTooShort reports a key shorter than [MinKeyBytes].
	ErrKeyTooShort = errors.New("ctoken: key shorter than 32 bytes")
	// ErrKeyInvalid reports a key that is not valid base64 or a malformed keyring.
	ErrKeyInvalid = errors.New("ctoken: malformed key")
	// ErrNoKey reports a missing or empty key variable, a nil or empty
	// [Keyring], or an issuer or codec not made by its constructor.
	ErrNoKey = errors.New("ctoken: no key configured")

	// ErrCursorInvalid reports a forged, tampered, malformed, truncated,
	// oversize or wrongly scoped cursor. Clients should not retry with it.
	ErrCursorInvalid = errors.New("ctoken: invalid cursor")
	// ErrCursorExpired reports an authentic cursor that is too old or that was
	// issued by another server session. Clients should start over.
	ErrCursorExpired = errors.New("ctoken: expired cursor")
	// ErrOpaqueStateTooLarge reports opaque state over [MaxOpaqueStateBytes] at issue.
	ErrOpaqueStateTooLarge = errors.New("ctoken: cursor state too large")
	// ErrCursorTooLarge reports a cursor whose encoding would exceed [MaxCursorBytes].
	ErrCursorTooLarge = errors.New("ctoken: cursor too large")

	// ErrStateInvalid reports a request state that fails authentication,
	// binding, parsing or the size cap. No part of it is returned.
	ErrStateInvalid = errors.New("ctoken: invalid request state")
	// ErrStateExpired reports an authentic request state past its expiry.
	ErrStateExpired = errors.New("ctoken: expired request state")
	// ErrUnencodable reports input that Issue or Encode cannot carry
	// faithfully: a request state that is not valid UTF-8, a subject
	// containing NUL under [BindSubjectAndTool], or a cursor state that
	// does not encode as CBOR.
	ErrUnencodable = errors.New("ctoken: input cannot be encoded")
	// ErrStateTooLarge reports a request state whose encoding would exceed the
	// codec's MaxBytes at encode time.
	ErrStateTooLarge = errors.New("ctoken: request state too large")
)

// Wire codes of the reference protocol, returned by [ErrorCode].
const (
	// CodeCursorExpired tells a client to start over without the cursor.
	CodeCursorExpired = 1020
	// CodeCursorInvalid tells a client its cursor was refused as invalid.
	CodeCursorInvalid = 1021
)

// ErrorCode maps err to the reference protocol's wire code: [CodeCursorExpired]
// for [ErrCursorExpired], [CodeCursorInvalid] for [ErrCursorInvalid], and 0 for any
// other error (including nil).
func ErrorCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrCursorExpired):
		return CodeCursorExpired
	case errors.Is(err, ErrCursorInvalid):
		return CodeCursorInvalid
	}
	return 0
}

// reject returns a rejection that matches sentinel with errors.Is and whose
// [Reason] is why. Rejections without a cause are package-level variables,
// so returning one costs no allocation.
func reject(sentinel error, why string) error { return reason.New(sentinel, why) }

// configError is a constructor's refusal of cfg: [ErrConfig] with a reason
// naming the field.
func configError(why string) error { return reason.New(ErrConfig, why) }

// configErrors is a constructor's refusal of every fault of its config at
// once (see [reason.Faults]): nil when every fault is nil.
func configErrors(faults ...error) error { return reason.Faults(faults...) }
