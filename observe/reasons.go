package observe

// RefusalReason is the fixed set of reasons ctoken's packages give for
// refusing a token, a delivery or an input. Its value is its text ("mac
// mismatch", "other server session", "signature mismatch"): the text the
// refusing package's error names, so logs and metrics agree, and a
// conversion cannot print it wrong (string(r), fmt's %s and %v, and String
// all give the words). ctoken.Reason, webhook.ReasonOf and
// idempotency.ReasonOf return one of the constants below; compare with
// them (==, switch) as with an errors.Is sentinel. One value may be
// produced for several token kinds ("mac mismatch" for cursors, request
// states and one-time tokens): label by [TokenKind] too.
//
// The Go names of the constants and their texts are stable across minor
// versions: a minor version may add a value, never rename or drop one or
// change its text. Configuration errors of constructors (which name a
// config field or a secret's position) are not in the set: ctoken.Reason
// and webhook.ReasonOf return [ReasonNone] for them.
//
// The zero value is [ReasonNone]. A RefusalReason converted from any other
// string is outside the set: its String is "", so a metric label stays
// bounded.
type RefusalReason string

// Every [RefusalReason], each with its text.
const (
	// ReasonNone: no refusal (or an error that is not a refusal of one of
	// ctoken's packages).
	ReasonNone RefusalReason = ""

	// Refusals shared by several token kinds.

	ReasonEmpty           RefusalReason = "empty"
	ReasonTruncated       RefusalReason = "truncated"
	ReasonMACMismatch     RefusalReason = "mac mismatch"
	ReasonMalformed       RefusalReason = "malformed payload"
	ReasonIssuedInFuture  RefusalReason = "issued in the future"
	ReasonNotBase64URL    RefusalReason = "not base64url"
	ReasonAlreadyUsed     RefusalReason = "already used" // single-use request state: a duplicate
	ReasonStoreFailed     RefusalReason = "replay store failed"
	ReasonAlreadyRedeemed RefusalReason = "already redeemed" // one-time token: a duplicate

	// Cursor verification.

	ReasonCursorOversize  RefusalReason = "over MaxCursorBytes"
	ReasonCursorMalformed RefusalReason = "malformed or non-canonical payload"
	// ReasonWrongArguments: a checked request state whose arguments check
	// refused the call's arguments.
	ReasonWrongArguments    RefusalReason = "wrong arguments"
	ReasonOtherSession      RefusalReason = "other server session"
	ReasonOlderThanTTL      RefusalReason = "older than TTL"
	ReasonCursorStateType   RefusalReason = "state does not decode into the requested type"
	ReasonOpaqueStateTooBig RefusalReason = "state over MaxOpaqueStateBytes"
	// ReasonCursorTooLarge cannot fire for any cursor an issuer writes
	// today (the longest is 476 characters, sealed: the scope costs none; Issue
	// keeps the check); kept so that code comparing with it compiles.
	ReasonCursorTooLarge     RefusalReason = "cursor over MaxCursorBytes"
	ReasonCursorStateNotCBOR RefusalReason = "state does not encode as CBOR"

	// Request state.

	ReasonStateOversize    RefusalReason = "over MaxBytes"
	ReasonUnknownPrefix    RefusalReason = "unknown prefix or other mode"
	ReasonFraming          RefusalReason = "malformed framing"
	ReasonDecryption       RefusalReason = "decryption failed (tampered, other key, or other subject/tool)"
	ReasonWrongBinding     RefusalReason = "bound to another subject or tool"
	ReasonSubjectAmbiguous RefusalReason = "subject contains NUL (ambiguous under BindSubjectAndTool)"
	ReasonPastExp          RefusalReason = "past exp"
	ReasonStateType        RefusalReason = "state is not JSON of the requested type"
	ReasonStateNotUTF8     RefusalReason = "request state is not valid UTF-8"
	ReasonSubjectNUL       RefusalReason = "subject contains a NUL byte, which BindSubjectAndTool cannot bind unambiguously"
	ReasonStateTooLarge    RefusalReason = "encoding over MaxBytes"
	ReasonStateNotJSON     RefusalReason = "encoding/json cannot encode the state"

	// One-time tokens.

	ReasonOneTimeOversize  RefusalReason = "oversize"
	ReasonUnknownFormat    RefusalReason = "unknown format"
	ReasonBadBase64        RefusalReason = "bad base64"
	ReasonExpired          RefusalReason = "expired"
	ReasonClaimsMismatch   RefusalReason = "claims mismatch"
	ReasonOtherPurpose     RefusalReason = "other purpose"
	ReasonClaimsTooLarge   RefusalReason = "claims over MaxOneTimeTokenBytes"
	ReasonExchangeRequest  RefusalReason = "malformed exchange request"
	ReasonAuthorizeRefused RefusalReason = "refused by Authorize"
	ReasonIssueFailed      RefusalReason = "credential not issued"

	// Arguments (ctoken.ArgsFingerprint, ctoken.CanonicalJSON).

	ReasonArgsNotJSON       RefusalReason = "not JSON"
	ReasonArgsUTF8          RefusalReason = "invalid UTF-8"
	ReasonArgsSurrogate     RefusalReason = "lone surrogate escape"
	ReasonArgsDuplicate     RefusalReason = "duplicate object member name"
	ReasonArgsDepth         RefusalReason = "nested deeper than MaxJSONDepth"
	ReasonArgsRange         RefusalReason = "number outside double range"
	ReasonArgsInexact       RefusalReason = "number whose canonical form has another value (send it as a string)"
	ReasonArgsInvalidUTF8Go RefusalReason = "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)"
	ReasonArgsMarshal       RefusalReason = "value cannot be marshalled as JSON"

	// Webhook deliveries (webhook.Verifier, webhook.Signer, webhook.Lease).

	ReasonWebhookBodyTooLarge       RefusalReason = "body over cap"
	ReasonWebhookBodyUnreadable     RefusalReason = "body unreadable"
	ReasonWebhookIDHeader           RefusalReason = "delivery id header missing or repeated"
	ReasonWebhookIDLength           RefusalReason = "delivery id empty or too long"
	ReasonWebhookIDChar             RefusalReason = "delivery id has a forbidden character"
	ReasonWebhookNilHeader          RefusalReason = "nil header"
	ReasonWebhookNotVerified        RefusalReason = "delivery not verified"
	ReasonWebhookTimestampHeader    RefusalReason = "timestamp header missing or repeated"
	ReasonWebhookTimestampMalformed RefusalReason = "timestamp malformed"
	ReasonWebhookSignatureHeader    RefusalReason = "signature header missing or repeated"
	ReasonWebhookSignatureMalformed RefusalReason = "signature header malformed"
	ReasonWebhookSignatureMismatch  RefusalReason = "signature mismatch"
	ReasonWebhookTimestampTooOld    RefusalReason = "timestamp too old"
	ReasonWebhookTimestampFuture    RefusalReason = "timestamp in the future"
	ReasonWebhookStripeBody         RefusalReason = "body is not a JSON object with one string id of 1 to 256 printable ASCII characters"
	ReasonWebhookStripeID           RefusalReason = "id is not the id of the event in the body"
	ReasonWebhookStripeT            RefusalReason = "signature header has no t= item or more than one"
	ReasonWebhookSlackBody          RefusalReason = "JSON body malformed or its event_id not a string of 1 to 256 printable ASCII characters"
	ReasonWebhookSlackID            RefusalReason = "id is not the event_id of the body"
	ReasonWebhookDuplicate          RefusalReason = "delivery already processed" // a duplicate
	ReasonWebhookInProgress         RefusalReason = "delivery in progress under a live lease"
	ReasonWebhookLeaseNotAcquired   RefusalReason = "lease not from Verifier.Acquire"
	ReasonWebhookStoreRecord        RefusalReason = "replay store could not record the delivery"
	ReasonWebhookStoreConfirm       RefusalReason = "replay store could not confirm the delivery"
	ReasonWebhookStoreRelease       RefusalReason = "replay store could not release the delivery"
	ReasonWebhookLeaseLost          RefusalReason = "lease lost: another attempt took the delivery after the lease expired"

	// Cursor verification, signed and sealed cursors.

	// ReasonCursorWrongScope: a signed cursor whose MAC fails under the key
	// its key id names although its body decodes: a cursor of another
	// tool, caller or arguments, or a forgery. The scope is inside the MAC
	// and not carried, so these cannot be told apart; a body that does not
	// decode is [ReasonMACMismatch], a key id the ring lacks
	// [ReasonUnknownKey].
	ReasonCursorWrongScope RefusalReason = "forged or wrong scope (tool, caller or arguments)"
	ReasonCursorSealedOpen RefusalReason = "sealed cursor does not open (tampered, other key, or other scope)"

	// Idempotent HTTP requests (idempotency.Middleware).

	ReasonIdempotencyKeyMissing       RefusalReason = "idempotency key header missing"
	ReasonIdempotencyKeyRepeated      RefusalReason = "idempotency key header repeated"
	ReasonIdempotencyKeyMalformed     RefusalReason = "idempotency key not a structured-field string"
	ReasonIdempotencyKeyLength        RefusalReason = "idempotency key empty or over MaxKeyBytes"
	ReasonIdempotencyNoCaller         RefusalReason = "no authenticated caller"
	ReasonIdempotencyBodyTooLarge     RefusalReason = "request body over MaxRequestBytes"
	ReasonIdempotencyBodyUnreadable   RefusalReason = "request body unreadable"
	ReasonIdempotencyInProgress       RefusalReason = "request with this key in progress under a live lease"
	ReasonIdempotencyMismatch         RefusalReason = "key reused with a different request"
	ReasonIdempotencyReplayed         RefusalReason = "stored response replayed"
	ReasonIdempotencyNoRecord         RefusalReason = "key done without a stored response"
	ReasonIdempotencyRecordCorrupt    RefusalReason = "stored response does not decode"
	ReasonIdempotencyResponseTooLarge RefusalReason = "first response was over MaxResponseBytes and not stored"
	ReasonIdempotencyHandlerRetry     RefusalReason = "handler asked for a retry (5xx, 408, 423, 425 or 429)"
	ReasonIdempotencyHandlerPanic     RefusalReason = "handler panicked"
	ReasonIdempotencyClientGone       RefusalReason = "client gone before the handler wrote a response" // no longer given: the client leaving does not end the handler's context
	ReasonIdempotencyStoreAcquire     RefusalReason = "replay store could not lease the key"
	ReasonIdempotencyStoreConfirm     RefusalReason = "replay store could not record the response"
	ReasonIdempotencyStoreRelease     RefusalReason = "replay store could not release the key"
	ReasonIdempotencyLeaseLost        RefusalReason = "lease lost: another attempt took the key after the lease expired"
	ReasonIdempotencyHandlerDeadline  RefusalReason = "handler returned without a response after its deadline"
	ReasonIdempotencyGoneBeforeLease  RefusalReason = "client gone before the key was leased"

	// ReasonUnknownKey: a token (cursor, sealed cursor, page token or
	// one-time token) names a key id that no key of the ring has: it was
	// minted under a key since retired, or under another deployment's key
	// (or its key id was altered). Nothing else of it is read.
	ReasonUnknownKey RefusalReason = "signed by a key not in the ring: retired or foreign"

	// Idempotent HTTP requests: the handler's run (issue 45).

	ReasonIdempotencyTimeoutHandler RefusalReason = "handler is an http.TimeoutHandler inside the middleware"
	ReasonIdempotencyStoreBegin     RefusalReason = "replay store could not begin the handler's transaction"
	ReasonIdempotencyStoreRollback  RefusalReason = "replay store could not roll back the handler's transaction"
	ReasonIdempotencyOutcomeUnknown RefusalReason = "commit of the handler's transaction has an unknown outcome"
)

