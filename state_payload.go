package ctoken

// The request state's JSON payload, {"s":…,"exp":…,"b":…} (see the package
// documentation): its strict parser, which reads strings with the
// canonicalizer's strict string reader (internal/jcs).

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/jcs"
	"github.com/ctoken/ctoken/internal/jsontext"
)

// payloadParser reads the payload's JSON text from in, at pos.
type payloadParser struct {
	in  []byte
	pos int
}

// skipSpace moves p.pos past JSON white space.
func (p *payloadParser) skipSpace() { p.pos = jsontext.SkipSpace(p.in, p.pos) }

// stringInto parses the JSON string at p.pos (its opening quote) and
// appends its value to dst, with the canonicalizer's checks (jcs.ReadString).
func (p *payloadParser) stringInto(dst []byte) ([]byte, bool) {
	v, end, ok := jcs.ReadString(dst, p.in, p.pos)
	p.pos = end
	return v, ok
}

// parseStatePayload strictly parses {"s":string,"exp":integer,"b":string}:
// members in any order, each exactly once, no others; white space allowed
// where JSON allows it. exp is an integer without fraction, exponent or
// leading zeros ("-0" included) that fits an int64. The value of s is
// unescaped into sbuf (heap memory of capacity len(in) or more, so it does
// not reallocate); b aliases in, or a small buffer when it has escapes.
func parseStatePayload(in, sbuf []byte) (s []byte, exp int64, b []byte, ok bool) {
	if s, exp, b, ok = parseStatePayloadFast(in, sbuf); ok {
		return s, exp, b, true
	}
	return parseStatePayloadFull(in, sbuf)
}

// parseStatePayloadFull is parseStatePayload without its fast path: the
// plain parser the fast path is differentially fuzzed against.
func parseStatePayloadFull(in, sbuf []byte) (s []byte, exp int64, b []byte, ok bool) {
	p := payloadParser{in: in}
	var seen [3]bool
	var nameBuf [8]byte
	p.skipSpace()
	if p.pos >= len(in) || in[p.pos] != '{' {
		return nil, 0, nil, false
	}
	p.pos++
	for {
		p.skipSpace()
		if p.pos >= len(in) || in[p.pos] != '"' {
			return nil, 0, nil, false
		}
		name, ok := p.stringInto(nameBuf[:0])
		if !ok {
			return nil, 0, nil, false
		}
		p.skipSpace()
		if p.pos >= len(in) || in[p.pos] != ':' {
			return nil, 0, nil, false
		}
		p.pos++
		p.skipSpace()
		if p.pos >= len(in) {
			return nil, 0, nil, false
		}
		var field int
		switch string(name) {
		case "s", "b":
			if in[p.pos] != '"' {
				return nil, 0, nil, false
			}
			if string(name) == "s" {
				if s, ok = p.stringInto(sbuf[:0]); !ok {
					return nil, 0, nil, false
				}
				field = 0
			} else {
				if b, ok = p.stringOrAlias(); !ok {
					return nil, 0, nil, false
				}
				field = 2
			}
		case "exp":
			if exp, ok = p.jsonInt64(); !ok {
				return nil, 0, nil, false
			}
			field = 1
		default:
			return nil, 0, nil, false
		}
		if seen[field] {
			return nil, 0, nil, false
		}
		seen[field] = true
		p.skipSpace()
		if p.pos >= len(in) {
			return nil, 0, nil, false
		}
		if in[p.pos] == ',' {
			p.pos++
			continue
		}
		if in[p.pos] != '}' {
			return nil, 0, nil, false
		}
		p.pos++
		break
	}
	p.skipSpace()
	if p.pos != len(in) || !seen[0] || !seen[1] || !seen[2] {
		return nil, 0, nil, false
	}
	return s, exp, b, true
}

