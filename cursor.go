package ctoken

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

const (
	// MaxCursorBytes caps the encoded length of a cursor. It is enforced when
	// issuing and checked before any decoding when verifying.
	MaxCursorBytes = 512
	// MaxOpaqueStateBytes caps the opaque state a cursor carries.
	MaxOpaqueStateBytes = 256
	// DefaultCursorTTL is the cursor lifetime when CursorConfig.TTL is 0.
	DefaultCursorTTL = 5 * time.Minute

	// MaxSessionBytes caps CursorConfig.Session.
	MaxSessionBytes = 64

	cursorVersion = 1
	// cursorKeyLabel is the HKDF info label of the cursor MAC subkey.
	cursorKeyLabel = "ctoken.cursor hmac-sha256 key"
	// maxFutureSkew is how far in the future IssuedAt may be (clock skew
	// within a fleet) before a cursor is refused.
	maxFutureSkew = 60 * time.Second
	// maxCursorRaw is the largest decoded cursor: MaxCursorBytes of base64.
	maxCursorRaw = MaxCursorBytes * 3 / 4
	sessionBytes = 8
)

// Fingerprint is a SHA-256 digest identifying a tool call's arguments; see
// ArgsFingerprint. The zero Fingerprint means "not bound".
type Fingerprint [32]byte

// IsZero reports whether f is the zero Fingerprint.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// CursorScope is what a cursor is bound to: the tool that issued it, the
// authenticated caller it was issued to, and optionally the fingerprint of
// the arguments of the call (a zero Args means not bound).
type CursorScope struct {
	ToolID, CallerID string
	Args             Fingerprint
}

// CursorPayload is the content of a cursor.
type CursorPayload struct {
	CursorScope
	// Page is the caller's position, e.g. a page index or offset.
	Page uint32
	// State is opaque application state, at most MaxOpaqueStateBytes.
	State []byte
	// IssuedAt is stamped by Issue (whole seconds); ignored on input.
	IssuedAt time.Time
}

