package ctoken

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
)

// refGCM is AES-GCM (NIST SP 800-38D) with a 12-byte nonce and a 16-byte
// tag, written out from the AES block function: counter mode and GHASH by
// hand. It is the tests' independent construction of the v1e. wire, apart
// from crypto/cipher's GCM, and it works in Go's FIPS 140-only mode, which
// refuses cipher.NewGCM with a caller-chosen nonce.
type refGCM struct {
	block cipher.Block
	h     [2]uint64 // the hash key E(K, 0^128), big-endian halves
}

func newRefGCM(t testing.TB, key []byte) *refGCM {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	var h [16]byte
	block.Encrypt(h[:], h[:])
	return &refGCM{block: block, h: [2]uint64{binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])}}
}

// mul multiplies x by the hash key in GF(2^128) with GCM's bit order
// (SP 800-38D, algorithm 1).
func (g *refGCM) mul(x [2]uint64) [2]uint64 {
	var z [2]uint64
	v := g.h
	for i := 0; i < 128; i++ {
		if x[i/64]>>(63-i%64)&1 == 1 {
			z[0] ^= v[0]
			z[1] ^= v[1]
		}
		lsb := v[1] & 1
		v[1] = v[1]>>1 | v[0]<<63
		v[0] >>= 1
		if lsb == 1 {
			v[0] ^= 0xe1 << 56
		}
	}
	return z
}

// ghash is GHASH(H, aad || pad || ct || pad || len(aad) || len(ct)).
func (g *refGCM) ghash(aad, ct []byte) [16]byte {
	var y [2]uint64
	absorb := func(data []byte) {
		for len(data) > 0 {
			var blk [16]byte
			n := copy(blk[:], data)
			data = data[n:]
			y[0] ^= binary.BigEndian.Uint64(blk[:8])
			y[1] ^= binary.BigEndian.Uint64(blk[8:])
			y = g.mul(y)
		}
	}
	absorb(aad)
	absorb(ct)
	y[0] ^= uint64(len(aad)) * 8
	y[1] ^= uint64(len(ct)) * 8
	y = g.mul(y)
	var out [16]byte
	binary.BigEndian.PutUint64(out[:8], y[0])
	binary.BigEndian.PutUint64(out[8:], y[1])
	return out
}

// ctr XORs in with the key stream that starts at counter block nonce || ctr.
func (g *refGCM) ctr(nonce []byte, ctr uint32, in []byte) []byte {
	out := make([]byte, len(in))
	var cb, ks [16]byte
	copy(cb[:], nonce)
	for i := 0; i < len(in); i += 16 {
		binary.BigEndian.PutUint32(cb[12:], ctr)
		ctr++
		g.block.Encrypt(ks[:], cb[:])
		subtle.XORBytes(out[i:], in[i:], ks[:])
	}
	return out
}

// seal returns ciphertext || tag.
func (g *refGCM) seal(nonce, plaintext, aad []byte) []byte {
	ct := g.ctr(nonce, 2, plaintext)
	s := g.ghash(aad, ct)
	tag := g.ctr(nonce, 1, s[:])
	return append(ct, tag...)
}

// open checks the tag of ciphertext || tag and returns the plaintext.
func (g *refGCM) open(nonce, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < 16 {
		return nil, errors.New("shorter than a tag")
	}
	ct, tag := sealed[:len(sealed)-16], sealed[len(sealed)-16:]
	s := g.ghash(aad, ct)
	if subtle.ConstantTimeCompare(g.ctr(nonce, 1, s[:]), tag) != 1 {
		return nil, errors.New("message authentication failed")
	}
	return g.ctr(nonce, 2, ct), nil
}

// TestRefGCMKnownAnswer checks the hand-written GCM against the AES-256
// test case 16 of the GCM specification (McGrew and Viega) and, where the
// FIPS 140 mode allows a caller-chosen nonce, against crypto/cipher on
// many lengths; in fips140=only it asserts that crypto/cipher refuses one.
func TestRefGCMKnownAnswer(t *testing.T) {
	h := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	key := h("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
	nonce := h("cafebabefacedbaddecaf888")
	pt := h("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39")
	aad := h("feedfacedeadbeeffeedfacedeadbeefabaddad2")
	want := h("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662" +
		"76fc6ece0f4e1768cddf8853bb2d551b")
	g := newRefGCM(t, key)
	if got := g.seal(nonce, pt, aad); !bytes.Equal(got, want) {
		t.Fatalf("test case 16: %x\nwant %x", got, want)
	}
	if got, err := g.open(nonce, want, aad); err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("open test case 16: %x, %v", got, err)
	}
	bad := append([]byte(nil), want...)
	bad[0] ^= 1
	if _, err := g.open(nonce, bad, aad); err == nil {
		t.Fatal("tampered ciphertext opened")
	}

	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	std, err := cipher.NewGCM(block)
	if fipsOnly() {
		if err == nil {
			t.Fatal("fips140=only: cipher.NewGCM accepted a caller-chosen nonce")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 100; n++ {
		msg := seqBytes(byte(n), n)
		ad := seqBytes(byte(n+7), n%37)
		if got, want := g.seal(nonce, msg, ad), std.Seal(nil, nonce, msg, ad); !bytes.Equal(got, want) {
			t.Fatalf("length %d: %x, crypto/cipher %x", n, got, want)
		}
	}
}

// fipsOnly reports whether the test runs with GODEBUG=fips140=only.
func fipsOnly() bool {
	only := false
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(kv), "fips140="); ok {
			only = v == "only" // the last setting wins
		}
	}
	return only
}

// TestEqualSecret holds equalSecret to subtle.ConstantTimeCompare: every
// length up to 70 against each other (a word and a tail), equal, and
// different in each single byte and bit position.
func TestEqualSecret(t *testing.T) {
	for n := 0; n <= 70; n++ {
		a := make([]byte, n)
		for i := range a {
			a[i] = byte(i*7 + 1)
		}
		check := func(x, y []byte) {
			t.Helper()
			if got, want := equalSecret(x, y), subtle.ConstantTimeCompare(x, y) == 1; got != want {
				t.Fatalf("equalSecret(%x, %x) = %v, want %v", x, y, got, want)
			}
		}
		check(a, bytes.Clone(a))
		check(a, append(bytes.Clone(a), 0))
		check(append(bytes.Clone(a), 0), a)
		for i := range a {
			for bit := range 8 {
				b := bytes.Clone(a)
				b[i] ^= 1 << bit
				check(a, b)
			}
		}
	}
	if !equalSecret(nil, []byte{}) || equalSecret(nil, []byte{0}) {
		t.Fatal("empty inputs")
	}
}

// BenchmarkEqualSecret measures equalSecret on a 64-byte binding tag (what
// a request state's Decode compares) beside subtle.ConstantTimeCompare of
// the same bytes, the code it replaces.
func BenchmarkEqualSecret(b *testing.B) {
	x, y := bytes.Repeat([]byte{0xa5}, 64), bytes.Repeat([]byte{0xa5}, 64)
	var equal bool
	b.Run("equalSecret", func(b *testing.B) {
		cpu := startCPU()
		for b.Loop() {
			equal = equalSecret(x, y)
		}
		cpu.done(b)
	})
	b.Run("subtle", func(b *testing.B) {
		cpu := startCPU()
		for b.Loop() {
			equal = subtle.ConstantTimeCompare(x, y) == 1
		}
		cpu.done(b)
	})
	if !equal {
		b.Fatal("equal tags compared unequal")
	}
}
