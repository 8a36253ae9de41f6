package jcs

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Tests that close the gaps mutation testing found in jcs.go and plan.go
// (issue 21, when they were the root package's fingerprint.go and
// fingerprint_plan.go). Each names the behaviour it pins.

// checkPlanCovers checks v against the plain path (checkPlanAgrees) and
// that the Go-value plan answers for it.
func checkPlanCovers(t *testing.T, v any) {
	t.Helper()
	if !checkPlanAgrees(t, v) {
		t.Errorf("%T %+v: the plan does not cover it", v, v)
	}
}

// TestGoPlanSpellsQuotedFloatsAsEncodingJSON pins the spelling of a
// float in a ",string" field, which the plan writes verbatim inside a JSON
// string (no number canonicalization applies there): encoding/json's
// switch to exponent form below 1e-6 and from 1e21, decided on the
// float32 value for a float32, and its e-07 → e-7 clean-up.
func TestGoPlanSpellsQuotedFloatsAsEncodingJSON(t *testing.T) {
	type quoted64 struct {
		F float64 `json:"f,string"`
	}
	type quoted32 struct {
		F float32 `json:"f,string"`
	}
	for _, f := range []float64{
		0, math.Copysign(0, -1), 0.5, -123.456,
		1e-7, -1e-7, 1.5e-7, 1e-6, math.Nextafter(1e-6, 0), 9.99e-7,
		1e20, math.Nextafter(1e21, 0), 1e21 - 1e13, 1e21, -1e21, 1.5e21,
		1e-10, 1e-100, 1e100, 5e-324, math.MaxFloat64,
	} {
		checkPlanCovers(t, quoted64{f})
	}
	for _, f := range []float32{
		0, 0.5, -123.456,
		1e-7, -1e-7, 1e-6, math.Nextafter32(1e-6, 0), 1e-10,
		1e20, math.Nextafter32(1e21, 0), 1e21, -1e21, 1e30,
		math.SmallestNonzeroFloat32, math.MaxFloat32,
	} {
		checkPlanCovers(t, quoted32{f})
	}
}

// TestGoPlanRefusesEveryInvalidUTF8LeadByte pins that a Go string whose
// invalid UTF-8 starts with a byte from 0x80 (a lone continuation byte)
// up is refused as the plain path refuses it, not written as an escape.
func TestGoPlanRefusesEveryInvalidUTF8LeadByte(t *testing.T) {
	for _, s := range []string{"\x80", "a\x80b", "\xbf", "12345678\x80", "\xc3", "\xed\xa0\x80", "\xf5\x80\x80\x80", "\xff"} {
		for _, v := range []any{s, map[string]string{"k": s}, map[string]int{s: 1}, struct{ S string }{s}} {
			if checkPlanAgrees(t, v) {
				t.Errorf("%T %q: the plan answers for invalid UTF-8", v, s)
			}
			if _, err := Sum(v); reasonOf(err) != reasonOf(errArgsReplaced) {
				t.Errorf("%T %q: ArgsFingerprint error %v, want %v", v, s, err, errArgsReplaced)
			}
		}
	}
}

// TestGoPlanWritesValidRunesItself pins that the plan covers strings
// with every length of valid UTF-8 rune, U+FFFD written as itself among
// them (only an invalid byte makes the plan give up).
func TestGoPlanWritesValidRunesItself(t *testing.T) {
	for _, s := range []string{"\ufffd", "report\ufffd.pdf", "\u0080", "\u07ff", "\u0800", "\uffff", "\U00010000", "\U0010ffff", "12345678\ufffd"} {
		checkPlanCovers(t, s)
		checkPlanCovers(t, map[string]string{s: s})
	}
}