// parseStatePayloadFast parses the one layout every encoder writes,
// {"s":"…","exp":N,"b":"<64 plain characters>"} with no white space, and
// reports false for anything else, which parseStatePayload then parses in
// full. Where it succeeds it returns what the full parser returns (the
// differential fuzz test FuzzStatePayloadParse checks the pair).
func parseStatePayloadFast(in, sbuf []byte) (s []byte, exp int64, b []byte, ok bool) {
	const head, mid, tail = `{"s":"`, `,"exp":`, `,"b":"`
	if !bytes.HasPrefix(in, []byte(head)) {
		return nil, 0, nil, false
	}
	s, end, ok := unescapeQuoteFast(in, len(head), sbuf)
	if !ok || !bytes.HasPrefix(in[end:], []byte(mid)) {
		return nil, 0, nil, false
	}
	p := payloadParser{in: in, pos: end + len(mid)}
	if exp, ok = p.jsonInt64(); !ok || !bytes.HasPrefix(in[p.pos:], []byte(tail)) {
		return nil, 0, nil, false
	}
	p.pos += len(tail)
	if len(in)-p.pos != bindTagLen+2 || in[len(in)-2] != '"' || in[len(in)-1] != '}' {
		return nil, 0, nil, false
	}
	b = in[p.pos : p.pos+bindTagLen]
	for i := 0; i < len(b); i += 8 {
		if jcs.SpecialMask8(binary.LittleEndian.Uint64(b[i:])) != 0 {
			return nil, 0, nil, false
		}
	}
	return s, exp, b, true
}

// unescapeQuoteFast unescapes the JSON string body that starts at in[i]
// (just past its opening quote) into sbuf, which has capacity len(in) or
// more, and returns the value and the index just past the closing quote.
// It knows only the escapes \" and \\ (the ones a state of JSON text needs
// most) and reports false for any other escape, a control character or
// invalid UTF-8, which the full parser then handles or refuses. Runs of
// plain characters are copied a word at a time, up to the first byte that
// needs attention (jcs.SpecialMask8).
func unescapeQuoteFast(in []byte, i int, sbuf []byte) (s []byte, end int, ok bool) {
	out := sbuf[:cap(sbuf)]
	if len(out) < len(in) {
		return nil, 0, false
	}
	j, high := 0, byte(0)
	for {
		if i+8 <= len(in) {
			// j <= i, so out[j:j+8] is in range; bytes past the first
			// special one are overwritten or lie beyond the value.
			x := binary.LittleEndian.Uint64(in[i:])
			binary.LittleEndian.PutUint64(out[j:], x)
			m := jcs.SpecialMask8(x)
			if m == 0 {
				i, j = i+8, j+8
				continue
			}
			n := bits.TrailingZeros64(m) >> 3
			i, j = i+n, j+n
		}
		if i >= len(in) {
			return nil, 0, false
		}
		c := in[i]
		switch {
		case c == '"':
			s = out[:j]
			if high >= utf8.RuneSelf && !utf8.Valid(s) {
				return nil, 0, false
			}
			return s, i + 1, true
		case c == '\\':
			if i+1 >= len(in) || (in[i+1] != '"' && in[i+1] != '\\') {
				return nil, 0, false
			}
			c = in[i+1]
			i++
		case c < 0x20:
			return nil, 0, false
		}
		high |= c
		out[j] = c
		j++
		i++
	}
}

// stringOrAlias parses the JSON string at p.pos and returns its value,
// aliasing the input when the string has no escapes.
func (p *payloadParser) stringOrAlias() ([]byte, bool) {
	start := p.pos + 1
	for i := start; i < len(p.in); i++ {
		c := p.in[i]
		if c == '"' {
			v := p.in[start:i]
			if !utf8.Valid(v) {
				return nil, false
			}
			p.pos = i + 1
			return v, true
		}
		if c < 0x20 || c == '\\' {
			break
		}
	}
	var small [bindTagLen]byte
	return p.stringInto(small[:0])
}

// jsonInt64 parses a JSON integer at p.pos: an optional minus sign and
// digits without leading zeros ("-0" is refused too), within int64.
func (p *payloadParser) jsonInt64() (int64, bool) {
	neg := false
	if p.pos < len(p.in) && p.in[p.pos] == '-' {
		neg = true
		p.pos++
	}
	start := p.pos
	var n uint64
	for p.pos < len(p.in) && '0' <= p.in[p.pos] && p.in[p.pos] <= '9' {
		if n > 1<<63/10 {
			return 0, false // the next digit takes n past 2^63: out of range
		}
		n = n*10 + uint64(p.in[p.pos]-'0') // at most 2^63 + 9: no overflow
		p.pos++
	}
	digits := p.in[start:p.pos]
	switch {
	case len(digits) == 0:
		return 0, false
	case digits[0] == '0' && (len(digits) > 1 || neg):
		return 0, false // leading zeros are not JSON; -0 is not an int
	case neg && n > 1<<63:
		return 0, false
	case !neg && n > 1<<63-1:
		return 0, false
	case neg:
		return -int64(n-1) - 1, true
	}
	return int64(n), true
}
