package jcs

// The Go-value fast path of Sum (ctoken.ArgsFingerprint): one encoding
// plan per type, built once by reflection, that writes the RFC 8785
// canonical form of a value directly (struct fields already in canonical
// order) instead of marshalling with encoding/json and canonicalizing the
// result.
//
// A plan covers only what it reproduces exactly: booleans, integers,
// floats, strings, structs without embedded fields, maps with string or
// integer keys, slices, arrays, pointers and interfaces, with encoding/json's
// field names, "-", omitempty and ",string" rules. Anything else — a type
// with a MarshalJSON or MarshalText method, json.Number, an embedded field,
// omitzero, two fields of one name, a value the plan would have to refuse
// or cannot write (invalid UTF-8, an inexact number, NaN, nesting past
// MaxJSONDepth) — makes the plan give up, and Sum takes the
// plain path (json.Marshal, then Canonical), which decides and reports
// as it always has. So where the plan answers, it answers what the plain
// path would (FuzzArgsFingerprintGoPlan checks the pair).

import (
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// goEncoder appends the canonical form of v to out. depth is the nesting
// of v's parent (pointers and interfaces count too, so that every cycle
// ends). It reports false when the plan gives up; out is then garbage.
type goEncoder func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool)

// goPlan is the encoder of one type.
type goPlan struct {
	enc goEncoder
	// never marks a type the plan covers no value of: Sum goes straight
	// to the plain path.
	never bool
}

// goPlans caches a *goPlan per reflect.Type, as encoding/json caches its
// encoders. Entries are immutable once stored.
var goPlans sync.Map

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	numberType        = reflect.TypeFor[json.Number]()
)

// giveUp is the encoder of everything a plan does not cover.
func giveUp(*jcsParser, []byte, reflect.Value, int) ([]byte, bool) { return nil, false }

var neverPlan = &goPlan{enc: giveUp, never: true}

// fingerprintGoValue returns the fingerprint of args by its type's plan,
// or false when the plan does not cover args.
func fingerprintGoValue(args any) (Fingerprint, bool) {
	if args == nil {
		return Fingerprint{}, false
	}
	plan := goPlanFor(reflect.TypeOf(args))
	if plan.never {
		return Fingerprint{}, false
	}
	p := jcsScratch.Get().(*jcsParser)
	defer p.release()
	out, ok := plan.enc(p, p.out[:0], reflect.ValueOf(args), 0)
	if !ok {
		return Fingerprint{}, false
	}
	p.out = out
	return sha256.Sum256(out), true
}

// goPlanFor returns the plan of t, building it on first use. A recursive
// type refers to itself through a placeholder that waits for the plan
// being built, as encoding/json's typeEncoder does.
func goPlanFor(t reflect.Type) *goPlan {
	if plan, ok := goPlans.Load(t); ok {
		return plan.(*goPlan)
	}
	var (
		wg   sync.WaitGroup
		real *goPlan
	)
	wg.Add(1)
	placeholder := &goPlan{enc: func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
		wg.Wait()
		return real.enc(p, out, v, depth)
	}}
	if plan, loaded := goPlans.LoadOrStore(t, placeholder); loaded {
		return plan.(*goPlan)
	}
	real = newGoPlan(t)
	wg.Done()
	goPlans.Store(t, real)
	return real
}

// hasMarshaler reports whether encoding/json could call a MarshalJSON or
// MarshalText method for a value of type t (with a pointer receiver when
// the value is addressable).
func hasMarshaler(t reflect.Type) bool {
	pt := t
	if t.Kind() != reflect.Pointer {
		pt = reflect.PointerTo(t)
	}
	return t.Implements(marshalerType) || t.Implements(textMarshalerType) ||
		pt.Implements(marshalerType) || pt.Implements(textMarshalerType)
}

func newGoPlan(t reflect.Type) *goPlan {
	if hasMarshaler(t) || t == numberType {
		return neverPlan
	}
	switch t.Kind() {
	case reflect.Bool:
		return &goPlan{enc: encodeBool}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &goPlan{enc: encodeInt}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &goPlan{enc: encodeUint}
	case reflect.Float32:
		return &goPlan{enc: encodeFloat32}
	case reflect.Float64:
		return &goPlan{enc: encodeFloat64}
	case reflect.String:
		return &goPlan{enc: encodeString}
	case reflect.Interface:
		return &goPlan{enc: encodeInterface}
	case reflect.Pointer:
		return newPointerPlan(t)
	case reflect.Struct:
		return newStructPlan(t)
	case reflect.Map:
		return newMapPlan(t)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !hasMarshaler(t.Elem()) {
			return &goPlan{enc: encodeBytes}
		}
		return newArrayPlan(t)
	case reflect.Array:
		return newArrayPlan(t)
	}
	return neverPlan // chan, func, complex, unsafe.Pointer: json.Marshal refuses
}