// CursorConfig configures a CursorIssuer. Only Keys is required.
type CursorConfig struct {
	// Keys signs (primary) and verifies (all) cursors. Required.
	Keys *Keyring
	// TTL is the maximum cursor age: 0 means DefaultCursorTTL, negative
	// means no age limit.
	TTL time.Duration
	// Session names the server session cursors belong to. Empty means a
	// random 8-byte nonce minted per issuer, so a restart invalidates every
	// outstanding cursor (ErrCursorExpired). A fleet behind a load balancer
	// sets the same Session (and Keys) on every instance; changing it
	// revokes all outstanding cursors at once. At most MaxSessionBytes.
	Session []byte
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// CursorIssuer issues and verifies stateless HMAC-SHA256 pagination
// cursors. It is safe for concurrent use.
type CursorIssuer struct {
	macs    macRing
	ttl     time.Duration
	session []byte
	now     func() time.Time
	scratch sync.Pool // of *cursorScratch
}

// cursorScratch is the working memory of one Issue or Verify. It is pooled
// because the body is handed to a hash.Hash, which makes a stack buffer
// escape to the heap on every call.
type cursorScratch struct {
	raw  [maxCursorRaw]byte   // body || MAC
	text [MaxCursorBytes]byte // base64url text
}

// getScratch returns pooled working memory (fresh memory for an issuer
// not made by NewCursorIssuer, whose pool has no New function).
func (i *CursorIssuer) getScratch() *cursorScratch {
	if s, ok := i.scratch.Get().(*cursorScratch); ok {
		return s
	}
	return new(cursorScratch)
}

func mustEncMode(o cbor.EncOptions) cbor.EncMode {
	m, err := o.EncMode()
	if err != nil {
		panic(err)
	}
	return m
}

func mustDecMode(o cbor.DecOptions) cbor.DecMode {
	m, err := o.DecMode()
	if err != nil {
		panic(err)
	}
	return m
}

// NewCursorIssuer returns an issuer for cfg. It fails with ErrNoKey when
// cfg.Keys is nil or holds no key (a zero Keyring).
func NewCursorIssuer(cfg CursorConfig) (*CursorIssuer, error) {
	if cfg.Keys == nil || cfg.Keys.Len() == 0 {
		return nil, fmt.Errorf("%w: CursorConfig.Keys is nil or empty", ErrNoKey)
	}
	if len(cfg.Session) > MaxSessionBytes {
		return nil, fmt.Errorf("ctoken: CursorConfig.Session longer than %d bytes", MaxSessionBytes)
	}
	i := &CursorIssuer{
		macs: newMACRing(cfg.Keys, cursorKeyLabel),
		ttl:  cfg.TTL,
		now:  cfg.Now,
	}
	if i.ttl == 0 {
		i.ttl = DefaultCursorTTL
	}
	if i.now == nil {
		i.now = time.Now
	}
	if len(cfg.Session) > 0 {
		i.session = append([]byte(nil), cfg.Session...)
	} else {
		i.session = make([]byte, sessionBytes)
		rand.Read(i.session)
	}
	return i, nil
}

// Session returns a copy of the issuer's server session.
func (i *CursorIssuer) Session() []byte { return append([]byte(nil), i.session...) }

var errIDNotUTF8 = fmt.Errorf("%w: cursor tool or caller ID is not valid UTF-8", ErrUnencodable)

// Issue returns a cursor for p, stamped with the current time. It fails with
// ErrOpaqueStateTooLarge when p.State is over MaxOpaqueStateBytes and with
// ErrCursorTooLarge when the cursor would be over MaxCursorBytes. A ToolID
// or CallerID that is not valid UTF-8 (CBOR text) is an error too. An
// issuer not made by NewCursorIssuer has no key: Issue fails with ErrNoKey.
func (i *CursorIssuer) Issue(p CursorPayload) (string, error) {
	if len(i.macs) == 0 {
		return "", ErrNoKey
	}
	if len(p.State) > MaxOpaqueStateBytes {
		return "", ErrOpaqueStateTooLarge
	}
	if !utf8.ValidString(p.ToolID) || !utf8.ValidString(p.CallerID) {
		return "", errIDNotUTF8
	}
	b := cursorBody{
		version: cursorVersion,
		tool:    p.ToolID,
		caller:  p.CallerID,
		page:    p.Page,
		issued:  i.now().Unix(),
		session: i.session,
		state:   p.State,
	}
	if !p.Args.IsZero() {
		b.args = p.Args[:]
	}
	// The size is known before anything is encoded, so an oversize tool or
	// caller ID never reaches the fixed-size scratch buffer.
	n := cursorBodyLen(&b) + macSize
	if b64.EncodedLen(n) > MaxCursorBytes {
		return "", ErrCursorTooLarge
	}
	s := i.getScratch()
	raw := appendCursorBody(s.raw[:0], &b)
	raw = i.macs[0].sum(raw, raw)
	text := s.text[:b64.EncodedLen(n)]
	b64.Encode(text, raw)
	cursor := string(text)
	i.scratch.Put(s)
	return cursor, nil
}

// Rejections, allocated once.
var (
	errCursorEmpty      = reject(ErrCursorInvalid, "empty")
	errCursorOversize   = reject(ErrCursorInvalid, "over MaxCursorBytes")
	errCursorBase64     = reject(ErrCursorInvalid, "not base64url")
	errCursorTruncated  = reject(ErrCursorInvalid, "truncated")
	errCursorMAC        = reject(ErrCursorInvalid, "mac mismatch")
	errCursorMalformed  = reject(ErrCursorInvalid, "malformed or non-canonical payload")
	errCursorVersion    = reject(ErrCursorInvalid, "unknown version")
	errCursorArgsLength = reject(ErrCursorInvalid, "args fingerprint not 32 bytes")
	errCursorFuture     = reject(ErrCursorInvalid, "issued in the future")
	errCursorTool       = reject(ErrCursorInvalid, "wrong tool")
	errCursorCaller     = reject(ErrCursorInvalid, "wrong caller")
	errCursorArgs       = reject(ErrCursorInvalid, "wrong arguments")
	errCursorSession    = reject(ErrCursorExpired, "other server session")
	errCursorForeign    = reject(ErrCursorExpired, "other server session (unauthenticated)")
	errCursorAge        = reject(ErrCursorExpired, "older than TTL")
)

// Verify checks cursor and returns its payload. Checks run in this order:
// length cap, base64, MAC against each key of the ring (constant time),
// strict CBOR decode, session, age, scope. Tool and caller must equal want's;
// Args is compared when want.Args is non-zero.
//
// Errors match ErrCursorInvalid (forged, tampered, malformed, truncated,
// oversize, wrong scope, IssuedAt over 60 s ahead) or ErrCursorExpired (too
// old, or from another server session). On error the payload is zero.
func (i *CursorIssuer) Verify(cursor string, want CursorScope) (CursorPayload, error) {
	if len(cursor) == 0 {
		return CursorPayload{}, errCursorEmpty
	}
	if len(cursor) > MaxCursorBytes {
		return CursorPayload{}, errCursorOversize
	}
	s := i.getScratch()
	defer i.scratch.Put(s)
	// []byte(cursor) neither escapes nor is written to, so the compiler
	// converts it without copying or allocating.
	n, err := b64.Decode(s.raw[:], []byte(cursor))
	// The length check refuses the CR and LF that encoding/base64 skips
	// even in Strict mode: no second spelling of a cursor is accepted.
	if err != nil || b64.EncodedLen(n) != len(cursor) {
		return CursorPayload{}, errCursorBase64
	}
	if n <= macSize {
		return CursorPayload{}, errCursorTruncated
	}
	body, tag := s.raw[:n-macSize], s.raw[n-macSize:n]
	if i.macs.verify(body, tag) < 0 {
		// A classification hint only: nothing of an unauthenticated body
		// is ever returned.
		if f, ok := decodeCursorBody(body); ok && len(f.session) != 0 && !bytes.Equal(f.session, i.session) {
			return CursorPayload{}, errCursorForeign
		}
		return CursorPayload{}, errCursorMAC
	}
	// Exactly one encoding is accepted, the one Issue writes (see
	// cursor_cbor.go).
	f, ok := decodeCursorBody(body)
	if !ok {
		return CursorPayload{}, errCursorMalformed
	}
	if f.version != cursorVersion {
		return CursorPayload{}, errCursorVersion
	}
	if len(f.args) != 0 && len(f.args) != len(Fingerprint{}) {
		return CursorPayload{}, errCursorArgsLength
	}
	if subtle.ConstantTimeCompare(f.session, i.session) != 1 {
		return CursorPayload{}, errCursorSession
	}
	issued := time.Unix(f.issued, 0)
	now := i.now()
	if issued.Sub(now) > maxFutureSkew {
		return CursorPayload{}, errCursorFuture
	}
	if i.ttl > 0 && now.Sub(issued) > i.ttl {
		return CursorPayload{}, errCursorAge
	}
	var args Fingerprint
	copy(args[:], f.args)
	switch {
	case string(f.tool) != want.ToolID:
		return CursorPayload{}, errCursorTool
	case string(f.caller) != want.CallerID:
		return CursorPayload{}, errCursorCaller
	case !want.Args.IsZero() && subtle.ConstantTimeCompare(args[:], want.Args[:]) != 1:
		return CursorPayload{}, errCursorArgs
	}
	// Tool and caller equal want's, so want's strings are returned rather
	// than copies. State aliases the pooled scratch and is copied: the one
	// allocation of a successful Verify, and none when there is no state.
	var state []byte
	if len(f.state) > 0 {
		state = append(make([]byte, 0, len(f.state)), f.state...)
	}
	return CursorPayload{
		CursorScope: CursorScope{ToolID: want.ToolID, CallerID: want.CallerID, Args: args},
		Page:        f.page,
		State:       state,
		IssuedAt:    issued,
	}, nil
}

var (
	// stateEncMode is Core Deterministic Encoding, for IssueState's state;
	// appendCursorBody reproduces it byte for byte for the cursor body.
	stateEncMode = mustEncMode(cbor.CoreDetEncOptions())
	// stateDecMode decodes typed cursor state: strict, with room for
	// application structure.
	stateDecMode = mustDecMode(cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		MaxNestedLevels:   16,
		MaxArrayElements:  MaxOpaqueStateBytes,
		MaxMapPairs:       MaxOpaqueStateBytes,
		UTF8:              cbor.UTF8RejectInvalid,
	})
)

// IssueState issues a cursor whose opaque state is state encoded as
// deterministic CBOR.
func IssueState[T any](i *CursorIssuer, scope CursorScope, page uint32, state T) (string, error) {
	b, err := stateEncMode.Marshal(state)
	if err != nil {
		return "", fmt.Errorf("ctoken: encoding cursor state: %w", err)
	}
	return i.Issue(CursorPayload{CursorScope: scope, Page: page, State: b})
}

var errCursorStateType = reject(ErrCursorInvalid, "state does not decode into the requested type")

// VerifyState verifies cursor like Verify and decodes its opaque state into
// a T. A state that does not decode strictly into T is ErrCursorInvalid.
func VerifyState[T any](i *CursorIssuer, cursor string, want CursorScope) (T, CursorPayload, error) {
	var v T
	p, err := i.Verify(cursor, want)
	if err != nil {
		return v, CursorPayload{}, err
	}
	if err := stateDecMode.Unmarshal(p.State, &v); err != nil {
		var zero T
		return zero, CursorPayload{}, errCursorStateType
	}
	return v, p, nil
}
