package ctoken

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
)

func TestNewKeyring(t *testing.T) {
	t.Run("rejects short keys", func(t *testing.T) {
		if _, err := NewKeyring(make([]byte, 31)); !errors.Is(err, ErrKeyTooShort) {
			t.Fatalf("short primary: %v", err)
		}
		if _, err := NewKeyring(fixedKey(1), fixedKey(2)[:16]); !errors.Is(err, ErrKeyTooShort) {
			t.Fatalf("short previous: %v", err)
		}
		if _, err := NewKeyring(nil); !errors.Is(err, ErrKeyTooShort) {
			t.Fatalf("nil primary: %v", err)
		}
	})

	t.Run("copies inputs", func(t *testing.T) {
		k := fixedKey(7)
		kr := mustKeyring(t, k)
		k[0] = 0
		if kr.keys[0][0] != 7 {
			t.Fatal("keyring aliases its input")
		}
	})
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

func TestParseKeyring(t *testing.T) {
	t.Run("accepts every form", func(t *testing.T) {
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
	})

	t.Run("keeps order", func(t *testing.T) {
		s := EncodeKey(seqBytes(1, 32)) + " , " + EncodeKey(seqBytes(2, 32)) + "," + EncodeKey(seqBytes(3, 32))
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
	})

	t.Run("rejects malformed", func(t *testing.T) {
		good := EncodeKey(seqBytes(9, 32))
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
	})

	t.Run("refuses degenerate keys", func(t *testing.T) {
		pattern := func(p []byte) []byte { return bytes.Repeat(p, 64/len(p))[:MinKeyBytes] }
		few := make([]byte, 48) // 8 distinct values, no period
		for i := range few {
			few[i] = byte((i*i + i/3) % 8)
		}
		for _, tc := range []struct {
			name string
			key  []byte
		}{
			{"all zero", make([]byte, MinKeyBytes)},
			{"all equal", fixedKey('A')},
			{"period 2", pattern([]byte{0xde, 0xad})},
			{"period 7", pattern([]byte("passwd!"))},
			{"period 16", append(seqBytes(0x30, 16), seqBytes(0x30, 16)...)},
			{"long key, period 32", append(seqBytes(0, 32), seqBytes(0, 32)...)},
			{"8 distinct values", few},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if periodic(few, 1) {
					t.Fatal("fixture is periodic")
				}
				for _, s := range []string{EncodeKey(tc.key), EncodeKey(seqBytes(1, 32)) + "," + EncodeKey(tc.key)} {
					kr, err := ParseKeyring(s)
					if !errors.Is(err, ErrKeyInvalid) || kr != nil {
						t.Fatalf("ParseKeyring = %v, %v; want ErrKeyInvalid", kr, err)
					}
					if !strings.Contains(reasonText(err), "degenerate") {
						t.Fatalf("reason %q does not say degenerate", reasonText(err))
					}
				}
			})
		}
		// The edges: a 32-byte key with no period of at most 16 bytes, and 9
		// distinct values without a period, pass.
		if _, err := ParseKeyring(EncodeKey(append(seqBytes(0x40, 17), seqBytes(0x40, 15)...))); err != nil {
			t.Fatalf("a 32-byte key whose prefix repeats once (no period <= 16) was refused: %v", err)
		}
		nine := make([]byte, MinKeyBytes)
		for i := range nine {
			nine[i] = byte((i*i + i/3) % 9)
		}
		if degenerateKey(nine) {
			t.Fatal("a non-periodic key with 9 distinct values was flagged")
		}
	})

	// encoding/base64 skips CR and LF even in Strict mode; every alphabet
	// ParseKeyring accepts goes through the strict decoder, so a key has one
	// spelling per alphabet and a line break inside it is refused.
	t.Run("refuses line break inside key", func(t *testing.T) {
		key := seqBytes(0xf3, 32) // its standard base64 holds '+' and '/'
		for _, c := range []struct{ name, clean, brk string }{
			{"base64url", base64.RawURLEncoding.EncodeToString(key), "\n"},
			{"base64url CR", base64.RawURLEncoding.EncodeToString(key), "\r"},
			{"std padded", base64.StdEncoding.EncodeToString(key), "\r\n"},
			{"std unpadded", base64.RawStdEncoding.EncodeToString(key), "\n"},
		} {
			t.Run(c.name, func(t *testing.T) {
				if _, err := ParseKeyring(c.clean); err != nil {
					t.Fatalf("clean key refused: %v", err)
				}
				_, err := ParseKeyring(c.clean[:20] + c.brk + c.clean[20:])
				if !errors.Is(err, ErrKeyInvalid) || reasonText(err) != "key 1 of 1 "+keyNotBase64 {
					t.Fatalf("key with an inner line break = %v (reason %q), want ErrKeyInvalid, %q", err, reasonText(err), "key 1 of 1 "+keyNotBase64)
				}
			})
		}
	})
}

