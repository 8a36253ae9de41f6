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
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/big"
	"math/bits"
	"sync"

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

// SumText is [Sum] of JSON text held in a []byte, without boxing the
// slice into Sum's any parameter (an allocation on every call): the
// entry point of ctoken.ArgsFingerprint for []byte and json.RawMessage.
func SumText(text []byte) (Fingerprint, error) { return fingerprintText(text, false) }

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
		if i+9 <= len(in) {
			// A string of up to 7 bytes of ASCII with no escape (tags,
			// enumerations, identifiers), found with one load as a
			// member name is below: its text is its canonical form,
			// copied without the call.
			x := binary.LittleEndian.Uint64(in[i+1:])
			if stop := stringStopMask8(x); stop != 0 {
				n := bits.TrailingZeros64(stop) >> 3
				if in[i+1+n] == '"' && x&(1<<(8*n)-1)&0x8080808080808080 == 0 {
					out = append(out, in[i:i+2+n]...)
					i += 2 + n
					break
				}
			}
		}
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
			if j-i < 15 {
				// The integer part ends at j, before a fraction or an
				// exponent: number goes on from there.
				var err error
				if out, err = p.numberFrom(out, i, i, j); err != nil {
					return nil, err
				}
				i = p.pos
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
		f.membersBase, f.keysBase = len(p.members), len(p.keys)
		goto member
	default:
		// A literal: true and null are told from each other and from
		// anything else with one 4-byte load and no branch between the
		// two (a product of two differences under 2^32 is 0 only when
		// one is), which values of random kinds would mispredict.
		if i+4 > len(in) {
			return nil, errArgsSyntax
		}
		w := binary.LittleEndian.Uint32(in[i:])
		if uint64(w^litTrue)*uint64(w^litNull) == 0 {
			out = binary.LittleEndian.AppendUint32(out, w)
			i += 4
			break
		}
		if w != litFals || i+5 > len(in) || in[i+4] != 'e' {
			return nil, errArgsSyntax
		}
		out = append(out, "false"...)
		i += 5
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
		if !f.object {
			if c == ',' {
				out = append(out, ',')
				i = jsontext.SkipSpace(in, i)
				goto value
			}
			if c != ']' {
				return nil, errArgsSyntax
			}
			out = append(out, ']')
			stack = stack[:len(stack)-1]
			goto after
		}
		p.members[len(p.members)-1].end = len(out)
		if c == ',' {
			out = append(out, ',')
			i = jsontext.SkipSpace(in, i)
			goto member
		}
		if c != '}' {
			return nil, errArgsSyntax
		}
		if !f.sorted {
			var ok bool
			if out, ok = p.reorderMembers(out, f.body, f.membersBase); !ok {
				return nil, errArgsDuplicate // I-JSON
			}
		}
		p.keys, p.members = p.keys[:f.keysBase], p.members[:f.membersBase]
		out = append(out, '}')
		stack = stack[:len(stack)-1]
		goto after
	}

