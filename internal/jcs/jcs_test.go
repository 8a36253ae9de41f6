package jcs

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestCanonicalJSON(t *testing.T) {
	t.Run("RFC 8785 examples", func(t *testing.T) {
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
	})

	t.Run("is idempotent", func(t *testing.T) {
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
	})

	// Pins that true, false and
	// null are compared letter by letter, not only by length, and that a
	// literal cut short at the end of the input is refused without reading
	// past it: each input sits in a slice whose capacity is its length, so a
	// read beyond would panic, and in one whose spare capacity holds the rest
	// of the literal, which must not count.
	t.Run("refuses misspelled literals", func(t *testing.T) {
		for _, in := range []string{
			`trux`, `tRue`, `nulL`, `fals3`, `[nulx]`, `{"a":trux}`, `[true,fa1se]`,
			`t`, `tru`, `[tru`, `[fals`, `{"a":nul`, `{"a":[null,tr`,
			`xrue`, `tXue`, `trXe`, `truX`, `Xull`, `nXll`, `nuXl`, `nulX`, `Xalse`, `fXlse`, `faXse`, `falXe`, `falsX`,
			`fals`, `[fals]`, `nul`, `n`, `f`, `falsee`, `nulll`, `truee`, `{"a":fals}`,
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
	})

	// Pins the literals accepted where they end the input exactly, with
	// no spare capacity to read.
	t.Run("accepts literals", func(t *testing.T) {
		for _, in := range []string{`true`, `false`, `null`, `[true]`, `[false,null,true]`, `{"a":false,"b":null,"c":true}`, ` null `} {
			exact := make([]byte, len(in))
			copy(exact, in)
			want := strings.TrimSpace(in)
			if out, err := Canonical(exact); err != nil || string(out) != want {
				t.Errorf("Canonical(%q) = %q, %v; want %q", in, out, err, want)
			}
		}
	})

	// Pins that an array or object
	// cut off right after its opening bracket or a comma (white space or not)
	// is refused with errArgsSyntax and no read past the input.
	t.Run("refuses containers cut short", func(t *testing.T) {
		for _, in := range []string{`[`, `[ `, "[\n\t", `[[`, `[1,`, `[1, `, `{`, `{ `, `{"a":1,`, `{"a":1, `, `{"a":`, `{"a" :`, `{"a"`} {
			exact := make([]byte, len(in))
			copy(exact, in)
			if out, err := Canonical(exact); out != nil || err != errArgsSyntax {
				t.Errorf("Canonical(%q) = %q, %v; want %v", in, out, err, errArgsSyntax)
			}
		}
	})

	// Pins the canonical form, or the
	// refusal, of number literals at the edges of the canonicalizer's paths:
	// the short-integer and short-decimal fast paths (15 and 16 characters,
	// six leading zeros after "0."), the exact-digit path, the ParseFloat
	// check (beyond 15 digits or 10^±300) and ECMAScript's switch to exponent
	// form below 1e-6 and from 1e21.
	t.Run("number literals", func(t *testing.T) {
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
	})

	// Pins the string parser at its edges: input
	// that ends inside an escape (each text sits in a slice whose capacity is
	// its length, so a read past the end would panic), every hexadecimal
	// digit and the characters either side of each digit range, lone
	// surrogates and what follows them, a raw U+FFFD next to an escape, and a
	// lone continuation byte in a string with and without escapes.
	t.Run("string edges", func(t *testing.T) {
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
	})

	// Pins that a string with no
	// closing quote is refused with errArgsSyntax wherever it stands (a value
	// or a member name, after other text) and whatever its length, including
	// runs of plain bytes that fill whole 8-byte words up to the end of the
	// input (each text sits in a slice whose capacity is its length).
	t.Run("refuses unterminated strings", func(t *testing.T) {
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
	})

	// A number literal whose leading zeros reach 2^30 cannot pull an exponent
	// too large for a double back into range: the exponent saturates beyond
	// anything the literal's length can offset. Before, it stopped growing at
	// 2^30, so 0.(2^30 zeros)1e1073741829000, a value far beyond double range,
	// canonicalized as 10000. It needs a 1 GiB input (about 2 GiB and 5 s in
	// all), so it runs only with CTOKEN_LARGE_TESTS=1 and without -race; .ci/run
	// runs it so.
	t.Run("huge literal cannot cancel a saturated exponent", func(t *testing.T) {
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
	})

	// Pins the path
	// sortKeys takes for an object of more than maxInsertionSort members
	// (slices.SortFunc, then a pass over neighbours for duplicates): such an
	// object, in reverse or shuffled order, with names that share their first
	// 8 bytes, non-ASCII names and escaped ones, comes out in UTF-16 order
	// with each value beside its name, and a duplicate name anywhere in it
	// (first, last or middle of the sorted order, spelled the same or escaped
	// differently) is refused with errArgsDuplicate.
	t.Run("sorts objects larger than insertion sort", func(t *testing.T) {
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
	})

	// Pins that a
	// member whose name equals the one just before it is refused as a
	// duplicate (errArgsDuplicate, ReasonArgsDuplicate) once its name and
	// colon are read, before its value: an object cut short or malformed
	// after that still reports the duplicate, not a syntax error. Names short and
	// long (equal 8-byte prefixes), non-ASCII and escaped.
	t.Run("refuses a repeat of the previous name at once", func(t *testing.T) {
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
			if out, err := Canonical(exact); out != nil || err != errArgsDuplicate || reasonOf(err) != "duplicate object member name" { // observe.ReasonArgsDuplicate
				t.Errorf("Canonical(%q) = %q, %v; want %v", in, out, err, errArgsDuplicate)
			}
		}
	})

	// Pins the in-order check
	// canonical makes as members arrive, where two names' 8-byte ASCII
	// prefixes do not settle their order (a name longer than 8 bytes sharing
	// its prefix with the previous one, or a non-ASCII name) and compareKeys
	// does: members in order are written as they are, and members out of
	// order are sorted, including the UTF-16 case where a character above
	// U+FFFF sorts below U+E000.
	t.Run("orders names beyond their prefixes", func(t *testing.T) {
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
	})
}

