package protopage

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
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
// request fingerprint").
type encoder struct {
	buf   []byte
	plans *plans
}

func (e *encoder) uvarint(v uint64) { e.buf = protowire.AppendVarint(e.buf, v) }
func (e *encoder) u64(v uint64)     { e.buf = binary.BigEndian.AppendUint64(e.buf, v) }

// fingerprint returns the request fingerprint of m, leaving out the
// top-level fields numbered skip1 and skip2.
func (ps *plans) fingerprint(m protoreflect.Message, skip1, skip2 protoreflect.FieldNumber) (ctoken.Fingerprint, error) {
	bp := bufPool.Get().(*[]byte)
	e := encoder{buf: append((*bp)[:0], fingerprintDomain...), plans: ps}
	name := m.Descriptor().FullName()
	e.uvarint(uint64(len(name)))
	e.buf = append(e.buf, name...)
	err := e.message(m, 0, skip1, skip2)
	var fp ctoken.Fingerprint
	if err == nil {
		fp = sha256.Sum256(e.buf)
	}
	if cap(e.buf) <= maxPooledBuf {
		*bp = e.buf[:0]
		bufPool.Put(bp)
	}
	return fp, err
}

var (
	errTooDeep          = fault("request nested deeper than protopage.MaxDepth")
	errUnknownMalformed = fault("request carries malformed unknown fields")
)

// message writes M(m): its populated fields in field-number order, the end
// marker 0, then its unknown fields. Fields numbered skip1 or skip2 are
// left out (the page fields, at the top level only; 0 elsewhere).
func (e *encoder) message(m protoreflect.Message, depth int, skip1, skip2 protoreflect.FieldNumber) error {
	if depth > MaxDepth {
		return errTooDeep
	}
	p := e.plans.get(m.Descriptor())
	fields := p.fields
	if p.extensible {
		fields = withExtensions(m, fields)
	}
	for _, fd := range fields {
		if n := fd.Number(); n == skip1 || n == skip2 || !m.Has(fd) {
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
		e.buf = append(e.buf, s...)
	case protoreflect.BytesKind:
		b := v.Bytes()
		e.uvarint(uint64(len(b)))
		e.buf = append(e.buf, b...)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return e.message(v.Message(), depth+1, 0, 0)
	}
	return nil
}

// unknown writes U(raw): the length of the unknown fields, then their
// records (tag and value, as received) stably sorted by field number, so
// that the order of unknown fields of different numbers does not matter
// and the order within one number (a repeated field's elements) does.
func (e *encoder) unknown(raw protoreflect.RawFields) error {
	e.uvarint(uint64(len(raw)))
	if len(raw) == 0 {
		return nil
	}
	type record struct {
		num  protowire.Number
		data []byte
	}
	var recs []record
	sorted := true
	for b := raw; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errUnknownMalformed
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errUnknownMalformed
		}
		if len(recs) > 0 && num < recs[len(recs)-1].num {
			sorted = false
		}
		recs = append(recs, record{num, b[:n+m]})
		b = b[n+m:]
	}
	if sorted {
		e.buf = append(e.buf, raw...)
		return nil
	}
	slices.SortStableFunc(recs, func(a, b record) int { return cmp.Compare(a.num, b.num) })
	for _, r := range recs {
		e.buf = append(e.buf, r.data...)
	}
	return nil
}
