package ctoken

import (
	"encoding/json"

	"github.com/ctoken/ctoken/internal/jcs"
)

// A fingerprint is the SHA-256 of the RFC 8785 (JCS) canonical JSON of a
// call's arguments: what a cursor or a request state binds to, so that a
// token issued for one set of arguments is refused for another. The
// canonicalizer itself is internal/jcs.

// ErrArgsInvalid reports arguments that [ArgsFingerprint] or
// [CanonicalJSON] refuse: text that is not I-JSON (RFC 7493) — malformed
// JSON, a duplicate object member name, invalid UTF-8, a lone surrogate
// escape, a number outside IEEE 754 double range, nesting deeper than
// [MaxJSONDepth] — and values the canonical form would change: a number
// whose exact decimal value differs from that of its RFC 8785 form, or a Go
// string holding invalid UTF-8. [Reason] names the check that failed.
var ErrArgsInvalid = jcs.ErrArgsInvalid

// MaxJSONDepth caps the nesting of arrays and objects CanonicalJSON accepts.
const MaxJSONDepth = jcs.MaxJSONDepth

// Rejections of arguments, allocated once (by internal/jcs).
var (
	errArgsSyntax    = jcs.ErrSyntax
	errArgsUTF8      = jcs.ErrUTF8
	errArgsSurrogate = jcs.ErrSurrogate
	errArgsDuplicate = jcs.ErrDuplicate
	errArgsDepth     = jcs.ErrDepth
	errArgsRange     = jcs.ErrRange
	errArgsInexact   = jcs.ErrInexact
	errArgsReplaced  = jcs.ErrReplaced
	errArgsMarshal   = jcs.ErrMarshal
)

// ArgsFingerprint returns the SHA-256 of the RFC 8785 (JCS) canonical JSON of
// args. A []byte or json.RawMessage is taken as JSON text and canonicalized
// by [CanonicalJSON]; anything else is taken as the JSON encoding/json
// marshals it to. Where it can (typically booleans, numbers, strings, and
// maps, slices and structs of these, without MarshalJSON or MarshalText
// methods), ArgsFingerprint writes the canonical form directly from the
// value, with the same result and no intermediate JSON text. Key order,
// white space, string escapes and number spelling never change the result.
//
// The fingerprint is lossless: two arguments that differ in meaning never
// share one, because anything the canonical form would change is refused
// with [ErrArgsInvalid] instead. That covers a number whose exact decimal
// value differs from its canonical form (an integer beyond 2^53 such as
// 1234567890123456789 in JSON text or in an int64 or uint64 field, a
// decimal with more digits than a double holds such as
// 0.10000000000000000001) and invalid UTF-8 (in JSON text, or in a Go
// string, which encoding/json would silently replace with U+FFFD). Send
// such values as JSON strings: a `json:",string"` struct tag, a decimal
// string, or base64 for binary data ([]byte fields are base64 already).
// Because encoding/json writes the escape \ufffd only for invalid UTF-8, a
// Go value whose JSON contains that escape (from a json.Marshaler or
// json.RawMessage inside it) is refused too; a U+FFFD character written as
// itself is accepted.
//
// ArgsFingerprint is safe for concurrent use. It is generic so that JSON
// text passed as a []byte or json.RawMessage is read where it is, without
// being boxed into an interface (an allocation on every call); a value of
// any other type is taken exactly as an any holding it would be.
func ArgsFingerprint[T any](args T) (Fingerprint, error) {
	// &args does not escape (the cases only read through it), so args
	// stays on the stack; any(args) below boxes it only on the Go-value
	// path, as the call of a func(any) always did.
	switch p := any(&args).(type) {
	case *[]byte:
		fp, err := jcs.SumText(*p)
		return Fingerprint(fp), err
	case *json.RawMessage:
		fp, err := jcs.SumText(*p)
		return Fingerprint(fp), err
	}
	fp, err := jcs.Sum(any(args))
	return Fingerprint(fp), err
}

// CanonicalJSON returns the RFC 8785 (JCS) canonical form of the JSON text:
// no insignificant white space, object members sorted by the UTF-16 code
// units of their names, strings with only the mandatory escapes, and numbers
// in ECMAScript's shortest round-trip form (1.0e2 is 100, -0.0 is 0).
//
// It is lossless: the canonical form means exactly what the input means.
// Input that is not I-JSON is [ErrArgsInvalid], and so is a number whose
// exact decimal value differs from that of its canonical form, because a
// double cannot hold it: 1234567890123456789 (canonically
// 1234567890123456800), 9007199254740993, 0.10000000000000000001, 1e-400.
// Numbers a double holds to their last digit stay accepted in any spelling
// (0.1, 1.0e2, 1234567890123456800). Send other numbers as strings.
func CanonicalJSON(text []byte) ([]byte, error) { return jcs.Canonical(text) }
