package jcs

// Fuzz targets of the canonicalizer, differential against encoding/json
// and math/big: seeds are the f.Add calls below plus the corpora in
// testdata/fuzz/<FuzzName>/ (FuzzArgsFingerprint's are written from
// testdata/vectors/jcs.json by the root package's
// `go test -run TestVectors -update-vectors`).

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// ---------------------------------------------------------------------------
// Args fingerprint

// documentedRejection reports whether CanonicalJSON may refuse text that
// encoding/json accepts: invalid UTF-8, a lone surrogate escape, a duplicate
// object key, a number beyond double range or one whose exact value a
// double does not hold (by [lossyNumber]), or nesting over MaxJSONDepth.
// text must be json.Valid.
func documentedRejection(text []byte) bool {
	if !utf8.Valid(text) || hasLoneSurrogate(text) {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	type frame struct {
		object  bool
		keys    map[string]bool
		wantKey bool // in an object, the next token is a member name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false // io.EOF; nothing else happens for json.Valid text
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			top := stack[n-1]
			if top.wantKey {
				name := tok.(string)
				if top.keys[name] {
					return true
				}
				top.keys[name] = true
				top.wantKey = false
				continue
			}
			top.wantKey = true
		}
		switch v := tok.(type) {
		case json.Delim: // '{' or '['
			stack = append(stack, &frame{object: v == '{', keys: map[string]bool{}, wantKey: true})
			if len(stack) > MaxJSONDepth {
				return true
			}
		case json.Number:
			if lossyNumber(string(v)) {
				return true
			}
		}
	}
}

// lossyNumber reports whether a JSON number literal is outside double range
// or its exact value differs from that of the double nearest to it written
// shortest (strconv's 'g', -1: the digits RFC 8785 prints). It uses math/big
// for the exact comparison, independently of jcs.go.
func lossyNumber(lit string) bool {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		return true
	}
	if f == 0 { // lossless only if every digit of the mantissa is 0
		mantissa, _, _ := strings.Cut(strings.ToLower(lit), "e")
		return strings.Trim(mantissa, "-0.") != ""
	}
	return exactRat(lit).Cmp(exactRat(strconv.FormatFloat(f, 'g', -1, 64))) != 0
}

// exactRat is the exact value of a decimal literal that the canonicaliser
// accepted: zero (whose exponent may be beyond what big.Rat reads, as in
// 0e10000000000000000000) or a number whose double is finite and exact (so
// its exponent is bounded by the input's length).
func exactRat(lit string) *big.Rat {
	mantissa, _, _ := strings.Cut(strings.ToLower(lit), "e")
	if strings.Trim(mantissa, "-0.") == "" {
		return new(big.Rat)
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok {
		panic("not a decimal: " + lit)
	}
	return r
}

// sameMeaning reports whether two I-JSON texts mean the same: read by
// encoding/json with UseNumber, numbers compared as exact decimals.
func sameMeaning(t *testing.T, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(exactMeaning(t, a), exactMeaning(t, b))
}

// exactNumber is a number in exactMeaning: big.Rat's exact RatString.
type exactNumber string

// exactMeaning decodes accepted JSON text into maps, slices, strings, bools,
// nil and exactNumbers.
func exactMeaning(t *testing.T, text []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("encoding/json refuses accepted text %q: %v", text, err)
	}
	var norm func(any) any
	norm = func(v any) any {
		switch v := v.(type) {
		case json.Number:
			return exactNumber(exactRat(string(v)).RatString())
		case []any:
			for i := range v {
				v[i] = norm(v[i])
			}
		case map[string]any:
			for k := range v {
				v[k] = norm(v[k])
			}
		}
		return v
	}
	return norm(v)
}

// hasLoneSurrogate reports whether JSON text has a \uD800-\uDFFF escape that
// is not the high half of a high+low pair or the low half following one.
func hasLoneSurrogate(text []byte) bool {
	inString := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(text) && text[i+1] == 'u' && i+6 <= len(text) {
				r, err := strconv.ParseUint(string(text[i+2:i+6]), 16, 16)
				if err == nil && utf16.IsSurrogate(rune(r)) {
					if r >= 0xDC00 {
						return true // low half first
					}
					if i+12 > len(text) || text[i+6] != '\\' || text[i+7] != 'u' {
						return true
					}
					lo, err := strconv.ParseUint(string(text[i+8:i+12]), 16, 16)
					if err != nil || lo < 0xDC00 || lo > 0xDFFF {
						return true
					}
					i += 11
					continue
				}
				i += 5
				continue
			}
			i++ // skip the escaped character
		}
	}
	return false
}

