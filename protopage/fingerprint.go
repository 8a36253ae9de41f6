package protopage

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"math"
	"slices"
	"sync"

	"github.com/ctoken/ctoken"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// fingerprintDomain starts every fingerprinted text: it names the encoding
// and its version, so that no other use of SHA-256 in ctoken can produce
// the same input.
const fingerprintDomain = "ctoken/protopage request fingerprint v1\x00"

// MaxDepth is the deepest message nesting the fingerprint walks, the same
// limit protobuf-go's Unmarshal applies by default; a deeper request (only
// a server can build one) is [ErrServer].
const MaxDepth = 10000

// Cardinality bytes of the encoding.
const (
	cardSingular = 1
	cardList     = 2
	cardMap      = 3
)

// flushAt is the size at which the encoder hands its buffer to the hash:
// the encoding is hashed as it is written, so a request whose encoding is
// larger than its wire form (8 bytes for each 1-byte zero of a packed
// list) never has it held whole.
const flushAt = 16 << 10

// maxPooledBuf caps the buffers kept for reuse.
const maxPooledBuf = 64 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPlans bounds the per-Pager cache of field orders; messages of further
// descriptors (say, dynamicpb descriptors built per request) are sorted on
// every call instead.
const maxPlans = 4096

// plan is a message descriptor's fields in field-number order.
type plan struct {
	fields []protoreflect.FieldDescriptor
	// extensible is set when the message declares extension ranges: its
	// populated extensions are found with Range on every call.
	extensible bool
}

func newPlan(md protoreflect.MessageDescriptor) *plan {
	fs := md.Fields()
	p := &plan{fields: make([]protoreflect.FieldDescriptor, fs.Len()), extensible: md.ExtensionRanges().Len() > 0}
	for i := range p.fields {
		p.fields[i] = fs.Get(i)
	}
	slices.SortFunc(p.fields, byNumber)
	return p
}

func byNumber(a, b protoreflect.FieldDescriptor) int { return cmp.Compare(a.Number(), b.Number()) }

// plans caches a [plan] per message descriptor, by identity: two
// descriptors of one full name (dynamicpb) never share a plan.
type plans struct {
	m  sync.Map // protoreflect.MessageDescriptor → *plan
	n  int32    // entries, under mu
	mu sync.Mutex
}

func (ps *plans) get(md protoreflect.MessageDescriptor) *plan {
	if p, ok := ps.m.Load(md); ok {
		return p.(*plan)
	}
	p := newPlan(md)
	ps.mu.Lock()
	if ps.n < maxPlans {
		if _, loaded := ps.m.LoadOrStore(md, p); !loaded {
			ps.n++
		}
	}
	ps.mu.Unlock()
	return p
}

// encoder writes the fingerprint encoding of a message (doc.go, "The
// request fingerprint"). When stream is set, buf is written to the hash h
// (made then: a small request is hashed in one call, without it) whenever
// it reaches flushAt; otherwise buf collects the whole encoding.
type encoder struct {
	buf    []byte
	stream bool
	h      hash.Hash
	plans  *plans
}

// flush hands buf to the hash once it has reached flushAt.
func (e *encoder) flush() {
	if e.stream && len(e.buf) >= flushAt {
		if e.h == nil {
			e.h = sha256.New()
		}
		e.h.Write(e.buf)
		e.buf = e.buf[:0]
	}
}

// write appends b, in pieces of at most flushAt when hashing.
func (e *encoder) write(b []byte) { writeTo(e, b) }

// writeString is write for a string.
func (e *encoder) writeString(s string) { writeTo(e, s) }

func writeTo[S string | []byte](e *encoder, b S) {
	for e.stream && len(b) > flushAt {
		e.buf = append(e.buf, b[:flushAt]...)
		e.flush()
		b = b[flushAt:]
	}
	e.buf = append(e.buf, b...)
	e.flush()
}

