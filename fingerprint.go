package ctoken

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrArgsInvalid reports arguments that are not valid I-JSON (RFC 7493):
// malformed JSON, duplicate object keys, invalid UTF-8 or lone surrogates,
// numbers outside IEEE 754 double range, or nesting deeper than
// MaxJSONDepth.
var ErrArgsInvalid = errors.New("ctoken: arguments are not valid JSON")

// MaxJSONDepth caps the nesting of arrays and objects CanonicalJSON accepts.
const MaxJSONDepth = 256

// ArgsFingerprint returns the SHA-256 of the RFC 8785 (JCS) canonical JSON of
// args. A []byte or json.RawMessage is taken as JSON text; anything else is
// marshalled with encoding/json first. Key order, white space, string
// escapes and number spelling never change the result; invalid JSON is
// ErrArgsInvalid.
func ArgsFingerprint(args any) (Fingerprint, error) {
	var text []byte
	switch v := args.(type) {
	case []byte:
		text = v
	case json.RawMessage:
		text = v
	default:
		var err error
		if text, err = json.Marshal(args); err != nil {
			return Fingerprint{}, errors.Join(ErrArgsInvalid, err)
		}
	}
	canon, err := CanonicalJSON(text)
	if err != nil {
		return Fingerprint{}, err
	}
	return sha256.Sum256(canon), nil
}

// CanonicalJSON returns the RFC 8785 (JCS) canonical form of the JSON text:
// no insignificant white space, object members sorted by the UTF-16 code
// units of their names, strings with only the mandatory escapes, and numbers
// in ECMAScript's shortest round-trip form (1.0e2 is 100, -0.0 is 0). Input
// that is not I-JSON is ErrArgsInvalid. Like every JCS implementation it
// reads numbers as IEEE 754 doubles, so integers beyond 2^53 lose precision:
// send such values as strings.
func CanonicalJSON(text []byte) ([]byte, error) {
	p := jcsParser{in: text}
	p.skipSpace()
	out, err := p.value(make([]byte, 0, len(text)), 0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.in) {
		return nil, ErrArgsInvalid
	}
	return out, nil
}

// jcsParser reads JSON text from in. The canonicalizer writes straight into
// one output buffer; keys and members are stacks shared by nested objects
// (each object uses the tail it pushed and pops it when done), so parsing
// allocates only as these buffers grow.
type jcsParser struct {
	in  []byte
	pos int

	keys    []byte      // unescaped member names of the open objects
	members []jcsMember // members of the open objects
	str     []byte      // an unescaped string value, reused
	tmp     []byte      // members of an object being reordered, reused
}

func (p *jcsParser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jcsParser) literal(out []byte, lit string) ([]byte, error) {
	if len(p.in)-p.pos < len(lit) || string(p.in[p.pos:p.pos+len(lit)]) != lit {
		return nil, ErrArgsInvalid
	}
	p.pos += len(lit)
	return append(out, lit...), nil
}

// value appends the canonical form of the value at p.pos to out.
func (p *jcsParser) value(out []byte, depth int) ([]byte, error) {
	if p.pos >= len(p.in) {
		return nil, ErrArgsInvalid
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(out, depth+1)
	case c == '[':
		return p.array(out, depth+1)
	case c == '"':
		var ok bool
		if p.str, ok = p.stringInto(p.str[:0]); !ok {
			return nil, ErrArgsInvalid
		}
		return appendJCSString(out, p.str), nil
	case c == 't':
		return p.literal(out, "true")
	case c == 'f':
		return p.literal(out, "false")
	case c == 'n':
		return p.literal(out, "null")
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number(out)
	}
	return nil, ErrArgsInvalid
}

func (p *jcsParser) array(out []byte, depth int) ([]byte, error) {
	if depth > MaxJSONDepth {
		return nil, ErrArgsInvalid
	}
	p.pos++ // '['
	out = append(out, '[')
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		return append(out, ']'), nil
	}
	for {
		var err error
		if out, err = p.value(out, depth); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.in) {
			return nil, ErrArgsInvalid
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
			out = append(out, ',')
		case ']':
			p.pos++
			return append(out, ']'), nil
		default:
			return nil, ErrArgsInvalid
		}
	}
}

