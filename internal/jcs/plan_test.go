package jcs

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Tests of the Go-value fast path (plan.go) against the plain
// path, fingerprintMarshalled: json.Marshal, then CanonicalJSON.

type planInner struct {
	Z    string     `json:"z"`
	A    float64    `json:"a,omitempty"`
	Next *planInner `json:"next,omitempty"`
}

// planZoo exercises every rule the plan reproduces: tag names (valid,
// invalid, "-", "-,", empty), omitempty, ",string" on numbers and
// booleans, every number kind, []byte and [N]byte, maps with string and
// integer keys, pointers, interfaces, nested structs, unexported fields.
type planZoo struct {
	Str     string `json:"str"`
	Unicode string `json:"名前"`
	Punct   string `json:"a<b>&c"`
	//lint:ignore SA5008 a tag encoding/json must read as it does
	BadTag string `json:"bad\"name"`
	Skip   string `json:"-"`
	//lint:ignore SA5008 a tag encoding/json must read as it does
	Dash    string  `json:"-,"`
	Omit    string  `json:",omitempty"`
	Untaged string  // named by the field
	I       int64   `json:"i"`
	I8      int8    `json:"i8"`
	U       uint64  `json:"u"`
	U16     uint16  `json:"u16,omitempty"`
	F       float64 `json:"f"`
	F32     float32 `json:"f32"`
	B       bool    `json:"b,omitempty"`
	QI      int64   `json:"qi,string"`
	QU      uint32  `json:"qu,omitempty,string"`
	QF      float64 `json:"qf,string"`
	QF32    float32 `json:"qf32,string"`
	QB      bool    `json:"qb,string"`
	//lint:ignore SA5008 a tag encoding/json must read as it does
	Ignored []int             `json:"ign,string"` // ",string" does not apply
	Bytes   []byte            `json:"bytes"`
	Arr     [3]byte           `json:"arr"`
	Strs    []string          `json:"strs"`
	M       map[string]any    `json:"m"`
	MI      map[int]string    `json:"mi"`
	MU      map[uint8]bool    `json:"mu,omitempty"`
	P       *planInner        `json:"p"`
	PI      *int              `json:"pi,omitempty"`
	Any     any               `json:"any"`
	Nested  []planInner       `json:"nested"`
	MS      map[string]string `json:"ms,omitempty"`
	unexp   string
}

// Types the plan leaves to the plain path, each for a rule of
// encoding/json it does not reproduce.
type (
	planEmbedded struct {
		planInner
		X int `json:"x"`
	}
	planTime struct {
		At time.Time `json:"at"`
	}
	planNumber struct {
		N json.Number `json:"n"`
	}
	planRaw struct {
		R json.RawMessage `json:"r"`
	}
	planOmitZero struct {
		X int `json:"x,omitzero"`
	}
	planDuplicate struct {
		X int
		Y int `json:"X"` // wins over X in encoding/json
	}
	planQuotedString struct {
		S string `json:"s,string"`
	}
	planQuotedPointer struct {
		P *int `json:"p,string"`
	}
	planTextByte  byte
	planTextKey   int
	planValueText struct{ V int }
	planPtrText   struct{ V int }
)

func (b planTextByte) MarshalText() ([]byte, error) { return []byte{'b', byte(b)}, nil }
func (k planTextKey) MarshalText() ([]byte, error)  { return []byte("key"), nil }
func (v planValueText) MarshalText() ([]byte, error) {
	return []byte("value"), nil
}
func (v *planPtrText) MarshalJSON() ([]byte, error) { return []byte(`"pointer"`), nil }

// planArgMap is a named map type, which the plan reaches by reflection.
type planArgMap map[string]any

// planCycle is a self-referencing type.
type planCycle struct {
	Next *planCycle `json:"next"`
}

