// Package mac holds ctoken's HMAC-SHA256 keys with pooled keyed states, so
// the key schedule is paid once per pooled state rather than once per token.
package mac

import (
	"crypto/fips140"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"hash"
	"sync"
)

// Size is the length of an HMAC-SHA256 tag.
const Size = sha256.Size

// MinFIPSKeyBytes is the shortest HMAC key Go's FIPS 140-3 mode allows
// (112 bits); crypto/hmac panics on a shorter one under GODEBUG=fips140=only.
const MinFIPSKeyBytes = 112 / 8

// ErrKeyTooShortFIPS reports a key under [MinFIPSKeyBytes] while FIPS 140-3
// mode is on.
var ErrKeyTooShortFIPS = errors.New("HMAC keys shorter than 112 bits are not allowed in FIPS 140-3 mode (GODEBUG=fips140)")

// Key is one HMAC-SHA256 key. A [State] is owned by one goroutine between
// [Key.Begin] and [Key.End], so sharing a Key between goroutines is
// race-free. The key bytes are reachable only through the pool's
// constructor, never through a field, so printing a Key shows no key byte.
type Key struct {
	pool sync.Pool // of *State
}

// State is a keyed HMAC state for one multi-part message and the buffer
// its tag is written to. The buffers live with the state (on the heap)
// because a slice handed to a hash.Hash method escapes.
type State struct {
	h       hash.Hash
	out     [Size]byte
	scratch [256]byte
}

// New returns a Key holding a copy of key. When FIPS 140-3 mode is on
// (crypto/fips140.Enabled) a key under [MinFIPSKeyBytes] is refused with
// [ErrKeyTooShortFIPS], because crypto/hmac would panic on it later.
func New(key []byte) (*Key, error) {
	if fips140.Enabled() && len(key) < MinFIPSKeyBytes {
		return nil, ErrKeyTooShortFIPS
	}
	k := append([]byte(nil), key...)
	m := &Key{}
	m.pool.New = func() any { return &State{h: hmac.New(sha256.New, k)} }
	return m, nil
}

// Begin returns a reset state keyed with k. Hand it back with [Key.End].
func (k *Key) Begin() *State {
	st := k.pool.Get().(*State)
	st.h.Reset()
	return st
}

// End returns st to k's pool; st must not be used afterwards.
func (k *Key) End(st *State) { k.pool.Put(st) }

// Write adds p to the message.
func (st *State) Write(p []byte) { st.h.Write(p) }

// WriteString adds s to the message without allocating.
func (st *State) WriteString(s string) {
	for len(s) > 0 {
		n := copy(st.scratch[:], s)
		st.h.Write(st.scratch[:n])
		s = s[n:]
	}
}

// WriteByte adds c to the message. It never fails.
func (st *State) WriteByte(c byte) error {
	st.scratch[0] = c
	st.h.Write(st.scratch[:1])
	return nil
}

// Tag returns the HMAC of the message written so far. The array belongs to
// st: copy what you keep before [Key.End].
func (st *State) Tag() *[Size]byte {
	st.h.Sum(st.out[:0])
	return &st.out
}

// Equal reports, in constant time, whether the HMAC of the message written
// so far equals tag.
func (st *State) Equal(tag []byte) bool {
	return hmac.Equal(st.Tag()[:], tag)
}

// Sum appends HMAC-SHA256(k, msg) to dst. dst does not escape.
func (k *Key) Sum(dst, msg []byte) []byte {
	st := k.Begin()
	st.Write(msg)
	dst = append(dst, st.Tag()[:]...)
	k.End(st)
	return dst
}

// Equal reports, in constant time, whether HMAC-SHA256(k, msg) is tag.
// msg does not escape: it is written through the state's scratch buffer,
// so a token decoded into a caller's stack array stays there.
func (k *Key) Equal(msg, tag []byte) bool {
	st := k.Begin()
	for p := msg; len(p) > 0; {
		n := copy(st.scratch[:], p)
		st.h.Write(st.scratch[:n])
		p = p[n:]
	}
	ok := st.Equal(tag)
	k.End(st)
	return ok
}
