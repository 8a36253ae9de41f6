package ctoken

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"
)

// b64 is the framing of every token: base64url without padding, strict (a
// second spelling of the same bytes through unused trailing bits is refused).
var b64 = base64.RawURLEncoding.Strict()

const macSize = sha256.Size

// macKey is one HMAC-SHA256 subkey. Keyed hash states are pooled, so the
// key schedule is paid once per state rather than once per token, with no
// lock shared between goroutines beyond sync.Pool's per-P caches. A state is
// owned by one goroutine between Get and Put, so sharing is race-free.
type macKey struct {
	pool sync.Pool // of *macState
}

// macState is a keyed HMAC state and the buffer its sums are written to.
// The buffer lives with the state (on the heap) because a slice handed to
// a hash.Hash method escapes: a caller's stack buffer would be moved to the
// heap on every call.
type macState struct {
	h   hash.Hash
	out [macSize]byte
}

func newMACKey(key []byte) *macKey {
	k := append([]byte(nil), key...)
	m := &macKey{}
	m.pool.New = func() any { return &macState{h: hmac.New(sha256.New, k)} }
	return m
}

// compute returns a state holding HMAC-SHA256(key, msg) in its out buffer.
// The caller must hand it back with m.pool.Put. msg escapes (it is passed
// to a hash.Hash), so hot paths pass pooled rather than stack memory.
func (m *macKey) compute(msg []byte) *macState {
	st := m.pool.Get().(*macState)
	st.h.Reset()
	st.h.Write(msg)
	st.h.Sum(st.out[:0])
	return st
}

// sum appends HMAC-SHA256(key, msg) to dst. dst does not escape.
func (m *macKey) sum(dst, msg []byte) []byte {
	st := m.compute(msg)
	dst = append(dst, st.out[:]...)
	m.pool.Put(st)
	return dst
}

// equal reports, in constant time, whether HMAC-SHA256(key, msg) is tag.
func (m *macKey) equal(msg, tag []byte) bool {
	st := m.compute(msg)
	ok := hmac.Equal(st.out[:], tag)
	m.pool.Put(st)
	return ok
}

// macRing is the MAC subkey of every key of a Keyring, primary first.
type macRing []*macKey

func newMACRing(kr *Keyring, label string) macRing {
	subs := kr.derive(label)
	r := make(macRing, len(subs))
	for i, s := range subs {
		r[i] = newMACKey(s)
	}
	return r
}

// verify reports the index of the key whose MAC of msg equals tag, comparing
// in constant time, or -1.
func (r macRing) verify(msg, tag []byte) int {
	for i, k := range r {
		if k.equal(msg, tag) {
			return i
		}
	}
	return -1
}

// aeadRing is the AES-256-GCM subkey of every key of a Keyring, primary
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
