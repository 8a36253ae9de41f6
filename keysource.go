package ctoken

import (
	"sync"
	"sync/atomic"
)

// KeySource holds the current [Keyring] of running issuers and codecs and
// lets it be replaced without a restart: set it as the KeySource of a
// [CursorConfig], [RequestStateSecurity] or [OneTimeConfig] (instead of
// Keys), and every later call of every issuer and codec made with it uses
// the ring most recently given to [KeySource.Swap]. A [github.com/ctoken/ctoken/keyfile.Reloader]
// swaps in the content of a key file when it changes.
//
// Reading the current ring is one atomic load; each issuer or codec
// re-derives its subkeys once per swap, on the first call that sees the new
// ring, and otherwise compares one pointer: no lock on the hot path. A
// [KeySource] is safe for concurrent use. The zero value holds no ring:
// constructors refuse it with [ErrNoKey]; use [NewKeySource].
type KeySource struct {
	cur atomic.Pointer[Keyring]
}

var (
	errSourceNil   = reject(ErrNoKey, "KeySource.Swap: the Keyring is nil")
	errSourceEmpty = reject(ErrNoKey, "KeySource.Swap: the Keyring holds no key")
	errSourceShort = reject(ErrKeyTooShort, "KeySource.Swap: a key is shorter than MinKeyBytes")
)

// NewKeySource returns a [KeySource] holding kr, or the error
// [KeySource.Swap] would give for kr.
func NewKeySource(kr *Keyring) (*KeySource, error) {
	s := new(KeySource)
	if err := s.Swap(kr); err != nil {
		return nil, err
	}
	return s, nil
}

// Swap makes kr the current ring: every call that starts after Swap returns
// signs with kr's primary and verifies with each of kr's keys. kr is checked
// first: nil or empty is [ErrNoKey], a key under [MinKeyBytes] (a [Keyring]
// not made by [NewKeyring]) is [ErrKeyTooShort]; on error the current ring
// is kept. A [Keyring] is immutable, so kr may be shared.
//
// To rotate without refusing a valid token, swap in two passes (see
// docs/operations.md): first the new key as a previous key (every instance
// learns to verify it), then, once every instance has it, as primary with
// the old key previous; drop the old key when [github.com/ctoken/ctoken/observe.Event.Key] shows it no longer
// verifies anything.
func (s *KeySource) Swap(kr *Keyring) error {
	switch {
	case kr == nil:
		return errSourceNil
	case kr.Len() == 0:
		return errSourceEmpty
	}
	for _, k := range kr.keys {
		if len(k) < MinKeyBytes {
			return errSourceShort
		}
	}
	s.cur.Store(kr)
	return nil
}

// Keyring returns the current ring (nil for a zero [KeySource]).
func (s *KeySource) Keyring() *Keyring {
	if s == nil {
		return nil
	}
	return s.cur.Load()
}

// rotating is an issuer's view of a [KeySource]: the subkeys of the source's
// current ring, derived once per ring.
type rotating[T any] struct {
	src    *KeySource
	derive func(*Keyring) (T, bool)
	mu     sync.Mutex // serialises derivation only
	cur    atomic.Pointer[derived[T]]
}

// derived is the subkeys v of ring.
type derived[T any] struct {
	ring *Keyring
	v    T
}

// newRotating returns a view of src, deriving its current ring now; ok is
// false when that ring cannot be derived (or src holds none).
func newRotating[T any](src *KeySource, derive func(*Keyring) (T, bool)) (*rotating[T], bool) {
	r := &rotating[T]{src: src, derive: derive}
	kr := src.Keyring()
	if kr == nil {
		return nil, false
	}
	v, ok := derive(kr)
	if !ok {
		return nil, false
	}
	r.cur.Store(&derived[T]{ring: kr, v: v})
	return r, true
}

// get returns the subkeys of the source's current ring: one atomic load and
// a pointer compare, unless the ring changed since the last call.
func (r *rotating[T]) get() T {
	kr := r.src.cur.Load()
	d := r.cur.Load()
	if d.ring == kr {
		return d.v
	}
	return r.rederive(kr)
}

// rederive derives kr's subkeys once, however many callers see the new ring
// at the same moment. A ring that cannot be derived (Swap refuses every such
// ring, so this does not happen) leaves the previous subkeys in use.
func (r *rotating[T]) rederive(kr *Keyring) T {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.cur.Load()
	if d.ring == kr {
		return d.v
	}
	v, ok := r.derive(kr)
	if !ok {
		return d.v
	}
	r.cur.Store(&derived[T]{ring: kr, v: v})
	return v
}

// keysFrom checks that exactly one of keys and src is set.
func keysFrom(keys *Keyring, src *KeySource, cfg string) error {
	switch {
	case keys != nil && src != nil:
		return configError(cfg + ".Keys and " + cfg + ".KeySource are both set (set one)")
	case src != nil && src.Keyring() == nil:
		return reject(ErrNoKey, cfg+".KeySource holds no Keyring (use NewKeySource)")
	case src == nil && (keys == nil || keys.Len() == 0):
		return reject(ErrNoKey, cfg+".Keys is nil or empty (set Keys, e.g. from KeyringFromEnv, or KeySource)")
	}
	return nil
}
