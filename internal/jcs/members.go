package jcs

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
)

// Member order: RFC 8785 sorts an object's members by their names'
// UTF-16 code units; the parser records each member and sorts here.

// jcsSortKey stands for members[index] while sortKeys orders an
// object's members: prefix is the name's first 8 bytes, big-endian and
// zero-padded, mapped by utf16Rank when one of them is not ASCII, so that
// two keys whose prefixes differ order as integers the way their names
// do (see utf16Rank). Sorting these small keys instead of the members
// moves a third of the bytes.
type jcsSortKey struct {
	prefix uint64
	index  int
}

// sortKey returns the sort key of members[i].
func (p *jcsParser) sortKey(members []jcsMember, i int) jcsSortKey {
	m := &members[i]
	if m.inInput {
		return nameKey(p.in, m.nameAt, m.nameEnd, i)
	}
	return nameKey(p.keys, m.nameAt, m.nameEnd, i)
}

// nameKey returns the sort key with the given index of the name
// buf[at:end].
func nameKey(buf []byte, at, end, index int) jcsSortKey {
	var x uint64
	if at+8 <= len(buf) {
		// Load 8 bytes and clear those past the name.
		x = binary.BigEndian.Uint64(buf[at:]) &^ (1<<(64-8*min(end-at, 8)) - 1)
	} else {
		x = shortPrefix(buf[at:end])
	}
	return jcsSortKey{prefix: rankPrefix(x), index: index}
}

// rankPrefix returns the sort key prefix of a name's first 8 bytes x
// (big-endian, zero-padded): x itself when they are ASCII, else x mapped
// by utf16Rank.
func rankPrefix(x uint64) uint64 {
	if x&0x8080808080808080 != 0 {
		return utf16Rank(x)
	}
	return x
}

// shortPrefix returns name, under 8 bytes, big-endian and zero-padded.
func shortPrefix(name []byte) uint64 {
	var x uint64
	for i, c := range name {
		x |= uint64(c) << (56 - 8*i)
	}
	return x
}

// plainName reads the member name whose opening quote is in[i] when it
// is valid UTF-8 with no escape and no control character, so that its
// canonical form is its input text, and the input holds 16 bytes after
// the quote: it returns the name's length n (the name is
// in[i+1:i+1+n]) and the prefix of its sort key, as nameKey computes it,
// from the loads that find its end. Otherwise ok is false and the name is
// left to the general path (plainString, stringInto).
// TestPlainNameMatchesPlainString and FuzzPlainName check it against that
// path.
func plainName(in []byte, i int) (n int, prefix uint64, ok bool) {
	if i+17 > len(in) {
		return 0, 0, false
	}
	x := binary.LittleEndian.Uint64(in[i+1:])
	var high uint64
	if stop := stringStopMask8(x); stop != 0 {
		n = bits.TrailingZeros64(stop) >> 3
		x &= 1<<(8*n) - 1
		high = x
	} else if y := binary.LittleEndian.Uint64(in[i+9:]); stringStopMask8(y) != 0 {
		m := bits.TrailingZeros64(stringStopMask8(y)) >> 3
		n = 8 + m
		high = x | y&(1<<(8*m)-1)
	} else {
		j, h := scanStringRun(in, i+17)
		if j >= len(in) {
			return 0, 0, false
		}
		n = j - i - 1
		high = x | y | h
	}
	if in[i+1+n] != '"' {
		return 0, 0, false // an escape or a control character
	}
	prefix = bits.ReverseBytes64(x)
	if high&0x8080808080808080 != 0 {
		if !validName(in[i+1 : i+1+n]) {
			return 0, 0, false
		}
		prefix = utf16Rank(prefix)
	}
	return n, prefix, true
}

// validName reports whether name is valid UTF-8, as utf8.Valid does, by
// a shift DFA (utf8Step): one table load and one shift per byte, with no
// branch on the bytes, where utf8.Valid branches on each character's
// length, which a mix of 1- to 4-byte characters mispredicts. On the
// names of wide-unicode-names it took 2.6 ns a name against utf8.Valid's
// 4.5. TestValidNameMatchesUTF8Valid checks it against utf8.Valid.
func validName(name []byte) bool {
	var s uint64 // the state, in its low 6 bits
	for _, c := range name {
		s = utf8Step[c] >> (s & 63)
	}
	return s&63 == utf8Accept
}

