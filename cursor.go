package ctoken

import (
	"bytes"
	"crypto/rand"
	"reflect"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/fxamacker/cbor/v2"
)

const (
	// MaxCursorBytes caps the encoded length of a cursor. It is enforced when
	// issuing and checked before any decoding when verifying.
	MaxCursorBytes = 512
	// MaxOpaqueStateBytes caps the opaque state a cursor carries.
	MaxOpaqueStateBytes = 256
	// DefaultCursorTTL is the cursor lifetime when [CursorConfig.TTL] is 0.
	DefaultCursorTTL = 5 * time.Minute

	// MaxSessionBytes caps [CursorConfig.Session].
	MaxSessionBytes = 64

	// cursorKeyLabel is the HKDF info label of the cursor MAC subkey.
	cursorKeyLabel = "ctoken.cursor hmac-sha256 key"
	// maxFutureSkew is how far in the future IssuedAt may be (clock skew
	// within a fleet) before a cursor is refused.
	maxFutureSkew = 60 * time.Second
	// maxCursorRaw is the largest decoded cursor: [MaxCursorBytes] of base64.
	maxCursorRaw = MaxCursorBytes * 3 / 4
	sessionBytes = 8
)

// Fingerprint is a SHA-256 digest identifying a tool call's arguments; see
// [ArgsFingerprint]. The zero [Fingerprint] means "not bound".
type Fingerprint [32]byte

// IsZero reports whether f is the zero [Fingerprint].
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// CursorScope is what a cursor is bound to: the operation or endpoint that
// issued it, the authenticated caller it was issued to, and optionally the
// fingerprint of the call's arguments (a zero Args means not bound).
type CursorScope struct {
	// ToolID is the operation or endpoint the cursor belongs to: an MCP
	// tool name, an RPC's full method name, or an HTTP route such as
	// "GET /v1/items". A cursor of another ToolID is refused. CallerID is
	// the authenticated caller the cursor was issued to.
	ToolID, CallerID string
	// Args is the fingerprint of the request's other parameters (filter,
	// order, parent; not the page size or the cursor), see [ArgsFingerprint].
	Args Fingerprint
}

// CursorPayload is the content of a cursor.
type CursorPayload struct {
	CursorScope
	// Page is the caller's position, e.g. a page index or offset.
	Page uint32
	// State is opaque application state, at most [MaxOpaqueStateBytes].
	State []byte
	// IssuedAt is stamped by Issue (whole seconds); ignored on input.
	IssuedAt time.Time
}

// CursorConfig configures a [CursorIssuer]. Only Keys is required.
type CursorConfig struct {
	// Keys signs (primary) and verifies (all) cursors. Exactly one of Keys
	// and KeySource is required: neither is [ErrNoKey], both is [ErrConfig].
	Keys *Keyring
	// KeySource, instead of Keys, supplies a ring that can be replaced while
	// the issuer runs ([KeySource.Swap]); each call uses the current ring.
	KeySource *KeySource
	// TTL is the maximum cursor age: 0 means [DefaultCursorTTL], negative
	// means no age limit.
	TTL time.Duration
	// Session names the server session cursors belong to. Nil means a
	// random 8-byte nonce minted per issuer, so a restart invalidates every
	// outstanding cursor ([ErrCursorExpired]). A fleet behind a load balancer
	// sets the same Session (and Keys) on every instance; changing it
	// revokes all outstanding cursors at once. At most [MaxSessionBytes]. A
	// non-nil empty Session (say, []byte of an unset environment variable)
	// is [ErrConfig] rather than a silent random session that would split
	// the fleet.
	Session []byte
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Observer, if set, is told of every Issue and Verify ([KindCursor]);
	// see [Observer]. Nil costs nothing.
	Observer Observer
}

// CursorIssuer issues and verifies stateless HMAC-SHA256 pagination
// cursors. It is safe for concurrent use. The zero value refuses every call
// with [ErrNoKey].
type CursorIssuer struct {
	macs    macRing            // static keys; nil when rot is set
	rot     *rotating[macRing] // keys from a KeySource
	obs     Observer
	ttl     time.Duration
	session []byte
	now     func() time.Time
	// scratch is a pointer so that a [CursorIssuer] value can be copied
	// (and printed, see redact.go) without copying a sync.Pool.
	scratch *sync.Pool // of *cursorScratch
}

