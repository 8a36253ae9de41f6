// Package jcs is the RFC 8785 (JSON Canonicalization Scheme) canonicalizer
// behind ctoken.ArgsFingerprint and ctoken.CanonicalJSON, written here for
// speed, a nesting cap and a lossless refusal of what the canonical form
// would change (see those functions for the contract). It also lends the
// root package's request-state payload parser its strict JSON string
// reader.
//
// Its fuzzers, mutation tests and the differential tests against
// encoding/json live beside it; the bench module cross-checks it against
// github.com/gowebpki/jcs through ctoken.CanonicalJSON.
package jcs

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/jsontext"
	"github.com/ctoken/ctoken/internal/reason"
)

// ErrArgsInvalid reports arguments that [Sum] or [Canonical] refuse (it is
// ctoken.ErrArgsInvalid): text that is not I-JSON (RFC 7493) — malformed
// JSON, a duplicate object member name, invalid UTF-8, a lone surrogate
// escape, a number outside IEEE 754 double range, nesting deeper than
// [MaxJSONDepth] — and values the canonical form would change: a number
// whose exact decimal value differs from that of its RFC 8785 form, or a Go
// string holding invalid UTF-8. reason.Of names the check that failed.
var ErrArgsInvalid = errors.New("ctoken: invalid arguments")

// Rejections of arguments, allocated once.
var (
	errArgsSyntax    = reason.New(ErrArgsInvalid, "not JSON")
	errArgsUTF8      = reason.New(ErrArgsInvalid, "invalid UTF-8")
	errArgsSurrogate = reason.New(ErrArgsInvalid, "lone surrogate escape")
	errArgsDuplicate = reason.New(ErrArgsInvalid, "duplicate object member name")
	errArgsDepth     = reason.New(ErrArgsInvalid, "nested deeper than MaxJSONDepth")
	errArgsRange     = reason.New(ErrArgsInvalid, "number outside double range")
	errArgsInexact   = reason.New(ErrArgsInvalid, "number whose canonical form has another value (send it as a string)")
	errArgsReplaced  = reason.New(ErrArgsInvalid, "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)")
	errArgsMarshal   = reason.New(ErrArgsInvalid, "value cannot be marshalled as JSON")
)

// MaxJSONDepth caps the nesting of arrays and objects [Canonical] accepts
// (it is ctoken.MaxJSONDepth).
const MaxJSONDepth = 256

// The rejections of arguments, for the root package's reason table; each
// matches [ErrArgsInvalid].
var (
	ErrSyntax    = errArgsSyntax
	ErrUTF8      = errArgsUTF8
	ErrSurrogate = errArgsSurrogate
	ErrDuplicate = errArgsDuplicate
	ErrDepth     = errArgsDepth
	ErrRange     = errArgsRange
	ErrInexact   = errArgsInexact
	ErrReplaced  = errArgsReplaced
	ErrMarshal   = errArgsMarshal
)

// Fingerprint is a SHA-256 of a canonical form; ctoken.Fingerprint has the
// same layout.
type Fingerprint = [32]byte

// Sum returns the SHA-256 of the RFC 8785 canonical JSON of args, as
// ctoken.ArgsFingerprint documents: a []byte or json.RawMessage is JSON
// text, canonicalized by [Canonical]; any other value is written directly
// by its type's plan where one covers it, and otherwise is what
// encoding/json marshals it to. It refuses with [ErrArgsInvalid] anything
// the canonical form would change.
func Sum(args any) (Fingerprint, error) {
	switch v := args.(type) {
	case []byte:
		return fingerprintText(v, false)
	case json.RawMessage:
		return fingerprintText(v, false)
	}
	if fp, ok := fingerprintGoValue(args); ok {
		return fp, nil
	}
	return fingerprintMarshalled(args)
}

// fingerprintMarshalled is Sum's plain path for a Go value:
// json.Marshal, then the canonical form of the text, refusing the escape
// \ufffd that stands for invalid UTF-8 in a Go string.
func fingerprintMarshalled(args any) (Fingerprint, error) {
	text, err := json.Marshal(args)
	if err != nil {
		return Fingerprint{}, errors.Join(errArgsMarshal, err)
	}
	return fingerprintText(text, true)
}

// fingerprintText returns the SHA-256 of the canonical form of text.
func fingerprintText(text []byte, refuseFFFD bool) (Fingerprint, error) {
	p := jcsScratch.Get().(*jcsParser)
	defer p.release()
	p.in, p.refuseFFFD = text, refuseFFFD
	out, err := p.canonical(p.out[:0])
	if err != nil {
		return Fingerprint{}, err
	}
	p.out = out
	return sha256.Sum256(out), nil
}

// jcsScratch holds parsers whose buffers Sum reuses; nothing
// in them outlives a call.
var jcsScratch = sync.Pool{New: func() any { return new(jcsParser) }}

// maxPooledJCS caps the buffer capacity a pooled parser keeps, so one huge
// argument does not pin its memory.
const maxPooledJCS = 64 << 10

// release resets p and returns it to jcsScratch.
func (p *jcsParser) release() {
	if cap(p.out) > maxPooledJCS || cap(p.keys) > maxPooledJCS || cap(p.str) > maxPooledJCS ||
		cap(p.tmp) > maxPooledJCS || cap(p.members) > maxPooledJCS/32 || cap(p.order) > maxPooledJCS/32 || cap(p.packed) > maxPackedSort {
		return
	}
	*p = jcsParser{out: p.out[:0], keys: p.keys[:0], members: p.members[:0], str: p.str[:0], tmp: p.tmp[:0], order: p.order[:0], frames: p.frames[:0], packed: p.packed[:0], tiny: p.tiny}
	jcsScratch.Put(p)
}

