package jcs

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctoken/ctoken/internal/reason"
)

// exhaustive skips, under -race, an exhaustive check of a pure function
// run in one goroutine: the race detector has nothing to find there, and
// makes the check five to ten times slower (TestValidNameMatchesUTF8Valid:
// 35 s against 3.5 s). go test without -race runs it (in .ci/run, the
// FIPS pass over the root module and the declared legs' run without it).
func exhaustive(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("an exhaustive check of a pure function in one goroutine: runs without -race")
	}
}

// reasonOf is what ctoken.Reason returns for a rejection.
func reasonOf(err error) string { return reason.Of(err) }

// jcsVectorInputs returns every input, valid and invalid, of the root
// package's RFC 8785 known-answer vectors (testdata/vectors/jcs.json,
// written and checked by the root package's TestVectors).
func jcsVectorInputs(t testing.TB) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vectors", "jcs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Valid []struct {
			Input string `json:"input"`
		} `json:"valid"`
		Invalid []struct {
			Input    string `json:"input"`
			InputHex string `json:"input_hex"`
		} `json:"invalid"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, v := range f.Valid {
		out = append(out, []byte(v.Input))
	}
	for _, v := range f.Invalid {
		if v.InputHex == "" {
			out = append(out, []byte(v.Input))
			continue
		}
		raw, err := hex.DecodeString(v.InputHex)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, raw)
	}
	if len(f.Valid) == 0 || len(f.Invalid) == 0 {
		t.Fatal("jcs.json holds no vectors")
	}
	return out
}

// checkFuzzReasonError fails unless err matches exactly one of sentinels
// and its text is that sentinel's text plus a fixed, non-empty reason (the
// root package's fuzz tests hold the same check).
func checkFuzzReasonError(t *testing.T, err error, sentinels ...error) {
	t.Helper()
	var match error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			if match != nil {
				t.Fatalf("error %q matches both %v and %v", err, match, s)
			}
			match = s
		}
	}
	if match == nil {
		t.Fatalf("error %q matches none of the documented sentinels %v", err, sentinels)
	}
	r := reasonOf(err)
	if r == "" || err.Error() != match.Error()+": "+r {
		t.Fatalf("error text %q is not the sentinel plus a fixed reason (%q)", err, r)
	}
}
