package ctoken

import "github.com/ctoken/ctoken/internal/reason"

// RefusalReason is the fixed set of reasons this package gives for refusing
// a token or an input: the values [Reason] returns for those refusals, as a
// small typed enum usable as a metric label. Its String is exactly the
// [Reason] text ("mac mismatch", "other server session"), so logs and
// metrics agree. One value may be produced for several token kinds ("mac
// mismatch" for cursors, request states and one-time tokens): label by
// [TokenKind] too.
//
// The set and every value's String are stable across minor versions: a
// minor version may add values, never rename, renumber or drop one.
// Configuration errors of constructors (which name a config field) are not
// in the set: [ReasonOf] returns [ReasonNone] for them.
type RefusalReason uint8

// Every [RefusalReason]; the comment after each is its String (and [Reason]).
const (
	// ReasonNone: no refusal (or an error that is not a refusal of this
	// package).
	ReasonNone RefusalReason = iota

	// Refusals shared by several token kinds.

	ReasonEmpty           // "empty"
	ReasonTruncated       // "truncated"
	ReasonMACMismatch     // "mac mismatch"
	ReasonMalformed       // "malformed payload"
	ReasonIssuedInFuture  // "issued in the future"
	ReasonNotBase64URL    // "not base64url"
	ReasonAlreadyUsed     // "already used" (single-use request state: a duplicate)
	ReasonStoreFailed     // "replay store failed"
	ReasonAlreadyRedeemed // "already redeemed" (one-time token: a duplicate)

	// Cursor verification.

	ReasonCursorOversize     // "over MaxCursorBytes"
	ReasonCursorMalformed    // "malformed or non-canonical payload"
	ReasonUnknownVersion     // "unknown version"
	ReasonArgsLength         // "args fingerprint not 32 bytes"
	ReasonWrongTool          // "wrong tool"
	ReasonWrongCaller        // "wrong caller"
	ReasonWrongArguments     // "wrong arguments"
	ReasonOtherSession       // "other server session"
	ReasonMACOtherSession    // "mac mismatch (other session)"
	ReasonOlderThanTTL       // "older than TTL"
	ReasonCursorStateType    // "state does not decode into the requested type"
	ReasonIDNotUTF8          // "cursor tool or caller ID is not valid UTF-8"
	ReasonOpaqueStateTooBig  // "state over MaxOpaqueStateBytes"
	ReasonCursorTooLarge     // "cursor over MaxCursorBytes"
	ReasonCursorStateNotCBOR // "state does not encode as CBOR"

	// Request state.

	ReasonStateOversize    // "over MaxBytes"
	ReasonUnknownPrefix    // "unknown prefix or other mode"
	ReasonFraming          // "malformed framing"
	ReasonDecryption       // "decryption failed (tampered, other key, or other subject/tool)"
	ReasonWrongBinding     // "bound to another subject or tool"
	ReasonSubjectAmbiguous // "subject contains NUL (ambiguous under BindSubjectAndTool)"
	ReasonPastExp          // "past exp"
	ReasonStateType        // "state is not JSON of the requested type"
	ReasonStateNotUTF8     // "request state is not valid UTF-8"
	ReasonSubjectNUL       // "subject contains a NUL byte, which BindSubjectAndTool cannot bind unambiguously"
	ReasonStateTooLarge    // "encoding over MaxBytes"
	ReasonStateNotJSON     // "encoding/json cannot encode the state"

	// One-time tokens.

	ReasonOneTimeOversize  // "oversize"
	ReasonUnknownFormat    // "unknown format"
	ReasonBadBase64        // "bad base64"
	ReasonExpired          // "expired"
	ReasonClaimsMismatch   // "claims mismatch"
	ReasonOtherPurpose     // "other purpose"
	ReasonClaimsTooLarge   // "claims over MaxOneTimeTokenBytes"
	ReasonExchangeRequest  // "malformed exchange request"
	ReasonAuthorizeRefused // "refused by Authorize"
	ReasonIssueFailed      // "credential not issued"

	// Arguments ([ArgsFingerprint], [CanonicalJSON]).

	ReasonArgsNotJSON       // "not JSON"
	ReasonArgsUTF8          // "invalid UTF-8"
	ReasonArgsSurrogate     // "lone surrogate escape"
	ReasonArgsDuplicate     // "duplicate object member name"
	ReasonArgsDepth         // "nested deeper than MaxJSONDepth"
	ReasonArgsRange         // "number outside double range"
	ReasonArgsInexact       // "number whose canonical form has another value (send it as a string)"
	ReasonArgsInvalidUTF8Go // "Go string with invalid UTF-8 (encoding/json writes \ufffd; send bytes as []byte)"
	ReasonArgsMarshal       // "value cannot be marshalled as JSON"

	numRefusalReasons // not a reason: the size of the set
)

