package ctoken

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// RequestStateMode selects how a request state is protected.
type RequestStateMode uint8

const (
	// Signed states ("v1.") are HMAC-SHA256 authenticated; the client can
	// read the state but not change it.
	Signed RequestStateMode = iota
	// Encrypted states ("v1e.") are AES-256-GCM sealed; the client can
	// neither read nor change them.
	Encrypted
)

// RequestStateBinding selects what a request state is bound to.
type RequestStateBinding uint8

const (
	// BindSubject binds a state to the authenticated subject.
	BindSubject RequestStateBinding = iota
	// BindSubjectAndTool binds a state to the subject and the tool (for MCP,
	// MCPTarget(method, name)).
	BindSubjectAndTool
	// BindNone binds a state to nothing: any caller may present it.
	BindNone
)

const (
	// DefaultStateTTL is the request-state lifetime when TTL is 0.
	DefaultStateTTL = 5 * time.Minute
	// DefaultStateMaxBytes is the encoded size cap when MaxBytes is 0.
	DefaultStateMaxBytes = 16 << 10

	// HKDF info labels shared with the reference implementation.
	stateAESLabel     = "mcp.requestState aes-256-gcm key"
	stateBindLabel    = "mcp.requestState bind-hmac key"
	statePayloadLabel = "mcp.requestState payload-hmac key"

	signedPrefix    = "v1."
	encryptedPrefix = "v1e."
	gcmNonceSize    = 12
	gcmTagSize      = 16
)

// RequestStateSecurity configures a RequestStateCodec. The zero value is
// usable: signed, bound to the subject, 5-minute TTL, 16 KiB cap and an
// ephemeral random key.
type RequestStateSecurity struct {
	// Keys seals (primary) and opens (all) states. Nil means an ephemeral
	// random key: states then survive neither a restart nor a hop to
	// another instance, so use it only for a single process.
	Keys *Keyring
	// Mode is Signed (the zero value) or Encrypted. A codec decodes only
	// states of its own mode.
	Mode RequestStateMode
	// Binding is BindSubject (the zero value), BindSubjectAndTool or BindNone.
	Binding RequestStateBinding
	// TTL is the state lifetime; 0 means DefaultStateTTL. Negative is an
	// error: every state expires.
	TTL time.Duration
	// MaxBytes caps the encoded length, checked before decoding; 0 means
	// DefaultStateMaxBytes.
	MaxBytes int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Replay, if set, makes every state single-use: Decode accepts a given
	// state at most once, recording it in Replay until it expires, and
	// refuses it afterwards with ErrStateReplayed. Nil (the default) keeps
	// states reusable until they expire. See DecodeContext.
	//
	// A state is identified by its authenticator: the MAC of a Signed state,
	// the GCM nonce and tag of an Encrypted one. Signed encoding is
	// deterministic, so two Encode calls with the same state, binding and
	// expiry second yield the same wire string and count as one state; put a
	// unique value (a step counter, a random ID) in the state, or use
	// Encrypted, whose random nonce makes every encoding distinct.
	Replay ReplayStore
}

// RequestStateCodec seals and opens MCP multi-round-trip requestState
// values. Its wire formats are those of the reference D implementation (see
// the package documentation), so a mixed fleet sharing keys shares state.
// It is safe for concurrent use.
type RequestStateCodec struct {
	mode      RequestStateMode
	binding   RequestStateBinding
	ttl       time.Duration
	maxBytes  int
	now       func() time.Time
	ephemeral bool
	replay    ReplayStore // nil: states are reusable

	bind    macRing
	payload macRing  // Signed
	aead    aeadRing // Encrypted
}

