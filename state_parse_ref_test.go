package ctoken

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// parseStatePayloadRef is the first, allocating parser of the request-state
// payload, kept as the reference the allocation-free parseStatePayload is
// fuzzed against.
// parseStatePayloadRef strictly parses {"s":string,"exp":integer,"b":string}:
// members in any order, each exactly once, no others.
func parseStatePayloadRef(in []byte) (s string, exp int64, b []byte, ok bool) {
	p := jcsParser{in: in}
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

// TestJSONSpecial8MatchesTable checks the SWAR tests against the byte table
// (jsonSpecialMask8 for the position of the first special byte):
// every byte value in every position among plain and special neighbours,
// and a stream of pseudo-random words.
func TestJSONSpecial8MatchesTable(t *testing.T) {
	want := func(w [8]byte) bool {
		for _, c := range w {
			if !jsonPlain[c] {
				return true
			}
		}
		return false
	}
	first := func(w [8]byte) int {
		for i, c := range w {
			if !jsonPlain[c] {
				return i
			}
		}
		return 8
	}
	check := func(w [8]byte) {
		x := binary.LittleEndian.Uint64(w[:])
		if got := jsonSpecial8(x); got != want(w) {
			t.Fatalf("jsonSpecial8(%q) = %v, want %v", w[:], got, want(w))
		}
		if got := bits.TrailingZeros64(jsonSpecialMask8(x)) >> 3; got != first(w) {
			t.Fatalf("jsonSpecialMask8(%q) puts the first special byte at %d, want %d", w[:], got, first(w))
		}
	}
	for _, fill := range []byte{'a', ' ', '~', 0x7f, '"', '\\', 0, 0x1f, 0x80, 0xff} {
		for pos := range 8 {
			for c := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	x := uint64(0x9e3779b97f4a7c15)
	for range 200000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x&0x7f7f7f7f7f7f7f7f) // mostly ASCII
		check(w)
		binary.LittleEndian.PutUint64(w[:], x)
		check(w)
	}
}

// string is the original, allocating JSON string reader, kept as the
// reference the optimised stringInto is fuzzed against.
func (p *jcsParser) string() (string, error) {
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
