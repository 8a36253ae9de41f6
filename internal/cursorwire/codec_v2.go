package cursorwire

// The codec of the signed body and of the two maps of a sealed cursor: the
// canonical CBOR fxamacker/cbor's Core Deterministic Encoding writes for
// [PayloadV2], [SealedHeader] and [SealedInner] (codec_v2_test.go checks
// both directions), without reflection or allocation.

import "bytes"

// BodyV2 is a signed body to encode.
type BodyV2 struct {
	Version uint64
	KeyID   []byte // KeyIDSize bytes
	Page    uint32
	Issued  int64
	Session []byte // the session tag
	State   []byte // omitted when empty
}

// SealedInner is the encrypted map of a sealed cursor as fxamacker/cbor
// reads it (without its padding).
type SealedInner struct {
	Page  uint64 `cbor:"5,keyasint"`
	State []byte `cbor:"8,keyasint,omitempty"`
}

// V2Len returns the length of the encoding of b.
func V2Len(b *BodyV2) int {
	_, iv := cborIntHead(b.Issued)
	n := 1 + // map head (at most 6 pairs)
		1 + cborHeadLen(b.Version) +
		1 + cborHeadLen(uint64(len(b.KeyID))) + len(b.KeyID) +
		1 + cborHeadLen(uint64(b.Page)) +
		1 + cborHeadLen(iv) +
		1 + cborHeadLen(uint64(len(b.Session))) + len(b.Session)
	if len(b.State) > 0 {
		n += 1 + cborHeadLen(uint64(len(b.State))) + len(b.State)
	}
	return n
}

// AppendV2 appends the Core Deterministic Encoding of b.
func AppendV2(dst []byte, b *BodyV2) []byte {
	pairs := uint64(5)
	if len(b.State) > 0 {
		pairs++
	}
	dst = appendCBORHead(dst, cborMap, pairs)
	dst = appendVersionKeyID(dst, b.Version, b.KeyID)
	dst = append(dst, KeyPage)
	dst = appendCBORHead(dst, cborUint, uint64(b.Page))
	dst = appendIssuedSession(dst, b.Issued, b.Session)
	if len(b.State) > 0 {
		dst = append(dst, KeyState)
		dst = appendCBORHead(dst, cborBytes, uint64(len(b.State)))
		dst = append(dst, b.State...)
	}
	return dst
}

// appendVersionKeyID appends pairs 1 and 2.
func appendVersionKeyID(dst []byte, version uint64, keyID []byte) []byte {
	dst = append(dst, KeyVersion)
	dst = appendCBORHead(dst, cborUint, version)
	dst = append(dst, KeyKeyID)
	dst = appendCBORHead(dst, cborBytes, uint64(len(keyID)))
	return append(dst, keyID...)
}

// appendIssuedSession appends pairs 6 and 7.
func appendIssuedSession(dst []byte, issued int64, session []byte) []byte {
	dst = append(dst, KeyIssued)
	major, n := cborIntHead(issued)
	dst = appendCBORHead(dst, major, n)
	dst = append(dst, KeySession)
	dst = appendCBORHead(dst, cborBytes, uint64(len(session)))
	return append(dst, session...)
}

// DecodeV2 decodes a canonical signed body: keys 1, 2 (4 bytes), 5, 6, 7
// and optionally 8 (non-empty), nothing after the map. It checks no
// value's meaning (the version, the length of the session tag): the issuer
// does, after the MAC. The slices of f alias in. It never allocates.
//
// It reads the keys in the one order they can come in (a key below 24 has
// the one-byte head that is the key itself), accepting exactly the
// canonical encodings codec.go lists: the differential tests and
// FuzzCursorV2Decode hold it to fxamacker/cbor.
func DecodeV2(in []byte) (f Fields, ok bool) {
	r := cborReader{in: in}
	pairs, ok := r.head(cborMap)
	if !ok || pairs < 5 || pairs > 6 || !r.key(KeyVersion) {
		return Fields{}, false
	}
	if f.Version, ok = r.head(cborUint); !ok || !r.key(KeyKeyID) {
		return Fields{}, false
	}
	if f.KeyID, ok = r.str(cborBytes); !ok || len(f.KeyID) != KeyIDSize || !r.key(KeyPage) {
		return Fields{}, false
	}
	page, ok := r.head(cborUint)
	if !ok || page > 0xffffffff || !r.key(KeyIssued) {
		return Fields{}, false
	}
	f.Page = uint32(page)
	if f.Issued, ok = r.int64(); !ok || !r.key(KeySession) {
		return Fields{}, false
	}
	if f.Session, ok = r.str(cborBytes); !ok {
		return Fields{}, false
	}
	if pairs == 6 {
		if !r.key(KeyState) {
			return Fields{}, false
		}
		if f.State, ok = r.str(cborBytes); !ok || len(f.State) == 0 {
			return Fields{}, false
		}
	}
	if r.pos != len(in) {
		return Fields{}, false
	}
	return f, true
}

// key reads the one-byte head k: a map key below 24, or the head of a map
// of fewer than 24 pairs.
func (r *cborReader) key(k byte) bool {
	if r.pos < len(r.in) && r.in[r.pos] == k {
		r.pos++
		return true
	}
	return false
}

// SealedHeaderLen returns the length of the header AppendSealedHeader
// writes.
func SealedHeaderLen(version uint64, keyID []byte, issued int64, session []byte) int {
	_, iv := cborIntHead(issued)
	return 1 + 1 + cborHeadLen(version) +
		1 + cborHeadLen(uint64(len(keyID))) + len(keyID) +
		1 + cborHeadLen(iv) +
		1 + cborHeadLen(uint64(len(session))) + len(session)
}

