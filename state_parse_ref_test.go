package ctoken

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// parseStatePayloadRef is the first, allocating parser of the request-state
// payload, kept as the reference the allocation-free parseStatePayload is
// fuzzed against.
// parseStatePayloadRef strictly parses {"s":string,"exp":integer,"b":string}:
// members in any order, each exactly once, no others.
func parseStatePayloadRef(in []byte) (s string, exp int64, b []byte, ok bool) {
	p := refParser{in: in}
	var seen [3]bool
	p.skipSpace()
	if p.pos >= len(in) || in[p.pos] != '{' {
		return "", 0, nil, false
	}
	p.pos++
	for {
		p.skipSpace()
		if p.pos >= len(in) || in[p.pos] != '"' {
			return "", 0, nil, false
		}
		name, err := p.string()
		if err != nil {
			return "", 0, nil, false
		}
		p.skipSpace()
		if p.pos >= len(in) || in[p.pos] != ':' {
			return "", 0, nil, false
		}
		p.pos++
		p.skipSpace()
		if p.pos >= len(in) {
			return "", 0, nil, false
		}
		var field int
		switch name {
		case "s", "b":
			if in[p.pos] != '"' {
				return "", 0, nil, false
			}
			v, err := p.string()
			if err != nil {
				return "", 0, nil, false
			}
			if name == "s" {
				s, field = v, 0
			} else {
				b, field = []byte(v), 2
			}
		case "exp":
			start := p.pos
			if in[p.pos] == '-' {
				p.pos++
			}
			for p.pos < len(in) && '0' <= in[p.pos] && in[p.pos] <= '9' {
				p.pos++
			}
			text := string(in[start:p.pos])
			if len(text) > 1 && (text[0] == '0' || strings.HasPrefix(text, "-0")) {
				return "", 0, nil, false // leading zeros are not JSON
			}
			if exp, err = strconv.ParseInt(text, 10, 64); err != nil {
				return "", 0, nil, false
			}
			field = 1
		default:
			return "", 0, nil, false
		}
		if seen[field] {
			return "", 0, nil, false
		}
		seen[field] = true
		p.skipSpace()
		if p.pos >= len(in) {
			return "", 0, nil, false
		}
		if in[p.pos] == ',' {
			p.pos++
			continue
		}
		if in[p.pos] != '}' {
			return "", 0, nil, false
		}
		p.pos++
		break
	}
	p.skipSpace()
	if p.pos != len(in) || !seen[0] || !seen[1] || !seen[2] {
		return "", 0, nil, false
	}
	return s, exp, b, true
}

// checkStateParse is the differential property: both parsers accept the
// same inputs and agree on the values.
func checkStateParse(t *testing.T, in []byte) {
	t.Helper()
	sbuf := make([]byte, 0, len(in))
	s, exp, b, ok := parseStatePayload(in, sbuf)
	rs, rexp, rb, rok := parseStatePayloadRef(in)
	if ok != rok {
		t.Fatalf("input %q: parser ok=%v, reference ok=%v", in, ok, rok)
	}
	if ok && (string(s) != rs || exp != rexp || !bytes.Equal(b, rb)) {
		t.Fatalf("input %q: parser (%q, %d, %q), reference (%q, %d, %q)", in, s, exp, b, rs, rexp, rb)
	}
	// The fast path, where it answers, answers as the plain parser does.
	if fs, fexp, fb, fok := parseStatePayloadFast(in, make([]byte, 0, len(in))); fok {
		ps, pexp, pb, pok := parseStatePayloadFull(in, make([]byte, 0, len(in)))
		if !pok || string(fs) != string(ps) || fexp != pexp || !bytes.Equal(fb, pb) {
			t.Fatalf("input %q: fast path (%q, %d, %q), plain parser ok=%v (%q, %d, %q)", in, fs, fexp, fb, pok, ps, pexp, pb)
		}
	}
}

