package webhook

import (
	"errors"
	"strings"
	"testing"

	"crypto/ed25519"
	"crypto/fips140"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"math/big"
	"os"
	"os/exec"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
)

// TestEd25519 pins the StandardWebhooksEd25519 scheme.
func TestEd25519(t *testing.T) {
	// A delivery signed by several of the verifier's Ed25519 keys (a sender
	// signing with both during a rotation) is reported as verified by the
	// first of them in the verifier's order.
	t.Run("reports the first matching key", func(t *testing.T) {
		clk := newStepClock()
		log := &observetest.Recorder{}
		s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv, edPriv2}, Now: clk.Now})
		h := signed(t, s, "msg_1", "{}")
		for _, tc := range []struct {
			pubs []string
			want observe.KeyPosition
		}{
			{[]string{edPub, edPub2}, observe.KeyPrimary},
			{[]string{edPub2, edPub}, observe.KeyPrimary},
			{[]string{edPub, edPub, edPub2}, observe.KeyPrimary},
		} {
			v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: tc.pubs, Now: clk.Now, Observer: log})
			if _, err := v.Verify(h, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if e := log.Only(t, "verify"); e != webhookEvent(observe.OutcomeVerified, observe.ReasonNone, tc.want) {
				t.Fatalf("keys %d: event %+v, want verified by %v", len(tc.pubs), e, tc.want)
			}
		}
	})

	// An Ed25519 signature header of exactly MaxSignatureHeaderBytes is
	// parsed; one byte more is refused.
	t.Run("signature header at cap accepted and one over refused", func(t *testing.T) {
		clk := newStepClock()
		s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
		v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
		h := signed(t, s, "msg_1", "{}")
		at := h.Get(HeaderStandardSignature) + strings.Repeat(" ", MaxSignatureHeaderBytes-len(h.Get(HeaderStandardSignature)))
		h.Set(HeaderStandardSignature, at)
		if _, err := v.Verify(h, []byte("{}")); err != nil {
			t.Fatalf("%d-byte signature header: %v", len(at), err)
		}
		h.Set(HeaderStandardSignature, at+" ")
		if _, err := v.Verify(h, []byte("{}")); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
			t.Fatalf("%d-byte signature header: %v", len(at)+1, err)
		}
	})

	// Only an entry of exactly "v1a," and the 88-character canonical base64 of
	// 64 bytes is an Ed25519 signature: the genuine signature under another
	// version tag, or with a character more, is not, and neither is an entry
	// too short to hold a version. Each such entry is skipped, and a genuine
	// entry after it is still found.
	t.Run("only reads v1a entries of the exact length", func(t *testing.T) {
		clk := newStepClock()
		s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
		v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
		h := signed(t, s, "msg_1", "{}")
		genuine := h.Get(HeaderStandardSignature)
		sig, ok := strings.CutPrefix(genuine, "v1a,")
		if !ok || len(sig) != ed25519SigTextLen {
			t.Fatalf("test premise: %q", genuine)
		}
		for _, entry := range []string{
			"v1b," + sig,
			"v1," + sig + "A",
			"v1a," + sig + "A",
			"v1a," + sig + "=",
			"v1a," + sig[:len(sig)-1],
			"v1a," + strings.Repeat("!", ed25519SigTextLen),           // not base64
			"v1a," + strings.Repeat("A", ed25519SigTextLen),           // 66 bytes
			"v1a," + strings.Repeat("A", ed25519SigTextLen-3) + "B==", // non-zero trailing bits
			"v1",
			"v",
		} {
			h.Set(HeaderStandardSignature, entry)
			if _, err := v.Verify(h, []byte("{}")); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
				t.Fatalf("%q: %v, want ErrSignature (signature header malformed)", entry, err)
			}
			h.Set(HeaderStandardSignature, entry+" "+genuine)
			if _, err := v.Verify(h, []byte("{}")); err != nil {
				t.Fatalf("%q then the genuine entry: %v", entry, err)
			}
		}
	})

	t.Run("verifier refuses small-order keys", func(t *testing.T) {
		for name, h := range smallOrderKeys {
			key := mustHex(t, h)
			if name == "identity" || name == "order 4 (all zero)" {
				// The reviewer's forgery: crypto/ed25519 itself accepts one of
				// 16 such signatures on a chosen message.
				forged := false
				for i := range 16 {
					forged = forged || ed25519.Verify(ed25519.PublicKey(key), []byte("msg_forged.1.{}"), smallOrderSignature(t, i))
				}
				if !forged {
					t.Fatalf("%s: no forgery verifies in crypto/ed25519; the test lost its point", name)
				}
			}
			secret := Ed25519PublicKeyPrefix + base64.StdEncoding.EncodeToString(key)
			_, err := NewVerifier(Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub, secret}})
			if !errors.Is(err, ErrSecretInvalid) || !errors.Is(err, errEdKeyOrder) && !errors.Is(err, errEdKeyEncode) {
				t.Errorf("%s: NewVerifier = %v, want ErrSecretInvalid for a small-order key", name, err)
				continue
			}
			if !strings.Contains(err.Error(), "secret 2 of 2") {
				t.Errorf("%s: error %q does not name the position", name, err)
			}
		}
	})

	t.Run("verifier refuses non-canonical keys", func(t *testing.T) {
		for name, h := range nonCanonicalKeys {
			secret := Ed25519PublicKeyPrefix + base64.StdEncoding.EncodeToString(mustHex(t, h))
			_, err := NewVerifier(Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{secret}})
			if !errors.Is(err, errEdKeyEncode) || !strings.Contains(err.Error(), "secret 1 of 1") {
				t.Errorf("%s: NewVerifier = %v, want the non-canonical refusal naming secret 1 of 1", name, err)
			}
		}
	})

	t.Run("check accepts generated keys", func(t *testing.T) {
		for i := range 64 {
			seed := make([]byte, 32)
			seed[0], seed[31] = byte(i), byte(3*i+1)
			pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
			if err := checkEd25519PublicKey(pub); err != nil {
				t.Fatalf("key %x of seed %d refused: %v", []byte(pub), i, err)
			}
		}
	})

	// At most MaxSignatures v1a entries are verified: the genuine one in
	// sixteenth place is found, in seventeenth place it is not looked at.
	t.Run("verifies at most MaxSignatures entries", func(t *testing.T) {
		clk := newStepClock()
		s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
		forger := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv2}, Now: clk.Now})
		v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
		genuine := signed(t, s, "msg_1", "{}").Get(HeaderStandardSignature)
		forged := signed(t, forger, "msg_1", "{}").Get(HeaderStandardSignature)
		for _, tc := range []struct {
			before int
			want   error
		}{{MaxSignatures - 1, nil}, {MaxSignatures, ErrSignature}} {
			h := signed(t, s, "msg_1", "{}")
			h.Set(HeaderStandardSignature, strings.Repeat(forged+" ", tc.before)+genuine)
			if _, err := v.Verify(h, []byte("{}")); !errors.Is(err, tc.want) {
				t.Fatalf("genuine entry after %d forged ones: %v, want %v", tc.before, err, tc.want)
			}
		}
	})

	// Plain Ed25519 is approved in FIPS 140-3 mode: the scheme signs and
	// verifies under GODEBUG=fips140=only. The check runs in a child process,
	// since the mode is fixed at start-up.
	t.Run("scheme works under FIPS 140-only", func(t *testing.T) {
		if os.Getenv("CTOKEN_FIPS_CHILD") == "1" {
			if !fips140.Enabled() {
				t.Fatal("child not in FIPS 140-3 mode")
			}
			clk := newStepClock()
			s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
			v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
			if _, err := v.Verify(signed(t, s, "msg_1", "{}"), []byte("{}")); err != nil {
				t.Fatal(err)
			}
			t.Log("ed25519 ok under fips140=only")
			return
		}
		if testing.Short() {
			t.Skip("starts a child process")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestEd25519/scheme works under FIPS 140-only$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "CTOKEN_FIPS_CHILD=1", "GODEBUG=fips140=only")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ed25519 ok under fips140=only") {
			t.Fatalf("child under GODEBUG=fips140=only: %v\n%s", err, out)
		}
	})

	// A whpk_ key of 32 bytes that is not a point of the curve would make
	// every delivery fail as forged; it is refused at construction instead.
	t.Run("verifier refuses a public key off the curve", func(t *testing.T) {
		var off []byte
		for i := 0; off == nil; i++ {
			k := make([]byte, 32)
			k[0] = byte(i)
			err := ed25519.VerifyWithOptions(ed25519.PublicKey(k), []byte("m"), make([]byte, 64), &ed25519.Options{})
			if err != nil && strings.Contains(err.Error(), "public key") {
				off = k
			}
		}
		secret := Ed25519PublicKeyPrefix + base64.StdEncoding.EncodeToString(off)
		v, err := NewVerifier(Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub, secret}})
		if v != nil || !errors.Is(err, ErrSecretInvalid) || Reason(err) != "Ed25519 public key is not a point of the curve" || !strings.Contains(err.Error(), "(secret 2 of 2)") {
			t.Fatalf("NewVerifier = %v, %v", v, err)
		}
	})

	// A v1a signer with two private keys (a rotation) writes one entry per
	// key; a verifier holding either public key accepts the delivery.
	t.Run("signer signs with every key for rotation", func(t *testing.T) {
		clk := newStepClock()
		s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv, edPriv2}, Now: clk.Now})
		h := signed(t, s, "msg_1", "{}")
		if entries := strings.Fields(h.Get(HeaderStandardSignature)); len(entries) != 2 || !strings.HasPrefix(entries[1], "v1a,") {
			t.Fatalf("signature header %q", h.Get(HeaderStandardSignature))
		}
		for _, pubs := range [][]string{{edPub}, {edPub2}, {edPub2, edPub}} {
			v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: pubs, Now: clk.Now})
			if _, err := v.Verify(h, []byte("{}")); err != nil {
				t.Fatalf("verifier with %d keys: %v", len(pubs), err)
			}
		}
	})
}