// reasonNames is every reason's String, indexed by value.
var reasonNames = [numRefusalReasons]string{
	ReasonNone:            "",
	ReasonEmpty:           "empty",
	ReasonTruncated:       "truncated",
	ReasonMACMismatch:     "mac mismatch",
	ReasonMalformed:       "malformed payload",
	ReasonIssuedInFuture:  "issued in the future",
	ReasonNotBase64URL:    "not base64url",
	ReasonAlreadyUsed:     "already used",
	ReasonStoreFailed:     "replay store failed",
	ReasonAlreadyRedeemed: "already redeemed",

	ReasonCursorOversize:     "over MaxCursorBytes",
	ReasonCursorMalformed:    "malformed or non-canonical payload",
	ReasonUnknownVersion:     "unknown version",
	ReasonArgsLength:         "args fingerprint not 32 bytes",
	ReasonWrongTool:          "wrong tool",
	ReasonWrongCaller:        "wrong caller",
	ReasonWrongArguments:     "wrong arguments",
	ReasonOtherSession:       "other server session",
	ReasonMACOtherSession:    "mac mismatch (other session)",
	ReasonOlderThanTTL:       "older than TTL",
	ReasonCursorStateType:    "state does not decode into the requested type",
	ReasonIDNotUTF8:          "cursor tool or caller ID is not valid UTF-8",
	ReasonOpaqueStateTooBig:  "state over MaxOpaqueStateBytes",
	ReasonCursorTooLarge:     "cursor over MaxCursorBytes",
	ReasonCursorStateNotCBOR: "state does not encode as CBOR",

	ReasonStateOversize:    "over MaxBytes",
	ReasonUnknownPrefix:    "unknown prefix or other mode",
	ReasonFraming:          "malformed framing",
	ReasonDecryption:       "decryption failed (tampered, other key, or other subject/tool)",
	ReasonWrongBinding:     "bound to another subject or tool",
	ReasonSubjectAmbiguous: "subject contains NUL (ambiguous under BindSubjectAndTool)",
	ReasonPastExp:          "past exp",
	ReasonStateType:        "state is not JSON of the requested type",
	ReasonStateNotUTF8:     "request state is not valid UTF-8",
	ReasonSubjectNUL:       "subject contains a NUL byte, which BindSubjectAndTool cannot bind unambiguously",
	ReasonStateTooLarge:    "encoding over MaxBytes",
	ReasonStateNotJSON:     "encoding/json cannot encode the state",

	ReasonOneTimeOversize:  "oversize",
	ReasonUnknownFormat:    "unknown format",
	ReasonBadBase64:        "bad base64",
	ReasonExpired:          "expired",
	ReasonClaimsMismatch:   "claims mismatch",
	ReasonOtherPurpose:     "other purpose",
	ReasonClaimsTooLarge:   "claims over MaxOneTimeTokenBytes",
	ReasonExchangeRequest:  "malformed exchange request",
	ReasonAuthorizeRefused: "refused by Authorize",
	ReasonIssueFailed:      "credential not issued",

	ReasonArgsNotJSON:       "not JSON",
	ReasonArgsUTF8:          "invalid UTF-8",
	ReasonArgsSurrogate:     "lone surrogate escape",
	ReasonArgsDuplicate:     "duplicate object member name",
	ReasonArgsDepth:         "nested deeper than MaxJSONDepth",
	ReasonArgsRange:         "number outside double range",
	ReasonArgsInexact:       "number whose canonical form has another value (send it as a string)",
	ReasonArgsInvalidUTF8Go: "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)",
	ReasonArgsMarshal:       "value cannot be marshalled as JSON",
}

// String returns the reason's stable text, the one [Reason] returns ("" for
// [ReasonNone] and for a value outside the set).
func (r RefusalReason) String() string {
	if r < numRefusalReasons {
		return reasonNames[r]
	}
	return ""
}

// RefusalReasons returns every [RefusalReason] except [ReasonNone], in
// order: the label values to pre-register.
func RefusalReasons() []RefusalReason {
	out := make([]RefusalReason, 0, numRefusalReasons-1)
	for r := ReasonNone + 1; r < numRefusalReasons; r++ {
		out = append(out, r)
	}
	return out
}

// reasonByText maps every reason's text back to it.
var reasonByText = func() map[string]RefusalReason {
	m := make(map[string]RefusalReason, numRefusalReasons)
	for r := ReasonNone + 1; r < numRefusalReasons; r++ {
		m[reasonNames[r]] = r
	}
	return m
}()

// ReasonOf returns the [RefusalReason] of err: the typed form of [Reason]
// for every refusal of a token or an input by this package (so
// ReasonOf(err).String() == Reason(err)), and [ReasonNone] for nil, for a
// constructor's configuration error, and for an error of another package.
func ReasonOf(err error) RefusalReason {
	if err == nil {
		return ReasonNone
	}
	if r, ok := rejectionReasons[err]; ok {
		return r
	}
	return reasonByText[reason.Of(err)]
}

// rejectionReasons maps each package-level rejection value to its reason,
// so that reporting a refusal costs a map lookup and no allocation (a
// wrapped replay-store error takes reason.Of's path).
var rejectionReasons = func() map[error]RefusalReason {
	all := []error{
		errCursorEmpty, errCursorOversize, errCursorBase64, errCursorTruncated,
		errCursorMAC, errCursorMalformed, errCursorVersion, errCursorArgsLength,
		errCursorFuture, errCursorTool, errCursorCaller, errCursorArgs,
		errCursorSession, errCursorForeign, errCursorAge, errCursorStateType,
		errIDNotUTF8, errCursorStateLarge, errCursorLarge,
		errStateEmpty, errStateOversize, errStateMode, errStateBase64,
		errStateFraming, errStateMAC, errStateOpen, errStateMalformed,
		errStateBinding, errStateSubjectAmbiguous, errStateExpired, errStateJSON,
		errStateNotUTF8, errStateSubjectNUL, errStateTooLarge, errStateReplayed,
		errOneTimeOversize, errOneTimeFormat, errOneTimeBase64, errOneTimeTruncated,
		errOneTimeMAC, errOneTimeMalformed, errOneTimeFuture, errOneTimeExpired,
		errOneTimeClaims, errOneTimeRedeemed, errOneTimePurpose, errOneTimeTooLarge,
		errArgsSyntax, errArgsUTF8, errArgsSurrogate, errArgsDuplicate,
		errArgsDepth, errArgsRange, errArgsInexact, errArgsReplaced, errArgsMarshal,
	}
	m := make(map[error]RefusalReason, len(all))
	for _, e := range all {
		m[e] = reasonByText[reason.Of(e)]
	}
	return m
}()