// checkPlanAgrees checks Sum(v) against the plain path, and
// the plan's own answer when it gives one (for a []byte too, which the
// plan encodes as a Go value, base64). It reports whether the plan
// answered.
func checkPlanAgrees(t *testing.T, v any) bool {
	t.Helper()
	want, wantErr := fingerprintMarshalled(v)
	got, err := Sum(v)
	switch v.(type) {
	case []byte, json.RawMessage: // JSON text to ArgsFingerprint, a Go value here
		got, err = want, wantErr
	}
	if (err == nil) != (wantErr == nil) || got != want || (err != nil && (reasonOf(err) != reasonOf(wantErr) || !errors.Is(err, ErrArgsInvalid))) {
		t.Fatalf("%T %+v: ArgsFingerprint = %x, %v; plain path %x, %v", v, v, got, err, want, wantErr)
	}
	fp, ok := fingerprintGoValue(v)
	if ok && (wantErr != nil || fp != want) {
		text, _ := json.Marshal(v)
		canon, _ := Canonical(text)
		t.Fatalf("%T %s: plan answers %x; plain path %x, %v (canonical %s)", v, text, fp, want, wantErr, canon)
	}
	return ok
}

func planZooValue(s string, i int64, u uint64, f float64, b bool) planZoo {
	n := int(i)
	return planZoo{
		Str: s, Unicode: s, Punct: "<&>\u2028", BadTag: s, Skip: "skipped", Dash: s, Omit: s, Untaged: "x",
		I: i, I8: int8(i), U: u, U16: uint16(u), F: f, F32: float32(f), B: b,
		QI: i, QU: uint32(u), QF: f, QF32: float32(f), QB: b, Ignored: []int{n},
		Bytes: []byte(s), Arr: [3]byte{1, 2, 3}, Strs: []string{s, "", "\x00\t\"\\"},
		M:      map[string]any{s: i, "f": f, "nil": nil, "list": []any{u, b, map[string]any{}}},
		MI:     map[int]string{n: s, -1: "minus", 10: "ten", 9: "nine"},
		MU:     map[uint8]bool{uint8(u): b},
		P:      &planInner{Z: s, A: f, Next: &planInner{Z: "end"}},
		PI:     &n,
		Any:    map[string]planInner{"k": {Z: s}},
		Nested: []planInner{{Z: "a"}, {Z: s, A: math.Copysign(0, -1)}},
		unexp:  "hidden",
	}
}

