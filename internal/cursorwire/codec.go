package cursorwire

// The CBOR primitives of the hand-written cursor codec (codec_v2.go): minimal
// heads and a reader of canonical heads, with which each decoder reads its
// map's keys in the one order they can come in. The decoders accept exactly
// the canonical encodings: input that the strict fxamacker DecMode
// (codec_test.go's decMode) decodes into the matching struct AND that
// re-encodes, under Core Deterministic Encoding, to the very same bytes.
// Concretely they refuse:
//   - anything but one definite-length map of the layout's pairs;
//   - indefinite lengths, tags, floats and simple values;
//   - non-minimal heads (a length or integer that fits a shorter form);
//   - keys out of ascending order, duplicate keys and unknown keys;
//   - a missing required key; key 8 (state) is optional but, when present,
//     non-empty (the encoder omits it empty);
//   - a value of the wrong major type (null included), a key id that is not
//     4 bytes, a page over 2^32-1 or an issued-at outside int64.
//
// Only a holder of the key can produce a body the decoder ever sees on
// the success path, so this strictness costs nothing and leaves exactly one
// spelling of every cursor.

// CBOR major types, shifted into the initial byte.
const (
	cborUint  = 0 << 5
	cborNeg   = 1 << 5
	cborBytes = 2 << 5
	cborMap   = 5 << 5
)

// Fields is a decoded cursor map. Slices alias the decoded input.
type Fields struct {
	Version uint64
	KeyID   []byte
	Page    uint32
	Issued  int64
	Session []byte
	State   []byte // nil when absent
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
	return s, true
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