// AppendSealedHeader appends the clear header of a sealed cursor: the
// canonical map { 1: version, 2: key id, 6: issued, 7: session }.
func AppendSealedHeader(dst []byte, version uint64, keyID []byte, issued int64, session []byte) []byte {
	dst = appendCBORHead(dst, cborMap, 4)
	dst = appendVersionKeyID(dst, version, keyID)
	return appendIssuedSession(dst, issued, session)
}

// DecodeSealedHeader decodes the canonical header at the start of in and
// returns it (Version, KeyID, Issued and Session set) and its length; what
// follows is the nonce and ciphertext. The slices of f alias in.
//
// Like [DecodeV2] it reads the keys (1, 2, 6, 7, all required) in their one
// order; the differential tests and FuzzCursorV2Decode hold it to
// fxamacker/cbor.
func DecodeSealedHeader(in []byte) (f Fields, n int, ok bool) {
	r := cborReader{in: in}
	if !r.key(cborMap|4) || !r.key(KeyVersion) {
		return Fields{}, 0, false
	}
	if f.Version, ok = r.head(cborUint); !ok || !r.key(KeyKeyID) {
		return Fields{}, 0, false
	}
	if f.KeyID, ok = r.str(cborBytes); !ok || len(f.KeyID) != KeyIDSize || !r.key(KeyIssued) {
		return Fields{}, 0, false
	}
	if f.Issued, ok = r.int64(); !ok || !r.key(KeySession) {
		return Fields{}, 0, false
	}
	if f.Session, ok = r.str(cborBytes); !ok {
		return Fields{}, 0, false
	}
	return f, r.pos, true
}

// SealedInnerLen returns the length of the map AppendSealedInner writes,
// before padding.
func SealedInnerLen(page uint32, state []byte) int {
	n := 1 + 1 + cborHeadLen(uint64(page))
	if len(state) > 0 {
		n += 1 + cborHeadLen(uint64(len(state))) + len(state)
	}
	return n
}

// PaddedLen returns the length of the plaintext of a sealed cursor whose
// inner map is n bytes: n rounded up to the next multiple of [PadBlock],
// or [MaxPadded] past 4 blocks; false when n is over [MaxPadded].
func PaddedLen(n int) (int, bool) {
	switch {
	case n <= 4*PadBlock:
		return (n + PadBlock - 1) / PadBlock * PadBlock, true
	case n <= MaxPadded:
		return MaxPadded, true
	}
	return 0, false
}

// SealedPlaintextLen returns the length of the plaintext of a sealed
// cursor with this state: [PaddedLen] of the inner map written with the
// longest page, so that it depends on the state's length alone and never
// on the page; false when that is over [MaxPadded].
func SealedPlaintextLen(state []byte) (int, bool) {
	return PaddedLen(SealedInnerLen(0xffffffff, state))
}

// AppendSealedInner appends the plaintext of a sealed cursor: the
// canonical map { 5: page, 8: state (omitted when empty) }, then zero
// bytes up to [SealedPlaintextLen]. The caller checks first that
// SealedPlaintextLen accepts the state.
func AppendSealedInner(dst []byte, page uint32, state []byte) []byte {
	start := len(dst)
	dst = appendInnerMap(dst, page, state)
	padded, _ := SealedPlaintextLen(state)
	for len(dst)-start < padded {
		dst = append(dst, 0)
	}
	return dst
}

// appendInnerMap appends the inner map alone.
func appendInnerMap(dst []byte, page uint32, state []byte) []byte {
	pairs := uint64(1)
	if len(state) > 0 {
		pairs++
	}
	dst = appendCBORHead(dst, cborMap, pairs)
	dst = append(dst, KeyPage)
	dst = appendCBORHead(dst, cborUint, uint64(page))
	if len(state) > 0 {
		dst = append(dst, KeyState)
		dst = appendCBORHead(dst, cborBytes, uint64(len(state)))
		dst = append(dst, state...)
	}
	return dst
}

// DecodeSealedInner decodes the plaintext of a sealed cursor: the
// canonical inner map, then zero bytes to exactly [SealedPlaintextLen] of
// its state, nothing else. state aliases in (nil when absent). It returns
// the two values rather than a [Fields], which costs a verifier a copy of
// the whole struct at every return.
func DecodeSealedInner(in []byte) (page uint32, state []byte, ok bool) {
	page, state, n, ok := decodeInnerMap(in)
	if !ok {
		return 0, nil, false
	}
	padded, ok := SealedPlaintextLen(state)
	if !ok || len(in) != padded || !bytes.Equal(in[n:], zeroPad[:len(in)-n]) {
		return 0, nil, false
	}
	return page, state, true
}

// zeroPad is the longest padding of a sealed cursor, all zero bytes, that
// DecodeSealedInner compares the padding with.
var zeroPad [MaxPadded]byte

// decodeInnerMap decodes the canonical inner map at the start of in: key 5
// and optionally key 8 (non-empty), read in order (held to fxamacker/cbor
// like DecodeV2), and returns its length.
func decodeInnerMap(in []byte) (page uint32, state []byte, n int, ok bool) {
	r := cborReader{in: in}
	pairs, ok := r.head(cborMap)
	if !ok || pairs < 1 || pairs > 2 || !r.key(KeyPage) {
		return 0, nil, 0, false
	}
	v, ok := r.head(cborUint)
	if !ok || v > 0xffffffff {
		return 0, nil, 0, false
	}
	if pairs == 2 {
		if !r.key(KeyState) {
			return 0, nil, 0, false
		}
		if state, ok = r.str(cborBytes); !ok || len(state) == 0 {
			return 0, nil, 0, false
		}
	}
	return uint32(v), state, r.pos, true
}