func encodeBool(_ *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
	if v.Bool() {
		return append(out, "true"...), true
	}
	return append(out, "false"...), true
}

// exactInt bounds the integers whose decimal form is their canonical form:
// every integer of magnitude up to 2^53 is a double, which ECMAScript
// prints as its digits.
const exactInt = 1 << 53

func encodeInt(p *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
	x := v.Int()
	if -exactInt <= x && x <= exactInt {
		return strconv.AppendInt(out, x, 10), true
	}
	p.str = strconv.AppendInt(p.str[:0], x, 10)
	return p.numberLiteral(out, p.str)
}

func encodeUint(p *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
	x := v.Uint()
	if x <= exactInt {
		return strconv.AppendUint(out, x, 10), true
	}
	p.str = strconv.AppendUint(p.str[:0], x, 10)
	return p.numberLiteral(out, p.str)
}

// appendJSONFloat appends f as encoding/json writes a float of the given
// bit size, or reports false for NaN and infinities, which it refuses.
func appendJSONFloat(b []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// encoding/json cleans up e-09 to e-9.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

func encodeFloat(p *jcsParser, out []byte, f float64, bits int) ([]byte, bool) {
	var ok bool
	if p.str, ok = appendJSONFloat(p.str[:0], f, bits); !ok {
		return nil, false
	}
	return p.numberLiteral(out, p.str)
}

func encodeFloat32(p *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
	return encodeFloat(p, out, v.Float(), 32)
}

func encodeFloat64(p *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
	return encodeFloat(p, out, v.Float(), 64)
}

// numberLiteral appends the canonical form of the JSON number lit, or
// reports false if Canonical would refuse it.
func (p *jcsParser) numberLiteral(out, lit []byte) ([]byte, bool) {
	p.in, p.pos = lit, 0
	out, err := p.number(out)
	ok := err == nil && p.pos == len(lit)
	p.in, p.pos = nil, 0
	return out, ok
}

func encodeString(_ *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
	return appendGoString(out, v.String())
}

// appendGoString appends s as a canonical JSON string, or reports false
// if s is not valid UTF-8 (encoding/json would write U+FFFD for it, which
// Sum refuses).
func appendGoString(out []byte, s string) ([]byte, bool) {
	out = append(out, '"')
	start, i := 0, 0
	for i < len(s) {
		for i+8 <= len(s) && !jsonSpecial8(uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
			uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		switch {
		case jsonPlain[c]:
			i++
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			i += size
		default: // '"', '\\' or a control character
			out = appendJCSEscape(append(out, s[start:i]...), c)
			i++
			start = i
		}
	}
	out = append(out, s[start:]...)
	return append(out, '"'), true
}

func encodeInterface(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
	if v.IsNil() {
		return append(out, "null"...), true
	}
	if depth++; depth > MaxJSONDepth {
		return nil, false
	}
	e := v.Elem()
	return goPlanFor(e.Type()).enc(p, out, e, depth)
}

func newPointerPlan(t reflect.Type) *goPlan {
	elem := goPlanFor(t.Elem())
	if elem.never {
		return neverPlan // a nil pointer alone would be covered: not worth a plan
	}
	enc := elem.enc
	return &goPlan{enc: func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
		if v.IsNil() {
			return append(out, "null"...), true
		}
		if depth++; depth > MaxJSONDepth {
			return nil, false
		}
		return enc(p, out, v.Elem(), depth)
	}}
}

// encodeBytes writes a byte slice as encoding/json does: standard base64
// with padding, whose characters need no escape.
func encodeBytes(_ *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
	if v.IsNil() {
		return append(out, "null"...), true
	}
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, v.Bytes())
	return append(out, '"'), true
}

