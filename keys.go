package ctoken

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	strictb64 "github.com/ctoken/ctoken/internal/b64"
	"github.com/ctoken/ctoken/internal/reason"
)

// MinKeyBytes is the minimum length of every secret key.
const MinKeyBytes = 32

// Keyring is an immutable, ordered set of secret keys. The first key is the
// primary: it signs or encrypts every new token. The others are previous keys
// that still verify, so a key can be rotated without breaking outstanding
// tokens. A [Keyring] is safe for concurrent use.
//
// Keys are never used directly: each use (cursors, request state, one-time
// tokens) derives its own subkeys with HKDF-SHA256, so one operator secret can
// safely serve all of them.
type Keyring struct {
	keys [][]byte
	ids  keyIDs // ids[i] is the key id of keys[i]
}

// keyIDSize is the length of a key id.
const keyIDSize = 4

// keyIDLabel is the HKDF info label of a key id.
const keyIDLabel = "ctoken.key-id"

// keyID names a key in every token minted under it: the first 4 bytes of
// HKDF-SHA256(key, salt = 32 zero bytes, info = "ctoken.key-id"). It is a
// one-way function of the key, never the key, and not secret: a verifier
// reads it from the token and runs one MAC, with the key it names, whatever
// the ring's size.
type keyID [keyIDSize]byte

// deriveKeyID returns the key id of key (at least [MinKeyBytes] long).
func deriveKeyID(key []byte) (keyID, bool) {
	sub, err := DeriveKey(key, keyIDLabel)
	if err != nil {
		return keyID{}, false
	}
	return keyID(sub[:keyIDSize]), true
}

// keyIDs are the key ids of a ring's keys, primary first.
type keyIDs []keyID

// index returns the position of the key whose id is id, or -1. Key ids are
// not secret, so the search need not be constant time.
func (ids keyIDs) index(id []byte) int {
	for i := range ids {
		if string(ids[i][:]) == string(id) {
			return i
		}
	}
	return -1
}

// KeyIDs returns the key id of every key of the ring, primary first, as
// 8 lowercase hex digits: the id every token minted under that key carries
// (see doc.go), so a log line or `ctoken verify` can name the key that
// signed a token without naming the key. It is nil for a nil or zero
// [Keyring].
func (k *Keyring) KeyIDs() []string {
	if k == nil || len(k.ids) == 0 {
		return nil
	}
	out := make([]string, len(k.ids))
	for i, id := range k.ids {
		out[i] = hex.EncodeToString(id[:])
	}
	return out
}

// NewKeyring returns a [Keyring] with primary first and then previous, in
// order. Every key must be at least [MinKeyBytes] long, else [ErrKeyTooShort];
// two keys with one key id (the same key twice) are [ErrKeyInvalid].
// The inputs are copied. NewKeyring checks only the length: the bytes are
// the caller's to vouch for (use [RandomKey]); [ParseKeyring], which reads
// operator input, also refuses degenerate keys.
func NewKeyring(primary []byte, previous ...[]byte) (*Keyring, error) {
	all := append([][]byte{primary}, previous...)
	kr := &Keyring{keys: make([][]byte, 0, len(all)), ids: make(keyIDs, 0, len(all))}
	for i, k := range all {
		if len(k) < MinKeyBytes {
			return nil, keyError(ErrKeyTooShort, i, len(all), keyShort)
		}
		id, ok := deriveKeyID(k)
		if !ok {
			return nil, keyError(ErrKeyInvalid, i, len(all), "cannot be derived from")
		}
		// kr holds the keys before i.
		if j := kr.ids.index(id[:]); j >= 0 {
			// The same key twice, or (about once in 2^32 pairs) two keys
			// whose ids collide: either way a token could not name its key.
			return nil, keyError(ErrKeyInvalid, i, len(all), fmt.Sprintf("has the key id of key %d (the same key twice?)", j+1))
		}
		kr.keys = append(kr.keys, append([]byte(nil), k...))
		kr.ids = append(kr.ids, id)
	}
	return kr, nil
}

