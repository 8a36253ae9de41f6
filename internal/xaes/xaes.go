// Package xaes is XAES-256-GCM (C2SP, https://c2sp.org/XAES-256-GCM): AES-256-GCM
// with a 192-bit nonce; the AES-256 key is derived from the key and the
// nonce's first 12 bytes with the NIST SP 800-108r1 counter-mode KDF over
// CMAC-AES-256, and the last 12 bytes are the GCM nonce. Where AES-256-GCM's
// random 96-bit nonces are limited to 2^32 messages per key by SP 800-38D,
// XAES-256-GCM's are not limited in practice (the bound of this package's
// nonces is below). The CMAC and the KDF are written here from AES block
// encryptions (crypto/aes); only AES and GCM come from the standard
// library's FIPS 140-3 module.
//
// The sealed layout is the specification's nonce || ciphertext || tag.
// Seal draws the first 12 bytes of the nonce itself and lets
// cipher.NewGCMWithRandomNonce draw the last 12, so the whole construction
// uses only what Go's FIPS 140-3 mode allows (AES block encryption and GCM
// with random nonces).
//
// Deriving K_x costs a key schedule and a GCM set-up per message (about
// 0.5 µs and 3 allocations, BenchmarkSeal/xaes-derive). So that a seal costs about what AES-256-GCM
// costs, an [AEAD] keeps the first 12 bytes of its nonces, and K_x with
// them, for [PrefixSeals] seals, then draws a new prefix; the last 12 bytes
// stay random per message. Every message is still an XAES-256-GCM message
// with a 24-byte nonce (any implementation opens it). The bound: under one
// prefix, 2^16 random 96-bit GCM nonces repeat with probability below
// 2^-65; 2^46 seals (100 000 a second for 22 years, a whole fleet on one
// key) use 2^30 prefixes, so a repeat under any of them has probability
// below 2^-35, and two prefixes coincide with probability below 2^-36.
// Open keeps the K_x of the last [openCacheSize] prefixes under which a
// message opened (other instances' seals); a miss derives it.
//
// It imports only the standard library.
package xaes

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"sync/atomic"
)

const (
	// KeySize is the length of a key.
	KeySize = 32
	// NonceSize is the length of the nonce in front of every sealed message.
	NonceSize = 24
	// Overhead is the length of the nonce and the GCM tag together.
	Overhead = NonceSize + 16
	// PrefixSeals is how many messages Seal seals under one nonce prefix
	// (and so one derived key) before it draws the next.
	PrefixSeals = 1 << 16
	// openCacheSize is how many derived keys Open keeps.
	openCacheSize = 8
)

// AEAD is an XAES-256-GCM key. It is safe for concurrent use.
type AEAD struct {
	block cipher.Block
	k1    [aes.BlockSize]byte // the CMAC subkey K1

	// sealing is the prefix Seal uses now; nil before the first Seal.
	sealing atomic.Pointer[derived]
	// opened are the derived keys of recent prefixes Open saw, filled
	// round robin (next).
	opened [openCacheSize]atomic.Pointer[derived]
	next   atomic.Uint32
	// prefixSeals is PrefixSeals; a test lowers it.
	prefixSeals uint64
}

// derived is the GCM of one nonce prefix.
type derived struct {
	n12   [12]byte
	gcm   cipher.AEAD
	seals atomic.Uint64
}

var errOpen = errors.New("xaes: message authentication failed")

