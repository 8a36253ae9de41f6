package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// ParseKey returns the key carried by one Idempotency-Key header value,
// in one of two spellings of the same key:
//
//   - an RFC 8941 structured-field string, as the draft defines the header:
//     "..." of printable ASCII (0x20–0x7E) with \" and \\ the only
//     escapes; the key is the string once unescaped;
//   - a bare key, as stripe-go and most clients send it (a UUID, a
//     base64 or base64url string, "1700000000_AbCdEf"): visible ASCII
//     (0x21–0x7E) except '"', '\', ',' and ';'; the key is the value as
//     sent. The four excluded bytes would make the value a malformed string,
//     an escape, a list or a parameter under RFC 8941, so no value means one
//     key to this parser and another to a structured-field parser.
//
// Spaces before and after the value are ignored. The key is 1 to maxBytes
// bytes: `"abc"` and `abc` are the same key, and a quoted key is the same
// key as its bare spelling whenever it has one. Parameters after a string,
// a list, or bytes outside the two forms are refused. The error matches
// [ErrKey] and never contains the value.
func ParseKey(value string, maxBytes int) (string, error) {
	s := strings.Trim(value, " ")
	if len(s) > 2*maxBytes+2 { // even all escapes cannot unescape to maxBytes
		return "", errKeyLength
	}
	if s == "" {
		return "", errKeyMalformed
	}
	if s[0] != '"' {
		return parseBareKey(s, maxBytes)
	}
	if len(s) < 2 {
		return "", errKeyMalformed
	}
	var b strings.Builder
	escaped := false
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", errKeyMalformed
			}
			if !escaped {
				escaped = true
				b.Grow(len(s))
				b.WriteString(s[1 : i-1])
			}
			b.WriteByte(s[i])
		case c == '"':
			if i != len(s)-1 {
				return "", errKeyMalformed // parameters, a list, or trailing bytes
			}
			key := s[1:i]
			if escaped {
				key = b.String()
			}
			if key == "" || len(key) > maxBytes {
				return "", errKeyLength
			}
			return key, nil
		case c < 0x20 || c > 0x7e:
			return "", errKeyMalformed
		default:
			if escaped {
				b.WriteByte(c)
			}
		}
	}
	return "", errKeyMalformed // no closing quote
}

// parseBareKey returns s, a non-empty header value without its spaces that
// does not start with '"', if it is a bare key (see [ParseKey]).
func parseBareKey(s string, maxBytes int) (string, error) {
	for i := 0; i < len(s); i++ {
		if !isBareKeyByte(s[i]) {
			return "", errKeyMalformed
		}
	}
	if len(s) > maxBytes {
		return "", errKeyLength
	}
	return s, nil
}

// isBareKeyByte reports whether c may appear in a bare key: visible ASCII
// except '"', '\', ',' and ';'.
func isBareKeyByte(c byte) bool {
	return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != ',' && c != ';'
}

// storeIDPrefix starts every store ID the middleware uses.
const storeIDPrefix = "idem:"

// storeIDDomain separates the store-ID hash from every other SHA-256 use.
const storeIDDomain = "ctoken/idempotency store id v1\x00"

// StoreID returns the replay-store ID of a key sent by caller to route:
// "idem:" + base64url (no padding) of SHA-256 over a domain label and the
// three strings, each preceded by its length as 8 bytes big-endian, so no
// two different triples share an ID and the store never holds the caller
// or the key in clear. It is not a secret: whoever can guess the caller and
// the key can compute it. idempotency/testdata/vectors.json holds
// known-answer cases.
func StoreID(caller, route, key string) string {
	var stack [256]byte
	b := append(stack[:0], storeIDDomain...)
	b = appendField(b, caller)
	b = appendField(b, route)
	b = appendField(b, key)
	sum := sha256.Sum256(b)
	var out [len(storeIDPrefix) + 43]byte // 43: base64url of 32 bytes, no padding
	copy(out[:], storeIDPrefix)
	base64.RawURLEncoding.Encode(out[len(storeIDPrefix):], sum[:])
	return string(out[:])
}

// appendField appends s to b preceded by its length as 8 bytes
// big-endian.
func appendField(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint64(b, uint64(len(s))), s...)
}
