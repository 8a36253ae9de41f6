package ctoken

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
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
	// cursorSealLabel is the HKDF info label of the AES-256-GCM subkey of
	// sealed cursors.
	cursorSealLabel = "ctoken.cursor aes-256-gcm key"
	// cursorSessionTagLabel prefixes the session in the SHA-256 input of
	// the session tag of version 2 and sealed cursors. The tag is not
	// keyed, so that a cursor MACed under another key is still classified
	// by its session.
	cursorSessionTagLabel = "ctoken.cursor session tag\x00"
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
	// Observer, if set, is told of every Issue and Verify ([observe.KindCursor]);
	// see [observe.Observer]. Nil costs nothing.
	Observer observe.Observer
	// Seal, when true, issues sealed cursors (format version 3): AES-256-GCM
	// under a subkey of each key, a random 96-bit nonce per cursor, so the
	// page and the opaque state are unreadable too; only the version, the
	// issue time and the session tag stay in clear (authenticated as
	// additional data with the scope). When false, cursors are signed
	// (version 2): the page and the state are readable; the scope is bound
	// inside the MAC and not carried at all. Either way the issuer
	// verifies both kinds (and version 1 until it is removed), so the
	// switch can be flipped on a running fleet. A
	// sealed cursor bound to another scope does not open: it is refused as
	// [ErrCursorInvalid] ("sealed cursor does not open"), not told apart from
	// a forgery.
	Seal bool
}

// CursorIssuer issues and verifies stateless HMAC-SHA256 pagination
// cursors. It is safe for concurrent use. The zero value refuses every call
// with [ErrNoKey].
type CursorIssuer struct {
	keys    cursorKeys            // static keys; zero when rot is set
	rot     *rotating[cursorKeys] // keys from a KeySource
	seal    bool
	sessTag [cursorwire.SessionTagSize]byte
	budget  int
	obs     observe.Observer
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
	raw  [maxCursorRaw]byte   // body || MAC, or header || nonce || sealed
	text [MaxCursorBytes]byte // base64url text
	pt   [maxCursorRaw]byte   // plaintext of a sealed cursor
	aad  []byte               // header || scope of a sealed cursor
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
	if cap(s.aad) > 4<<10 {
		s.aad = nil // a long caller ID is not kept alive by the pool
	}
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
		if i.rot, ok = newRotating(cfg.KeySource, deriveCursorKeys); !ok {
			return nil, reject(ErrNoKey, "CursorConfig.KeySource: a key cannot be derived from")
		}
	} else if i.keys, _ = deriveCursorKeys(cfg.Keys); i.keys.macs == nil {
		return nil, reject(ErrNoKey, "CursorConfig.Keys: a key cannot be derived from")
	}
	i.seal = cfg.Seal
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
	i.sessTag = cursorSessionTag(i.session)
	i.budget = i.stateBudget()
	return i, nil
}

// cursorSessionTag returns the session tag of version 2 and sealed cursors:
// the first 8 bytes of SHA-256(label || session), so that a session of any
// length up to [MaxSessionBytes] costs 8 bytes of a cursor.
func cursorSessionTag(session []byte) (tag [cursorwire.SessionTagSize]byte) {
	h := sha256.New()
	h.Write([]byte(cursorSessionTagLabel))
	h.Write(session)
	copy(tag[:], h.Sum(nil))
	return tag
}

// cursorKeys are the subkeys of every key of a ring a cursor issuer uses,
// primary first.
type cursorKeys struct {
	macs  macRing  // the MAC of version 1 bodies and of version 2 body || scope
	aeads aeadRing // sealed cursors
}

// deriveCursorKeys returns the cursor subkeys of kr, or false.
func deriveCursorKeys(kr *Keyring) (cursorKeys, bool) {
	macs, ok := deriveMACRing(kr, cursorKeyLabel)
	if !ok {
		return cursorKeys{}, false
	}
	aeads, err := newAEADRing(kr, cursorSealLabel)
	if err != nil || len(aeads) != len(macs) {
		return cursorKeys{}, false
	}
	return cursorKeys{macs: macs, aeads: aeads}, true
}

// ring returns the subkeys in use now (empty for the zero value).
func (i *CursorIssuer) ring() cursorKeys {
	if i.rot != nil {
		return i.rot.get()
	}
	return i.keys
}

