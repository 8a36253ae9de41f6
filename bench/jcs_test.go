package bench

// Differential test of ctoken's hand-written RFC 8785 canonicalizer
// (ctoken.CanonicalJSON) against github.com/gowebpki/jcs, a test-only
// dependency of this module (the root module does not depend on it).
//
// Where both accept, the outputs are identical. Where they differ in
// acceptance, the difference is one of the kinds jcsDifference names, and
// TestJCSAcceptanceDifferences pins each with an example.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/gowebpki/jcs"
)

// Reasons ctoken gives for refusals gowebpki/jcs does not make.
const (
	reasonInexact = "number whose canonical form has another value (send it as a string)"
	reasonDepth   = "nested deeper than MaxJSONDepth"
)

// jcsDifference compares ctoken.CanonicalJSON with jcs.Transform on text.
// It returns "" when they agree (both refuse, or both accept with identical
// output), the ctoken Reason when only ctoken refuses for a documented
// reason, and otherwise a description of the disagreement, prefixed "BUG".
func jcsDifference(text []byte) string {
	mine, errMine := ctoken.CanonicalJSON(text)
	theirs, errTheirs := jcs.Transform(text)
	switch {
	case errMine == nil && errTheirs == nil:
		if !bytes.Equal(mine, theirs) {
			return "BUG: outputs differ: ctoken " + string(mine) + ", jcs " + string(theirs)
		}
		return ""
	case errMine != nil && errTheirs != nil:
		if !errors.Is(errMine, ctoken.ErrArgsInvalid) {
			return "BUG: ctoken error is not ErrArgsInvalid: " + errMine.Error()
		}
		return ""
	case errMine == nil:
		return "BUG: jcs refuses (" + errTheirs.Error() + "), ctoken accepts as " + string(mine)
	}
	switch r := ctoken.Reason(errMine).String(); r {
	case reasonInexact, reasonDepth:
		return r
	default:
		return "BUG: ctoken refuses (" + errMine.Error() + "), jcs accepts as " + string(theirs)
	}
}

// jcsTestdataInputs returns gowebpki/jcs's own test inputs, read from the
// module cache.
func jcsTestdataInputs(t testing.TB) map[string][]byte {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/gowebpki/jcs").Output()
	if err != nil {
		t.Fatalf("locating github.com/gowebpki/jcs: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "testdata", "input")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no inputs in %s (%v)", dir, err)
	}
	inputs := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(f)] = b
	}
	return inputs
}

