package jcs

import (
	"encoding/binary"
	"math/bits"
	"testing"
)

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
	eachTestWord([]byte{'a', ' ', '~', 0x7f, '"', '\\', 0, 0x1f, 0x80, 0xff}, check)
}

// TestStringStopMask8MatchesTable checks stringStopMask8 byte by byte
// against its definition ('"', '\\' or a byte below 0x20, non-ASCII bytes
// never), for every byte value in every position among neighbours of each
// kind and for a stream of pseudo-random words: it must be exact in every
// byte, not only in the first special one.
func TestStringStopMask8MatchesTable(t *testing.T) {
	check := func(w [8]byte) {
		x := binary.LittleEndian.Uint64(w[:])
		var want uint64
		for i, c := range w {
			if c < 0x20 || c == '"' || c == '\\' {
				want |= 0x80 << (8 * i)
			}
		}
		if got := stringStopMask8(x); got != want {
			t.Fatalf("stringStopMask8(%q) = %#x, want %#x", w[:], got, want)
		}
	}
	eachTestWord([]byte{'a', ' ', '~', 0x7f, '"', '\\', 0, 0x1f, 0x80, 0x9f, 0xa0, 0xa2, 0xdc, 0xff}, check)
}

// eachTestWord calls check with every byte value in every position of a
// word of each fill byte, then with 200 000 pseudo-random words (xorshift),
// each also with its high bits cleared (mostly ASCII).
func eachTestWord(fills []byte, check func(w [8]byte)) {
	for _, fill := range fills {
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
		binary.LittleEndian.PutUint64(w[:], x&0x7f7f7f7f7f7f7f7f)
		check(w)
		binary.LittleEndian.PutUint64(w[:], x)
		check(w)
	}
}

// TestAppendStringMatchesStringInto checks appendString, which writes a
// string's canonical form as it reads it (its \u fast paths: a character
// of the BMP, a surrogate pair), against stringInto followed by
// appendJCSString: the same canonical form, or the same refusal with the
// same reason. The strings hold surrogate pairs, lone and reversed
// surrogates, a high surrogate before other escapes, U+FFFD with and
// without refuseFFFD, and each of these cut at every byte, with and
// without text after them, and unterminated.
func TestAppendStringMatchesStringInto(t *testing.T) {
	bodies := []string{
		`\ud83d\ude00`, `a\ud835\udd18b`, `\udbff\udfff`, `\ud800\udc00\ud800\udc00`,
		`\ud83d`, `\ude00`, `\ude00\ud83d`, `\ud83d\u0041`, `\ud83d\ud83d\ude00`, `\ud83d\n`, `\ud83d\\`, `\ud83d\uDE00`,
		`\ud83d\ude0x`, `\ud83dx\ude00`, `\ud83d\ue000`, `\ud83d\udbff`, `\udbff\udc00`, `\ud7ff\udc00`, `\udc00\udc00`, `\ud800\udfff`, `\ufffd`, `\uFFFD\u00e9\u4e2d`, `\u0022\u005c\u001f`, `é\ud83d\ude00\u00e9`,
		// Near-misses of the pair's shape: another escape, a bad digit or
		// a missing backslash or u where the pair has them, with a low
		// surrogate (or digits that read as one) after.
		`\nABCD\udc00`, `u\nABCD\udc00`, `\ud8zz\udc00`, `\ud83dxudc00`, `\ud83d\xdc00`, `dc00xxxx\ud83d\udc01`,
	}
	for _, refuse := range []bool{false, true} {
		for _, body := range bodies {
			for cut := 0; cut <= len(body); cut++ {
				for _, tail := range []string{"", `"`, `":1}`, `"` + "                "} {
					in := []byte(`"` + body[:cut] + tail)
					p := jcsParser{in: in, refuseFFFD: refuse}
					got, gotOK := p.appendString(nil)
					gotPos, gotFail := p.pos, p.fail
					q := jcsParser{in: in, refuseFFFD: refuse}
					name, wantOK := q.stringInto(nil)
					if gotOK != wantOK {
						t.Fatalf("%q (refuseFFFD %v): appendString ok %v, stringInto ok %v (%v)", in, refuse, gotOK, wantOK, q.fail)
					}
					if !wantOK {
						// Cut short (no closing quote), both refuse, but
						// appendString calls invalid UTF-8 before the end
						// a syntax error; canonical keeps stringInto's
						// reason for names (TestEscapedNameRefusals).
						if gotFail != q.fail && tail != "" {
							t.Fatalf("%q (refuseFFFD %v): appendString refuses with %v, stringInto with %v", in, refuse, gotFail, q.fail)
						}
						continue
					}
					if want := appendJCSString(nil, name); string(got) != string(want) || gotPos != q.pos {
						t.Fatalf("%q: appendString %q (to %d), stringInto then appendJCSString %q (to %d)", in, got, gotPos, want, q.pos)
					}
				}
			}
		}
	}
}