func TestKeyringFromEnv(t *testing.T) {
	const name = "CTOKEN_TEST_KEYS"
	t.Setenv(name, "")
	if _, err := KeyringFromEnv(name); !errors.Is(err, ErrNoKey) || reasonText(err) != name+" is not set" {
		t.Fatalf("empty: %v (reason %q)", err, reasonText(err))
	}
	t.Setenv(name, EncodeKey(seqBytes(4, 32))+","+EncodeKey(seqBytes(5, 32)))
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
	t.Setenv(name, EncodeKey(seqBytes(6, 32)))
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

// subkey is DeriveKey for keys a test knows to be long enough.
func subkey(key []byte, label string) []byte {
	k, err := DeriveKey(key, label)
	if err != nil {
		panic(err)
	}
	return k
}

func TestDeriveKey(t *testing.T) {
	t.Run("separates labels", func(t *testing.T) {
		k := fixedKey(1)
		a, b := subkey(k, stateBindLabel), subkey(k, statePayloadLabel)
		if len(a) != 32 || string(a) == string(b) || string(a) == string(k) {
			t.Fatal("subkeys must be 32 bytes, distinct per label and from the key")
		}
		if string(subkey(k, stateBindLabel)) != string(a) {
			t.Fatal("derivation is not deterministic")
		}
	})

	// DeriveKey must refuse, not panic on, a key HKDF may not take (issue 19:
	// FIPS 140-only mode refuses HKDF keys under 112 bits).
	t.Run("refuses short key without panic", func(t *testing.T) {
		for _, n := range []int{0, 1, 13, 14, MinKeyBytes - 1} {
			k, err := DeriveKey(make([]byte, n), cursorKeyLabel)
			if !errors.Is(err, ErrKeyTooShort) || k != nil || reasonText(err) == "" {
				t.Fatalf("DeriveKey(%d bytes) = %x, %v; want ErrKeyTooShort with a reason", n, k, err)
			}
		}
		if _, err := DeriveKey(seqBytes(0, MinKeyBytes), cursorKeyLabel); err != nil {
			t.Fatalf("DeriveKey(32 bytes) = %v", err)
		}
	})
}

// Random keys pass: the thresholds are documented on degenerateKey with
// a false-positive bound; this checks a sample and recomputes the bound.
func TestDegenerateKeyFalsePositiveBound(t *testing.T) {
	for range 20000 {
		if k := RandomKey(); degenerateKey(k) {
			t.Fatalf("random key %x flagged as degenerate", k)
		}
	}
	// P(period p) = 256^-(32-p) for p <= 16; P(<= 8 distinct) <=
	// C(256,8) * (8/256)^32. Their sum must stay under 2^-111.
	bound := new(big.Rat)
	for p := 1; p <= MinKeyBytes/2; p++ {
		bound.Add(bound, new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(256), big.NewInt(int64(MinKeyBytes-p)), nil)))
	}
	d := int64(minKeyDistinct - 1)
	choose := new(big.Int).Binomial(256, d)
	distinct := new(big.Rat).SetFrac(
		new(big.Int).Mul(choose, new(big.Int).Exp(big.NewInt(d), big.NewInt(MinKeyBytes), nil)),
		new(big.Int).Exp(big.NewInt(256), big.NewInt(MinKeyBytes), nil))
	bound.Add(bound, distinct)
	limit := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), 111))
	if bound.Cmp(limit) >= 0 {
		f, _ := bound.Float64()
		t.Fatalf("false-positive bound %g is not below 2^-111", f)
	}
}

