package jcs

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestCanonicalJSONRFC8785Examples(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{ // RFC 8785 §3.2.2, with 333333333.33333329 (refused: a double
			// cannot hold it) written as the double's exact 333333333.3333333
			"sample",
			`{
  "numbers": [333333333.3333333, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{ // RFC 8785 §3.2.3: sorting by UTF-16 code units
			"sorting",
			`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{"nested sort", `{"b":{"z":1,"a":[{"y":2,"x":1}]},"a":null}`, `{"a":null,"b":{"a":[{"x":1,"y":2}],"z":1}}`},
		{"reorder at every level", `{"z":{"y":[{"b":1,"a":{"d":0,"c":[]}}],"x":"\u00e9"},"a":{"\ud83d\ude00":1,"\uffff":2,"\ue000":3}}`, "{\"a\":{\"😀\":1,\"\ue000\":3,\"\uffff\":2},\"z\":{\"x\":\"é\",\"y\":[{\"a\":{\"c\":[],\"d\":0},\"b\":1}]}}"},
		{"empty containers", ` { "a" : [ ] , "b" : { } } `, `{"a":[],"b":{}}`},
		{"top-level scalar", ` "x" `, `"x"`},
		{"number forms", `[1.0e2, -0.0, 0.0, 1E+2, 100, 1e-7, 1e21, 1e20, 0.000001, 123e-2]`, `[100,0,0,100,100,1e-7,1e+21,100000000000000000000,0.000001,1.23]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonical([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestArgsFingerprintIgnoresSpelling(t *testing.T) {
	base, err := Sum([]byte(`{"query":"is:open","limit":100,"labels":["bug","p1"],"x":-0.0}`))
	if err != nil {
		t.Fatal(err)
	}
	same := []any{
		[]byte(`{ "limit" : 1.0e2, "labels":["bug","p1"], "query" : "is:open", "x": 0 }`),
		json.RawMessage("{\n\t\"x\":0,\"query\":\"is\\u003aopen\",\"labels\":[\"\\u0062ug\",\"p1\"],\"limit\":100.00}"),
		map[string]any{"query": "is:open", "limit": 100, "labels": []string{"bug", "p1"}, "x": 0},
		struct {
			Limit  float64  `json:"limit"`
			Labels []string `json:"labels"`
			Query  string   `json:"query"`
			X      int      `json:"x"`
		}{100, []string{"bug", "p1"}, "is:open", 0},
	}
	for i, args := range same {
		fp, err := Sum(args)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if fp != base {
			t.Fatalf("%d: fingerprint differs", i)
		}
	}
	canon := `{"labels":["bug","p1"],"limit":100,"query":"is:open","x":0}`
	if base != sha256.Sum256([]byte(canon)) {
		t.Fatal("fingerprint is not SHA-256 of the canonical form")
	}
	for _, other := range []string{
		`{"query":"is:open","limit":101,"labels":["bug","p1"],"x":0}`,
		`{"query":"is:open","limit":100,"labels":["p1","bug"],"x":0}`,
		`{"query":"is:open","limit":"100","labels":["bug","p1"],"x":0}`,
	} {
		fp, err := Sum([]byte(other))
		if err != nil || fp == base {
			t.Fatalf("different arguments, same fingerprint: %s", other)
		}
	}
}

func TestArgsFingerprintRejectsInvalidJSON(t *testing.T) {
	deep := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	okDeep := strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth)
	if _, err := Sum([]byte(okDeep)); err != nil {
		t.Fatalf("depth at the cap: %v", err)
	}
	deepObj := strings.Repeat(`{"a":`, MaxJSONDepth+1) + "1" + strings.Repeat("}", MaxJSONDepth+1)
	okDeepObj := strings.Repeat(`{"a":`, MaxJSONDepth) + "1" + strings.Repeat("}", MaxJSONDepth)
	if _, err := Sum([]byte(okDeepObj)); err != nil {
		t.Fatalf("object depth at the cap: %v", err)
	}
	cases := []string{
		``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a":1 "b":2}`,
		`{a:1}`, `'x'`, `"unterminated`, "\"tab\tinside\"", `"\x"`, `"\u12"`, `"\uZZZZ"`,
		`01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `0x10`, `NaN`, `Infinity`, `1e400`, `-1e400`,
		`tru`, `nul`, `falsey`, `{"a":1}{}`, `[1] x`,
		`{"a":1,"a":2}`, `{"a":1,"b":{"c":1,"c":1}}`, // duplicate keys (I-JSON)
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`, `"\ud800\uZZZZ"`, // lone surrogates
		"\"\xff\"", "\"\xc0\xaf\"", // invalid UTF-8
		deep, deepObj,
		`{"a":1 `, `{"a" 1}`, `{"a":1,"b"`, `[1`, `{"\q":1}`, // cut or broken inside a container
	}
	for _, in := range cases {
		_, err := Sum([]byte(in))
		if !errors.Is(err, ErrArgsInvalid) {
			t.Errorf("%q: error = %v, want ErrArgsInvalid", in, err)
		}
	}
	if _, err := Sum(math.Inf(1)); !errors.Is(err, ErrArgsInvalid) || reasonOf(err) != "value cannot be marshalled as JSON" {
		t.Fatalf("unmarshalable value: %v", err)
	}
}

func TestArgsFingerprintOfGoValues(t *testing.T) {
	nilFP, err := Sum(nil)
	if err != nil || nilFP != sha256.Sum256([]byte("null")) {
		t.Fatalf("nil: %v", err)
	}
	// A string is a Go value, marshalled to a JSON string, not JSON text.
	strFP, err := Sum(`{"a":1}`)
	if err != nil || strFP != sha256.Sum256([]byte(`"{\"a\":1}"`)) {
		t.Fatalf("string: %v", err)
	}
}

// ffffEscaper marshals to the escape encoding/json writes for invalid UTF-8.
type ffffEscaper struct{}

func (ffffEscaper) MarshalJSON() ([]byte, error) { return []byte(`"report\ufffd.pdf"`), nil }

// rawUTF8Marshaler marshals to JSON text holding invalid UTF-8.
type rawUTF8Marshaler struct{}

func (rawUTF8Marshaler) MarshalJSON() ([]byte, error) { return []byte("\"report\xff.pdf\""), nil }

func TestArgsFingerprintRefusesLossyArguments(t *testing.T) {
	const inexact = "number whose canonical form has another value (send it as a string)"
	type int64Args struct {
		ID int64 `json:"id"`
	}
	type uint64Args struct {
		ID uint64 `json:"id"`
	}
	cases := []struct {
		name   string
		args   any
		reason string
	}{
		{"invalid UTF-8 in a Go string", map[string]string{"file": "report\xff.pdf"}, "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)"},
		{"invalid UTF-8 in a Go map key", map[string]int{"report\xfe.pdf": 1}, "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)"},
		{"invalid UTF-8 in a Go struct field", struct{ F string }{"\xc0\xaf"}, "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)"},
		{"json.Marshaler writing the U+FFFD escape", []any{ffffEscaper{}}, "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)"},
		{"json.RawMessage inside a Go value with an upper-case U+FFFD escape", map[string]json.RawMessage{"f": json.RawMessage(`"\uFFFD"`)}, "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)"},
		{"json.Marshaler writing invalid UTF-8", []any{rawUTF8Marshaler{}}, "invalid UTF-8"},
		{"invalid UTF-8 in JSON text", []byte("{\"file\":\"report\xff.pdf\"}"), "invalid UTF-8"},
		{"int64 beyond 2^53", int64Args{1234567890123456789}, inexact},
		{"int64 2^53+1", int64Args{1<<53 + 1}, inexact},
		{"negative int64 beyond 2^53", int64Args{-1<<63 + 1}, inexact},
		{"uint64 maximum", uint64Args{1<<64 - 1}, inexact},
		{"json.Number beyond 2^53", map[string]json.Number{"id": "1234567890123456789"}, inexact},
		{"json.Number with too many digits", []json.Number{"0.10000000000000000001"}, inexact},
		{"big integer in JSON text", []byte(`{"id":1234567890123456789}`), inexact},
		{"2^60, which a double holds but prints as 1152921504606847000", json.RawMessage(`1152921504606846976`), inexact},
		{"over-long decimal in JSON text", []byte(`[0.10000000000000000001]`), inexact},
		{"underflow to zero in JSON text", []byte(`1e-400`), inexact},
		{"RFC 8785 §3.2.2 sample number", []byte(`333333333.33333329`), inexact},
		{"number beyond double range", []byte(`1e309`), "number outside double range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fp, err := Sum(c.args)
			if !errors.Is(err, ErrArgsInvalid) || reasonOf(err) != c.reason || fp != (Fingerprint{}) {
				t.Fatalf("ArgsFingerprint = %x, %v; want ErrArgsInvalid: %s", fp, err, c.reason)
			}
			if text, ok := c.args.([]byte); ok {
				if out, err := Canonical(text); out != nil || reasonOf(err) != c.reason {
					t.Fatalf("CanonicalJSON = %q, %v; want ErrArgsInvalid: %s", out, err, c.reason)
				}
			}
		})
	}
}

func TestArgsFingerprintKeepsDistinctArgumentsApart(t *testing.T) {
	// Each pair differs in meaning: one or both are refused, or their
	// fingerprints differ. The first pairs collided before lossless binding.
	pairs := []struct {
		name string
		a, b any
	}{
		{"invalid UTF-8 file names", map[string]string{"f": "report\xff.pdf"}, map[string]string{"f": "report\xfe.pdf"}},
		{"invalid UTF-8 and U+FFFD", map[string]string{"f": "report\xff.pdf"}, map[string]string{"f": "report\ufffd.pdf"}},
		{"int64s beyond 2^53", map[string]int64{"id": 1234567890123456789}, map[string]int64{"id": 1234567890123456800}},
		{"big integers as text", []byte(`1234567890123456789`), []byte(`1234567890123456800`)},
		{"2^53+1 and 2^53", []byte(`9007199254740993`), []byte(`9007199254740992`)},
		{"0.1 and a longer decimal", []byte(`0.1`), []byte(`0.10000000000000000001`)},
		{"big integers sent as strings", map[string]string{"id": "1234567890123456789"}, map[string]string{"id": "1234567890123456800"}},
		{"number and string", []byte(`{"limit":100}`), []byte(`{"limit":"100"}`)},
	}
	for _, c := range pairs {
		t.Run(c.name, func(t *testing.T) {
			fa, errA := Sum(c.a)
			fb, errB := Sum(c.b)
			if errA == nil && errB == nil && fa == fb {
				t.Fatalf("%v and %v share a fingerprint", c.a, c.b)
			}
		})
	}
}

func TestArgsFingerprintAcceptsExactNumbers(t *testing.T) {
	// Every spelling of a number a double holds to its last digit is
	// accepted and fingerprints as the canonical text.
	cases := []struct {
		name  string
		args  any
		canon string
	}{
		{"exponent spelling", []byte(`1.0e2`), `100`},
		{"0.1", []byte(`0.1`), `0.1`},
		{"trailing zeros", []byte(`0.10000000000000000000`), `0.1`},
		{"2^53", []byte(`9007199254740992`), `9007199254740992`},
		{"integer beyond 2^53 a double holds", []byte(`1234567890123456800`), `1234567890123456800`},
		{"exponent form of that integer", []byte(`1.2345678901234568E+18`), `1234567890123456800`},
		{"smallest subnormal", []byte(`5e-324`), `5e-324`},
		{"largest double", []byte(`1.7976931348623157e308`), `1.7976931348623157e+308`},
		{"negative zero", []byte(`-0.0e5`), `0`},
		{"int64 2^53 in a Go value", map[string]int64{"id": 1 << 53}, `{"id":9007199254740992}`},
		{"int64 beyond 2^53 a double holds", map[string]int64{"id": 1234567890123456800}, `{"id":1234567890123456800}`},
		{"int64 beyond 2^53 sent as a string", struct {
			ID int64 `json:"id,string"`
		}{1234567890123456789}, `{"id":"1234567890123456789"}`},
		{"float64 in a Go value", []float64{0.1, 1e21, 5e-324, math.Copysign(0, -1)}, `[0.1,1e+21,5e-324,0]`},
		{"float32 in a Go value", []float32{0.1, 3.4028235e38}, `[0.1,3.4028235e+38]`},
		{"U+FFFD written as itself in a Go string", "report\ufffd.pdf", "\"report\ufffd.pdf\""},
		{"U+FFFD escape in JSON text", []byte(`"report\ufffd.pdf"`), "\"report\ufffd.pdf\""},
		{"binary data as []byte in a Go value", map[string][]byte{"b": {0xff, 0xfe}}, `{"b":"//4="}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fp, err := Sum(c.args)
			if err != nil || fp != sha256.Sum256([]byte(c.canon)) {
				t.Fatalf("ArgsFingerprint = %x, %v; want SHA-256 of %s", fp, err, c.canon)
			}
		})
	}
}

func TestCanonicalJSONIsIdempotent(t *testing.T) {
	for _, in := range []string{
		`{"b":[1,2,{"d":"\u00e9\n"}],"a":1e-7}`,
		`"\u2028\u007f\/"`,
		`[0.1,0.2,0.30000000000000004]`,
	} {
		once, err := Canonical([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		twice, err := Canonical(once)
		if err != nil || string(once) != string(twice) {
			t.Fatalf("not idempotent: %s -> %s (%v)", once, twice, err)
		}
		if !json.Valid(once) {
			t.Fatalf("canonical form is not JSON: %s", once)
		}
	}
}

func TestArgsFingerprintIsSafeForConcurrentUse(t *testing.T) {
	// ArgsFingerprint reuses pooled buffers; concurrent calls on different
	// inputs (and refusals in between) must not see each other's data.
	inputs := [][]byte{
		[]byte(`{"b":[1,2,{"y":"\u00e9","x":0.5}],"a":"q"}`),
		[]byte(`{"z":1,"y":{"k":"v"},"x":[true,false,null]}`),
		[]byte(`[1.0e2,"s",{"\u0062":2,"a":1}]`),
		[]byte(`{"a":1,"a":2}`),
	}
	want := make([]Fingerprint, len(inputs))
	for i, in := range inputs {
		canon, err := Canonical(in)
		if err == nil {
			want[i] = sha256.Sum256(canon)
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 500 {
				i := (g + n) % len(inputs)
				fp, err := Sum(inputs[i])
				if fp != want[i] || (err != nil) != (want[i] == Fingerprint{}) {
					t.Errorf("input %d: fingerprint %x, %v; want %x", i, fp, err, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestInsertionSortMatchesSortFunc checks sortKeys' insertion sort
// against slices.SortFunc with compareKeys on random sets of distinct
// names: ASCII with long shared prefixes, non-ASCII, characters above
// U+FFFF against U+E000-U+FFFF (where UTF-16 order is not byte order), in
// every size up to maxInsertionSort. It checks sortKey, which reads a
// word past a short name when the buffer holds one, on the way.
func TestInsertionSortMatchesSortFunc(t *testing.T) {
	alphabet := []string{"a", "b", "z", "_", "0", "item_", "abcdefgh", "é", "\uE000", "\uFFFF", "😀", "\U00010000", "\x7f"}
	x := uint64(0x9e3779b97f4a7c15)
	next := func(n int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
	for round := range 3000 {
		n := 1 + round%maxInsertionSort
		seen := map[string]bool{}
		var names []string
		for len(names) < n {
			var sb strings.Builder
			for range next(5) {
				sb.WriteString(alphabet[next(len(alphabet))])
			}
			if name := sb.String(); !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
		p := jcsParser{}
		var members []jcsMember
		var keys []jcsSortKey
		for i, name := range names {
			at := len(p.keys)
			p.keys = append(p.keys, name...)
			members = append(members, jcsMember{nameAt: at, nameEnd: len(p.keys)})
			k := p.sortKey(members, i)
			var want uint64 // the first 8 bytes, big-endian, zero-padded
			for i := range min(len(name), 8) {
				want |= uint64(name[i]) << (56 - 8*i)
			}
			if k.prefix != want || k.ascii != (want&0x8080808080808080 == 0) || k.index != i {
				t.Fatalf("sortKey(%q) = %#x, ascii %v, index %d; want %#x, index %d", name, k.prefix, k.ascii, k.index, want, i)
			}
			keys = append(keys, k)
		}
		got := slices.Clone(keys)
		if !p.sortKeys(members, got) {
			t.Fatalf("names %q: sortKeys reports a duplicate", names)
		}
		want := slices.Clone(keys)
		slices.SortFunc(want, func(a, b jcsSortKey) int { return p.compareKeys(members, a, b) })
		for i := range want {
			g, w := p.name(&members[got[i].index]), p.name(&members[want[i].index])
			if string(g) != string(w) {
				t.Fatalf("names %q: insertion sort puts %q at %d, slices.SortFunc %q", names, g, i, w)
			}
		}
	}
}

// TestTinyNumbersMatchParseFloat pins the exact division that replaces
// strconv.ParseFloat for values below 2^-1021 (where ParseFloat takes tens
// of µs): for doubles across that range, each written with 1 to 17
// significant digits and nudged a unit in the last digit either way,
// CanonicalJSON accepts exactly the spellings whose value is the shortest
// form of ParseFloat's double, and writes that form.
func TestTinyNumbersMatchParseFloat(t *testing.T) {
	bitsOf := []uint64{1, 2, 3, 10, 1 << 20, 1<<52 - 1, 1 << 52, 1<<52 + 1, 1<<53 - 1, 1 << 53}
	x := uint64(0x9e3779b97f4a7c15)
	for range 300 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		bitsOf = append(bitsOf, x%(1<<53+1), x%(1<<12))
	}
	for _, bits := range bitsOf {
		f := math.Float64frombits(bits)
		for prec := range 17 {
			s := strconv.FormatFloat(f, 'e', prec, 64)
			mant, exp, _ := strings.Cut(s, "e")
			digits := strings.Replace(mant, ".", "", 1)
			d, _ := strconv.ParseUint(digits, 10, 64)
			for _, nd := range []uint64{d - 1, d, d + 1} {
				if nd == 0 {
					continue
				}
				ds := strconv.FormatUint(nd, 10)
				text := "0." + ds + "e" + strconv.Itoa(mustAtoi(t, exp)+1)
				// 0.ds × 10^(exp+1): s itself when nd is d.
				t.Run(text, func(t *testing.T) {
					got, err := Canonical([]byte(text))
					g, perr := strconv.ParseFloat(text, 64)
					short := strconv.FormatFloat(g, 'e', -1, 64)
					sm, _, _ := strings.Cut(short, "e")
					wantOK := perr == nil && g != 0 && strings.TrimRight(strings.Replace(sm, ".", "", 1), "0") == strings.TrimRight(ds, "0") &&
						sameScale(short, text)
					if (err == nil) != wantOK {
						t.Fatalf("accepted %v, want %v (ParseFloat %s)", err == nil, wantOK, short)
					}
					if err == nil {
						if back, _ := strconv.ParseFloat(string(got), 64); back != g {
							t.Fatalf("canonical %s is not ParseFloat's %s", got, short)
						}
					}
				})
			}
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sameScale reports whether the shortest form short (d.ddde±x) and text
// (0.ddd e y) put their first digit at the same decimal place.
func sameScale(short, text string) bool {
	_, se, _ := strings.Cut(short, "e")
	_, te, _ := strings.Cut(text, "e")
	a, _ := strconv.Atoi(se)
	b, _ := strconv.Atoi(te)
	return a+1 == b
}