// NewRequestStateCodec returns a codec for sec.
func NewRequestStateCodec(sec RequestStateSecurity) (*RequestStateCodec, error) {
	if sec.Mode > Encrypted {
		return nil, errors.New("ctoken: unknown RequestStateMode")
	}
	if sec.Binding > BindNone {
		return nil, errors.New("ctoken: unknown RequestStateBinding")
	}
	if sec.TTL < 0 || sec.MaxBytes < 0 {
		return nil, errors.New("ctoken: negative RequestStateSecurity.TTL or MaxBytes")
	}
	c := &RequestStateCodec{
		mode:     sec.Mode,
		binding:  sec.Binding,
		ttl:      sec.TTL,
		maxBytes: sec.MaxBytes,
		now:      sec.Now,
		replay:   sec.Replay,
	}
	if c.ttl == 0 {
		c.ttl = DefaultStateTTL
	}
	if c.maxBytes == 0 {
		c.maxBytes = DefaultStateMaxBytes
	}
	if c.now == nil {
		c.now = time.Now
	}
	kr := sec.Keys
	if kr == nil {
		var err error
		if kr, err = NewKeyring(RandomKey()); err != nil {
			return nil, err
		}
		c.ephemeral = true
	}
	c.bind = newMACRing(kr, stateBindLabel)
	if c.mode == Encrypted {
		var err error
		if c.aead, err = newAEADRing(kr, stateAESLabel); err != nil {
			return nil, err
		}
	} else {
		c.payload = newMACRing(kr, statePayloadLabel)
	}
	return c, nil
}

// Ephemeral reports whether the codec runs on a random key of its own
// because RequestStateSecurity.Keys was nil.
func (c *RequestStateCodec) Ephemeral() bool { return c.ephemeral }

// MCPTarget returns method + "\x00" + name, the tool argument the MCP
// dispatch path binds request state to.
func MCPTarget(method, name string) string { return method + "\x00" + name }

// bindTag appends hex(HMAC-SHA256(bindKey, material)) to dst. An empty
// subject binds to nothing, whatever the binding: its material is empty,
// as for BindNone.
func (c *RequestStateCodec) bindTag(dst []byte, key int, subject, tool string) []byte {
	var material []byte
	if subject != "" {
		switch c.binding {
		case BindSubject:
			material = []byte(subject)
		case BindSubjectAndTool:
			material = []byte(subject + "\x00" + tool)
		}
	}
	var mac [macSize]byte
	return hex.AppendEncode(dst, c.bind[key].sum(mac[:0], material))
}

var errStateNotUTF8 = errors.New("ctoken: request state is not valid UTF-8")

// Encode seals state for subject (and tool, under BindSubjectAndTool),
// expiring after the codec's TTL. state must be valid UTF-8 (it travels as a
// JSON string); ErrStateTooLarge reports a result over MaxBytes.
func (c *RequestStateCodec) Encode(state, subject, tool string) (string, error) {
	if !utf8.ValidString(state) {
		return "", errStateNotUTF8
	}
	tag := c.bindTag(make([]byte, 0, 2*macSize), 0, subject, tool)
	payload := make([]byte, 0, len(state)+len(tag)+48)
	payload = append(payload, `{"s":`...)
	payload = appendJCSString(payload, state)
	payload = append(payload, `,"exp":`...)
	payload = strconv.AppendInt(payload, c.now().Add(c.ttl).Unix(), 10)
	payload = append(payload, `,"b":"`...)
	payload = append(payload, tag...)
	payload = append(payload, `"}`...)

	var wire []byte
	if c.mode == Encrypted {
		sealed := make([]byte, gcmNonceSize, gcmNonceSize+len(payload)+gcmTagSize)
		rand.Read(sealed)
		sealed = c.aead[0].Seal(sealed, sealed, payload, tag)
		wire = make([]byte, 0, len(encryptedPrefix)+b64.EncodedLen(len(sealed)))
		wire = append(wire, encryptedPrefix...)
		wire = b64.AppendEncode(wire, sealed)
	} else {
		var mac [macSize]byte
		wire = make([]byte, 0, len(signedPrefix)+b64.EncodedLen(len(payload))+1+b64.EncodedLen(macSize))
		wire = append(wire, signedPrefix...)
		wire = b64.AppendEncode(wire, payload)
		wire = append(wire, '.')
		wire = b64.AppendEncode(wire, c.payload[0].sum(mac[:0], payload))
	}
	if len(wire) > c.maxBytes {
		return "", ErrStateTooLarge
	}
	return string(wire), nil
}