func newArrayPlan(t reflect.Type) *goPlan {
	elem := goPlanFor(t.Elem())
	if elem.never && t.Kind() == reflect.Array && t.Len() > 0 {
		return neverPlan
	}
	enc, isSlice := elem.enc, t.Kind() == reflect.Slice
	return &goPlan{enc: func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
		if isSlice && v.IsNil() {
			return append(out, "null"...), true
		}
		if depth++; depth > MaxJSONDepth {
			return nil, false
		}
		out = append(out, '[')
		n := v.Len()
		for i := range n {
			if i > 0 {
				out = append(out, ',')
			}
			var ok bool
			if out, ok = enc(p, out, v.Index(i), depth); !ok {
				return nil, false
			}
		}
		return append(out, ']'), true
	}}
}

var (
	mapStringAnyType    = reflect.TypeFor[map[string]any]()
	mapStringStringType = reflect.TypeFor[map[string]string]()
)

func newMapPlan(t reflect.Type) *goPlan {
	// The two commonest argument maps, iterated without reflection.
	switch t {
	case mapStringAnyType:
		return &goPlan{enc: func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
			if v.IsNil() {
				return append(out, "null"...), true
			}
			return encodeStringMap(p, out, v.Interface().(map[string]any), depth+1, encodeAny)
		}}
	case mapStringStringType:
		return &goPlan{enc: func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
			if v.IsNil() {
				return append(out, "null"...), true
			}
			return encodeStringMap(p, out, v.Interface().(map[string]string), depth+1, encodeNativeString)
		}}
	}
	kt := t.Key()
	kind := kt.Kind()
	switch kind {
	case reflect.String:
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if kt.Implements(textMarshalerType) {
			return neverPlan // encoding/json names the member by MarshalText
		}
	default:
		return neverPlan
	}
	elem := goPlanFor(t.Elem())
	enc, et := elem.enc, t.Elem()
	return &goPlan{enc: func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
		if v.IsNil() {
			return append(out, "null"...), true
		}
		if depth++; depth > MaxJSONDepth {
			return nil, false
		}
		out = append(out, '{')
		if v.Len() == 0 {
			return append(out, '}'), true
		}
		keysBase, membersBase := len(p.keys), len(p.members)
		defer func() { p.keys, p.members = p.keys[:keysBase], p.members[:membersBase] }()
		// Members are written back to back: sortMembers rewrites the
		// body from their spans, with the commas, in canonical order.
		body := len(out)
		key, val := reflect.New(kt).Elem(), reflect.New(et).Elem()
		it := v.MapRange()
		for it.Next() {
			key.SetIterKey(it)
			val.SetIterValue(it)
			nameAt := len(p.keys)
			switch kind {
			case reflect.String:
				s := key.String()
				if !utf8.ValidString(s) {
					return nil, false
				}
				p.keys = append(p.keys, s...)
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				p.keys = strconv.AppendInt(p.keys, key.Int(), 10)
			default:
				p.keys = strconv.AppendUint(p.keys, key.Uint(), 10)
			}
			m := jcsMember{nameAt: nameAt, nameEnd: len(p.keys), start: len(out)}
			out = appendJCSString(out, p.keys[nameAt:m.nameEnd])
			out = append(out, ':')
			var ok bool
			if out, ok = enc(p, out, val, depth); !ok {
				return nil, false
			}
			m.end = len(out)
			p.members = append(p.members, m)
		}
		out, err := p.sortMembers(out, body, membersBase)
		if err != nil {
			return nil, false
		}
		return append(out, '}'), true
	}}
}

// encodeStringMap writes m, an object at the given depth, with enc
// writing each value.
func encodeStringMap[V any](p *jcsParser, out []byte, m map[string]V, depth int, enc func(*jcsParser, []byte, V, int) ([]byte, bool)) ([]byte, bool) {
	if depth > MaxJSONDepth {
		return nil, false
	}
	out = append(out, '{')
	if len(m) == 0 {
		return append(out, '}'), true
	}
	keysBase, membersBase := len(p.keys), len(p.members)
	defer func() { p.keys, p.members = p.keys[:keysBase], p.members[:membersBase] }()
	body := len(out) // members back to back, as in newMapPlan
	for k, e := range m {
		if !utf8.ValidString(k) {
			return nil, false
		}
		nameAt := len(p.keys)
		p.keys = append(p.keys, k...)
		mem := jcsMember{nameAt: nameAt, nameEnd: len(p.keys), start: len(out)}
		out = appendJCSString(out, k)
		out = append(out, ':')
		var ok bool
		if out, ok = enc(p, out, e, depth); !ok {
			return nil, false
		}
		mem.end = len(out)
		p.members = append(p.members, mem)
	}
	out, err := p.sortMembers(out, body, membersBase)
	if err != nil {
		return nil, false
	}
	return append(out, '}'), true
}