var statePayloadSeeds = []string{
	`{"s":"hello","exp":1700000000,"b":"00ff"}`,
	`{"b":"","exp":-5,"s":""}`,
	` { "s" : "a\"b\\c\u00e9\ud83d\ude00\n" , "exp" : 0 , "b" : "\u0061" } `,
	`{"s":"x","exp":9223372036854775807,"b":"y"}`,
	`{"s":"x","exp":9223372036854775808,"b":"y"}`,
	`{"s":"x","exp":-9223372036854775808,"b":"y"}`,
	`{"s":"x","exp":-9223372036854775809,"b":"y"}`,
	`{"s":"x","exp":99999999999999999999,"b":"y"}`,
	`{"s":"x","exp":-0,"b":"y"}`,
	`{"s":"x","exp":01,"b":"y"}`,
	`{"s":"x","exp":1.5,"b":"y"}`,
	`{"s":"x","exp":1e3,"b":"y"}`,
	`{"s":"x","exp":-,"b":"y"}`,
	`{"s":"x","exp":1,"b":"y","s":"z"}`,
	`{"s":"x","exp":1,"b":"y","c":1}`,
	`{"s":"x","exp":1}`,
	`{"s":"\ud800","exp":1,"b":"y"}`,
	"{\"s\":\"\xff\",\"exp\":1,\"b\":\"y\"}",
	"{\"s\":\"a\x01\",\"exp\":1,\"b\":\"y\"}",
	"{\"s\":\"x\",\"exp\":1,\"b\":\"\xc3\xa9\"}",
	`{"s":"x","exp":1,"b":"y"}x`,
	`{"\u0073":"x","exp":1,"b":"y"}`,
	`{"s":"x","exp":1,"b":"y\`,
	`{"s":"x","exp":1,"b":"y`,
	// The layout of the fast path, and near misses that fall back.
	`{"s":"{\"step\":2,\"pending\":[\"confirm_delete\"],\"draft\":\"id-4b8e4d2a9c1f5e6b\"}","exp":1700000300,"b":"` + strings.Repeat("0f", 32) + `"}`,
	`{"s":"0123456789abcdef\\0123456\"89abcdef\\\"","exp":1,"b":"` + strings.Repeat("ab", 32) + `"}`,
	`{"s":"café \u00e9 \n","exp":1,"b":"` + strings.Repeat("ab", 32) + `"}`,
	"{\"s\":\"caf\xc3\xa9 na\xc3\xafve \xe2\x82\xac\\\"\",\"exp\":1,\"b\":\"" + strings.Repeat("ab", 32) + "\"}",
	"{\"s\":\"abcdefgh\xc3\",\"exp\":1,\"b\":\"" + strings.Repeat("ab", 32) + "\"}",
	"{\"s\":\"abcdefghij\x1f\",\"exp\":1,\"b\":\"" + strings.Repeat("ab", 32) + "\"}",
	`{"s":"abcdefghijklmnop\`,
	`{"s":"abcdefghijklmnopqrstuvwx`,
	`{"s":"abcdefgh\/","exp":1,"b":"` + strings.Repeat("ab", 32) + `"}`,
	`{"s":"{\"a\":1}","exp":1700000300,"b":"` + strings.Repeat("0f", 32) + `"}`,
	`{"s":"","exp":-1,"b":"` + strings.Repeat("a", 64) + `"} `,
	`{"s":"x","exp":1,"b":"` + strings.Repeat("a", 63) + `\u0061"}`,
	`{"s":"x","exp":1,"b":"` + strings.Repeat("a", 63) + `"}`,
	`{"s":"x","exp":1,"b":"` + strings.Repeat("a", 64) + `"}}`,
	`{"s":"x","exp":1,"b":"` + strings.Repeat("a", 62) + "\x01a" + `"}`,
	`{"s":"x","exp":01,"b":"` + strings.Repeat("a", 64) + `"}`,
	``, `{`, `{}`, `[]`, `"s"`,
}

func FuzzStatePayloadParse(f *testing.F) {
	for _, s := range statePayloadSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkStateParse)
}

// TestStatePayloadParseMatchesReference runs the differential property over
// the seeds in plain `go test`.
func TestStatePayloadParseMatchesReference(t *testing.T) {
	for _, s := range statePayloadSeeds {
		checkStateParse(t, []byte(s))
	}
}

// refParser is the reference parser's position in its input.
type refParser struct {
	in  []byte
	pos int
}

func (p *refParser) skipSpace() {
	for p.pos < len(p.in) && strings.IndexByte(" \t\n\r", p.in[p.pos]) >= 0 {
		p.pos++
	}
}

// escape reads the escape sequence at p.pos, joining a surrogate pair and
// refusing a lone surrogate, with strconv's reading of a Go escape.
func (p *refParser) escape() (rune, error) {
	if p.pos+1 >= len(p.in) {
		return 0, ErrArgsInvalid
	}
	c := p.in[p.pos+1]
	if c != 'u' {
		p.pos += 2
		if r, ok := map[byte]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[c]; ok {
			return r, nil
		}
		return 0, ErrArgsInvalid
	}
	unit := func() (rune, bool) {
		if len(p.in)-p.pos < 6 || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
			return 0, false
		}
		hex := string(p.in[p.pos+2 : p.pos+6])
		if strings.ContainsAny(hex, "+-_xX") {
			return 0, false
		}
		v, err := strconv.ParseUint(hex, 16, 16)
		p.pos += 6
		return rune(v), err == nil
	}
	r, ok := unit()
	if !ok {
		return 0, ErrArgsInvalid
	}
	if !utf16.IsSurrogate(r) {
		return r, nil
	}
	if r >= 0xDC00 || p.pos+1 >= len(p.in) || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
		return 0, ErrArgsInvalid
	}
	lo, ok := unit()
	if !ok {
		return 0, ErrArgsInvalid
	}
	if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
		return 0, ErrArgsInvalid
	}
	return r, nil
}

// string is the original, allocating JSON string reader, kept as the
// reference the optimised stringInto is fuzzed against.
func (p *refParser) string() (string, error) {
	p.pos++ // opening quote
	var s []byte
	for {
		if p.pos >= len(p.in) {
			return "", ErrArgsInvalid
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(s), nil
		case c == '\\':
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			s = utf8.AppendRune(s, r)
		case c < 0x20:
			return "", ErrArgsInvalid
		case c < utf8.RuneSelf:
			s = append(s, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return "", ErrArgsInvalid
			}
			s = append(s, p.in[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}
