package ctoken

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/jcs"
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

// encoderPayload builds the request-state payload the way Encode writes it:
// {"s":<JCS string>,"exp":N,"b":"<64 hex characters>"}, no white space.
func encoderPayload(state string, exp int64) []byte {
	p := append([]byte(`{"s":`), jcs.AppendString(nil, state)...)
	p = append(p, `,"exp":`...)
	p = strconv.AppendInt(p, exp, 10)
	p = append(p, `,"b":"`...)
	p = append(p, strings.Repeat("0123456789abcdef", bindTagLen/16)...)
	return append(p, `"}`...)
}

func TestStatePayloadFastPath(t *testing.T) {
	// Kills state_payload.go mutants that make the fast path give up on the
	// layout it exists for (each would only fall back to the full parser, so
	// no Decode result changes, but every Decode would pay for the slow path):
	// `pos: end + len(mid)` → `-`; `len(in)-p.pos != bindTagLen+2` with `+`,
	// `-2` or a negated operand; `in[len(in)-2] != '"'` → `==`; `m == 0` →
	// `!= 0`; `return s, i + 1, true` → `i - 1`; `high >= utf8.RuneSelf &&
	// !utf8.Valid(s)` → `||`; `in[i+1] != '\\'` → `in[i-1]`; and `len(out) <
	// len(in)` → `<=` (the scratch Decode hands over has capacity exactly
	// len(payload) when the pooled buffer is just large enough).
	t.Run("accepts every encoder layout", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			state string
			exp   int64
		}{
			{"empty state", "", 1700000000},
			{"one byte", "x", 1},
			{"two bytes", "ab", 1700000000},
			{"eight bytes", "abcdefgh", 1700000000},
			{"many words", strings.Repeat("opaque-cursor-", 9), 1700000000},
			{"quotes", `say "hi" to "them"`, 1700000000},
			{"backslashes", `C:\dir\file \\ share`, 1700000000},
			{"both escapes adjacent", `\"\\"`, 1700000000},
			{"two-byte UTF-8", "café", 1700000000},
			{"three- and four-byte UTF-8", "日本語 😀 after", 1700000000},
			{"negative exp", "x", -42},
			{"largest exp", "x", 1<<63 - 1},
			{"smallest exp", "x", -1 << 63},
			{"zero exp", "x", 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				in := encoderPayload(tc.state, tc.exp)
				s, exp, b, ok := parseStatePayloadFast(in, make([]byte, 0, len(in)))
				if !ok {
					t.Fatalf("fast path gave up on %q", in)
				}
				if string(s) != tc.state || exp != tc.exp || string(b) != strings.Repeat("0123456789abcdef", bindTagLen/16) {
					t.Fatalf("fast path read (%q, %d, %q) from %q", s, exp, b, in)
				}
				// b aliases the input: the fast path copies only s.
				if &b[0] != &in[len(in)-2-bindTagLen] {
					t.Fatal("fast path copied b instead of aliasing the input")
				}
			})
		}
	})

	// Kills state_payload.go `len(out) < len(in)` → `>=` (the fast path would
	// write past a scratch buffer shorter than the payload, or refuse every
	// adequate one) and pins the refusal it guards: Decode hands a region clamped
	// to the pooled buffer, which can be shorter than the payload.
	t.Run("needs scratch as long as the payload", func(t *testing.T) {
		in := encoderPayload(strings.Repeat("a", 40), 1700000000)
		if _, _, _, ok := parseStatePayloadFast(in, make([]byte, 0, len(in)-1)); ok {
			t.Fatal("fast path accepted a scratch buffer one byte short of the payload")
		}
		// The full parser still reads it, growing the short buffer.
		s, exp, _, ok := parseStatePayload(in, make([]byte, 0, len(in)-1))
		if !ok || string(s) != strings.Repeat("a", 40) || exp != 1700000000 {
			t.Fatalf("parseStatePayload with short scratch: (%q, %d, %v)", s, exp, ok)
		}
		if _, _, _, ok := parseStatePayloadFast(in, make([]byte, 0, len(in))); !ok {
			t.Fatal("fast path refused a scratch buffer exactly as long as the payload")
		}
	})
}

// Kills state_payload.go `high >= utf8.RuneSelf` → `high > utf8.RuneSelf`:
// a state made only of 0x80 bytes (so every byte OR-ed together is exactly
// 0x80) is invalid UTF-8 and must be refused, by the fast path and by the
// parser as a whole.
func TestStatePayloadRefusesAStateOfBareContinuationBytes(t *testing.T) {
	for _, state := range []string{"\x80", "\x80\x80", strings.Repeat("\x80", 9)} {
		in := encoderPayload(state, 1700000000)
		if _, _, _, ok := parseStatePayloadFast(in, make([]byte, 0, len(in))); ok {
			t.Fatalf("fast path accepted invalid UTF-8 %q", state)
		}
		if _, _, _, ok := parseStatePayload(in, make([]byte, 0, len(in))); ok {
			t.Fatalf("parser accepted invalid UTF-8 %q", state)
		}
	}
}

