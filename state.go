package ctoken

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	kr      *Keyring // the ring these are the subkeys of (package stateclaim hands it on)
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
	k := &stateKeys{kr: kr, bind: newMACRing(kr, bindLabel)}
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
