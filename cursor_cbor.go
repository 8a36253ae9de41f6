package ctoken

import "unicode/utf8"

// A hand-written codec for the fixed cursor payload. It produces exactly the
// bytes fxamacker/cbor's Core Deterministic Encoding produces for cursorWire
// and decodes without reflection or allocation; cbor_fuzz_test.go checks
// both directions against fxamacker/cbor.
//
// The decoder accepts exactly the canonical encodings: input that the strict
// fxamacker DecMode (cursorDecMode) decodes into a cursorWire AND that
// re-encodes, under Core Deterministic Encoding, to the very same bytes.
// Concretely it refuses:
//   - anything but one definite-length map of 6 to 8 pairs, with nothing
//     after it (trailing bytes);
//   - indefinite lengths, tags, floats and simple values;
//   - non-minimal heads (a length or integer that fits a shorter form);
//   - keys out of ascending order, duplicate keys and unknown keys;
//   - a missing key 1, 2, 3, 5, 6 or 7; keys 4 (args) and 8 (state) are
//     optional but, when present, non-empty (the encoder omits them empty);
//   - a value of the wrong major type (null included), a page over 2^32-1 or an issued-at
//     outside int64;
//   - text that is not valid UTF-8.
//
// Only a holder of the MAC key can produce a body the decoder ever sees on
// the success path, so this strictness costs nothing and leaves exactly one
// spelling of every payload.

// CBOR major types, shifted into the initial byte.
const (
	cborUint  = 0 << 5
	cborNeg   = 1 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborMap   = 5 << 5
)

// cursorBody is a cursor body to encode.
type cursorBody struct {
	version uint64
	tool    string
	caller  string
	args    []byte // omitted when empty
	page    uint32
	issued  int64
	session []byte
	state   []byte // omitted when empty
}

// cursorFields is a decoded cursor body. Slices alias the decoded input.
type cursorFields struct {
	version uint64
	tool    []byte
	caller  []byte
	args    []byte // nil when absent
	page    uint32
	issued  int64
	session []byte
	state   []byte // nil when absent
}

// cborHeadLen is the length of the minimal head for argument n.
func cborHeadLen(n uint64) int {
	switch {
	case n < 24:
		return 1
	case n <= 0xff:
		return 2
	case n <= 0xffff:
		return 3
	case n <= 0xffffffff:
		return 5
	}
	return 9
}

