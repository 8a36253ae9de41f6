package ringkey

import "testing"

// This package's tests do not link the root package, so nothing has
// registered a derivation: Derive refuses everything.
func TestDeriveWithoutARegisteredDerivationRefuses(t *testing.T) {
	for _, ring := range []any{nil, 1, "key", []byte("0123456789abcdef0123456789abcdef")} {
		if subs, ok := Derive(ring, "label"); ok || subs != nil {
			t.Errorf("Derive(%T) = %v, %v", ring, subs, ok)
		}
	}
}

func TestDeriveUsesTheRegisteredDerivation(t *testing.T) {
	defer Register(nil)
	var gotLabel string
	Register(func(ring any, label string) ([]Subkey, bool) {
		gotLabel = label
		return []Subkey{{ID: [IDSize]byte{1, 2, 3, 4}, Key: make([]byte, 32)}}, ring == "ring"
	})
	if subs, ok := Derive("ring", "the label"); !ok || len(subs) != 1 || subs[0].ID != [IDSize]byte{1, 2, 3, 4} || gotLabel != "the label" {
		t.Fatalf("Derive = %v, %v (label %q)", subs, ok, gotLabel)
	}
	if _, ok := Derive(nil, "the label"); ok {
		t.Fatal("a nil ring derived")
	}
}