// ctokenJCSVectors returns the inputs of ctoken's testdata/vectors/jcs.json.
func ctokenJCSVectors(t testing.TB) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "jcs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Valid []struct {
			Name, Input string
		} `json:"valid"`
		Invalid []struct {
			Name, Input string
			InputHex    string `json:"input_hex"`
		} `json:"invalid"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	inputs := map[string][]byte{}
	for _, v := range f.Valid {
		inputs["valid/"+v.Name] = []byte(v.Input)
	}
	for _, v := range f.Invalid {
		in := []byte(v.Input)
		if v.InputHex != "" {
			in = make([]byte, len(v.InputHex)/2)
			for i := range in {
				var c byte
				for _, h := range v.InputHex[2*i : 2*i+2] {
					c <<= 4
					switch {
					case '0' <= h && h <= '9':
						c |= byte(h - '0')
					default:
						c |= byte(h-'a') + 10
					}
				}
				in[i] = c
			}
		}
		inputs["invalid/"+v.Name] = in
	}
	if len(f.Valid) == 0 || len(f.Invalid) == 0 {
		t.Fatal("no vectors")
	}
	return inputs
}

// TestCanonicalJSONMatchesGowebpkiJCS runs both canonicalizers over
// gowebpki/jcs's test inputs and ctoken's JCS vectors: identical output
// wherever both accept, and only documented acceptance differences.
func TestCanonicalJSONMatchesGowebpkiJCS(t *testing.T) {
	agreed := 0
	for _, set := range []map[string][]byte{jcsTestdataInputs(t), ctokenJCSVectors(t)} {
		for name, in := range set {
			d := jcsDifference(in)
			if strings.HasPrefix(d, "BUG") {
				t.Errorf("%s: %s", name, d)
			}
			if d == "" {
				agreed++
			}
		}
	}
	if agreed == 0 {
		t.Fatal("no input on which the implementations agree")
	}
}

// TestJCSAcceptanceDifferences pins where ctoken and gowebpki/jcs differ in
// what they accept, and where they refuse alike.
func TestJCSAcceptanceDifferences(t *testing.T) {
	nest := func(n int) []byte {
		return []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
	}
	cases := []struct {
		name       string
		in         []byte
		jcsAccepts bool
		want       string // jcsDifference: "" (agree) or ctoken's Reason
	}{
		// Only ctoken refuses: the lossless rule.
		{"integer beyond 2^53", []byte(`1234567890123456789`), true, reasonInexact},
		{"2^53+1", []byte(`9007199254740993`), true, reasonInexact},
		{"over-long decimal", []byte(`0.10000000000000000001`), true, reasonInexact},
		{"underflow to zero", []byte(`1e-400`), true, reasonInexact},
		{"RFC 8785 §3.2.2 sample's 333333333.33333329", []byte(`[333333333.33333329]`), true, reasonInexact},
		// Only ctoken refuses: its nesting cap is 256, jcs's 10000.
		{"depth 257", nest(ctoken.MaxJSONDepth + 1), true, reasonDepth},
		{"depth 10000", nest(10000), true, reasonDepth},
		// Both refuse.
		{"depth 10001", nest(10001), false, ""},
		{"duplicate key", []byte(`{"a":1,"a":2}`), false, ""},
		{"duplicate key after unescaping", []byte(`{"a":1,"\u0061":2}`), false, ""},
		{"lone surrogate", []byte(`"\ud800"`), false, ""},
		{"invalid UTF-8", []byte("\"report\xff.pdf\""), false, ""},
		{"number over double range", []byte(`1e309`), false, ""},
		{"leading zero", []byte(`01`), false, ""},
		{"trailing garbage", []byte(`{} x`), false, ""},
		{"empty input", []byte{}, false, ""},
		// Both accept, identically.
		{"exact big integer", []byte(`1234567890123456800`), true, ""},
		{"number spellings", []byte(`[1.0e2,-0.0,0.1,1e21,1e-7,5e-324]`), true, ""},
		{"UTF-16 key order", []byte(`{"\ue000":1,"\ud83d\ude00":2,"a":3}`), true, ""},
		{"depth 256", nest(ctoken.MaxJSONDepth), true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := jcs.Transform(c.in); (err == nil) != c.jcsAccepts {
				t.Fatalf("jcs.Transform error %v, want accepted %v", err, c.jcsAccepts)
			}
			if got := jcsDifference(c.in); got != c.want {
				t.Fatalf("difference %q, want %q", got, c.want)
			}
		})
	}
}

// FuzzCanonicalJSONMatchesGowebpkiJCS checks, on any input, that ctoken and
// gowebpki/jcs agree except where ctoken refuses for a documented reason
// (an inexact number or nesting over MaxJSONDepth), and that ctoken's
// output is a fixed point of jcs and jcs's output a fixed point of ctoken.
func FuzzCanonicalJSONMatchesGowebpkiJCS(f *testing.F) {
	for _, set := range []map[string][]byte{jcsTestdataInputs(f), ctokenJCSVectors(f)} {
		for _, in := range set {
			f.Add(in)
		}
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		if d := jcsDifference(text); strings.HasPrefix(d, "BUG") {
			t.Fatalf("%q: %s", text, d)
		}
		if mine, err := ctoken.CanonicalJSON(text); err == nil {
			if again, err := jcs.Transform(mine); err != nil || !bytes.Equal(again, mine) {
				t.Fatalf("jcs changes ctoken's canonical %q to %q (%v)", mine, again, err)
			}
		}
		if theirs, err := jcs.Transform(text); err == nil {
			if again, err := ctoken.CanonicalJSON(theirs); err == nil && !bytes.Equal(again, theirs) {
				t.Fatalf("ctoken changes jcs's canonical %q to %q", theirs, again)
			}
		}
	})
}

// BenchmarkJCS compares ctoken.CanonicalJSON with jcs.Transform on the
// small arguments of a tool call and on a 1.4 KiB object of 24 nested
// objects, each spelled canonically and not.
func BenchmarkJCS(b *testing.B) {
	small := `{"filter":{"author":"octocat","state":"open"},"labels":["p1","backend"],"per_page":50,"query":"is:open label:bug sort:updated-desc","repo":"ctoken/ctoken"}`
	smallLoose := `{ "repo": "ctoken/ctoken", "per_page": 5.0e1, "query": "is:open label:bug sort:updated-desc",
  "labels": [ "p1", "backend" ], "filter": { "state": "open", "author": "octo\u0063at" } }`
	var nested, nestedLoose strings.Builder
	nested.WriteString(`{`)
	nestedLoose.WriteString("{\n")
	for i := range 24 {
		if i > 0 {
			nested.WriteString(`,`)
		}
		fmt.Fprintf(&nested, `"item_%02d":{"ratio":0.%03d,"tags":["a","b"],"value":%d.125}`, i, 125+i, 12345+i)
		j := 23 - i
		fmt.Fprintf(&nestedLoose, "  \"item_%02d\" : { \"value\" : %d.1250e0, \"tags\" : [ \"a\", \"b\" ], \"ratio\" : %d.0e-3 }", j, 12345+j, 125+j)
		if j > 0 {
			nestedLoose.WriteString(",")
		}
		nestedLoose.WriteString("\n")
	}
	nested.WriteString(`}`)
	nestedLoose.WriteString("}")
	inputs := []struct{ name, text string }{
		{"small", small}, {"small-noncanonical", smallLoose},
		{"nested-1.4KiB", nested.String()}, {"nested-1.4KiB-noncanonical", nestedLoose.String()},
	}
	for _, in := range inputs {
		text := []byte(in.text)
		mine, err := ctoken.CanonicalJSON(text)
		theirs, err2 := jcs.Transform(text)
		if err != nil || err2 != nil || !bytes.Equal(mine, theirs) {
			b.Fatalf("%s: outputs differ or refused (%v, %v)", in.name, err, err2)
		}
		b.Run(in.name+"/ctoken", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := ctoken.CanonicalJSON(text); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
		})
		b.Run(in.name+"/gowebpki-jcs", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := jcs.Transform(text); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
		})
	}
}
