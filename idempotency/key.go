package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// ParseKey returns the key carried by one Idempotency-Key header value:
// an RFC 8941 structured-field string ("..." of printable ASCII, with \"
// and \\ the only escapes, spaces allowed before and after the item), of 1
// to maxBytes bytes once unescaped. Parameters after the string, a list of
// several strings, or any other item type are refused: the draft defines
// the header as one sf-string. The error matches [ErrKey] and never
// contains the value.
func ParseKey(value string, maxBytes int) (string, error) {
	s := strings.Trim(value, " ")
	if len(s) > 2*maxBytes+2 { // even all escapes cannot unescape to maxBytes
		return "", errKeyLength
	}
	if len(s) < 2 || s[0] != '"' {
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
