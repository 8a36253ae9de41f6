package ctoken

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCanonicalJSONRFC8785Examples(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{ // RFC 8785 §3.2.2
			"sample",
			`{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{ // RFC 8785 §3.2.3: sorting by UTF-16 code units
			"sorting",
			`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{"nested sort", `{"b":{"z":1,"a":[{"y":2,"x":1}]},"a":null}`, `{"a":null,"b":{"a":[{"x":1,"y":2}],"z":1}}`},
		{"reorder at every level", `{"z":{"y":[{"b":1,"a":{"d":0,"c":[]}}],"x":"\u00e9"},"a":{"\ud83d\ude00":1,"\uffff":2,"\ue000":3}}`, "{\"a\":{\"😀\":1,\"\ue000\":3,\"\uffff\":2},\"z\":{\"x\":\"é\",\"y\":[{\"a\":{\"c\":[],\"d\":0},\"b\":1}]}}"},
		{"empty containers", ` { "a" : [ ] , "b" : { } } `, `{"a":[],"b":{}}`},
		{"top-level scalar", ` "x" `, `"x"`},
		{"number forms", `[1.0e2, -0.0, 0.0, 1E+2, 100, 1e-7, 1e21, 1e20, 0.000001, 123e-2]`, `[100,0,0,100,100,1e-7,1e+21,100000000000000000000,0.000001,1.23]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CanonicalJSON([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestCanonicalJSONRFC8785Numbers(t *testing.T) {
	// RFC 8785 Appendix B: IEEE 754 bit patterns and their serialization.
	for _, c := range rfc8785AppendixB {
		f := math.Float64frombits(c.bits)
		// Feed the shortest Go spelling through the parser.
		in, _ := json.Marshal(f)
		got, err := CanonicalJSON(in)
		if err != nil {
			t.Fatalf("%016x: %v", c.bits, err)
		}
		if string(got) != c.text {
			t.Errorf("%016x: got %s, want %s", c.bits, got, c.text)
		}
	}
}

func TestArgsFingerprintIgnoresSpelling(t *testing.T) {
	base, err := ArgsFingerprint([]byte(`{"query":"is:open","limit":100,"labels":["bug","p1"],"x":-0.0}`))
	if err != nil {
		t.Fatal(err)
	}
	same := []any{
		[]byte(`{ "limit" : 1.0e2, "labels":["bug","p1"], "query" : "is:open", "x": 0 }`),
		json.RawMessage("{\n\t\"x\":0,\"query\":\"is\\u003aopen\",\"labels\":[\"\\u0062ug\",\"p1\"],\"limit\":100.00}"),
		map[string]any{"query": "is:open", "limit": 100, "labels": []string{"bug", "p1"}, "x": 0},
		struct {
			Limit  float64  `json:"limit"`
			Labels []string `json:"labels"`
			Query  string   `json:"query"`
			X      int      `json:"x"`
		}{100, []string{"bug", "p1"}, "is:open", 0},
	}
	for i, args := range same {
		fp, err := ArgsFingerprint(args)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if fp != base {
			t.Fatalf("%d: fingerprint differs", i)
		}
	}
	canon := `{"labels":["bug","p1"],"limit":100,"query":"is:open","x":0}`
	if base != sha256.Sum256([]byte(canon)) {
		t.Fatal("fingerprint is not SHA-256 of the canonical form")
	}
	for _, other := range []string{
		`{"query":"is:open","limit":101,"labels":["bug","p1"],"x":0}`,
		`{"query":"is:open","limit":100,"labels":["p1","bug"],"x":0}`,
		`{"query":"is:open","limit":"100","labels":["bug","p1"],"x":0}`,
	} {
		fp, err := ArgsFingerprint([]byte(other))
		if err != nil || fp == base {
			t.Fatalf("different arguments, same fingerprint: %s", other)
		}
	}
}

func TestArgsFingerprintRejectsInvalidJSON(t *testing.T) {
	deep := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	okDeep := strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth)
	if _, err := ArgsFingerprint([]byte(okDeep)); err != nil {
		t.Fatalf("depth at the cap: %v", err)
	}
	cases := []string{
		``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a":1 "b":2}`,
		`{a:1}`, `'x'`, `"unterminated`, "\"tab\tinside\"", `"\x"`, `"\u12"`, `"\uZZZZ"`,
		`01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `0x10`, `NaN`, `Infinity`, `1e400`, `-1e400`,
		`tru`, `nul`, `falsey`, `{"a":1}{}`, `[1] x`,
		`{"a":1,"a":2}`, `{"a":1,"b":{"c":1,"c":1}}`, // duplicate keys (I-JSON)
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`, // lone surrogates
		"\"\xff\"", "\"\xc0\xaf\"", // invalid UTF-8
		deep,
	}
	for _, in := range cases {
		_, err := ArgsFingerprint([]byte(in))
		if !errors.Is(err, ErrArgsInvalid) {
			t.Errorf("%q: error = %v, want ErrArgsInvalid", in, err)
		}
	}
	if _, err := ArgsFingerprint(math.Inf(1)); !errors.Is(err, ErrArgsInvalid) {
		t.Fatalf("unmarshalable value: %v", err)
	}
}

func TestArgsFingerprintOfGoValues(t *testing.T) {
	nilFP, err := ArgsFingerprint(nil)
	if err != nil || nilFP != sha256.Sum256([]byte("null")) {
		t.Fatalf("nil: %v", err)
	}
	// A string is a Go value, marshalled to a JSON string, not JSON text.
	strFP, err := ArgsFingerprint(`{"a":1}`)
	if err != nil || strFP != sha256.Sum256([]byte(`"{\"a\":1}"`)) {
		t.Fatalf("string: %v", err)
	}
	// Large integers are read as doubles, as RFC 8785 requires.
	a, _ := ArgsFingerprint([]byte(`9007199254740993`))
	b, _ := ArgsFingerprint([]byte(`9007199254740992`))
	if a != b {
		t.Fatal("integers beyond 2^53 must collapse as IEEE 754 doubles")
	}
}

func TestCanonicalJSONIsIdempotent(t *testing.T) {
	for _, in := range []string{
		`{"b":[1,2,{"d":"\u00e9\n"}],"a":1e-7}`,
		`"\u2028\u007f\/"`,
		`[0.1,0.2,0.30000000000000004]`,
	} {
		once, err := CanonicalJSON([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		twice, err := CanonicalJSON(once)
		if err != nil || string(once) != string(twice) {
			t.Fatalf("not idempotent: %s -> %s (%v)", once, twice, err)
		}
		if !json.Valid(once) {
			t.Fatalf("canonical form is not JSON: %s", once)
		}
	}
}