// jcsMember is one object member: its unescaped name, p.keys[nameAt:nameEnd],
// and its canonical text "name":value, out[start:end].
type jcsMember struct {
	nameAt, nameEnd int
	start, end      int
}

func (p *jcsParser) object(out []byte, depth int) ([]byte, error) {
	if depth > MaxJSONDepth {
		return nil, ErrArgsInvalid
	}
	p.pos++ // '{'
	p.skipSpace()
	out = append(out, '{')
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		return append(out, '}'), nil
	}
	keysBase, membersBase := len(p.keys), len(p.members)
	defer func() { p.keys, p.members = p.keys[:keysBase], p.members[:membersBase] }()
	body := len(out)
	sorted := true
	for {
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return nil, ErrArgsInvalid
		}
		nameAt := len(p.keys)
		keys, ok := p.stringInto(p.keys)
		if !ok {
			return nil, ErrArgsInvalid
		}
		p.keys = keys
		m := jcsMember{nameAt: nameAt, nameEnd: len(p.keys)}
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return nil, ErrArgsInvalid
		}
		p.pos++
		p.skipSpace()
		if len(p.members) > membersBase {
			out = append(out, ',')
		}
		m.start = len(out)
		out = appendJCSString(out, p.keys[m.nameAt:m.nameEnd])
		out = append(out, ':')
		var err error
		if out, err = p.value(out, depth); err != nil {
			return nil, err
		}
		m.end = len(out)
		if len(p.members) > membersBase && p.compareNames(p.members[len(p.members)-1], m) >= 0 {
			sorted = false
		}
		p.members = append(p.members, m)
		p.skipSpace()
		if p.pos >= len(p.in) {
			return nil, ErrArgsInvalid
		}
		if p.in[p.pos] == ',' {
			p.pos++
			p.skipSpace()
			continue
		}
		if p.in[p.pos] != '}' {
			return nil, ErrArgsInvalid
		}
		p.pos++
		break
	}
	if !sorted {
		members := p.members[membersBase:]
		slices.SortFunc(members, p.compareNames)
		for i := 1; i < len(members); i++ {
			if p.compareNames(members[i-1], members[i]) == 0 {
				return nil, ErrArgsInvalid // duplicate name (I-JSON)
			}
		}
		// Rewrite the members in order from a copy.
		p.tmp = append(p.tmp[:0], out[body:]...)
		out = out[:body]
		for i, m := range members {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, p.tmp[m.start-body:m.end-body]...)
		}
	}
	return append(out, '}'), nil
}

// compareNames orders members by the UTF-16 code units of their names, as
// RFC 8785 requires.
func (p *jcsParser) compareNames(a, b jcsMember) int {
	return compareUTF16(p.keys[a.nameAt:a.nameEnd], p.keys[b.nameAt:b.nameEnd])
}

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code units.
// That is code point order except that a code point above U+FFFF (a
// surrogate pair, units D800-DBFF first) sorts below U+E000-U+FFFF.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			if a[0] != b[0] {
				return int(a[0]) - int(b[0])
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			if ra > 0xFFFF && rb > 0xFFFF {
				return int(ra - rb)
			}
			return int(utf16First(ra) - utf16First(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b) // the shorter, a prefix of the other, first
}

// utf16First is the first UTF-16 code unit of r, up to the exact value of a
// high surrogate: any value in D800-DBFF orders the same against the BMP
// code points valid UTF-8 can hold.
func utf16First(r rune) rune {
	if r > 0xFFFF {
		return 0xD800
	}
	return r
}

