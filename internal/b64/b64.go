// Package b64 is the one strict base64 of ctoken: every decode site uses it,
// so every encoded value has exactly one accepted spelling.
//
// The standard library's decoders, even in Strict mode, skip CR and LF
// anywhere in the input; a Strict decode therefore still admits many
// spellings of the same bytes. [Encoding.Decode] refuses them by checking that
// the input is exactly the canonical encoding of what it decoded to (the
// length check below), and Strict refuses non-zero unused trailing bits.
package b64

import (
	"encoding/base64"
	"errors"
)

// ErrInvalid reports input that is not the canonical encoding of any bytes:
// a character outside the alphabet (CR and LF included), wrong padding,
// non-zero unused trailing bits, or a destination too small.
var ErrInvalid = errors.New("b64: not canonical base64")

// Encoding is a strict base64 alphabet and padding rule.
type Encoding struct {
	enc *base64.Encoding
}

var (
	// URL is base64url without padding (RFC 4648 §5), the framing of every
	// ctoken token.
	URL = Encoding{base64.RawURLEncoding.Strict()}
	// Std is standard base64 with padding (RFC 4648 §4), as Standard
	// Webhooks signatures and secrets are written.
	Std = Encoding{base64.StdEncoding.Strict()}
	// RawStd is standard base64 without padding.
	RawStd = Encoding{base64.RawStdEncoding.Strict()}
)

// EncodedLen returns the length of the encoding of n bytes.
func (e Encoding) EncodedLen(n int) int { return e.enc.EncodedLen(n) }

// DecodedLen returns the maximum number of bytes n encoded bytes decode to.
func (e Encoding) DecodedLen(n int) int { return e.enc.DecodedLen(n) }

// Encode writes the encoding of src to dst, which must hold EncodedLen(len(src)) bytes.
func (e Encoding) Encode(dst, src []byte) { e.enc.Encode(dst, src) }

// AppendEncode appends the encoding of src to dst.
func (e Encoding) AppendEncode(dst, src []byte) []byte { return e.enc.AppendEncode(dst, src) }

// EncodeToString returns the encoding of src.
func (e Encoding) EncodeToString(src []byte) string { return e.enc.EncodeToString(src) }

// Decode decodes src into dst and returns the number of bytes written. It
// fails with [ErrInvalid], writing nothing the caller may use, unless src is
// exactly the canonical encoding of dst[:n]; a dst shorter than
// DecodedLen(len(src)) is refused rather than overrun. It does not allocate.
func (e Encoding) Decode(dst, src []byte) (int, error) {
	if len(dst) < e.enc.DecodedLen(len(src)) {
		return 0, ErrInvalid
	}
	n, err := e.enc.Decode(dst, src)
	// The decoder skips CR and LF; the re-encoded length of what it
	// produced equals len(src) only when it skipped nothing.
	if err != nil || e.enc.EncodedLen(n) != len(src) {
		return 0, ErrInvalid
	}
	return n, nil
}

// DecodeString is [Encoding.Decode] into a new slice; it returns nil and
// [ErrInvalid] for anything but the canonical encoding of some bytes.
func (e Encoding) DecodeString(s string) ([]byte, error) {
	dst := make([]byte, e.enc.DecodedLen(len(s)))
	n, err := e.Decode(dst, []byte(s))
	if err != nil {
		return nil, err
	}
	return dst[:n], nil
}
