package cursorwire

// The codec of the version 2 body and of the two maps of a sealed cursor:
// the same canonical CBOR as [AppendBody] and [DecodeBody] (the decoder
// refuses everything but the one encoding fxamacker/cbor's Core
// Deterministic Encoding writes for [PayloadV2], [SealedHeader] and
// [SealedInner]; codec_v2_test.go checks both directions).

// BodyV2 is a version 2 body to encode.
type BodyV2 struct {
	Version uint64
	Page    uint32
	Issued  int64
	Session []byte // the session tag
	State   []byte // omitted when empty
}

// SealedInner is the encrypted map of a sealed cursor as fxamacker/cbor
// reads it.
type SealedInner struct {
	Page  uint64 `cbor:"5,keyasint"`
	State []byte `cbor:"8,keyasint,omitempty"`
}

// V2Len returns the length of the encoding of b.
func V2Len(b *BodyV2) int {
	_, iv := cborIntHead(b.Issued)
	n := 1 + // map head (at most 5 pairs)
		1 + cborHeadLen(b.Version) +
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
	pairs := uint64(4)
	if len(b.State) > 0 {
		pairs++
	}
	dst = appendCBORHead(dst, cborMap, pairs)
	dst = append(dst, KeyVersion)
	dst = appendCBORHead(dst, cborUint, b.Version)
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

// appendIssuedSession appends pairs 6 and 7.
func appendIssuedSession(dst []byte, issued int64, session []byte) []byte {
	dst = append(dst, KeyIssued)
	major, n := cborIntHead(issued)
	dst = appendCBORHead(dst, major, n)
	dst = append(dst, KeySession)
	dst = appendCBORHead(dst, cborBytes, uint64(len(session)))
	return append(dst, session...)
}

// DecodeV2 decodes a canonical version 2 body: keys 1, 5, 6, 7 and
// optionally 8 (non-empty), nothing after the map. It checks no value's
// meaning (the version, the length of the session tag): the issuer does,
// after the MAC. The slices of f alias in. It never allocates.
//
// It accepts exactly what decodeMap accepts for these keys (a key below 24
// has the one-byte head that is the key itself), read in the one order the
// keys can come in rather than through decodeMap's loop: the differential
// tests and FuzzCursorV2Decode hold both to fxamacker/cbor.
func DecodeV2(in []byte) (f Fields, ok bool) {
	r := cborReader{in: in}
	pairs, ok := r.head(cborMap)
	if !ok || pairs < 4 || pairs > 5 || !r.key(KeyVersion) {
		return Fields{}, false
	}
	if f.Version, ok = r.head(cborUint); !ok || !r.key(KeyPage) {
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
	if pairs == 5 {
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

// key reads the one-byte head of map key k (below 24).
func (r *cborReader) key(k byte) bool {
	if r.pos < len(r.in) && r.in[r.pos] == k {
		r.pos++
		return true
	}
	return false
}

// SealedHeaderLen returns the length of the header AppendSealedHeader
// writes.
func SealedHeaderLen(version uint64, issued int64, session []byte) int {
	_, iv := cborIntHead(issued)
	return 1 + 1 + cborHeadLen(version) + 1 + cborHeadLen(iv) +
		1 + cborHeadLen(uint64(len(session))) + len(session)
}

// AppendSealedHeader appends the clear header of a sealed cursor: the
// canonical map { 1: version, 6: issued, 7: session }.
func AppendSealedHeader(dst []byte, version uint64, issued int64, session []byte) []byte {
	dst = appendCBORHead(dst, cborMap, 3)
	dst = append(dst, KeyVersion)
	dst = appendCBORHead(dst, cborUint, version)
	return appendIssuedSession(dst, issued, session)
}

// DecodeSealedHeader decodes the canonical header at the start of in and
// returns it (Version, Issued and Session set) and its length; what
// follows is the nonce and ciphertext. The slices of f alias in.
func DecodeSealedHeader(in []byte) (f Fields, n int, ok bool) {
	const keys = 1<<KeyVersion | 1<<KeyIssued | 1<<KeySession
	return decodeMap(in, keys, keys)
}

// SealedInnerLen returns the length of the map AppendSealedInner writes.
func SealedInnerLen(page uint32, state []byte) int {
	n := 1 + 1 + cborHeadLen(uint64(page))
	if len(state) > 0 {
		n += 1 + cborHeadLen(uint64(len(state))) + len(state)
	}
	return n
}

// AppendSealedInner appends the plaintext of a sealed cursor: the
// canonical map { 5: page, 8: state (omitted when empty) }.
func AppendSealedInner(dst []byte, page uint32, state []byte) []byte {
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

// DecodeSealedInner decodes the canonical plaintext of a sealed cursor
// (Page and State set), nothing after the map.
func DecodeSealedInner(in []byte) (f Fields, ok bool) {
	f, n, ok := decodeMap(in, 1<<KeyPage|1<<KeyState, 1<<KeyPage)
	if !ok || n != len(in) {
		return Fields{}, false
	}
	return f, true
}