// StateBudget returns how many bytes of opaque state every cursor i issues
// can carry, whatever its scope: the tool and caller IDs and the arguments
// fingerprint are bound inside the MAC (or, sealed, as additional data)
// and take none of it, so a handler can check its largest state
// against it at startup. It is [MaxOpaqueStateBytes] for every
// configuration [NewCursorIssuer] accepts (TestCursorStateBudget), and 0
// for an issuer not made by NewCursorIssuer.
func (i *CursorIssuer) StateBudget() int { return i.budget }

// stateBudget computes [CursorIssuer.StateBudget]: the largest state up to
// MaxOpaqueStateBytes whose cursor, with the longest page and issue time,
// fits MaxCursorBytes.
func (i *CursorIssuer) stateBudget() int {
	for n := MaxOpaqueStateBytes; n >= 0; n-- {
		if b64.EncodedLen(i.maxRawLen(n)) <= MaxCursorBytes {
			return n
		}
	}
	return 0
}

// maxRawLen returns the longest raw cursor with a state of n bytes.
func (i *CursorIssuer) maxRawLen(n int) int {
	const issued = math.MinInt64 // the longest integer head
	if i.seal {
		return cursorwire.SealedHeaderLen(cursorwire.VersionSealed, issued, i.sessTag[:]) + gcmNonceSize +
			cursorwire.SealedInnerLen(math.MaxUint32, make([]byte, n)) + gcmTagSize
	}
	return cursorwire.V2Len(&cursorwire.BodyV2{Version: cursorwire.Version, Page: math.MaxUint32, Issued: issued,
		Session: i.sessTag[:], State: make([]byte, n)}) + macSize
}

// appendScope appends the scope a cursor binds (cursorwire.AppendScope):
// after the body in the MAC input of a version 2 cursor, after the header
// in the additional data of a sealed one. A zero Args is "not bound",
// marked apart from any fingerprint. Any bytes are accepted; nothing of
// them is carried.
func appendScope(dst []byte, s *CursorScope) []byte {
	var args []byte
	if !s.Args.IsZero() {
		args = s.Args[:]
	}
	return cursorwire.AppendScope(dst, s.ToolID, s.CallerID, args)
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
		observeIssue(i.obs, observe.KindCursor, err)
	}
	return c, err
}

func (i *CursorIssuer) issue(p CursorPayload) (string, error) {
	keys := i.ring()
	if len(keys.macs) == 0 {
		return "", errCursorNoKey
	}
	if len(p.State) > MaxOpaqueStateBytes {
		return "", errCursorStateLarge
	}
	issued := i.now().Unix()
	// The size is known before anything is encoded, so nothing oversize
	// ever reaches the fixed-size scratch buffer. No scope costs any of it.
	var n int
	if i.seal {
		n = cursorwire.SealedHeaderLen(cursorwire.VersionSealed, issued, i.sessTag[:]) + gcmNonceSize +
			cursorwire.SealedInnerLen(p.Page, p.State) + gcmTagSize
	} else {
		n = cursorwire.V2Len(&cursorwire.BodyV2{Version: cursorwire.Version, Page: p.Page, Issued: issued,
			Session: i.sessTag[:], State: p.State}) + macSize
	}
	if b64.EncodedLen(n) > MaxCursorBytes {
		return "", errCursorLarge
	}
	s := i.getScratch()
	var raw []byte
	if i.seal {
		hdr := cursorwire.AppendSealedHeader(s.raw[:0], cursorwire.VersionSealed, issued, i.sessTag[:])
		s.aad = appendScope(append(s.aad[:0], hdr...), &p.CursorScope)
		pt := cursorwire.AppendSealedInner(s.pt[:0], p.Page, p.State)
		raw = keys.aeads[0].Seal(hdr, nil, pt, s.aad)
	} else {
		// body || scope laid out in pooled memory and MACed in one call;
		// the cursor is the body and the tag.
		s.aad = cursorwire.AppendV2(s.aad[:0], &cursorwire.BodyV2{Version: cursorwire.Version, Page: p.Page, Issued: issued,
			Session: i.sessTag[:], State: p.State})
		raw = append(s.raw[:0], s.aad...)
		s.aad = appendScope(s.aad, &p.CursorScope)
		raw = keys.macs[0].Sum(raw, s.aad)
	}
	text := s.text[:b64.EncodedLen(len(raw))]
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
	errCursorScope      = reject(ErrCursorInvalid, "forged or wrong scope (tool, caller or arguments)")
	errCursorSealed     = reject(ErrCursorInvalid, "sealed cursor does not open (tampered, other key, or other scope)")
)