// TestEscapedNamesMatchGoMap checks the member name paths of canonical
// (plainName, plainString near the end of the input, and escaped names
// read through their canonical form or, when that form keeps an escape,
// through stringInto) against the Go value path, which writes a
// map[string]int's names from Go strings (appendJCSString) and sorts them
// with sortMembers: names raw, every character a \u escape, or written by
// encoding/json with its HTML escapes; in UTF-16 order, reversed and
// rotated; alone near the end of the input or followed by a long member.
func TestEscapedNamesMatchGoMap(t *testing.T) {
	names := []string{"a", "é", `"`, `\`, "\n", "\x01", `a"b`, "😀", "\uE000", `x\y`, "\u2028", "/", "<&>",
		`long_name_with_a_quote"_and_more_after_it`, "\x7f", "abcdefgh", "abcdefghi", "中文", "\uFFFD"}
	uEscape := func(s string) string {
		var sb strings.Builder
		sb.WriteByte('"')
		for _, r := range s {
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&sb, `\u%04X`, u)
			}
		}
		sb.WriteByte('"')
		return sb.String()
	}
	rawEscape := func(s string) string {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	htmlEscape := func(s string) string {
		q, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(q)
	}
	sorted := slices.Clone(names)
	slices.SortFunc(sorted, utf16Order)
	orders := [][]string{sorted, slices.Clone(sorted), append(slices.Clone(sorted[7:]), sorted[:7]...)}
	slices.Reverse(orders[1])
	for _, quote := range []func(string) string{rawEscape, uEscape, htmlEscape} {
		for _, order := range orders {
			for _, count := range []int{1, 2, len(order)} {
				for _, tail := range []string{"", `,"~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~":0`} {
					m := map[string]int{}
					var sb strings.Builder
					sb.WriteByte('{')
					for i, name := range order[:count] {
						if i > 0 {
							sb.WriteByte(',')
						}
						fmt.Fprintf(&sb, "%s:%d", quote(name), i+1)
						m[name] = i + 1
					}
					if tail != "" {
						sb.WriteString(tail)
						m["~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~"] = 0
					}
					sb.WriteByte('}')
					got, err := Canonical([]byte(sb.String()))
					if err != nil {
						t.Fatalf("Canonical(%s): %v", sb.String(), err)
					}
					want, err := Sum(m)
					if err != nil {
						t.Fatal(err)
					}
					if sha256.Sum256(got) != want {
						t.Fatalf("Canonical(%s) = %s, not the canonical form of the map %q", sb.String(), got, m)
					}
				}
			}
		}
	}
}