// FuzzArgsFingerprint checks CanonicalJSON against encoding/json: it accepts
// exactly the json.Valid text without a documented reason to refuse it, and
// the canonical form of accepted text means exactly what the text means
// (numbers compared as exact decimals).
func FuzzArgsFingerprint(f *testing.F) {
	for _, in := range jcsVectorInputs(f) {
		f.Add(in)
	}
	f.Add([]byte(`{"a":[1,2,{"b":null}],"c":"\ud83d\ude00"}`))
	f.Fuzz(func(t *testing.T, text []byte) {
		canon, err := Canonical(text)
		valid := json.Valid(text)
		if err != nil {
			checkFuzzReasonError(t, err, ErrArgsInvalid)
			if canon != nil {
				t.Fatalf("rejected input produced %q", canon)
			}
			if valid && !documentedRejection(text) {
				t.Fatalf("encoding/json accepts %q, CanonicalJSON refuses it for no documented reason (%v)", text, err)
			}
			if _, err := Sum(text); !errors.Is(err, ErrArgsInvalid) {
				t.Fatalf("ArgsFingerprint error %v, want ErrArgsInvalid", err)
			}
			return
		}
		if !valid {
			t.Fatalf("CanonicalJSON accepts %q, which encoding/json refuses", text)
		}
		if documentedRejection(text) {
			t.Fatalf("CanonicalJSON accepts %q despite a documented reason to refuse it", text)
		}
		again, err := Canonical(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", text, canon, again, err)
		}
		want := sha256.Sum256(canon)
		for _, args := range []any{text, json.RawMessage(text), canon} {
			fp, err := Sum(args)
			if err != nil || fp != Fingerprint(want) {
				t.Fatalf("Sum(%T) = %x, %v; want SHA-256 of the canonical form %x", args, fp, err, want)
			}
		}
		// Lossless: the canonical form means exactly what the input means.
		if !sameMeaning(t, text, canon) {
			t.Fatalf("canonical form %q does not mean what %q means", canon, text)
		}
		// The Go-value path agrees: encoding/json's reading of the text
		// (numbers as float64, exact here) fingerprints the same.
		var v any
		if err := json.Unmarshal(text, &v); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if fp, err := Sum(v); err != nil || fp != Fingerprint(want) {
			t.Fatalf("ArgsFingerprint of the decoded value = %x, %v; want %x", fp, err, want)
		}
	})
}

// FuzzArgsFingerprintMeaning checks the fingerprint's contract on pairs of
// texts: when both are accepted, they share a fingerprint exactly when they
// mean the same (numbers compared as exact decimals by math/big).
func FuzzArgsFingerprintMeaning(f *testing.F) {
	for _, p := range [][2]string{
		{`100`, `1.0e2`},
		{`1234567890123456789`, `1234567890123456800`},
		{`1234567890123456800`, `1.2345678901234568e18`},
		{`9007199254740993`, `9007199254740992`},
		{`0.1`, `0.10000000000000000001`},
		{`0.1`, `0.100`},
		{"\"report\xff.pdf\"", "\"report\xfe.pdf\""},
		{`"report\ufffd.pdf"`, "\"report\xef\xbf\xbd.pdf\""},
		{`{"a":1,"b":[2,3]}`, ` { "b" : [ 2 , 3.0 ] , "a" : 1e0 } `},
		{`{"a":-0}`, `{"a":0}`},
		{`["\u00e9"]`, "[\"\xc3\xa9\"]"},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		fa, errA := Sum(a)
		fb, errB := Sum(b)
		if errA != nil || errB != nil {
			return
		}
		if same := sameMeaning(t, a, b); (fa == fb) != same {
			t.Fatalf("%q and %q: equal fingerprints %v, same meaning %v", a, b, fa == fb, same)
		}
	})
}

// fuzzGoArgs is a typed argument struct; M's key and S are the same string.
type fuzzGoArgs struct {
	S string            `json:"s"`
	I int64             `json:"i"`
	U uint64            `json:"u"`
	F float64           `json:"f"`
	M map[string]string `json:"m"`
}

// exactAsDouble reports whether the integer's exact value equals that of
// its nearest double written shortest, independently of jcs.go.
func exactAsDouble(x *big.Int) bool {
	f, _ := new(big.Float).SetInt(x).Float64()
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && r.Cmp(new(big.Rat).SetInt(x)) == 0
}

