// Package cursorwire is the wire layout of a ctoken pagination cursor, in
// one place: the CBOR map keys, the version, the MAC length, the allocation-
// free codec the root package issues and verifies with, and the [Payload]
// struct a generic CBOR decoder (the ctoken CLI's inspect) reads it into.
//
// Two layouts (the root package's doc.go states them for users). Every
// map is Core Deterministic Encoding (RFC 8949 §4.2.1), key 1 (the version)
// first and key 2 (the key id) second, so the first 9 bytes of a decoded
// cursor name its layout and its key at fixed positions ([ReadPrefix]).
//
// Version 2, signed (what an issuer writes unless it seals):
//
//	cursor = base64url_nopad( body || HMAC-SHA256(K, body || scope) )
//	body   = CBOR map:
//	  1: version        unsigned, 2
//	  2: key id         byte string, 4 bytes: the id of the key K is derived from
//	  5: page           unsigned, at most 2^32-1
//	  6: issued at      integer, Unix seconds
//	  7: session tag    byte string, 8 bytes: SHA-256(label || session)[:8]
//	  8: opaque state   byte string (omitted when empty)
//	scope  = "ctoken.scope\x00" || uvarint(len(tool)) || tool
//	         || uvarint(len(caller)) || caller
//	         || ( 0x00                      arguments not bound
//	            | 0x01 || fingerprint[32] ) arguments bound
//
// The scope is in the MAC's input only, never in the cursor: nothing of the
// tool, the caller or the arguments is carried, not even a digest. The
// encoding is injective: the body is one canonical CBOR item (prefix-free,
// and the verifier refuses a body with anything after its map), the label
// is fixed, every string has its length first, and the last byte group is
// told apart by its marker ([AppendScope]).
//
// Version 3, sealed (XAES-256-GCM, 192-bit nonces):
//
//	cursor = base64url_nopad( header || nonce[24] || XAES-256-GCM-Seal(Ke, nonce, inner || padding, header || scope) )
//	header = CBOR map { 1: 3, 2: key id, 6: issued at, 7: session tag }
//	inner  = CBOR map { 5: page, 8: opaque state (omitted when empty) }
//	padding = zero bytes up to [SealedPlaintextLen] of the state: the next
//	          multiple of 64 bytes, or 288 past 256, of the length inner
//	          would have with the longest page (so not the page's size)
//
// It imports only the standard library.
package cursorwire

import (
	"crypto/sha256"
	"encoding/binary"
)

// The cursor versions: the value of key 1.
const (
	// Version is the signed layout: the scope bound inside the MAC
	// ([AppendScope]), not carried.
	Version = 2
	// VersionSealed is the sealed (AEAD) layout.
	VersionSealed = 3
)

// KeyIDSize is the length of the key id (key 2).
const KeyIDSize = 4

// SessionTagSize is the length of the session tag (key 7).
const SessionTagSize = 8

// MACSize is the length of the HMAC-SHA256 tag after a signed body.
const MACSize = sha256.Size

// Padding of a sealed cursor's plaintext: to a multiple of PadBlock up to 4
// blocks, then MaxPadded, the largest plaintext (a 256-byte state and the
// largest page take 267 bytes).
const (
	PadBlock  = 64
	MaxPadded = 288
)

// The map keys of a cursor. Keys 3 and 4 are not used (they held the tool
// and caller of a layout never released).
const (
	KeyVersion = 1
	KeyKeyID   = 2
	KeyPage    = 5
	KeyIssued  = 6
	KeySession = 7
	KeyState   = 8
	// MaxKey is the largest key; a map with a larger one is not a cursor.
	MaxKey = KeyState
)

// PrefixLen is the length of the fixed prefix [ReadPrefix] reads.
const PrefixLen = 5 + KeyIDSize

// ReadPrefix reads the fixed prefix of a decoded cursor: the map head (5
// or 6 pairs signed, 4 sealed), key 1 and its one-byte version, key 2 and
// the head of a 4-byte string, which it returns. It reads nothing else, so
// a verifier can find the key before it checks a MAC; ok is false for any
// other prefix (a cursor of an unknown layout).
func ReadPrefix(raw []byte) (version byte, keyID []byte, ok bool) {
	if len(raw) < PrefixLen || raw[1] != KeyVersion || raw[3] != KeyKeyID || raw[4] != cborBytes|KeyIDSize {
		return 0, nil, false
	}
	switch version = raw[2]; {
	case version == Version && (raw[0] == cborMap|5 || raw[0] == cborMap|6):
	case version == VersionSealed && raw[0] == cborMap|4:
	default:
		return 0, nil, false
	}
	return version, raw[5:PrefixLen], true
}

// PayloadV2 is a signed body as fxamacker/cbor (or any decoder honouring
// "keyasint" tags) reads and writes it. Page is a uint64 so that a decoder
// of untrusted input can show a forged page over 2^32-1; the issuer never
// writes one, and [DecodeV2] refuses it. Its Core Deterministic Encoding
// is what [AppendV2] writes.
type PayloadV2 struct {
	Version  uint64 `cbor:"1,keyasint"`
	KeyID    []byte `cbor:"2,keyasint"`
	Page     uint64 `cbor:"5,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
	State    []byte `cbor:"8,keyasint,omitempty"`
}

// SealedHeader is the clear header of a sealed cursor as fxamacker/cbor
// reads it.
type SealedHeader struct {
	Version  uint64 `cbor:"1,keyasint"`
	KeyID    []byte `cbor:"2,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
}

// ScopeLabel starts the scope of signed and sealed cursors
// ([AppendScope]).
const ScopeLabel = "ctoken.scope\x00"

// The marker byte of the arguments in the scope.
const (
	ScopeArgsUnbound = 0x00 // no fingerprint follows
	ScopeArgsBound   = 0x01 // a 32-byte fingerprint follows
)

// ScopeLen returns the length of the scope AppendScope writes.
func ScopeLen(tool, caller string, args []byte) int {
	n := len(ScopeLabel) + uvarintLen(uint64(len(tool))) + len(tool) +
		uvarintLen(uint64(len(caller))) + len(caller) + 1
	if len(args) > 0 {
		n += len(args)
	}
	return n
}

// AppendScope appends the scope a version 2 cursor's MAC covers after its
// body, and a sealed cursor's additional data after its header:
// [ScopeLabel], the tool ID and the caller ID each after its length as an
// unsigned varint (encoding/binary), then [ScopeArgsUnbound], or
// [ScopeArgsBound] and args, the 32-byte arguments fingerprint. An empty
// args means not bound. Any bytes are accepted (not only UTF-8), and every
// length: nothing of the scope is carried in the cursor.
func AppendScope(dst []byte, tool, caller string, args []byte) []byte {
	dst = append(dst, ScopeLabel...)
	dst = binary.AppendUvarint(dst, uint64(len(tool)))
	dst = append(dst, tool...)
	dst = binary.AppendUvarint(dst, uint64(len(caller)))
	dst = append(dst, caller...)
	if len(args) == 0 {
		return append(dst, ScopeArgsUnbound)
	}
	dst = append(dst, ScopeArgsBound)
	return append(dst, args...)
}

// uvarintLen returns the length of binary.AppendUvarint's encoding of n.
func uvarintLen(n uint64) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}