// TestNameRefusalReasons pins that a member name is refused with the
// reason stringInto gives, whichever path reads it (canonical's inline
// short name, plainName, plainString near the end of the input): names
// with one fault, and names with two (invalid UTF-8, then an escape, a
// control character or the end of the input), near the end of the input
// and far from it.
func TestNameRefusalReasons(t *testing.T) {
	far := strings.Repeat(" ", 20)
	for _, tc := range []struct {
		name string
		want error
	}{
		{"\"\xff", errArgsUTF8},
		{"\"\xff\"", errArgsUTF8},
		{"\"a\xc3\":1", errArgsUTF8},
		{"\"\xed\xa0\x80\":1", errArgsUTF8},
		{"\"abcdefgh\xe4\xb8\":1", errArgsUTF8},
		{"\"a\xff\\q", errArgsUTF8},
		{"\"\xff\x01\"", errArgsUTF8},
		{"\"\\q\xff\"", errArgsSyntax},
		{"\"\\ud800\"", errArgsSurrogate},
		{"\"\x01\"", errArgsSyntax},
		{"\"abc", errArgsSyntax},
	} {
		for _, in := range []string{"{" + tc.name, "{" + tc.name + far, "{" + far + tc.name} {
			p := jcsParser{in: []byte(in)}
			p.pos = strings.IndexByte(in, '"')
			if _, ok := p.stringInto(nil); ok || p.fail != tc.want {
				t.Fatalf("stringInto(%q) = %v; the case expects %v", in, p.fail, tc.want)
			}
			if out, err := Canonical([]byte(in)); out != nil || err != tc.want {
				t.Errorf("Canonical(%q) = %q, %v; want %v", in, out, err, tc.want)
			}
		}
	}
}

func TestArgsFingerprint(t *testing.T) {
	t.Run("ignores spelling", func(t *testing.T) {
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
	})

	t.Run("rejects invalid JSON", func(t *testing.T) {
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
	})

	t.Run("of Go values", func(t *testing.T) {
		nilFP, err := Sum(nil)
		if err != nil || nilFP != sha256.Sum256([]byte("null")) {
			t.Fatalf("nil: %v", err)
		}
		// A string is a Go value, marshalled to a JSON string, not JSON text.
		strFP, err := Sum(`{"a":1}`)
		if err != nil || strFP != sha256.Sum256([]byte(`"{\"a\":1}"`)) {
			t.Fatalf("string: %v", err)
		}
	})

	t.Run("refuses lossy arguments", func(t *testing.T) {
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
	})

	t.Run("keeps distinct arguments apart", func(t *testing.T) {
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
	})

	t.Run("accepts exact numbers", func(t *testing.T) {
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
	})

	t.Run("is safe for concurrent use", func(t *testing.T) {
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
	})

	// Pins that ArgsFingerprint returns
	// its parser to jcsScratch and reuses it: in steady state, fingerprinting
	// JSON text or a Go map allocates nothing.
	t.Run("reuses its scratch", func(t *testing.T) {
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
	})
}

// ffffEscaper marshals to the escape encoding/json writes for invalid UTF-8.
type ffffEscaper struct{}

func (ffffEscaper) MarshalJSON() ([]byte, error) { return []byte(`"report\ufffd.pdf"`), nil }

// rawUTF8Marshaler marshals to JSON text holding invalid UTF-8.
type rawUTF8Marshaler struct{}

func (rawUTF8Marshaler) MarshalJSON() ([]byte, error) { return []byte("\"report\xff.pdf\""), nil }

func TestJCSScratch(t *testing.T) {
	// Pins maxPooledJCS: a parser
	// whose buffer grew past the cap (any one of them) is not returned to
	// jcsScratch, so one huge argument does not pin its memory.
	t.Run("drops parsers that grew large", func(t *testing.T) {
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
	})

	// Pins the other side of maxPooledJCS:
	// buffers of exactly the cap do not stop a parser going back to the pool.
	// A Get right after the Put returns it unless the goroutine moved to
	// another P in between, so each buffer gets a few fresh tries.
	t.Run("keeps parsers at the cap", func(t *testing.T) {
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
	})
}

