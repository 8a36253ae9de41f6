package xaes

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha3"
	"encoding/hex"
	"testing"
)

// sealWithNonce seals under the caller's 24-byte nonce, as the
// specification's vectors do. Go's FIPS 140-only mode refuses GCM with a
// caller's nonce, so it reports false there.
func sealWithNonce(t testing.TB, a *AEAD, nonce, plaintext, aad []byte) ([]byte, bool) {
	kx := a.deriveKey(nonce[:12])
	block, err := aes.NewCipher(kx[:])
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		return nil, false // FIPS 140-only mode
	}
	return g.Seal(append([]byte(nil), nonce...), nonce[12:], plaintext, aad), true
}

func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVectors are the C2SP XAES-256-GCM specification's two vectors: Open
// (the construction this package uses in production, FIPS 140-only mode
// included) and a seal under the vector's nonce give the published bytes.
func TestVectors(t *testing.T) {
	nonce := []byte("ABCDEFGHIJKLMNOPQRSTUVWX")
	for _, tc := range []struct {
		name       string
		key        byte
		aad        string
		ciphertext string
	}{
		{"no additional data", 0x01, "", "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271"},
		{"with additional data", 0x03, "c2sp.org/XAES-256-GCM", "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(bytes.Repeat([]byte{tc.key}, KeySize))
			if err != nil {
				t.Fatal(err)
			}
			sealed := append(append([]byte(nil), nonce...), unhex(t, tc.ciphertext)...)
			pt, err := a.Open(nil, sealed, []byte(tc.aad))
			if err != nil || string(pt) != "XAES-256-GCM" {
				t.Fatalf("Open = %q, %v", pt, err)
			}
			if got, ok := sealWithNonce(t, a, nonce, []byte("XAES-256-GCM"), []byte(tc.aad)); ok && !bytes.Equal(got, sealed) {
				t.Fatalf("seal = %x, want %x", got, sealed)
			}
			for i := range sealed {
				bad := append([]byte(nil), sealed...)
				bad[i] ^= 1
				if _, err := a.Open(nil, bad, []byte(tc.aad)); err == nil {
					t.Fatalf("Open accepted a flip of byte %d", i)
				}
			}
			if _, err := a.Open(nil, sealed, []byte(tc.aad+"x")); err == nil {
				t.Fatal("Open accepted other additional data")
			}
		})
	}
}

// TestAccumulated is the specification's accumulated vector: 10 000
// messages of keys, nonces, plaintexts and additional data drawn from
// SHAKE-128, their ciphertexts hashed with SHAKE-128.
func TestAccumulated(t *testing.T) {
	s, d := sha3.NewSHAKE128(), sha3.NewSHAKE128()
	for range 10_000 {
		key, nonce, n := make([]byte, KeySize), make([]byte, NonceSize), make([]byte, 1)
		s.Read(key)
		s.Read(nonce)
		s.Read(n)
		plaintext := make([]byte, n[0])
		s.Read(plaintext)
		s.Read(n)
		aad := make([]byte, n[0])
		s.Read(aad)
		a, err := New(key)
		if err != nil {
			t.Fatal(err)
		}
		sealed, ok := sealWithNonce(t, a, nonce, plaintext, aad)
		if !ok {
			t.Skip("FIPS 140-only mode: GCM with a chosen nonce is refused (TestVectors covers Open)")
		}
		back, err := a.Open(nil, sealed, aad)
		if err != nil || !bytes.Equal(back, plaintext) {
			t.Fatalf("round trip failed: %v", err)
		}
		d.Write(sealed[NonceSize:])
	}
	sum := make([]byte, 32)
	d.Read(sum)
	if got, want := hex.EncodeToString(sum), "e6b9edf2df6cec60c8cbd864e2211b597fb69a529160cd040d56c0c210081939"; got != want {
		t.Fatalf("accumulated hash %s, want %s", got, want)
	}
}