// Canonical returns the RFC 8785 (JCS) canonical form of the JSON text:
// no insignificant white space, object members sorted by the UTF-16 code
// units of their names, strings with only the mandatory escapes, and numbers
// in ECMAScript's shortest round-trip form (1.0e2 is 100, -0.0 is 0).
//
// It is lossless: the canonical form means exactly what the input means.
// Input that is not I-JSON is [ErrArgsInvalid], and so is a number whose
// exact decimal value differs from that of its canonical form, because a
// double cannot hold it: 1234567890123456789 (canonically
// 1234567890123456800), 9007199254740993, 0.10000000000000000001, 1e-400.
// Numbers a double holds to their last digit stay accepted in any spelling
// (0.1, 1.0e2, 1234567890123456800). Send other numbers as strings.
func Canonical(text []byte) ([]byte, error) {
	p := jcsScratch.Get().(*jcsParser)
	defer p.release()
	p.in = text
	return p.canonical(make([]byte, 0, len(text)))
}

// canonical appends the canonical form of p.in to out.
//
// It is one loop over the input with an explicit stack of open arrays and
// objects, rather than one call per value, so that the input position and
// the output stay in local variables. With member sort keys taken as names
// are read, it took 14 % less time than the recursive parser it replaced on
// the 1.4 KiB non-canonical benchmark input and 7 % less on the canonical
// one (docs/benchmarks.md). Each value is written as it is read; an object
// whose members arrive out of canonical order is rewritten in order when it
// closes.
func (p *jcsParser) canonical(out []byte) ([]byte, error) {
	in, i := p.in, p.pos
	stack := p.frames[:0]
	var c byte
	i = jsontext.SkipSpace(in, i)
value:
	if i >= len(in) {
		return nil, errArgsSyntax
	}
	c = in[i]
	switch {
	case c == '"':
		p.pos = i
		var ok bool
		if out, ok = p.appendString(out); !ok {
			return nil, p.fail
		}
		i = p.pos
	case c == '-' || ('0' <= c && c <= '9'):
		if '1' <= c && c <= '9' {
			// An integer of up to 15 digits followed by what ends a
			// number is exactly a double, written as it is read (as
			// number does): copied here without the call.
			j := i + 1
			for j < len(in) && j-i < 15 && '0' <= in[j] && in[j] <= '9' {
				j++
			}
			if j < len(in) && (in[j] == ',' || in[j] == ']' || in[j] == '}' || in[j] <= ' ') {
				out = append(out, in[i:j]...)
				i = j
				break
			}
		}
		p.pos = i
		var err error
		if out, err = p.number(out); err != nil {
			return nil, err
		}
		i = p.pos
	case c == '{' || c == '[':
		if len(stack) >= MaxJSONDepth {
			return nil, errArgsDepth
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = jsontext.SkipSpace(in, i+1)
		out = append(out, c)
		if i < len(in) && in[i] == closing {
			i++
			out = append(out, closing)
			break
		}
		if n := len(stack); n < cap(stack) {
			stack = stack[:n+1]
		} else {
			stack = append(stack, jcsFrame{})
		}
		f := &stack[len(stack)-1]
		if f.object = c == '{'; !f.object {
			goto value
		}
		f.sorted, f.body = true, len(out)
		f.membersBase, f.keysBase, f.orderBase = len(p.members), len(p.keys), len(p.order)
		goto member
	default:
		var lit string
		switch c {
		case 't':
			lit = "true"
		case 'f':
			lit = "false"
		case 'n':
			lit = "null"
		}
		if lit == "" || !bytes.HasPrefix(in[i:], []byte(lit)) {
			return nil, errArgsSyntax
		}
		out = append(out, lit...)
		i += len(lit)
	}

after:
	// A value ended at i.
	i = jsontext.SkipSpace(in, i)
	if len(stack) == 0 {
		if i != len(in) {
			return nil, errArgsSyntax
		}
		p.frames = stack
		return out, nil
	}
	if i >= len(in) {
		return nil, errArgsSyntax
	}
	c = in[i]
	i++
	{ // a block, so that the gotos to member jump over no declaration
		f := &stack[len(stack)-1]
		closing := byte(']')
		if f.object {
			p.members[len(p.members)-1].end = len(out)
			closing = '}'
		}
		if c == ',' {
			out = append(out, ',')
			i = jsontext.SkipSpace(in, i)
			if f.object {
				goto member
			}
			goto value
		}
		if c != closing {
			return nil, errArgsSyntax
		}
		if f.object {
			if !f.sorted {
				members, keys := p.members[f.membersBase:], p.order[f.orderBase:]
				if !p.sortKeys(members, keys) {
					return nil, errArgsDuplicate // I-JSON
				}
				out = p.rewriteMembers(out, f.body, members, keys)
			}
			p.keys, p.members, p.order = p.keys[:f.keysBase], p.members[:f.membersBase], p.order[:f.orderBase]
		}
		out = append(out, closing)
		stack = stack[:len(stack)-1]
		goto after
	}

member:
	{
		if i >= len(in) || in[i] != '"' {
			return nil, errArgsSyntax
		}
		var nameAt, nameEnd int
		inInput := false
		start := len(out)
		p.pos = i
		if end := p.plainString(); end >= 0 {
			nameAt, nameEnd, inInput = i+1, end-1, true
			out = append(out, in[i:end]...)
			i = end
		} else {
			nameAt = len(p.keys)
			keys, ok := p.stringInto(p.keys)
			if !ok {
				return nil, p.fail
			}
			p.keys = keys
			nameEnd = len(keys)
			i = p.pos
			out = appendJCSString(out, p.keys[nameAt:])
		}
		i = jsontext.SkipSpace(in, i)
		if i >= len(in) || in[i] != ':' {
			return nil, errArgsSyntax
		}
		i++
		i = jsontext.SkipSpace(in, i)
		out = append(out, ':')
		if n := len(p.members); n < cap(p.members) {
			p.members = p.members[:n+1]
		} else {
			p.members = append(p.members, jcsMember{})
		}
		m := &p.members[len(p.members)-1]
		m.nameAt, m.nameEnd, m.start, m.inInput = nameAt, nameEnd, start, inInput
		f := &stack[len(stack)-1]
		members := p.members[f.membersBase:]
		idx := len(members) - 1
		var k jcsSortKey
		if inInput {
			k = nameKey(in, nameAt, nameEnd, idx)
		} else {
			k = nameKey(p.keys, nameAt, nameEnd, idx)
		}
		if f.sorted {
			if idx > 0 {
				a := f.last
				if a.ascii && k.ascii && a.prefix != k.prefix {
					f.sorted = a.prefix < k.prefix
				} else if cmp := p.compareKeys(members, a, k); cmp == 0 {
					return nil, errArgsDuplicate // I-JSON
				} else {
					f.sorted = cmp < 0
				}
				if !f.sorted {
					for j := range idx {
						p.order = append(p.order, p.sortKey(members, j))
					}
					p.order = append(p.order, k)
				}
			}
			f.last = k
		} else {
			p.order = append(p.order, k)
		}
		goto value
	}
}

// jcsParser reads JSON text from in. The canonicalizer writes straight into
// one output buffer; frames, keys, members and order are stacks shared by
// nested arrays and objects (each uses the tail it pushed and pops it when
// done), so parsing allocates only as these buffers grow.
type jcsParser struct {
	in  []byte
	pos int

	keys    []byte       // unescaped member names of the open objects
	members []jcsMember  // members of the open objects
	str     []byte       // an unescaped string value, reused
	tmp     []byte       // members of an object being reordered, reused
	order   []jcsSortKey // sort keys of the open objects' members out of order
	out     []byte       // Sum's canonical output, reused
	frames  []jcsFrame   // the open arrays and objects, at most MaxJSONDepth
	packed  []uint64     // packedSort's words, reused

	// refuseFFFD refuses the escape \ufffd, which encoding/json writes
	// for invalid UTF-8 in a Go string.
	refuseFFFD bool
	// fail is why stringInto last failed.
	fail error
	// tiny holds tinyDouble's working integers once it has needed them.
	tiny *[2]big.Int
}

// jcsFrame is an array or object canonical has opened and not yet closed.
type jcsFrame struct {
	object bool
	// Of an object: body is the out index just past its '{', the bases
	// are the lengths of p.members, p.keys and p.order when it opened,
	// and last is the key of its last member while sorted holds, that
	// is while its members have come in canonical order. From the first
	// member out of order on, p.order[orderBase:] holds the keys of all
	// its members so far.
	sorted                           bool
	body                             int
	membersBase, keysBase, orderBase int
	last                             jcsSortKey
}

// jcsMember is one object member: its unescaped name, p.keys[nameAt:nameEnd]
// or, when inInput, p.in[nameAt:nameEnd], and its canonical text
// "name":value, out[start:end].
type jcsMember struct {
	nameAt, nameEnd int
	start, end      int
	inInput         bool
}

// jcsSortKey stands for members[index] while sortKeys orders an
// object's members: prefix is the name's first 8 bytes, big-endian and
// zero-padded, and ascii reports that they are ASCII. Two ASCII prefixes
// that differ order as their names do. Sorting these small keys instead
// of the members moves a third of the bytes.
type jcsSortKey struct {
	prefix uint64
	index  int
	ascii  bool
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
	return jcsSortKey{prefix: x, index: index, ascii: x&0x8080808080808080 == 0}
}

// shortPrefix returns name, under 8 bytes, big-endian and zero-padded.
func shortPrefix(name []byte) uint64 {
	var x uint64
	for i, c := range name {
		x |= uint64(c) << (56 - 8*i)
	}
	return x
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
	keys := p.order[:0]
	for i := range members {
		keys = append(keys, p.sortKey(members, i))
	}
	p.order = keys
	if !p.sortKeys(members, keys) {
		return nil, errArgsDuplicate // I-JSON
	}
	return p.rewriteMembers(out, body, members, keys), nil
}

// sortKeys orders the keys of members as compareKeys does, or reports
// false if two of them stand for the same name.
func (p *jcsParser) sortKeys(members []jcsMember, keys []jcsSortKey) bool {
	if len(keys) > maxInsertionSort && len(keys) <= maxPackedSort {
		return p.packedSort(members, keys)
	}
	if len(keys) > maxInsertionSort {
		slices.SortFunc(keys, func(a, b jcsSortKey) int {
			if a.ascii && b.ascii && a.prefix != b.prefix {
				return cmp.Compare(a.prefix, b.prefix)
			}
			return p.compareKeys(members, a, b)
		})
		for i := 1; i < len(keys); i++ {
			if p.compareKeys(members, keys[i-1], keys[i]) == 0 {
				return false
			}
		}
		return true
	}
	// Insertion sort: each key moves down past the larger keys before it,
	// compared by their ASCII prefixes inline where those settle it.
	for i := 1; i < len(keys); i++ {
		k := keys[i]
		j := i
		for ; j > 0; j-- {
			a := keys[j-1]
			if a.ascii && k.ascii && a.prefix != k.prefix {
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
// sorted as plain integers (slices.Sort, no comparison function), and
// only runs of members whose 7 bytes tie are compared in full.
func (p *jcsParser) packedSort(members []jcsMember, keys []jcsSortKey) bool {
	first := p.name(&members[keys[0].index])
	skip := len(first)
	for _, k := range keys[1:] {
		if skip == 0 {
			break
		}
		name := p.name(&members[k.index])
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
	for _, k := range keys {
		x := k.prefix // the first 8 bytes, as nameKey read them
		if skip > 0 {
			name := p.name(&members[k.index])[skip:]
			if len(name) >= 8 {
				x = binary.BigEndian.Uint64(name)
			} else {
				x = shortPrefix(name)
			}
		}
		if x&0x8080808080808080 != 0 {
			x = utf16Rank(x)
		}
		packed = append(packed, x&^0xff|uint64(k.index))
	}
	p.packed = packed
	slices.Sort(packed)
	for i, x := range packed {
		keys[i] = jcsSortKey{index: int(x & 0xff)}
	}
	// Runs that tie on their 7 bytes: insertion sort by whole names,
	// refusing a duplicate.
	for i := 0; i < len(packed); {
		j := i + 1
		for j < len(packed) && packed[j]>>8 == packed[i]>>8 {
			j++
		}
		for a := i + 1; a < j; a++ {
			k := keys[a]
			b := a
			for ; b > i; b-- {
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
		i = j
	}
	return true
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
		// of the other) orders first, as compareUTF16 orders it. Names
		// that are not ASCII are settled here too: 18 % faster on 80
		// shuffled names mixing ASCII, Latin, CJK, U+E000–U+FFFF and
		// astral characters (BenchmarkArgsFingerprintShapes, interleaved
		// runs), as most such pairs differ in their first bytes.
		return compareUTF16Bytes(a.prefix, b.prefix)
	}
	return compareUTF16(p.name(&members[a.index]), p.name(&members[b.index]))
}

// compareUTF16Bytes orders two different name prefixes (big-endian,
// zero-padded) by their first differing byte, with compareUTF16's rule.
func compareUTF16Bytes(a, b uint64) int {
	shift := 56 - bits.LeadingZeros64(a^b)&^7
	x, y := byte(a>>shift), byte(b>>shift)
	if x >= 0xF0 && (y == 0xEE || y == 0xEF) {
		return -1
	}
	if y >= 0xF0 && (x == 0xEE || x == 0xEF) {
		return 1
	}
	return int(x) - int(y)
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

// stringInto parses the JSON string at p.pos (its opening quote) and
// appends its value to dst, with the validation of jcsParser.string: no
// raw control characters, valid UTF-8, valid escapes, no lone surrogates.
func (p *jcsParser) stringInto(dst []byte) ([]byte, bool) {
	p.pos++ // opening quote
	for {
		// Copy the run of characters that need no attention at once.
		start := p.pos
		for p.pos+8 <= len(p.in) && !jsonSpecial8(binary.LittleEndian.Uint64(p.in[p.pos:])) {
			p.pos += 8
		}
		for p.pos < len(p.in) && jsonPlain[p.in[p.pos]] {
			p.pos++
		}
		dst = append(dst, p.in[start:p.pos]...)
		if p.pos >= len(p.in) {
			p.fail = errArgsSyntax
			return nil, false
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return dst, true
		case c == '\\':
			if p.pos+1 < len(p.in) && (p.in[p.pos+1] == '"' || p.in[p.pos+1] == '\\') {
				dst = append(dst, p.in[p.pos+1]) // the common escapes, inline
				p.pos += 2
				continue
			}
			r, err := p.escape()
			if err != nil {
				p.fail = err
				return nil, false
			}
			dst = utf8.AppendRune(dst, r)
		case c < 0x20:
			p.fail = errArgsSyntax
			return nil, false
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size == 1 {
				p.fail = errArgsUTF8
				return nil, false
			}
			dst = append(dst, p.in[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// appendString appends the canonical form of the JSON string at p.pos
// (its opening quote) to out and moves p.pos past it, with the checks of
// stringInto: no raw control character, valid UTF-8, valid escapes, no
// lone surrogate. It writes the canonical form as it reads: runs of bytes
// other than '"', '\\' and control characters are copied as they are
// (validated as UTF-8 a run at a time, and only when the run holds a
// non-ASCII byte), and each escape is replaced by its canonical spelling.
// Unescaping into a buffer and escaping it again, as this package did
// before, took 1.1–2.8× as long on 1.5 KiB of text with escapes or
// non-ASCII characters (BenchmarkArgsFingerprintShapes, docs/benchmarks.md).
func (p *jcsParser) appendString(out []byte) ([]byte, bool) {
	in := p.in
	i := p.pos + 1
	out = append(out, '"')
	for {
		start := i
		var high uint64
		i, high = scanStringRun(in, i)
		if i >= len(in) {
			p.fail = errArgsSyntax
			return nil, false
		}
		run := in[start:i]
		if high&0x8080808080808080 != 0 && !utf8.Valid(run) {
			p.fail = errArgsUTF8
			return nil, false
		}
		out = append(out, run...)
		switch in[i] {
		case '"':
			p.pos = i + 1
			return append(out, '"'), true
		case '\\':
			if r, ok := unhex4(in, i+2); ok && i+1 < len(in) && in[i+1] == 'u' && !utf16.IsSurrogate(r) && r != utf8.RuneError {
				// \uXXXX outside the surrogates: the common escape of
				// non-ASCII text (Python's ensure_ascii), decoded here
				// with a table rather than through escape (CJK text so
				// escaped: 4.45× SHA-256 before, 4.0× after, one run
				// each).
				switch {
				case r >= 0x800: // three bytes of UTF-8 (not a surrogate)
					out = append(out, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
				case r < 0x20 || r == '"' || r == '\\':
					out = appendJCSEscape(out, byte(r))
				default:
					out = utf8.AppendRune(out, r)
				}
				i += 6
				continue
			}
			p.pos = i
			r, err := p.escape()
			if err != nil {
				p.fail = err
				return nil, false
			}
			i = p.pos
			if r < 0x20 || r == '"' || r == '\\' {
				out = appendJCSEscape(out, byte(r))
			} else {
				out = utf8.AppendRune(out, r)
			}
		default: // a control character
			p.fail = errArgsSyntax
			return nil, false
		}
	}
}

// scanStringRun returns the index of the first byte at or after i that is
// '"', '\\' or a control character, or len(in), and a word with bit 7 set
// in some byte if a byte before it is not ASCII.
func scanStringRun(in []byte, i int) (int, uint64) {
	var high uint64
	for i+8 <= len(in) {
		x := binary.LittleEndian.Uint64(in[i:])
		if m := stringStopMask8(x); m != 0 {
			n := bits.TrailingZeros64(m) >> 3
			return i + n, high | x&(1<<(8*n)-1)
		}
		high |= x
		i += 8
	}
	for i < len(in) && in[i] >= 0x20 && in[i] != '"' && in[i] != '\\' {
		high |= uint64(in[i])
		i++
	}
	return i, high
}

// stringStopMask8 returns, for the eight bytes of x (little-endian), a mask
// with bit 7 set in each byte that is '"', '\\' or a control character
// (below 0x20), and no other bit. Unlike jsonSpecialMask8 it is exact in
// every byte and leaves non-ASCII bytes alone: each test works on the low
// seven bits, where adding 0x60 or 0x7f cannot carry into the next byte.
func stringStopMask8(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	y := x &^ highs
	ctl := y + 0x60*ones                  // bit 7 set where y >= 0x20
	quote := (y ^ '"'*ones) + 0x7f*ones   // bit 7 set where y != '"'
	bslash := (y ^ '\\'*ones) + 0x7f*ones // bit 7 set where y != '\\'
	return ^(ctl & quote & bslash) &^ x & highs
}

// plainString returns the index just past the JSON string at p.pos (its
// opening quote) when the string holds no escape and no control character
// and is valid UTF-8, so that its canonical form is its input text: RFC
// 8785 escapes nothing else. Otherwise it returns -1 and leaves p.pos.
func (p *jcsParser) plainString() int {
	in := p.in
	i := p.pos + 1
	i, high := scanStringRun(in, i)
	if i >= len(in) || in[i] != '"' {
		return -1 // unterminated, an escape or a control character
	}
	if high&0x8080808080808080 != 0 && !utf8.Valid(in[p.pos+1:i]) {
		return -1
	}
	return i + 1
}

// jsonPlain reports the bytes a JSON string carries verbatim without
// further checks: printable ASCII other than '"' and '\\'. Read-only.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsonSpecial8 reports whether any of the 8 bytes packed in x is not
// jsonPlain: a control character, '"', '\\' or a byte of a multi-byte UTF-8
// sequence. It tests all eight at once (SWAR): for a byte b, b-k borrows
// into bit 7 exactly when b < k, given bit 7 of b is clear.
func jsonSpecial8(x uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	low := x - 0x20*ones                   // bit 7 set where b < 0x20 (or b >= 0xa0)
	quote := (x ^ '"'*ones) - ones         // bit 7 set where b == '"' (or b^'"' >= 0x81)
	bslash := (x ^ '\\'*ones) - ones       // likewise for '\\'
	return (x|low|quote|bslash)&highs != 0 // x's own bit 7: non-ASCII
}

// escape parses the escape sequence at p.pos, joining surrogate pairs.
func (p *jcsParser) escape() (rune, error) {
	if p.pos+1 >= len(p.in) {
		return 0, errArgsSyntax
	}
	c := p.in[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return 0, errArgsSyntax
		}
		if !utf16.IsSurrogate(r) {
			if r == utf8.RuneError && p.refuseFFFD {
				return 0, errArgsReplaced
			}
			return r, nil
		}
		if r >= 0xDC00 || p.pos+1 >= len(p.in) || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
			return 0, errArgsSurrogate
		}
		p.pos += 2
		lo, ok := p.hex4()
		if !ok {
			return 0, errArgsSyntax
		}
		if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
			return 0, errArgsSurrogate
		}
		return r, nil
	}
	return 0, errArgsSyntax
}

// unhex4 returns the value of the four hex digits in[i:i+4], or false if
// there are not four.
func unhex4(in []byte, i int) (rune, bool) {
	if i < 0 || len(in)-i < 4 {
		return 0, false
	}
	a, b, c, d := hexValue[in[i]], hexValue[in[i+1]], hexValue[in[i+2]], hexValue[in[i+3]]
	if a|b|c|d < 0 {
		return 0, false
	}
	return rune(a)<<12 | rune(b)<<8 | rune(c)<<4 | rune(d), true
}

// hexValue maps a hex digit to its value and every other byte to -1.
// Read-only.
var hexValue = func() (t [256]int8) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = int8(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = int8(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			t[c] = int8(c - 'A' + 10)
		default:
			t[c] = -1
		}
	}
	return t
}()

func (p *jcsParser) hex4() (rune, bool) {
	if len(p.in)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.in[p.pos : p.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// number parses a JSON number and appends its RFC 8785 form, ECMAScript's
// Number.prototype.toString of the nearest double. A number whose exact
// decimal value differs from the value of that form is errArgsInexact: the
// canonical form must not merge two numbers of different meaning.
//
// The literal's value is normalized to significant digits d1…dn (no
// leading or trailing zeros) and a decimal point position: 0.d1…dn ×
// 10^point. With n ≤ 15 and a value from 10^-307 to below 10^308 (point
// from -306 to 308, all normal doubles, 2.2250738585072014e-308 to
// 1.7976931348623157e308) the double holds the value to its last digit and
// these are its shortest round-trip digits, so no float arithmetic is
// needed: as 10^15 < 2^52, a decimal of 15 significant digits or fewer
// comes back from its nearest normal double when rounded to as many digits
// (Matula), so no two of them share a double, and no other decimal of as
// few digits rounds to it. With 16 or 17 digits shortestExact shows most
// to be shortest without strconv. Otherwise the digits are compared with
// the shortest round-trip digits of the double strconv parses.
func (p *jcsParser) number(out []byte) ([]byte, error) {
	in, i := p.in, p.pos
	start := i
	neg := in[i] == '-'
	if neg {
		i++
	}
	intStart := i
	if i < len(in) && in[i] == '0' {
		i++
	} else {
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
		if i == intStart {
			return nil, errArgsSyntax
		}
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(in) && in[i] == '.' {
		i++
		fracStart = i
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
		if i == fracStart {
			return nil, errArgsSyntax
		}
		fracEnd = i
	}
	exp := 0
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		expNeg := false
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			expNeg = in[i] == '-'
			i++
		}
		expStart := i
		// Saturate where no literal can bring the value back into double
		// range: the first significant digit lies within the input, so
		// the decimal point's position below is within ±len(in) before
		// the exponent is added, and a saturated exponent leaves it more
		// than 300 places out, where ParseFloat decides from the text.
		limit := len(in) + 400
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			if exp >= limit/10 {
				exp = limit // the true exponent is at least limit-9
			} else {
				exp = exp*10 + int(in[i]-'0')
			}
			i++
		}
		if i == expStart {
			return nil, errArgsSyntax
		}
		if expNeg {
			exp = -exp
		}
	}
	p.pos = i
	lit := in[start:i]
	if fracEnd == fracStart && i == intEnd && len(lit) <= 15 {
		// An integer of up to 15 digits: exactly a double, and ECMAScript
		// prints it as written (leading zeros are not JSON).
		if string(lit) == "-0" {
			return append(out, '0'), nil
		}
		return append(out, lit...), nil
	}
	if i == fracEnd && fracEnd > fracStart && len(lit) <= 16 && in[fracEnd-1] != '0' &&
		(in[intStart] != '0' || fewLeadingZeros(in[fracStart:fracEnd])) {
		// A decimal I.F of at most 15 significant digits, no exponent and
		// no trailing zero, with I not 0 or F under six leading zeros:
		// ECMAScript prints it as written (see appendES6Digits).
		return append(out, lit...), nil
	}

	// Significant digits d1…dn, from the first nonzero digit to the last,
	// at most 17 (a double's shortest form has no more), and the decimal
	// point's position: the value is 0.d1…dn × 10^point before exp.
	first, point := -1, 0
	for i := intStart; i < intEnd; i++ {
		if in[i] != '0' {
			first, point = i, intEnd-i
			break
		}
	}
	if first < 0 {
		for i := fracStart; i < fracEnd; i++ {
			if in[i] != '0' {
				first, point = i, fracStart-i
				break
			}
		}
		if first < 0 {
			return append(out, '0'), nil // 0, -0, 0.000e99: all zero
		}
	}
	last := fracEnd - 1 // fracEnd is intEnd without a fraction
	for in[last] == '0' || in[last] == '.' {
		last-- // stops at in[first] at the latest
	}
	var dig [17]byte
	n := 0
	for i := first; i <= last; i++ {
		if c := in[i]; c != '.' {
			if n == len(dig) {
				return nil, errArgsInexact // more significant digits than any double's shortest form
			}
			dig[n] = c
			n++
		}
	}
	point += exp
	if point <= -324 {
		// Below 10^-324, under half the least subnormal: the value
		// rounds to zero.
		return nil, errArgsInexact
	}
	if n > 15 && shortestExact(digitsValue(dig[:n]), point-n) {
		// Shown shortest by exact integer arithmetic (shortest.go).
	} else if n > 15 || point < -306 || point > 308 {
		f, ok := p.tinyDouble(dig[:n], point)
		if !ok {
			var err error
			f, err = strconv.ParseFloat(string(lit), 64)
			if err != nil || math.IsInf(f, 0) {
				return nil, errArgsRange
			}
		}
		if f == 0 {
			return nil, errArgsInexact // underflow
		}
		var buf [32]byte
		short := strconv.AppendFloat(buf[:0], math.Abs(f), 'e', -1, 64) // d.ddde±x
		// The exponent: a sign and two or three digits.
		e := len(short) - 4
		if short[e] != 'e' {
			e--
		}
		x := 0
		for _, c := range short[e+2:] {
			x = x*10 + int(c-'0')
		}
		if short[e+1] == '-' {
			x = -x
		}
		if x+1 != point || short[0] != dig[0] || (e > 1 && string(short[2:e]) != string(dig[1:n])) || (e == 1 && n != 1) {
			return nil, errArgsInexact
		}
	}
	if neg {
		out = append(out, '-')
	}
	return appendES6Digits(out, dig[:n], point), nil
}

// digitsValue returns the integer the 16 or 17 decimal digits d spell, eight
// at a time (parse8).
func digitsValue(d []byte) uint64 {
	v := parse8(binary.LittleEndian.Uint64(d[0:8]))*1e8 + parse8(binary.LittleEndian.Uint64(d[8:16]))
	if len(d) == 17 {
		v = v*10 + uint64(d[16]-'0')
	}
	return v
}

// parse8 returns the value of the eight ASCII digits packed in x, the first
// in its lowest byte: pairs, then quadruples, then the eight are combined
// with one multiplication each (SWAR).
func parse8(x uint64) uint64 {
	x -= 0x3030303030303030
	x = x*10 + x>>8 // each even byte: two digits
	x = ((x&0x000000ff000000ff)*(100+1000000<<32) + (x>>16&0x000000ff000000ff)*(1+10000<<32)) >> 32
	return x
}

// tinyDouble returns the magnitude of the double nearest to the positive
// value 0.d1…dn × 10^point, for -324 < point ≤ -307 and a value below
// 2^-1021, where the doubles are the multiples of 2^-1074 (the subnormals
// and the least normal binade); otherwise it reports false. It divides
// exactly and rounds to nearest, as strconv.ParseFloat does, which for
// these values falls back to big decimal arithmetic taking 17–55 µs a
// number (measured 2026-11-23): an argument array of such numbers cost
// thousands of times its SHA-256. This takes a few µs.
func (p *jcsParser) tinyDouble(dig []byte, point int) (float64, bool) {
	if point > -307 || point <= -324 {
		return 0, false
	}
	var d uint64
	for _, c := range dig {
		d = d*10 + uint64(c-'0') // at most 17 digits: no overflow
	}
	// The value is d / 10^m, the double k × 2^-1074: k = d × 2^1074 / 10^m.
	m := len(dig) - point
	if k, ok := tinyQuotient(d, m); ok {
		if k > 1<<53 {
			return 0, false
		}
		return math.Float64frombits(k), true
	}
	// The parser's big integers keep their memory across calls.
	if p.tiny == nil {
		p.tiny = new([2]big.Int)
	}
	num, r := &p.tiny[0], &p.tiny[1]
	num.Lsh(num.SetUint64(d), 1074)
	den := tinyPow10()[m-tinyPow10Min]
	k, r := num.QuoRem(num, den, r)
	// Round to nearest. No tie to break: a value halfway between two
	// such doubles, (2k+1) × 2^-1075, has over 700 significant digits.
	if r.Lsh(r, 1).Cmp(den) > 0 {
		k.Add(k, bigOne)
	}
	if !k.IsUint64() || k.Uint64() > 1<<53 {
		return 0, false
	}
	// For k ≤ 2^53 the bits of k are the double k × 2^-1074: a
	// subnormal below 2^52, the exponent field 1 or 2 from there.
	return math.Float64frombits(k.Uint64()), true
}

// tinyQuotient returns k = d × 2^1074 / 10^m rounded to nearest, for the
// m tinyDouble divides by, from d × R / 2^s with R = ⌊2^(1074-m+s) / 5^m⌋
// (tinyRecip: 128 bits, and 2^1074 / 10^m = 2^(1074-m) / 5^m): 192-bit
// integer arithmetic, no math/big. R is short of the true ratio by less
// than 1, so d × R is short of the true d × 2^(1074-m+s) / 5^m by less
// than d: where adding d could carry into the bit that rounds (the true
// value may lie on the other side of a half), it reports false and
// tinyDouble divides exactly. It also reports false when k is 2^64 or
// more (the caller refuses k over 2^53 anyway).
func tinyQuotient(d uint64, m int) (uint64, bool) {
	if m < tinyPow10Min || m >= tinyPow10Min+len(tinyRecip) {
		return 0, false
	}
	r := &tinyRecip[m-tinyPow10Min]
	h0, w0 := bits.Mul64(d, r.lo)
	w2, l1 := bits.Mul64(d, r.hi)
	w1, c := bits.Add64(l1, h0, 0)
	w2 += c
	t, ok := shr192(w2, w1, w0, r.shift-1) // 2k or 2k+1
	if !ok {
		return 0, false
	}
	if t&1 == 1 {
		return t>>1 + 1, true // at least a half: round up
	}
	// Below a half, unless the shortfall of R could cross it.
	v0, c := bits.Add64(w0, d, 0)
	v1, c := bits.Add64(w1, 0, c)
	v2 := w2 + c
	if t2, ok := shr192(v2, v1, v0, r.shift-1); !ok || t2 != t {
		return 0, false
	}
	return t >> 1, true
}

// shr192 returns w2:w1:w0 >> sh for 64 < sh < 192, or false when that is
// 2^64 or more.
func shr192(w2, w1, w0 uint64, sh int) (uint64, bool) {
	if sh >= 128 {
		return w2 >> (sh - 128), true
	}
	return w2<<(128-sh) | w1>>(sh-64), w2>>(sh-64) == 0
}

// tinyRecip holds, for m from tinyPow10Min to tinyPow10Min+33,
// R = ⌊2^(1074-m+shift) / 5^m⌋ as hi:lo, with shift such that
// 2^127 ≤ R < 2^128 (TestTinyRecip recomputes them). Read-only.
var tinyRecip = [34]struct {
	hi, lo uint64
	shift  int
}{
	{0xe61acf033d1a45df, 0x6fb92487298e33bd, 77},  // m = 308
	{0xb8157268fdae9e4c, 0x5960ea05bad82964, 80},  // m = 309
	{0x93445b8731587ea3, 0x7ab3ee6afbe0211d, 83},  // m = 310
	{0xeba09271e88d976b, 0xf7864a44c633682e, 87},  // m = 311
	{0xbc807527ed3e12bc, 0xc605083704f5ecf2, 90},  // m = 312
	{0x96cd2a865764dbca, 0x380406926a5e5728, 93},  // m = 313
	{0xf148440a256e2c76, 0xc00670ea43ca250d, 97},  // m = 314
	{0xc1069cd4eabe89f8, 0x999ec0bb696e840a, 100}, // m = 315
	{0x9a6bb0aa55653b2d, 0x47b233c92125366e, 103}, // m = 316
	{0xf712b443bbd52b7b, 0xa5e9ec7501d523e4, 107}, // m = 317
	{0xc5a890362fddbc62, 0xeb2189f734aa831d, 110}, // m = 318
	{0x9e20735e8cb16382, 0x55b46e5f5d5535b0, 113}, // m = 319
	{0xfd00b897478238d0, 0x8920b098955522b4, 117}, // m = 320
	{0xca66fa129f9b60a6, 0xd41a26e077774ef6, 120}, // m = 321
	{0xa1ebfb4219491a1f, 0x1014ebe6c5f90bf8, 123}, // m = 322
	{0x818995ce7aa0e1b2, 0x7343efebd1940993, 126}, // m = 323
	{0xcf42894a5dce35ea, 0x52064cac828675b9, 130}, // m = 324
	{0xa5ced43b7e3e9188, 0x419ea3bd35385e2d, 133}, // m = 325
	{0x84a57695fe98746d, 0x014bb630f7604b57, 136}, // m = 326
	{0xd43bf0effdc0ba48, 0x0212bd1b2566def2, 140}, // m = 327
	{0xa9c98d8ccb009506, 0x680efdaf511f18c2, 143}, // m = 328
	{0x87d4713d6f33aa6b, 0x8672648c40e5ad68, 146}, // m = 329
	{0xd953e8624b85dd78, 0xd71d6dad34a2af0d, 150}, // m = 330
	{0xaddcb9e83c6b1793, 0xdf4abe242a1bbf3d, 153}, // m = 331
	{0x8b16fb203055ac76, 0x4c3bcb5021afcc31, 156}, // m = 332
	{0xde8b2b66b3bc4723, 0xad2c788035e61382, 160}, // m = 333
	{0xb208ef855c969f4f, 0xbdbd2d335e51a935, 163}, // m = 334
	{0x8e6d8c6ab0787f72, 0xfe30f0f5e50e20f7, 166}, // m = 335
	{0xe3e27a444d8d98b7, 0xfd1b1b2308169b25, 170}, // m = 336
	{0xb64ec836a47146f9, 0x9748e2826cdee284, 173}, // m = 337
	{0x91d8a02bb6c10594, 0x79071b9b8a4be869, 176}, // m = 338
	{0xe95a99df8ace6f53, 0xf4d82c2c107973dc, 180}, // m = 339
	{0xbaaee17fa23ebf76, 0x5d79bcf00d2df649, 183}, // m = 340
	{0x9558b4661b6565f8, 0x4ac7ca59a424c507, 186}, // m = 341
}

// tinyPow10 returns 10^m for the m tinyDouble divides by, from
// tinyPow10Min (a digit and point -307) to tinyPow10Min+33 (17 digits and
// point -323), computed once: the powers took half of tinyDouble's time.
// Read-only.
var tinyPow10 = sync.OnceValue(func() []*big.Int {
	t := make([]*big.Int, 34)
	for i := range t {
		t[i] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(tinyPow10Min+i)), nil)
	}
	return t
})

const tinyPow10Min = 308

// bigOne is 1. Read-only.
var bigOne = big.NewInt(1)

// fewLeadingZeros reports whether the digits f start with fewer than six
// zeros.
func fewLeadingZeros(f []byte) bool {
	for i := range min(len(f), 6) {
		if f[i] != '0' {
			return true
		}
	}
	return len(f) < 6
}

// appendES6Digits appends the positive number 0.d1…dn × 10^point (d the
// shortest round-trip digits of a double, no trailing zero) as ECMAScript's
// Number.prototype.toString does (ECMA-262, Number::toString).
func appendES6Digits(out, d []byte, point int) []byte {
	const zeros = "000000000000000000000" // 21: the most either case below pads
	k := len(d)
	switch {
	case k <= point && point <= 21:
		out = append(out, d...)
		return append(out, zeros[:point-k]...)
	case 0 < point && point <= 21:
		out = append(out, d[:point]...)
		out = append(out, '.')
		return append(out, d[point:]...)
	case -6 < point && point <= 0:
		out = append(out, '0', '.')
		out = append(out, zeros[:-point]...)
		return append(out, d...)
	}
	out = append(out, d[0])
	if k > 1 {
		out = append(out, '.')
		out = append(out, d[1:]...)
	}
	x, sign := point-1, byte('+')
	if x < 0 {
		x, sign = -x, '-'
	}
	// A double's decimal exponent is at most 324: three digits.
	switch {
	case x >= 100:
		return append(out, 'e', sign, byte('0'+x/100), byte('0'+x/10%10), byte('0'+x%10))
	case x >= 10:
		return append(out, 'e', sign, byte('0'+x/10), byte('0'+x%10))
	}
	return append(out, 'e', sign, byte('0'+x))
}

// appendJCSString appends s as a JSON string with only the escapes RFC 8785
// mandates.
func appendJCSString[S ~string | ~[]byte](out []byte, s S) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			out = appendJCSEscape(out, c)
		} else {
			out = append(out, c)
		}
	}
	return append(out, '"')
}

// appendJCSEscape appends the RFC 8785 escape of c: '"', '\\' or a control
// character.
func appendJCSEscape(out []byte, c byte) []byte {
	const hex = "0123456789abcdef"
	switch c {
	case '"', '\\':
		return append(out, '\\', c)
	case '\b':
		return append(out, '\\', 'b')
	case '\f':
		return append(out, '\\', 'f')
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	return append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
}

// AppendString appends s as a JSON string with only the escapes RFC 8785
// mandates: the request-state payload writes its state with it.
func AppendString(out []byte, s string) []byte { return appendJCSString(out, s) }

// ReadString parses the JSON string whose opening quote is in[pos] and
// appends its value to dst, with the checks of the canonical form: no raw
// control character, valid UTF-8, valid escapes, no lone surrogate. It
// returns the extended dst and the index just past the closing quote, or
// false.
func ReadString(dst, in []byte, pos int) ([]byte, int, bool) {
	p := jcsParser{in: in, pos: pos}
	v, ok := p.stringInto(dst)
	return v, p.pos, ok
}

// SpecialMask8 is jsonSpecialMask8: for the eight bytes of x
// (little-endian), a mask whose lowest set bit is bit 7 of the first byte
// a JSON string does not carry verbatim, or 0.
func SpecialMask8(x uint64) uint64 { return jsonSpecialMask8(x) }

// jsonSpecialMask8 returns, for the eight bytes of x (little-endian), a
// mask whose lowest set bit is bit 7 of the first byte that jsonPlain does
// not carry verbatim ('"', '\\', a control character or a non-ASCII byte),
// or 0 when there is none. Bits above the lowest may be spurious (borrows);
// only the lowest is meaningful. jsonSpecial8(x) is jsonSpecialMask8(x) != 0.
func jsonSpecialMask8(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	low := x - 0x20*ones
	quote := (x ^ '"'*ones) - ones
	bslash := (x ^ '\\'*ones) - ones
	return (x | low | quote | bslash) & highs
}