// reasonList is every reason except [ReasonNone], in the order of the
// declarations above: the order [RefusalReasons] returns.
var reasonList = [...]RefusalReason{
	ReasonEmpty,
	ReasonTruncated,
	ReasonMACMismatch,
	ReasonMalformed,
	ReasonIssuedInFuture,
	ReasonNotBase64URL,
	ReasonAlreadyUsed,
	ReasonStoreFailed,
	ReasonAlreadyRedeemed,
	ReasonCursorOversize,
	ReasonCursorMalformed,
	ReasonWrongArguments,
	ReasonOtherSession,
	ReasonOlderThanTTL,
	ReasonCursorStateType,
	ReasonOpaqueStateTooBig,
	ReasonCursorTooLarge,
	ReasonCursorStateNotCBOR,
	ReasonStateOversize,
	ReasonUnknownPrefix,
	ReasonFraming,
	ReasonDecryption,
	ReasonWrongBinding,
	ReasonSubjectAmbiguous,
	ReasonPastExp,
	ReasonStateType,
	ReasonStateNotUTF8,
	ReasonSubjectNUL,
	ReasonStateTooLarge,
	ReasonStateNotJSON,
	ReasonOneTimeOversize,
	ReasonUnknownFormat,
	ReasonBadBase64,
	ReasonExpired,
	ReasonClaimsMismatch,
	ReasonOtherPurpose,
	ReasonClaimsTooLarge,
	ReasonExchangeRequest,
	ReasonAuthorizeRefused,
	ReasonIssueFailed,
	ReasonArgsNotJSON,
	ReasonArgsUTF8,
	ReasonArgsSurrogate,
	ReasonArgsDuplicate,
	ReasonArgsDepth,
	ReasonArgsRange,
	ReasonArgsInexact,
	ReasonArgsInvalidUTF8Go,
	ReasonArgsMarshal,
	ReasonWebhookBodyTooLarge,
	ReasonWebhookBodyUnreadable,
	ReasonWebhookIDHeader,
	ReasonWebhookIDLength,
	ReasonWebhookIDChar,
	ReasonWebhookNilHeader,
	ReasonWebhookNotVerified,
	ReasonWebhookTimestampHeader,
	ReasonWebhookTimestampMalformed,
	ReasonWebhookSignatureHeader,
	ReasonWebhookSignatureMalformed,
	ReasonWebhookSignatureMismatch,
	ReasonWebhookTimestampTooOld,
	ReasonWebhookTimestampFuture,
	ReasonWebhookStripeBody,
	ReasonWebhookStripeID,
	ReasonWebhookStripeT,
	ReasonWebhookSlackBody,
	ReasonWebhookSlackID,
	ReasonWebhookDuplicate,
	ReasonWebhookInProgress,
	ReasonWebhookLeaseNotAcquired,
	ReasonWebhookStoreRecord,
	ReasonWebhookStoreConfirm,
	ReasonWebhookStoreRelease,
	ReasonWebhookLeaseLost,
	ReasonCursorWrongScope,
	ReasonCursorSealedOpen,
	ReasonIdempotencyKeyMissing,
	ReasonIdempotencyKeyRepeated,
	ReasonIdempotencyKeyMalformed,
	ReasonIdempotencyKeyLength,
	ReasonIdempotencyNoCaller,
	ReasonIdempotencyBodyTooLarge,
	ReasonIdempotencyBodyUnreadable,
	ReasonIdempotencyInProgress,
	ReasonIdempotencyMismatch,
	ReasonIdempotencyReplayed,
	ReasonIdempotencyNoRecord,
	ReasonIdempotencyRecordCorrupt,
	ReasonIdempotencyResponseTooLarge,
	ReasonIdempotencyHandlerRetry,
	ReasonIdempotencyHandlerPanic,
	ReasonIdempotencyClientGone,
	ReasonIdempotencyStoreAcquire,
	ReasonIdempotencyStoreConfirm,
	ReasonIdempotencyStoreRelease,
	ReasonIdempotencyLeaseLost,
	ReasonIdempotencyHandlerDeadline,
	ReasonIdempotencyGoneBeforeLease,
	ReasonUnknownKey,
	ReasonIdempotencyTimeoutHandler,
	ReasonIdempotencyStoreBegin,
	ReasonIdempotencyStoreRollback,
	ReasonIdempotencyOutcomeUnknown,
}

// String returns the reason's text, the one the refusing package's
// error names ("" for [ReasonNone] and for a value outside the set).
func (r RefusalReason) String() string {
	if _, ok := reasonByText[string(r)]; ok {
		return string(r)
	}
	return ""
}

// RefusalReasons returns every [RefusalReason] except [ReasonNone], in
// order of declaration: the label values to pre-register.
func RefusalReasons() []RefusalReason {
	return append([]RefusalReason(nil), reasonList[:]...)
}

// reasonByText maps every reason's text back to it.
var reasonByText = func() map[string]RefusalReason {
	m := make(map[string]RefusalReason, len(reasonList))
	for _, r := range reasonList {
		m[string(r)] = r
	}
	return m
}()

// ParseReason returns the [RefusalReason] whose text is text, and whether
// there is one; text "" is [ReasonNone] and false.
func ParseReason(text string) (RefusalReason, bool) {
	r, ok := reasonByText[text]
	return r, ok
}