// FuzzArgsFingerprintGoValues checks the Go-value path: a struct is refused
// exactly when a string holds invalid UTF-8 or an integer field a value a
// double does not hold exactly; an accepted struct's canonical form states
// every field exactly, so equal fingerprints mean equal values.
func FuzzArgsFingerprintGoValues(f *testing.F) {
	f.Add("report\xff.pdf", int64(1), uint64(2), 0.5)
	f.Add("report\ufffd.pdf", int64(1234567890123456789), uint64(1234567890123456800), 1e21)
	f.Add("é", int64(-9007199254740993), uint64(1<<64-1), math.Copysign(0, -1))
	f.Add("", int64(-1<<63), uint64(1<<53), 5e-324)
	f.Fuzz(func(t *testing.T, s string, i int64, u uint64, fl float64) {
		if math.IsInf(fl, 0) || math.IsNaN(fl) {
			return // json.Marshal refuses these; TestArgsFingerprint/of Go values covers it
		}
		args := fuzzGoArgs{S: s, I: i, U: u, F: fl, M: map[string]string{s: s}}
		fp, err := Sum(args)
		wantOK := utf8.ValidString(s) && exactAsDouble(big.NewInt(i)) && exactAsDouble(new(big.Int).SetUint64(u))
		if err != nil {
			checkFuzzReasonError(t, err, ErrArgsInvalid)
			if wantOK {
				t.Fatalf("%+v refused: %v", args, err)
			}
			return
		}
		if !wantOK {
			t.Fatalf("%+v accepted, but a value is not exact in JSON", args)
		}
		text, _ := json.Marshal(args)
		canon, err := Canonical(text)
		if err != nil || fp != sha256.Sum256(canon) {
			t.Fatalf("fingerprint of %+v is not SHA-256 of its canonical JSON (%v)", args, err)
		}
		var back struct {
			S       string `json:"s"`
			I, U, F json.Number
			M       map[string]string `json:"m"`
		}
		dec := json.NewDecoder(bytes.NewReader(canon))
		dec.UseNumber()
		if err := dec.Decode(&back); err != nil {
			t.Fatal(err)
		}
		fr := new(big.Rat)
		fr.SetFloat64(fl)
		if back.S != s || back.M[s] != s || len(back.M) != 1 ||
			exactRat(string(back.I)).Cmp(new(big.Rat).SetInt64(i)) != 0 ||
			exactRat(string(back.U)).Cmp(new(big.Rat).SetInt(new(big.Int).SetUint64(u))) != 0 ||
			exactRat(string(back.F)).Cmp(exactRat(strconv.FormatFloat(fl, 'g', -1, 64))) != 0 {
			t.Fatalf("canonical form %q does not state %+v exactly", canon, args)
		}
	})
}

// FuzzJCSNumber differentially tests the number canonicalizer, whose
// short-literal path uses no float arithmetic, against the plain path:
// strconv.ParseFloat, ECMAScript formatting of the double
// (appendES6NumberRef), and an exact math/big comparison of the two values.
func FuzzJCSNumber(f *testing.F) {
	for _, s := range []string{"0", "-0", "1", "1.0e2", "0.1", "123456789012345", "1234567890123456", "12345678901234567",
		"1234567890123456789", "1234567890123456800", "9007199254740993", "0.10000000000000000001", "1e21", "1e20",
		"1e-6", "1e-7", "5e-324", "3e-324", "1.7976931348623157e308", "1.7976931348623159e308", "1e-400", "0.0e400",
		"333333333.33333329", "4.50", "2e-3", "-1.5e-300", "1e300", "1.5e301", "9.99999999999999e-301", "0.000001234e-295",
		"2.5e-320", "1e-310", "2.225073858507201e-308", "2.2250738585072014e-308", "4.9406564584124654e-324", "4.4501477170144023e-308",
		"9007199254740992", "9007199254740993", "1.1102230246251565e-16", "8.98846567431158e307", "0.30000000000000004", "1.2345678901234567e-7",
		"-0.0012345678901234567", "123456789012345680000", "1.797693134862315708e308", "4.940656458412465441765687928682213723651e-324",
		"1.0", "-2.50e0", "12300.00", "12368.1250E+0", "100000000000000000000.0", "1000000000000000000000.0e0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		if !json.Valid([]byte(lit)) || lit == "" || (lit[0] != '-' && (lit[0] < '0' || lit[0] > '9')) || strings.TrimSpace(lit) != lit {
			return // not a JSON number literal
		}
		p := jcsParser{in: []byte(lit)}
		got, err := p.number(nil)
		if err == nil && p.pos != len(lit) {
			t.Fatalf("%q: parsed %d of %d bytes", lit, p.pos, len(lit))
		}
		fl, perr := strconv.ParseFloat(lit, 64)
		if perr != nil || math.IsInf(fl, 0) {
			if err != errArgsRange && err != errArgsInexact {
				t.Fatalf("%q out of range: got %q, %v", lit, got, err)
			}
			return
		}
		want := appendES6NumberRef(nil, fl)
		if lossyNumber(lit) {
			if err != errArgsInexact {
				t.Fatalf("%q is not exact as %s: got %q, %v", lit, want, got, err)
			}
			return
		}
		if err != nil || string(got) != string(want) {
			t.Fatalf("%q: got %q, %v; want %s", lit, got, err, want)
		}
	})
}

