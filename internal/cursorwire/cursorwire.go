// Package cursorwire is the wire layout of a ctoken pagination cursor, in
// one place: the CBOR map keys, the version, the MAC length, the allocation-
// free codec the root package issues and verifies with, and the [Payload]
// struct a generic CBOR decoder (the ctoken CLI's inspect) reads it into.
//
// The layout (the root package's doc.go states it for users):
//
//	cursor = base64url_nopad( body || HMAC-SHA256(K, body) )
//	body   = CBOR map, Core Deterministic Encoding (RFC 8949 §4.2.1):
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

// Version is the only cursor version.
const Version = 1

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
