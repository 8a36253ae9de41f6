package idempotency

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzRecordDecode feeds arbitrary bytes to DecodeResponse: it never
// panics, refuses with ErrRecord, and whatever it accepts encodes back to
// the same bytes (the encoding is canonical, so one response has one
// stored form).
func FuzzRecordDecode(f *testing.F) {
	v := loadVectors(f)
	for _, c := range v.Response {
		b, _ := hex.DecodeString(c.CBORHex)
		f.Add(b)
	}
	for _, c := range v.ResponseRejects {
		b, _ := hex.DecodeString(c.CBORHex)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err != nil {
			if !errors.Is(err, ErrRecord) {
				t.Fatalf("error %v does not match ErrRecord", err)
			}
			return
		}
		again, err := EncodeResponse(r)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted %x re-encodes as %x, %v", b, again, err)
		}
	})
}

// FuzzParseKey feeds arbitrary header values to ParseKey: it never
// panics; a key it accepts is 1 to max bytes of printable ASCII; quoting it
// again (escaping " and \) parses back to it; a value that is not quoted
// is accepted exactly when it is a bare key (visible ASCII without '"',
// '\', ',' or ';', spaces around it trimmed), as itself; and a key that
// is a bare key reads the same in both spellings.
func FuzzParseKey(f *testing.F) {
	for _, c := range loadVectors(f).Key {
		f.Add(c.Header, 255)
	}
	f.Add(`"a\"b"`, 3)
	f.Add(`abc`, 3)
	f.Add(` a;b `, 3)
	f.Fuzz(func(t *testing.T, value string, max int) {
		max = 1 + (max&0x7fffffff)%300
		key, err := ParseKey(value, max)
		trimmed := strings.Trim(value, " ")
		if trimmed != "" && trimmed[0] != '"' {
			bare := len(trimmed) <= max && bareKey(trimmed)
			if bare != (err == nil) || bare && key != trimmed {
				t.Fatalf("ParseKey(%q, %d) = %q, %v; bare key: %v", value, max, key, err, bare)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrKey) || key != "" {
				t.Fatalf("ParseKey(%q) = %q, %v", value, key, err)
			}
			return
		}
		if len(key) == 0 || len(key) > max {
			t.Fatalf("ParseKey(%q, %d) = %q: length out of bounds", value, max, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: not printable ASCII", value, key)
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := ParseKey(quoted, max); err != nil || again != key {
			t.Fatalf("requoted %q parses as %q, %v", quoted, again, err)
		}
		if again, err := ParseKey(key, max); bareKey(key) && (err != nil || again != key) {
			t.Fatalf("key %q read bare is %q, %v", key, again, err)
		}
	})
}

// FuzzSealedRecordOpen feeds arbitrary records, store IDs and fingerprints
// to the opener of sealed records: it never panics, returns nothing of a
// record it refuses (never partial data), and what it opens is a valid
// response that seals and opens again to itself.
func FuzzSealedRecordOpen(f *testing.F) {
	v, keys := loadSealedVectors(f)
	for _, c := range v.Sealed {
		f.Add(unhexOr(c.SealedHex), c.StoreID, unhexOr(c.FingerprintHex))
	}
	for _, c := range v.Rejects {
		f.Add(unhexOr(c.SealedHex), c.StoreID, unhexOr(c.FingerprintHex))
	}
	s := vectorSealer(f, v, keys)
	f.Fuzz(func(t *testing.T, b []byte, id string, fp []byte) {
		r, fault := s.open(id, fp, b)
		if fault != openOK {
			if !reflect.DeepEqual(r, Response{}) {
				t.Fatalf("refused (fault %d) but returned %+v", fault, r)
			}
			return
		}
		again, err := s.seal(id, fp, r)
		if err != nil {
			t.Fatalf("opened %+v does not seal again: %v", r, err)
		}
		if r2, fault := s.open(id, fp, again); fault != openOK || !reflect.DeepEqual(r2, r) {
			t.Fatalf("resealed record opens as %+v, fault %d", r2, fault)
		}
	})
}

func unhexOr(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}

// bareKey reports whether s is a bare key as ParseKey documents it: visible
// ASCII without '"', '\', ',' or ';'.
func bareKey(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' || c == ',' || c == ';' {
			return false
		}
	}
	return s != ""
}
