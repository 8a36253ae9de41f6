package jcs

import (
	"encoding/json"
	"errors"
	"math"
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

func TestGoPlanMatchesMarshalPath(t *testing.T) {
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
}

// TestGoPlanIsSafeForConcurrentFirstUse builds the plan of a fresh
// recursive type from several goroutines at once (run with -race).
func TestGoPlanIsSafeForConcurrentFirstUse(t *testing.T) {
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
