package ctoken

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
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
}

// cursorWire is the CBOR payload: a map with small integer keys.
type cursorWire struct {
	Version  uint   `cbor:"1,keyasint"`
	Tool     string `cbor:"2,keyasint"`
	Caller   string `cbor:"3,keyasint"`
	Args     []byte `cbor:"4,keyasint,omitempty"`
	Page     uint32 `cbor:"5,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
	State    []byte `cbor:"8,keyasint,omitempty"`
}

var (
	cursorEncMode = mustEncMode(cbor.CoreDetEncOptions())
	// cursorDecMode refuses anything the encoder never writes.
	cursorDecMode = mustDecMode(cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		MaxNestedLevels:   4,
		MaxArrayElements:  16,
		MaxMapPairs:       16,
		UTF8:              cbor.UTF8RejectInvalid,
	})
)

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
// cfg.Keys is nil.
func NewCursorIssuer(cfg CursorConfig) (*CursorIssuer, error) {
	if cfg.Keys == nil {
		return nil, fmt.Errorf("%w: CursorConfig.Keys is nil", ErrNoKey)
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

var errIDNotUTF8 = errors.New("ctoken: cursor tool or caller ID is not valid UTF-8")

// Issue returns a cursor for p, stamped with the current time. It fails with
// ErrOpaqueStateTooLarge when p.State is over MaxOpaqueStateBytes and with
// ErrCursorTooLarge when the cursor would be over MaxCursorBytes.
func (i *CursorIssuer) Issue(p CursorPayload) (string, error) {
	if len(p.State) > MaxOpaqueStateBytes {
		return "", ErrOpaqueStateTooLarge
	}
	if !utf8.ValidString(p.ToolID) || !utf8.ValidString(p.CallerID) {
		return "", errIDNotUTF8
	}
	w := cursorWire{
		Version:  cursorVersion,
		Tool:     p.ToolID,
		Caller:   p.CallerID,
		Page:     p.Page,
		IssuedAt: i.now().Unix(),
		Session:  i.session,
		State:    p.State,
	}
	if !p.Args.IsZero() {
		w.Args = p.Args[:]
	}
	body, err := cursorEncMode.Marshal(&w)
	if err != nil {
		return "", fmt.Errorf("ctoken: encoding cursor: %w", err)
	}
	if b64.EncodedLen(len(body)+macSize) > MaxCursorBytes {
		return "", ErrCursorTooLarge
	}
	raw := i.macs[0].sum(body, body)
	return b64.EncodeToString(raw), nil
}

// Rejections, allocated once.
var (
	errCursorEmpty     = reject(ErrCursorInvalid, "empty")
	errCursorOversize  = reject(ErrCursorInvalid, "over MaxCursorBytes")
	errCursorBase64    = reject(ErrCursorInvalid, "not base64url")
	errCursorTruncated = reject(ErrCursorInvalid, "truncated")
	errCursorMAC       = reject(ErrCursorInvalid, "mac mismatch")
	errCursorMalformed = reject(ErrCursorInvalid, "malformed payload")
	errCursorVersion   = reject(ErrCursorInvalid, "unknown version")
	errCursorFuture    = reject(ErrCursorInvalid, "issued in the future")
	errCursorTool      = reject(ErrCursorInvalid, "wrong tool")
	errCursorCaller    = reject(ErrCursorInvalid, "wrong caller")
	errCursorArgs      = reject(ErrCursorInvalid, "wrong arguments")
	errCursorSession   = reject(ErrCursorExpired, "other server session")
	errCursorForeign   = reject(ErrCursorExpired, "other server session (unauthenticated)")
	errCursorAge       = reject(ErrCursorExpired, "older than TTL")
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
	var buf [maxCursorRaw]byte
	n, err := b64.Decode(buf[:], []byte(cursor))
	if err != nil {
		return CursorPayload{}, errCursorBase64
	}
	if n <= macSize {
		return CursorPayload{}, errCursorTruncated
	}
	body, tag := buf[:n-macSize], buf[n-macSize:n]
	var w cursorWire
	if i.macs.verify(body, tag) < 0 {
		// A classification hint only: nothing of an unauthenticated body
		// is ever returned.
		if cursorDecMode.Unmarshal(body, &w) == nil && !bytes.Equal(w.Session, i.session) {
			return CursorPayload{}, errCursorForeign
		}
		return CursorPayload{}, errCursorMAC
	}
	if cursorDecMode.Unmarshal(body, &w) != nil {
		return CursorPayload{}, errCursorMalformed
	}
	if w.Version != cursorVersion || (len(w.Args) != 0 && len(w.Args) != len(Fingerprint{})) {
		return CursorPayload{}, errCursorVersion
	}
	if subtle.ConstantTimeCompare(w.Session, i.session) != 1 {
		return CursorPayload{}, errCursorSession
	}
	issued := time.Unix(w.IssuedAt, 0)
	now := i.now()
	if issued.Sub(now) > maxFutureSkew {
		return CursorPayload{}, errCursorFuture
	}
	if i.ttl > 0 && now.Sub(issued) > i.ttl {
		return CursorPayload{}, errCursorAge
	}
	var args Fingerprint
	copy(args[:], w.Args)
	switch {
	case w.Tool != want.ToolID:
		return CursorPayload{}, errCursorTool
	case w.Caller != want.CallerID:
		return CursorPayload{}, errCursorCaller
	case !want.Args.IsZero() && subtle.ConstantTimeCompare(args[:], want.Args[:]) != 1:
		return CursorPayload{}, errCursorArgs
	}
	return CursorPayload{
		CursorScope: CursorScope{ToolID: w.Tool, CallerID: w.Caller, Args: args},
		Page:        w.Page,
		State:       w.State,
		IssuedAt:    issued,
	}, nil
}

var (
	stateEncMode = cursorEncMode
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