// New returns the XAES-256-GCM key for key, which must be [KeySize] bytes.
func New(key []byte) (*AEAD, error) {
	if len(key) != KeySize {
		return nil, errors.New("xaes: key is not 32 bytes")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	a := &AEAD{block: block, prefixSeals: PrefixSeals}
	// L = AES-256_K(0^128); K1 = L << 1, xor 0x87 into the last byte when
	// the bit shifted out was set.
	var l [aes.BlockSize]byte
	block.Encrypt(l[:], l[:])
	msb := l[0] >> 7
	for i := range aes.BlockSize - 1 {
		a.k1[i] = l[i]<<1 | l[i+1]>>7
	}
	a.k1[aes.BlockSize-1] = l[aes.BlockSize-1]<<1 ^ msb*0x87
	return a, nil
}

// gcm returns AES-256-GCM (random 96-bit nonces) under the key derived from
// the first 12 bytes of the nonce: K_x = AES_K(M1 ^ K1) || AES_K(M2 ^ K1),
// M_i = 0x00 || i || "X" || 0x00 || n12. Neither constructor can fail for a
// 32-byte key and the AES block, in FIPS 140-only mode too (TestVectors
// runs there), so a failure is a broken standard library: it panics.
func (a *AEAD) gcm(n12 []byte) cipher.AEAD {
	kx := a.deriveKey(n12)
	block, err := aes.NewCipher(kx[:])
	if err != nil {
		panic("xaes: " + err.Error())
	}
	g, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		panic("xaes: " + err.Error())
	}
	return g
}

// deriveKey returns K_x for the first 12 bytes of a nonce.
func (a *AEAD) deriveKey(n12 []byte) (kx [KeySize]byte) {
	m := kx[:aes.BlockSize]
	m[0], m[1], m[2], m[3] = 0, 1, 'X', 0
	copy(m[4:], n12)
	m2 := kx[aes.BlockSize:]
	copy(m2, m)
	m2[1] = 2
	for i := range aes.BlockSize {
		m[i] ^= a.k1[i]
		m2[i] ^= a.k1[i]
	}
	a.block.Encrypt(m, m)
	a.block.Encrypt(m2, m2)
	return kx
}

// Seal appends a 24-byte nonce (the current prefix, then 12 fresh random
// bytes), the encryption of plaintext and the tag authenticating it and
// additionalData to dst, and returns the result. dst and plaintext must not
// overlap. (crypto/rand.Read does not return an error: since Go 1.24 it
// crashes the program instead.)
func (a *AEAD) Seal(dst, plaintext, additionalData []byte) []byte {
	d := a.sealing.Load()
	for d == nil || d.seals.Add(1) > a.prefixSeals {
		// First use, or the prefix has sealed its share: a new one. Two
		// goroutines may both get here; each seals under the prefix it
		// drew, and the last one stored is used from then on.
		next := &derived{}
		rand.Read(next.n12[:])
		next.gcm = a.gcm(next.n12[:])
		a.sealing.CompareAndSwap(d, next)
		d = a.sealing.Load()
	}
	return d.gcm.Seal(append(dst, d.n12[:]...), nil, plaintext, additionalData)
}

// cached returns the GCM of the prefix n12 if it is the sealing prefix or
// one Open cached, else nil. A prefix is not secret (every message carries
// its own), so it is compared plainly.
func (a *AEAD) cached(n12 []byte) cipher.AEAD {
	if d := a.sealing.Load(); d != nil && string(d.n12[:]) == string(n12) {
		return d.gcm
	}
	for i := range a.opened {
		if d := a.opened[i].Load(); d != nil && string(d.n12[:]) == string(n12) {
			return d.gcm
		}
	}
	return nil
}

// Open authenticates and decrypts sealed (nonce || ciphertext || tag, as
// Seal writes it) with additionalData, appends the plaintext to dst and
// returns the result. On failure it returns an error and nothing else. The
// key of a prefix not cached is derived, and cached only once a message
// under it has opened, so forgeries with made-up prefixes evict nothing.
func (a *AEAD) Open(dst, sealed, additionalData []byte) ([]byte, error) {
	if len(sealed) < Overhead {
		return nil, errOpen
	}
	n12 := sealed[:12]
	g := a.cached(n12)
	var fresh *derived
	if g == nil {
		fresh = &derived{gcm: a.gcm(n12)}
		copy(fresh.n12[:], n12)
		g = fresh.gcm
	}
	out, err := g.Open(dst, nil, sealed[12:], additionalData)
	if err != nil {
		return nil, errOpen
	}
	if fresh != nil {
		a.opened[a.next.Add(1)%openCacheSize].Store(fresh)
	}
	return out, nil
}
