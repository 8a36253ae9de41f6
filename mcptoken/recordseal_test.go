package mcptoken

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ctoken/ctoken"
)

// The two kinds of records are sealed under keys of their own, derived
// from one ring under two labels: each opens under its own label, for its
// own ID and fingerprint, and neither opens as the other.
func TestRecordSealerLabelsDoNotCross(t *testing.T) {
	ring, err := ctoken.NewKeyring(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	idem, ok := newRecordSealer(ring)
	if !ok {
		t.Fatal("no idempotency sealer")
	}
	round, ok := newSealer(ring, roundSealLabel)
	if !ok {
		t.Fatal("no round sealer")
	}
	const id = "state:s:0123"
	fp, result := bytes.Repeat([]byte{7}, 32), []byte(`{"ok":true}`)
	for _, tc := range []struct {
		name       string
		seal, open *recordSealer
		id         string
		fp         []byte
		opens      bool
	}{
		{"a round's record as a round's", round, round, id, fp, true},
		{"a tool call's record as a tool call's", idem, idem, id, fp, true},
		{"a tool call's record as a round's", idem, round, id, fp, false},
		{"a round's record as a tool call's", round, idem, id, fp, false},
		{"under another ID", round, round, id + "0", fp, false},
		{"under another fingerprint", round, round, id, bytes.Repeat([]byte{8}, 32), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := tc.seal.seal(id, fp, result)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.open.open(tc.id, tc.fp, rec)
			if tc.opens != (err == nil) || (err == nil && !bytes.Equal(got, result)) || (err != nil && (!errors.Is(err, errRecordForged) || got != nil)) {
				t.Fatalf("open = %q, %v; want it to open: %v", got, err, tc.opens)
			}
		})
	}
	for _, ring := range []any{nil, (*ctoken.Keyring)(nil), &ctoken.Keyring{}, "a ring"} {
		if s, ok := newSealer(ring, roundSealLabel); ok || s != nil {
			t.Fatalf("newSealer(%T) = %v, %v; want none", ring, s, ok)
		}
	}
}
