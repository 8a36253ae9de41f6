package observe

// RefusalReason is the fixed set of reasons ctoken's packages give for
// refusing a token, a delivery or an input, as a small typed enum usable as
// a metric label. Its String is exactly the text the refusing package's
// Reason function returns for the error ("mac mismatch", "other server
// session", "signature mismatch"), so logs and metrics agree; ctoken.Reason
// and webhook.ReasonOf return the typed value. One value may be produced for
// several token kinds ("mac mismatch" for cursors, request states and
// one-time tokens): label by [TokenKind] too.
//
// The set and every value's String are stable across minor versions: a
// minor version may add values, never rename, renumber or drop one.
// Configuration errors of constructors (which name a config field or a
// secret's position) are not in the set: ctoken.Reason and webhook.ReasonOf
// return [ReasonNone] for them.
type RefusalReason uint8

// Every [RefusalReason]; the comment after each is its String (and the
// refusing package's Reason text).
const (
	// ReasonNone: no refusal (or an error that is not a refusal of one of
	// ctoken's packages).
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

	ReasonCursorOversize  // "over MaxCursorBytes"
	ReasonCursorMalformed // "malformed or non-canonical payload"
	// ReasonWrongArguments: a checked request state whose arguments check
	// refused the call's arguments.
	ReasonWrongArguments    // "wrong arguments"
	ReasonOtherSession      // "other server session"
	ReasonOlderThanTTL      // "older than TTL"
	ReasonCursorStateType   // "state does not decode into the requested type"
	ReasonOpaqueStateTooBig // "state over MaxOpaqueStateBytes"
	// ReasonCursorTooLarge cannot fire for any cursor an issuer writes
	// today (the longest is 476 characters, sealed: the scope costs none; Issue
	// keeps the check); kept so that code comparing with it compiles.
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

	// Arguments (ctoken.ArgsFingerprint, ctoken.CanonicalJSON).

	ReasonArgsNotJSON       // "not JSON"
	ReasonArgsUTF8          // "invalid UTF-8"
	ReasonArgsSurrogate     // "lone surrogate escape"
	ReasonArgsDuplicate     // "duplicate object member name"
	ReasonArgsDepth         // "nested deeper than MaxJSONDepth"
	ReasonArgsRange         // "number outside double range"
	ReasonArgsInexact       // "number whose canonical form has another value (send it as a string)"
	ReasonArgsInvalidUTF8Go // "Go string with invalid UTF-8 (encoding/json writes \ufffd; send bytes as []byte)"
	ReasonArgsMarshal       // "value cannot be marshalled as JSON"

	// Webhook deliveries (webhook.Verifier, webhook.Signer, webhook.Lease).

	ReasonWebhookBodyTooLarge       // "body over cap"
	ReasonWebhookBodyUnreadable     // "body unreadable"
	ReasonWebhookIDHeader           // "delivery id header missing or repeated"
	ReasonWebhookIDLength           // "delivery id empty or too long"
	ReasonWebhookIDChar             // "delivery id has a forbidden character"
	ReasonWebhookNilHeader          // "nil header"
	ReasonWebhookNotVerified        // "delivery not verified"
	ReasonWebhookTimestampHeader    // "timestamp header missing or repeated"
	ReasonWebhookTimestampMalformed // "timestamp malformed"
	ReasonWebhookSignatureHeader    // "signature header missing or repeated"
	ReasonWebhookSignatureMalformed // "signature header malformed"
	ReasonWebhookSignatureMismatch  // "signature mismatch"
	ReasonWebhookTimestampTooOld    // "timestamp too old"
	ReasonWebhookTimestampFuture    // "timestamp in the future"
	ReasonWebhookStripeBody         // "body is not a JSON object with one string id of 1 to 256 printable ASCII characters"
	ReasonWebhookStripeID           // "id is not the id of the event in the body"
	ReasonWebhookStripeT            // "signature header has no t= item or more than one"
	ReasonWebhookSlackBody          // "JSON body malformed or its event_id not a string of 1 to 256 printable ASCII characters"
	ReasonWebhookSlackID            // "id is not the event_id of the body"
	ReasonWebhookDuplicate          // "delivery already processed" (a duplicate)
	ReasonWebhookInProgress         // "delivery in progress under a live lease"
	ReasonWebhookLeaseNotAcquired   // "lease not from Verifier.Acquire"
	ReasonWebhookStoreRecord        // "replay store could not record the delivery"
	ReasonWebhookStoreConfirm       // "replay store could not confirm the delivery"
	ReasonWebhookStoreRelease       // "replay store could not release the delivery"
	ReasonWebhookLeaseLost          // "lease lost: another attempt took the delivery after the lease expired"

	// Cursor verification, signed and sealed cursors.

	// ReasonCursorWrongScope: a signed cursor whose MAC fails under the key
	// its key id names although its body decodes: a cursor of another
	// tool, caller or arguments, or a forgery. The scope is inside the MAC
	// and not carried, so these cannot be told apart; a body that does not
	// decode is [ReasonMACMismatch], a key id the ring lacks
	// [ReasonUnknownKey].
	ReasonCursorWrongScope // "forged or wrong scope (tool, caller or arguments)"
	ReasonCursorSealedOpen // "sealed cursor does not open (tampered, other key, or other scope)"

	// Idempotent HTTP requests (idempotency.Middleware).

	ReasonIdempotencyKeyMissing       // "idempotency key header missing"
	ReasonIdempotencyKeyRepeated      // "idempotency key header repeated"
	ReasonIdempotencyKeyMalformed     // "idempotency key not a structured-field string"
	ReasonIdempotencyKeyLength        // "idempotency key empty or over MaxKeyBytes"
	ReasonIdempotencyNoCaller         // "no authenticated caller"
	ReasonIdempotencyBodyTooLarge     // "request body over MaxRequestBytes"
	ReasonIdempotencyBodyUnreadable   // "request body unreadable"
	ReasonIdempotencyInProgress       // "request with this key in progress under a live lease"
	ReasonIdempotencyMismatch         // "key reused with a different request"
	ReasonIdempotencyReplayed         // "stored response replayed"
	ReasonIdempotencyNoRecord         // "key done without a stored response"
	ReasonIdempotencyRecordCorrupt    // "stored response does not decode"
	ReasonIdempotencyResponseTooLarge // "first response was over MaxResponseBytes and not stored"
	ReasonIdempotencyHandlerRetry     // "handler asked for a retry (5xx, 408, 423, 425 or 429)"
	ReasonIdempotencyHandlerPanic     // "handler panicked"
	ReasonIdempotencyClientGone       // "client gone before the handler wrote a response" (no longer given: the client leaving does not end the handler's context)
	ReasonIdempotencyStoreAcquire     // "replay store could not lease the key"
	ReasonIdempotencyStoreConfirm     // "replay store could not record the response"
	ReasonIdempotencyStoreRelease     // "replay store could not release the key"
	ReasonIdempotencyLeaseLost        // "lease lost: another attempt took the key after the lease expired"
	ReasonIdempotencyHandlerDeadline  // "handler returned without a response after its deadline"
	ReasonIdempotencyGoneBeforeLease  // "client gone before the key was leased"

	// ReasonUnknownKey: a token (cursor, sealed cursor, page token or
	// one-time token) names a key id that no key of the ring has: it was
	// minted under a key since retired, or under another deployment's key
	// (or its key id was altered). Nothing else of it is read.
	ReasonUnknownKey // "signed by a key not in the ring: retired or foreign"

	// Idempotent HTTP requests: the handler's run (issue 45).

	ReasonIdempotencyTimeoutHandler // "handler is an http.TimeoutHandler inside the middleware"
	ReasonIdempotencyStoreBegin     // "replay store could not begin the handler's transaction"
	ReasonIdempotencyStoreRollback  // "replay store could not roll back the handler's transaction"

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
	ReasonWrongArguments:     "wrong arguments",
	ReasonOtherSession:       "other server session",
	ReasonOlderThanTTL:       "older than TTL",
	ReasonCursorStateType:    "state does not decode into the requested type",
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

	ReasonWebhookBodyTooLarge:       "body over cap",
	ReasonWebhookBodyUnreadable:     "body unreadable",
	ReasonWebhookIDHeader:           "delivery id header missing or repeated",
	ReasonWebhookIDLength:           "delivery id empty or too long",
	ReasonWebhookIDChar:             "delivery id has a forbidden character",
	ReasonWebhookNilHeader:          "nil header",
	ReasonWebhookNotVerified:        "delivery not verified",
	ReasonWebhookTimestampHeader:    "timestamp header missing or repeated",
	ReasonWebhookTimestampMalformed: "timestamp malformed",
	ReasonWebhookSignatureHeader:    "signature header missing or repeated",
	ReasonWebhookSignatureMalformed: "signature header malformed",
	ReasonWebhookSignatureMismatch:  "signature mismatch",
	ReasonWebhookTimestampTooOld:    "timestamp too old",
	ReasonWebhookTimestampFuture:    "timestamp in the future",
	ReasonWebhookStripeBody:         "body is not a JSON object with one string id of 1 to 256 printable ASCII characters",
	ReasonWebhookStripeID:           "id is not the id of the event in the body",
	ReasonWebhookStripeT:            "signature header has no t= item or more than one",
	ReasonWebhookSlackBody:          "JSON body malformed or its event_id not a string of 1 to 256 printable ASCII characters",
	ReasonWebhookSlackID:            "id is not the event_id of the body",
	ReasonWebhookDuplicate:          "delivery already processed",
	ReasonWebhookInProgress:         "delivery in progress under a live lease",
	ReasonWebhookLeaseNotAcquired:   "lease not from Verifier.Acquire",
	ReasonWebhookStoreRecord:        "replay store could not record the delivery",
	ReasonWebhookStoreConfirm:       "replay store could not confirm the delivery",
	ReasonWebhookStoreRelease:       "replay store could not release the delivery",
	ReasonWebhookLeaseLost:          "lease lost: another attempt took the delivery after the lease expired",

	ReasonCursorWrongScope: "forged or wrong scope (tool, caller or arguments)",
	ReasonCursorSealedOpen: "sealed cursor does not open (tampered, other key, or other scope)",
	ReasonUnknownKey:       "signed by a key not in the ring: retired or foreign",

	ReasonIdempotencyKeyMissing:       "idempotency key header missing",
	ReasonIdempotencyKeyRepeated:      "idempotency key header repeated",
	ReasonIdempotencyKeyMalformed:     "idempotency key not a structured-field string",
	ReasonIdempotencyKeyLength:        "idempotency key empty or over MaxKeyBytes",
	ReasonIdempotencyNoCaller:         "no authenticated caller",
	ReasonIdempotencyBodyTooLarge:     "request body over MaxRequestBytes",
	ReasonIdempotencyBodyUnreadable:   "request body unreadable",
	ReasonIdempotencyInProgress:       "request with this key in progress under a live lease",
	ReasonIdempotencyMismatch:         "key reused with a different request",
	ReasonIdempotencyReplayed:         "stored response replayed",
	ReasonIdempotencyNoRecord:         "key done without a stored response",
	ReasonIdempotencyRecordCorrupt:    "stored response does not decode",
	ReasonIdempotencyResponseTooLarge: "first response was over MaxResponseBytes and not stored",
	ReasonIdempotencyHandlerRetry:     "handler asked for a retry (5xx, 408, 423, 425 or 429)",
	ReasonIdempotencyHandlerPanic:     "handler panicked",
	ReasonIdempotencyClientGone:       "client gone before the handler wrote a response",
	ReasonIdempotencyStoreAcquire:     "replay store could not lease the key",
	ReasonIdempotencyStoreConfirm:     "replay store could not record the response",
	ReasonIdempotencyStoreRelease:     "replay store could not release the key",
	ReasonIdempotencyLeaseLost:        "lease lost: another attempt took the key after the lease expired",
	ReasonIdempotencyHandlerDeadline:  "handler returned without a response after its deadline",
	ReasonIdempotencyGoneBeforeLease:  "client gone before the key was leased",

	ReasonIdempotencyTimeoutHandler: "handler is an http.TimeoutHandler inside the middleware",
	ReasonIdempotencyStoreBegin:     "replay store could not begin the handler's transaction",
	ReasonIdempotencyStoreRollback:  "replay store could not roll back the handler's transaction",
}

// String returns the reason's stable text, the one the refusing package's
// Reason function returns ("" for [ReasonNone] and for a value outside the
// set).
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

// ParseReason returns the [RefusalReason] whose String is text, and
// whether there is one; text "" is [ReasonNone] and false.
func ParseReason(text string) (RefusalReason, bool) {
	r, ok := reasonByText[text]
	return r, ok
}
