// Package webhook signs and verifies webhook deliveries and admits each
// authentic delivery to a handler once.
//
// A [Scheme] says how a sender signs: [HMACSHA256] (Cursor's agent webhooks,
// header names configurable), [GitHub] (the same algorithm under GitHub's
// header names), [StandardWebhooks] (https://www.standardwebhooks.com) and
// its Ed25519 variant [StandardWebhooksEd25519] ("v1a"), [Svix] (Standard
// Webhooks under svix-* headers), [Stripe], [Slack] and [Shopify]. Each is
// checked against its provider's published test vector where one exists
// and, in CI, against the provider's own npm package both ways.
// Timestamps are compared with the tolerance in whole seconds, as the
// reference libraries do.
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
// allocating (a forged Ed25519 signature costs one allocation inside
// crypto/ed25519), and returns nothing of a refused delivery. Secrets never
// print: [Config], [Verifier] and [Signer] show them redacted under every
// fmt verb, through log/slog and through encoding/json. A zero [Verifier] or
// [Signer] refuses every call with [ErrNoSecret].
//
// Durations and sizes in [Config] follow one rule: zero means the
// documented default, a negative value is an error from the constructor.
// An option that has no effect under the chosen scheme (a SignatureHeader
// under Standard Webhooks, a Tolerance under a scheme that signs no time) or
// on a [Signer] (the receiving options) is an error from the constructor,
// never silently ignored; so is a Tolerance that is not a whole number of
// seconds, since timestamps are compared in whole seconds.
//
// # FIPS 140-3 mode
//
// Under GODEBUG=fips140=on or =only (crypto/fips140.Enabled), HMAC keys
// shorter than 112 bits are not approved, and crypto/hmac panics on them in
// fips140=only mode. [NewVerifier] and [NewSigner] therefore refuse an
// [HMACSHA256], [GitHub], [Stripe], [Slack] or [Shopify] secret shorter
// than 14 bytes with [ErrSecretInvalid] whenever the mode is on, with an
// error that names the mode; outside the mode such secrets are accepted,
// as senders allow them. Standard Webhooks and Svix secrets are at least
// 24 bytes and are never affected. Plain Ed25519
// ([StandardWebhooksEd25519]) is approved in the mode and works under
// fips140=only.
package webhook