// stringInto parses the JSON string at p.pos (its opening quote) and
// appends its value to dst, with the validation of jcsParser.string: no
// raw control characters, valid UTF-8, valid escapes, no lone surrogates.
func (p *jcsParser) stringInto(dst []byte) ([]byte, bool) {
	p.pos++ // opening quote
	for {
		// Copy the run of characters that need no attention at once.
		start := p.pos
		for p.pos+8 <= len(p.in) && !jsonSpecial8(binary.LittleEndian.Uint64(p.in[p.pos:])) {
			p.pos += 8
		}
		for p.pos < len(p.in) && jsonPlain[p.in[p.pos]] {
			p.pos++
		}
		dst = append(dst, p.in[start:p.pos]...)
		if p.pos >= len(p.in) {
			return nil, false
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return dst, true
		case c == '\\':
			if p.pos+1 < len(p.in) && (p.in[p.pos+1] == '"' || p.in[p.pos+1] == '\\') {
				dst = append(dst, p.in[p.pos+1]) // the common escapes, inline
				p.pos += 2
				continue
			}
			r, err := p.escape()
			if err != nil {
				return nil, false
			}
			dst = utf8.AppendRune(dst, r)
		case c < 0x20:
			return nil, false
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			dst = append(dst, p.in[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// jsonPlain reports the bytes a JSON string carries verbatim without
// further checks: printable ASCII other than '"' and '\\'. Read-only.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsonSpecial8 reports whether any of the 8 bytes packed in x is not
// jsonPlain: a control character, '"', '\\' or a byte of a multi-byte UTF-8
// sequence. It tests all eight at once (SWAR): for a byte b, b-k borrows
// into bit 7 exactly when b < k, given bit 7 of b is clear.
func jsonSpecial8(x uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	low := x - 0x20*ones                   // bit 7 set where b < 0x20 (or b >= 0xa0)
	quote := (x ^ '"'*ones) - ones         // bit 7 set where b == '"' (or b^'"' >= 0x81)
	bslash := (x ^ '\\'*ones) - ones       // likewise for '\\'
	return (x|low|quote|bslash)&highs != 0 // x's own bit 7: non-ASCII
}

// escape parses the escape sequence at p.pos, joining surrogate pairs.
func (p *jcsParser) escape() (rune, error) {
	if p.pos+1 >= len(p.in) {
		return 0, ErrArgsInvalid
	}
	c := p.in[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return 0, ErrArgsInvalid
		}
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r >= 0xDC00 || p.pos+1 >= len(p.in) || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
			return 0, ErrArgsInvalid // lone surrogate
		}
		p.pos += 2
		lo, ok := p.hex4()
		if !ok {
			return 0, ErrArgsInvalid
		}
		if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
			return 0, ErrArgsInvalid
		}
		return r, nil
	}
	return 0, ErrArgsInvalid
}

func (p *jcsParser) hex4() (rune, bool) {
	if len(p.in)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.in[p.pos : p.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// number parses a JSON number and appends its ECMAScript form.
func (p *jcsParser) number(out []byte) ([]byte, error) {
	start := p.pos
	in := p.in
	digits := func() int {
		n := 0
		for p.pos < len(in) && '0' <= in[p.pos] && in[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	integer := true
	if in[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(in) && in[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, ErrArgsInvalid
	}
	if p.pos < len(in) && in[p.pos] == '.' {
		p.pos++
		integer = false
		if digits() == 0 {
			return nil, ErrArgsInvalid
		}
	}
	if p.pos < len(in) && (in[p.pos] == 'e' || in[p.pos] == 'E') {
		p.pos++
		integer = false
		if p.pos < len(in) && (in[p.pos] == '+' || in[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, ErrArgsInvalid
		}
	}
	lit := in[start:p.pos]
	if integer && len(lit) <= 15 {
		// Up to 15 digits, no fraction or exponent: exactly a double, and
		// ECMAScript prints it as written (leading zeros are not JSON).
		if string(lit) == "-0" {
			return append(out, '0'), nil
		}
		return append(out, lit...), nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, ErrArgsInvalid
	}
	return appendES6Number(out, f), nil
}

// appendES6Number appends f as ECMAScript's Number.prototype.toString does,
// which is what RFC 8785 requires.
func appendES6Number(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0') // also -0
	}
	format := byte('f')
	if abs := math.Abs(f); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		// Go writes e-07 and e+07 where ECMAScript writes e-7 and e+7.
		n := len(out)
		if n >= 4 && out[n-4] == 'e' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out
}

// appendJCSString appends s as a JSON string with only the escapes RFC 8785
// mandates.
func appendJCSString[S ~string | ~[]byte](out []byte, s S) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			if c < 0x20 {
				out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			} else {
				out = append(out, c)
			}
		}
	}
	return append(out, '"')
}
