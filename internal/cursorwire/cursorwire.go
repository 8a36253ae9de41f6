// Package cursorwire is the wire layout of a ctoken pagination cursor, in
// one place: the CBOR map keys, the version, the MAC length, the allocation-
// free codec the root package issues and verifies with, and the [Payload]
// struct a generic CBOR decoder (the ctoken CLI's inspect) reads it into.
//
// Three layouts (the root package's doc.go states them for users). Every
// map is Core Deterministic Encoding (RFC 8949 §4.2.1), key 1 (the version)
// first, so the first three bytes of a decoded cursor name its layout.
//
// Version 2, signed (what an issuer writes unless it seals):
//
//	cursor = base64url_nopad( body || HMAC-SHA256(K, body || scope) )
//	body   = CBOR map:
//	  1: version        unsigned, 2
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
// Version 3, sealed (AES-256-GCM):
//
//	cursor = base64url_nopad( header || nonce || GCM-Seal(Ke, nonce, inner, header || scope) )
//	header = CBOR map { 1: 3, 6: issued at, 7: session tag }
//	inner  = CBOR map { 5: page, 8: opaque state (omitted when empty) }
//
// Version 1 (verified, never issued any more):
//
//	cursor = base64url_nopad( body || HMAC-SHA256(K, body) )
//	body   = CBOR map:
//	  1: version        unsigned, 1
//	  2: tool ID        text string
//	  3: caller ID      text string
//	  4: args           byte string, 32 bytes (omitted when not bound)
//	  5: page           unsigned, at most 2^32-1
//	  6: issued at      integer, Unix seconds
//	  7: server session byte string
//	  8: opaque state   byte string (omitted when empty)
//
// It imports only the standard library.
package cursorwire

import (
	"crypto/sha256"
	"encoding/binary"
)

// The cursor versions: the value of key 1.
const (
	// Version1 carried the tool and caller IDs and the arguments
	// fingerprint in clear; it is verified, never issued.
	Version1 = 1
	// Version is the signed layout issuers write: the scope bound inside
	// the MAC ([AppendScope]), not carried.
	Version = 2
	// VersionSealed is the sealed (AEAD) layout.
	VersionSealed = 3
)

// SessionTagSize is the length of the session tag (key 7) of version 2 and
// sealed cursors.
const SessionTagSize = 8

// MACSize is the length of the HMAC-SHA256 tag after the body.
const MACSize = sha256.Size

// The map keys of a cursor body.
const (
	KeyVersion = 1
	KeyTool    = 2
	KeyCaller  = 3
	KeyArgs    = 4
	KeyPage    = 5
	KeyIssued  = 6
	KeySession = 7
	KeyState   = 8
	// MaxKey is the largest key; a body with a larger one is not a cursor.
	MaxKey = KeyState
)

// Payload is a cursor body as fxamacker/cbor (or any decoder honouring
// "keyasint" tags) reads and writes it. Page is a uint64 so that a decoder
// of untrusted input can show a forged page over 2^32-1; the issuer never
// writes one, and [DecodeBody] refuses it. Encoding a Payload with Core
// Deterministic Encoding gives the bytes [AppendBody] gives for the same
// values.
type Payload struct {
	Version  uint64 `cbor:"1,keyasint"`
	Tool     string `cbor:"2,keyasint"`
	Caller   string `cbor:"3,keyasint"`
	Args     []byte `cbor:"4,keyasint,omitempty"`
	Page     uint64 `cbor:"5,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
	State    []byte `cbor:"8,keyasint,omitempty"`
}

// PayloadV2 is a version 2 body as fxamacker/cbor reads and writes it; like
// [Payload], its Core Deterministic Encoding is what [AppendV2] writes.
type PayloadV2 struct {
	Version  uint64 `cbor:"1,keyasint"`
	Page     uint64 `cbor:"5,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
	State    []byte `cbor:"8,keyasint,omitempty"`
}

// SealedHeader is the clear header of a sealed cursor as fxamacker/cbor
// reads it.
type SealedHeader struct {
	Version  uint64 `cbor:"1,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
}

// ScopeLabel starts the scope of version 2 and sealed cursors
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