// FuzzShortestExact differentially tests shortestExact, which decides with
// a 128-bit power of ten whether d × 10^q is the shortest form of its
// double, against strconv (strconvShortest): it may leave a case to
// strconv, never contradict it. Each input is tried as d × 10^q and, read
// as the bits of a double, as that double's shortest form with its last
// digit nudged by q mod 3 − 1 (so that most tries are shortest forms, which
// random d and q seldom are). Seeds: shortest forms and their neighbours,
// powers of two, the extremes of the double range.
func FuzzShortestExact(f *testing.F) {
	for _, s := range [][2]int64{{17976931348623157, 292}, {22250738585072014, -324}, {5, -324}, {49406564584124654, -340},
		{30000000000000004, -17}, {9007199254740992, 0}, {9007199254740993, 0}, {11102230246251565, -32}, {7120236347223045, -322},
		{1, 23}, {12345678901234567, -24}, {89884656743115795, 291}, {2, -324}, {3, -324}, {25, -325}} {
		f.Add(uint64(s[0]), int16(s[1]))
	}
	check := func(t *testing.T, d uint64, q int) {
		for d%10 == 0 && d != 0 {
			d /= 10
			q++
		}
		if d == 0 || d >= 1e17 || q < pow10Min-10 || q > pow10Max+10 {
			return
		}
		if shortestExact(d, q) && !strconvShortest(t, d, q) {
			t.Fatalf("shortestExact(%d, %d) accepts what strconv refuses", d, q)
		}
	}
	f.Fuzz(func(t *testing.T, d uint64, q int16) {
		check(t, d, int(q))
		fl := math.Abs(math.Float64frombits(d))
		if fl == 0 || math.IsInf(fl, 0) || math.IsNaN(fl) {
			return
		}
		m, e, _ := strings.Cut(strconv.FormatFloat(fl, 'e', -1, 64), "e")
		digits := strings.Replace(m, ".", "", 1)
		sd, err := strconv.ParseUint(digits, 10, 64)
		x, err2 := strconv.Atoi(e)
		if err != nil || err2 != nil {
			t.Fatal(m, e)
		}
		check(t, uint64(int64(sd)+int64(q)%3-1), x-len(digits)+1)
	})
}

