package jcs

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// Strings: read strictly, written with only the escapes RFC 8785 mandates.

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
			p.fail = errArgsSyntax
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
				p.fail = err
				return nil, false
			}
			dst = utf8.AppendRune(dst, r)
		case c < 0x20:
			p.fail = errArgsSyntax
			return nil, false
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size == 1 {
				p.fail = errArgsUTF8
				return nil, false
			}
			dst = append(dst, p.in[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// appendString appends the canonical form of the JSON string at p.pos
// (its opening quote) to out and moves p.pos past it, with the checks of
// stringInto: no raw control character, valid UTF-8, valid escapes, no
// lone surrogate. It writes the canonical form as it reads: runs of bytes
// other than '"', '\\' and control characters are copied as they are
// (validated as UTF-8 a run at a time, and only when the run holds a
// non-ASCII byte), and each escape is replaced by its canonical spelling.
// Unescaping into a buffer and escaping it again, as this package did
// before, took 1.1–2.8× as long on 1.5 KiB of text with escapes or
// non-ASCII characters (BenchmarkArgsFingerprintShapes, docs/benchmarks.md).
func (p *jcsParser) appendString(out []byte) ([]byte, bool) {
	in := p.in
	i := p.pos + 1
	out = append(out, '"')
	for {
		start := i
		var high uint64
		i, high = scanStringRun(in, i)
		if i >= len(in) {
			p.fail = errArgsSyntax
			return nil, false
		}
		run := in[start:i]
		if high&0x8080808080808080 != 0 && !utf8.Valid(run) {
			p.fail = errArgsUTF8
			return nil, false
		}
		out = append(out, run...)
		switch in[i] {
		case '"':
			p.pos = i + 1
			return append(out, '"'), true
		case '\\':
			if r, ok := unhex4(in, i+2); ok && i+1 < len(in) && in[i+1] == 'u' && !utf16.IsSurrogate(r) && r != utf8.RuneError {
				// \uXXXX outside the surrogates: the common escape of
				// non-ASCII text (Python's ensure_ascii), decoded here
				// with a table rather than through escape (CJK text so
				// escaped: 4.45× SHA-256 before, 4.0× after, one run
				// each).
				switch {
				case r >= 0x800: // three bytes of UTF-8 (not a surrogate)
					out = append(out, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
				case r < 0x20 || r == '"' || r == '\\':
					out = appendJCSEscape(out, byte(r))
				default:
					out = utf8.AppendRune(out, r)
				}
				i += 6
				continue
			}
			if i+7 < len(in) && in[i+1] == 'u' && in[i+6] == '\\' && in[i+7] == 'u' {
				// A high surrogate and the low one after it: a
				// character above U+FFFF, four bytes of UTF-8 (astral
				// text so escaped: 3.69× SHA-256 before, 2.84× after,
				// medians of 5 alternating runs). The bytes are tested
				// first, so that other escapes (\/, \t) skip the
				// digits; unhex4 checks the digits are in the input.
				// r is not below U+D800 here: the path above took every
				// other \u escape but U+FFFD, which r < 0xDC00 excludes.
				r, ok := unhex4(in, i+2)
				lo, lok := unhex4(in, i+8)
				if ok && lok && r < 0xDC00 && 0xDC00 <= lo && lo <= 0xDFFF {
					c := 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					out = append(out, 0xF0|byte(c>>18), 0x80|byte(c>>12)&0x3F, 0x80|byte(c>>6)&0x3F, 0x80|byte(c)&0x3F)
					i += 12
					continue
				}
			}
			p.pos = i
			r, err := p.escape()
			if err != nil {
				p.fail = err
				return nil, false
			}
			i = p.pos
			if r < 0x20 || r == '"' || r == '\\' {
				out = appendJCSEscape(out, byte(r))
			} else {
				out = utf8.AppendRune(out, r)
			}
		default: // a control character
			p.fail = errArgsSyntax
			return nil, false
		}
	}
}

// scanStringRun returns the index of the first byte at or after i that is
// '"', '\\' or a control character, or len(in), and a word with bit 7 set
// in some byte if a byte before it is not ASCII.
func scanStringRun(in []byte, i int) (int, uint64) {
	var high uint64
	for i+8 <= len(in) {
		x := binary.LittleEndian.Uint64(in[i:])
		if m := stringStopMask8(x); m != 0 {
			n := bits.TrailingZeros64(m) >> 3
			return i + n, high | x&(1<<(8*n)-1)
		}
		high |= x
		i += 8
	}
	for i < len(in) && in[i] >= 0x20 && in[i] != '"' && in[i] != '\\' {
		high |= uint64(in[i])
		i++
	}
	return i, high
}

// stringStopMask8 returns, for the eight bytes of x (little-endian), a mask
// with bit 7 set in each byte that is '"', '\\' or a control character
// (below 0x20), and no other bit. Unlike jsonSpecialMask8 it is exact in
// every byte and leaves non-ASCII bytes alone: each test works on the low
// seven bits, where adding 0x60 or 0x7f cannot carry into the next byte.
func stringStopMask8(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	y := x &^ highs
	ctl := y + 0x60*ones                  // bit 7 set where y >= 0x20
	quote := (y ^ '"'*ones) + 0x7f*ones   // bit 7 set where y != '"'
	bslash := (y ^ '\\'*ones) + 0x7f*ones // bit 7 set where y != '\\'
	return ^(ctl & quote & bslash) &^ x & highs
}

// plainString returns the index just past the JSON string at p.pos (its
// opening quote) when the string holds no escape and no control character
// and is valid UTF-8, so that its canonical form is its input text: RFC
// 8785 escapes nothing else. Otherwise it returns -1 and leaves p.pos.
func (p *jcsParser) plainString() int {
	in := p.in
	i := p.pos + 1
	i, high := scanStringRun(in, i)
	if i >= len(in) || in[i] != '"' {
		return -1 // unterminated, an escape or a control character
	}
	if high&0x8080808080808080 != 0 && !utf8.Valid(in[p.pos+1:i]) {
		return -1
	}
	return i + 1
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
		return 0, errArgsSyntax
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
			return 0, errArgsSyntax
		}
		if !utf16.IsSurrogate(r) {
			if r == utf8.RuneError && p.refuseFFFD {
				return 0, errArgsReplaced
			}
			return r, nil
		}
		if r >= 0xDC00 || p.pos+1 >= len(p.in) || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
			return 0, errArgsSurrogate
		}
		p.pos += 2
		lo, ok := p.hex4()
		if !ok {
			return 0, errArgsSyntax
		}
		if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
			return 0, errArgsSurrogate
		}
		return r, nil
	}
	return 0, errArgsSyntax
}

