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
//	cursor = base64url_nopad( body || HMAC-SHA256(K, body) )
//	body   = CBOR map:
//	  1: version        unsigned, 2
//	  5: page           unsigned, at most 2^32-1
//	  6: issued at      integer, Unix seconds
//	  7: session tag    byte string, 8 bytes: SHA-256(label || session)[:8]
//	  8: opaque state   byte string (omitted when empty)
//	  9: binding        byte string, 32 bytes: HMAC-SHA256(Kb, scope)
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

import "crypto/sha256"

// The cursor versions: the value of key 1.
const (
	// Version1 carried the tool and caller IDs and the arguments
	// fingerprint in clear; it is verified, never issued.
	Version1 = 1
	// Version is the signed layout issuers write: the scope bound by a
	// keyed digest ([KeyBind]).
	Version = 2
	// VersionSealed is the sealed (AEAD) layout.
	VersionSealed = 3
)

// BindSize is the length of the binding digest (key 9) of a version 2 body.
const BindSize = sha256.Size

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
	KeyBind    = 9
	// MaxKey is the largest key; a body with a larger one is not a cursor.
	MaxKey = KeyBind
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
	Bind     []byte `cbor:"9,keyasint"`
}

// SealedHeader is the clear header of a sealed cursor as fxamacker/cbor
// reads it.
type SealedHeader struct {
	Version  uint64 `cbor:"1,keyasint"`
	IssuedAt int64  `cbor:"6,keyasint"`
	Session  []byte `cbor:"7,keyasint"`
}
