package ctoken

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// One-time token limits and defaults.
const (
	// DefaultOneTimeTTL is the lifetime of a one-time token when
	// OneTimeConfig.TTL is zero or negative.
	DefaultOneTimeTTL = 10 * time.Minute
	// MaxOneTimeTokenBytes caps the encoded token, checked at mint and
	// before any decoding at redeem.
	MaxOneTimeTokenBytes = 1024
)

const (
	oneTimePrefix   = "ot1."
	oneTimeVersion  = 1
	oneTimeNonceLen = 16
	// version, nonce, issued-at, expiry
	oneTimeFixedLen = 1 + oneTimeNonceLen + 8 + 8
	oneTimeLabel    = "ctoken.onetime hmac key"
	// oneTimeMaxSkew is how far in the future an issue time may lie
	// (another instance's clock) before the token is refused.
	oneTimeMaxSkew = 60 * time.Second
)

// One-time token errors (errors.Is). Redeem returns exactly one of the first
// four for a refused token, or a wrapped replay-store error.
var (
	// ErrOneTimeInvalid reports a forged, tampered, truncated, malformed or
	// oversize token, or one from an unknown key. Nothing in it is trusted.
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
	// MaxOneTimeTokenBytes, at mint.
	ErrOneTimeTooLarge = errors.New("ctoken: one-time token claims too large")
)

