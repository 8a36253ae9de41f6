package bench

// Differential test of ctoken.ArgsFingerprint on Go values — which takes a
// per-type reflection plan writing canonical JSON directly where it can —
// against github.com/gowebpki/jcs canonicalizing encoding/json's output.

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/gowebpki/jcs"
)

// Reason ctoken gives for a Go string holding invalid UTF-8, which
// encoding/json writes as \ufffd and gowebpki/jcs then accepts.
const reasonReplaced = "Go string with invalid UTF-8 (encoding/json writes \\ufffd; send bytes as []byte)"

type goValueArgs struct {
	Query   string            `json:"query"`
	Repo    string            `json:"repo,omitempty"`
	PerPage int64             `json:"per_page"`
	Limit   uint32            `json:"limit,string"`
	Ratio   float64           `json:"ratio"`
	Small   float32           `json:"small"`
	On      bool              `json:"on"`
	Labels  []string          `json:"labels"`
	Blob    []byte            `json:"blob"`
	Filter  map[string]string `json:"filter"`
	ByID    map[int]any       `json:"by_id"`
	Next    *goValueArgs      `json:"next,omitempty"`
	Extra   any               `json:"extra"`
}

// goValueDifference compares ctoken.ArgsFingerprint(v) with the SHA-256 of
// jcs.Transform(json.Marshal(v)), as jcsDifference does for text.
func goValueDifference(v any) string {
	fp, errMine := ctoken.ArgsFingerprint(v)
	text, errMarshal := json.Marshal(v)
	var theirs []byte
	errTheirs := errMarshal
	if errMarshal == nil {
		theirs, errTheirs = jcs.Transform(text)
	}
	switch {
	case errMine == nil && errTheirs == nil:
		if fp != sha256.Sum256(theirs) {
			return "BUG: fingerprints differ; jcs canonical form " + string(theirs)
		}
		return ""
	case errMine != nil && errTheirs != nil:
		if !errors.Is(errMine, ctoken.ErrArgsInvalid) {
			return "BUG: ctoken error is not ErrArgsInvalid: " + errMine.Error()
		}
		return ""
	case errMine == nil:
		return "BUG: jcs refuses (" + errTheirs.Error() + "), ctoken accepts"
	}
	switch r := ctoken.Reason(errMine).String(); r {
	case reasonInexact, reasonDepth, reasonReplaced:
		return r
	default:
		return "BUG: ctoken refuses (" + errMine.Error() + "), jcs accepts as " + string(theirs)
	}
}

func FuzzArgsFingerprintGoValueMatchesGowebpkiJCS(f *testing.F) {
	f.Add("is:open \u2028<&>", int64(50), uint64(7), 0.1, true, []byte(`{"query":"x","filter":{"b":"1","a":"2"},"next":{"per_page":3}}`))
	f.Add("report\xff.pdf", int64(1234567890123456789), uint64(1<<64-1), 1e21, false, []byte(`[1.5,"\ud83d\ude00",{"\u00e9":null}]`))
	f.Add("é\U0001F600\x00", int64(-1<<53), uint64(0), 5e-324, true, []byte(`{"by_id":{"10":1,"9":[true]},"extra":-0}`))
	f.Fuzz(func(t *testing.T, s string, i int64, u uint64, fl float64, b bool, raw []byte) {
		if math.IsNaN(fl) || math.IsInf(fl, 0) {
			fl = 0 // both refuse; nothing to compare
		}
		var decoded any
		_ = json.Unmarshal(raw, &decoded)
		var shaped goValueArgs
		_ = json.Unmarshal(raw, &shaped)
		args := goValueArgs{
			Query: s, Repo: s, PerPage: i, Limit: uint32(u), Ratio: fl, Small: float32(fl), On: b,
			Labels: []string{s, "p1"}, Blob: []byte(s), Filter: map[string]string{s: s, "state": "open"},
			ByID: map[int]any{int(i % 1000): decoded, -1: u}, Next: &shaped, Extra: decoded,
		}
		for _, v := range []any{args, shaped, decoded, map[string]any{s: decoded, "n": i}, []any{u, fl, s}} {
			if d := goValueDifference(v); len(d) >= 3 && d[:3] == "BUG" {
				t.Fatalf("%+v: %s", v, d)
			}
		}
	})
}

// TestArgsFingerprintGoValueMatchesGowebpkiJCS pins agreement on typical
// arguments and each documented difference with an example.
func TestArgsFingerprintGoValueMatchesGowebpkiJCS(t *testing.T) {
	agree := []any{
		goValueArgs{Query: "is:open <b>", PerPage: 50, Limit: 7, Ratio: 0.1, Small: 0.1, Labels: []string{"p1"},
			Blob: []byte{0, 1, 2}, Filter: map[string]string{"\U0001F600": "", "\uE000": "", "a": ""},
			ByID: map[int]any{10: 1.5, 9: nil}, Next: &goValueArgs{Query: "é"}, Extra: []any{1e21, 1e-7, math.Copysign(0, -1)}},
		map[string]any{"a": []any{true, "x", 3.25}, "b": map[string]any{}},
	}
	for _, v := range agree {
		if d := goValueDifference(v); d != "" {
			t.Errorf("%+v: %s", v, d)
		}
	}
	differ := []struct {
		v    any
		want string
	}{
		{goValueArgs{PerPage: 1234567890123456789}, reasonInexact},
		{goValueArgs{Query: "report\xff.pdf"}, reasonReplaced},
		{map[string]int{"\xfe": 1}, reasonReplaced},
	}
	for _, c := range differ {
		if d := goValueDifference(c.v); d != c.want {
			t.Errorf("%+v: %q, want %q", c.v, d, c.want)
		}
	}
}
