package ctoken

// The request state's JSON payload, {"s":…,"exp":…,"b":…} (see the package
// documentation): its strict parser and the two methods it adds to the
// JSON parser of fingerprint.go (jcsParser).

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

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
	p := jcsParser{in: in}
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
	p := jcsParser{in: in, pos: len(head) - 1}
	if s, ok = p.stringInto(sbuf[:0]); !ok || !bytes.HasPrefix(in[p.pos:], []byte(mid)) {
		return nil, 0, nil, false
	}
	p.pos += len(mid)
	if exp, ok = p.jsonInt64(); !ok || !bytes.HasPrefix(in[p.pos:], []byte(tail)) {
		return nil, 0, nil, false
	}
	p.pos += len(tail)
	if len(in)-p.pos != bindTagLen+2 || in[len(in)-2] != '"' || in[len(in)-1] != '}' {
		return nil, 0, nil, false
	}
	b = in[p.pos : p.pos+bindTagLen]
	for i := 0; i < len(b); i += 8 {
		if jsonSpecial8(binary.LittleEndian.Uint64(b[i:])) {
			return nil, 0, nil, false
		}
	}
	return s, exp, b, true
}

// stringOrAlias parses the JSON string at p.pos and returns its value,
// aliasing the input when the string has no escapes.
func (p *jcsParser) stringOrAlias() ([]byte, bool) {
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
func (p *jcsParser) jsonInt64() (int64, bool) {
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
