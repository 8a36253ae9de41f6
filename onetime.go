package ctoken

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// One-time token limits and defaults.
const (
	// defaultOneTimeTTL is the lifetime of a one-time token when
	// [OneTimeConfig.TTL] is zero.
	defaultOneTimeTTL = 10 * time.Minute
	// MaxOneTimeTokenBytes caps the encoded token, checked at mint and
	// before any decoding at redeem.
	MaxOneTimeTokenBytes = 1024
	// MaxOneTimePurposeBytes caps [OneTimeConfig.Purpose].
	MaxOneTimePurposeBytes = 64
)

const (
	oneTimePrefix = "ot1."
	// oneTimeVersion is the one layout "ot1." tokens have: the version byte,
	// then the key id. Development layouts 1 (no purpose) and 2 (no key id)
	// were never released and are refused as an unknown format.
	oneTimeVersion  = 3
	oneTimeNonceLen = 16
	// oneTimeKeyIDAt is where the key id sits in the decoded token.
	oneTimeKeyIDAt = 1
	// version, key id, nonce, issued-at, expiry
	oneTimeFixedLen = 1 + keyIDSize + oneTimeNonceLen + 8 + 8
	// oneTimeNonceAt and oneTimeTimesAt are the offsets of the nonce and of
	// the issue time.
	oneTimeNonceAt = oneTimeKeyIDAt + keyIDSize
	oneTimeTimesAt = oneTimeNonceAt + oneTimeNonceLen
	oneTimeLabel   = "ctoken.onetime hmac key"
	// oneTimeReplayPrefix namespaces a token's replay-store id, followed
	// by its nonce in lowercase hex.
	oneTimeReplayPrefix = "onetime:"
	// oneTimeStackBytes is the longest decoded token verified without an
	// allocation for it: a 32-byte purpose and claims of about 120 bytes.
	// Mint sizes its payload and its text for it too.
	oneTimeStackBytes = 256
	// oneTimeMaxSkew is how far in the future an issue time may lie
	// (another instance's clock) before the token is refused.
	oneTimeMaxSkew = 60 * time.Second
)

// One-time token errors (errors.Is). Redeem returns exactly one of the first
// four for a refused token, or a wrapped replay-store error.
var (
	// ErrOneTimeInvalid reports a forged, tampered, truncated, malformed or
	// oversize token, one from an unknown key, or one minted for another
	// purpose. Nothing in it is trusted.
	ErrOneTimeInvalid = errors.New("ctoken: invalid one-time token")
	// ErrOneTimeExpired reports an authentic token past its expiry.
	ErrOneTimeExpired = errors.New("ctoken: expired one-time token")
	// ErrOneTimeRedeemed reports an authentic, unexpired token that has
	// already been redeemed.
	ErrOneTimeRedeemed = errors.New("ctoken: one-time token already redeemed")
	// ErrOneTimeClaims reports an authentic, unexpired token bound to other
	// claims than the redeemer expects. The token is not consumed.
	ErrOneTimeClaims = errors.New("ctoken: one-time token claims mismatch")
	// ErrOneTimeTooLarge reports claims whose token would exceed
	// [MaxOneTimeTokenBytes], at mint.
	ErrOneTimeTooLarge = errors.New("ctoken: one-time token claims too large")
)

