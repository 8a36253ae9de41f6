// Package webhook signs and verifies webhook deliveries and admits each
// authentic delivery to a handler once.
//
// A [Scheme] says how a sender signs: [HMACSHA256] (Cursor's agent webhooks,
// header names configurable), [GitHub] (the same algorithm under GitHub's
// header names) and [StandardWebhooks] (https://www.standardwebhooks.com).
// A [Verifier] checks a delivery ([Verifier.Verify]), records it in a
// [replay.Store] ([Verifier.Claim]) and wraps a handler
// ([Verifier.Middleware]); a [Signer] signs outgoing deliveries.
//
// The package does not import the ctoken root package: a program that only
// receives webhooks links neither the CBOR library nor the token code.
//
// # Rules
//
// Every rejection matches exactly one of the package's sentinel errors with
// errors.Is, and [Reason] gives a fixed, log-safe description of the check
// that failed; [Verifier.Verify] refuses a forged or stale delivery without
// allocating, and returns nothing of a refused delivery. Secrets never
// print: [Config], [Verifier] and [Signer] show them redacted under every
// fmt verb, through log/slog and through encoding/json. A zero [Verifier] or
// [Signer] refuses every call with [ErrNoSecret].
//
// Durations and sizes in [Config] follow one rule: zero means the
// documented default, a negative value is an error from the constructor.
// An option that has no effect under the chosen scheme (a SignatureHeader
// under Standard Webhooks, a Tolerance under a scheme that signs no time) or
// on a [Signer] (the receiving options) is an error from the constructor,
// never silently ignored.
//
// # FIPS 140-3 mode
//
// Under GODEBUG=fips140=on or =only (crypto/fips140.Enabled), HMAC keys
// shorter than 112 bits are not approved, and crypto/hmac panics on them in
// fips140=only mode. [NewVerifier] and [NewSigner] therefore refuse an
// [HMACSHA256] or [GitHub] secret shorter than 14 bytes with
// [ErrSecretInvalid] whenever the mode is on, with an error that names the
// mode; outside the mode such secrets are accepted, as senders allow them.
// Standard Webhooks secrets are at least 24 bytes and are never affected.
package webhook