// Kills state_payload.go `c < 0x20 || c == '\\'` in stringOrAlias → `c >=
// 0x20`, `c != '\\'` or `c <= 0x20`: a b string without escapes (spaces
// included) is returned as a slice of the input, without a copy, as its doc
// comment promises; one with an escape is unescaped.
func TestStringOrAliasAliasesAStringWithoutEscapes(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		alias    bool
	}{
		{`"plain"`, "plain", true},
		{`"with space"`, "with space", true},
		{`" "`, " ", true},
		{`"` + strings.Repeat("f", bindTagLen) + `"`, strings.Repeat("f", bindTagLen), true},
		{`"caf` + "\u00e9" + `"`, "caf\u00e9", true},
		{`"a\u0062"`, "ab", false},
		{`"a\\b"`, `a\b`, false},
	} {
		in := []byte(tc.in + ",")
		p := payloadParser{in: in}
		v, ok := p.stringOrAlias()
		if !ok || string(v) != tc.want || p.pos != len(tc.in) {
			t.Fatalf("%s: got (%q, %v) ending at %d", tc.in, v, ok, p.pos)
		}
		if aliased := &v[0] == &in[1]; aliased != tc.alias {
			t.Fatalf("%s: aliased = %v, want %v", tc.in, aliased, tc.alias)
		}
	}
	for _, bad := range []string{"\"a\x01b\"", "\"a\nb\"", "\"\xff\"", `"unterminated`} {
		p := payloadParser{in: []byte(bad)}
		if v, ok := p.stringOrAlias(); ok {
			t.Fatalf("%q accepted as %q", bad, v)
		}
	}
}

// TestStatePayloadParsersAgree checks the fast parser (the encoder's own
// layout) against the full one and the reference parser on near misses of
// that layout, and Decode's verdict on each behind a valid MAC: the fast
// parser accepts only what the full one accepts, with the same values.
func TestStatePayloadParsersAgree(t *testing.T) {
	key := fixedKey(36)
	clock := newTestClock()
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, key), Now: clock.Now})
	tag := refBindTag(t, key, "alice")
	exp := strconv.FormatInt(clock.Now().Unix()+60, 10)
	canonical := `{"s":"x","exp":` + exp + `,"b":"` + tag + `"}`
	for _, tc := range []struct {
		name    string
		payload string
		ok      bool // Decode accepts it for alice
	}{
		{"canonical", canonical, true},
		{"separator = after s", `{"s"="x","exp":` + exp + `,"b":"` + tag + `"}`, false},
		{"separator = after exp", `{"s":"x","exp"=` + exp + `,"b":"` + tag + `"}`, false},
		{"separator = after b", `{"s":"x","exp":` + exp + `,"b"="` + tag + `"}`, false},
		{"semicolon for comma", `{"s":"x";"exp":` + exp + `,"b":"` + tag + `"}`, false},
		{"garbage for ,\"exp\":", `{"s":"x",XXXXXX` + exp + `,"b":"` + tag + `"}`, false},
		{"garbage for ,\"b\":\"", `{"s":"x","exp":` + exp + `,XXXXX` + tag + `"}`, false},
		{"missing closing quote of b", `{"s":"x","exp":` + exp + `,"b":"` + tag + `}`, false},
		{"missing closing brace", `{"s":"x","exp":` + exp + `,"b":"` + tag + `"`, false},
		{"other last byte", `{"s":"x","exp":` + exp + `,"b":"` + tag + `"]`, false},
		{"quote for brace", `{"s":"x","exp":` + exp + `,"b":"` + tag + `""`, false},
		{"trailing brace", canonical + `}`, false},
		{"tag one short", `{"s":"x","exp":` + exp + `,"b":"` + tag[:63] + `"}`, false},
		{"tag one long", `{"s":"x","exp":` + exp + `,"b":"` + tag + `0"}`, false},
		{"escaped tag character", `{"s":"x","exp":` + exp + `,"b":"` + tag[:63] + `\u00` + strconv.FormatInt(int64(tag[63]), 16) + `"}`, true},
		{"space before comma", `{"s":"x" ,"exp":` + exp + `,"b":"` + tag + `"}`, true},
		{"exp with leading zero", `{"s":"x","exp":0` + exp + `,"b":"` + tag + `"}`, false},
		{"exp truncated to a sign", `{"s":"x","exp":-,"b":"` + tag + `"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.payload)
			rs, rexp, rb, rok := parseStatePayloadRef(in)
			s, exp, b, ok := parseStatePayload(in, make([]byte, 0, len(in)))
			if ok != rok || ok && (string(s) != rs || exp != rexp || string(b) != string(rb)) {
				t.Fatalf("full parser %q %d %q %v, reference %q %d %q %v", s, exp, b, ok, rs, rexp, rb, rok)
			}
			fs, fexp, fb, fok := parseStatePayloadFast(in, make([]byte, 0, len(in)))
			if fok && (!rok || string(fs) != rs || fexp != rexp || string(fb) != string(rb)) {
				t.Fatalf("fast parser accepts %q %d %q; reference %q %d %q %v", fs, fexp, fb, rs, rexp, rb, rok)
			}
			got, err := c.Decode(refSigned(t, key, tc.payload), "alice", "")
			if tc.ok && (err != nil || got != "x") {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok {
				wantErr(t, err, ErrStateInvalid)
				if got != "" {
					t.Fatal("refused state returned")
				}
			}
		})
	}
}
