package ctoken

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"

	strictb64 "github.com/ctoken/ctoken/internal/b64"
	"github.com/ctoken/ctoken/internal/mac"
)

// The envelope every token of this package shares: its framing (one strict
// base64url spelling), the subkeys it is sealed under (one per use of a
// [Keyring], derived with HKDF-SHA256), and the constant-time checks that
// open it. Cursors, request state and one-time tokens differ only in what
// they put inside.

// b64 is the framing of every token: base64url without padding through the
// module's one strict decoder (internal/b64), which refuses padding, CR and
// LF, any other character outside the alphabet and non-zero unused trailing
// bits, so every token has exactly one spelling. bench_test.go uses this
// name too.
var b64 = strictb64.URL

// Subkeys: every use of a [Keyring] derives its own subkey of every key of
// the ring with HKDF-SHA256 under its own label (see [DeriveKey]), and holds
// them here as a ring, primary first.

// macSize is the length of an HMAC-SHA256 tag.
const macSize = mac.Size

// macRing is the HMAC-SHA256 subkey of every key of a [Keyring], primary
// first, with pooled keyed states (internal/mac).
type macRing []*mac.Key

// newMACRing returns the ring of kr's subkeys for label, or nil if any
// subkey cannot be derived or keyed; callers refuse a ring shorter than
// kr.Len() with [ErrNoKey].
func newMACRing(kr *Keyring, label string) macRing {
	subs := kr.derive(label)
	r := make(macRing, len(subs))
	for i, s := range subs {
		k, err := mac.New(s)
		if err != nil {
			return nil
		}
		r[i] = k
	}
	return r
}

// verify reports the index of the key whose MAC of msg equals tag, comparing
// in constant time, or -1.
func (r macRing) verify(msg, tag []byte) int {
	for i, k := range r {
		if k.Equal(msg, tag) {
			return i
		}
	}
	return -1
}

// aeadRing is the AES-256-GCM subkey of every key of a [Keyring], primary
// first, each from cipher.NewGCMWithRandomNonce: Seal draws a fresh 12-byte
// nonce and writes nonce || ciphertext || tag, Open reads that layout (its
// nonce argument is nil), which is also the form Go's FIPS 140-3 mode
// allows. cipher.AEAD values from crypto/cipher hold no per-call state and
// are safe for concurrent use.
type aeadRing []cipher.AEAD

func newAEADRing(kr *Keyring, label string) (aeadRing, error) {
	subs := kr.derive(label)
	r := make(aeadRing, len(subs))
	for i, s := range subs {
		block, err := aes.NewCipher(s)
		if err != nil {
			return nil, err
		}
		if r[i], err = cipher.NewGCMWithRandomNonce(block); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// namedMACs is the HMAC-SHA256 subkey for one label of every key of a ring
// beside the ring's key ids (ids[i] names the key of macs[i]): what a token
// that names its key is signed and verified with.
type namedMACs struct {
	macs macRing
	ids  keyIDs
}

// deriveNamedMACs returns kr's subkeys for label and its key ids, or false
// (also for a ring whose keys have no ids: one not made by [NewKeyring]).
func deriveNamedMACs(kr *Keyring, label string) (namedMACs, bool) {
	macs, ok := deriveMACRing(kr, label)
	if !ok || len(kr.ids) != len(macs) {
		return namedMACs{}, false
	}
	return namedMACs{macs: macs, ids: kr.ids}, true
}

// deriveMACRing returns kr's HMAC-SHA256 subkeys for label, one per key of
// kr, or false when kr is empty or a subkey cannot be derived.
func deriveMACRing(kr *Keyring, label string) (macRing, bool) {
	r := newMACRing(kr, label)
	if len(r) != kr.Len() || len(r) == 0 {
		return nil, false
	}
	return r, true
}

// equalSecret reports whether secret and want are equal, in time that
// depends on their lengths only: every comparison of a token's bound values
// (session, arguments fingerprint, binding tag) with what the server
// expects goes through it. (MAC tags are compared by [macRing.verify].)
//
// It is subtle.ConstantTimeCompare read 8 bytes at a time (that one reads a
// byte at a time, and a 64-byte binding tag is compared on every request
// state Decode): 64 bytes in 11 cpu-ns instead of 39 (BenchmarkEqualSecret,
// AMD EPYC, 2026-11-26), 5 % of a Decode. TestEqualSecret holds the two to the same answers.
func equalSecret(secret, want []byte) bool {
	if len(secret) != len(want) {
		return false
	}
	var v uint64
	i := 0
	for ; i+8 <= len(want); i += 8 {
		v |= binary.LittleEndian.Uint64(secret[i:]) ^ binary.LittleEndian.Uint64(want[i:])
	}
	for ; i < len(want); i++ {
		v |= uint64(secret[i] ^ want[i])
	}
	v |= v >> 32
	v |= v >> 16
	v |= v >> 8
	return subtle.ConstantTimeByteEq(uint8(v), 0) == 1
}
