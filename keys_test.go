package ctoken

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestNewKeyringRejectsShortKeys(t *testing.T) {
	if _, err := NewKeyring(make([]byte, 31)); !errors.Is(err, ErrKeyTooShort) {
		t.Fatalf("short primary: %v", err)
	}
	if _, err := NewKeyring(fixedKey(1), fixedKey(2)[:16]); !errors.Is(err, ErrKeyTooShort) {
		t.Fatalf("short previous: %v", err)
	}
	if _, err := NewKeyring(nil); !errors.Is(err, ErrKeyTooShort) {
		t.Fatalf("nil primary: %v", err)
	}
}

func TestNewKeyringCopiesInputs(t *testing.T) {
	k := fixedKey(7)
	kr := mustKeyring(t, k)
	k[0] = 0
	if kr.keys[0][0] != 7 {
		t.Fatal("keyring aliases its input")
	}
}

func TestRandomKeyIsFreshAndFullLength(t *testing.T) {
	a, b := RandomKey(), RandomKey()
	if len(a) != MinKeyBytes || len(b) != MinKeyBytes {
		t.Fatalf("lengths %d, %d", len(a), len(b))
	}
	if string(a) == string(b) {
		t.Fatal("two random keys are equal")
	}
}

func TestParseKeyringAcceptsEveryForm(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef\xfb\xff") // 34 bytes: forces '-', '_' / '+', '/' and padding
	forms := map[string]string{
		"base64url":    base64.RawURLEncoding.EncodeToString(key),
		"std padded":   base64.StdEncoding.EncodeToString(key),
		"std unpadded": base64.RawStdEncoding.EncodeToString(key),
		"with spaces":  "  \t" + base64.RawURLEncoding.EncodeToString(key) + "\n ",
		"EncodeKey":    EncodeKey(key),
	}
	for name, s := range forms {
		t.Run(name, func(t *testing.T) {
			kr, err := ParseKeyring(s)
			if err != nil {
				t.Fatal(err)
			}
			if kr.Len() != 1 || string(kr.keys[0]) != string(key) {
				t.Fatal("decoded key differs")
			}
		})
	}
}

func TestParseKeyringKeepsOrder(t *testing.T) {
	s := EncodeKey(fixedKey(1)) + " , " + EncodeKey(fixedKey(2)) + "," + EncodeKey(fixedKey(3))
	kr, err := ParseKeyring(s)
	if err != nil {
		t.Fatal(err)
	}
	if kr.Len() != 3 {
		t.Fatalf("Len = %d", kr.Len())
	}
	for i, k := range kr.keys {
		if k[0] != byte(i+1) {
			t.Fatalf("key %d out of order", i)
		}
	}
}

func TestParseKeyringRejectsMalformed(t *testing.T) {
	good := EncodeKey(fixedKey(9))
	secret := "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA!" // not base64
	cases := []struct {
		name, in string
		want     error
	}{
		{"empty", "", ErrKeyInvalid},
		{"blank", "   ", ErrKeyInvalid},
		{"trailing comma", good + ",", ErrKeyInvalid},
		{"empty middle", good + ",," + good, ErrKeyInvalid},
		{"not base64", secret, ErrKeyInvalid},
		{"inner space", good[:10] + " " + good[10:], ErrKeyInvalid},
		{"short", EncodeKey(make([]byte, 31)), ErrKeyTooShort},
		{"short previous", good + "," + EncodeKey(make([]byte, 16)), ErrKeyTooShort},
		{"non-zero trailing bits", good[:len(good)-1] + "B", ErrKeyInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseKeyring(c.in)
			wantErr(t, err, c.want)
			if strings.TrimSpace(c.in) != "" && strings.Contains(err.Error(), strings.TrimSpace(strings.Split(c.in, ",")[0])) {
				t.Fatalf("error echoes key material: %q", err)
			}
		})
	}
}

func TestKeyringFromEnv(t *testing.T) {
	const name = "CTOKEN_TEST_KEYS"
	t.Setenv(name, "")
	if _, err := KeyringFromEnv(name); !errors.Is(err, ErrNoKey) {
		t.Fatalf("empty: %v", err)
	}
	t.Setenv(name, EncodeKey(fixedKey(4))+","+EncodeKey(fixedKey(5)))
	kr, err := KeyringFromEnv(name)
	if err != nil || kr.Len() != 2 {
		t.Fatalf("kr=%v err=%v", kr, err)
	}
	bad := "definitely-not-a-key!but-secret-ish-material"
	t.Setenv(name, bad)
	_, err = KeyringFromEnv(name)
	wantErr(t, err, ErrKeyInvalid)
	if strings.Contains(err.Error(), bad) {
		t.Fatalf("error echoes the variable's value: %q", err)
	}
}

func TestKeyringFromEnvOrRandomFallsBackOnlyWhenUnset(t *testing.T) {
	const name = "CTOKEN_TEST_KEYS_OR_RANDOM"
	t.Setenv(name, "")
	kr, eph, err := KeyringFromEnvOrRandom(name)
	if err != nil || !eph || kr.Len() != 1 {
		t.Fatalf("unset: kr=%v eph=%v err=%v", kr, eph, err)
	}
	t.Setenv(name, EncodeKey(fixedKey(6)))
	kr, eph, err = KeyringFromEnvOrRandom(name)
	if err != nil || eph || kr.keys[0][0] != 6 {
		t.Fatalf("set: kr=%v eph=%v err=%v", kr, eph, err)
	}
	for _, bad := range []string{"garbage!", " ", "\t\n", " , "} {
		t.Setenv(name, bad)
		kr, eph, err = KeyringFromEnvOrRandom(name)
		if err == nil || kr != nil || eph {
			t.Fatalf("%q: set but malformed must be an error, got kr=%v eph=%v err=%v", bad, kr, eph, err)
		}
	}
}

// TestNilKeyringDescribesItselfWithoutPanic checks that a nil *Keyring (as
// returned beside an error) reports no keys and formats, like String does,
// instead of panicking.
func TestNilKeyringDescribesItselfWithoutPanic(t *testing.T) {
	var kr *Keyring
	if n := kr.Len(); n != 0 {
		t.Fatalf("nil Keyring Len = %d", n)
	}
	if got := kr.String(); got != "ctoken.Keyring(nil)" {
		t.Fatalf("nil Keyring String = %q", got)
	}
}

func TestKeyringFormatsWithoutKeyMaterial(t *testing.T) {
	kr := mustKeyring(t, fixedKey('A'), fixedKey('B'))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		s := fmt.Sprintf(verb, kr)
		if strings.Contains(s, "AAAA") || strings.Contains(s, "QUFB") {
			t.Fatalf("%s leaks key material: %q", verb, s)
		}
	}
	if got := kr.String(); got != "ctoken.Keyring(2 keys)" {
		t.Fatalf("String = %q", got)
	}
}

func TestDeriveKeySeparatesLabels(t *testing.T) {
	k := fixedKey(1)
	a, b := DeriveKey(k, stateBindLabel), DeriveKey(k, statePayloadLabel)
	if len(a) != 32 || string(a) == string(b) || string(a) == string(k) {
		t.Fatal("subkeys must be 32 bytes, distinct per label and from the key")
	}
	if string(DeriveKey(k, stateBindLabel)) != string(a) {
		t.Fatal("derivation is not deterministic")
	}
}