func TestGoPlan(t *testing.T) {
	t.Run("matches marshal path", func(t *testing.T) {
		zoo := planZooValue("héllo <world> \u2028", -42, 7, 0.1, true)
		covered := []any{
			zoo, &zoo, planZoo{}, benchSmall, &benchSmall,
			map[string]any{"a": 1.5, "b": []any{"x", nil, true}, "c": map[string]any{"d": math.Copysign(0, -1)}},
			[]any{1e21, 1e-7, 5e-324, math.MaxFloat64, float32(0.1), float32(16777216)},
			"plain", 1 << 53, -1 << 53, uint64(1 << 53), true, 3.25, []string(nil), map[string]int(nil),
			(*planInner)(nil), []byte("bytes"), [2]bool{true, false},
			planZoo{I: 1e15, U: 1e18, F: 1e300, QI: 1 << 62},                         // 1e18 is exact in its canonical form
			map[string]string{"\u00e9": "", "\U0001F600": "", "\uE000": "", "z": ""}, // UTF-16 order
			planArgMap{"b": 1, "a": planArgMap{"\n": "\x7f"}}, map[string]any{}, map[string]string(nil),
			map[string]any{"x": map[string]string{"b\"": "<", "a\\": "\u2028"}},
		}
		for _, v := range covered {
			if !checkPlanAgrees(t, v) {
				t.Errorf("%T: the plan does not cover it", v)
			}
		}
		n := 1
		cycle := &planCycle{}
		cycle.Next = cycle
		deep, deepMap := any("leaf"), any("leaf")
		for range MaxJSONDepth + 1 {
			deep = []any{deep}
			deepMap = map[string]any{"k": deepMap}
		}
		textMarshalers := []planTextByte{1, 2}
		declined := []any{
			planEmbedded{X: 1}, planTime{}, planNumber{N: "12"}, planRaw{R: json.RawMessage(`{"b":1,"a":2}`)},
			planOmitZero{}, planDuplicate{X: 1, Y: 2}, planQuotedString{S: "s"}, planQuotedPointer{P: &n},
			textMarshalers, map[planTextKey]int{1: 1}, planValueText{}, &planPtrText{}, []planPtrText{{}},
			cycle, deep, deepMap, math.NaN(), math.Inf(-1), make(chan int), complex(1, 2),
			"invalid \xff", map[string]int{"\xfe": 1}, planZoo{Str: "\xc0\xaf"},
			map[string]any{"\xfe": 1}, map[string]string{"k": "\xfe"}, map[string]any{"a": map[string]any{"t": time.Time{}}},
			int64(1<<53 + 1), uint64(math.MaxUint64), planZoo{I: 1234567890123456789},
			[]float64{math.Inf(1)}, planZoo{QF: math.NaN()},
		}
		for _, v := range declined {
			if checkPlanAgrees(t, v) {
				t.Errorf("%T: the plan answers for a value it should leave to the plain path", v)
			}
		}
	})

	// Builds the plan of a fresh
	// recursive type from several goroutines at once (run with -race).
	t.Run("is safe for concurrent first use", func(t *testing.T) {
		type node struct {
			V    int     `json:"v"`
			Kids []*node `json:"kids"`
		}
		v := &node{V: 1, Kids: []*node{{V: 2}, {V: 3, Kids: []*node{{V: 4}}}}}
		want, err := fingerprintMarshalled(v)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				fp, ok := fingerprintGoValue(v)
				if !ok || fp != want {
					errs <- errors.New("plan disagrees with the plain path")
					return
				}
				errs <- nil
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})

	// Pins the spelling of a
	// float in a ",string" field, which the plan writes verbatim inside a JSON
	// string (no number canonicalization applies there): encoding/json's
	// switch to exponent form below 1e-6 and from 1e21, decided on the
	// float32 value for a float32, and its e-07 → e-7 clean-up.
	t.Run("spells quoted floats as encoding/json", func(t *testing.T) {
		type quoted64 struct {
			F float64 `json:"f,string"`
		}
		type quoted32 struct {
			F float32 `json:"f,string"`
		}
		for _, f := range []float64{
			0, math.Copysign(0, -1), 0.5, -123.456,
			1e-7, -1e-7, 1.5e-7, 1e-6, math.Nextafter(1e-6, 0), 9.99e-7,
			1e20, math.Nextafter(1e21, 0), 1e21 - 1e13, 1e21, -1e21, 1.5e21,
			1e-10, 1e-100, 1e100, 5e-324, math.MaxFloat64,
		} {
			checkPlanCovers(t, quoted64{f})
		}
		for _, f := range []float32{
			0, 0.5, -123.456,
			1e-7, -1e-7, 1e-6, math.Nextafter32(1e-6, 0), 1e-10,
			1e20, math.Nextafter32(1e21, 0), 1e21, -1e21, 1e30,
			math.SmallestNonzeroFloat32, math.MaxFloat32,
		} {
			checkPlanCovers(t, quoted32{f})
		}
	})

	// Pins that a Go string whose
	// invalid UTF-8 starts with a byte from 0x80 (a lone continuation byte)
	// up is refused as the plain path refuses it, not written as an escape.
	t.Run("refuses every invalid UTF-8 lead byte", func(t *testing.T) {
		for _, s := range []string{"\x80", "a\x80b", "\xbf", "12345678\x80", "\xc3", "\xed\xa0\x80", "\xf5\x80\x80\x80", "\xff"} {
			for _, v := range []any{s, map[string]string{"k": s}, map[string]int{s: 1}, struct{ S string }{s}} {
				if checkPlanAgrees(t, v) {
					t.Errorf("%T %q: the plan answers for invalid UTF-8", v, s)
				}
				if _, err := Sum(v); reasonOf(err) != reasonOf(errArgsReplaced) {
					t.Errorf("%T %q: ArgsFingerprint error %v, want %v", v, s, err, errArgsReplaced)
				}
			}
		}
	})

	// Pins that the plan covers strings
	// with every length of valid UTF-8 rune, U+FFFD written as itself among
	// them (only an invalid byte makes the plan give up).
	t.Run("writes valid runes itself", func(t *testing.T) {
		for _, s := range []string{"\ufffd", "report\ufffd.pdf", "\u0080", "\u07ff", "\u0800", "\uffff", "\U00010000", "\U0010ffff", "12345678\ufffd"} {
			checkPlanCovers(t, s)
			checkPlanCovers(t, map[string]string{s: s})
		}
	})

	// Pins that a Go string whose
	// plain bytes run in whole 8-byte words up to its end (after nothing, a
	// multi-byte character or an escape) is written in full, with no read
	// past its end.
	t.Run("writes strings ending on a word boundary", func(t *testing.T) {
		for _, s := range []string{"abcdefgh", "abcdefghijklmnop", "éabcdefgh", "\nabcdefgh", "a\"abcdefgh"} {
			checkPlanCovers(t, s)
			checkPlanCovers(t, struct{ S string }{s})
		}
	})

	// Pins how deep the Go-value plan writes
	// before it leaves a value to the plain path: MaxJSONDepth levels of
	// arrays, objects, pointers and interfaces together. For slices, maps and
	// structs that is the plain path's own limit, so the plan answers for
	// every such value CanonicalJSON accepts; one level more and both give up.
	// Pointers and interfaces count too (so every cycle ends), and []any or
	// map[string]any nests two levels per JSON level.
	t.Run("reaches max JSON depth", func(t *testing.T) {
		leaf := reflect.ValueOf(7)
		deepAny := func(n int, wrap func(any) any) any {
			var v any = "leaf"
			for range n {
				v = wrap(v)
			}
			return v
		}
		cases := []struct {
			name            string
			atLimit, beyond any
			plainAccepts    bool // the plain path's answer one level beyond
		}{
			{"typed slices", nest(leaf, MaxJSONDepth, reflect.Slice).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Slice).Interface(), false},
			{"typed maps", nest(leaf, MaxJSONDepth, reflect.Map).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Map).Interface(), false},
			{"structs", nest(leaf, MaxJSONDepth, reflect.Struct).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Struct).Interface(), false},
			{"map[string]string in typed slices",
				nest(reflect.ValueOf(map[string]string{"a": "b"}), MaxJSONDepth-1, reflect.Slice).Interface(),
				nest(reflect.ValueOf(map[string]string{"a": "b"}), MaxJSONDepth, reflect.Slice).Interface(), false},
			{"map[string]any in typed slices",
				nest(reflect.ValueOf(map[string]any{"a": "b"}), MaxJSONDepth-2, reflect.Slice).Interface(),
				nest(reflect.ValueOf(map[string]any{"a": "b"}), MaxJSONDepth-1, reflect.Slice).Interface(), true},
			{"pointers", nest(leaf, MaxJSONDepth, reflect.Pointer).Interface(), nest(leaf, MaxJSONDepth+1, reflect.Pointer).Interface(), true},
			{"[]any", deepAny(MaxJSONDepth/2, func(v any) any { return []any{v} }), deepAny(MaxJSONDepth/2+1, func(v any) any { return []any{v} }), true},
			{"map[string]any", deepAny(MaxJSONDepth/2, func(v any) any { return map[string]any{"k": v} }), deepAny(MaxJSONDepth/2+1, func(v any) any { return map[string]any{"k": v} }), true},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				checkPlanCovers(t, c.atLimit)
				if checkPlanAgrees(t, c.beyond) {
					t.Errorf("the plan answers one level beyond its limit")
				}
				if _, err := fingerprintMarshalled(c.beyond); (err == nil) != c.plainAccepts {
					t.Errorf("plain path one level beyond: %v, want accepted %v", err, c.plainAccepts)
				}
			})
		}
	})

	// Pins that an unexported or "-"
	// field is skipped wherever it stands, with the fields after it written.
	t.Run("skips unexported fields anywhere", func(t *testing.T) {
		type fields struct {
			a int
			B string `json:"b"`
			C int    `json:"-"`
			D bool   `json:"d"`
			e string
			F []int `json:"f"`
		}
		checkPlanCovers(t, fields{a: 1, B: "x", C: 2, D: true, e: "y", F: []int{3}})
	})

	// Pins that a nil slice or map
	// is null, and an empty slice or array [], whatever its element type
	// (encoding/json never looks at the elements, even of a type it refuses):
	// the plan covers these instead of leaving them to the plain path.
	t.Run("writes null for nil slices of any type", func(t *testing.T) {
		for _, v := range []any{[]chan int(nil), [0]chan int{}, []func(){}, map[string]complex64(nil), struct {
			C []chan int        `json:"c"`
			M map[string]func() `json:"m"`
		}{}} {
			checkPlanCovers(t, v)
		}
	})
}