// keyFormHint is appended to every key error: the form [ParseKeyring]
// expects. It names no key.
const keyFormHint = "want comma-separated base64url of at least 32 random bytes, primary first; `ctoken keygen` makes one; whsec_ secrets belong in the webhook config, not in a Keyring"

// keyError returns a key error that matches sentinel with errors.Is, whose
// [Reason] names the key's position (i counts from 0) and what is wrong with
// it, and whose text adds keyFormHint. It never contains key material.
func keyError(sentinel error, i, n int, what string) error {
	re := reason.New(sentinel, fmt.Sprintf("key %d of %d %s", i+1, n, what))
	return &hintError{err: re, hint: keyFormHint}
}

// hintError is err followed by a fixed hint.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e *hintError) Unwrap() error { return e.err }

// RandomKey returns a fresh 32-byte key from crypto/rand.
func RandomKey() []byte {
	k := make([]byte, MinKeyBytes)
	rand.Read(k) // never fails (crypto/rand panics internally if it cannot)
	return k
}

// EncodeKey returns key in the form [ParseKeyring] reads: base64url without
// padding.
func EncodeKey(key []byte) string {
	return b64.EncodeToString(key)
}

// ParseKeyring parses a comma-separated list of keys, primary first. Each key
// is base64url without padding, or standard base64 with or without padding;
// white space around each key is ignored. A decoded key under [MinKeyBytes] is
// [ErrKeyTooShort]. Anything else malformed is [ErrKeyInvalid]: an empty entry,
// text that is not base64, a webhook secret ("whsec_..."), or a degenerate
// key (see [degenerateKey]). Error text names the key's position ("key 2 of
// 3") and the expected form ([keyFormHint]), never the key's content;
// [Reason] returns the position and the fault.
func ParseKeyring(s string) (*Keyring, error) {
	parts := strings.Split(s, ",")
	keys := make([][]byte, 0, len(parts))
	for i, p := range parts {
		k, what := decodeKey(strings.TrimSpace(p))
		if what != "" {
			sentinel := ErrKeyInvalid
			if what == keyShort {
				sentinel = ErrKeyTooShort
			}
			return nil, keyError(sentinel, i, len(parts), what)
		}
		keys = append(keys, k)
	}
	return NewKeyring(keys[0], keys[1:]...)
}

// Faults decodeKey reports; keyShort is the [ErrKeyTooShort] one.
const (
	keyShort      = "is too short"
	keyEmpty      = "is empty"
	keyWebhook    = "is a whsec_ webhook secret"
	keyNotBase64  = "is not base64"
	keyDegenerate = "is degenerate: a repeating pattern or too few distinct byte values, not random"
)

// decodeKey decodes one entry of a keyring, or returns what is wrong with
// it.
func decodeKey(s string) ([]byte, string) {
	switch {
	case s == "":
		return nil, keyEmpty
	case strings.HasPrefix(s, "whsec_"):
		return nil, keyWebhook
	}
	// Each alphabet through the strict decoder, which also refuses CR and
	// LF inside the key (encoding/base64 would skip them).
	for _, enc := range []strictb64.Encoding{strictb64.URL, strictb64.Std, strictb64.RawStd} {
		if k, err := enc.DecodeString(s); err == nil {
			switch {
			case len(k) < MinKeyBytes:
				return nil, keyShort
			case degenerateKey(k):
				return nil, keyDegenerate
			}
			return k, ""
		}
	}
	return nil, keyNotBase64
}

// Degenerate-key thresholds; see degenerateKey.
const (
	// minKeyDistinct is the fewest distinct byte values a key may have.
	minKeyDistinct = 9
)