// The states of validName's DFA, each a shift amount: utf8Step[c] >> s,
// whose low 6 bits are the next state, holds the transition on byte c
// from state s at bits s to s+5.
const (
	utf8Accept  = 6 * iota // between characters
	utf8Need1              // one continuation byte (80–BF) to come
	utf8Need2              // two
	utf8Need3              // three
	utf8AfterE0            // after E0: A0–BF (no overlong form), then one
	utf8AfterED            // after ED: 80–9F (no surrogate), then one
	utf8AfterF0            // after F0: 90–BF (no overlong form), then two
	utf8AfterF4            // after F4: 80–8F (nothing above U+10FFFF), then two
	utf8Reject             // invalid: stays so
)

// utf8Step is validName's transition table (see the utf8 states), built
// from utf8Next.
var utf8Step = func() (t [256]uint64) {
	for c := range t {
		for s := uint64(utf8Accept); s <= utf8Reject; s += 6 {
			t[c] |= utf8Next(s, byte(c)) << s
		}
	}
	return t
}()

// utf8Next returns the state that follows state s on byte c: the UTF-8
// well-formed byte sequences of the Unicode Standard, table 3-7.
func utf8Next(s uint64, c byte) uint64 {
	switch s {
	case utf8Accept:
		switch {
		case c < 0x80:
			return utf8Accept
		case 0xC2 <= c && c <= 0xDF:
			return utf8Need1
		case c == 0xE0:
			return utf8AfterE0
		case c == 0xED:
			return utf8AfterED
		case 0xE1 <= c && c <= 0xEF:
			return utf8Need2
		case c == 0xF0:
			return utf8AfterF0
		case 0xF1 <= c && c <= 0xF3:
			return utf8Need3
		case c == 0xF4:
			return utf8AfterF4
		}
	case utf8Need1, utf8Need2, utf8Need3:
		if 0x80 <= c && c <= 0xBF {
			return s - 6 // one continuation byte fewer to come
		}
	case utf8AfterE0:
		if 0xA0 <= c && c <= 0xBF {
			return utf8Need1
		}
	case utf8AfterED:
		if 0x80 <= c && c <= 0x9F {
			return utf8Need1
		}
	case utf8AfterF0:
		if 0x90 <= c && c <= 0xBF {
			return utf8Need2
		}
	case utf8AfterF4:
		if 0x80 <= c && c <= 0x8F {
			return utf8Need2
		}
	}
	return utf8Reject
}

// name returns m's unescaped name.
func (p *jcsParser) name(m *jcsMember) []byte {
	if m.inInput {
		return p.in[m.nameAt:m.nameEnd]
	}
	return p.keys[m.nameAt:m.nameEnd]
}

// sortMembers rewrites the members p.members[membersBase:] of the object
// whose body (the text after its '{') starts at out[body:] in canonical
// order, or refuses a duplicate name.
func (p *jcsParser) sortMembers(out []byte, body, membersBase int) ([]byte, error) {
	members := p.members[membersBase:]
	for i := range members {
		members[i].prefix = p.sortKey(members, i).prefix
	}
	out, ok := p.reorderMembers(out, body, membersBase)
	if !ok {
		return nil, errArgsDuplicate // I-JSON
	}
	return out, nil
}

// reorderMembers rewrites in canonical order the members
// p.members[membersBase:], whose sort key prefixes canonical recorded, of
// the object whose body starts at out[body:], or reports false if two
// have the same name.
func (p *jcsParser) reorderMembers(out []byte, body, membersBase int) ([]byte, bool) {
	members := p.members[membersBase:]
	keys := slices.Grow(p.order[:0], len(members))[:len(members)]
	p.order = keys
	if !p.sortKeys(members, keys) {
		return nil, false
	}
	return p.rewriteMembers(out, body, members, keys), true
}

// sortKeys writes to keys, of the length of members, the members' sort
// keys in the order compareKeys gives them, from the prefixes recorded in
// members, or reports false if two members have the same name. packedSort
// reads the prefixes from members without building keys first (3 to 7 %
// off the wide shapes of BenchmarkArgsFingerprintShapes).
func (p *jcsParser) sortKeys(members []jcsMember, keys []jcsSortKey) bool {
	if len(keys) > maxInsertionSort && len(keys) <= maxPackedSort {
		return p.packedSort(members, keys)
	}
	for i := range members {
		keys[i] = jcsSortKey{prefix: members[i].prefix, index: i}
	}
	if len(keys) > maxInsertionSort {
		slices.SortFunc(keys, func(a, b jcsSortKey) int {
			if a.prefix != b.prefix {
				return cmp.Compare(a.prefix, b.prefix)
			}
			return compareUTF16(p.name(&members[a.index]), p.name(&members[b.index]))
		})
		for i := 1; i < len(keys); i++ {
			if p.compareKeys(members, keys[i-1], keys[i]) == 0 {
				return false
			}
		}
		return true
	}
	// Insertion sort: each key moves down past the larger keys before it,
	// compared by their prefixes inline where those settle it.
	for i := 1; i < len(keys); i++ {
		k := keys[i]
		j := i
		for ; j > 0; j-- {
			a := keys[j-1]
			if a.prefix != k.prefix {
				if a.prefix < k.prefix {
					break
				}
			} else if c := p.compareKeys(members, a, k); c == 0 {
				return false
			} else if c < 0 {
				break
			}
			keys[j] = a
		}
		keys[j] = k
	}
	return true
}