member:
	{
		if i >= len(in) || in[i] != '"' {
			return nil, errArgsSyntax
		}
		var nameAt, nameEnd int
		var prefix uint64
		inInput := false
		start := len(out)
		if i+9 <= len(in) {
			// plainName's first case inline, for ASCII: a name of up
			// to 7 bytes, found with one load that also gives its sort
			// key prefix. With plainName it took deep-objects from 4.61×
			// SHA-256 to 3.85× and wide-sorted from 3.71× to 3.19×
			// (BenchmarkArgsFingerprintShapes, alternating runs); the
			// inline case alone, 4.09× to 3.85× and 3.29× to 3.19×.
			x := binary.LittleEndian.Uint64(in[i+1:])
			if stop := stringStopMask8(x); stop != 0 {
				n := bits.TrailingZeros64(stop) >> 3
				if in[i+1+n] != '"' {
					goto escaped // an escape or a control character
				}
				x &= 1<<(8*n) - 1
				prefix = bits.ReverseBytes64(x)
				if x&0x8080808080808080 != 0 {
					// Not ASCII: validated and ranked here, as
					// plainName would.
					if !validName(in[i+1 : i+1+n]) {
						goto escaped // stringInto reports it
					}
					prefix = utf16Rank(prefix)
				}
				nameAt, nameEnd, inInput = i+1, i+1+n, true
			}
		}
		if !inInput {
			// The common name: no escape (plainName).
			var n int
			if n, prefix, inInput = plainName(in, i); inInput {
				nameAt, nameEnd = i+1, i+1+n
			}
		}
		if inInput {
			// A name as written; when the colon follows it, both are
			// copied at once.
			if end := nameEnd + 1; end < len(in) && in[end] == ':' {
				out = append(out, in[i:end+1]...)
				i = jsontext.SkipSpace(in, end+1)
				goto colon
			}
			out = append(out, in[i:nameEnd+1]...)
			i = nameEnd + 1
			goto named
		}
		if i+17 <= len(in) {
			goto escaped // plainName reads every plain name but near the end
		}
		p.pos = i
		if end := p.plainString(); end >= 0 {
			nameAt, nameEnd, inInput = i+1, end-1, true
			out = append(out, in[i:end]...)
			i = end
			goto keyed
		}
	escaped:
		{
			// The canonical form written as appendString writes a
			// value's; where it keeps no escape it is the name
			// itself, copied to p.keys. Against unescaping with
			// stringInto and escaping again with appendJCSString it
			// took wide-unicode-names-u-escaped from 5.24× SHA-256 to
			// 4.96× (medians of 5 alternating runs).
			p.pos = i
			at := len(out)
			if o, ok := p.appendString(out); ok && bytes.IndexByte(o[at+1:len(o)-1], '\\') < 0 {
				out = o
				nameAt = len(p.keys)
				p.keys = append(p.keys, out[at+1:len(out)-1]...)
				nameEnd = len(p.keys)
				i = p.pos
				goto keyed
			}
			// A name whose canonical form keeps an escape, or a
			// refused one (stringInto names the fault as it always
			// has).
			p.pos = i
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
	keyed:
		if inInput {
			prefix = nameKey(in, nameAt, nameEnd, 0).prefix
		} else {
			// The name ends p.keys: nameKey may load its 8 bytes
			// from the capacity past it (and clears those past the
			// name) instead of reading the name a byte at a time.
			prefix = nameKey(p.keys[:cap(p.keys)], nameAt, nameEnd, 0).prefix
		}
	named:
		i = jsontext.SkipSpace(in, i)
		if i >= len(in) || in[i] != ':' {
			return nil, errArgsSyntax
		}
		i++
		i = jsontext.SkipSpace(in, i)
		out = append(out, ':')
	colon:
		if n := len(p.members); n < cap(p.members) {
			p.members = p.members[:n+1]
		} else {
			p.members = append(p.members, jcsMember{})
		}
		last := len(p.members) - 1
		m := &p.members[last]
		m.nameAt, m.nameEnd, m.start, m.inInput, m.prefix = nameAt, nameEnd, start, inInput, prefix
		if f := &stack[len(stack)-1]; f.sorted && last > f.membersBase {
			// Still in canonical order, if this name follows the last.
			a := &p.members[last-1]
			if a.prefix != prefix {
				f.sorted = a.prefix < prefix
			} else if cmp := compareUTF16(p.name(a), p.name(m)); cmp == 0 {
				return nil, errArgsDuplicate // I-JSON
			} else {
				f.sorted = cmp < 0
			}
		}
		goto value
	}
}

// The literals' first four bytes, little-endian.
const (
	litTrue = 't' | 'r'<<8 | 'u'<<16 | 'e'<<24
	litNull = 'n' | 'u'<<8 | 'l'<<16 | 'l'<<24
	litFals = 'f' | 'a'<<8 | 'l'<<16 | 's'<<24
)

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
	order   []jcsSortKey // sort keys of an object's members being reordered, reused
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
	// are the lengths of p.members and p.keys when it opened, and sorted
	// reports that its members have come in canonical order so far.
	sorted                bool
	body                  int
	membersBase, keysBase int
}

// jcsMember is one object member: its unescaped name, p.keys[nameAt:nameEnd]
// or, when inInput, p.in[nameAt:nameEnd], and its canonical text
// "name":value, out[start:end]. canonical records prefix, the name's
// sort key prefix (nameKey); the Go value encoders of plan.go leave it
// zero, and sortMembers computes the keys from the names.
type jcsMember struct {
	nameAt, nameEnd int
	start, end      int
	prefix          uint64
	inInput         bool
}
