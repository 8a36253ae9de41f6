package ctoken

import (
	"math"
	"testing"
)

// Tests that close the gaps mutation testing found in fingerprint.go and
// fingerprint_plan.go (issue 21). Each names the behaviour it pins.

// checkPlanCovers checks v against the plain path (checkPlanAgrees) and
// that the Go-value plan answers for it.
func checkPlanCovers(t *testing.T, v any) {
	t.Helper()
	if !checkPlanAgrees(t, v) {
		t.Errorf("%T %+v: the plan does not cover it", v, v)
	}
}

// TestGoPlanSpellsQuotedFloatsAsEncodingJSON pins the spelling of a
// float in a ",string" field, which the plan writes verbatim inside a JSON
// string (no number canonicalization applies there): encoding/json's
// switch to exponent form below 1e-6 and from 1e21, decided on the
// float32 value for a float32, and its e-07 → e-7 clean-up.
func TestGoPlanSpellsQuotedFloatsAsEncodingJSON(t *testing.T) {
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
}

// TestGoPlanRefusesEveryInvalidUTF8LeadByte pins that a Go string whose
// invalid UTF-8 starts with a byte from 0x80 (a lone continuation byte)
// up is refused as the plain path refuses it, not written as an escape.
func TestGoPlanRefusesEveryInvalidUTF8LeadByte(t *testing.T) {
	for _, s := range []string{"\x80", "a\x80b", "\xbf", "12345678\x80", "\xc3", "\xed\xa0\x80", "\xf5\x80\x80\x80", "\xff"} {
		for _, v := range []any{s, map[string]string{"k": s}, map[string]int{s: 1}, struct{ S string }{s}} {
			if checkPlanAgrees(t, v) {
				t.Errorf("%T %q: the plan answers for invalid UTF-8", v, s)
			}
			if _, err := ArgsFingerprint(v); Reason(err) != Reason(errArgsReplaced) {
				t.Errorf("%T %q: ArgsFingerprint error %v, want %v", v, s, err, errArgsReplaced)
			}
		}
	}
}

// TestGoPlanWritesValidRunesItself pins that the plan covers strings
// with every length of valid UTF-8 rune, U+FFFD written as itself among
// them (only an invalid byte makes the plan give up).
func TestGoPlanWritesValidRunesItself(t *testing.T) {
	for _, s := range []string{"\ufffd", "report\ufffd.pdf", "\u0080", "\u07ff", "\u0800", "\uffff", "\U00010000", "\U0010ffff", "12345678\ufffd"} {
		checkPlanCovers(t, s)
		checkPlanCovers(t, map[string]string{s: s})
	}
}