// TestGoPlanWritesStringsEndingOnAWordBoundary pins that a Go string whose
// plain bytes run in whole 8-byte words up to its end (after nothing, a
// multi-byte character or an escape) is written in full, with no read
// past its end.
func TestGoPlanWritesStringsEndingOnAWordBoundary(t *testing.T) {
	for _, s := range []string{"abcdefgh", "abcdefghijklmnop", "éabcdefgh", "\nabcdefgh", "a\"abcdefgh"} {
		checkPlanCovers(t, s)
		checkPlanCovers(t, struct{ S string }{s})
	}
}

// TestArgsFingerprintReusesItsScratch pins that ArgsFingerprint returns
// its parser to jcsScratch and reuses it: in steady state, fingerprinting
// JSON text or a Go map allocates nothing.
func TestArgsFingerprintReusesItsScratch(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	for _, args := range []any{
		[]byte(`{"b":[1,2,{"y":"\u00e9","x":0.5}],"a":"q","c":"\u0041"}`),
		map[string]any{"b": []any{1, "x"}, "a": 0.5},
	} {
		if _, err := Sum(args); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = Sum(args) }); n != 0 {
			t.Errorf("%T: %v allocations per ArgsFingerprint, want 0", args, n)
		}
	}
}

// TestJCSScratchDropsParsersThatGrewLarge pins maxPooledJCS: a parser
// whose buffer grew past the cap (any one of them) is not returned to
// jcsScratch, so one huge argument does not pin its memory.
func TestJCSScratchDropsParsersThatGrewLarge(t *testing.T) {
	const bytesOver, membersOver = maxPooledJCS + 1, maxPooledJCS/32 + 1
	for name, p := range map[string]*jcsParser{
		"out":     {out: make([]byte, 0, bytesOver)},
		"keys":    {keys: make([]byte, 0, bytesOver)},
		"str":     {str: make([]byte, 0, bytesOver)},
		"tmp":     {tmp: make([]byte, 0, bytesOver)},
		"members": {members: make([]jcsMember, 0, membersOver)},
		"order":   {order: make([]jcsSortKey, 0, membersOver)},
	} {
		p.release()
		if got := jcsScratch.Get().(*jcsParser); got == p {
			t.Errorf("a parser with %d of %s went back to the pool", max(cap(p.out), cap(p.keys), cap(p.str), cap(p.tmp), cap(p.members), cap(p.order)), name)
		}
	}
}

// TestJCSScratchKeepsParsersAtTheCap pins the other side of maxPooledJCS:
// buffers of exactly the cap do not stop a parser going back to the pool.
// A Get right after the Put returns it unless the goroutine moved to
// another P in between, so each buffer gets a few fresh tries.
func TestJCSScratchKeepsParsersAtTheCap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	const bytesAt, membersAt = maxPooledJCS, maxPooledJCS / 32
	for name, mk := range map[string]func() *jcsParser{
		"out":     func() *jcsParser { return &jcsParser{out: make([]byte, 0, bytesAt)} },
		"keys":    func() *jcsParser { return &jcsParser{keys: make([]byte, 0, bytesAt)} },
		"str":     func() *jcsParser { return &jcsParser{str: make([]byte, 0, bytesAt)} },
		"tmp":     func() *jcsParser { return &jcsParser{tmp: make([]byte, 0, bytesAt)} },
		"members": func() *jcsParser { return &jcsParser{members: make([]jcsMember, 0, membersAt)} },
		"order":   func() *jcsParser { return &jcsParser{order: make([]jcsSortKey, 0, membersAt)} },
	} {
		kept := false
		for try := 0; try < 20 && !kept; try++ {
			_ = jcsScratch.Get() // empty this P's private slot
			p := mk()
			p.release()
			kept = jcsScratch.Get().(*jcsParser) == p
		}
		if !kept {
			t.Errorf("a parser with %s at the cap never came back from the pool", name)
		}
	}
}