// FuzzArgsFingerprintGoPlan differentially tests the Go-value plan against
// the plain path over values of many types built from the fuzz input,
// including whatever shapes encoding/json decodes raw into.
func FuzzArgsFingerprintGoPlan(f *testing.F) {
	f.Add("report\xff.pdf", int64(1), uint64(2), 0.5, true, []byte(`{"str":"x","m":{"a":[1,2.5,"\u00e9"]}}`))
	f.Add("\u2028<&>\"\\\x01", int64(1234567890123456789), uint64(1<<53), 1e21, false, []byte(`[1e400]`))
	f.Add("é\U0001F600", int64(-1<<63), uint64(1<<64-1), math.Copysign(0, -1), true, []byte(`{"p":{"next":{"z":"\ud83d\ude00"}},"nested":[{"a":1e-7}]}`))
	f.Add("", int64(9007199254740993), uint64(0), 5e-324, false, []byte(`{"mi":{"3":"x","-1":"y"},"qi":"12","f32":3.4e38}`))
	f.Fuzz(func(t *testing.T, s string, i int64, u uint64, fl float64, b bool, raw []byte) {
		zoo := planZooValue(s, i, u, fl, b)
		var decoded any
		_ = json.Unmarshal(raw, &decoded)
		var shaped planZoo
		_ = json.Unmarshal(raw, &shaped)
		values := []any{
			zoo, &zoo, decoded, shaped, &shaped, s, i, u, fl, float32(fl), b, raw,
			[]any{s, i, u, fl, b, decoded}, map[string]any{s: decoded, strings.ToUpper(s): i},
			map[string]string{s: s}, map[int64]float64{i: fl}, map[uint64]string{u: s},
			struct {
				S string  `json:"s,omitempty"`
				F float32 `json:"f,string"`
				A any     `json:"a"`
			}{s, float32(fl), decoded},
		}
		for _, v := range values {
			checkPlanAgrees(t, v)
		}
	})
}

