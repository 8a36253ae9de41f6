package idempotency

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/ctoken/ctoken/replay"
	"github.com/fxamacker/cbor/v2"
)

// recordVersion is the only version of the stored response encoding.
const recordVersion = 1

// maxStoredHeaders is the most header lines a stored response keeps.
const maxStoredHeaders = 64

// Response is a response as the store keeps it (the result of
// [replay.Recorder.ConfirmRecord]), encoded by [EncodeResponse] as a CBOR
// map in Core Deterministic Encoding with small integer keys:
//
//	1: version (unsigned, 1)
//	2: status (unsigned, 200 to 599)
//	3: headers (array of text, name and value alternating; omitted when empty)
//	4: body (byte string; omitted when empty)
//	5: too large (true; omitted when false): the handler's response was
//	   over the cap and is not stored; status only, no headers, no body
//
// idempotency/testdata/vectors.json holds known-answer encodings.
type Response struct {
	// Status is the handler's status.
	Status int
	// Header holds the stored headers as name, value pairs in the order
	// replayed; names canonical.
	Header [][2]string
	// Body is the response body, byte for byte.
	Body []byte
	// TooLarge marks a response that was over the cap and not stored: a
	// retry gets 500 rather than a response that was not the handler's.
	TooLarge bool
}

// wireResponse is the CBOR form of Response.
type wireResponse struct {
	Version  uint     `cbor:"1,keyasint"`
	Status   uint     `cbor:"2,keyasint"`
	Header   []string `cbor:"3,keyasint,omitempty"`
	Body     []byte   `cbor:"4,keyasint,omitempty"`
	TooLarge bool     `cbor:"5,keyasint,omitempty"`
}

var (
	recordEnc = func() cbor.EncMode {
		m, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
	recordDec = func() cbor.DecMode {
		m, err := cbor.DecOptions{
			DupMapKey:         cbor.DupMapKeyEnforcedAPF,
			IndefLength:       cbor.IndefLengthForbidden,
			TagsMd:            cbor.TagsForbidden,
			ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
			MaxNestedLevels:   4,
			MaxArrayElements:  2 * maxStoredHeaders,
			MaxMapPairs:       16,
			UTF8:              cbor.UTF8RejectInvalid,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
)

// EncodeResponse returns the stored form of r, or an error matching
// [replay.ErrTooLarge] when it would exceed [replay.MaxResultBytes], has
// more than 64 header lines or more than [MaxStoredHeaderBytes] of them,
// and [ErrRecord] for a status outside 200 to 599, an invalid header, or
// a TooLarge response with headers or a body.
func EncodeResponse(r Response) ([]byte, error) {
	if err := checkResponse(r.Status, len(r.Header), r.TooLarge, len(r.Body)); err != nil {
		return nil, err
	}
	w := wireResponse{Version: recordVersion, Status: uint(r.Status), Body: r.Body, TooLarge: r.TooLarge}
	n := 0
	for _, kv := range r.Header {
		if !isToken(kv[0]) || !validFieldValue(kv[1]) {
			return nil, errRecordCorrupt
		}
		n += len(kv[0]) + len(kv[1])
		w.Header = append(w.Header, kv[0], kv[1])
	}
	if n > MaxStoredHeaderBytes || len(r.Header) > maxStoredHeaders {
		return nil, replay.ErrTooLarge
	}
	b, err := recordEnc.Marshal(w)
	if err != nil {
		return nil, errRecordCorrupt
	}
	if len(b) > replay.MaxResultBytes {
		return nil, replay.ErrTooLarge
	}
	return b, nil
}

// DecodeResponse decodes a stored response strictly: at most
// [replay.MaxResultBytes], checked before decoding; one CBOR map of the
// keys above in Core Deterministic Encoding (re-encoding it gives the same
// bytes), no duplicate, unknown or missing key, no tag, no indefinite
// length, valid UTF-8; version 1, a status of 200 to 599, header names
// that are tokens and values without control characters, at most 64
// lines and [MaxStoredHeaderBytes]. Any other input is an error matching
// [ErrRecord]; it never panics.
func DecodeResponse(b []byte) (Response, error) {
	if len(b) == 0 || len(b) > replay.MaxResultBytes {
		return Response{}, errRecordCorrupt
	}
	var w wireResponse
	if err := recordDec.Unmarshal(b, &w); err != nil {
		return Response{}, errRecordCorrupt
	}
	if w.Version != recordVersion || len(w.Header)%2 != 0 {
		return Response{}, errRecordCorrupt
	}
	// A status past the int range wraps to a negative int, which
	// checkResponse refuses like every other one outside 200..599.
	if err := checkResponse(int(w.Status), len(w.Header)/2, w.TooLarge, len(w.Body)); err != nil {
		return Response{}, errRecordCorrupt
	}
	r := Response{Status: int(w.Status), Body: w.Body, TooLarge: w.TooLarge}
	n := 0
	for i := 0; i < len(w.Header); i += 2 {
		name, value := w.Header[i], w.Header[i+1]
		if !isToken(name) || !validFieldValue(value) {
			return Response{}, errRecordCorrupt
		}
		n += len(name) + len(value)
		r.Header = append(r.Header, [2]string{name, value})
	}
	if n > MaxStoredHeaderBytes {
		return Response{}, errRecordCorrupt
	}
	again, err := recordEnc.Marshal(w)
	if err != nil || !bytes.Equal(again, b) {
		return Response{}, errRecordCorrupt // not canonical: not ours
	}
	return r, nil
}

// checkResponse checks the fields every stored response must satisfy.
func checkResponse(status, headers int, tooLarge bool, body int) error {
	if status < 200 || status > 599 {
		return errRecordCorrupt
	}
	if tooLarge && (headers > 0 || body > 0) {
		return errRecordCorrupt
	}
	if headers > maxStoredHeaders {
		return replay.ErrTooLarge
	}
	return nil
}

// validFieldValue reports whether v can be sent as a header value: no
// control character but horizontal tab, no space or tab at either end.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if isCtl(v[i]) {
			return false
		}
	}
	return v == "" || (v[0] != ' ' && v[0] != '\t' && v[len(v)-1] != ' ' && v[len(v)-1] != '\t')
}

// storedHeader returns the headers of h named in names, in that order,
// values in order, each as net/http would send it: control characters
// (CR and LF among them) as spaces, no space or tab at either end.
func storedHeader(h http.Header, names []string) [][2]string {
	var out [][2]string
	for _, n := range names {
		for _, v := range h[n] {
			out = append(out, [2]string{n, cleanFieldValue(v)})
		}
	}
	return out
}

func cleanFieldValue(v string) string {
	if validFieldValue(v) {
		return v
	}
	b := []byte(v)
	for i, c := range b {
		if isCtl(c) {
			b[i] = ' '
		}
	}
	return strings.Trim(string(b), " \t")
}

// isCtl reports whether c is a control character a header value cannot
// hold: any but horizontal tab.
func isCtl(c byte) bool { return (c < 0x20 && c != '\t') || c == 0x7f }