func (e *encoder) uvarint(v uint64) { e.buf = protowire.AppendVarint(e.buf, v) }
func (e *encoder) u64(v uint64)     { e.buf = binary.BigEndian.AppendUint64(e.buf, v) }

// fingerprint returns the request fingerprint of m, leaving out the
// top-level fields numbered skip1, skip2 and skip3 (0: none).
func (ps *plans) fingerprint(m protoreflect.Message, skip1, skip2, skip3 protoreflect.FieldNumber) (ctoken.Fingerprint, error) {
	bp := bufPool.Get().(*[]byte)
	e := encoder{buf: (*bp)[:0], stream: true, plans: ps}
	err := e.request(m, skip1, skip2, skip3)
	var fp ctoken.Fingerprint
	switch {
	case err != nil:
	case e.h == nil:
		fp = sha256.Sum256(e.buf)
	default:
		e.h.Write(e.buf)
		copy(fp[:], e.h.Sum(nil)) // fp[:0] would move fp to the heap on every call
	}
	if cap(e.buf) <= maxPooledBuf {
		*bp = e.buf[:0]
		bufPool.Put(bp)
	}
	return fp, err
}

// request writes the whole input: the domain, the message's full name
// and M(m) without the fields numbered skip1, skip2 and skip3.
func (e *encoder) request(m protoreflect.Message, skip1, skip2, skip3 protoreflect.FieldNumber) error {
	e.buf = append(e.buf, fingerprintDomain...)
	name := m.Descriptor().FullName()
	e.uvarint(uint64(len(name)))
	e.writeString(string(name))
	return e.message(m, 0, skip1, skip2, skip3)
}

var (
	errTooDeep          = fault("request nested deeper than protopage.MaxDepth")
	errUnknownMalformed = fault("request carries malformed unknown fields")
)

// message writes M(m): its populated fields in field-number order, the end
// marker 0, then its unknown fields. Fields numbered skip1, skip2 or skip3
// are left out (the page fields, at the top level only; 0 elsewhere).
func (e *encoder) message(m protoreflect.Message, depth int, skip1, skip2, skip3 protoreflect.FieldNumber) error {
	if depth > MaxDepth {
		return errTooDeep
	}
	p := e.plans.get(m.Descriptor())
	fields := p.fields
	if p.extensible {
		fields = withExtensions(m, fields)
	}
	for _, fd := range fields {
		if n := fd.Number(); n == skip1 || n == skip2 || n == skip3 || !m.Has(fd) {
			continue
		}
		if err := e.field(fd, m.Get(fd), depth); err != nil {
			return err
		}
	}
	e.buf = append(e.buf, 0)
	return e.unknown(m.GetUnknown())
}

// withExtensions returns fields merged with m's populated extensions, in
// field-number order.
func withExtensions(m protoreflect.Message, fields []protoreflect.FieldDescriptor) []protoreflect.FieldDescriptor {
	var ext []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.IsExtension() {
			ext = append(ext, fd)
		}
		return true
	})
	if len(ext) == 0 {
		return fields
	}
	all := append(slices.Clip(fields), ext...)
	slices.SortFunc(all, byNumber)
	return all
}

// field writes F(f): number, cardinality, kind(s), value(s).
func (e *encoder) field(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) error {
	e.uvarint(uint64(fd.Number()))
	switch {
	case fd.IsMap():
		kd, vd := fd.MapKey(), fd.MapValue()
		e.buf = append(e.buf, cardMap, byte(kd.Kind()), byte(vd.Kind()))
		mp := v.Map()
		e.uvarint(uint64(mp.Len()))
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return compareKeys(kd.Kind(), a, b) })
		for _, k := range keys {
			if err := e.value(kd, k.Value(), depth); err != nil {
				return err
			}
			if err := e.value(vd, mp.Get(k), depth); err != nil {
				return err
			}
		}
	case fd.IsList():
		e.buf = append(e.buf, cardList, byte(fd.Kind()))
		l := v.List()
		e.uvarint(uint64(l.Len()))
		for i := range l.Len() {
			if err := e.value(fd, l.Get(i), depth); err != nil {
				return err
			}
		}
	default:
		e.buf = append(e.buf, cardSingular, byte(fd.Kind()))
		return e.value(fd, v, depth)
	}
	return nil
}

