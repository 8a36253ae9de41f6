// Package webhook signs and verifies webhook deliveries and admits each
// authentic delivery to a handler once.
// Most receivers need one [Verifier], from [NewVerifier] with their
// sender's [Scheme], wrapped around their handler with
// [Verifier.Middleware]; ExampleVerifier_Middleware is that path, and
// ExampleVerifier_Verify (GitHub), ExampleStripe, ExampleSlack,
// ExampleShopify, ExampleSvix, ExampleCursor, ExampleHMACSHA256 and
// ExampleStandardWebhooksEd25519 show each sender's configuration. The
// pgstore module's examples show the transactional mode
// ([Config.Transactional]), which sqlitestore offers too.
//
// A receiver that handles each authentic delivery once: a retry is
// acknowledged without running the handler again, a delivery without its
// signature or its ID refused (ExampleVerifier_Middleware):
//
//	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
//	verifier, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{secret}})
//	if err != nil {
//		panic(err)
//	}
//	handler := verifier.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		body, _ := io.ReadAll(r.Body)
//		d, _ := webhook.DeliveryFrom(r.Context())
//		fmt.Printf("handled %s: %s\n", d.ID, body)
//	}))
//
//	// The sending side.
//	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{secret}})
//	if err != nil {
//		panic(err)
//	}
//	send := func(body string, edit func(*http.Request)) int {
//		req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
//		if err := signer.Sign(req.Header, "msg_1", []byte(body)); err != nil {
//			panic(err)
//		}
//		if edit != nil {
//			edit(req)
//		}
//		rec := httptest.NewRecorder()
//		handler.ServeHTTP(rec, req)
//		return rec.Code
//	}
//	fmt.Println(send(`{"run":"done"}`, nil))
//	fmt.Println(send(`{"run":"done"}`, nil)) // a retry: acknowledged, not handled again
//	fmt.Println(send(`{"run":"done"}`, func(r *http.Request) { r.Header.Del(webhook.HeaderStandardSignature) }))
//	fmt.Println(send(`{"run":"done"}`, func(r *http.Request) { r.Header.Del(webhook.HeaderStandardID) }))
//
// A [Scheme] says how a sender signs: [Cursor] (Cursor's agent webhooks),
// [HMACSHA256] (the same format, header names configurable), [GitHub] (the
// same algorithm under GitHub's header names), [StandardWebhooks]
// (https://www.standardwebhooks.com) and its Ed25519 variant [StandardWebhooksEd25519] ("v1a"), [Svix] (Standard
// Webhooks under svix-* headers), [Stripe], [Slack], [Shopify] and
// [ShopifyByEvent]. Each is
// checked against its provider's published test vector where one exists
// and, in CI, against the provider's own npm package both ways.
// Timestamps are compared with the tolerance in whole seconds, as the
// reference libraries do.
// A [Verifier] checks a delivery ([Verifier.Verify]), holds it in a
// [replay.Store] that implements [replay.Leaser] while it is processed
// ([Verifier.Acquire]) and wraps a handler ([Verifier.Middleware]); a
// [Signer] signs outgoing deliveries.
//
// # Exactly-once processing
//
// Senders deliver at least once: they retry until they see a 2xx, and may
// send copies concurrently. The middleware turns that into exactly-once
// processing. Each delivery is one store entry, keyed by its signed ID
// ([StandardWebhooks]) or, when the ID header is unsigned, by the policy
// [Config.Dedup] selects. The entry is first a lease ("in progress", at most
// [Config.Lease], 60 s by default): copies arriving meanwhile get 503 with
// Retry-After. When the handler answers 2xx or a 4xx other than 408, 423,
// 425 and 429, the entry is confirmed ("done", for [Config.DedupWindow])
// and later copies get 200 without running the handler
// ([Config.OnDuplicate] sees them); when it answers 5xx or one of those
// four "retry later" statuses, or panics, the lease is released and the
// sender's retry runs it again. An
// outcome that is never recorded — the store timed out, its reply was
// lost, the process died mid-handler — leaves at most a lease, which ends
// by itself: the delivery is then processed by the next copy, never
// acknowledged unprocessed.
//
// What "once" covers depends on the store. With [replay.MemoryStore] or
// Redis (the redisstore module) it is at most once per lease: the lease
// fences the store's record, not the handler's own writes, so a handler
// that outlives its lease (or dies after its effect) can see its effect
// repeated by the next copy. With a store that implements
// [replay.Transactor] (the pgstore and sqlitestore modules) and [Config.Transactional] (or
// [Lease.Begin] outside the middleware), the handler's writes in the
// transaction it finds in its context commit exactly once, in the same
// transaction as the delivery's record: a handler that outlived its lease,
// a process killed before the commit, a lost commit reply — in each case
// the writes are kept exactly when the delivery is recorded as processed,
// and a 2xx is sent only after that commit. Effects outside that database
// stay at most once per lease.
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
// # Operations
//
// [Config.Observer] takes an [observe.Observer], the type the root
// package's configs take, so one log or metrics adapter counts webhook
// deliveries (kind [observe.KindWebhook]) beside tokens: each verification
// with the position of the secret that matched, each refusal with its
// [ReasonOf], duplicates, copies in progress, processed deliveries and
// replay-store failures with the store's latency. [Verifier.SetSecrets]
// and [Signer.SetSecrets] rotate the secrets of a running verifier or
// signer: the new list is validated first, and takes effect whole for the
// calls that start after it.
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