// benchSmallArgs are the arguments of a typical paginated tool call as a
// Go struct, fields in declaration (not canonical) order: the root
// package's benchmarks fingerprint the same value.
type benchSmallArgs struct {
	Query   string            `json:"query"`
	Repo    string            `json:"repo"`
	PerPage int               `json:"per_page"`
	Labels  []string          `json:"labels"`
	Filter  map[string]string `json:"filter"`
}

var benchSmall = benchSmallArgs{
	Query:   "is:open label:bug sort:updated-desc",
	Repo:    "ctoken/ctoken",
	PerPage: 50,
	Labels:  []string{"p1", "backend"},
	Filter:  map[string]string{"state": "open", "author": "octocat"},
}

// checkPlanCovers checks v against the plain path (checkPlanAgrees) and
// that the Go-value plan answers for it.
func checkPlanCovers(t *testing.T, v any) {
	t.Helper()
	if !checkPlanAgrees(t, v) {
		t.Errorf("%T %+v: the plan does not cover it", v, v)
	}
}

// nest wraps v n times: in a slice, a map member "k", a struct field A or
// a pointer, each level a new type built by reflection.
func nest(v reflect.Value, n int, kind reflect.Kind) reflect.Value {
	for range n {
		t := v.Type()
		switch kind {
		case reflect.Slice:
			s := reflect.MakeSlice(reflect.SliceOf(t), 1, 1)
			s.Index(0).Set(v)
			v = s
		case reflect.Map:
			m := reflect.MakeMap(reflect.MapOf(reflect.TypeFor[string](), t))
			m.SetMapIndex(reflect.ValueOf("k"), v)
			v = m
		case reflect.Struct:
			s := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "A", Type: t}})).Elem()
			s.Field(0).Set(v)
			v = s
		case reflect.Pointer:
			p := reflect.New(t)
			p.Elem().Set(v)
			v = p
		}
	}
	return v
}
