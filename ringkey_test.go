package ctoken

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/ctoken/ctoken/internal/ringkey"
)

// TestRingkeyDerivesAsTheRootPackage checks what the root package
// registers in internal/ringkey: for a ring from NewKeyring, each key's
// DeriveKey subkey under the label and its key id, primary first; for
// anything else, nothing.
func TestRingkeyDerivesAsTheRootPackage(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 40)
	kr, err := NewKeyring(k1, k2)
	if err != nil {
		t.Fatal(err)
	}
	subs, ok := ringkey.Derive(kr, "a label")
	if !ok || len(subs) != 2 {
		t.Fatalf("Derive = %v, %v", subs, ok)
	}
	ids := kr.KeyIDs()
	for i, k := range [][]byte{k1, k2} {
		want, _ := DeriveKey(k, "a label")
		if !bytes.Equal(subs[i].Key, want) || hex.EncodeToString(subs[i].ID[:]) != ids[i] {
			t.Errorf("key %d: subkey %x id %x, want %x %s", i, subs[i].Key, subs[i].ID, want, ids[i])
		}
	}
	other, _ := ringkey.Derive(kr, "another label")
	if bytes.Equal(other[0].Key, subs[0].Key) {
		t.Error("two labels derive one subkey")
	}
	for name, ring := range map[string]any{"nil ring": (*Keyring)(nil), "zero ring": &Keyring{}, "ring by value": *kr, "nil": nil, "a key": k1} {
		if subs, ok := ringkey.Derive(ring, "a label"); ok || subs != nil {
			t.Errorf("%s: Derive = %v, %v", name, subs, ok)
		}
	}
}
