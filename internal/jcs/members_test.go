package jcs

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestInsertionSortMatchesSortFunc checks sortKeys' insertion sort
// against slices.SortFunc with utf16Order on random sets of distinct
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
		names := distinctNames(n, func(sb *strings.Builder) {
			for range next(5) {
				sb.WriteString(alphabet[next(len(alphabet))])
			}
		})
		p := jcsParser{}
		var members []jcsMember
		var keys []jcsSortKey
		for i, name := range names {
			at := len(p.keys)
			p.keys = append(p.keys, name...)
			members = append(members, jcsMember{nameAt: at, nameEnd: len(p.keys)})
			k := p.sortKey(members, i)
			members[i].prefix = k.prefix
			var want uint64 // the first 8 bytes, big-endian, zero-padded
			for i := range min(len(name), 8) {
				want |= uint64(name[i]) << (56 - 8*i)
			}
			if want&0x8080808080808080 != 0 {
				want = utf16Rank(want) // ranked when not ASCII
			}
			if k.prefix != want || k.index != i {
				t.Fatalf("sortKey(%q) = %#x, index %d; want %#x, index %d", name, k.prefix, k.index, want, i)
			}
			keys = append(keys, k)
		}
		checkSortKeys(t, "insertion sort", &p, members, keys, names)
	}
}

// TestUTF16RankOrder pins utf16Rank's claim: two names whose first 8 bytes
// (big-endian, zero-padded) differ order, as utf16Rank maps those words,
// the way their UTF-16 code units do. The names mix every UTF-8 length
// and the two ranges UTF-16 orders apart from byte order (U+E000–U+FFFF
// and characters above U+FFFF), at every offset in the word.
func TestUTF16RankOrder(t *testing.T) {
	alphabet := []string{"", "\x00", "a", "\x7f", "é", "\u07ff", "\u0800", "中", "\ud7ff", "\ue000", "\uf8ff", "\uffff", "😀", "\U00010000", "\U0010ffff"}
	word := func(s string) uint64 {
		var x uint64
		for i := range min(len(s), 8) {
			x |= uint64(s[i]) << (56 - 8*i)
		}
		return x
	}
	for _, a := range alphabet {
		for _, b := range alphabet {
			for _, c := range alphabet {
				for _, d := range alphabet {
					for _, pad := range []string{"", "x", "xy", "xyz"} {
						s, u := pad+a+b, pad+c+d
						ws, wu := word(s), word(u)
						if ws == wu {
							continue
						}
						got := cmp.Compare(utf16Rank(ws), utf16Rank(wu))
						if want := utf16Order(s, u); (got < 0) != (want < 0) || got == 0 {
							t.Fatalf("utf16Rank orders %q, %q as %d; UTF-16 order is %d", s, u, got, want)
						}
					}
				}
			}
		}
	}
}

