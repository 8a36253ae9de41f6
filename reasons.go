package ctoken

import (
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// RefusalReason is the fixed set of reasons ctoken's packages give for
// refusing a token, a delivery or an input: the values [ReasonOf] returns
// for this package's refusals, as a small typed enum usable as a metric
// label. It is [observe.RefusalReason]; its String is exactly the [Reason]
// text. The set and every value's String are stable across minor versions.
type RefusalReason = observe.RefusalReason

// Every [RefusalReason] this package produces, and the webhook and
// idempotency packages',
// re-exported from [observe]; the comment of each in [observe] gives its
// String.
const (
	ReasonNone                        = observe.ReasonNone
	ReasonEmpty                       = observe.ReasonEmpty
	ReasonTruncated                   = observe.ReasonTruncated
	ReasonMACMismatch                 = observe.ReasonMACMismatch
	ReasonMalformed                   = observe.ReasonMalformed
	ReasonIssuedInFuture              = observe.ReasonIssuedInFuture
	ReasonNotBase64URL                = observe.ReasonNotBase64URL
	ReasonAlreadyUsed                 = observe.ReasonAlreadyUsed
	ReasonStoreFailed                 = observe.ReasonStoreFailed
	ReasonAlreadyRedeemed             = observe.ReasonAlreadyRedeemed
	ReasonCursorOversize              = observe.ReasonCursorOversize
	ReasonCursorMalformed             = observe.ReasonCursorMalformed
	ReasonOtherSession                = observe.ReasonOtherSession
	ReasonOlderThanTTL                = observe.ReasonOlderThanTTL
	ReasonCursorStateType             = observe.ReasonCursorStateType
	ReasonOpaqueStateTooBig           = observe.ReasonOpaqueStateTooBig
	ReasonCursorTooLarge              = observe.ReasonCursorTooLarge
	ReasonCursorStateNotCBOR          = observe.ReasonCursorStateNotCBOR
	ReasonCursorWrongScope            = observe.ReasonCursorWrongScope
	ReasonCursorSealedOpen            = observe.ReasonCursorSealedOpen
	ReasonUnknownKey                  = observe.ReasonUnknownKey
	ReasonWrongArguments              = observe.ReasonWrongArguments
	ReasonStateOversize               = observe.ReasonStateOversize
	ReasonUnknownPrefix               = observe.ReasonUnknownPrefix
	ReasonFraming                     = observe.ReasonFraming
	ReasonDecryption                  = observe.ReasonDecryption
	ReasonWrongBinding                = observe.ReasonWrongBinding
	ReasonSubjectAmbiguous            = observe.ReasonSubjectAmbiguous
	ReasonPastExp                     = observe.ReasonPastExp
	ReasonStateType                   = observe.ReasonStateType
	ReasonStateNotUTF8                = observe.ReasonStateNotUTF8
	ReasonSubjectNUL                  = observe.ReasonSubjectNUL
	ReasonStateTooLarge               = observe.ReasonStateTooLarge
	ReasonStateNotJSON                = observe.ReasonStateNotJSON
	ReasonOneTimeOversize             = observe.ReasonOneTimeOversize
	ReasonUnknownFormat               = observe.ReasonUnknownFormat
	ReasonBadBase64                   = observe.ReasonBadBase64
	ReasonExpired                     = observe.ReasonExpired
	ReasonClaimsMismatch              = observe.ReasonClaimsMismatch
	ReasonOtherPurpose                = observe.ReasonOtherPurpose
	ReasonClaimsTooLarge              = observe.ReasonClaimsTooLarge
	ReasonExchangeRequest             = observe.ReasonExchangeRequest
	ReasonAuthorizeRefused            = observe.ReasonAuthorizeRefused
	ReasonIssueFailed                 = observe.ReasonIssueFailed
	ReasonArgsNotJSON                 = observe.ReasonArgsNotJSON
	ReasonArgsUTF8                    = observe.ReasonArgsUTF8
	ReasonArgsSurrogate               = observe.ReasonArgsSurrogate
	ReasonArgsDuplicate               = observe.ReasonArgsDuplicate
	ReasonArgsDepth                   = observe.ReasonArgsDepth
	ReasonArgsRange                   = observe.ReasonArgsRange
	ReasonArgsInexact                 = observe.ReasonArgsInexact
	ReasonArgsInvalidUTF8Go           = observe.ReasonArgsInvalidUTF8Go
	ReasonArgsMarshal                 = observe.ReasonArgsMarshal
	ReasonWebhookBodyTooLarge         = observe.ReasonWebhookBodyTooLarge
	ReasonWebhookBodyUnreadable       = observe.ReasonWebhookBodyUnreadable
	ReasonWebhookIDHeader             = observe.ReasonWebhookIDHeader
	ReasonWebhookIDLength             = observe.ReasonWebhookIDLength
	ReasonWebhookIDChar               = observe.ReasonWebhookIDChar
	ReasonWebhookNilHeader            = observe.ReasonWebhookNilHeader
	ReasonWebhookNotVerified          = observe.ReasonWebhookNotVerified
	ReasonWebhookTimestampHeader      = observe.ReasonWebhookTimestampHeader
	ReasonWebhookTimestampMalformed   = observe.ReasonWebhookTimestampMalformed
	ReasonWebhookSignatureHeader      = observe.ReasonWebhookSignatureHeader
	ReasonWebhookSignatureMalformed   = observe.ReasonWebhookSignatureMalformed
	ReasonWebhookSignatureMismatch    = observe.ReasonWebhookSignatureMismatch
	ReasonWebhookTimestampTooOld      = observe.ReasonWebhookTimestampTooOld
	ReasonWebhookTimestampFuture      = observe.ReasonWebhookTimestampFuture
	ReasonWebhookStripeBody           = observe.ReasonWebhookStripeBody
	ReasonWebhookStripeID             = observe.ReasonWebhookStripeID
	ReasonWebhookStripeT              = observe.ReasonWebhookStripeT
	ReasonWebhookSlackBody            = observe.ReasonWebhookSlackBody
	ReasonWebhookSlackID              = observe.ReasonWebhookSlackID
	ReasonWebhookDuplicate            = observe.ReasonWebhookDuplicate
	ReasonWebhookInProgress           = observe.ReasonWebhookInProgress
	ReasonWebhookLeaseNotAcquired     = observe.ReasonWebhookLeaseNotAcquired
	ReasonWebhookStoreRecord          = observe.ReasonWebhookStoreRecord
	ReasonWebhookStoreConfirm         = observe.ReasonWebhookStoreConfirm
	ReasonWebhookStoreRelease         = observe.ReasonWebhookStoreRelease
	ReasonWebhookLeaseLost            = observe.ReasonWebhookLeaseLost
	ReasonIdempotencyKeyMissing       = observe.ReasonIdempotencyKeyMissing
	ReasonIdempotencyKeyRepeated      = observe.ReasonIdempotencyKeyRepeated
	ReasonIdempotencyKeyMalformed     = observe.ReasonIdempotencyKeyMalformed
	ReasonIdempotencyKeyLength        = observe.ReasonIdempotencyKeyLength
	ReasonIdempotencyNoCaller         = observe.ReasonIdempotencyNoCaller
	ReasonIdempotencyBodyTooLarge     = observe.ReasonIdempotencyBodyTooLarge
	ReasonIdempotencyBodyUnreadable   = observe.ReasonIdempotencyBodyUnreadable
	ReasonIdempotencyInProgress       = observe.ReasonIdempotencyInProgress
	ReasonIdempotencyMismatch         = observe.ReasonIdempotencyMismatch
	ReasonIdempotencyReplayed         = observe.ReasonIdempotencyReplayed
	ReasonIdempotencyNoRecord         = observe.ReasonIdempotencyNoRecord
	ReasonIdempotencyRecordCorrupt    = observe.ReasonIdempotencyRecordCorrupt
	ReasonIdempotencyResponseTooLarge = observe.ReasonIdempotencyResponseTooLarge
	ReasonIdempotencyHandlerRetry     = observe.ReasonIdempotencyHandlerRetry
	ReasonIdempotencyHandlerPanic     = observe.ReasonIdempotencyHandlerPanic
	ReasonIdempotencyClientGone       = observe.ReasonIdempotencyClientGone
	ReasonIdempotencyStoreAcquire     = observe.ReasonIdempotencyStoreAcquire
	ReasonIdempotencyStoreConfirm     = observe.ReasonIdempotencyStoreConfirm
	ReasonIdempotencyStoreRelease     = observe.ReasonIdempotencyStoreRelease
	ReasonIdempotencyLeaseLost        = observe.ReasonIdempotencyLeaseLost
	ReasonIdempotencyHandlerDeadline  = observe.ReasonIdempotencyHandlerDeadline
	ReasonIdempotencyGoneBeforeLease  = observe.ReasonIdempotencyGoneBeforeLease
)

// RefusalReasons returns every [RefusalReason] except [ReasonNone], in
// order: the label values to pre-register ([observe.RefusalReasons]).
func RefusalReasons() []RefusalReason { return observe.RefusalReasons() }

// ReasonOf returns the [RefusalReason] of err: the typed form of [Reason]
// for every refusal of a token or an input by this package (so
// ReasonOf(err).String() == Reason(err)), and [ReasonNone] for nil, for a
// constructor's configuration error, and for an error that carries no
// reason of the set (an error of another package; a webhook package
// refusal maps to its webhook reason).
func ReasonOf(err error) RefusalReason {
	if err == nil {
		return ReasonNone
	}
	if r, ok := rejectionReasons[err]; ok {
		return r
	}
	got, _ := observe.ParseReason(reason.Of(err))
	return got
}

// rejectionReasons maps each package-level rejection value to its reason,
// so that reporting a refusal costs a map lookup and no allocation (a
// wrapped replay-store error takes reason.Of's path).
var rejectionReasons = func() map[error]RefusalReason {
	all := []error{
		errCursorEmpty, errCursorOversize, errCursorBase64, errCursorTruncated,
		errCursorMalformed, errCursorFuture, errCursorSession, errCursorUnknownKey, errCursorUnknownKeyRestart,
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
	}
	m := make(map[error]RefusalReason, len(all))
	for _, e := range all {
		m[e], _ = observe.ParseReason(reason.Of(e))
	}
	return m
}()
