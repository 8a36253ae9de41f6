package ctoken

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/jcs"
	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/internal/stateclaim"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// RequestStateMode selects how a request state is protected.
type RequestStateMode uint8

const (
	// Signed states ("v1.") are HMAC-SHA256 authenticated; the client can
	// read the state but not change it.
	Signed RequestStateMode = iota
	// Encrypted states ("v1e.") are AES-256-GCM sealed; the client can
	// neither read nor change them. Their nonces are random and 96 bits
	// long (the layout is the reference implementation's), so a key may
	// seal at most 2^32 states (NIST SP 800-38D): the codec counts the
	// states each key seals and reports [observe.OutcomeRotateKey] to its
	// Observer from 2^28 on; see [RequestStateSecurity.Observer].
	Encrypted
)

// RequestStateBinding selects what a request state is bound to: the bind
// material whose HMAC (the bind tag) a state carries and [RequestStateCodec.Decode]
// recomputes from its subject and tool arguments.
//
// Its zero value is unset, not a binding: [NewRequestStateCodec] refuses a
// [RequestStateSecurity] without an explicit Binding with [ErrConfig]. No
// default is safe for every caller: a subject-only default lets a state
// minted for one tool open at another (and is refused by the MCP adapters),
// and a subject-and-tool default silently breaks a state that one handler
// mints and another opens. The choice is the caller's, written where it is
// reviewed. The binding is never carried: the wire bytes of every binding
// are those of the reference implementation.
type RequestStateBinding uint8

const (
	// BindSubject binds a state to the authenticated subject: the material
	// is the subject. An empty subject is the empty material, the same as
	// [BindNone]'s, so a state sealed for "" opens for any caller that also
	// presents "" under [BindSubject] or [BindNone]: pass the authenticated
	// subject whenever there is one.
	BindSubject RequestStateBinding = iota + 1
	// BindSubjectAndTool binds a state to the subject and the tool (for MCP,
	// [MCPTarget](method, name)): the material is subject + "\x00" + tool,
	// also when the subject is empty, so an anonymous state stays bound to
	// its tool (as in the reference implementation). A subject containing a
	// NUL byte, anywhere, is refused by Encode and Decode: the material
	// would be ambiguous.
	BindSubjectAndTool
	// BindNone binds a state to nothing (the empty material): any caller
	// may present it.
	BindNone
)

const (
	// defaultStateTTL is the request-state lifetime when TTL is 0.
	defaultStateTTL = 5 * time.Minute
	// defaultStateMaxBytes is the encoded size cap when MaxBytes is 0.
	defaultStateMaxBytes = 16 << 10

	// HKDF info labels shared with the reference implementation.
	stateAESLabel     = "mcp.requestState aes-256-gcm key"
	stateBindLabel    = "mcp.requestState bind-hmac key"
	statePayloadLabel = "mcp.requestState payload-hmac key"
	// stateAudienceBindLabel derives the bind key of a codec with an
	// Audience, in place of stateBindLabel: ctoken's own, not the
	// reference's (which has no audience), so no tag of a codec without an
	// audience is ever a tag of one with an audience.
	stateAudienceBindLabel = "ctoken.requestState audience bind-hmac key"

	signedPrefix    = "v1."
	encryptedPrefix = "v1e."
	gcmNonceSize    = 12
	gcmTagSize      = 16
)