// maxInsertionSort is the most members sortKeys orders by insertion sort;
// larger objects go to packedSort, and objects of more than maxPackedSort
// members to slices.SortFunc.
const (
	maxInsertionSort = 32
	maxPackedSort    = 256
)

// packedSort orders the keys of members, at most maxPackedSort of them,
// as compareKeys does, or reports false if two stand for the same name.
// The names' common prefix (skip bytes, shared by all of them) cannot
// order them, so each member is ranked by the 7 bytes of its name after
// it, mapped by utf16Rank so that integer order is UTF-16 order (see
// utf16Rank), packed above its 8-bit index into one word: the words are
// sorted as plain integers (sortWords, no comparison function), and
// only runs of members whose 7 bytes tie are compared in full. It reads
// each member's prefix from members and writes the order to keys.
func (p *jcsParser) packedSort(members []jcsMember, keys []jcsSortKey) bool {
	first := p.name(&members[0])
	skip := len(first)
	for k := 1; k < len(members) && skip > 0; k++ {
		name := p.name(&members[k])
		n := min(skip, len(name))
		i := 0
		for i+8 <= n && binary.LittleEndian.Uint64(first[i:]) == binary.LittleEndian.Uint64(name[i:]) {
			i += 8
		}
		for i < n && first[i] == name[i] {
			i++
		}
		skip = i
	}
	packed := p.packed[:0]
	for k := range members {
		x := members[k].prefix // the first 8 bytes, ranked, as nameKey read them
		if skip > 0 {
			name := p.name(&members[k])[skip:]
			if len(name) >= 8 {
				x = binary.BigEndian.Uint64(name)
			} else {
				x = shortPrefix(name)
			}
			x = rankPrefix(x)
		}
		packed = append(packed, x&^0xff|uint64(k))
	}
	p.packed = packed
	// A counting pass on the words' top byte, then each bucket sorted,
	// took 250 ns against slices.Sort's 450 on 90 shuffled short names,
	// but only 4 % off wide-shuffled's fingerprint and 3 % more on
	// wide-unicode-names' (BenchmarkArgsFingerprintShapes): not kept.
	sortWords(packed)
	// The order, and runs of words that tie on their 7 bytes: sorted by
	// whole names (insertion sort), refusing a duplicate.
	keys[0] = jcsSortKey{index: int(packed[0] & 0xff)}
	for i := 1; i < len(packed); i++ {
		keys[i] = jcsSortKey{index: int(packed[i] & 0xff)}
		if packed[i]>>8 != packed[i-1]>>8 {
			continue
		}
		k := keys[i]
		b := i
		for ; b > 0 && packed[b-1]>>8 == packed[i]>>8; b-- {
			c := compareUTF16(p.name(&members[keys[b-1].index])[skip:], p.name(&members[k.index])[skip:])
			if c == 0 {
				return false
			}
			if c < 0 {
				break
			}
			keys[b] = keys[b-1]
		}
		keys[b] = k
	}
	return true
}

// sortWords sorts words, whose values are distinct, in increasing order:
// quicksort with a partition that does not branch on the comparisons
// (Lomuto's, counting with the borrow of a subtraction), runs of up to
// 12 words by insertion sort, and slices.Sort past a depth of twice
// log2(len(words)), so that no input makes it quadratic. Branches on
// comparisons of random keys mispredict half the time: on 80 random
// words it took 285 ns against slices.Sort's 362.
func sortWords(words []uint64) {
	depth := 2 * bits.Len(uint(len(words)))
	for len(words) > 12 {
		if depth == 0 {
			slices.Sort(words)
			return
		}
		depth--
		n := len(words)
		// The median of the first, middle and last words as the pivot,
		// moved to the end.
		a, b, c := 0, n/2, n-1
		if words[a] > words[b] {
			a, b = b, a
		}
		if words[b] > words[c] {
			b = c
			if words[a] > words[b] {
				b = a
			}
		}
		words[b], words[n-1] = words[n-1], words[b]
		pivot := words[n-1]
		j := 0 // words[:j] are below the pivot
		for i := range n - 1 {
			w := words[i]
			words[i] = words[j]
			words[j] = w
			_, below := bits.Sub64(w, pivot, 0)
			j += int(below)
		}
		words[j], words[n-1] = words[n-1], words[j]
		// Recurse into the smaller side, loop on the larger.
		if j < n-1-j {
			sortWords(words[:j])
			words = words[j+1:]
		} else {
			sortWords(words[j+1:])
			words = words[:j]
		}
	}
	for i := 1; i < len(words); i++ {
		w := words[i]
		j := i
		for ; j > 0 && words[j-1] > w; j-- {
			words[j] = words[j-1]
		}
		words[j] = w
	}
}