// Rejections, allocated once.
var (
	errStateEmpty     = reject(ErrStateInvalid, "empty")
	errStateOversize  = reject(ErrStateInvalid, "over MaxBytes")
	errStateMode      = reject(ErrStateInvalid, "unknown prefix or other mode")
	errStateBase64    = reject(ErrStateInvalid, "not base64url")
	errStateFraming   = reject(ErrStateInvalid, "malformed framing")
	errStateMAC       = reject(ErrStateInvalid, "mac mismatch")
	errStateOpen      = reject(ErrStateInvalid, "decryption failed (tampered, other key, or other subject/tool)")
	errStateMalformed = reject(ErrStateInvalid, "malformed payload")
	errStateBinding   = reject(ErrStateInvalid, "bound to another subject or tool")
	errStateExpired   = reject(ErrStateExpired, "past exp")
)

// Decode opens wire, checks that it is bound to subject (and tool) and not
// expired, and returns the state. It tries every key of the ring. It is
// fail-closed: on any error the state is "". Errors match ErrStateExpired
// for an authentic state past its expiry and ErrStateInvalid for anything
// else (and, in single-use mode, ErrStateReplayed; see DecodeContext).
// It is DecodeContext with context.Background().
func (c *RequestStateCodec) Decode(wire, subject, tool string) (string, error) {
	return c.DecodeContext(context.Background(), wire, subject, tool)
}

// DecodeContext is Decode with a context for the replay store. In
// single-use mode (RequestStateSecurity.Replay set), after every other check
// has passed, the state is claimed in the store until its expiry: the first
// decode of a state succeeds and every later or concurrent one fails with
// ErrStateReplayed. A state refused for its binding or expiry is not
// consumed. A store failure (for example ErrReplayStoreFull, or ctx's error)
// is returned wrapped and the state is refused. Without Replay, ctx is unused.
func (c *RequestStateCodec) DecodeContext(ctx context.Context, wire, subject, tool string) (string, error) {
	if len(wire) == 0 {
		return "", errStateEmpty
	}
	if len(wire) > c.maxBytes {
		return "", errStateOversize
	}
	var payload, id []byte // id: the state's authenticator, its replay-store key
	key := -1
	switch {
	case c.mode == Signed && strings.HasPrefix(wire, signedPrefix):
		body, macText, ok := strings.Cut(wire[len(signedPrefix):], ".")
		if !ok || len(macText) != b64.EncodedLen(macSize) {
			return "", errStateFraming
		}
		raw := make([]byte, b64.DecodedLen(len(body))+macSize)
		n, err := b64.Decode(raw, []byte(body))
		if err != nil {
			return "", errStateBase64
		}
		mac := raw[n : n+macSize]
		if m, err := b64.Decode(mac, []byte(macText)); err != nil || m != macSize {
			return "", errStateBase64
		}
		payload, id = raw[:n], mac
		if key = c.payload.verify(payload, mac); key < 0 {
			return "", errStateMAC
		}
	case c.mode == Encrypted && strings.HasPrefix(wire, encryptedPrefix):
		raw, err := b64.DecodeString(wire[len(encryptedPrefix):])
		if err != nil {
			return "", errStateBase64
		}
		if len(raw) < gcmNonceSize+gcmTagSize {
			return "", errStateFraming
		}
		nonce, sealed := raw[:gcmNonceSize], raw[gcmNonceSize:]
		var tag [2 * macSize]byte
		for i, aead := range c.aead {
			pt, err := aead.Open(sealed[:0:0], nonce, sealed, c.bindTag(tag[:0], i, subject, tool))
			if err == nil {
				payload, key = pt, i
				id = append(nonce[:gcmNonceSize:gcmNonceSize], sealed[len(sealed)-gcmTagSize:]...)
				break
			}
		}
		if key < 0 {
			return "", errStateOpen
		}
	default:
		return "", errStateMode
	}
	s, exp, b, ok := parseStatePayload(payload)
	if !ok {
		return "", errStateMalformed
	}
	var want [2 * macSize]byte
	if subtle.ConstantTimeCompare(c.bindTag(want[:0], key, subject, tool), b) != 1 {
		return "", errStateBinding
	}
	if exp < c.now().Unix() {
		return "", errStateExpired
	}
	if c.replay != nil {
		if err := c.claimOnce(ctx, id, exp); err != nil {
			return "", err
		}
	}
	return s, nil
}