// degenerateKey reports whether key is too regular to have come from a
// random source: every byte equal, a pattern of at most len(key)/2 bytes
// repeated (so at least twice) over the whole key, or fewer than 9
// distinct byte values. [ParseKeyring] refuses such keys with
// [ErrKeyInvalid].
//
// A 32-byte key from crypto/rand is flagged with probability below 2^-111:
// a period p ≤ 16 has probability 2^(-8(32-p)) ≤ 2^-128 each (sum < 2^-127),
// and at most 8 distinct values has probability ≤ C(256,8)·(8/256)^32 <
// 2^-111; keys longer than 32 bytes are flagged less often still. The test
// TestdegenerateKeyFalsePositiveBound recomputes these bounds.
func degenerateKey(key []byte) bool {
	n := len(key)
	for p := 1; p <= n/2; p++ {
		if periodic(key, p) {
			return true
		}
	}
	var seen [256]bool
	distinct := 0
	for _, b := range key {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	return distinct < minKeyDistinct
}

// periodic reports whether k[i] == k[i+p] for every i.
func periodic(k []byte, p int) bool {
	for i := p; i < len(k); i++ {
		if k[i] != k[i-p] {
			return false
		}
	}
	return true
}

// KeyringFromEnv parses the environment variable name with [ParseKeyring].
// An unset or empty variable is [ErrNoKey].
func KeyringFromEnv(name string) (*Keyring, error) {
	v := os.Getenv(name)
	if v == "" {
		return nil, reason.New(ErrNoKey, name+" is not set")
	}
	kr, err := ParseKeyring(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return kr, nil
}

// KeyringFromEnvOrRandom is [KeyringFromEnv], except that an unset or empty
// variable yields a fresh random key and ephemeral == true. Tokens sealed
// with an ephemeral key are refused by every other process and after a
// restart, so use it only for a single process. A variable that is set but
// malformed is an error, never a silent fallback to a random key.
func KeyringFromEnvOrRandom(name string) (kr *Keyring, ephemeral bool, err error) {
	if os.Getenv(name) == "" {
		kr, err = NewKeyring(RandomKey())
		return kr, true, err
	}
	kr, err = KeyringFromEnv(name)
	return kr, false, err
}

// Len returns the number of keys in the ring (1 + previous keys), or 0 for
// a nil or zero [Keyring].
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// String describes the ring without revealing any key.
func (k *Keyring) String() string {
	if k == nil {
		return "ctoken.Keyring(nil)"
	}
	return fmt.Sprintf("ctoken.Keyring(%d keys)", len(k.keys))
}

// GoString describes the ring without revealing any key, for %#v.
func (k *Keyring) GoString() string { return k.String() }

var errDeriveShort = reject(ErrKeyTooShort, "DeriveKey needs at least 32 bytes of key")

// hkdfSalt is the fixed HKDF salt shared with the reference implementation.
var hkdfSalt = make([]byte, 32)

// DeriveKey derives a 32-byte subkey from key with HKDF-SHA256, salt 32 zero
// bytes and the given info label. It is the derivation every part of this
// package uses, exported so other implementations can check themselves
// against it. A key shorter than [MinKeyBytes] is refused with
// [ErrKeyTooShort] (HKDF itself would accept it, except in FIPS 140-only
// mode, which refuses keys under 112 bits); DeriveKey never panics.
func DeriveKey(key []byte, label string) ([]byte, error) {
	if len(key) < MinKeyBytes {
		return nil, errDeriveShort
	}
	out, err := hkdf.Key(sha256.New, key, hkdfSalt, label, 32)
	if err != nil {
		return nil, reason.Wrap(ErrKeyInvalid, "HKDF refused the key", err)
	}
	return out, nil
}

// derive returns the subkey for label of every key in the ring, primary
// first, or nil if any derivation fails. Every key of a [Keyring] made by
// [NewKeyring] is long enough, so nil only comes from a [Keyring] built some
// other way; callers treat a ring of the wrong size as no key at all.
func (k *Keyring) derive(label string) [][]byte {
	out := make([][]byte, len(k.keys))
	for i, key := range k.keys {
		sub, err := DeriveKey(key, label)
		if err != nil {
			return nil
		}
		out[i] = sub
	}
	return out
}
