package ctoken

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"testing"
)

// byteText is a named []byte type that is neither []byte nor
// json.RawMessage: ArgsFingerprint takes it as a Go value, as before.
type byteText []byte

// TestArgsFingerprintTakesTextOfEveryStaticType pins that the generic
// ArgsFingerprint decides by the dynamic type as the func(any) it replaced
// did: JSON text as []byte or json.RawMessage, whether passed as itself or
// inside an any; any other type, even one whose underlying type is []byte,
// as the JSON encoding/json marshals it to.
func TestArgsFingerprintTakesTextOfEveryStaticType(t *testing.T) {
	const text = `{"b":[1,2],"a":"x"}`
	canon := sha256.Sum256([]byte(`{"a":"x","b":[1,2]}`))
	marshalled, err := json.Marshal(byteText(text)) // a base64 JSON string
	if err != nil {
		t.Fatal(err)
	}
	asString := sha256.Sum256(marshalled)
	var boxedBytes any = []byte(text)
	var boxedRaw any = json.RawMessage(text)
	var boxedNamed any = byteText(text)
	cases := []struct {
		name string
		fp   func() (Fingerprint, error)
		want [32]byte
	}{
		{"[]byte", func() (Fingerprint, error) { return ArgsFingerprint([]byte(text)) }, canon},
		{"json.RawMessage", func() (Fingerprint, error) { return ArgsFingerprint(json.RawMessage(text)) }, canon},
		{"[]byte in an any", func() (Fingerprint, error) { return ArgsFingerprint(boxedBytes) }, canon},
		{"json.RawMessage in an any", func() (Fingerprint, error) { return ArgsFingerprint(boxedRaw) }, canon},
		{"named []byte type", func() (Fingerprint, error) { return ArgsFingerprint(byteText(text)) }, asString},
		{"named []byte type in an any", func() (Fingerprint, error) { return ArgsFingerprint(boxedNamed) }, asString},
		{"map", func() (Fingerprint, error) { return ArgsFingerprint(map[string]any{"b": []int{1, 2}, "a": "x"}) }, canon},
		{"map in an any", func() (Fingerprint, error) {
			var v any = map[string]any{"b": []int{1, 2}, "a": "x"}
			return ArgsFingerprint(v)
		}, canon},
		{"struct", func() (Fingerprint, error) {
			return ArgsFingerprint(struct {
				B []int  `json:"b"`
				A string `json:"a"`
			}{[]int{1, 2}, "x"})
		}, canon},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fp, err := c.fp()
			if err != nil || fp != Fingerprint(c.want) {
				t.Fatalf("ArgsFingerprint = %x, %v; want %x", fp, err, c.want)
			}
		})
	}
}

// TestArgsFingerprintRefusesInvalidTextOfEveryStaticType pins that text
// the canonical form refuses is refused through every path that takes it
// as text, with ErrArgsInvalid.
func TestArgsFingerprintRefusesInvalidTextOfEveryStaticType(t *testing.T) {
	const bad = `{"a":1,"a":2}` // duplicate member name
	var boxed any = []byte(bad)
	cases := []struct {
		name string
		fp   func() (Fingerprint, error)
	}{
		{"[]byte", func() (Fingerprint, error) { return ArgsFingerprint([]byte(bad)) }},
		{"json.RawMessage", func() (Fingerprint, error) { return ArgsFingerprint(json.RawMessage(bad)) }},
		{"[]byte in an any", func() (Fingerprint, error) { return ArgsFingerprint(boxed) }},
		{"empty []byte", func() (Fingerprint, error) { return ArgsFingerprint([]byte{}) }},
		{"nil json.RawMessage", func() (Fingerprint, error) { return ArgsFingerprint(json.RawMessage(nil)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fp, err := c.fp()
			if !errors.Is(err, ErrArgsInvalid) || !fp.IsZero() {
				t.Fatalf("ArgsFingerprint = %x, %v; want the zero fingerprint and ErrArgsInvalid", fp, err)
			}
		})
	}
}

// TestArgsFingerprintOfTextDoesNotAllocate pins what the generic signature
// is for: JSON text passed as a []byte or json.RawMessage is not boxed
// into an interface, so fingerprinting it allocates nothing.
func TestArgsFingerprintOfTextDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	text := []byte(`{"query":"is:open","per_page":50}`)
	cases := []struct {
		name string
		fn   func()
	}{
		{"[]byte", func() { _, _ = ArgsFingerprint(text) }},
		{"json.RawMessage", func() { _, _ = ArgsFingerprint(json.RawMessage(text)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fn() // warm the parser pool
			if n := testing.AllocsPerRun(100, c.fn); n != 0 {
				t.Fatalf("ArgsFingerprint of %s: %v allocations, want 0", c.name, n)
			}
		})
	}
}