// RequestStateSecurity configures a [RequestStateCodec]. Keys (or
// KeySource) and Binding are required; every other field has a default,
// chosen by its zero value: signed, 5-minute TTL, 16 KiB cap, time.Now. A
// value that is neither zero nor valid (a negative TTL or MaxBytes, an unknown Mode or
// Binding) makes [NewRequestStateCodec] fail with [ErrConfig]; it never
// falls back to the default.
type RequestStateSecurity struct {
	// Keys seals (primary) and opens (all) states. Exactly one of Keys and
	// KeySource is required: neither (or an empty [Keyring]) is [ErrNoKey],
	// both is [ErrConfig]. A single process that wants a random
	// key asks for one explicitly ([KeyringFromEnvOrRandom], or
	// [NewKeyring]([RandomKey]())); states sealed with it survive neither a
	// restart nor a hop to another instance.
	Keys *Keyring
	// KeySource, instead of Keys, supplies a ring that can be replaced while
	// the codec runs ([KeySource.Swap]); each call uses the current ring.
	KeySource *KeySource
	// Mode is [Signed] (the zero value) or [Encrypted]. A codec decodes only
	// states of its own mode.
	Mode RequestStateMode
	// Binding is [BindSubjectAndTool], [BindSubject] or [BindNone], and has
	// no default: left unset (zero) it is [ErrConfig], because what a state
	// must be bound to is a security decision only the caller can make (see
	// [RequestStateBinding]). MCP servers use [BindSubjectAndTool].
	Binding RequestStateBinding
	// Audience, if set, names the server or deployment a state is for (say
	// "billing-mcp.prod"): a state opens only in a codec with the same
	// Audience, so two servers that share a key never accept each other's
	// states. It is bound, never carried: the bind tag is computed with a
	// separate bind subkey (HKDF label
	// "ctoken.requestState audience bind-hmac key") over
	// audience + "\x00" + the binding's material, in both modes, so neither
	// the state's size nor its layout changes. Empty (the default) binds no
	// audience and keeps the reference wire byte for byte; a state sealed
	// with an Audience opens in no codec without one (nor in the reference
	// implementation). An Audience containing a NUL byte is [ErrConfig].
	Audience string
	// TTL is the state lifetime; 0 means 5 minutes. Negative is
	// [ErrConfig]: every state expires.
	TTL time.Duration
	// MaxBytes caps the encoded length, checked before decoding; 0 means
	// 16 KiB. Negative, or too small for a state holding ""
	// in the chosen mode, is [ErrConfig].
	MaxBytes int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Replay, if set, makes every state single-use: Decode accepts a given
	// state at most once, recording it in Replay until 60 s after it expires, and
	// refuses it afterwards with [ErrStateReplayed]. Nil (the default) keeps
	// states reusable until they expire. See DecodeContext. A
	// [replay.Bounded] store whose horizon is shorter than TTL + 1 s +
	// [replay.SkewMargin] is [ErrConfig]: it would refuse every claim.
	//
	// A state is identified by its authenticator: the MAC of a [Signed] state,
	// the GCM nonce and tag of an [Encrypted] one. [Signed] encoding is
	// deterministic, so two Encode calls with the same state, binding and
	// expiry second yield the same wire string and count as one state; put a
	// unique value (a step counter, a random ID) in the state, or use
	// [Encrypted], whose random nonce makes every encoding distinct.
	Replay replay.Store
	// Observer, if set, is told of every Encode and Decode
	// ([observe.KindRequestState]), with the replay store's latency in single-use
	// mode; see [observe.Observer]. Nil costs nothing.
	//
	// In [Encrypted] mode it is also told when the primary key should be
	// rotated ([observe.OutcomeRotateKey], logged at Warn by
	// [NewSlogObserver]): the codec counts the states each key seals, and
	// reports the count when it reaches 2^28 and at every doubling after
	// (2^29, 2^30, ...). The budget is 2^32 per key, across every process
	// that shares it; the count is this codec's (two codecs on one key
	// count apart) and starts at 0 with it, so the first report leaves
	// room for 16 codecs sealing evenly. A larger fleet sums its issued request states (for
	// example the OpenTelemetry counter of package ctokenotel) instead.
	Observer observe.Observer
}

// RequestStateCodec seals and opens MCP multi-round-trip requestState
// values. Its wire formats are those of the reference D implementation (see
// the package documentation), so a mixed fleet sharing keys shares state.
// It is safe for concurrent use. Its zero value (and a nil pointer) has no
// key and refuses every call with [ErrNoKey].
type RequestStateCodec struct {
	mode     RequestStateMode
	binding  RequestStateBinding
	audience string
	ttl      time.Duration
	maxBytes int
	now      func() time.Time
	replay   replay.Store // nil: states are reusable
	obs      observe.Observer

	keys    *stateKeys            // static keys; nil when rot is set
	rot     *rotating[*stateKeys] // keys from a KeySource
	scratch sync.Pool             // of *stateScratch

	// seals counts, in Encrypted mode, the states sealed under each key
	// this codec has held as primary, by the key's id (so a KeySource swap
	// that keeps the primary keeps its count); sealWarn is the first count
	// reported (a power of two).
	seals    sync.Map // keyID -> *atomic.Uint64
	sealWarn uint64
}

// sealWarnFloor is the first count of states sealed by one key that
// [RequestStateCodec] reports as [observe.OutcomeRotateKey]; it reports
// again at every doubling. 2^28 is a sixteenth of NIST SP 800-38D's budget
// of 2^32 random 96-bit nonces per key: the count is per codec, so a
// fleet of up to 16 codecs sealing evenly is told before the fleet
// reaches the budget, and the chance of a nonce repeat at 2^28 seals per
// key is about 2^-41.
const sealWarnFloor = 1 << 28