func TestSealOpen(t *testing.T) {
	a, err := New(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("round trip with fresh nonces", func(t *testing.T) {
		x := a.Seal([]byte("hdr"), []byte("state"), []byte("aad"))
		y := a.Seal(nil, []byte("state"), []byte("aad"))
		if len(x) != 3+len("state")+Overhead || bytes.Equal(x[3:3+NonceSize], y[:NonceSize]) {
			t.Fatalf("layout or nonce reuse: %x / %x", x, y)
		}
		pt, err := a.Open([]byte("p:"), x[3:], []byte("aad"))
		if err != nil || string(pt) != "p:state" {
			t.Fatalf("Open = %q, %v", pt, err)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		for _, n := range []int{0, 1, Overhead - 1} {
			if _, err := a.Open(nil, make([]byte, n), nil); err == nil {
				t.Fatalf("Open accepted %d bytes", n)
			}
		}
		if _, err := New(make([]byte, 31)); err == nil {
			t.Fatal("New accepted a 31-byte key")
		}
		other, _ := New(bytes.Repeat([]byte{8}, KeySize))
		x := a.Seal(nil, []byte("state"), nil)
		if _, err := other.Open(nil, x, nil); err == nil {
			t.Fatal("another key opened it")
		}
	})
}

// TestPrefixes: Seal keeps a nonce prefix (and its derived key) for
// prefixSeals messages and then draws another; Open opens the messages of
// any number of prefixes, cached or not, and its cache changes no result.
func TestPrefixes(t *testing.T) {
	a, err := New(bytes.Repeat([]byte{9}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if a.prefixSeals != PrefixSeals {
		t.Fatalf("prefixSeals = %d, want PrefixSeals", a.prefixSeals)
	}
	a.prefixSeals = 3
	var sealed [][]byte
	prefixes := map[string]int{}
	for i := range 3*openCacheSize + 2 {
		m := a.Seal(nil, []byte{byte(i)}, []byte("aad"))
		sealed = append(sealed, m)
		prefixes[string(m[:12])]++
		if i > 0 && bytes.Equal(m[12:NonceSize], sealed[i-1][12:NonceSize]) {
			t.Fatal("the random half of the nonce repeated")
		}
	}
	for p, n := range prefixes {
		if n > 3 {
			t.Fatalf("prefix %x sealed %d messages, over prefixSeals", p, n)
		}
	}
	if len(prefixes) < 3*openCacheSize/3 {
		t.Fatalf("%d prefixes for %d messages", len(prefixes), len(sealed))
	}
	// A fresh AEAD of the same key (no cache) and this one (a cache that
	// holds only some of the prefixes) open every message, in any order.
	fresh, _ := New(bytes.Repeat([]byte{9}, KeySize))
	for _, opener := range []*AEAD{a, fresh} {
		for i := len(sealed) - 1; i >= 0; i-- {
			pt, err := opener.Open(nil, sealed[i], []byte("aad"))
			if err != nil || !bytes.Equal(pt, []byte{byte(i)}) {
				t.Fatalf("message %d: %x, %v", i, pt, err)
			}
			bad := append([]byte(nil), sealed[i]...)
			bad[len(bad)-1] ^= 1
			if _, err := opener.Open(nil, bad, []byte("aad")); err == nil {
				t.Fatalf("message %d opened with a flipped tag", i)
			}
		}
	}
}

// TestOpenCachesOnlyWhatOpened: a message under a prefix Open has not seen
// is opened with a derived key, which is cached once it opened; forgeries
// under made-up prefixes leave the cache as it was.
func TestOpenCachesOnlyWhatOpened(t *testing.T) {
	sealer, _ := New(bytes.Repeat([]byte{4}, KeySize))
	opener, _ := New(bytes.Repeat([]byte{4}, KeySize))
	m := sealer.Seal(nil, []byte("state"), nil)
	if opener.cached(m[:12]) != nil {
		t.Fatal("a prefix is cached before any Open")
	}
	if _, err := opener.Open(nil, m, nil); err != nil {
		t.Fatal(err)
	}
	if opener.cached(m[:12]) == nil {
		t.Fatal("the prefix of a message that opened is not cached")
	}
	for i := range 2 * openCacheSize {
		forged := append([]byte(nil), m...)
		forged[0] ^= byte(i + 1)
		if _, err := opener.Open(nil, forged, nil); err == nil {
			t.Fatal("a forged prefix opened")
		}
		if opener.cached(forged[:12]) != nil {
			t.Fatalf("forgery %d's prefix was cached", i)
		}
	}
	if opener.cached(m[:12]) == nil {
		t.Fatal("forgeries evicted a prefix that opened")
	}
}

// TestConcurrentSealOpen runs Seal and Open from several goroutines across
// prefix changes (for the race detector).
func TestConcurrentSealOpen(t *testing.T) {
	a, _ := New(bytes.Repeat([]byte{5}, KeySize))
	a.prefixSeals = 5
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 200 {
				pt := []byte{byte(g), byte(i)}
				m := a.Seal(nil, pt, nil)
				back, err := a.Open(nil, m, nil)
				if err != nil || !bytes.Equal(back, pt) {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzOpen: only what was sealed opens. The seed is sealed in each process
// (the fuzzing engine's workers seal their own, under other nonces), so an
// input that opens must be a message sealed with the seed's plaintext and
// additional data: any other plaintext or additional data is a forgery.
func FuzzOpen(f *testing.F) {
	a, err := New(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(a.Seal(nil, []byte("state"), []byte("aad")), []byte("aad"))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, sealed, aad []byte) {
		pt, err := a.Open(nil, sealed, aad)
		if err == nil && (string(pt) != "state" || string(aad) != "aad" || len(sealed) != len("state")+Overhead) {
			t.Fatalf("opened a forgery: %x", sealed)
		}
		if err != nil && pt != nil {
			t.Fatal("partial plaintext on failure")
		}
	})
}

// BenchmarkSeal and BenchmarkOpen: XAES-256-GCM under a kept prefix (what
// Seal does; "derive" derives K_x for every message, the construction
// without the prefix) beside AES-256-GCM with random 96-bit nonces, on 64
// bytes with 48 bytes of additional data.
func BenchmarkSeal(b *testing.B) {
	a, _ := New(bytes.Repeat([]byte{7}, KeySize))
	pt, aad := make([]byte, 64), make([]byte, 48)
	dst := make([]byte, 0, 256)
	b.Run("xaes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a.Seal(dst, pt, aad)
		}
	})
	b.Run("xaes-derive", func(b *testing.B) {
		b.ReportAllocs()
		var n12 [12]byte
		for b.Loop() {
			a.gcm(n12[:]).Seal(dst, nil, pt, aad)
		}
	})
	b.Run("aes-gcm", func(b *testing.B) {
		block, _ := aes.NewCipher(bytes.Repeat([]byte{7}, KeySize))
		g, _ := cipher.NewGCMWithRandomNonce(block)
		b.ReportAllocs()
		for b.Loop() {
			g.Seal(dst, nil, pt, aad)
		}
	})
}

func BenchmarkOpen(b *testing.B) {
	a, _ := New(bytes.Repeat([]byte{7}, KeySize))
	aad := make([]byte, 48)
	m := a.Seal(nil, make([]byte, 64), aad)
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Open(dst, m, aad); err != nil {
			b.Fatal(err)
		}
	}
}