// zeroMembers returns the object whose members are names, in that order,
// each with the value 0.
func zeroMembers(names []string) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"%s":0`, name)
	}
	sb.WriteByte('}')
	return sb.String()
}

// TestShortNonASCIINames pins canonical's inline path for member names of
// up to 7 bytes that are not ASCII (validated by validName, ranked by
// utf16Rank where they are read): every such name of one or two
// characters from a set that mixes every UTF-8 length and the ranges
// UTF-16 orders apart from byte order, in objects of shuffled members,
// comes out in UTF-16 order; and a short name holding invalid UTF-8
// (overlong, surrogate, above U+10FFFF, truncated, a stray continuation
// byte) is refused as invalid UTF-8, with the input long enough for the
// inline path or not.
func TestShortNonASCIINames(t *testing.T) {
	t.Run("UTF-16 order", func(t *testing.T) {
		chars := []string{"a", "é", "\u07ff", "中", "\ue000", "\uffff", "😀", "\U00010000", "\U0010ffff"}
		var names []string
		for _, a := range chars {
			names = append(names, a)
			for _, b := range chars {
				names = append(names, a+b)
			}
		}
		want := slices.Clone(names)
		slices.SortFunc(want, utf16Order)
		for round := range 5 {
			order := slices.Clone(names)
			for i := range order { // a fixed shuffle per round
				j := (i*7919 + round*104729) % len(order)
				order[i], order[j] = order[j], order[i]
			}
			in, wantOut := zeroMembers(order), zeroMembers(want)
			got, err := Canonical([]byte(in))
			if err != nil {
				t.Fatalf("Canonical: %v", err)
			}
			if string(got) != wantOut {
				t.Fatalf("Canonical(%s) = %s, want %s", in, got, wantOut)
			}
		}
	})
	t.Run("invalid UTF-8 refused", func(t *testing.T) {
		for _, bad := range []string{"\xc0\x80", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf0\x80\x80\x80", "\xe4\xb8", "\x80", "a\xff", "é\xc3", "\xf8\x88\x80\x80\x80"} {
			for _, tail := range []string{":0}", `:0,"zzzzzzzzzzzzzzzz":1}`} {
				in := `{"` + bad + `"` + tail
				if _, err := Canonical([]byte(in)); err != errArgsUTF8 {
					t.Errorf("Canonical(%q) = %v, want %v", in, err, errArgsUTF8)
				}
			}
		}
	})
}

// TestEscapedNameRefusals pins the reasons canonical gives for member
// names that need unescaping, which it reads with appendString and, where
// that refuses, again with stringInto so that the reason stays
// stringInto's: a lone or reversed surrogate, a malformed escape, a raw
// control character, invalid UTF-8 after an escape (also where the input
// ends before the closing quote, which appendString would call a syntax
// error), and U+FFFD escaped in a name of text that encoding/json wrote
// (refuseFFFD).
func TestEscapedNameRefusals(t *testing.T) {
	cases := []struct {
		name, in   string
		refuseFFFD bool
		want       error
	}{
		{"lone high surrogate", `{"\ud800":1}`, false, errArgsSurrogate},
		{"lone low surrogate", `{"a\udc00":1}`, false, errArgsSurrogate},
		{"reversed pair", `{"\ude00\ud83d":1}`, false, errArgsSurrogate},
		{"short escape", `{"\u12":1}`, false, errArgsSyntax},
		{"unknown escape", `{"\q":1}`, false, errArgsSyntax},
		{"raw control character", "{\"\\n\x01\":1}", false, errArgsSyntax},
		{"invalid UTF-8 after an escape", "{\"\\u00e9\xff\":1}", false, errArgsUTF8},
		{"invalid UTF-8, input cut", "{\"\\u00e9\xff", false, errArgsUTF8},
		{"unterminated", `{"\u00e9`, false, errArgsSyntax},
		{"U+FFFD from encoding/json", `{"\ufffd":1}`, true, errArgsReplaced},
		{"U+FFFD in JSON text", `{"\ufffd":1}`, false, nil},
		{"escaped quote kept", `{"\u0022\u00e9":1,"\\":2}`, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := jcsParser{in: []byte(tc.in), refuseFFFD: tc.refuseFFFD}
			if _, err := p.canonical(nil); err != tc.want {
				t.Errorf("canonical(%q) = %v, want %v", tc.in, err, tc.want)
			}
		})
	}
}