// TestPackedSortMatchesSortFunc pins packedSort, the sort of objects of
// 33 to 256 members, against slices.SortFunc with utf16Order: names with
// long shared prefixes, non-ASCII, U+E000–U+FFFF against characters above
// U+FFFF, ties in their first 7 bytes after the shared prefix; and it
// refuses a duplicate name wherever it is.
func TestPackedSortMatchesSortFunc(t *testing.T) {
	alphabet := []string{"a", "b", "z", "_", "0", "item_", "abcdefgh", "é", "\uE000", "\uFFFF", "😀", "\U00010000", "\x7f", "\x00"}
	x := uint64(0x9e3779b97f4a7c15)
	next := func(n int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
	for round := range 600 {
		n := maxInsertionSort + 1 + round%(maxPackedSort-maxInsertionSort)
		prefix := []string{"", "shared_prefix_of_21_b", "é中😀", ""}[round%4]
		// The fourth kind: names of at least 8 bytes with no common
		// prefix, so that the shared prefix packedSort skips is 0
		// although no name ends within the first word.
		suffix := []string{"", "", "", "_suffix_of_9"}[round%4]
		names := distinctNames(n, func(sb *strings.Builder) {
			sb.WriteString(prefix)
			for range 1 + next(6) {
				sb.WriteString(alphabet[next(len(alphabet))])
			}
			sb.WriteString(suffix)
		})
		p, members, keys := membersOf(names)
		checkSortKeys(t, "packedSort", p, members, keys, names)
		dup := append(slices.Clone(names[:n-1]), names[next(n-1)])
		if p, members, keys := membersOf(dup); p.sortKeys(members, keys) {
			t.Fatalf("names %q: packedSort misses a duplicate", dup)
		}
	}
}

// distinctNames returns n distinct names, each written by write (called
// again for a name already drawn).
func distinctNames(n int, write func(sb *strings.Builder)) []string {
	seen := map[string]bool{}
	var names []string
	for len(names) < n {
		var sb strings.Builder
		write(&sb)
		if name := sb.String(); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// membersOf lays names out as the parser does: their bytes in p.keys,
// a member each with the prefix its sort key records, and the keys.
func membersOf(names []string) (*jcsParser, []jcsMember, []jcsSortKey) {
	p := &jcsParser{}
	var members []jcsMember
	var keys []jcsSortKey
	for i, name := range names {
		at := len(p.keys)
		p.keys = append(p.keys, name...)
		members = append(members, jcsMember{nameAt: at, nameEnd: len(p.keys)})
		keys = append(keys, p.sortKey(members, i))
		members[i].prefix = keys[i].prefix
	}
	return p, members, keys
}

// checkSortKeys fails unless sortKeys, the sort named sort for these
// names, orders a copy of keys as the distinct names sort in UTF-16 order
// (utf16Order) and reports no duplicate.
func checkSortKeys(t *testing.T, sort string, p *jcsParser, members []jcsMember, keys []jcsSortKey, names []string) {
	t.Helper()
	got := slices.Clone(keys)
	if !p.sortKeys(members, got) {
		t.Fatalf("names %q: %s reports a duplicate", names, sort)
	}
	want := slices.Clone(names)
	slices.SortFunc(want, utf16Order)
	for i := range want {
		if g := p.name(&members[got[i].index]); string(g) != want[i] {
			t.Fatalf("names %q: %s puts %q at %d, UTF-16 order %q", names, sort, g, i, want[i])
		}
	}
}

// checkPlainName fails unless plainName agrees with the general path on
// the name whose opening quote starts in: where plainName reads a name,
// plainString ends it at the same place and nameKey gives the same sort
// key prefix; where plainName declines with 16 bytes after the quote,
// plainString declines too (an escape, a control character, invalid
// UTF-8, no closing quote).
func checkPlainName(t *testing.T, in []byte) {
	t.Helper()
	p := jcsParser{in: in}
	end := p.plainString()
	n, prefix, ok := plainName(in, 0)
	if !ok {
		if len(in) >= 17 && end >= 0 {
			t.Fatalf("plainName declines %q, which plainString reads", in)
		}
		return
	}
	if end != n+2 {
		t.Fatalf("plainName(%q) reads %d bytes of name, plainString ends at %d", in, n, end)
	}
	if want := nameKey(in, 1, 1+n, 0).prefix; prefix != want {
		t.Fatalf("plainName(%q) prefix %#x, nameKey %#x", in, prefix, want)
	}
}

// TestPlainNameMatchesPlainString checks plainName, the member name fast
// path, against plainString and nameKey: names of every length around
// its two 8-byte loads (0 to 40 bytes), ASCII and not, with an escape, a
// control character, a quote or invalid UTF-8 at each position, followed
// by the end of the input or more text.
func TestPlainNameMatchesPlainString(t *testing.T) {
	fills := []string{"a", "é", "中", "😀", "\uffff", "\x7f"}
	breaks := []string{"", "\\n", "\\u0041", "\\\"", "\x01", "\x1f", "\xff", "\xc3", "\xed\xa0\x80", "\xe4\xb8"}
	tails := []string{"", ":", ":1}", `:"x","b":2,"c":3,"d":4}`, " : 1 }"}
	for size := range 41 {
		for _, fill := range fills {
			var name []byte
			for len(name) < size {
				name = append(name, fill...)
			}
			for _, brk := range breaks {
				for at := 0; at <= len(name); at += max(1, len(name)/5) {
					body := append(append(append([]byte{}, name[:at]...), brk...), name[at:]...)
					for _, tail := range tails {
						in := append(append(append([]byte{'"'}, body...), '"'), tail...)
						checkPlainName(t, in)
						checkPlainName(t, in[:len(in)-len(tail)-1]) // unterminated
					}
				}
			}
		}
	}
}

// TestValidNameMatchesUTF8Valid checks validName, the member name UTF-8
// check, against utf8.Valid: every sequence of up to 3 bytes, every
// 4-byte sequence whose bytes are boundary values of the UTF-8 ranges
// (and their neighbours), each alone, after an ASCII byte, and before one
// or a truncated character.
func TestValidNameMatchesUTF8Valid(t *testing.T) {
	exhaustive(t)
	check := func(t *testing.T, b []byte) {
		if got, want := validName(b), utf8.Valid(b); got != want {
			t.Fatalf("validName(%q) = %v, utf8.Valid %v", b, got, want)
		}
	}
	// The table is built at init, which coverage tools miss; rebuilt
	// here, so that they see utf8Next run (the checks below are what
	// pin it).
	for c := range utf8Step {
		for s := uint64(utf8Accept); s <= utf8Reject; s += 6 {
			if got := utf8Step[c] >> s & 63; got != utf8Next(s, byte(c)) {
				t.Fatalf("utf8Step[%#x] from state %d: %d, utf8Next %d", c, s, got, utf8Next(s, byte(c)))
			}
		}
	}
	t.Run("up to 3 bytes", func(t *testing.T) {
		check(t, nil)
		b := make([]byte, 3)
		for x := range 1 << 24 {
			b[0], b[1], b[2] = byte(x), byte(x>>8), byte(x>>16)
			if x < 1<<8 {
				check(t, b[:1])
			}
			if x < 1<<16 {
				check(t, b[:2])
			}
			check(t, b)
		}
	})
	t.Run("4 bytes at range boundaries", func(t *testing.T) {
		var edges []byte
		for _, c := range []int{0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff} {
			for _, d := range []int{-1, 0, 1} {
				if e := c + d; 0 <= e && e <= 0xff {
					edges = append(edges, byte(e))
				}
			}
		}
		for _, a := range edges {
			for _, b := range edges {
				for _, c := range edges {
					for _, d := range edges {
						s := []byte{a, b, c, d}
						check(t, s)
						check(t, append([]byte{'a'}, s...))
						check(t, append(s, 'a'))
						check(t, append(s, 0xe4, 0xb8))
					}
				}
			}
		}
	})
}

// TestSortWordsMatchesSlicesSort checks sortWords, packedSort's integer
// sort, against slices.Sort on distinct words of every size up to 300:
// random, already sorted, reversed, organ-pipe and sawtooth (the inputs
// that push a quicksort to its depth limit), and words that differ only
// in their low byte or their top byte.
func TestSortWordsMatchesSlicesSort(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	shapes := map[string]func(i, n int) uint64{
		"random":     func(i, _ int) uint64 { return next()&^0xff | uint64(i&0xff) },
		"sorted":     func(i, _ int) uint64 { return uint64(i) << 8 },
		"reversed":   func(i, n int) uint64 { return uint64(n-i) << 8 },
		"organ pipe": func(i, n int) uint64 { return uint64(min(i, n-i))<<9 | uint64(i&1)<<8 },
		"sawtooth":   func(i, _ int) uint64 { return uint64(i%7)<<20 | uint64(i) },
		"low byte":   func(i, _ int) uint64 { return 0xabcdef<<8 | uint64(i*37&0xff) },
		"top byte":   func(i, _ int) uint64 { return uint64(i*37&0xff)<<56 | 0x42 },
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			for n := range 301 {
				seen := map[uint64]bool{}
				var words []uint64
				for i := range n {
					if w := shape(i, n); !seen[w] {
						seen[w] = true
						words = append(words, w)
					}
				}
				want := slices.Clone(words)
				slices.Sort(want)
				sortWords(words)
				if !slices.Equal(words, want) {
					t.Fatalf("%d words: sortWords gives %#x, want %#x", n, words, want)
				}
			}
		})
	}
}

// TestSortKeysLargeObjects checks sortKeys on objects of more than
// maxPackedSort members, which go to slices.SortFunc (packedSort's words
// hold an 8-bit index): the names of TestPackedSortMatchesSortFunc's
// alphabet, in UTF-16 order, and a repeated name refused.
func TestSortKeysLargeObjects(t *testing.T) {
	alphabet := []string{"a", "b", "z", "_", "0", "item_", "abcdefgh", "é", "\uE000", "\uFFFF", "😀", "\U00010000", "\x7f"}
	x := uint64(0x2545f4914f6cdd1d)
	next := func(n int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
	for _, n := range []int{maxPackedSort + 1, maxPackedSort + 44, 3 * maxPackedSort} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			names := distinctNames(n, func(sb *strings.Builder) {
				for range 1 + next(5) {
					sb.WriteString(alphabet[next(len(alphabet))])
				}
			})
			p, members, keys := membersOf(names)
			checkSortKeys(t, "slices.SortFunc", p, members, keys, names)
			dup := append(slices.Clone(names[:n-1]), names[next(n-1)])
			if p, members, keys := membersOf(dup); p.sortKeys(members, keys) {
				t.Fatalf("%d names: sortKeys misses a duplicate", n)
			}
		})
	}
}
