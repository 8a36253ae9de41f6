// Package ctoken issues and verifies signed continuation tokens: the opaque
// strings a server hands a client ("here is page 2", "here is where we
// were") and must be able to trust when the untrusted client echoes them
// back.
// Where to start: for an MCP tool server, the ctokenmcp module (go-sdk)
// or ctokenmcpgo (mcp-go), which wrap this package; for a paginated HTTP
// or RPC list, [CursorIssuer] (ExampleCursorIssuer; sealed:
// ExampleCursorIssuer_sealed); for state carried across an MCP
// multi-round-trip request, [RequestStateCodec] (ExampleRequestStateCodec;
// single use: ExampleRequestStateCodec_DecodeContext); for a one-time
// bootstrap token, [OneTimeIssuer] (ExampleOneTimeIssuer). Every use needs
// a [Keyring] (ExampleKeyring). An HTTP API made idempotent and webhooks
// signed and verified are packages of their own (idempotency, webhook),
// listed below.
//
// A cursor for page 2 of one caller's query, verified for that caller and
// refused for another (ExampleCursorIssuer):
//
//	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
//	if err != nil {
//		log.Fatal(err)
//	}
//	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
//	if err != nil {
//		log.Fatal(err)
//	}
//	args, err := ctoken.ArgsFingerprint([]byte(`{"query":"is:open"}`))
//	if err != nil {
//		log.Fatal(err)
//	}
//	scope := ctoken.CursorScope{ToolID: "search_issues", CallerID: "user:42", Args: args}
//
//	cursor, err := issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 2})
//	if err != nil {
//		log.Fatal(err)
//	}
//	p, err := issuer.Verify(cursor, scope)
//	fmt.Println(p.Page, err)
//
//	_, err = issuer.Verify(cursor, ctoken.CursorScope{ToolID: "search_issues", CallerID: "user:43", Args: args})
//	fmt.Println(errors.Is(err, ctoken.ErrCursorInvalid), ctoken.ErrorCode(err))
//
// It has two continuation token types:
//
//   - [CursorIssuer]: stateless HMAC-SHA256 (or, sealed, XAES-256-GCM)
//     pagination cursors over compact CBOR, at most [MaxCursorBytes], bound
//     inside their MAC (never carried) to an operation or endpoint
//     (an MCP tool, an RPC, an HTTP route: [CursorScope].ToolID), a caller,
//     an arguments fingerprint ([ArgsFingerprint]) and a server session,
//     with a TTL and key rotation; by page number or by keyset
//     ([IssueKeyset]).
//   - [RequestStateCodec]: signed ("v1.") or AES-256-GCM encrypted ("v1e.")
//     MCP multi-round-trip requestState envelopes bound to the authenticated
//     subject (and tool), with expiry, wire-compatible with the reference D
//     implementation.
//
// Beside them it offers single-use tokens ([OneTimeIssuer]), which share
// the [Keyring], the HKDF label space and the base64url framing, and an
// RFC 8693 endpoint that exchanges one for a credential (package
// [github.com/ctoken/ctoken/exchange]). Packages of this module beside the
// root include:
//
//   - [github.com/ctoken/ctoken/replay]: the [replay.Store] in which
//     single-use request state ([RequestStateSecurity.Replay]), one-time
//     tokens ([OneTimeConfig.Replay]) and webhook deduplication record what
//     they have accepted, and its in-memory implementation.
//   - [github.com/ctoken/ctoken/webhook]: webhook signing and verification.
//     It does not import this package, so webhook-only users do not link
//     the CBOR library.
//   - [github.com/ctoken/ctoken/observe]: the events every issuer and
//     verifier reports, and the typed refusal reasons.
//   - [github.com/ctoken/ctoken/keyfile]: a key ring read from a file and
//     reloaded when it changes.
//
// Keys come from a [Keyring]: a primary key that seals new tokens and
// previous keys that still open old ones. Every use derives its own subkey
// with HKDF-SHA256 (salt: 32 zero bytes, 32-byte output, info: a label), so
// one operator secret serves all of them.
//
// Every type is safe for concurrent use. Verification compares MACs and
// bind tags in constant time, checks length caps before decoding, decodes
// strictly, never panics, and never returns partial data. Errors match the
// package's sentinels with [errors.Is]; [Reason] gives a log-safe word on
// which check failed. No error text contains a key or the token.
//
// A token proves that this server issued it and that it was not changed. It
// does not authorize anything: re-check the caller's access on every
// request.
//
// The wire formats below are stated here once; the types' documentation
// refers to them.
//
// # Cursor wire format
//
// An issuer writes format version 2, signed, or with [CursorConfig.Seal]
// version 3, sealed; it verifies both. Every map is Core Deterministic
// Encoding (RFC 8949 §4.2.1) with small integer keys; subkeys are
// HKDF-SHA256(key, salt = 32 zero bytes, info = label, 32) of each key of
// the ring.
//
//	K      = HKDF(key, "ctoken.cursor hmac-sha256 key")
//	Ke     = HKDF(key, "ctoken.cursor xaes-256-gcm key")
//	kid    = HKDF(key, "ctoken.key-id")[:4]   (the key id, [Keyring.KeyIDs])
//	scope  = "ctoken.scope\x00" || uvarint(len(tool)) || tool
//	         || uvarint(len(caller)) || caller
//	         || 0x00                        (arguments not bound: zero Args)
//	          | 0x01 || args                (the 32-byte fingerprint)
//	tag    = SHA-256("ctoken.cursor session tag\x00" || session)[:8]
//
// Version 2 (signed):
//
//	cursor = base64url_nopad( body || HMAC-SHA256(K, body || scope) )
//	body   = CBOR map:
//	  1: version        unsigned, 2
//	  2: key id         byte string, 4 bytes: kid of the key K is derived from
//	  5: page           unsigned, at most 2^32-1 (0 in a keyset cursor)
//	  6: issued at      integer, Unix seconds
//	  7: session tag    byte string, 8 bytes
//	  8: opaque state   byte string, 1 to [MaxOpaqueStateBytes] bytes (omitted when empty)
//
// Version 3 (sealed, XAES-256-GCM, https://c2sp.org/XAES-256-GCM, with a
// 192-bit nonce: a random 12-byte prefix kept for 2^16 cursors, then 12
// random bytes per cursor, so there is no practical limit on the number of
// cursors sealed under one key; SECURITY.md gives the bound):
//
//	cursor    = base64url_nopad( header || nonce[24] || XAES-256-GCM(Ke, nonce, plaintext, aad = header || scope) )
//	header    = CBOR map { 1: 3, 2: key id, 6: issued at, 7: session tag }
//	plaintext = inner || zero bytes up to the next multiple of 64 bytes,
//	            or to 288 bytes past 256, of the length inner would have
//	            with the longest page (a 5-byte head)
//	inner     = CBOR map { 5: page, 8: opaque state (omitted when empty) }
//
// The padding puts every sealed cursor of one issuer in one of 5 length
// classes (plaintexts of 64, 128, 192, 256 and 288 bytes), chosen by the
// state's length alone, so its length tells only the class, not the length
// of the state nor the page (TestSealedCursorLengthClasses); Verify refuses a plaintext padded to
// another length or with a non-zero padding byte.
//
// Keys 1 (version) and 2 (key id) sort first, so the first 9 bytes of
// every decoded cursor are at fixed positions: the map head, the version
// at raw[2] and the key id at raw[5:9]. Verify reads them, picks the one
// key of the ring that id names and runs ONE MAC (or one open), whatever
// the ring's size (BenchmarkCursorVerifyRing); the version and the key id
// are inside the MAC input (or the additional data), so neither can be
// changed without detection. A key id no key of the ring has is its own
// refusal, "signed by a key not in the ring: retired or foreign"
// ([observe.ReasonUnknownKey]): [ErrCursorInvalid], or [ErrCursorExpired] when the
// (unauthenticated) body also names another session tag, as after a
// restart with a fresh random key and session, so the client starts over.
//
// The tool and caller IDs and the arguments fingerprint are never carried,
// not even as a digest: a version 2 cursor's MAC covers them after the body
// and a sealed one authenticates them as additional data, so two cursors of
// one caller are not linkable by their scope, and a dictionary of IDs has
// nothing to be tried against. The scope encoding is injective (a fixed
// label, lengths first, a marker before the arguments; the body is one
// canonical CBOR item and nothing may follow it; TestScopeEncodingIsInjective
// in internal/cursorwire). Any IDs, of any length and not necessarily
// UTF-8, cost no byte of the cursor, so every cursor holds the full
// [MaxOpaqueStateBytes] ([CursorIssuer.StateBudget];
// TestCursorScopeCostsNoStateBudget). A cursor verifies only for the exact
// scope it was issued for: one bound to arguments is refused when
// want.Args is zero, one issued with a zero Args when want.Args is set. A
// cursor of another scope and a forged one cannot be told apart: both are
// [ErrCursorInvalid], "forged or wrong scope (tool, caller or arguments)"
// ([observe.ReasonCursorWrongScope]), or, sealed, "sealed cursor does not open
// (tampered, other key, or other scope)". The session tag and the issue
// time are checked after the MAC: another session tag is
// [ErrCursorExpired] ("other server session"), as is an age over the TTL.
//
// Format version 1 (tool and caller in clear, no key id) and the layouts
// of versions 2 and 3 before key ids are no longer verified: they are
// refused as "malformed or non-canonical payload" at the fixed prefix.
// Known-answer vectors of both layouts, built from the standard library
// alone, are in testdata/vectors/cursor.json.
//
// Base64 is strict: padding, white space and non-zero unused trailing bits
// are refused, so each token has exactly one spelling. Verification runs:
// length cap ([MaxCursorBytes], inclusive), base64, the version and key id
// at the fixed prefix, one MAC (sealed: one XAES-256-GCM open) under the
// key that id names, strict CBOR decode (no duplicate or unknown keys, no
// indefinite lengths, no tags, no non-minimal heads, no trailing bytes, no
// empty or oversize state; sealed: the exact padding), session, age.
//
// # Request state wire format
//
//	aesKey, bindKey, payloadKey = HKDF-SHA256(key, salt = 32 zero bytes, 32, info =
//	    "mcp.requestState aes-256-gcm key" | "mcp.requestState bind-hmac key" |
//	    "mcp.requestState payload-hmac key")
//	bind      = hex(HMAC-SHA256(bindKey, material)), lowercase
//	material  = subject                  (BindSubject; "" for an empty subject)
//	          | subject + "\x00" + tool  (BindSubjectAndTool, an empty subject included)
//	          | ""                       (BindNone)
//	payload   = {"s":<state as a JSON string>,"exp":<Unix seconds>,"b":<bind>}
//	signed    = "v1."  + base64url_nopad(payload) + "." + base64url_nopad(HMAC-SHA256(payloadKey, payload))
//	encrypted = "v1e." + base64url_nopad(nonce12 || AES-256-GCM(aesKey, nonce12, payload, aad = bind))
//
// Under [BindSubjectAndTool] a subject containing NUL is refused (the
// material would be ambiguous); the tool may contain NUL ([MCPTarget] does).
//
// With [RequestStateSecurity.Audience] set (not in the reference
// implementation), only the bind tag changes; payload and framing do not:
//
//	audBindKey = HKDF-SHA256(key, salt = 32 zero bytes, 32, info = "ctoken.requestState audience bind-hmac key")
//	bind       = hex(HMAC-SHA256(audBindKey, audience + "\x00" + material))
//
// An audience never holds NUL. An empty Audience is the format above, byte
// for byte. The TypeScript and Python MCP SDKs also prefix their own,
// different request-state formats with "v1."; see docs/wire-format.md.
// An encrypted state's nonce is random ([crypto/cipher.NewGCMWithRandomNonce]
// writes nonce12 || ciphertext || tag, the layout above).
//
// The encoder writes the payload's members in that order with no white
// space and escapes only what JSON requires; the decoder accepts any member
// order and white space but requires exactly these three members. A state
// is expired when exp < now. The reference D implementation writes the
// members in another order ("s", "b", "exp") and escapes "/" as "\/", so
// the two produce different wire strings for one state. This package
// decodes the reference implementation's states in both modes and under
// every binding: testdata/interop holds 424 states it made, and a test
// decodes every one.
//
// # One-time token wire format
//
//	token   = "ot1." + base64url_nopad( payload || HMAC-SHA256(K, payload) )
//	K       = HKDF-SHA256(key, salt = 32 zero bytes, info = "ctoken.onetime hmac key", 32)
//	payload = version byte 3
//	          || 4-byte key id of the signing key:
//	             HKDF-SHA256(key, salt = 32 zero bytes, info = "ctoken.key-id")[:4]
//	          || 16-byte random nonce (the token's ID in the replay store)
//	          || issued-at, big-endian int64 Unix seconds
//	          || expiry, big-endian int64 Unix seconds
//	          || uvarint(len(purpose)) || purpose
//	          || for each claim in increasing name order:
//	             uvarint(len(name)) || name || uvarint(len(value)) || value
//
// Uvarints are minimal; base64 is strict as for cursors. "ot1." with
// version byte 3 is the one spelling of a one-time token: any other version
// byte is refused as an unknown format before the MAC. The verifier reads
// the key id at its fixed place (bytes 1..4 of the decoded token), right
// after the length cap and strict base64, and runs one MAC with the key of
// the ring it names, whatever the ring's size; an id no key of the ring has
// is its own refusal ("signed by a key not in the ring: retired or
// foreign"), and a MAC failure under a known id is "mac mismatch".
//
// A [RequestStateSecurity] needs Keys (nil is [ErrNoKey]); for TTL and
// MaxBytes, 0 means the default and a negative value is [ErrConfig], as is
// an unknown Mode or Binding.
//
// # Further documentation
//
// The repository's docs directory has one page per topic, each starting
// with a runnable snippet: [cursors], [request state] (and what interop with
// the reference D implementation means), [keys and rotation], [running a
// fleet] with Redis, [webhooks], [one-time tokens], the [MCP integration],
// the [CLI], [benchmarks] and the [wire formats].
//
// [cursors]: https://github.com/ctoken/ctoken/blob/main/docs/cursors.md
// [request state]: https://github.com/ctoken/ctoken/blob/main/docs/request-state.md
// [keys and rotation]: https://github.com/ctoken/ctoken/blob/main/docs/keys.md
// [running a fleet]: https://github.com/ctoken/ctoken/blob/main/docs/fleet.md
// [webhooks]: https://github.com/ctoken/ctoken/blob/main/docs/webhooks.md
// [one-time tokens]: https://github.com/ctoken/ctoken/blob/main/docs/one-time.md
// [MCP integration]: https://github.com/ctoken/ctoken/blob/main/docs/mcp.md
// [CLI]: https://github.com/ctoken/ctoken/blob/main/docs/cli.md
// [benchmarks]: https://github.com/ctoken/ctoken/blob/main/docs/benchmarks.md
// [wire formats]: https://github.com/ctoken/ctoken/blob/main/docs/wire-format.md
package ctoken