// TestCanonicalJSONRefusesMisspelledLiterals pins that true, false and
// null are compared letter by letter, not only by length, and that a
// literal cut short at the end of the input is refused without reading
// past it: each input sits in a slice whose capacity is its length, so a
// read beyond would panic, and in one whose spare capacity holds the rest
// of the literal, which must not count.
func TestCanonicalJSONRefusesMisspelledLiterals(t *testing.T) {
	for _, in := range []string{
		`trux`, `tRue`, `nulL`, `fals3`, `[nulx]`, `{"a":trux}`, `[true,fa1se]`,
		`t`, `tru`, `[tru`, `[fals`, `{"a":nul`, `{"a":[null,tr`,
	} {
		exact := make([]byte, len(in))
		copy(exact, in)
		spare := []byte(in + "true false null")[:len(in)]
		for _, text := range [][]byte{exact, spare} {
			if out, err := Canonical(text); out != nil || err != errArgsSyntax {
				t.Errorf("Canonical(%q) = %q, %v; want %v", in, out, err, errArgsSyntax)
			}
		}
	}
}

// TestCanonicalJSONRefusesContainersCutShort pins that an array or object
// cut off right after its opening bracket or a comma (white space or not)
// is refused with errArgsSyntax and no read past the input.
func TestCanonicalJSONRefusesContainersCutShort(t *testing.T) {
	for _, in := range []string{`[`, `[ `, "[\n\t", `[[`, `[1,`, `[1, `, `{`, `{ `, `{"a":1,`, `{"a":1, `, `{"a":`, `{"a" :`, `{"a"`} {
		exact := make([]byte, len(in))
		copy(exact, in)
		if out, err := Canonical(exact); out != nil || err != errArgsSyntax {
			t.Errorf("Canonical(%q) = %q, %v; want %v", in, out, err, errArgsSyntax)
		}
	}
}

