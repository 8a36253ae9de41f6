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
// lock shared between goroutines beyond sync.Pool's per-P caches.
type macKey struct {
	pool sync.Pool
}

func newMACKey(key []byte) *macKey {
	k := append([]byte(nil), key...)
	m := &macKey{}
	m.pool.New = func() any { return hmac.New(sha256.New, k) }
	return m
}

// sum appends HMAC-SHA256(key, msg) to dst.
func (m *macKey) sum(dst, msg []byte) []byte {
	h := m.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	dst = h.Sum(dst)
	m.pool.Put(h)
	return dst
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
	var buf [macSize]byte
	for i, k := range r {
		if hmac.Equal(k.sum(buf[:0], msg), tag) {
			return i
		}
	}
	return -1
}

// aeadRing is the AES-256-GCM subkey of every key of a Keyring, primary
// first. cipher.AEAD values from crypto/cipher hold no per-call state and are
// safe for concurrent use.
type aeadRing []cipher.AEAD

func newAEADRing(kr *Keyring, label string) (aeadRing, error) {
	subs := kr.derive(label)
	r := make(aeadRing, len(subs))
	for i, s := range subs {
		block, err := aes.NewCipher(s)
		if err != nil {
			return nil, err
		}
		if r[i], err = cipher.NewGCM(block); err != nil {
			return nil, err
		}
	}
	return r, nil
}