// sealCount returns the counter of states sealed by kr's primary key,
// shared by every ring with that primary. kr is a ring deriveStateKeys
// accepted, whose keys have ids.
func (c *RequestStateCodec) sealCount(kr *Keyring) *atomic.Uint64 {
	if len(kr.ids) == 0 {
		return new(atomic.Uint64)
	}
	v, _ := c.seals.LoadOrStore(kr.ids[0], new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// countSeal counts one state sealed under ks's primary key and reports
// [observe.OutcomeRotateKey] when the count reaches sealWarn or a power of
// two above it.
func (c *RequestStateCodec) countSeal(ks *stateKeys) {
	n := ks.seals.Add(1)
	if n >= c.sealWarn && n&(n-1) == 0 && c.obs != nil {
		c.obs.Observe(observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeRotateKey, Key: observe.KeyPrimary, Seals: n})
	}
}

// stateKeys is the subkeys of one [Keyring] for request state.
type stateKeys struct {
	bind    macRing
	payload macRing        // Signed
	aead    aeadRing       // Encrypted
	seals   *atomic.Uint64 // Encrypted: states sealed by aead[0]; see RequestStateCodec.countSeal
}

// deriveStateKeys returns kr's subkeys for mode, or false. A codec with an
// audience binds with the audience bind subkey.
func deriveStateKeys(kr *Keyring, mode RequestStateMode, audience bool) (*stateKeys, bool) {
	n := kr.Len()
	bindLabel := stateBindLabel
	if audience {
		bindLabel = stateAudienceBindLabel
	}
	k := &stateKeys{bind: newMACRing(kr, bindLabel)}
	if mode == Encrypted {
		var err error
		if k.aead, err = newAEADRing(kr, stateAESLabel); err != nil || len(k.aead) != n {
			return nil, false
		}
	} else if k.payload = newMACRing(kr, statePayloadLabel); len(k.payload) != n {
		return nil, false
	}
	if n == 0 || len(k.bind) != n {
		return nil, false
	}
	return k, true
}

// ring returns the subkeys in use now, or nil for a codec not made by
// [NewRequestStateCodec].
func (c *RequestStateCodec) ring() *stateKeys {
	switch {
	case c == nil:
		return nil
	case c.rot != nil:
		return c.rot.get()
	}
	return c.keys
}

// Configuration errors of [NewRequestStateCodec], allocated once.
var (
	errStateNilKeys      = reject(ErrNoKey, "RequestStateSecurity.Keys is nil (set Keys, e.g. from KeyringFromEnv, or KeySource)")
	errStateEmptyKeys    = reject(ErrNoKey, "RequestStateSecurity.Keys holds no key (make it with NewKeyring or KeyringFromEnv)")
	errStateNoCodec      = reject(ErrNoKey, "codec not made by NewRequestStateCodec")
	errStateUnderivable  = reject(ErrNoKey, "RequestStateSecurity.Keys: a key cannot be derived from")
	errStateConfMode     = reject(ErrConfig, "unknown RequestStateSecurity.Mode")
	errStateConfBinding  = reject(ErrConfig, "unknown RequestStateSecurity.Binding")
	errStateNoBinding    = reject(ErrConfig, "RequestStateSecurity.Binding is unset (choose BindSubjectAndTool, BindSubject or BindNone)")
	errStateConfAudience = reject(ErrConfig, "RequestStateSecurity.Audience contains a NUL byte")
	errStateConfTTL      = reject(ErrConfig, "negative RequestStateSecurity.TTL")
	errStateConfMaxBytes = reject(ErrConfig, "negative RequestStateSecurity.MaxBytes")
	errStateConfTooSmall = reject(ErrConfig, "RequestStateSecurity.MaxBytes too small for any state")
	errStateBothKeys     = reject(ErrConfig, "RequestStateSecurity.Keys and RequestStateSecurity.KeySource are both set (set one)")
	errStateEmptySource  = reject(ErrNoKey, "RequestStateSecurity.KeySource holds no Keyring (use NewKeySource)")
)

// faults returns one error per field of sec that is at fault (nil where
// none), in field order: every missing or invalid field at once.
func (sec RequestStateSecurity) faults() []error {
	var mode, binding, audience, ttl, maxBytes, keys error
	if sec.Mode > Encrypted {
		mode = errStateConfMode
	}
	switch {
	case sec.Binding == 0:
		binding = errStateNoBinding
	case sec.Binding > BindNone:
		binding = errStateConfBinding
	}
	if strings.IndexByte(sec.Audience, 0) >= 0 {
		audience = errStateConfAudience
	}
	if sec.TTL < 0 {
		ttl = errStateConfTTL
	}
	switch {
	case sec.MaxBytes < 0:
		maxBytes = errStateConfMaxBytes
	case sec.MaxBytes > 0 && sec.MaxBytes < minStateWire(sec.Mode):
		maxBytes = errStateConfTooSmall
	}
	switch {
	case sec.Keys != nil && sec.KeySource != nil:
		keys = errStateBothKeys
	case sec.KeySource != nil && sec.KeySource.Keyring() == nil:
		keys = errStateEmptySource
	case sec.KeySource != nil:
	case sec.Keys == nil:
		keys = errStateNilKeys
	case sec.Keys.Len() == 0:
		keys = errStateEmptyKeys
	}
	return []error{keys, mode, binding, audience, ttl, maxBytes}
}

// minStateWire is the length of the wire form of the state "" with a
// 10-digit expiry in mode: a MaxBytes below it refuses every state.
func minStateWire(mode RequestStateMode) int {
	payload := len(`{"s":"","exp":1700000000,"b":""}`) + bindTagLen
	if mode == Encrypted {
		return len(encryptedPrefix) + b64.EncodedLen(gcmNonceSize+payload+gcmTagSize)
	}
	return len(signedPrefix) + b64.EncodedLen(payload) + 1 + b64.EncodedLen(macSize)
}

// NewRequestStateCodec returns a codec for sec. A nil sec.Keys, or one that
// holds no key (a zero [Keyring]), is [ErrNoKey]; a field that is neither
// zero nor valid is [ErrConfig] (see [RequestStateSecurity]). The error's
// text names the field at fault and how to fix it. A config with several faults (an all-zero one: no
// Keys and no Binding) is refused with one error naming every one, which
// errors.Is matches against each fault's sentinel.
func NewRequestStateCodec(sec RequestStateSecurity) (*RequestStateCodec, error) {
	if err := configErrors(sec.faults()...); err != nil {
		return nil, err
	}
	c := &RequestStateCodec{
		mode:     sec.Mode,
		binding:  sec.Binding,
		audience: sec.Audience,
		ttl:      sec.TTL,
		maxBytes: sec.MaxBytes,
		now:      sec.Now,
		replay:   sec.Replay,
		obs:      sec.Observer,
		sealWarn: sealWarnFloor,
	}
	if c.ttl == 0 {
		c.ttl = defaultStateTTL
	}
	if c.maxBytes == 0 {
		c.maxBytes = defaultStateMaxBytes
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.replay != nil {
		if err := checkHorizon(c.replay, c.ttl, "RequestStateSecurity.Replay"); err != nil {
			return nil, err
		}
	}
	mode, audience := c.mode, c.audience != ""
	derive := func(kr *Keyring) (*stateKeys, bool) {
		k, ok := deriveStateKeys(kr, mode, audience)
		if ok && mode == Encrypted {
			k.seals = c.sealCount(kr)
		}
		return k, ok
	}
	var ok bool
	if sec.KeySource != nil {
		c.rot, ok = newRotating(sec.KeySource, derive)
	} else {
		c.keys, ok = derive(sec.Keys)
	}
	if !ok {
		return nil, errStateUnderivable
	}
	return c, nil
}

// Binding returns the binding the codec was configured with
// ([RequestStateSecurity.Binding]); a codec not made by
// [NewRequestStateCodec] reports the unset zero value, which is no binding,
// and opens nothing (see [RequestStateCodec.Ready]).
func (c *RequestStateCodec) Binding() RequestStateBinding {
	if c == nil {
		return 0
	}
	return c.binding
}

// Audience returns the audience the codec binds states to
// ([RequestStateSecurity.Audience]), "" for none.
func (c *RequestStateCodec) Audience() string {
	if c == nil {
		return ""
	}
	return c.audience
}

// Ready returns nil for a codec made by [NewRequestStateCodec], and an
// error matching [ErrNoKey] for any other (the zero value, a nil pointer),
// which refuses every call: a wrapper can refuse it when it is built
// rather than on the first request.
func (c *RequestStateCodec) Ready() error {
	if c.ring() == nil {
		return errStateNoCodec
	}
	return nil
}

// MCPTarget returns method + "\x00" + name, the tool argument the MCP
// dispatch path binds request state to.
func MCPTarget(method, name string) string { return method + "\x00" + name }

// bindTagLen is the length of a bind tag: hex of an HMAC-SHA256.
const bindTagLen = 2 * macSize

// bindTag appends hex(HMAC-SHA256(bindKey, material)) to dst, without the
// cache of cachedBindTag (tests compare the two).
func (c *RequestStateCodec) bindTag(dst []byte, key int, subject, tool string) []byte {
	var sc stateScratch
	return c.cachedBindTag(dst, &sc, make([]byte, 0, c.materialCap(subject, tool)), c.ring().bind[key], subject, tool)
}

// materialCap is the most bytes the bind material of subject and tool takes.
func (c *RequestStateCodec) materialCap(subject, tool string) int {
	n := len(subject) + 1 + len(tool)
	if c.audience != "" {
		n += len(c.audience) + 1
	}
	return n
}

// cachedBindTag appends hex(HMAC-SHA256(bindKey, material)) to dst. The
// material is the subject under [BindSubject], subject + "\x00" + tool under
// [BindSubjectAndTool] (an empty subject included) and empty under [BindNone],
// preceded by audience + "\x00" when the codec has an audience (whose bind
// key is then the audience bind subkey).
//
// Tags are cached in the pooled scratch sc, a handful per scratch, keyed by
// the bind subkey (its identity: a [KeySource] swap brings new subkeys, so a
// tag of the old ring is never served for the new one) and a copy of the material (so a caller's string that is
// later reused for other bytes cannot produce a stale hit): the tag is a
// pure function of the two, and it costs as much as the whole AES-GCM open
// it guards. A scratch belongs to one goroutine between Get and Put, so the
// cache needs no lock; sync.Pool drops it at garbage collection, so it
// stays small. A hit or a miss reveals only whether the same material was
// served recently on the same P, never a secret. material is heap memory
// with capacity for the material (a slice handed to the HMAC escapes, so a
// stack buffer would cost an allocation); dst does not escape.
func (c *RequestStateCodec) cachedBindTag(dst []byte, sc *stateScratch, material []byte, k *mac.Key, subject, tool string) []byte {
	material = material[:0]
	if c.audience != "" {
		material = append(append(material, c.audience...), 0)
	}
	switch c.binding {
	case BindSubject:
		material = append(material, subject...)
	case BindSubjectAndTool:
		material = append(append(append(material, subject...), 0), tool...)
	}
	cacheable := len(material) <= maxCachedMaterial
	if cacheable {
		for i := range sc.tags[:sc.used] {
			if e := &sc.tags[i]; e.key == k && bytes.Equal(e.material[:e.n], material) {
				return append(dst, e.tag[:]...)
			}
		}
	}
	st := k.Begin()
	st.Write(material)
	var tag [bindTagLen]byte
	hex.Encode(tag[:], st.Tag()[:])
	k.End(st)
	if cacheable {
		e := &sc.tags[sc.next]
		e.key, e.n, e.tag = k, len(material), tag
		copy(e.material[:], material)
		sc.next = (sc.next + 1) % uint8(len(sc.tags))
		if int(sc.used) < len(sc.tags) {
			sc.used++
		}
	}
	return append(dst, tag[:]...)
}

// maxCachedMaterial is the longest bind material whose tag is cached.
const maxCachedMaterial = 128

// tagEntry is a cached bind tag: the tag of material[:n] under key.
type tagEntry struct {
	key      *mac.Key
	n        int
	material [maxCachedMaterial]byte
	tag      [bindTagLen]byte
}

// stateScratch is pooled working memory of Encode and Decode; see
// getScratch.
type stateScratch struct {
	buf  []byte
	tags [4]tagEntry
	next uint8 // the entry a miss replaces
	used uint8 // entries in use
}

// maxPooledScratch is the largest scratch buffer kept for reuse, so a
// codec configured with a huge MaxBytes does not pin huge buffers.
const maxPooledScratch = 256 << 10

// getScratch returns pooled working memory with capacity of at least n.
func (c *RequestStateCodec) getScratch(n int) *stateScratch {
	sc, _ := c.scratch.Get().(*stateScratch)
	if sc == nil {
		sc = new(stateScratch)
	}
	if cap(sc.buf) < n {
		sc.buf = make([]byte, 0, max(n, 512))
	}
	return sc
}

func (c *RequestStateCodec) putScratch(sc *stateScratch) {
	if cap(sc.buf) <= maxPooledScratch {
		c.scratch.Put(sc)
	}
}

// region returns buf[off:off] with capacity n, so appends to it never run
// into the next region (at worst they reallocate).
func region(buf []byte, off, n int) []byte { return buf[off:off:min(off+n, cap(buf))] }

// Encode's refusals, allocated once.
var (
	errStateNotUTF8    = reject(ErrUnencodable, "request state is not valid UTF-8")
	errStateSubjectNUL = reject(ErrUnencodable, "subject contains a NUL byte, which BindSubjectAndTool cannot bind unambiguously")
	errStateTooLarge   = reject(ErrStateTooLarge, "encoding over MaxBytes")
)

// ambiguousSubject reports a subject that [BindSubjectAndTool] cannot bind:
// its material is subject + "\x00" + tool, so a NUL inside the subject
// would let ("a\x00b", "c") and ("a", "b\x00c") share a bind tag. Tools may
// contain NUL ([MCPTarget] does): the first NUL is the separator.
func (c *RequestStateCodec) ambiguousSubject(subject string) bool {
	return c.binding == BindSubjectAndTool && strings.IndexByte(subject, 0) >= 0
}

// Encode seals state for subject (and tool, under [BindSubjectAndTool]),
// expiring after the codec's TTL. state must be valid UTF-8 (it travels as a
// JSON string), else [ErrUnencodable]; [ErrStateTooLarge] reports a result
// over MaxBytes. An encrypted state gets a fresh random nonce from
// [crypto/cipher.NewGCMWithRandomNonce]. A codec not made by
// [NewRequestStateCodec] has no key: Encode fails with [ErrNoKey].
func (c *RequestStateCodec) Encode(state, subject, tool string) (string, error) {
	w, err := c.encode(state, subject, tool)
	if err != errStateNoCodec && c.obs != nil {
		observeIssue(c.obs, observe.KindRequestState, err)
	}
	return w, err
}

func (c *RequestStateCodec) encode(state, subject, tool string) (string, error) {
	ks := c.ring()
	if ks == nil {
		return "", errStateNoCodec
	}
	if !utf8.ValidString(state) {
		return "", errStateNotUTF8
	}
	if c.ambiguousSubject(subject) {
		return "", errStateSubjectNUL
	}
	// The wire holds at least the base64 of the state: refuse a state that
	// cannot fit before allocating anything in proportion to it.
	if b64.EncodedLen(len(state)) > c.maxBytes {
		return "", errStateTooLarge
	}
	// Scratch: the bind material first, then, once the tag is computed,
	// the payload, the sealed payload and the wire text in turn. The
	// payload estimate allows for some escapes; more only cost a larger
	// buffer, kept for the next call.
	matLen := c.materialCap(subject, tool)
	payloadCap := len(state) + len(state)/8 + 64 + bindTagLen
	sealedCap := gcmNonceSize + payloadCap + gcmTagSize
	wireCap := len(encryptedPrefix) + b64.EncodedLen(max(sealedCap, payloadCap+macSize)) + 1
	sc := c.getScratch(max(matLen, payloadCap+sealedCap+wireCap))
	defer c.putScratch(sc)

	var tag [bindTagLen]byte
	c.cachedBindTag(tag[:0], sc, sc.buf, ks.bind[0], subject, tool)
	payload := sc.buf[:0]
	payload = append(payload, `{"s":`...)
	payload = jcs.AppendString(payload, state)
	payload = append(payload, `,"exp":`...)
	payload = strconv.AppendInt(payload, c.now().Add(c.ttl).Unix(), 10)
	payload = append(payload, `,"b":"`...)
	payload = append(payload, tag[:]...)
	payload = append(payload, `"}`...)

	var wireLen int
	if c.mode == Encrypted {
		wireLen = len(encryptedPrefix) + b64.EncodedLen(gcmNonceSize+len(payload)+gcmTagSize)
	} else {
		wireLen = len(signedPrefix) + b64.EncodedLen(len(payload)) + 1 + b64.EncodedLen(macSize)
	}
	if wireLen > c.maxBytes {
		return "", errStateTooLarge
	}
	if need := len(payload) + gcmNonceSize + len(payload) + gcmTagSize + wireLen; cap(payload) < need {
		// A state of many escapes outgrew the estimate: move to a buffer
		// with room for every region (kept for the next call).
		payload = append(make([]byte, 0, need), payload...)
	}
	sc.buf = payload[:0]
	off := len(payload)
	if c.mode == Encrypted {
		// The AEAD draws a random nonce and writes nonce12 || ct || tag,
		// the v1e. layout. The bind tag is the additional data; the copy
		// inside the payload is heap memory, so passing it costs nothing.
		aad := payload[len(payload)-2-bindTagLen : len(payload)-2]
		sealed := ks.aead[0].Seal(region(payload, off, gcmNonceSize+len(payload)+gcmTagSize), nil, payload, aad)
		c.countSeal(ks)
		wire := region(payload, off+len(sealed), wireLen)
		wire = append(wire, encryptedPrefix...)
		wire = b64.AppendEncode(wire, sealed)
		return string(wire), nil
	}
	var mac [macSize]byte
	wire := region(payload, off, wireLen)
	wire = append(wire, signedPrefix...)
	wire = b64.AppendEncode(wire, payload)
	wire = append(wire, '.')
	wire = b64.AppendEncode(wire, ks.payload[0].Sum(mac[:0], payload))
	return string(wire), nil
}

// Rejections, allocated once.
var (
	errStateEmpty            = reject(ErrStateInvalid, "empty")
	errStateOversize         = reject(ErrStateInvalid, "over MaxBytes")
	errStateMode             = reject(ErrStateInvalid, "unknown prefix or other mode")
	errStateBase64           = reject(ErrStateInvalid, "not base64url")
	errStateFraming          = reject(ErrStateInvalid, "malformed framing")
	errStateMAC              = reject(ErrStateInvalid, "mac mismatch")
	errStateOpen             = reject(ErrStateInvalid, "decryption failed (tampered, other key, or other subject/tool)")
	errStateMalformed        = reject(ErrStateInvalid, "malformed payload")
	errStateBinding          = reject(ErrStateInvalid, "bound to another subject or tool")
	errStateSubjectAmbiguous = reject(ErrStateInvalid, "subject contains NUL (ambiguous under BindSubjectAndTool)")
	errStateExpired          = reject(ErrStateExpired, "past exp")
)

// Decode opens wire, checks that it is bound to subject (and tool) and not
// expired, and returns the state. It tries every key of the ring. It is
// fail-closed: on any error the state is "". Errors match [ErrStateExpired]
// for an authentic state past its expiry and [ErrStateInvalid] for anything
// else (and, in single-use mode, [ErrStateReplayed] or a replay store
// failure; see DecodeContext); a codec not made by [NewRequestStateCodec]
// refuses every state with [ErrNoKey]. [Reason] is non-empty for every
// error. It is DecodeContext with context.Background().
func (c *RequestStateCodec) Decode(wire, subject, tool string) (string, error) {
	return c.DecodeContext(context.Background(), wire, subject, tool)
}

// DecodeContext is Decode with a context for the replay store. In
// single-use mode ([RequestStateSecurity.Replay] set), after every other check
// has passed, the state is claimed in the store until its expiry (plus a 60 s
// clock-skew margin): the first decode of a state succeeds and every later or
// concurrent one fails with [ErrStateReplayed]. A state refused for its binding or expiry is not
// consumed. A store failure (for example [replay.ErrFull], or ctx's error)
// is returned wrapped (errors.Is finds it; [Reason] says "replay store
// failed") and the state is refused. Without Replay, ctx is unused.
func (c *RequestStateCodec) DecodeContext(ctx context.Context, wire, subject, tool string) (string, error) {
	return c.DecodeCheckedContext(ctx, wire, subject, tool, nil)
}

// DecodeCheckedContext is [RequestStateCodec.DecodeContext] with one more
// binding check that the codec cannot make itself, such as the arguments of
// a retried call against a fingerprint sealed inside the state. check is
// called with the state once every check of the codec has passed
// (authenticity, subject, tool, audience, expiry) and, in single-use mode,
// before the state is claimed: a state check refuses is not consumed, so
// the honest retry still opens it once. check returns the state to hand back
// (for example the application's part of it) or an error; its error is
// returned wrapped so that it matches both [ErrStateInvalid] and check's
// error (errors.Is), with the [Reason] "wrong arguments", and no state. A
// nil check is DecodeContext.
func (c *RequestStateCodec) DecodeCheckedContext(ctx context.Context, wire, subject, tool string, check func(state string) (string, error)) (string, error) {
	s, key, store, err := c.decode(ctx, wire, subject, tool, check, nil)
	if err != errStateNoCodec && c.obs != nil {
		observeErr(c.obs, observe.KindRequestState, key, err, store)
	}
	return s, err
}

// decode is DecodeContext, also returning the index of the key that opened
// the state (-1 if none did) and, when an observer is set, how long the
// replay store took. With a non-nil deferred, a single-use codec does not
// claim the state: it fills in deferred's ID and Until instead.
func (c *RequestStateCodec) decode(ctx context.Context, wire, subject, tool string, check func(string) (string, error), deferred *stateclaim.Opened) (_ string, key int, store time.Duration, _ error) {
	key = -1
	ks := c.ring()
	if ks == nil {
		return "", key, 0, errStateNoCodec
	}
	if len(wire) == 0 {
		return "", key, 0, errStateEmpty
	}
	if len(wire) > c.maxBytes {
		return "", key, 0, errStateOversize
	}
	if c.ambiguousSubject(subject) {
		return "", key, 0, errStateSubjectAmbiguous
	}
	// Scratch regions: decoded bytes, then the material of a bind tag,
	// then the bind tag itself, then a plaintext, then the unescaped state.
	// Each is at most the wire's length (or the material's).
	matCap := c.materialCap(subject, tool)
	sc := c.getScratch(3*len(wire) + matCap + bindTagLen)
	// Not deferred: decode has too many returns for an open-coded defer,
	// and decodeScratch copies the state out of sc before it returns (a
	// panic only costs the pool this scratch).
	s, key, store, err := c.decodeScratch(ctx, ks, sc, wire, subject, tool, check, deferred)
	c.putScratch(sc)
	return s, key, store, err
}

// decodeScratch is decode after its length checks, working in sc, whose
// buffer has room for every region decode lists.
func (c *RequestStateCodec) decodeScratch(ctx context.Context, ks *stateKeys, sc *stateScratch, wire, subject, tool string, check func(string) (string, error), deferred *stateclaim.Opened) (_ string, key int, store time.Duration, _ error) {
	key = -1
	matLen := c.materialCap(subject, tool)
	buf := sc.buf
	rawRegion := region(buf, 0, len(wire))
	matRegion := region(buf, len(wire), matLen)
	tagRegion := region(buf, len(wire)+matLen, bindTagLen)
	rest := len(wire) + matLen + bindTagLen

	var payload, bound []byte
	// id is the state's authenticator, its replay-store key in single-use
	// mode: the MAC of a signed state, the nonce and tag of an encrypted one.
	var idBuf [max(macSize, gcmNonceSize+gcmTagSize)]byte
	var id []byte
	switch {
	case c.mode == Signed && strings.HasPrefix(wire, signedPrefix):
		body, macText, ok := strings.Cut(wire[len(signedPrefix):], ".")
		if !ok || len(macText) != b64.EncodedLen(macSize) {
			return "", key, 0, errStateFraming
		}
		// []byte(body) neither escapes nor is written to: no copy.
		// The strict decoder refuses every second spelling of a state.
		n, err := b64.Decode(rawRegion[:cap(rawRegion)], []byte(body))
		if err != nil {
			return "", key, 0, errStateBase64
		}
		var mac [macSize]byte
		if m, err := b64.Decode(mac[:], []byte(macText)); err != nil || m != macSize {
			return "", key, 0, errStateBase64
		}
		payload = rawRegion[:n]
		if c.replay != nil {
			id = append(idBuf[:0], mac[:]...)
		}
		if key = ks.payload.verify(payload, mac[:]); key < 0 {
			return "", key, 0, errStateMAC
		}
		bound = c.cachedBindTag(tagRegion, sc, matRegion, ks.bind[key], subject, tool)
	case c.mode == Encrypted && strings.HasPrefix(wire, encryptedPrefix):
		text := wire[len(encryptedPrefix):]
		n, err := b64.Decode(rawRegion[:cap(rawRegion)], []byte(text))
		if err != nil {
			return "", key, 0, errStateBase64
		}
		if n < gcmNonceSize+gcmTagSize {
			return "", key, 0, errStateFraming
		}
		sealed := rawRegion[:n] // nonce12 || ct || tag
		plain := region(buf, rest, n)
		rest += n
		for i, aead := range ks.aead {
			// The bind tag is the additional data: a state opens only for
			// the subject (and tool) it was sealed for.
			tag := c.cachedBindTag(tagRegion, sc, matRegion, ks.bind[i], subject, tool)
			if pt, err := aead.Open(plain, nil, sealed, tag); err == nil {
				payload, key, bound = pt, i, tag
				if c.replay != nil {
					id = append(append(idBuf[:0], sealed[:gcmNonceSize]...), sealed[n-gcmTagSize:]...)
				}
				break
			}
		}
		if key < 0 {
			return "", key, 0, errStateOpen
		}
	default:
		return "", key, 0, errStateMode
	}
	s, exp, b, ok := parseStatePayload(payload, region(buf, rest, len(payload)))
	if !ok {
		return "", key, 0, errStateMalformed
	}
	if !equalSecret(bound, b) {
		return "", key, 0, errStateBinding
	}
	if exp < c.now().Unix() {
		return "", key, 0, errStateExpired
	}
	out := string(s)
	if check != nil {
		var err error
		if out, err = check(out); err != nil {
			// "wrong arguments": the observer's word for it.
			return "", key, 0, reason.Wrap(ErrStateInvalid, "wrong arguments", err)
		}
	}
	if c.replay != nil && deferred != nil {
		deferred.ID, deferred.Until = c.claimID(id), claimUntil(exp)
	} else if c.replay != nil {
		var err error
		if store, err = c.claimOnce(ctx, id, exp); err != nil {
			return "", key, store, err
		}
	}
	return out, key, store, nil
}

// EncodeJSON encodes v with encoding/json and seals it with
// [RequestStateCodec.Encode]. A v that encoding/json cannot encode is
// [ErrUnencodable], wrapping encoding/json's error; a codec not made by
// [NewRequestStateCodec] is [ErrNoKey] whatever v is.
func EncodeJSON[T any](c *RequestStateCodec, v T, subject, tool string) (string, error) {
	if c.ring() == nil {
		return "", errStateNoCodec
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", reason.Wrap(ErrUnencodable, "encoding/json cannot encode the state", err)
	}
	return c.Encode(string(b), subject, tool)
}

var errStateJSON = reject(ErrStateInvalid, "state is not JSON of the requested type")

// DecodeJSON opens wire with [RequestStateCodec.Decode] and decodes the
// state into a T. It is fail-closed: on any error the result is T's zero
// value. It is [DecodeJSONContext] with context.Background().
func DecodeJSON[T any](c *RequestStateCodec, wire, subject, tool string) (T, error) {
	return DecodeJSONContext[T](context.Background(), c, wire, subject, tool)
}

// DecodeJSONContext is [DecodeJSON] with a context for the replay store of a
// single-use codec: it opens wire with [RequestStateCodec.DecodeContext].
// A state that opens but is not JSON of type T is [ErrStateInvalid]; in
// single-use mode it has then been consumed.
func DecodeJSONContext[T any](ctx context.Context, c *RequestStateCodec, wire, subject, tool string) (T, error) {
	var zero T
	s, err := c.DecodeContext(ctx, wire, subject, tool)
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return zero, errStateJSON
	}
	return v, nil
}