// TestCanonicalJSONNumberLiterals pins the canonical form, or the
// refusal, of number literals at the edges of the canonicalizer's paths:
// the short-integer and short-decimal fast paths (15 and 16 characters,
// six leading zeros after "0."), the exact-digit path, the ParseFloat
// check (beyond 15 digits or 10^±300) and ECMAScript's switch to exponent
// form below 1e-6 and from 1e21.
func TestCanonicalJSONNumberLiterals(t *testing.T) {
	cases := []struct{ in, want string }{
		// Fast paths and their edges.
		{"123456789012345", "123456789012345"},
		{"-12345678901234", "-12345678901234"},
		{"100000000000000", "100000000000000"},
		{"1234567890123456", "1234567890123456"},
		{"1.23456789012345", "1.23456789012345"},
		{"-1.2345678901234", "-1.2345678901234"},
		{"0.12345678901234", "0.12345678901234"},
		{"0.000001", "0.000001"},
		{"0.0000012345", "0.0000012345"},
		{"0.0000001", "1e-7"},
		{"-0.0000001", "-1e-7"},
		{"0.00000012345678", "1.2345678e-7"},
		{"1.0000001", "1.0000001"},
		{"1.000000000000001", "1.000000000000001"},
		{"0.10", "0.1"},
		{"1.50", "1.5"},
		{"-0", "0"},
		{"-0.0", "0"},
		{"0.000e99", "0"},
		{"0e0", "0"},
		{"-0e-5", "0"},
		// Exponents, digits and the ES6 forms.
		{"1e2", "100"},
		{"1E+2", "100"},
		{"1.5e2", "150"},
		{"-1.5e-300", "-1.5e-300"},
		{"12e-1", "1.2"},
		{"123e-5", "0.00123"},
		{"123e-9", "1.23e-7"},
		{"1e20", "100000000000000000000"},
		{"1e21", "1e+21"},
		{"12.5e19", "125000000000000000000"},
		{"1.25e21", "1.25e+21"},
		{"1e-6", "0.000001"},
		{"1e-7", "1e-7"},
		{"1.5e-7", "1.5e-7"},
		{"1e300", "1e+300"},
		{"1e301", "1e+301"},
		{"1.5e-301", "1.5e-301"},
		{"1e-300", "1e-300"},
		{"9.99999999999999e-301", "9.99999999999999e-301"},
		{"9007199254740992", "9007199254740992"},
		{"9007199254740992.000", "9007199254740992"},
		{"0.1234567890123456", "0.1234567890123456"},
		{"0.30000000000000004", "0.30000000000000004"},
		{"5e-324", "5e-324"},
		{"1.5e-323", "1.5e-323"},
		{"2.2250738585072014e-308", "2.2250738585072014e-308"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		// Refusals.
		{"999999999999999999999", ""},
		{"123456789012345678e3", ""},
		{"12345678901234567e5", ""},
		{"4.9406564584124654e-324", ""},
		{"9007199254740993", ""},
		{"1234567890123456789", ""},
		{"0.10000000000000000001", ""},
		{"123456789012345678", ""},
		{"3e-324", ""},
		{"2e-324", ""},
		{"1e-400", ""},
		{"1e309", ""},
		{"-1e309", ""},
		{"1.7976931348623159e308", ""},
		{"1e99999999999999999999", ""},
		{"1e-99999999999999999999", ""},
	}
	for _, c := range cases {
		got, err := Canonical([]byte(c.in))
		if c.want == "" {
			if got != nil || !errors.Is(err, ErrArgsInvalid) {
				t.Errorf("Canonical(%s) = %s, %v; want ErrArgsInvalid", c.in, got, err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

// nest wraps v n times: in a slice, a map member "k", a struct field A or
// a pointer, each level a new type built by reflection.
func nest(v reflect.Value, n int, kind reflect.Kind) reflect.Value {
	for range n {
		t := v.Type()
		switch kind {
		case reflect.Slice:
			s := reflect.MakeSlice(reflect.SliceOf(t), 1, 1)
			s.Index(0).Set(v)
			v = s
		case reflect.Map:
			m := reflect.MakeMap(reflect.MapOf(reflect.TypeFor[string](), t))
			m.SetMapIndex(reflect.ValueOf("k"), v)
			v = m
		case reflect.Struct:
			s := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "A", Type: t}})).Elem()
			s.Field(0).Set(v)
			v = s
		case reflect.Pointer:
			p := reflect.New(t)
			p.Elem().Set(v)
			v = p
		}
	}
	return v
}

// TestGoPlanReachesMaxJSONDepth pins how deep the Go-value plan writes
// before it leaves a value to the plain path: MaxJSONDepth levels of
// arrays, objects, pointers and interfaces together. For slices, maps and
// structs that is the plain path's own limit, so the plan answers for
// every such value CanonicalJSON accepts; one level more and both give up.
// Pointers and interfaces count too (so every cycle ends), and []any or
// map[string]any nests two levels per JSON level.
func TestGoPlanReachesMaxJSONDepth(t *testing.T) {
	leaf := reflect.ValueOf(7)
	deepAny := func(n int, wrap func(any) any) any {
		var v any = "leaf"
		for range n {
			v = wrap(v)
		}
		return v
	}
	cases := []struct {
		name            string
		atLimit, beyond any
		plainAccepts    bool // the plain path's answer one level beyond
	}{
		{"typed slices", nest(leaf, MaxJSONDepth, reflect.Slice).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Slice).Interface(), false},
		{"typed maps", nest(leaf, MaxJSONDepth, reflect.Map).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Map).Interface(), false},
		{"structs", nest(leaf, MaxJSONDepth, reflect.Struct).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Struct).Interface(), false},
		{"map[string]string in typed slices",
			nest(reflect.ValueOf(map[string]string{"a": "b"}), MaxJSONDepth-1, reflect.Slice).Interface(),
			nest(reflect.ValueOf(map[string]string{"a": "b"}), MaxJSONDepth, reflect.Slice).Interface(), false},
		{"map[string]any in typed slices",
			nest(reflect.ValueOf(map[string]any{"a": "b"}), MaxJSONDepth-2, reflect.Slice).Interface(),
			nest(reflect.ValueOf(map[string]any{"a": "b"}), MaxJSONDepth-1, reflect.Slice).Interface(), true},
		{"pointers", nest(leaf, MaxJSONDepth, reflect.Pointer).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Pointer).Interface(), true},
		{"[]any", deepAny(MaxJSONDepth/2, func(v any) any { return []any{v} }), deepAny(MaxJSONDepth/2+1, func(v any) any { return []any{v} }), true},
		{"map[string]any", deepAny(MaxJSONDepth/2, func(v any) any { return map[string]any{"k": v} }), deepAny(MaxJSONDepth/2+1, func(v any) any { return map[string]any{"k": v} }), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkPlanCovers(t, c.atLimit)
			if checkPlanAgrees(t, c.beyond) {
				t.Errorf("the plan answers one level beyond its limit")
			}
			if _, err := fingerprintMarshalled(c.beyond); (err == nil) != c.plainAccepts {
				t.Errorf("plain path one level beyond: %v, want accepted %v", err, c.plainAccepts)
			}
		})
	}
}