// cursorScratch is the working memory of one Issue or Verify. It is pooled
// because the body is handed to a hash.Hash, which makes a stack buffer
// escape to the heap on every call.
type cursorScratch struct {
	raw  [maxCursorRaw]byte   // body || MAC
	text [MaxCursorBytes]byte // base64url text
}

// getScratch returns pooled working memory.
func (i *CursorIssuer) getScratch() *cursorScratch {
	if i.scratch != nil {
		if s, ok := i.scratch.Get().(*cursorScratch); ok {
			return s
		}
	}
	return new(cursorScratch)
}

// putScratch returns s to the pool.
func (i *CursorIssuer) putScratch(s *cursorScratch) {
	if i.scratch != nil {
		i.scratch.Put(s)
	}
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

// NewCursorIssuer returns an issuer for cfg. It fails with [ErrNoKey] when
// cfg.Keys is nil or holds no key (a zero [Keyring]), and with [ErrConfig] when
// cfg.Session is longer than [MaxSessionBytes] or empty but not nil. Every TTL is valid: 0 means
// [DefaultCursorTTL] and a negative TTL means no age limit.
func NewCursorIssuer(cfg CursorConfig) (*CursorIssuer, error) {
	if err := keysFrom(cfg.Keys, cfg.KeySource, "CursorConfig"); err != nil {
		return nil, err
	}
	if len(cfg.Session) > MaxSessionBytes {
		return nil, configError("CursorConfig.Session is longer than MaxSessionBytes")
	}
	if cfg.Session != nil && len(cfg.Session) == 0 {
		return nil, configError("CursorConfig.Session is empty but not nil (nil means a random per-issuer session)")
	}
	i := &CursorIssuer{
		ttl:     cfg.TTL,
		now:     cfg.Now,
		obs:     cfg.Observer,
		scratch: new(sync.Pool),
	}
	if cfg.KeySource != nil {
		var ok bool
		if i.rot, ok = newRotating(cfg.KeySource, deriveCursorMACs); !ok {
			return nil, reject(ErrNoKey, "CursorConfig.KeySource: a key cannot be derived from")
		}
	} else if i.macs, _ = deriveCursorMACs(cfg.Keys); i.macs == nil {
		return nil, reject(ErrNoKey, "CursorConfig.Keys: a key cannot be derived from")
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

// deriveCursorMACs returns the cursor MAC subkeys of kr, or false.
func deriveCursorMACs(kr *Keyring) (macRing, bool) { return deriveMACRing(kr, cursorKeyLabel) }

// ring returns the MAC subkeys in use now (empty for the zero value).
func (i *CursorIssuer) ring() macRing {
	if i.rot != nil {
		return i.rot.get()
	}
	return i.macs
}

// Session returns a copy of the issuer's server session (empty for the
// zero value).
func (i *CursorIssuer) Session() []byte { return append([]byte(nil), i.session...) }

// Issue's refusals, allocated once.
var (
	errCursorNoKey      = reject(ErrNoKey, "CursorIssuer not made by NewCursorIssuer")
	errIDNotUTF8        = reject(ErrUnencodable, "cursor tool or caller ID is not valid UTF-8")
	errCursorStateLarge = reject(ErrOpaqueStateTooLarge, "state over MaxOpaqueStateBytes")
	errCursorLarge      = reject(ErrCursorTooLarge, "cursor over MaxCursorBytes")
)

// Issue returns a cursor for p, stamped with the current time. It fails with
// [ErrOpaqueStateTooLarge] when p.State is over [MaxOpaqueStateBytes] and with
// [ErrCursorTooLarge] when the cursor would be over [MaxCursorBytes]. A ToolID
// or CallerID that is not valid UTF-8 (CBOR text) is an error too. An
// issuer not made by [NewCursorIssuer] has no key: Issue fails with [ErrNoKey].
// Every error carries a [Reason].
func (i *CursorIssuer) Issue(p CursorPayload) (string, error) {
	c, err := i.issue(p)
	if i.obs != nil && err != errCursorNoKey {
		observeIssue(i.obs, KindCursor, err)
	}
	return c, err
}

func (i *CursorIssuer) issue(p CursorPayload) (string, error) {
	macs := i.ring()
	if len(macs) == 0 {
		return "", errCursorNoKey
	}
	if len(p.State) > MaxOpaqueStateBytes {
		return "", errCursorStateLarge
	}
	if !utf8.ValidString(p.ToolID) || !utf8.ValidString(p.CallerID) {
		return "", errIDNotUTF8
	}
	b := cursorwire.Body{
		Version: cursorwire.Version,
		Tool:    p.ToolID,
		Caller:  p.CallerID,
		Page:    p.Page,
		Issued:  i.now().Unix(),
		Session: i.session,
		State:   p.State,
	}
	if !p.Args.IsZero() {
		b.Args = p.Args[:]
	}
	// The size is known before anything is encoded, so an oversize tool or
	// caller ID never reaches the fixed-size scratch buffer.
	n := cursorwire.BodyLen(&b) + macSize
	if b64.EncodedLen(n) > MaxCursorBytes {
		return "", errCursorLarge
	}
	s := i.getScratch()
	raw := cursorwire.AppendBody(s.raw[:0], &b)
	raw = macs[0].Sum(raw, raw)
	text := s.text[:b64.EncodedLen(n)]
	b64.Encode(text, raw)
	cursor := string(text)
	i.putScratch(s)
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
	errCursorForeign    = reject(ErrCursorExpired, "mac mismatch (other session)")
	errCursorAge        = reject(ErrCursorExpired, "older than TTL")
)

// Verify checks cursor and returns its payload. Checks run in this order:
// length cap, base64, MAC against each key of the ring (constant time),
// strict CBOR decode, session, age, scope. Tool and caller must equal want's;
// Args is compared when want.Args is non-zero.
//
// Errors match [ErrCursorInvalid] (forged, tampered, malformed, truncated,
// oversize, wrong scope, IssuedAt over 60 s ahead) or [ErrCursorExpired] (too
// old, or from another server session), and always carry a [Reason]; an
// issuer not made by [NewCursorIssuer] refuses every cursor with [ErrNoKey]. On
// error the payload is zero.
//
// A trade-off: a cursor whose MAC fails but whose body decodes and names
// another non-empty session is reported as [ErrCursorExpired] (1020, "start
// over"), because that is what a cursor from before a restart or a session
// change looks like, and a client told 1021 would not recover. Its [Reason] is
// "mac mismatch (other session)" — not "other server session", which only
// authentic cursors get — so server-side alerting can count it with the
// other MAC failures as possible tampering. Nothing of the unauthenticated
// body is returned, and a forged body with an empty session is
// [ErrCursorInvalid].
//
// The config's [Observer], if any, is told of the outcome: [OutcomeVerified]
// with the [KeyPosition] of the key that matched, or [OutcomeRefused] with
// the [RefusalReason].
func (i *CursorIssuer) Verify(cursor string, want CursorScope) (CursorPayload, error) {
	macs := i.ring()
	if len(macs) == 0 {
		return CursorPayload{}, errCursorNoKey
	}
	if len(cursor) == 0 {
		return i.refuse(-1, errCursorEmpty)
	}
	if len(cursor) > MaxCursorBytes {
		return i.refuse(-1, errCursorOversize)
	}
	s := i.getScratch()
	defer i.putScratch(s)
	// []byte(cursor) neither escapes nor is written to, so the compiler
	// converts it without copying or allocating.
	// The strict decoder refuses every second spelling of a cursor.
	n, err := b64.Decode(s.raw[:], []byte(cursor))
	if err != nil {
		return i.refuse(-1, errCursorBase64)
	}
	if n <= macSize {
		return i.refuse(-1, errCursorTruncated)
	}
	body, tag := s.raw[:n-macSize], s.raw[n-macSize:n]
	key := macs.verify(body, tag)
	if key < 0 {
		// A classification hint only: nothing of an unauthenticated body
		// is ever returned.
		if f, ok := cursorwire.DecodeBody(body); ok && len(f.Session) != 0 && !bytes.Equal(f.Session, i.session) {
			return i.refuse(-1, errCursorForeign)
		}
		return i.refuse(-1, errCursorMAC)
	}
	// Exactly one encoding is accepted, the one Issue writes (see
	// internal/cursorwire).
	f, ok := cursorwire.DecodeBody(body)
	if !ok {
		return i.refuse(key, errCursorMalformed)
	}
	if f.Version != cursorwire.Version {
		return i.refuse(key, errCursorVersion)
	}
	if len(f.Args) != 0 && len(f.Args) != len(Fingerprint{}) {
		return i.refuse(key, errCursorArgsLength)
	}
	if !equalSecret(f.Session, i.session) {
		return i.refuse(key, errCursorSession)
	}
	issued := time.Unix(f.Issued, 0)
	now := i.now()
	if issued.Sub(now) > maxFutureSkew {
		return i.refuse(key, errCursorFuture)
	}
	if i.ttl > 0 && now.Sub(issued) > i.ttl {
		return i.refuse(key, errCursorAge)
	}
	var args Fingerprint
	copy(args[:], f.Args)
	switch {
	case string(f.Tool) != want.ToolID:
		return i.refuse(key, errCursorTool)
	case string(f.Caller) != want.CallerID:
		return i.refuse(key, errCursorCaller)
	case !want.Args.IsZero() && !equalSecret(args[:], want.Args[:]):
		return i.refuse(key, errCursorArgs)
	}
	// Tool and caller equal want's, so want's strings are returned rather
	// than copies. State aliases the pooled scratch and is copied: the one
	// allocation of a successful Verify, and none when there is no state.
	var state []byte
	if len(f.State) > 0 {
		state = append(make([]byte, 0, len(f.State)), f.State...)
	}
	if i.obs != nil {
		observeErr(i.obs, KindCursor, key, nil, 0)
	}
	return CursorPayload{
		CursorScope: CursorScope{ToolID: want.ToolID, CallerID: want.CallerID, Args: args},
		Page:        f.Page,
		State:       state,
		IssuedAt:    issued,
	}, nil
}

// refuse reports a refusal of Verify (key is the index of the key whose
// MAC matched, or -1) to the observer, if any, and returns it.
func (i *CursorIssuer) refuse(key int, err error) (CursorPayload, error) {
	if i.obs != nil {
		observeErr(i.obs, KindCursor, key, err, 0)
	}
	return CursorPayload{}, err
}

var (
	// stateEncMode is Core Deterministic Encoding, for [IssueState]'s state;
	// cursorwire.AppendBody reproduces it byte for byte for the cursor body
	// (which holds no time.Time). A time.Time is RFC 3339 text in UTC to the
	// nanosecond: CBOR's default, whole Unix seconds, truncated a sort key
	// such as a row's creation time, and a keyset listing resumed from the
	// truncated time served rows twice (ascending) or skipped them
	// (descending). stateDecMode reads both forms.
	stateEncMode = mustEncMode(func() cbor.EncOptions {
		o := cbor.CoreDetEncOptions()
		o.Time = cbor.TimeRFC3339NanoUTC
		return o
	}())
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
// deterministic CBOR, a time.Time as RFC 3339 text in UTC to the
// nanosecond (so a timestamp comes back to the nanosecond, in UTC).
func IssueState[T any](i *CursorIssuer, scope CursorScope, page uint32, state T) (string, error) {
	b, err := encodeState(state)
	if err != nil {
		return "", err
	}
	return i.Issue(CursorPayload{CursorScope: scope, Page: page, State: b})
}

// encodeState encodes the typed state of [IssueState] and [IssueKeyset].
// A state whose type can hold a time.Time (or an interface) is decoded
// back into a T first: RFC 3339 text
// has four-digit years, so a time before year 0 or after 9999 encodes to
// text that does not decode, and is refused here ([ErrUnencodable]) rather
// than issued in a cursor that would never verify.
func encodeState[T any](state T) ([]byte, error) {
	b, err := stateEncMode.Marshal(state)
	if err == nil && mayHoldTime(reflect.TypeFor[T](), 0) {
		var back T
		err = stateDecMode.Unmarshal(b, &back)
	}
	if err != nil {
		return nil, reason.Wrap(ErrUnencodable, "state does not encode as CBOR", err)
	}
	return b, nil
}

var timeType = reflect.TypeFor[time.Time]()

// mayHoldTime reports whether a value of type t can hold a time.Time; past
// a nesting of 8 (a recursive type) it says yes.
func mayHoldTime(t reflect.Type, depth int) bool {
	if depth > 8 || t == timeType {
		return true
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return mayHoldTime(t.Elem(), depth+1)
	case reflect.Map:
		return mayHoldTime(t.Key(), depth+1) || mayHoldTime(t.Elem(), depth+1)
	case reflect.Struct:
		for i := range t.NumField() {
			if mayHoldTime(t.Field(i).Type, depth+1) {
				return true
			}
		}
	}
	return false
}

var errCursorStateType = reject(ErrCursorInvalid, "state does not decode into the requested type")

// VerifyState verifies cursor like Verify and decodes its opaque state into
// a T. A state that does not decode strictly into T is [ErrCursorInvalid].
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