// appendES6NumberRef appends f as ECMAScript's Number.prototype.toString
// does, by strconv's shortest formatting: the plain reference for
// FuzzJCSNumber.
func appendES6NumberRef(out []byte, f float64) []byte {
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

// utf16Order is the plain definition of RFC 8785's member order, the
// reference for compareUTF16 and compareKeys: the names' UTF-16 code
// units, compared one by one.
func utf16Order(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// FuzzCompareUTF16 differentially tests compareUTF16, which compares UTF-8
// bytes, and the member order canonical uses (compareKeys with 8-byte
// prefixes), against utf16Order.
func FuzzCompareUTF16(f *testing.F) {
	for _, p := range [][2]string{{"a", "b"}, {"\ue000", "😀"}, {"\uffff", "\U0010ffff"}, {"é", "e"}, {"ab", "a"}, {"\ud7ff", "\ue000"}, {"x\u00e9", "x\u00ea"},
		{"abcdefgh1", "abcdefgh0"}, {"a", "a\x00"}, {"a\x00b", "a"}, {"item_01", "item_10"}, {"abcdefg\u00e9", "abcdefgz"}, {"", "\x00"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		want := utf16Order(a, b)
		got := compareUTF16([]byte(a), []byte(b))
		if (got < 0) != (want < 0) || (got == 0) != (want == 0) {
			t.Fatalf("compareUTF16(%q, %q) = %d, UTF-16 order says %d", a, b, got, want)
		}
		// Every way the name can sit in its buffer: followed by a word
		// of other bytes or at its end (sortKey reads 8 bytes at once
		// only where the buffer holds them).
		for _, tail := range []string{"", "\xff\xff\xff\xff\xff\xff\xff\xff"} {
			p := jcsParser{keys: []byte(a + b + tail)}
			members := []jcsMember{{nameEnd: len(a)}, {nameAt: len(a), nameEnd: len(a) + len(b)}}
			ka, kb := p.sortKey(members, 0), p.sortKey(members, 1)
			if got := p.compareKeys(members, ka, kb); (got < 0) != (want < 0) || (got == 0) != (want == 0) {
				t.Fatalf("compareKeys(%q, %q) = %d, UTF-16 order says %d", a, b, got, want)
			}
		}
	})
}

// FuzzPlainName differentially tests plainName, the member name fast
// path, against plainString and nameKey (checkPlainName) on a quoted name
// followed by the fuzzer's tail, and on the same text unterminated.
func FuzzPlainName(f *testing.F) {
	f.Add("next", ":1}")
	f.Add("configuration.option_042", `:true,"b":null}`)
	f.Add("é中😀\u0041", ":")
	f.Add("\"\x01\xff", "")
	f.Fuzz(func(t *testing.T, name, tail string) {
		in := []byte(`"` + name + `"` + tail)
		checkPlainName(t, in)
		checkPlainName(t, in[:1+len(name)])
	})
}

// FuzzPackedSort differentially tests the member order of objects of 33 to
// 256 members (packedSort: 7 bytes after the names' shared prefix, mapped
// by utf16Rank, sorted as integers) against utf16Order, through
// Canonical: the fuzzer's names, cut from its input at 0xff bytes, share
// a prefix of its choosing and are padded with generated names to an
// object of n members, written in the input's order. The canonical form
// must list them in UTF-16 order, and a repeated name must be refused.
func FuzzPackedSort(f *testing.F) {
	f.Add("", "a\xffb\xff\ue000\xff😀\xffé", uint8(40))
	f.Add("shared_prefix_of_21_b", "x\xffy\xff\x00\xffx\x00", uint8(90))
	f.Add("é中", "\uffff\xff\U00010000\xff\uE000\xff\U0010ffff", uint8(200))
	f.Fuzz(func(t *testing.T, prefix, cut string, n uint8) {
		size := maxInsertionSort + 1 + int(n)%(maxPackedSort-maxInsertionSort)
		if !utf8.ValidString(prefix) {
			return
		}
		var names []string
		for _, s := range strings.Split(cut, "\xff") {
			if utf8.ValidString(s) {
				names = append(names, prefix+s)
			}
		}
		for i := 0; len(names) < size; i++ {
			names = append(names, prefix+"~"+strconv.Itoa(i*7919%100003))
		}
		names = names[:size]
		var sb strings.Builder
		sb.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				sb.WriteByte(',')
			}
			q, _ := json.Marshal(name)
			sb.Write(q)
			sb.WriteString(":" + strconv.Itoa(i))
		}
		sb.WriteByte('}')
		got, err := Canonical([]byte(sb.String()))
		unique := map[string]bool{}
		for _, name := range names {
			unique[name] = true
		}
		if len(unique) < len(names) {
			if err != errArgsDuplicate {
				t.Fatalf("a repeated name among %q: got %v", names, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("names %q: %v", names, err)
		}
		var back map[string]int
		dec := json.NewDecoder(bytes.NewReader(got))
		if err := dec.Decode(&back); err != nil || len(back) != len(names) {
			t.Fatalf("canonical form %q does not decode to the %d members (%v)", got, len(names), err)
		}
		want := slices.Clone(names)
		slices.SortFunc(want, utf16Order)
		// The members in the canonical text, in order: decode tokens.
		dec = json.NewDecoder(bytes.NewReader(got))
		dec.Token() // {
		for i := 0; dec.More(); i++ {
			tok, _ := dec.Token()
			if tok != want[i] {
				t.Fatalf("member %d is %q, UTF-16 order puts %q there", i, tok, want[i])
			}
			dec.Token() // the value
		}
	})
}