// OneTimeConfig configures a [OneTimeIssuer]. Keys and Purpose are required.
type OneTimeConfig struct {
	// Keys signs (primary) and verifies (every key) tokens, through a subkey
	// derived with the label "ctoken.onetime hmac key". Exactly one of Keys
	// and KeySource is required: neither (or an empty [Keyring]) is
	// [ErrNoKey], both is [ErrConfig].
	Keys *Keyring
	// KeySource, instead of Keys, supplies a ring that can be replaced while
	// the issuer runs ([KeySource.Swap]); each call uses the current ring.
	KeySource *KeySource
	// Purpose names what this issuer's tokens are for ("password-reset",
	// "agent-bootstrap"). It is written into every token under the MAC, and
	// an issuer accepts only tokens of its own purpose, so issuers that
	// share a [Keyring] never accept each other's tokens. Required: 1 to
	// [MaxOneTimePurposeBytes] bytes of printable UTF-8 (no control or format
	// characters); anything else is [ErrConfig]. It is not secret: the token
	// carries it in the clear.
	Purpose string
	// TTL is a token's lifetime; 0 means 10 minutes. Negative is
	// [ErrConfig]: every one-time token expires.
	TTL time.Duration
	// Replay records redeemed tokens until 60 s after they expire. Nil means a private
	// [replay.MemoryStore] with [replay.DefaultMax] entries, which enforces
	// single use within one process only; a fleet shares one store. A
	// [replay.Bounded] store whose horizon is shorter than TTL + 1 s +
	// [replay.SkewMargin] is [ErrConfig]: it would refuse every redemption.
	Replay replay.Store
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Observer, if set, is told of every Mint, Verify and Redeem
	// ([observe.KindOneTime]), with the replay store's latency on Redeem; see
	// [observe.Observer]. Nil costs nothing.
	Observer observe.Observer
}

// OneTimeIssuer mints short-lived, HMAC-signed tokens bound to a purpose and
// to named claims (for example agent, company and run IDs) and redeems each
// at most once. A remote agent can exchange such a token for a run-scoped
// credential: a stolen token that was already used is worthless, an unused
// one works only for the claims it names, only at an issuer of its purpose,
// and only until it expires.
//
// Its wire format ("ot1.") is stated in the package documentation.
//
// A [OneTimeIssuer] is safe for concurrent use. The zero value refuses every
// call with [ErrNoKey].
type OneTimeIssuer struct {
	keys    namedMACs            // derived subkeys, primary first; zero when rot is set
	rot     *rotating[namedMACs] // keys from a KeySource
	obs     observe.Observer
	purpose string
	ttl     time.Duration
	replay  replay.Store
	now     func() time.Time
}

// OneTimeToken is the authenticated content of a one-time token, as
// returned by [OneTimeIssuer.Verify].
type OneTimeToken struct {
	// Purpose is the purpose of the issuer that minted the token (always
	// the verifying issuer's own).
	Purpose string
	// Claims are the claims the token was minted with; never nil.
	Claims map[string]string
	// IssuedAt and ExpiresAt are whole seconds.
	IssuedAt, ExpiresAt time.Time
}

