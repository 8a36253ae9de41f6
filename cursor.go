package ctoken

import (
	"crypto/rand"
	"crypto/sha256"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/internal/xaes"
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
	// cursorSealLabel is the HKDF info label of the XAES-256-GCM subkey of
	// sealed cursors.
	cursorSealLabel = "ctoken.cursor xaes-256-gcm key"
	// cursorSessionTagLabel prefixes the session in the SHA-256 input of
	// the session tag of signed and sealed cursors.
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
	// Seal, when true, issues sealed cursors (format version 3):
	// XAES-256-GCM under a subkey of each key, a 192-bit nonce (no
	// practical limit on the number of cursors per key; SECURITY.md), so the
	// page and the opaque state are unreadable too, and the plaintext is
	// padded to one of 5 length classes of the state's length, so the
	// length tells only that class; only the version, the key id, the
	// issue time and the session tag stay in clear (authenticated as
	// additional data with the scope).
	// When false, cursors are signed (version 2): the page and the state
	// are readable; the scope is bound inside the MAC and not carried at
	// all. Either way the issuer verifies both kinds, so the switch can be
	// flipped on a running fleet. A sealed cursor bound to another scope
	// does not open: it is refused as [ErrCursorInvalid] ("sealed cursor
	// does not open"), not told apart from a forgery.
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

// errCursorSessionEmpty refuses an empty, non-nil CursorConfig.Session:
// what []byte(os.Getenv("CTOKEN_SESSION")) gives when the variable is unset.
var errCursorSessionEmpty = configError("CursorConfig.Session is empty: set it to a short name (not secret) that every instance shares " +
	"and keeps across restarts, e.g. CTOKEN_SESSION=search-1; a nil Session is a random session per issuer, " +
	"so every restart breaks the cursors clients hold (right only for tests and throwaway processes)")

// NewCursorIssuer returns an issuer for cfg. It fails with [ErrNoKey] when
// cfg.Keys is nil or holds no key (a zero [Keyring]), and with [ErrConfig] when
// cfg.Session is longer than [MaxSessionBytes] or empty but not nil. Every TTL is valid: 0 means
// [DefaultCursorTTL] and a negative TTL means no age limit. A config with
// both faults is refused with one error naming each.
func NewCursorIssuer(cfg CursorConfig) (*CursorIssuer, error) {
	var session error
	switch {
	case len(cfg.Session) > MaxSessionBytes:
		session = configError("CursorConfig.Session is longer than MaxSessionBytes")
	case cfg.Session != nil && len(cfg.Session) == 0:
		session = errCursorSessionEmpty
	}
	if err := configErrors(keysFrom(cfg.Keys, cfg.KeySource, "CursorConfig"), session); err != nil {
		return nil, err
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

// cursorKeys are the subkeys and key ids of every key of a ring a cursor
// issuer uses, primary first.
type cursorKeys struct {
	namedMACs              // the MAC of a signed body || scope, the key ids
	aeads     []*xaes.AEAD // sealed cursors
}

// deriveCursorKeys returns the cursor subkeys of kr, or false.
func deriveCursorKeys(kr *Keyring) (cursorKeys, bool) {
	named, ok := deriveNamedMACs(kr, cursorKeyLabel)
	if !ok {
		return cursorKeys{}, false
	}
	subs := kr.derive(cursorSealLabel)
	if len(subs) != len(named.macs) {
		return cursorKeys{}, false
	}
	aeads := make([]*xaes.AEAD, len(subs))
	for i, sub := range subs {
		var err error
		if aeads[i], err = xaes.New(sub); err != nil {
			return cursorKeys{}, false
		}
	}
	return cursorKeys{namedMACs: named, aeads: aeads}, true
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
// configuration [NewCursorIssuer] accepts (TestCursorScopeCostsNoStateBudget), and 0
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
	var kid keyID
	if i.seal {
		padded, ok := cursorwire.SealedPlaintextLen(make([]byte, n))
		if !ok {
			return math.MaxInt32
		}
		return cursorwire.SealedHeaderLen(cursorwire.VersionSealed, kid[:], issued, i.sessTag[:]) + xaes.Overhead + padded
	}
	return cursorwire.V2Len(&cursorwire.BodyV2{Version: cursorwire.Version, KeyID: kid[:], Page: math.MaxUint32, Issued: issued,
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
	errCursorNoTool     = configError("CursorScope.ToolID is empty: name the operation or endpoint the cursor belongs to")
	errCursorStateLarge = reject(ErrOpaqueStateTooLarge, "state over MaxOpaqueStateBytes")
	errCursorLarge      = reject(ErrCursorTooLarge, "cursor over MaxCursorBytes")
)

// Issue returns a cursor for p, stamped with the current time and naming
// the primary key by its key id. It fails with [ErrOpaqueStateTooLarge] when
// p.State is over [MaxOpaqueStateBytes] and with [ErrConfig] when p.ToolID is
// empty (a cursor bound to no operation would be accepted by every
// endpoint that verifies with an empty ToolID). An empty CallerID is
// allowed and means "anonymous": the cursor is bound to no caller, so any
// client that presents it with the same ToolID and Args may use it (a
// public listing). An issuer not made by [NewCursorIssuer] has no key:
// Issue fails with [ErrNoKey]. Every refusal carries a [Reason]; [ErrConfig]
// and [ErrNoKey] name what is wrong in their text.
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
	if p.ToolID == "" {
		return "", errCursorNoTool
	}
	issued := i.now().Unix()
	kid := keys.ids[0][:]
	// The size is known before anything is encoded, so nothing oversize
	// ever reaches the fixed-size scratch buffer. No scope costs any of it.
	var n int
	if i.seal {
		padded, ok := cursorwire.SealedPlaintextLen(p.State)
		if !ok {
			return "", errCursorLarge
		}
		n = cursorwire.SealedHeaderLen(cursorwire.VersionSealed, kid, issued, i.sessTag[:]) + xaes.Overhead + padded
	} else {
		n = cursorwire.V2Len(&cursorwire.BodyV2{Version: cursorwire.Version, KeyID: kid, Page: p.Page, Issued: issued,
			Session: i.sessTag[:], State: p.State}) + macSize
	}
	if b64.EncodedLen(n) > MaxCursorBytes {
		return "", errCursorLarge
	}
	s := i.getScratch()
	var raw []byte
	if i.seal {
		hdr := cursorwire.AppendSealedHeader(s.raw[:0], cursorwire.VersionSealed, kid, issued, i.sessTag[:])
		s.aad = appendScope(append(s.aad[:0], hdr...), &p.CursorScope)
		pt := cursorwire.AppendSealedInner(s.pt[:0], p.Page, p.State)
		raw = keys.aeads[0].Seal(hdr, pt, s.aad)
	} else {
		// body || scope laid out in pooled memory and MACed in one call;
		// the cursor is the body and the tag.
		s.aad = cursorwire.AppendV2(s.aad[:0], &cursorwire.BodyV2{Version: cursorwire.Version, KeyID: kid, Page: p.Page, Issued: issued,
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
	errCursorMalformed  = reject(ErrCursorInvalid, "malformed or non-canonical payload")
	errCursorMAC        = reject(ErrCursorInvalid, "mac mismatch")
	errCursorFuture     = reject(ErrCursorInvalid, "issued in the future")
	errCursorSession    = reject(ErrCursorExpired, "other server session")
	errCursorUnknownKey = reject(ErrCursorInvalid, "signed by a key not in the ring: retired or foreign")
	// errCursorUnknownKeyRestart is the same refusal of a cursor that also
	// names another session: what a restart with a fresh random key and
	// session looks like, so the client is told to start over.
	errCursorUnknownKeyRestart = reject(ErrCursorExpired, "signed by a key not in the ring: retired or foreign")
	errCursorAge               = reject(ErrCursorExpired, "older than TTL")
	errCursorScope             = reject(ErrCursorInvalid, "forged or wrong scope (tool, caller or arguments)")
	errCursorSealed            = reject(ErrCursorInvalid, "sealed cursor does not open (tampered, other key, or other scope)")
)

// Verify checks cursor and returns its payload. Checks run in this order:
// length cap, base64, the layout and key id at the cursor's fixed prefix,
// then ONE MAC (or AEAD open) with the key that id names, whatever the
// ring's size (constant-time compare), strict CBOR decode, session, age. A
// signed cursor's MAC covers its body and want's scope (tool, caller, and
// Args when non-zero), so a cursor verifies only for the exact scope it
// was issued for: a cursor issued with arguments is refused when want.Args
// is zero, and one issued without them is refused when want.Args is set. A
// sealed cursor binds the same scope as additional data. An empty
// want.ToolID is [ErrConfig] (Issue never binds one) and consumes nothing.
//
// Errors match [ErrCursorInvalid] (forged, tampered, malformed, truncated,
// oversize, wrong scope, IssuedAt over 60 s ahead, or signed by a key the
// ring does not hold: "signed by a key not in the ring: retired or
// foreign", its own [Reason], so the log tells a retired or foreign key
// from tampering; retire a key only after the TTL, and no live cursor
// names it) or [ErrCursorExpired] (too old, from another server session,
// or signed by an unknown key and naming another session: what a restart
// with a fresh random key looks like, so the client starts over), and
// always carry a [Reason] (an empty want.ToolID is [ErrConfig], whose text
// says so); an issuer not made by [NewCursorIssuer] refuses
// every cursor with [ErrNoKey]. On error the payload is zero. A signed
// cursor of another scope and a forged one are not told apart (nothing of
// the scope is carried): both are "forged or wrong scope (tool, caller or
// arguments)"; a sealed one is "sealed cursor does not open".
//
// The config's [observe.Observer], if any, is told of the outcome: [observe.OutcomeVerified]
// with the [observe.KeyPosition] of the key that matched, or [observe.OutcomeRefused] with
// the [observe.RefusalReason].
func (i *CursorIssuer) Verify(cursor string, want CursorScope) (CursorPayload, error) {
	var p CursorPayload
	key, err := i.verify(&p, cursor, &want)
	if i.obs != nil && err != errCursorNoKey && err != errCursorNoTool {
		observeErr(i.obs, observe.KindCursor, key, err, 0)
	}
	if err != nil {
		return CursorPayload{}, err
	}
	return p, nil
}

// verify is Verify without its observer: it fills in p, only when the
// cursor passes every check, and returns the index of the key whose MAC
// matched (or that opened it), or -1.
func (i *CursorIssuer) verify(p *CursorPayload, cursor string, want *CursorScope) (int, error) {
	keys := i.ring()
	if len(keys.macs) == 0 {
		return -1, errCursorNoKey
	}
	if want.ToolID == "" {
		return -1, errCursorNoTool
	}
	if len(cursor) == 0 {
		return -1, errCursorEmpty
	}
	if len(cursor) > MaxCursorBytes {
		return -1, errCursorOversize
	}
	s := i.getScratch()
	defer i.putScratch(s)
	// []byte(cursor) neither escapes nor is written to, so the compiler
	// converts it without copying or allocating.
	// The strict decoder refuses every second spelling of a cursor.
	n, err := b64.Decode(s.raw[:], []byte(cursor))
	if err != nil {
		return -1, errCursorBase64
	}
	raw := s.raw[:n]
	// Keys 1 and 2 sort first, so the first 9 bytes name the layout and the
	// key; the version and the key id are inside the MAC input (or the
	// additional data), so neither can be changed without detection.
	version, kid, ok := cursorwire.ReadPrefix(raw)
	if !ok {
		if n < cursorwire.PrefixLen {
			return -1, errCursorTruncated
		}
		return -1, errCursorMalformed
	}
	key := keys.ids.index(kid)
	if key < 0 {
		return -1, i.unknownKey(version, raw)
	}
	if version == cursorwire.VersionSealed {
		return i.verifySealed(p, &keys, key, s, raw, want)
	}
	if n <= cursorwire.PrefixLen+macSize {
		return -1, errCursorTruncated
	}
	return i.verifySigned(p, &keys, key, s, raw[:n-macSize], raw[n-macSize:], want)
}

// checkTime checks the session tag and the issue time of an authentic
// cursor.
func (i *CursorIssuer) checkTime(session, wantSession []byte, issuedUnix int64) (time.Time, error) {
	if !equalSecret(session, wantSession) {
		return time.Time{}, errCursorSession
	}
	// One clock read; the issue time is checked against it in seconds
	// first (see issuedInFuture), then as an instant against the TTL
	// (Sub's overflow checks cost more than the comparison). Age over a
	// TTL of math.MaxInt64 is refused too: Sub saturated there.
	now := i.now()
	if issuedInFuture(issuedUnix, now, maxFutureSkew) {
		return time.Time{}, errCursorFuture
	}
	issued := time.Unix(issuedUnix, 0)
	if i.ttl > 0 && now.After(issued.Add(i.ttl)) {
		return time.Time{}, errCursorAge
	}
	return issued, nil
}

// issuedInFuture reports whether an issue time, in Unix seconds, lies more
// than skew after now. It compares seconds as integers: time.Unix wraps an
// issue time past about the year 292 billion around to the far past, where
// it would pass for an old token.
func issuedInFuture(issuedUnix int64, now time.Time, skew time.Duration) bool {
	nowUnix := now.Unix()
	return issuedUnix > nowUnix && uint64(issuedUnix-nowUnix) > uint64(skew/time.Second)
}

// unknownKey classifies a cursor whose key id no key of the ring has: one
// that also names another session (decoded without authentication, a
// classification hint only: nothing of it is returned) is
// [ErrCursorExpired], as after a restart with a fresh random key and
// session; any other is [ErrCursorInvalid]. Both have the reason "signed by
// a key not in the ring: retired or foreign".
func (i *CursorIssuer) unknownKey(version byte, raw []byte) error {
	var f cursorwire.Fields
	ok := false
	if version == cursorwire.VersionSealed {
		f, _, ok = cursorwire.DecodeSealedHeader(raw)
	} else if len(raw) > macSize {
		f, ok = cursorwire.DecodeV2(raw[:len(raw)-macSize])
	}
	if ok && len(f.Session) == cursorwire.SessionTagSize && !equalSecret(f.Session, i.sessTag[:]) {
		return errCursorUnknownKeyRestart
	}
	return errCursorUnknownKey
}

// verifySigned checks a signed cursor: its MAC over body || want's scope
// with the key its id names, then the body. A MAC that fails over a body
// that decodes is a forgery or a cursor of another scope, which look the
// same by design (nothing of the scope is carried): [ErrCursorInvalid],
// "forged or wrong scope"; over a body that does not decode (a truncated
// cursor, or bytes changed into a non-canonical map) it is "mac mismatch",
// since no issuer wrote that body. The decoded body is a classification
// hint only until the MAC has passed.
func (i *CursorIssuer) verifySigned(p *CursorPayload, keys *cursorKeys, key int, s *cursorScratch, body, tag []byte, want *CursorScope) (int, error) {
	s.aad = appendScope(append(s.aad[:0], body...), want)
	mac := keys.macs[key].Equal(s.aad, tag)
	// Exactly one encoding is accepted, the one Issue wrote (never a state
	// over MaxOpaqueStateBytes, which Issue refuses).
	f, ok := cursorwire.DecodeV2(body)
	if !mac {
		if !ok {
			// No issuer wrote this body (a truncated cursor, or bytes
			// changed into a non-canonical map): not another scope's.
			return -1, errCursorMAC
		}
		return -1, errCursorScope
	}
	if !ok || len(f.Session) != cursorwire.SessionTagSize || len(f.State) > MaxOpaqueStateBytes {
		return key, errCursorMalformed
	}
	issued, err := i.checkTime(f.Session, i.sessTag[:], f.Issued)
	if err != nil {
		return key, err
	}
	verified(p, want, f.Page, f.State, issued)
	return key, nil
}

// verifySealed opens a sealed cursor with the key its id names.
func (i *CursorIssuer) verifySealed(p *CursorPayload, keys *cursorKeys, key int, s *cursorScratch, raw []byte, want *CursorScope) (int, error) {
	h, hn, ok := cursorwire.DecodeSealedHeader(raw)
	if !ok {
		return -1, errCursorMalformed
	}
	if len(raw)-hn < xaes.Overhead {
		return -1, errCursorTruncated
	}
	s.aad = appendScope(append(s.aad[:0], raw[:hn]...), want)
	pt, err := keys.aeads[key].Open(s.pt[:0], raw[hn:], s.aad)
	if err != nil {
		return -1, errCursorSealed
	}
	issued, err := i.checkTime(h.Session, i.sessTag[:], h.Issued)
	if err != nil {
		return key, err
	}
	page, state, ok := cursorwire.DecodeSealedInner(pt)
	if !ok || len(state) > MaxOpaqueStateBytes {
		return key, errCursorMalformed
	}
	verified(p, want, page, state, issued)
	return key, nil
}

// verified fills in p, the payload of a cursor that passed every check.
// Tool and caller equal want's, so want's strings are returned rather than
// copies. State aliases the pooled scratch and is copied: the one
// allocation of a successful Verify, and none when there is no state.
func verified(p *CursorPayload, want *CursorScope, page uint32, st []byte, issued time.Time) {
	p.CursorScope = *want
	p.Page = page
	if len(st) > 0 {
		p.State = append(make([]byte, 0, len(st)), st...)
	}
	p.IssuedAt = issued
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