// unhex4 returns the value of the four hex digits in[i:i+4], or false if
// there are not four.
func unhex4(in []byte, i int) (rune, bool) {
	if i < 0 || len(in)-i < 4 {
		return 0, false
	}
	a, b, c, d := hexValue[in[i]], hexValue[in[i+1]], hexValue[in[i+2]], hexValue[in[i+3]]
	if a|b|c|d < 0 {
		return 0, false
	}
	return rune(a)<<12 | rune(b)<<8 | rune(c)<<4 | rune(d), true
}

// hexValue maps a hex digit to its value and every other byte to -1.
// Read-only.
var hexValue = func() (t [256]int8) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = int8(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = int8(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			t[c] = int8(c - 'A' + 10)
		default:
			t[c] = -1
		}
	}
	return t
}()

// hex4 reads the four hex digits at p.pos and moves past them, or
// reports false and leaves p.pos. It looks the digits up in hexValue, one
// test for all four, rather than branching on each digit's kind: on
// wide-unicode-names-u-escaped it took the fingerprint, together with
// keying escaped names from p.keys' capacity (canonical), from 5.66×
// SHA-256 to 5.44× (medians of 5 alternating runs).
func (p *jcsParser) hex4() (rune, bool) {
	r, ok := unhex4(p.in, p.pos)
	if ok {
		p.pos += 4
	}
	return r, ok
}

// appendJCSString appends s as a JSON string with only the escapes RFC 8785
// mandates.
func appendJCSString[S ~string | ~[]byte](out []byte, s S) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			out = appendJCSEscape(out, c)
		} else {
			out = append(out, c)
		}
	}
	return append(out, '"')
}

// appendJCSEscape appends the RFC 8785 escape of c: '"', '\\' or a control
// character.
func appendJCSEscape(out []byte, c byte) []byte {
	const hex = "0123456789abcdef"
	switch c {
	case '"', '\\':
		return append(out, '\\', c)
	case '\b':
		return append(out, '\\', 'b')
	case '\f':
		return append(out, '\\', 'f')
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	return append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
}

// AppendString appends s as a JSON string with only the escapes RFC 8785
// mandates: the request-state payload writes its state with it.
func AppendString(out []byte, s string) []byte { return appendJCSString(out, s) }

// ReadString parses the JSON string whose opening quote is in[pos] and
// appends its value to dst, with the checks of the canonical form: no raw
// control character, valid UTF-8, valid escapes, no lone surrogate. It
// returns the extended dst and the index just past the closing quote, or
// false.
func ReadString(dst, in []byte, pos int) ([]byte, int, bool) {
	p := jcsParser{in: in, pos: pos}
	v, ok := p.stringInto(dst)
	return v, p.pos, ok
}

// SpecialMask8 is jsonSpecialMask8: for the eight bytes of x
// (little-endian), a mask whose lowest set bit is bit 7 of the first byte
// a JSON string does not carry verbatim, or 0.
func SpecialMask8(x uint64) uint64 { return jsonSpecialMask8(x) }

// jsonSpecialMask8 returns, for the eight bytes of x (little-endian), a
// mask whose lowest set bit is bit 7 of the first byte that jsonPlain does
// not carry verbatim ('"', '\\', a control character or a non-ASCII byte),
// or 0 when there is none. Bits above the lowest may be spurious (borrows);
// only the lowest is meaningful. jsonSpecial8(x) is jsonSpecialMask8(x) != 0.
func jsonSpecialMask8(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	low := x - 0x20*ones
	quote := (x ^ '"'*ones) - ones
	bslash := (x ^ '\\'*ones) - ones
	return (x | low | quote | bslash) & highs
}