// Key errors name the key's position and the expected form, never the key.
func TestKeyErrorsNamePositionAndFormNotKey(t *testing.T) {
	good := EncodeKey(seqBytes(1, 32))
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(seqBytes(9, 32))
	for _, tc := range []struct {
		name, in, position string
		want               error
	}{
		{"not base64 third", good + "," + good + ",***secret***", "key 3 of 3 is not base64", ErrKeyInvalid},
		{"short second", good + "," + EncodeKey(seqBytes(1, 31)), "key 2 of 2 is too short", ErrKeyTooShort},
		{"empty first", "," + good, "key 1 of 2 is empty", ErrKeyInvalid},
		{"webhook secret", whsec, "key 1 of 1 is a whsec_ webhook secret", ErrKeyInvalid},
		{"degenerate second", good + "," + EncodeKey(fixedKey(3)), "key 2 of 2 is degenerate", ErrKeyInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKeyring(tc.in)
			wantErr(t, err, tc.want)
			msg := err.Error()
			if !strings.Contains(msg, tc.position) || !strings.HasPrefix(reasonText(err), tc.position) {
				t.Fatalf("error %q / reason %q does not name %q", msg, reasonText(err), tc.position)
			}
			for _, form := range []string{"comma-separated base64url", "at least 32 random bytes", "ctoken keygen", "whsec_ secrets belong in the webhook config"} {
				if !strings.Contains(msg, form) {
					t.Errorf("error %q does not state %q", msg, form)
				}
			}
			for _, part := range strings.Split(tc.in, ",") {
				if len(part) > 8 && strings.Contains(msg, part[6:]) {
					t.Fatalf("error %q echoes key material", msg)
				}
			}
		})
	}
	_, err := NewKeyring(seqBytes(1, 32), seqBytes(1, 20))
	if !errors.Is(err, ErrKeyTooShort) || !strings.Contains(err.Error(), "key 2 of 2") {
		t.Fatalf("NewKeyring short previous = %v, want ErrKeyTooShort naming key 2 of 2", err)
	}
}

func TestKeyringKeyIDs(t *testing.T) {
	a, b := RandomKey(), RandomKey()
	t.Run("one per key, primary first, derived and stable", func(t *testing.T) {
		kr, err := NewKeyring(a, b)
		if err != nil {
			t.Fatal(err)
		}
		ids := kr.KeyIDs()
		if len(ids) != 2 || ids[0] == ids[1] || len(ids[0]) != 2*keyIDSize {
			t.Fatalf("KeyIDs() = %q", ids)
		}
		sub, err := DeriveKey(a, "ctoken.key-id")
		if err != nil {
			t.Fatal(err)
		}
		if want := hex.EncodeToString(sub[:keyIDSize]); ids[0] != want {
			t.Fatalf("primary id %s, want the HKDF label's first 4 bytes %s", ids[0], want)
		}
		again, _ := NewKeyring(b, a)
		if got := again.KeyIDs(); got[0] != ids[1] || got[1] != ids[0] {
			t.Fatalf("ids depend on position: %q vs %q", got, ids)
		}
		if strings.Contains(ids[0], hex.EncodeToString(a[:keyIDSize])) {
			t.Fatal("the key id shows the key's bytes")
		}
	})
	t.Run("the same key twice is refused", func(t *testing.T) {
		_, err := NewKeyring(a, b, a)
		if !errors.Is(err, ErrKeyInvalid) || !strings.Contains(err.Error(), "key 3 of 3 has the key id of key 1") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("nil and zero rings have none", func(t *testing.T) {
		var nilRing *Keyring
		if nilRing.KeyIDs() != nil {
			t.Fatal("nil ring has ids")
		}
		if got := (&Keyring{}).KeyIDs(); len(got) != 0 {
			t.Fatalf("zero ring ids %q", got)
		}
		if (&Keyring{}).ids.index([]byte{1, 2, 3, 4}) != -1 {
			t.Fatal("zero ring found a key")
		}
	})
}