// appendCBORHead appends the minimal head of major type major with argument n.
func appendCBORHead(dst []byte, major byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(dst, major|byte(n))
	case n <= 0xff:
		return append(dst, major|24, byte(n))
	case n <= 0xffff:
		return append(dst, major|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(dst, major|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, major|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
		byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// cborIntHead returns the major type and argument encoding v.
func cborIntHead(v int64) (byte, uint64) {
	if v < 0 {
		return cborNeg, uint64(-(v + 1))
	}
	return cborUint, uint64(v)
}

// cursorBodyLen returns the length of the encoding of f.
func cursorBodyLen(f *cursorBody) int {
	n := 1 + // map head (at most 8 pairs)
		1 + cborHeadLen(f.version) +
		1 + cborHeadLen(uint64(len(f.tool))) + len(f.tool) +
		1 + cborHeadLen(uint64(len(f.caller))) + len(f.caller) +
		1 + cborHeadLen(uint64(f.page)) +
		1 + cborHeadLen(uint64(len(f.session))) + len(f.session)
	_, iv := cborIntHead(f.issued)
	n += 1 + cborHeadLen(iv)
	if len(f.args) > 0 {
		n += 1 + cborHeadLen(uint64(len(f.args))) + len(f.args)
	}
	if len(f.state) > 0 {
		n += 1 + cborHeadLen(uint64(len(f.state))) + len(f.state)
	}
	return n
}

// appendCursorBody appends the Core Deterministic Encoding of f: a map with
// integer keys in ascending order, args and state omitted when empty.
func appendCursorBody(dst []byte, f *cursorBody) []byte {
	pairs := uint64(6)
	if len(f.args) > 0 {
		pairs++
	}
	if len(f.state) > 0 {
		pairs++
	}
	dst = appendCBORHead(dst, cborMap, pairs)
	dst = append(dst, 1)
	dst = appendCBORHead(dst, cborUint, f.version)
	dst = append(dst, 2)
	dst = appendCBORHead(dst, cborText, uint64(len(f.tool)))
	dst = append(dst, f.tool...)
	dst = append(dst, 3)
	dst = appendCBORHead(dst, cborText, uint64(len(f.caller)))
	dst = append(dst, f.caller...)
	if len(f.args) > 0 {
		dst = append(dst, 4)
		dst = appendCBORHead(dst, cborBytes, uint64(len(f.args)))
		dst = append(dst, f.args...)
	}
	dst = append(dst, 5)
	dst = appendCBORHead(dst, cborUint, uint64(f.page))
	dst = append(dst, 6)
	major, n := cborIntHead(f.issued)
	dst = appendCBORHead(dst, major, n)
	dst = append(dst, 7)
	dst = appendCBORHead(dst, cborBytes, uint64(len(f.session)))
	dst = append(dst, f.session...)
	if len(f.state) > 0 {
		dst = append(dst, 8)
		dst = appendCBORHead(dst, cborBytes, uint64(len(f.state)))
		dst = append(dst, f.state...)
	}
	return dst
}

// cborReader reads canonical CBOR heads from in.
type cborReader struct {
	in  []byte
	pos int
}

// head reads a head of major type major with a minimally encoded argument.
func (r *cborReader) head(major byte) (uint64, bool) {
	if r.pos >= len(r.in) {
		return 0, false
	}
	b := r.in[r.pos]
	if b&0xe0 != major {
		return 0, false
	}
	r.pos++
	info := b & 0x1f
	if info < 24 {
		return uint64(info), true
	}
	var size int
	switch info {
	case 24:
		size = 1
	case 25:
		size = 2
	case 26:
		size = 4
	case 27:
		size = 8
	default: // 28-30 reserved, 31 indefinite length
		return 0, false
	}
	if len(r.in)-r.pos < size {
		return 0, false
	}
	var n uint64
	for _, c := range r.in[r.pos : r.pos+size] {
		n = n<<8 | uint64(c)
	}
	r.pos += size
	if cborHeadLen(n) != 1+size { // not the shortest form
		return 0, false
	}
	return n, true
}

// str reads a byte or text string of major type major and returns it,
// aliasing the input.
func (r *cborReader) str(major byte) ([]byte, bool) {
	n, ok := r.head(major)
	if !ok || n > uint64(len(r.in)-r.pos) {
		return nil, false
	}
	s := r.in[r.pos : r.pos+int(n)]
	r.pos += int(n)
	if major == cborText && !utf8.Valid(s) {
		return nil, false
	}
	return s, true
}

// decodeCursorBody decodes a canonical cursor body (see the top of this
// file). The slices of f alias in.
func decodeCursorBody(in []byte) (f cursorFields, ok bool) {
	r := cborReader{in: in}
	pairs, ok := r.head(cborMap)
	if !ok || pairs < 6 || pairs > 8 {
		return cursorFields{}, false
	}
	var seen uint // bit k set once key k is read
	last := uint64(0)
	for range pairs {
		key, ok := r.head(cborUint)
		if !ok || key <= last || key > 8 {
			return cursorFields{}, false
		}
		last = key
		seen |= 1 << key
		switch key {
		case 1:
			f.version, ok = r.head(cborUint)
		case 2:
			f.tool, ok = r.str(cborText)
		case 3:
			f.caller, ok = r.str(cborText)
		case 4:
			f.args, ok = r.str(cborBytes)
			ok = ok && len(f.args) > 0
		case 5:
			var v uint64
			v, ok = r.head(cborUint)
			ok = ok && v <= 0xffffffff
			f.page = uint32(v)
		case 6:
			f.issued, ok = r.int64()
		case 7:
			f.session, ok = r.str(cborBytes)
		case 8:
			f.state, ok = r.str(cborBytes)
			ok = ok && len(f.state) > 0
		}
		if !ok {
			return cursorFields{}, false
		}
	}
	const required = 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7
	if seen&required != required || r.pos != len(in) {
		return cursorFields{}, false
	}
	return f, true
}

// int64 reads an unsigned or negative integer that fits an int64.
func (r *cborReader) int64() (int64, bool) {
	if r.pos >= len(r.in) {
		return 0, false
	}
	major := r.in[r.pos] & 0xe0
	if major != cborUint && major != cborNeg {
		return 0, false
	}
	n, ok := r.head(major)
	if !ok || n > 1<<63-1 {
		return 0, false
	}
	if major == cborNeg {
		return -1 - int64(n), true
	}
	return int64(n), true
}