// OneTimeConfig configures a OneTimeIssuer. Only Keys is required.
type OneTimeConfig struct {
	// Keys signs (primary) and verifies (every key) tokens, through a subkey
	// derived with the label "ctoken.onetime hmac key".
	Keys *Keyring
	// TTL is a token's lifetime; zero or negative means DefaultOneTimeTTL.
	TTL time.Duration
	// Replay records redeemed tokens until 60 s after they expire. Nil means a private
	// MemoryReplayStore with DefaultReplayStoreMax entries, which enforces
	// single use within one process only; a fleet shares one store.
	Replay ReplayStore
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// OneTimeIssuer mints short-lived, HMAC-signed tokens bound to named claims
// (for example agent, company and run IDs) and redeems each at most once. A
// remote agent can exchange such a token for a run-scoped credential: a
// stolen token that was already used is worthless, an unused one works only
// for the claims it names and only until it expires.
//
// Wire format: "ot1." + base64url_nopad(payload || HMAC-SHA256(subkey,
// payload)), payload = version byte 1, 16-byte random nonce, issued-at and
// expiry as big-endian int64 unix seconds, then each claim in increasing
// name order as uvarint(len(name)) name uvarint(len(value)) value. The nonce
// is the token's ID in the replay store.
//
// A OneTimeIssuer is safe for concurrent use.
type OneTimeIssuer struct {
	macs   macRing // derived subkeys, primary first
	ttl    time.Duration
	replay ReplayStore
	now    func() time.Time
}

// NewOneTimeIssuer returns an issuer for cfg, or ErrNoKey when cfg.Keys is nil.
func NewOneTimeIssuer(cfg OneTimeConfig) (*OneTimeIssuer, error) {
	if cfg.Keys == nil || cfg.Keys.Len() == 0 {
		return nil, fmt.Errorf("%w: one-time tokens need a Keyring", ErrNoKey)
	}
	o := &OneTimeIssuer{
		macs:   newMACRing(cfg.Keys, oneTimeLabel),
		ttl:    cfg.TTL,
		replay: cfg.Replay,
		now:    cfg.Now,
	}
	if o.ttl <= 0 {
		o.ttl = DefaultOneTimeTTL
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.replay == nil {
		o.replay = &MemoryReplayStore{Now: o.now}
	}
	return o, nil
}

// Mint returns a new token bound to claims (which may be empty), valid for
// the configured TTL from now. Claim names and values are arbitrary byte
// strings; the token carries them in the clear (signed, not encrypted), so
// they must not be secret. It fails with ErrOneTimeTooLarge when the token
// would exceed MaxOneTimeTokenBytes, and with ErrNoKey on an issuer not made
// by NewOneTimeIssuer.
func (o *OneTimeIssuer) Mint(claims map[string]string) (string, error) {
	if len(o.macs) == 0 || o.now == nil {
		return "", fmt.Errorf("%w: OneTimeIssuer not made by NewOneTimeIssuer", ErrNoKey)
	}
	now := o.now()
	payload := make([]byte, oneTimeFixedLen, 128)
	payload[0] = oneTimeVersion
	rand.Read(payload[1 : 1+oneTimeNonceLen]) // never fails
	binary.BigEndian.PutUint64(payload[1+oneTimeNonceLen:], uint64(now.Unix()))
	binary.BigEndian.PutUint64(payload[1+oneTimeNonceLen+8:], uint64(now.Add(o.ttl).Unix()))
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		value := claims[name]
		if len(name)+len(value) > MaxOneTimeTokenBytes {
			return "", ErrOneTimeTooLarge
		}
		payload = binary.AppendUvarint(payload, uint64(len(name)))
		payload = append(payload, name...)
		payload = binary.AppendUvarint(payload, uint64(len(value)))
		payload = append(payload, value...)
	}
	raw := o.macs[0].sum(payload, payload)
	if len(oneTimePrefix)+b64.EncodedLen(len(raw)) > MaxOneTimeTokenBytes {
		return "", ErrOneTimeTooLarge
	}
	return oneTimePrefix + b64.EncodeToString(raw), nil
}

// Redeem accepts token exactly once, and only if it is authentic, unexpired
// and bound to exactly the claims in want (same names, same values; nil and
// empty are the same). Of any number of concurrent or later redeems of one
// token, at most one returns nil.
//
// Checks, in order: length cap, format and base64, MAC against every key of
// the ring (constant time) and strict decoding → ErrOneTimeInvalid (also for
// an issue time more than 60 s in the future); expiry → ErrOneTimeExpired;
// claims → ErrOneTimeClaims; then the token is claimed in the replay store
// until 60 s after its expiry (a margin for clock skew between instances
// and the store) → ErrOneTimeRedeemed if it was already claimed. A token
// refused for its claims or expiry is not consumed, so a thief presenting it
// with the wrong claims cannot burn it. A replay-store failure (for example
// ErrReplayStoreFull, or ctx's error) is returned wrapped, and the token is
// refused.
func (o *OneTimeIssuer) Redeem(ctx context.Context, token string, want map[string]string) error {
	t, err := o.verify(token)
	if err != nil {
		return err
	}
	now := o.now()
	if !now.Before(t.expires) {
		return errOneTimeExpired
	}
	if t.issued.After(now.Add(oneTimeMaxSkew)) {
		return errOneTimeFuture
	}
	if !claimsEqual(t.claims, want) {
		return errOneTimeClaims
	}
	first, err := o.replay.Claim(ctx, "onetime:"+hex.EncodeToString(t.nonce), t.expires.Add(replaySkewMargin))
	if err != nil {
		return fmt.Errorf("ctoken: one-time token replay store: %w", err)
	}
	if !first {
		return errOneTimeRedeemed
	}
	return nil
}

// Rejections, allocated once.
var (
	errOneTimeOversize  = reject(ErrOneTimeInvalid, "oversize")
	errOneTimeFormat    = reject(ErrOneTimeInvalid, "unknown format")
	errOneTimeBase64    = reject(ErrOneTimeInvalid, "bad base64")
	errOneTimeTruncated = reject(ErrOneTimeInvalid, "truncated")
	errOneTimeMAC       = reject(ErrOneTimeInvalid, "mac mismatch")
	errOneTimeMalformed = reject(ErrOneTimeInvalid, "malformed payload")
	errOneTimeFuture    = reject(ErrOneTimeInvalid, "issued in the future")
	errOneTimeExpired   = reject(ErrOneTimeExpired, "expired")
	errOneTimeClaims    = reject(ErrOneTimeClaims, "claims mismatch")
	errOneTimeRedeemed  = reject(ErrOneTimeRedeemed, "already redeemed")
)

type oneTimeToken struct {
	nonce           []byte
	issued, expires time.Time
	claims          map[string]string
}

// verify authenticates and decodes token without consulting the clock or
// the replay store.
func (o *OneTimeIssuer) verify(token string) (oneTimeToken, error) {
	var t oneTimeToken
	if len(token) > MaxOneTimeTokenBytes {
		return t, errOneTimeOversize
	}
	body, ok := strings.CutPrefix(token, oneTimePrefix)
	if !ok {
		return t, errOneTimeFormat
	}
	raw, err := b64.DecodeString(body)
	// The length check refuses the CR and LF that encoding/base64 skips
	// even in Strict mode, so every token has one spelling.
	if err != nil || b64.EncodedLen(len(raw)) != len(body) {
		return t, errOneTimeBase64
	}
	if len(raw) < oneTimeFixedLen+macSize {
		return t, errOneTimeTruncated
	}
	payload, tag := raw[:len(raw)-macSize], raw[len(raw)-macSize:]
	if o.macs.verify(payload, tag) < 0 {
		return t, errOneTimeMAC
	}
	if t, ok = decodeOneTimePayload(payload); !ok {
		return oneTimeToken{}, errOneTimeMalformed
	}
	return t, nil
}

// decodeOneTimePayload strictly decodes an authenticated payload: version 1,
// claims in strictly increasing name order, no trailing bytes.
func decodeOneTimePayload(p []byte) (oneTimeToken, bool) {
	var t oneTimeToken
	if len(p) < oneTimeFixedLen || p[0] != oneTimeVersion {
		return t, false
	}
	t.nonce = p[1 : 1+oneTimeNonceLen]
	t.issued = time.Unix(int64(binary.BigEndian.Uint64(p[1+oneTimeNonceLen:])), 0)
	t.expires = time.Unix(int64(binary.BigEndian.Uint64(p[1+oneTimeNonceLen+8:])), 0)
	rest := p[oneTimeFixedLen:]
	t.claims = map[string]string{}
	prev := ""
	for len(rest) > 0 {
		name, r, ok := cutLengthPrefixed(rest)
		if !ok {
			return t, false
		}
		value, r, ok := cutLengthPrefixed(r)
		if !ok {
			return t, false
		}
		if len(t.claims) > 0 && name <= prev {
			return t, false
		}
		t.claims[name], prev, rest = value, name, r
	}
	return t, true
}

// cutLengthPrefixed splits a uvarint-length-prefixed string off b. The
// uvarint must be minimally encoded and the length within b.
func cutLengthPrefixed(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || k != len(binary.AppendUvarint(nil, n)) || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
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
