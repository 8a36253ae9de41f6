package cursorwire

import "unicode/utf8"

// A hand-written codec for the fixed cursor payload. It produces exactly the
// bytes fxamacker/cbor's Core Deterministic Encoding produces for [Payload]
// and decodes without reflection or allocation; codec_test.go checks both
// directions against fxamacker/cbor.
//
// The decoder accepts exactly the canonical encodings: input that the strict
// fxamacker DecMode (codec_test.go's decMode) decodes into a [Payload] AND that
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

// Body is a cursor body to encode.
type Body struct {
	Version uint64
	Tool    string
	Caller  string
	Args    []byte // omitted when empty
	Page    uint32
	Issued  int64
	Session []byte
	State   []byte // omitted when empty
}

// Fields is a decoded cursor body. Slices alias the decoded input.
type Fields struct {
	Version uint64
	Tool    []byte
	Caller  []byte
	Args    []byte // nil when absent
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

// BodyLen returns the length of the encoding of f.
func BodyLen(f *Body) int {
	n := 1 + // map head (at most 8 pairs)
		1 + cborHeadLen(f.Version) +
		1 + cborHeadLen(uint64(len(f.Tool))) + len(f.Tool) +
		1 + cborHeadLen(uint64(len(f.Caller))) + len(f.Caller) +
		1 + cborHeadLen(uint64(f.Page)) +
		1 + cborHeadLen(uint64(len(f.Session))) + len(f.Session)
	_, iv := cborIntHead(f.Issued)
	n += 1 + cborHeadLen(iv)
	if len(f.Args) > 0 {
		n += 1 + cborHeadLen(uint64(len(f.Args))) + len(f.Args)
	}
	if len(f.State) > 0 {
		n += 1 + cborHeadLen(uint64(len(f.State))) + len(f.State)
	}
	return n
}

// AppendBody appends the Core Deterministic Encoding of f: a map with
// integer keys in ascending order, args and state omitted when empty.
func AppendBody(dst []byte, f *Body) []byte {
	pairs := uint64(6)
	if len(f.Args) > 0 {
		pairs++
	}
	if len(f.State) > 0 {
		pairs++
	}
	dst = appendCBORHead(dst, cborMap, pairs)
	dst = append(dst, KeyVersion)
	dst = appendCBORHead(dst, cborUint, f.Version)
	dst = append(dst, KeyTool)
	dst = appendCBORHead(dst, cborText, uint64(len(f.Tool)))
	dst = append(dst, f.Tool...)
	dst = append(dst, KeyCaller)
	dst = appendCBORHead(dst, cborText, uint64(len(f.Caller)))
	dst = append(dst, f.Caller...)
	if len(f.Args) > 0 {
		dst = append(dst, KeyArgs)
		dst = appendCBORHead(dst, cborBytes, uint64(len(f.Args)))
		dst = append(dst, f.Args...)
	}
	dst = append(dst, KeyPage)
	dst = appendCBORHead(dst, cborUint, uint64(f.Page))
	dst = append(dst, KeyIssued)
	major, n := cborIntHead(f.Issued)
	dst = appendCBORHead(dst, major, n)
	dst = append(dst, KeySession)
	dst = appendCBORHead(dst, cborBytes, uint64(len(f.Session)))
	dst = append(dst, f.Session...)
	if len(f.State) > 0 {
		dst = append(dst, KeyState)
		dst = appendCBORHead(dst, cborBytes, uint64(len(f.State)))
		dst = append(dst, f.State...)
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

// DecodeBody decodes a canonical version 1 cursor body (see the top of
// this file). The slices of f alias in. It never allocates.
func DecodeBody(in []byte) (f Fields, ok bool) {
	const required = 1<<KeyVersion | 1<<KeyTool | 1<<KeyCaller | 1<<KeyPage | 1<<KeyIssued | 1<<KeySession
	const allowed = required | 1<<KeyArgs | 1<<KeyState
	f, n, ok := decodeMap(in, allowed, required)
	if !ok || n != len(in) {
		return Fields{}, false
	}
	return f, true
}

// decodeMap decodes one canonical map at the start of in whose keys are a
// subset of allowed holding every key of required (bit k stands for key
// k), and returns its fields and its length. Keys 4 (args) and 8 (state),
// when present, are non-empty. The slices of f alias in.
func decodeMap(in []byte, allowed, required uint) (f Fields, n int, ok bool) {
	r := cborReader{in: in}
	pairs, ok := r.head(cborMap)
	if !ok || pairs < uint64(bitCount(required)) || pairs > uint64(bitCount(allowed)) {
		return Fields{}, 0, false
	}
	var seen uint // bit k set once key k is read
	last := uint64(0)
	for range pairs {
		key, ok := r.head(cborUint)
		if !ok || key <= last || key > MaxKey || allowed&(1<<key) == 0 {
			return Fields{}, 0, false
		}
		last = key
		seen |= 1 << key
		switch key {
		case KeyVersion:
			f.Version, ok = r.head(cborUint)
		case KeyTool:
			f.Tool, ok = r.str(cborText)
		case KeyCaller:
			f.Caller, ok = r.str(cborText)
		case KeyArgs:
			f.Args, ok = r.str(cborBytes)
			ok = ok && len(f.Args) > 0
		case KeyPage:
			var v uint64
			v, ok = r.head(cborUint)
			ok = ok && v <= 0xffffffff
			f.Page = uint32(v)
		case KeyIssued:
			f.Issued, ok = r.int64()
		case KeySession:
			f.Session, ok = r.str(cborBytes)
		case KeyState:
			f.State, ok = r.str(cborBytes)
			ok = ok && len(f.State) > 0
		}
		if !ok {
			return Fields{}, 0, false
		}
	}
	if seen&required != required {
		return Fields{}, 0, false
	}
	return f, r.pos, true
}

// bitCount returns the number of set bits of m.
func bitCount(m uint) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
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