// TestGoPlanSkipsUnexportedFieldsAnywhere pins that an unexported or "-"
// field is skipped wherever it stands, with the fields after it written.
func TestGoPlanSkipsUnexportedFieldsAnywhere(t *testing.T) {
	type fields struct {
		a int
		B string `json:"b"`
		C int    `json:"-"`
		D bool   `json:"d"`
		e string
		F []int `json:"f"`
	}
	checkPlanCovers(t, fields{a: 1, B: "x", C: 2, D: true, e: "y", F: []int{3}})
}

// TestGoPlanWritesNullForNilSlicesOfAnyType pins that a nil slice or map
// is null, and an empty slice or array [], whatever its element type
// (encoding/json never looks at the elements, even of a type it refuses):
// the plan covers these instead of leaving them to the plain path.
func TestGoPlanWritesNullForNilSlicesOfAnyType(t *testing.T) {
	for _, v := range []any{[]chan int(nil), [0]chan int{}, []func(){}, map[string]complex64(nil), struct {
		C []chan int        `json:"c"`
		M map[string]func() `json:"m"`
	}{}} {
		checkPlanCovers(t, v)
	}
}

// TestCanonicalJSONStringEdges pins the string parser at its edges: input
// that ends inside an escape (each text sits in a slice whose capacity is
// its length, so a read past the end would panic), every hexadecimal
// digit and the characters either side of each digit range, lone
// surrogates and what follows them, a raw U+FFFD next to an escape, and a
// lone continuation byte in a string with and without escapes.
func TestCanonicalJSONStringEdges(t *testing.T) {
	cases := []struct {
		in   string
		want string // canonical form, or empty for a refusal
		err  error  // the refusal
	}{
		{`"\u0123\u4567\u89ab\ucdef\u89AB\uCDEF"`, "\"\u0123\u4567\u89ab\ucdef\u89ab\ucdef\"", nil},
		{`"\u0030\u0039\u0061\u0066\u0041\u0046"`, `"09afAF"`, nil},
		{`"\u003a"`, `":"`, nil},
		{"\"\ufffd\\n\"", "\"\ufffd\\n\"", nil},
		{"\"\ufffd\"", "\"\ufffd\"", nil},
		{`"\"\\\/\b\f\n\r\t"`, `"\"\\/\b\f\n\r\t"`, nil},
		{`"\ud83d\ude00"`, "\"\U0001F600\"", nil},
		{`"\udbff\udfff"`, "\"\U0010FFFF\"", nil},
		{`"\`, "", errArgsSyntax},
		{`"abc\`, "", errArgsSyntax},
		{`"abc\"`, "", errArgsSyntax},
		{`"\u`, "", errArgsSyntax},
		{`"\u004`, "", errArgsSyntax},
		{`"\u0041`, "", errArgsSyntax},
		{`"\u/000"`, "", errArgsSyntax},
		{`"\u:000"`, "", errArgsSyntax},
		{`"\u@000"`, "", errArgsSyntax},
		{`"\uG000"`, "", errArgsSyntax},
		{"\"\\u`000\"", "", errArgsSyntax},
		{`"\ug000"`, "", errArgsSyntax},
		{`"\ud800`, "", errArgsSurrogate},
		{`"\ud800\`, "", errArgsSurrogate},
		{`"\ud800\"`, "", errArgsSurrogate},
		{`"\ud800\u`, "", errArgsSyntax},
		{`"\udbff\u0041"`, "", errArgsSurrogate},
		{`"\ud800\ud800"`, "", errArgsSurrogate},
		{`"\udc00"`, "", errArgsSurrogate},
		{`"\udc00\udc00"`, "", errArgsSurrogate},
		{`"\udc00\uZZZZ"`, "", errArgsSurrogate},
		{`"\udfff\u0041"`, "", errArgsSurrogate},
		{"\"\x80\"", "", errArgsUTF8},
		{"\"a\x80\\n\"", "", errArgsUTF8},
		{"\"12345678\x80\"", "", errArgsUTF8},
		{"\"\\n\xbf\"", "", errArgsUTF8},
		{"\"\\n\xc3\"", "", errArgsUTF8},
		{"\"\\n\x1f\"", "", errArgsSyntax},
		{"\"\x1f\"", "", errArgsSyntax},
	}
	for _, c := range cases {
		for _, key := range []bool{false, true} {
			in, want := c.in, c.want
			if key { // the same string as a member name
				in, want = "{"+c.in+":0}", "{"+c.want+":0}"
			}
			text := make([]byte, len(in))
			copy(text, in)
			got, err := Canonical(text)
			if c.err != nil {
				if got != nil || err != c.err {
					t.Errorf("Canonical(%q) = %q, %v; want %v", in, got, err, c.err)
				}
				continue
			}
			if err != nil || string(got) != want {
				t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, err, want)
			}
		}
	}
}

// TestCanonicalJSONRefusesUnterminatedStrings pins that a string with no
// closing quote is refused with errArgsSyntax wherever it stands (a value
// or a member name, after other text) and whatever its length, including
// runs of plain bytes that fill whole 8-byte words up to the end of the
// input (each text sits in a slice whose capacity is its length).
func TestCanonicalJSONRefusesUnterminatedStrings(t *testing.T) {
	for _, in := range []string{
		`"`, `"a`, `"abcdefg`, `"abcdefgh`, `"abcdefghijklmnop`, `"abcdefghi`,
		`[1,"abc`, `[1,"abcdefgh`, `{"a":"abc`, `{"a":"abcdefgh`, `{"a":1,"bcd`, `{"abcdefgh`, `[{"a":"é`,
	} {
		text := make([]byte, len(in))
		copy(text, in)
		if out, err := Canonical(text); out != nil || err != errArgsSyntax {
			t.Errorf("Canonical(%q) = %q, %v; want %v", in, out, err, errArgsSyntax)
		}
	}
}

// A number literal whose leading zeros reach 2^30 cannot pull an exponent
// too large for a double back into range: the exponent saturates beyond
// anything the literal's length can offset. Before, it stopped growing at
// 2^30, so 0.(2^30 zeros)1e1073741829000, a value far beyond double range,
// canonicalized as 10000. It needs a 1 GiB input (about 2 GiB and 5 s in
// all), so it runs only with CTOKEN_LARGE_TESTS=1 and without -race; .ci/run
// runs it so.
func TestCanonicalJSONHugeLiteralCannotCancelASaturatedExponent(t *testing.T) {
	if os.Getenv("CTOKEN_LARGE_TESTS") == "" || raceEnabled {
		t.Skip("allocates about 2 GiB: set CTOKEN_LARGE_TESTS=1, without -race")
	}
	const zeros = 1 << 30
	in := make([]byte, 0, zeros+32)
	in = append(in, "0."...)
	in = append(in, make([]byte, zeros)...)
	for i := 2; i < len(in); i++ {
		in[i] = '0'
	}
	in = append(in, "1e1073741829000"...)
	fp, err := Sum(in)
	if err == nil {
		t.Fatalf("a value beyond double range fingerprinted (as %x; 10000 is %x)", fp, sha256.Sum256([]byte("10000")))
	}
	if !errors.Is(err, ErrArgsInvalid) {
		t.Fatalf("err = %v, want ErrArgsInvalid", err)
	}
}

// TestCanonicalJSONSortsObjectsLargerThanInsertionSort pins the path
// sortKeys takes for an object of more than maxInsertionSort members
// (slices.SortFunc, then a pass over neighbours for duplicates): such an
// object, in reverse or shuffled order, with names that share their first
// 8 bytes, non-ASCII names and escaped ones, comes out in UTF-16 order
// with each value beside its name, and a duplicate name anywhere in it
// (first, last or middle of the sorted order, spelled the same or escaped
// differently) is refused with errArgsDuplicate.
func TestCanonicalJSONSortsObjectsLargerThanInsertionSort(t *testing.T) {
	// The names hold no '"', '\\' or control character, so quoting one
	// is its canonical spelling; escape spells its first (ASCII) byte
	// as a \u escape instead.
	type member struct{ name, spelled string }
	quote := func(name string) string { return `"` + name + `"` }
	escape := func(name string) string { return fmt.Sprintf(`"\u%04x%s"`, name[0], name[1:]) }
	names := func(n int, format string) []member {
		ms := make([]member, n)
		for i := range ms {
			name := fmt.Sprintf(format, i)
			ms[i] = member{name, quote(name)}
		}
		return ms
	}
	reversed := func(ms []member) []member { slices.Reverse(ms); return ms }
	shuffled := func(ms []member) []member {
		// A fixed permutation: i*7 mod n visits every index when n is not a multiple of 7.
		out := make([]member, len(ms))
		for i := range ms {
			out[i] = ms[i*7%len(ms)]
		}
		return out
	}
	mixed := func() []member {
		var ms []member
		for i, s := range []string{"é", "\uE000", "\uFFFF", "😀", "\U00010000", "z", "a", "\x7f"} {
			for j := range 5 {
				name := fmt.Sprintf("%s%d%d", s, i, j)
				ms = append(ms, member{name, quote(name)})
			}
		}
		return reversed(ms)
	}
	escaped := func(ms []member) []member {
		for i := range ms {
			if i%3 == 0 { // a name the parser unescapes
				ms[i].spelled = escape(ms[i].name)
			}
		}
		return ms
	}
	text := func(ms []member) string {
		parts := make([]string, len(ms))
		for i, m := range ms {
			parts[i] = fmt.Sprintf("%s: %d", m.spelled, i)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	for _, tc := range []struct {
		name    string
		members []member
	}{
		{"33 reversed", reversed(names(maxInsertionSort+1, "k%03d"))},
		{"40 shuffled", shuffled(names(40, "k%03d"))},
		{"200 reversed, shared 8-byte prefix", reversed(names(200, "longname_%03d"))},
		{"40 non-ASCII, reversed", mixed()},
		{"50 escaped, reversed", escaped(reversed(names(50, "n%02d")))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := tc.members
			if len(ms) <= maxInsertionSort {
				t.Fatalf("%d members: not above maxInsertionSort", len(ms))
			}
			order := make([]int, len(ms))
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(a, b int) int { return utf16Order(ms[a].name, ms[b].name) })
			parts := make([]string, len(ms))
			for i, j := range order {
				parts[i] = fmt.Sprintf("%s:%d", quote(ms[j].name), j)
			}
			want := "{" + strings.Join(parts, ",") + "}"
			if got, err := Canonical([]byte(text(ms))); err != nil || string(got) != want {
				t.Fatalf("CanonicalJSON = %q, %v; want %q", got, err, want)
			}
			// The smallest, the largest and a middle name again, at the
			// end of the object, spelled plainly and escaped (the
			// non-ASCII names of "mixed" start with an ASCII byte only
			// for "a", "z" and DEL, so the escape is of a plain name).
			for _, j := range []int{order[0], order[len(order)-1], order[len(order)/2]} {
				spellings := []string{quote(ms[j].name)}
				if ms[j].name[0] < utf8.RuneSelf {
					spellings = append(spellings, escape(ms[j].name))
				}
				for _, spelled := range spellings {
					dup := append(slices.Clone(ms), member{ms[j].name, spelled})
					if got, err := Canonical([]byte(text(dup))); got != nil || err != errArgsDuplicate {
						t.Errorf("name %q twice (as %s): CanonicalJSON = %q, %v; want %v", ms[j].name, spelled, got, err, errArgsDuplicate)
					}
				}
			}
		})
	}
}

// TestCanonicalJSONRefusesARepeatOfThePreviousNameAtOnce pins that a
// member whose name equals the one just before it is refused as a
// duplicate (errArgsDuplicate, ReasonArgsDuplicate) once its name and
// colon are read, before its value: an object cut short or malformed
// after that still reports the duplicate, not a syntax error. Names short and
// long (equal 8-byte prefixes), non-ASCII and escaped.
func TestCanonicalJSONRefusesARepeatOfThePreviousNameAtOnce(t *testing.T) {
	for _, in := range []string{
		`{"a":1,"a":`,
		`{"a":1,"a":2`,
		`{"a":1,"a":2,`,
		`{"a":1,"a":x}`,
		`{"0":1,"a":1,"a":[1,`,
		`{"abcdefgh":1,"abcdefgh":`,
		`{"abcdefghij":1,"abcdefghij":{"b":`,
		`{"é":1,"é":`,
		`{"\u00e9x":1,"éx":`,
		`{"a":1,"\u0061":`,
		`[{"k":{"x":1,"x":`,
	} {
		exact := []byte(in)
		if out, err := Canonical(exact); out != nil || err != errArgsDuplicate || reasonOf(err) != "duplicate object member name" { // ctoken.ReasonArgsDuplicate
			t.Errorf("Canonical(%q) = %q, %v; want %v", in, out, err, errArgsDuplicate)
		}
	}
}

// TestCanonicalJSONOrdersNamesBeyondTheirPrefixes pins the in-order check
// canonical makes as members arrive, where two names' 8-byte ASCII
// prefixes do not settle their order (a name longer than 8 bytes sharing
// its prefix with the previous one, or a non-ASCII name) and compareKeys
// does: members in order are written as they are, and members out of
// order are sorted, including the UTF-16 case where a character above
// U+FFFF sorts below U+E000.
func TestCanonicalJSONOrdersNamesBeyondTheirPrefixes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"abcdefgha":1,"abcdefghz":2}`, `{"abcdefgha":1,"abcdefghz":2}`},
		{`{"abcdefghz":1,"abcdefgha":2}`, `{"abcdefgha":2,"abcdefghz":1}`},
		{`{"abcdefgh":1,"abcdefgha":2}`, `{"abcdefgh":1,"abcdefgha":2}`},
		{`{"abcdefgha":1,"abcdefgh":2}`, `{"abcdefgh":2,"abcdefgha":1}`},
		{`{"a":1,"é":2}`, `{"a":1,"é":2}`},
		{`{"é":1,"a":2}`, `{"a":2,"é":1}`},
		{`{"éb":1,"éa":2,"éc":3}`, `{"éa":2,"éb":1,"éc":3}`},
		{`{"😀":1,"\uE000":2}`, `{"😀":1,"` + "\uE000" + `":2}`},
		{`{"\uE000":1,"😀":2}`, `{"😀":2,"` + "\uE000" + `":1}`},
		{`{"x":{"abcdefghz":1,"abcdefgha":2},"a":[{"é":1,"a":2}]}`, `{"a":[{"a":2,"é":1}],"x":{"abcdefgha":2,"abcdefghz":1}}`},
	} {
		if got, err := Canonical([]byte(tc.in)); err != nil || string(got) != tc.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}