// NewOneTimeIssuer returns an issuer for cfg. A nil or empty cfg.Keys is
// [ErrNoKey]; an empty or invalid Purpose, a negative TTL, or a TTL whose
// claims (TTL + 1 s + [replay.SkewMargin]) reach past the horizon of a
// [replay.Bounded] Replay store is [ErrConfig]. Faults of several fields
// (an all-zero config: no Keys and no Purpose) are refused with one error
// naming each, which errors.Is matches against each fault's sentinel.
func NewOneTimeIssuer(cfg OneTimeConfig) (*OneTimeIssuer, error) {
	var ttl error
	if cfg.TTL < 0 {
		ttl = configError("OneTimeConfig.TTL is negative (0 means 10 minutes)")
	}
	if err := configErrors(keysFrom(cfg.Keys, cfg.KeySource, "OneTimeConfig"), checkPurpose(cfg.Purpose), ttl); err != nil {
		return nil, err
	}
	o := &OneTimeIssuer{
		purpose: cfg.Purpose,
		ttl:     cfg.TTL,
		replay:  cfg.Replay,
		now:     cfg.Now,
		obs:     cfg.Observer,
	}
	if cfg.KeySource != nil {
		var ok bool
		if o.rot, ok = newRotating(cfg.KeySource, deriveOneTimeMACs); !ok {
			return nil, reject(ErrNoKey, "OneTimeConfig.KeySource: a key cannot be derived from")
		}
	} else if o.keys, _ = deriveOneTimeMACs(cfg.Keys); o.keys.macs == nil {
		return nil, reject(ErrNoKey, "OneTimeConfig.Keys: a key cannot be derived from")
	}
	if o.ttl == 0 {
		o.ttl = defaultOneTimeTTL
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.replay == nil {
		o.replay = &replay.MemoryStore{Now: o.now}
	}
	if err := checkHorizon(o.replay, o.ttl, "OneTimeConfig.Replay"); err != nil {
		return nil, err
	}
	return o, nil
}

// deriveOneTimeMACs returns the one-time MAC subkeys and the key ids of kr,
// or false.
func deriveOneTimeMACs(kr *Keyring) (namedMACs, bool) { return deriveNamedMACs(kr, oneTimeLabel) }

// ring returns the keys in use now (empty for the zero value).
func (o *OneTimeIssuer) ring() namedMACs {
	if o.rot != nil {
		return o.rot.get()
	}
	return o.keys
}

func checkPurpose(p string) error {
	switch {
	case p == "":
		return configError("OneTimeConfig.Purpose is empty (name what the tokens are for)")
	case len(p) > MaxOneTimePurposeBytes:
		return configError("OneTimeConfig.Purpose is longer than MaxOneTimePurposeBytes")
	case !utf8.ValidString(p):
		return configError("OneTimeConfig.Purpose is not valid UTF-8")
	}
	for _, r := range p {
		if !unicode.IsPrint(r) {
			return configError("OneTimeConfig.Purpose holds a control, format or non-printing character")
		}
	}
	return nil
}

// Purpose returns the issuer's purpose ("" for the zero value).
func (o *OneTimeIssuer) Purpose() string { return o.purpose }

// Mint returns a new token bound to the issuer's purpose and to claims
// (which may be empty), valid for the configured TTL from now. Claim names
// and values are arbitrary byte strings (the empty name included); the token
// carries them in the clear (signed, not encrypted), so they must not be
// secret. It fails with [ErrOneTimeTooLarge] when the token would exceed
// [MaxOneTimeTokenBytes], and with [ErrNoKey] on an issuer not made by
// [NewOneTimeIssuer].
func (o *OneTimeIssuer) Mint(claims map[string]string) (string, error) {
	t, err := o.mint(claims)
	if o.obs != nil && err != errOneTimeNoKey {
		observeIssue(o.obs, observe.KindOneTime, err)
	}
	return t, err
}

func (o *OneTimeIssuer) mint(claims map[string]string) (string, error) {
	keys := o.ring()
	if len(keys.macs) == 0 || o.now == nil {
		return "", errOneTimeNoKey
	}
	// For a token of usual size (up to 8 claims, oneTimeStackBytes of
	// payload) the names and the text stay on the stack; the payload (which
	// the MAC's hash.Hash keeps from the stack) and the returned string are
	// the two allocations.
	var nameBuf [8]string
	names := nameBuf[:0]
	for name := range claims {
		names = append(names, name)
	}
	slices.Sort(names)
	now := o.now()
	payload := make([]byte, oneTimeFixedLen, oneTimeStackBytes)
	payload[0] = oneTimeVersion
	copy(payload[oneTimeKeyIDAt:], keys.ids[0][:])
	rand.Read(payload[oneTimeNonceAt : oneTimeNonceAt+oneTimeNonceLen]) // never fails
	binary.BigEndian.PutUint64(payload[oneTimeTimesAt:], uint64(now.Unix()))
	binary.BigEndian.PutUint64(payload[oneTimeTimesAt+8:], uint64(now.Add(o.ttl).Unix()))
	payload = binary.AppendUvarint(payload, uint64(len(o.purpose)))
	payload = append(payload, o.purpose...)
	for _, name := range names {
		value := claims[name]
		if len(payload)+len(name)+len(value) > MaxOneTimeTokenBytes {
			return "", errOneTimeTooLarge
		}
		payload = binary.AppendUvarint(payload, uint64(len(name)))
		payload = append(payload, name...)
		payload = binary.AppendUvarint(payload, uint64(len(value)))
		payload = append(payload, value...)
	}
	if len(oneTimePrefix)+b64.EncodedLen(len(payload)+macSize) > MaxOneTimeTokenBytes {
		return "", errOneTimeTooLarge
	}
	raw := keys.macs[0].Sum(payload, payload)
	var textBuf [2 * oneTimeStackBytes]byte // holds the text of oneTimeStackBytes of payload
	text := append(textBuf[:0], oneTimePrefix...)
	return string(b64.AppendEncode(text, raw)), nil
}

// Verify authenticates token and returns its content without redeeming it:
// it neither consults nor changes the replay store, so it cannot tell
// whether the token was already redeemed; only [OneTimeIssuer.Redeem]
// decides that. Use it to look at a token's claims before deciding to
// redeem it (an exchange endpoint checks that the run is still active,
// then redeems).
//
// Checks, in order: length cap, format and base64, the key id (a key the
// ring does not hold: [Reason] is [observe.ReasonUnknownKey]), one MAC with
// the key it names (constant time), strict decoding, purpose, an issue time
// at most 60 s in the future → [ErrOneTimeInvalid]; expiry →
// [ErrOneTimeExpired]. On error the token is zero.
func (o *OneTimeIssuer) Verify(token string) (OneTimeToken, error) {
	var t oneTimeFields
	key, err := o.check(&t, token)
	if o.obs != nil && err != errOneTimeNoKey {
		observeErr(o.obs, observe.KindOneTime, key, err, 0)
	}
	if err != nil {
		return OneTimeToken{}, err
	}
	return OneTimeToken{Purpose: t.purpose, Claims: t.claims, IssuedAt: t.issued, ExpiresAt: t.expires}, nil
}

// Redeem accepts token exactly once, and only if it is authentic, of the
// issuer's purpose, unexpired and bound to exactly the claims in want (same
// names, same values; nil and empty are the same). It returns the token's
// verified claims (never nil on success; nil on error). Of any number of
// concurrent or later redeems of one token, at most one succeeds.
//
// Checks, in order: those of [OneTimeIssuer.Verify] ([ErrOneTimeInvalid],
// [ErrOneTimeExpired]); claims → [ErrOneTimeClaims]; then the token is claimed
// in the replay store until 60 s after its expiry (a margin for clock skew
// between instances and the store) → [ErrOneTimeRedeemed] if it was already
// claimed. A token refused for its claims or expiry is not consumed, so a
// thief presenting it with the wrong claims cannot burn it. A replay-store
// failure (for example [replay.ErrFull], or ctx's error) is returned
// wrapped (errors.Is finds it; [Reason] says "replay store failed"), and the
// token is refused and not consumed.
func (o *OneTimeIssuer) Redeem(ctx context.Context, token string, want map[string]string) (map[string]string, error) {
	claims, key, store, err := o.redeem(ctx, token, want)
	if o.obs != nil && err != errOneTimeNoKey {
		observeErr(o.obs, observe.KindOneTime, key, err, store)
	}
	return claims, err
}

// redeem is Redeem, also returning the index of the key that verified the
// token (-1 if none did) and, when an observer is set, how long the replay
// store took.
func (o *OneTimeIssuer) redeem(ctx context.Context, token string, want map[string]string) (map[string]string, int, time.Duration, error) {
	var t oneTimeFields
	key, err := o.check(&t, token)
	if err != nil {
		return nil, key, 0, err
	}
	if !claimsEqual(t.claims, want) {
		return nil, key, 0, errOneTimeClaims
	}
	var start time.Time
	if o.obs != nil {
		start = time.Now()
	}
	var id [len(oneTimeReplayPrefix) + 2*oneTimeNonceLen]byte
	copy(id[:], oneTimeReplayPrefix)
	hex.Encode(id[len(oneTimeReplayPrefix):], t.nonce[:])
	first, err := o.replay.Claim(ctx, string(id[:]), t.expires.Add(replay.SkewMargin))
	var took time.Duration
	if o.obs != nil {
		took = max(time.Since(start), 1) // a store was called: never 0
	}
	if err != nil {
		return nil, key, took, reason.Wrap(errOneTimeStore, "replay store failed", err)
	}
	if !first {
		return nil, key, took, errOneTimeRedeemed
	}
	return t.claims, key, took, nil
}

// check runs every check of Verify, filling t (left zero on error), and
// returns the index of the key whose MAC matched (-1 if none did).
func (o *OneTimeIssuer) check(t *oneTimeFields, token string) (int, error) {
	keys := o.ring()
	if len(keys.macs) == 0 || o.now == nil {
		return -1, errOneTimeNoKey
	}
	key, err := verifyOneTime(t, keys, token)
	if err == nil && t.purpose != o.purpose {
		err = errOneTimePurpose
	}
	if err == nil {
		switch now := o.now(); {
		case issuedInFuture(t.issued.Unix(), now, oneTimeMaxSkew):
			err = errOneTimeFuture
		case !now.Before(t.expires):
			err = errOneTimeExpired
		}
	}
	if err != nil {
		*t = oneTimeFields{}
	}
	return key, err
}

// Rejections, allocated once.
var (
	errOneTimeOversize   = reject(ErrOneTimeInvalid, "oversize")
	errOneTimeFormat     = reject(ErrOneTimeInvalid, "unknown format")
	errOneTimeBase64     = reject(ErrOneTimeInvalid, "bad base64")
	errOneTimeTruncated  = reject(ErrOneTimeInvalid, "truncated")
	errOneTimeMAC        = reject(ErrOneTimeInvalid, "mac mismatch")
	errOneTimeUnknownKey = reject(ErrOneTimeInvalid, "signed by a key not in the ring: retired or foreign")
	errOneTimeMalformed  = reject(ErrOneTimeInvalid, "malformed payload")
	errOneTimeFuture     = reject(ErrOneTimeInvalid, "issued in the future")
	errOneTimeExpired    = reject(ErrOneTimeExpired, "expired")
	errOneTimeClaims     = reject(ErrOneTimeClaims, "claims mismatch")
	errOneTimeRedeemed   = reject(ErrOneTimeRedeemed, "already redeemed")
	errOneTimePurpose    = reject(ErrOneTimeInvalid, "other purpose")
	errOneTimeTooLarge   = reject(ErrOneTimeTooLarge, "claims over MaxOneTimeTokenBytes")
	errOneTimeNoKey      = reject(ErrNoKey, "OneTimeIssuer not made by NewOneTimeIssuer")
	// errOneTimeStore is the text before a replay store's failure; the
	// error matches the store's error, not a one-time sentinel: the token
	// was not judged.
	errOneTimeStore = errors.New("ctoken: one-time token replay store")
)

// oneTimeFields is a decoded one-time payload.
type oneTimeFields struct {
	nonce           [oneTimeNonceLen]byte
	purpose         string
	issued, expires time.Time
	claims          map[string]string
}

// verifyOneTime authenticates token with the key of keys it names and
// decodes it into t without consulting the purpose, the clock or the replay
// store; t is meaningless on error. It also returns the index of that key
// when its MAC matched, or -1.
func verifyOneTime(t *oneTimeFields, keys namedMACs, token string) (int, error) {
	if len(token) > MaxOneTimeTokenBytes {
		return -1, errOneTimeOversize
	}
	body, ok := strings.CutPrefix(token, oneTimePrefix)
	if !ok {
		return -1, errOneTimeFormat
	}
	// The strict decoder refuses every second spelling of a token. A
	// token of usual size is decoded on the stack (a buffer for the
	// longest would cost its clearing on every call), and
	// decodeOneTimePayload copies out what it keeps.
	var small [oneTimeStackBytes]byte
	raw := small[:]
	if n := b64.DecodedLen(len(body)); n > len(small) {
		raw = make([]byte, n)
	}
	n, err := b64.Decode(raw, []byte(body))
	if err != nil {
		return -1, errOneTimeBase64
	}
	raw = raw[:n]
	if len(raw) < oneTimeFixedLen+macSize {
		return -1, errOneTimeTruncated
	}
	if raw[0] != oneTimeVersion {
		return -1, errOneTimeFormat
	}
	// The key id, at a fixed place, names the one key to try: one MAC
	// whatever the ring's size.
	key := keys.ids.index(raw[oneTimeKeyIDAt : oneTimeKeyIDAt+keyIDSize])
	if key < 0 {
		return -1, errOneTimeUnknownKey
	}
	payload, tag := raw[:len(raw)-macSize], raw[len(raw)-macSize:]
	if !keys.macs[key].Equal(payload, tag) {
		return -1, errOneTimeMAC
	}
	if !decodeOneTimePayload(t, payload) {
		return key, errOneTimeMalformed
	}
	return key, nil
}

// decodeOneTimePayload strictly decodes an authenticated payload (whose
// version and key id were checked): a purpose, claims in strictly increasing
// name order, minimal uvarints, no trailing bytes. It keeps nothing of p:
// the purpose, names and values share one string copied from it. t is
// meaningless when it returns false.
func decodeOneTimePayload(t *oneTimeFields, p []byte) bool {
	if len(p) < oneTimeFixedLen {
		return false
	}
	copy(t.nonce[:], p[oneTimeNonceAt:])
	t.issued = time.Unix(int64(binary.BigEndian.Uint64(p[oneTimeTimesAt:])), 0)
	t.expires = time.Unix(int64(binary.BigEndian.Uint64(p[oneTimeTimesAt+8:])), 0)
	purpose, claims, ok := cutLengthPrefixed(string(p[oneTimeFixedLen:]))
	if !ok {
		return false
	}
	n, ok := countClaims(claims)
	if !ok {
		return false
	}
	// The map is made for exactly n claims: no growth past 8. Every cut
	// below was checked by countClaims.
	t.purpose, t.claims = purpose, make(map[string]string, n)
	for len(claims) > 0 {
		name, r, _ := cutLengthPrefixed(claims)
		value, r, _ := cutLengthPrefixed(r)
		t.claims[name], claims = value, r
	}
	return true
}

// countClaims returns how many name-value pairs s holds, or false unless
// each is two length-prefixed strings (see cutLengthPrefixed), the names in
// strictly increasing order, with nothing after the last.
func countClaims(s string) (int, bool) {
	n, prev := 0, ""
	for len(s) > 0 {
		name, r, ok := cutLengthPrefixed(s)
		if !ok {
			return 0, false
		}
		if _, r, ok = cutLengthPrefixed(r); !ok || n > 0 && name <= prev {
			return 0, false
		}
		n, prev, s = n+1, name, r
	}
	return n, true
}

// cutLengthPrefixed splits a uvarint-length-prefixed string off s, both
// parts substrings of s. The uvarint must be minimally encoded (its last
// byte not zero, unless it is its only byte) and the length within s.
func cutLengthPrefixed(s string) (string, string, bool) {
	// The copy of at most 10 bytes stays on the stack.
	n, k := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
	if k <= 0 || k > 1 && s[k-1] == 0 || n > uint64(len(s)-k) {
		return "", "", false
	}
	return s[k : k+int(n)], s[k+int(n):], true
}

// claimsEqual reports whether a and b hold the same names and values.
func claimsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || va != vb {
			return false
		}
	}
	return true
}