// compareKeys orders map keys by value: false before true, integers
// numerically, strings bytewise.
func compareKeys(k protoreflect.Kind, a, b protoreflect.MapKey) int {
	switch k {
	case protoreflect.BoolKind:
		x, y := a.Bool(), b.Bool()
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case protoreflect.StringKind:
		return cmp.Compare(a.String(), b.String())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return cmp.Compare(a.Uint(), b.Uint())
	}
	return cmp.Compare(a.Int(), b.Int())
}

// value writes E(v) for a value of fd's kind.
func (e *encoder) value(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) error {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if v.Bool() {
			e.buf = append(e.buf, 1)
		} else {
			e.buf = append(e.buf, 0)
		}
	case protoreflect.EnumKind:
		e.u64(uint64(int64(v.Enum())))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		e.u64(uint64(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		e.u64(v.Uint())
	case protoreflect.FloatKind:
		e.buf = binary.BigEndian.AppendUint32(e.buf, math.Float32bits(float32(v.Float())))
	case protoreflect.DoubleKind:
		e.u64(math.Float64bits(v.Float()))
	case protoreflect.StringKind:
		s := v.String()
		e.uvarint(uint64(len(s)))
		e.writeString(s)
	case protoreflect.BytesKind:
		b := v.Bytes()
		e.uvarint(uint64(len(b)))
		e.write(b)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return e.message(v.Message(), depth+1, 0, 0, 0)
	}
	e.flush()
	return nil
}

// unknown writes U(raw): the length of the unknown fields, then their
// records (tag and value, as received) stably sorted by field number, so
// that the order of unknown fields of different numbers does not matter
// and the order within one number (a repeated field's elements) does.
//
// Fields received in order (the usual case) are written as they are. Out
// of order, the sort moves runs (consecutive records of one number), each
// known by its 4-byte offset, so the memory it takes is at most twice the
// size of the unknown fields (a record is 2 bytes or more).
func (e *encoder) unknown(raw protoreflect.RawFields) error {
	e.uvarint(uint64(len(raw)))
	if len(raw) == 0 {
		return nil
	}
	if uint64(len(raw)) > math.MaxUint32 {
		return errUnknownMalformed // protobuf messages are under 2 GiB
	}
	// One pass: check the records, count the runs, see if they are sorted.
	runs, sorted := 0, true
	var last protowire.Number
	for b := raw; len(b) > 0; {
		num, n := consumeRecord(b)
		if n < 0 {
			return errUnknownMalformed
		}
		if runs == 0 || num != last {
			if runs > 0 && num < last {
				sorted = false
			}
			runs++
			last = num
		}
		b = b[n:]
	}
	if sorted {
		e.write(raw)
		return nil
	}
	starts := make([]uint32, 0, runs)
	for off := 0; off < len(raw); {
		num, n := consumeRecord(raw[off:])
		if len(starts) == 0 || num != last {
			starts = append(starts, uint32(off))
			last = num
		}
		off += n
	}
	// Offsets are distinct, so ordering ties by offset makes the sort stable.
	slices.SortFunc(starts, func(a, b uint32) int {
		na, _, _ := protowire.ConsumeTag(raw[a:])
		nb, _, _ := protowire.ConsumeTag(raw[b:])
		if c := cmp.Compare(na, nb); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, start := range starts {
		run := raw[start:]
		num, end := consumeRecord(run)
		for end < len(run) {
			next, n := consumeRecord(run[end:])
			if next != num {
				break
			}
			end += n
		}
		e.write(run[:end])
	}
	return nil
}

// consumeRecord returns the field number and length of the unknown field
// record (tag and value) b starts with, or a negative length.
func consumeRecord(b []byte) (protowire.Number, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, n
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return 0, m
	}
	return num, n + m
}
