package ctoken

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/jcs"
	"github.com/ctoken/ctoken/observe"
)

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