// encodeAny writes e, a value of a map[string]any in an object at depth,
// as encodeInterface does.
func encodeAny(p *jcsParser, out []byte, e any, depth int) ([]byte, bool) {
	if e == nil {
		return append(out, "null"...), true
	}
	if depth++; depth > MaxJSONDepth {
		return nil, false
	}
	return goPlanFor(reflect.TypeOf(e)).enc(p, out, reflect.ValueOf(e), depth)
}

func encodeNativeString(_ *jcsParser, out []byte, s string, _ int) ([]byte, bool) {
	return appendGoString(out, s)
}

// goField is one member of a struct plan.
type goField struct {
	index     int
	member    string // the canonical name and colon: "name":
	name      string
	enc       goEncoder
	omitEmpty bool
}

func newStructPlan(t reflect.Type) *goPlan {
	var fields []goField
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return neverPlan // embedded fields: encoding/json's promotion rules
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !isValidTag(name) {
			name = ""
		}
		if name == "" {
			name = sf.Name
		}
		if tagOption(opts, "omitzero") {
			return neverPlan
		}
		f := goField{index: i, name: name, omitEmpty: tagOption(opts, "omitempty")}
		f.member = string(appendJCSString(nil, name)) + ":"
		if tagOption(opts, "string") && quotable(sf.Type) {
			enc := quotedEncoder(sf.Type)
			if enc == nil {
				return neverPlan
			}
			f.enc = enc
		} else {
			plan := goPlanFor(sf.Type)
			if plan.never && !f.omitEmpty {
				switch sf.Type.Kind() {
				case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map:
				default:
					return neverPlan // every value of t reaches the plain path
				}
			}
			f.enc = plan.enc
		}
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b goField) int { return compareUTF16([]byte(a.name), []byte(b.name)) })
	for i := 1; i < len(fields); i++ {
		if fields[i-1].name == fields[i].name {
			return neverPlan // encoding/json's dominant-field rules
		}
	}
	return &goPlan{enc: func(p *jcsParser, out []byte, v reflect.Value, depth int) ([]byte, bool) {
		if depth++; depth > MaxJSONDepth {
			return nil, false
		}
		out = append(out, '{')
		first := true
		for i := range fields {
			f := &fields[i]
			fv := v.Field(f.index)
			if f.omitEmpty && isEmptyValue(fv) {
				continue
			}
			if !first {
				out = append(out, ',')
			}
			first = false
			out = append(out, f.member...)
			var ok bool
			if out, ok = f.enc(p, out, fv, depth); !ok {
				return nil, false
			}
		}
		return append(out, '}'), true
	}}
}

// quotable reports whether encoding/json applies a ",string" option to a
// field of type t.
func quotable(t reflect.Type) bool {
	if t.Name() == "" && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	}
	return false
}

// quotedEncoder returns the encoder of a ",string" field of type t, whose
// value encoding/json writes inside a JSON string, or nil where the plan
// does not cover it (strings, pointers, types with marshalers).
func quotedEncoder(t reflect.Type) goEncoder {
	if hasMarshaler(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return func(_ *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
			if v.Bool() {
				return append(out, `"true"`...), true
			}
			return append(out, `"false"`...), true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(_ *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
			out = strconv.AppendInt(append(out, '"'), v.Int(), 10)
			return append(out, '"'), true
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(_ *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
			out = strconv.AppendUint(append(out, '"'), v.Uint(), 10)
			return append(out, '"'), true
		}
	case reflect.Float32, reflect.Float64:
		bits := t.Bits()
		return func(_ *jcsParser, out []byte, v reflect.Value, _ int) ([]byte, bool) {
			out, ok := appendJSONFloat(append(out, '"'), v.Float(), bits)
			if !ok {
				return nil, false
			}
			return append(out, '"'), true
		}
	}
	return nil
}

// tagOption reports whether the comma-separated options of a json tag
// include name.
func tagOption(opts, name string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == name {
			return true
		}
	}
	return false
}

// isValidTag is encoding/json's test of a tag name; a name failing it is
// ignored in favour of the field's name.
func isValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
			// Backslash and quote are reserved, other punctuation allowed.
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// isEmptyValue is encoding/json's omitempty test.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64,
		reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