// smallOrderSignature is an Ed25519 signature R || S with R = [S]B: it
// verifies on every message under a public key of small order, where the
// term [k]A vanishes (cofactored or not, since 8·A is the identity and A
// has order dividing 8, so under a key of order 4 about one seed in four
// gives a forgery for a given message).
func smallOrderSignature(t *testing.T, i int) []byte {
	t.Helper()
	L, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	seed := make([]byte, 32)
	seed[0], seed[1] = byte(i+1), 0x5a
	R := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	h := sha512.Sum512(seed)
	s := h[:32]
	s[0] &= 248
	s[31] &= 127
	s[31] |= 64
	le := make([]byte, 32)
	for j := range s {
		le[31-j] = s[j]
	}
	S := new(big.Int).Mod(new(big.Int).SetBytes(le), L).FillBytes(make([]byte, 32))
	for j := 0; j < 16; j++ {
		S[j], S[31-j] = S[31-j], S[j]
	}
	return append(append([]byte{}, R...), S...)
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("bad test key %q", s)
	}
	return b
}

// The eight points of order dividing 8 have these canonical encodings
// (identity; order 2; order 4 with both signs of x; order 8, two values of
// y with both signs of x). Encodings with y >= p (y + p < 2^255 for y <= 18)
// or a sign bit on x = 0 are their non-canonical variants; crypto/ed25519
// takes those too.
var (
	smallOrderKeys = map[string]string{
		"identity":              "0100000000000000000000000000000000000000000000000000000000000000",
		"order 2 (y=-1)":        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"order 4 (all zero)":    "0000000000000000000000000000000000000000000000000000000000000000",
		"order 4, x negative":   "0000000000000000000000000000000000000000000000000000000000000080",
		"order 8 a":             "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"order 8 a, x negative": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		"order 8 b":             "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
		"order 8 b, x negative": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
	}
	nonCanonicalKeys = map[string]string{
		"identity, x=0 signed": "0100000000000000000000000000000000000000000000000000000000000080",
		"order 2, x=0 signed":  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
		"y = p (0 + p)":        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"y = p + 1 (identity)": "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"y = p + 1, signed":    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
		"y = 2^255 - 1":        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	}
)