// utf16Rank maps each byte of the UTF-8 bytes x (big-endian) so that
// comparing two such words as integers orders them as their UTF-16 code
// units up to their first differing byte: the lead bytes of characters
// above U+FFFF, F0–F4, become EE–F2, and the lead bytes of U+E000–U+FFFF,
// EE–EF, become F3–F4; every other byte stays. Why that is UTF-16 order:
// two valid UTF-8 strings that agree up to their first differing byte are
// there in the same place of a character (UTF-8 is self-synchronizing). In
// a continuation byte (80–BF, never mapped) the two characters have the
// same lead byte, so the same length and the same UTF-16 form (one unit,
// or a surrogate pair), and both byte order and UTF-16 order are code
// point order. In a lead byte, byte order is code point order, which is
// UTF-16 order except that characters above U+FFFF (surrogates D800–DBFF
// first) sort below U+E000–U+FFFF: exactly the pair of ranges the map
// swaps, each kept in its own order. A zero byte past the end of a short
// name may tie with a name's own U+0000: only a tie, which the full
// comparison settles. TestUTF16RankOrder checks it against UTF-16 order.
func utf16Rank(x uint64) uint64 {
	const (
		lows  = 0x7f7f7f7f7f7f7f7f
		highs = 0x8080808080808080
	)
	// Bit 7 set in each byte that is zero (exact: no carry between
	// bytes), for the bytes F0–FF and EE–EF.
	f0 := x&0xf0f0f0f0f0f0f0f0 ^ 0xf0f0f0f0f0f0f0f0
	f0 = ^((f0&lows + lows) | f0) & highs
	ee := x&0xfefefefefefefefe ^ 0xeeeeeeeeeeeeeeee
	ee = ^((ee&lows + lows) | ee) & highs
	// No byte borrows or carries: F0–F4 become EE–F2, EE–EF F3–F4.
	return x - f0>>7*2 + ee>>7*5
}

// rewriteMembers rewrites the members of the object whose body starts at
// out[body:] in the order of keys, with commas between them.
func (p *jcsParser) rewriteMembers(out []byte, body int, members []jcsMember, keys []jcsSortKey) []byte {
	p.tmp = append(p.tmp[:0], out[body:]...)
	out = out[:body]
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		m := &members[k.index]
		out = append(out, p.tmp[m.start-body:m.end-body]...)
	}
	return out
}

// compareKeys orders the members two keys stand for by the UTF-16 code
// units of their names, as RFC 8785 requires.
func (p *jcsParser) compareKeys(members []jcsMember, a, b jcsSortKey) int {
	if a.prefix != b.prefix {
		// The first differing byte of the names is within the
		// prefixes, where the zero padding of a shorter name (a prefix
		// of the other) orders first, as compareUTF16 orders it, and
		// the ranked prefixes order as the names' UTF-16 code units
		// (utf16Rank).
		return cmp.Compare(a.prefix, b.prefix)
	}
	return compareUTF16(p.name(&members[a.index]), p.name(&members[b.index]))
}

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code units.
// That is UTF-8 byte order (which is code point order) except that a code
// point above U+FFFF (a surrogate pair, units D800-DBFF first) sorts below
// U+E000-U+FFFF. Valid UTF-8 strings that agree up to their first
// differing byte differ there either in continuation bytes of runes of the
// same length, ordered as their code points, or in lead bytes: a 4-byte
// lead (F0-F4) against EE or EF (U+E000-U+FFFF) is the one reversed case.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b) // the shorter, a prefix of the other, first
	}
	x, y := a[i], b[i]
	if x >= 0xF0 && (y == 0xEE || y == 0xEF) {
		return -1
	}
	if y >= 0xF0 && (x == 0xEE || x == 0xEF) {
		return 1
	}
	return int(x) - int(y)
}
