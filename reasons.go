package ctoken

import (
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// Reason returns the [observe.RefusalReason] of err: which check refused a
// token or an input ("mac mismatch", "wrong tool", "other server session"),
// one value of a fixed set stable across minor versions, to compare with
// the observe.Reason constants (== or switch), to print (its value is its
// fixed, log-safe text: string(r), %s and String give the same words) or
// to use as a metric label. It never contains input, token text or key
// material.
//
// Reason returns [observe.ReasonNone] for nil, for an error of another
// package, and for a constructor's configuration or key error
// ([ErrConfig], [ErrNoKey], [ErrKeyInvalid], [ErrKeyTooShort]): those are
// not refusals of an input, and the field or secret position they name is
// in the error's text (err.Error(), which never holds key material either).
//
// Reason reads the module's one reason-carrying error, so it also returns
// the reason of a refusal of [github.com/ctoken/ctoken/webhook] or
// [github.com/ctoken/ctoken/idempotency].
func Reason(err error) observe.RefusalReason { return rejectionReasons.Of(err) }

// rejectionReasons maps each package-level rejection value to its reason,
// so that reporting a refusal costs a map lookup and no allocation (a
// wrapped replay-store error is parsed from its reason).
var rejectionReasons = reason.NewLookup(observe.ParseReason,
	errCursorEmpty, errCursorOversize, errCursorBase64, errCursorTruncated,
	errCursorMalformed, errCursorMAC, errCursorFuture, errCursorSession, errCursorUnknownKey, errCursorUnknownKeyRestart,
	errCursorAge, errCursorStateType,
	errCursorStateLarge, errCursorLarge, errCursorScope, errCursorSealed,
	errStateEmpty, errStateOversize, errStateMode, errStateBase64,
	errStateFraming, errStateMAC, errStateOpen, errStateMalformed,
	errStateBinding, errStateSubjectAmbiguous, errStateExpired, errStateJSON,
	errStateNotUTF8, errStateSubjectNUL, errStateTooLarge, errStateReplayed,
	errOneTimeOversize, errOneTimeFormat, errOneTimeBase64, errOneTimeTruncated,
	errOneTimeMAC, errOneTimeUnknownKey, errOneTimeMalformed, errOneTimeFuture, errOneTimeExpired,
	errOneTimeClaims, errOneTimeRedeemed, errOneTimePurpose, errOneTimeTooLarge,
	errArgsSyntax, errArgsUTF8, errArgsSurrogate, errArgsDuplicate,
	errArgsDepth, errArgsRange, errArgsInexact, errArgsReplaced, errArgsMarshal,
)
