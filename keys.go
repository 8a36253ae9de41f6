package ctoken

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
)

// MinKeyBytes is the minimum length of every secret key.
const MinKeyBytes = 32

// Keyring is an immutable, ordered set of secret keys. The first key is the
// primary: it signs or encrypts every new token. The others are previous keys
// that still verify, so a key can be rotated without breaking outstanding
// tokens. A Keyring is safe for concurrent use.
//
// Keys are never used directly: each use (cursors, request state, one-time
// tokens) derives its own subkeys with HKDF-SHA256, so one operator secret can
// safely serve all of them.
type Keyring struct {
	keys [][]byte
}

// NewKeyring returns a Keyring with primary first and then previous, in
// order. Every key must be at least MinKeyBytes long, else ErrKeyTooShort.
// The inputs are copied.
func NewKeyring(primary []byte, previous ...[]byte) (*Keyring, error) {
	all := append([][]byte{primary}, previous...)
	kr := &Keyring{keys: make([][]byte, len(all))}
	for i, k := range all {
		if len(k) < MinKeyBytes {
			return nil, fmt.Errorf("%w (key %d of %d)", ErrKeyTooShort, i+1, len(all))
		}
		kr.keys[i] = append([]byte(nil), k...)
	}
	return kr, nil
}

// RandomKey returns a fresh 32-byte key from crypto/rand.
func RandomKey() []byte {
	k := make([]byte, MinKeyBytes)
	rand.Read(k) // never fails (crypto/rand panics internally if it cannot)
	return k
}

// EncodeKey returns key in the form ParseKeyring reads: base64url without
// padding.
func EncodeKey(key []byte) string {
	return base64.RawURLEncoding.EncodeToString(key)
}

// ParseKeyring parses a comma-separated list of keys, primary first. Each key
// is base64url without padding, or standard base64 with or without padding;
// white space around each key is ignored. A decoded key under MinKeyBytes is
// ErrKeyTooShort; anything else malformed (including an empty entry) is
// ErrKeyInvalid. Error text names the key's position, never its content.
func ParseKeyring(s string) (*Keyring, error) {
	parts := strings.Split(s, ",")
	keys := make([][]byte, 0, len(parts))
	for i, p := range parts {
		k, err := decodeKey(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%w (key %d of %d)", err, i+1, len(parts))
		}
		keys = append(keys, k)
	}
	return NewKeyring(keys[0], keys[1:]...)
}

func decodeKey(s string) ([]byte, error) {
	if s == "" {
		return nil, ErrKeyInvalid
	}
	for _, enc := range []*base64.Encoding{
		base64.RawURLEncoding, base64.StdEncoding, base64.RawStdEncoding,
	} {
		if k, err := enc.Strict().DecodeString(s); err == nil {
			if len(k) < MinKeyBytes {
				return nil, ErrKeyTooShort
			}
			return k, nil
		}
	}
	return nil, ErrKeyInvalid
}

// KeyringFromEnv parses the environment variable name with ParseKeyring.
// An unset or empty variable is ErrNoKey.
func KeyringFromEnv(name string) (*Keyring, error) {
	v := os.Getenv(name)
	if v == "" {
		return nil, fmt.Errorf("%w: %s is not set", ErrNoKey, name)
	}
	kr, err := ParseKeyring(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return kr, nil
}

// KeyringFromEnvOrRandom is KeyringFromEnv, except that an unset or empty
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
// a nil or zero Keyring.
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

// hkdfSalt is the fixed HKDF salt shared with the reference implementation.
var hkdfSalt = make([]byte, 32)

// DeriveKey derives a 32-byte subkey from key with HKDF-SHA256, salt 32 zero
// bytes and the given info label. It is the derivation every part of this
// package uses, exported so other implementations can check themselves
// against it.
func DeriveKey(key []byte, label string) []byte {
	out, err := hkdf.Key(sha256.New, key, hkdfSalt, label, 32)
	if err != nil {
		// Only possible for an output length over 255*32 bytes.
		panic("ctoken: hkdf: " + err.Error())
	}
	return out
}

// derive returns the subkey for label of every key in the ring, primary first.
func (k *Keyring) derive(label string) [][]byte {
	out := make([][]byte, len(k.keys))
	for i, key := range k.keys {
		out[i] = DeriveKey(key, label)
	}
	return out
}
