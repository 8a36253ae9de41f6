package webhook

import (
	"errors"

	"github.com/ctoken/ctoken/internal/reason"
)

// Errors (errors.Is). [Verifier.Middleware] maps them to HTTP statuses with
// [StatusCode].
var (
	// ErrSignature reports a missing, unparsable or non-matching signature:
	// the delivery is not authentic.
	ErrSignature = errors.New("webhook: signature invalid")
	// ErrTimestamp reports an authentic delivery whose signed timestamp is
	// outside the tolerance (an old delivery replayed, or a badly skewed
	// clock). It is only returned after the signature matched.
	ErrTimestamp = errors.New("webhook: timestamp outside tolerance")
	// ErrMalformed reports a delivery missing its ID or timestamp, or
	// carrying one that cannot be parsed, a body that cannot be read, or a
	// [Delivery] that did not come from [Verifier.Verify].
	ErrMalformed = errors.New("webhook: malformed request")
	// ErrTooLarge reports a body over the configured cap.
	ErrTooLarge = errors.New("webhook: body too large")
	// ErrReplayStore reports that the replay store could not record a
	// delivery (full, unreachable, timed out); the store's own error is
	// wrapped too. The delivery was not processed; the sender should retry.
	ErrReplayStore = errors.New("webhook: replay store failed")

	// ErrNoSecret reports a [Config] without secrets, or a [Verifier] or
	// [Signer] not made by its constructor.
	ErrNoSecret = errors.New("webhook: no secret configured")
	// ErrSecretInvalid reports a secret that is empty, malformed, too short
	// for its scheme, or too short for FIPS 140-3 mode. Its text names the
	// secret's position, never the secret.
	ErrSecretInvalid = errors.New("webhook: invalid secret")
	// ErrConfig reports any other invalid [Config]: no scheme, a negative
	// duration or size, or an option that has no effect under the scheme or
	// on a [Signer].
	ErrConfig = errors.New("webhook: invalid configuration")
)

// Reason returns the fixed, log-safe description of the check that
// produced err ("signature mismatch", "timestamp too old", ...), or "" if
// err did not come from this package. Every error this package returns has
// a non-empty reason.
func Reason(err error) string { return reason.Of(err) }

// Rejections are allocated once, so a refused delivery costs no allocation.
var (
	errBodyTooLarge    = reason.New(ErrTooLarge, "body over cap")
	errBodyUnreadable  = reason.New(ErrMalformed, "body unreadable")
	errIDHeader        = reason.New(ErrMalformed, "delivery id header missing or repeated")
	errIDLength        = reason.New(ErrMalformed, "delivery id empty or too long")
	errIDChar          = reason.New(ErrMalformed, "delivery id has a forbidden character")
	errNilHeader       = reason.New(ErrMalformed, "nil header")
	errNotVerified     = reason.New(ErrMalformed, "delivery not verified")
	errTSHeader        = reason.New(ErrMalformed, "timestamp header missing or repeated")
	errTSMalformed     = reason.New(ErrMalformed, "timestamp malformed")
	errSigHeader       = reason.New(ErrSignature, "signature header missing or repeated")
	errSigMalformed    = reason.New(ErrSignature, "signature header malformed")
	errSigMismatch     = reason.New(ErrSignature, "signature mismatch")
	errTSTooOld        = reason.New(ErrTimestamp, "timestamp too old")
	errTSFuture        = reason.New(ErrTimestamp, "timestamp in the future")
	errZeroVerifier    = reason.New(ErrNoSecret, "verifier not made by NewVerifier")
	errZeroSigner      = reason.New(ErrNoSecret, "signer not made by NewSigner")
	errNoSecrets       = reason.New(ErrNoSecret, "no secret")
	errSecretEmpty     = reason.New(ErrSecretInvalid, "secret empty")
	errSecretSpace     = reason.New(ErrSecretInvalid, "secret has white space before or after it")
	errSecretBase64    = reason.New(ErrSecretInvalid, "secret not standard base64 after whsec_")
	errSecretShort     = reason.New(ErrSecretInvalid, "secret shorter than 24 bytes")
	errSecretFIPS      = reason.New(ErrSecretInvalid, "secret shorter than 112 bits, not allowed in FIPS 140-3 mode (GODEBUG=fips140)")
	errNoScheme        = reason.New(ErrConfig, "no scheme (set Config.Scheme to the sender's: StandardWebhooks(), Svix(), Stripe(), Slack(), GitHub(), Shopify() or another Scheme of this package)")
	errForeignScheme   = reason.New(ErrConfig, "scheme not from this package")
	errNegTolerance    = reason.New(ErrConfig, "Tolerance is negative")
	errNegMaxBody      = reason.New(ErrConfig, "MaxBody is negative")
	errNegDedup        = reason.New(ErrConfig, "DedupWindow is negative")
	errLongDedup       = reason.New(ErrConfig, "DedupWindow is over MaxDedupWindow (366 days)")
	errLongTolerance   = reason.New(ErrConfig, "Tolerance is over MaxTolerance (24h)")
	errLongLease       = reason.New(ErrConfig, "Lease is over MaxLease (24h)")
	errNegRetryAfter   = reason.New(ErrConfig, "RetryAfter is negative")
	errLongRetryAfter  = reason.New(ErrConfig, "RetryAfter is over MaxRetryAfter (1h)")
	errNoNamespace     = reason.New(ErrConfig, "Namespace is required with a Replay store: endpoints sharing a store must not share delivery IDs")
	errLongNamespace   = reason.New(ErrConfig, "Namespace is longer than MaxNamespaceBytes")
	errNamespaceText   = reason.New(ErrConfig, "Namespace is not printable ASCII without surrounding spaces")
	errToleranceUnused = reason.New(ErrConfig, "Tolerance has no effect: the scheme signs no timestamp")
	errHeadersUnused   = reason.New(ErrConfig, "SignatureHeader and IDHeader have no effect: the scheme fixes its headers")
	errHeaderInvalid   = reason.New(ErrConfig, "SignatureHeader or IDHeader is not a valid header name")
	errSignerOption    = reason.New(ErrConfig, "Tolerance, MaxBody, Replay, Namespace, DedupWindow and OnReject have no effect on a Signer")
)

// storeError wraps a replay store failure so that it matches both
// [ErrReplayStore] and the store's error, with a reason.
func storeError(err error) error {
	return reason.Wrap(ErrReplayStore, "replay store could not record the delivery", err)
}