// parseStatePayload strictly parses {"s":string,"exp":integer,"b":string}:
// members in any order, each exactly once, no others.
func parseStatePayload(in []byte) (s string, exp int64, b []byte, ok bool) {
	p := jcsParser{in: in}
	var seen [3]bool
	p.skipSpace()
	if p.pos >= len(in) || in[p.pos] != '{' {
		return "", 0, nil, false
	}
	p.pos++
	for {
		p.skipSpace()
		if p.pos >= len(in) || in[p.pos] != '"' {
			return "", 0, nil, false
		}
		name, err := p.string()
		if err != nil {
			return "", 0, nil, false
		}
		p.skipSpace()
		if p.pos >= len(in) || in[p.pos] != ':' {
			return "", 0, nil, false
		}
		p.pos++
		p.skipSpace()
		if p.pos >= len(in) {
			return "", 0, nil, false
		}
		var field int
		switch name {
		case "s", "b":
			if in[p.pos] != '"' {
				return "", 0, nil, false
			}
			v, err := p.string()
			if err != nil {
				return "", 0, nil, false
			}
			if name == "s" {
				s, field = v, 0
			} else {
				b, field = []byte(v), 2
			}
		case "exp":
			start := p.pos
			if in[p.pos] == '-' {
				p.pos++
			}
			for p.pos < len(in) && '0' <= in[p.pos] && in[p.pos] <= '9' {
				p.pos++
			}
			text := string(in[start:p.pos])
			if len(text) > 1 && (text[0] == '0' || strings.HasPrefix(text, "-0")) {
				return "", 0, nil, false // leading zeros are not JSON
			}
			if exp, err = strconv.ParseInt(text, 10, 64); err != nil {
				return "", 0, nil, false
			}
			field = 1
		default:
			return "", 0, nil, false
		}
		if seen[field] {
			return "", 0, nil, false
		}
		seen[field] = true
		p.skipSpace()
		if p.pos >= len(in) {
			return "", 0, nil, false
		}
		if in[p.pos] == ',' {
			p.pos++
			continue
		}
		if in[p.pos] != '}' {
			return "", 0, nil, false
		}
		p.pos++
		break
	}
	p.skipSpace()
	if p.pos != len(in) || !seen[0] || !seen[1] || !seen[2] {
		return "", 0, nil, false
	}
	return s, exp, b, true
}

// EncodeJSON encodes v with encoding/json and seals it with c.Encode.
func EncodeJSON[T any](c *RequestStateCodec, v T, subject, tool string) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("ctoken: encoding request state: %w", err)
	}
	return c.Encode(string(b), subject, tool)
}

var errStateJSON = reject(ErrStateInvalid, "state is not JSON of the requested type")

// DecodeJSON opens wire with c.Decode and decodes the state into a T. It is
// fail-closed: on any error the result is T's zero value.
func DecodeJSON[T any](c *RequestStateCodec, wire, subject, tool string) (T, error) {
	var zero T
	s, err := c.Decode(wire, subject, tool)
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return zero, errStateJSON
	}
	return v, nil
}