// Verify checks cursor and returns its payload. Checks run in this order:
// length cap, base64, MAC against each key of the ring (constant time),
// strict CBOR decode, session, age. A version 2 cursor's MAC covers its
// body and want's scope (tool, caller, and Args when non-zero), so a cursor
// verifies only for the exact scope it was issued for: a cursor issued with
// arguments is refused when want.Args is zero, and one issued without them
// is refused when want.Args is set. A sealed cursor binds the same scope as
// additional data. A version 1 cursor (tool, caller and arguments in clear)
// is compared field by field after its MAC; its Args only when want.Args is
// non-zero.
//
// Errors match [ErrCursorInvalid] (forged, tampered, malformed, truncated,
// oversize, wrong scope, IssuedAt over 60 s ahead) or [ErrCursorExpired] (too
// old, or from another server session), and always carry a [Reason]; an
// issuer not made by [NewCursorIssuer] refuses every cursor with [ErrNoKey]. On
// error the payload is zero. A version 2 cursor of another scope and a
// forged one are not told apart (nothing of the scope is carried): both are
// [observe.ReasonCursorWrongScope], "forged or wrong scope (tool, caller or
// arguments)"; a sealed one is [observe.ReasonCursorSealedOpen].
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
// The config's [observe.Observer], if any, is told of the outcome: [observe.OutcomeVerified]
// with the [observe.KeyPosition] of the key that matched, or [observe.OutcomeRefused] with
// the [observe.RefusalReason].
func (i *CursorIssuer) Verify(cursor string, want CursorScope) (CursorPayload, error) {
	keys := i.ring()
	if len(keys.macs) == 0 {
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
	raw := s.raw[:n]
	// Key 1 sorts first, so the first three bytes name a sealed cursor's
	// header: a map of 3 pairs (no signed layout has so few), version 3.
	if n >= 3 && raw[0] == 0xa3 && raw[1] == cursorwire.KeyVersion && raw[2] == cursorwire.VersionSealed {
		return i.verifySealed(keys, s, raw, &want)
	}
	if n <= macSize {
		return i.refuse(-1, errCursorTruncated)
	}
	body, tag := raw[:n-macSize], raw[n-macSize:]
	// Key 1 sorts first, so bytes 1 and 2 name the version the MAC input
	// depends on: body || scope for version 2, the body alone for version
	// 1. The version is inside both MAC inputs, so a body cannot be moved
	// from one to the other.
	if raw[1] == cursorwire.KeyVersion && raw[2] == cursorwire.Version {
		return i.verifyV2(keys, s, body, tag, &want)
	}
	key := keys.macs.verify(body, tag)
	if key < 0 {
		// A classification hint only: nothing of an unauthenticated body
		// is ever returned.
		if f, ok := cursorwire.DecodeBody(body); ok && len(f.Session) != 0 && !bytes.Equal(f.Session, i.session) {
			return i.refuse(-1, errCursorForeign)
		}
		return i.refuse(-1, errCursorMAC)
	}
	// Exactly one encoding is accepted, the one Issue wrote (see
	// internal/cursorwire).
	f, ok := cursorwire.DecodeBody(body)
	if !ok {
		return i.refuse(key, errCursorMalformed)
	}
	return i.verifyV1(key, &f, &want)
}

// checkTime checks the session tag (or version 1 session) and the issue
// time of an authentic cursor.
func (i *CursorIssuer) checkTime(session, wantSession []byte, issuedUnix int64) (time.Time, error) {
	if !equalSecret(session, wantSession) {
		return time.Time{}, errCursorSession
	}
	issued := time.Unix(issuedUnix, 0)
	now := i.now()
	if issued.Sub(now) > maxFutureSkew {
		return time.Time{}, errCursorFuture
	}
	if i.ttl > 0 && now.Sub(issued) > i.ttl {
		return time.Time{}, errCursorAge
	}
	return issued, nil
}

// verifyV2 checks a version 2 cursor: its MAC over body || want's scope
// with each key, then the body. A MAC that fails with every key is a
// forgery or a cursor of another scope, which look the same by design
// (nothing of the scope is carried): [ErrCursorInvalid], "forged or wrong
// scope". The one exception is a body that decodes strictly and names
// another session tag: [ErrCursorExpired], as for version 1.
func (i *CursorIssuer) verifyV2(keys cursorKeys, s *cursorScratch, body, tag []byte, want *CursorScope) (CursorPayload, error) {
	s.aad = appendScope(append(s.aad[:0], body...), want)
	key := keys.macs.verify(s.aad, tag)
	f, ok := cursorwire.DecodeV2(body)
	if key < 0 {
		switch {
		case !ok:
			return i.refuse(-1, errCursorMAC)
		case len(f.Session) != 0 && !equalSecret(f.Session, i.sessTag[:]):
			return i.refuse(-1, errCursorForeign)
		}
		return i.refuse(-1, errCursorScope)
	}
	// Exactly one encoding is accepted, the one Issue wrote.
	if !ok {
		return i.refuse(key, errCursorMalformed)
	}
	if len(f.Session) != cursorwire.SessionTagSize {
		return i.refuse(key, errCursorMalformed)
	}
	issued, err := i.checkTime(f.Session, i.sessTag[:], f.Issued)
	if err != nil {
		return i.refuse(key, err)
	}
	return i.verified(key, want, want.Args, f.Page, f.State, issued)
}

// verifySealed opens a sealed cursor with each key of the ring.
func (i *CursorIssuer) verifySealed(keys cursorKeys, s *cursorScratch, raw []byte, want *CursorScope) (CursorPayload, error) {
	h, hn, ok := cursorwire.DecodeSealedHeader(raw)
	if !ok {
		return i.refuse(-1, errCursorMalformed)
	}
	if len(raw)-hn < gcmNonceSize+gcmTagSize {
		return i.refuse(-1, errCursorTruncated)
	}
	s.aad = appendScope(append(s.aad[:0], raw[:hn]...), want)
	key := -1
	var pt []byte
	for k, aead := range keys.aeads {
		var err error
		if pt, err = aead.Open(s.pt[:0], nil, raw[hn:], s.aad); err == nil {
			key = k
			break
		}
	}
	if key < 0 {
		// A classification hint, as for a signed cursor.
		if len(h.Session) != 0 && !equalSecret(h.Session, i.sessTag[:]) {
			return i.refuse(-1, errCursorForeign)
		}
		return i.refuse(-1, errCursorSealed)
	}
	issued, err := i.checkTime(h.Session, i.sessTag[:], h.Issued)
	if err != nil {
		return i.refuse(key, err)
	}
	f, ok := cursorwire.DecodeSealedInner(pt)
	if !ok {
		return i.refuse(key, errCursorMalformed)
	}
	return i.verified(key, want, want.Args, f.Page, f.State, issued)
}

// verifyV1 checks an authentic version 1 body (the tool and caller IDs and
// the arguments fingerprint in clear). Deprecated layout: see CHANGELOG.
func (i *CursorIssuer) verifyV1(key int, f *cursorwire.Fields, want *CursorScope) (CursorPayload, error) {
	if f.Version != cursorwire.Version1 {
		return i.refuse(key, errCursorVersion)
	}
	if len(f.Args) != 0 && len(f.Args) != len(Fingerprint{}) {
		return i.refuse(key, errCursorArgsLength)
	}
	issued, err := i.checkTime(f.Session, i.session, f.Issued)
	if err != nil {
		return i.refuse(key, err)
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
	return i.verified(key, want, args, f.Page, f.State, issued)
}

// verified returns the payload of a cursor that passed every check. Tool
// and caller equal want's, so want's strings are returned rather than
// copies. State aliases the pooled scratch and is copied: the one
// allocation of a successful Verify, and none when there is no state.
func (i *CursorIssuer) verified(key int, want *CursorScope, args Fingerprint, page uint32, st []byte, issued time.Time) (CursorPayload, error) {
	var state []byte
	if len(st) > 0 {
		state = append(make([]byte, 0, len(st)), st...)
	}
	if i.obs != nil {
		observeErr(i.obs, observe.KindCursor, key, nil, 0)
	}
	return CursorPayload{
		CursorScope: CursorScope{ToolID: want.ToolID, CallerID: want.CallerID, Args: args},
		Page:        page,
		State:       state,
		IssuedAt:    issued,
	}, nil
}

// refuse reports a refusal of Verify (key is the index of the key whose
// MAC matched, or -1) to the observer, if any, and returns it.
func (i *CursorIssuer) refuse(key int, err error) (CursorPayload, error) {
	if i.obs != nil {
		observeErr(i.obs, observe.KindCursor, key, err, 0)
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
