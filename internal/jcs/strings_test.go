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
