package idempotency

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/ringkey"
	"github.com/ctoken/ctoken/internal/xaes"
	"github.com/ctoken/ctoken/replay"
	"github.com/fxamacker/cbor/v2"
)

// recordVersion is the only version of the stored response encoding.
const recordVersion = 1

// maxStoredHeaders is the most header lines a stored response keeps.
const maxStoredHeaders = 64

// Response is a response as the store keeps it: [EncodeResponse] encodes
// it, and that encoding, sealed (see "Stored records" in the package
// documentation), is the result given to [replay.Recorder.ConfirmRecord].
// The encoding is a CBOR map in Core Deterministic Encoding with small
// integer keys:
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

// Sealed records. The store never holds a response in clear: what
// [replay.Recorder.ConfirmRecord] receives is the [EncodeResponse] form of
// the response sealed with XAES-256-GCM under a subkey of [Config.Keys]'
// primary key, and a replay opens it with the key its key id names. The
// layout (see the package documentation):
//
//	sealed = version (1 byte, 1) || key id (4 bytes) || nonce (24 bytes) || ciphertext || tag (16 bytes)
//	AD     = version || key id || store ID length (8 bytes, big-endian) || store ID || request fingerprint
const (
	// sealVersion is the first byte of every sealed record.
	sealVersion = 1
	// sealLabel is the HKDF info label of the record subkey.
	sealLabel = "ctoken.idempotency record xaes-256-gcm key"
	// sealHeaderSize is the version byte and the key id.
	sealHeaderSize = 1 + ringkey.IDSize
	// sealOverhead is what sealing adds to an encoded response: the
	// header, the nonce and the tag.
	sealOverhead = sealHeaderSize + xaes.Overhead
	// maxSealedPlaintext is the longest encoded response that seals
	// within [replay.MaxResultBytes].
	maxSealedPlaintext = replay.MaxResultBytes - sealOverhead
)

// recordAEAD is what a sealer seals and opens with: an [xaes.AEAD] (a test
// puts one with a fixed nonce in its place).
type recordAEAD interface {
	Seal(dst, plaintext, additionalData []byte) []byte
	Open(dst, sealed, additionalData []byte) ([]byte, error)
}

// sealer seals and opens stored responses with the record subkeys of a
// keyring, primary first.
type sealer struct {
	ids   [][ringkey.IDSize]byte
	aeads []recordAEAD
}

// newSealer returns the sealer of ring, or false for a nil or zero ring
// (or one not made by ctoken.NewKeyring).
func newSealer(ring *ctoken.Keyring) (sealer, bool) {
	if ring == nil {
		return sealer{}, false
	}
	subs, ok := ringkey.Derive(ring, sealLabel)
	if !ok || len(subs) == 0 {
		return sealer{}, false
	}
	s := sealer{ids: make([][ringkey.IDSize]byte, len(subs)), aeads: make([]recordAEAD, len(subs))}
	for i, sub := range subs {
		a, err := xaes.New(sub.Key)
		if err != nil {
			return sealer{}, false
		}
		s.ids[i], s.aeads[i] = sub.ID, a
	}
	return s, true
}

// sealAD returns the associated data of a record: its header, the store
// ID (length-prefixed) and the request fingerprint.
func sealAD(dst, header []byte, id string, fp []byte) []byte {
	dst = append(dst, header...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(id)))
	dst = append(dst, id...)
	return append(dst, fp...)
}

// seal returns r's stored form for the key id and the request
// fingerprint fp: [EncodeResponse], sealed under the primary key. Its
// errors are EncodeResponse's, and [replay.ErrTooLarge] for an encoding
// that does not fit [replay.MaxResultBytes] once sealed.
func (s sealer) seal(id string, fp []byte, r Response) ([]byte, error) {
	enc, err := EncodeResponse(r)
	if err != nil {
		return nil, err
	}
	if len(enc) > maxSealedPlaintext {
		return nil, replay.ErrTooLarge
	}
	if len(s.aeads) == 0 {
		return nil, errRecordCorrupt // a zero Middleware: New never builds one
	}
	out := make([]byte, sealHeaderSize, sealOverhead+len(enc))
	out[0] = sealVersion
	copy(out[1:], s.ids[0][:])
	var adBuf [sealHeaderSize + 8 + 128]byte
	ad := sealAD(adBuf[:0], out[:sealHeaderSize], id, fp)
	return s.aeads[0].Seal(out, enc, ad), nil
}

// openFault says why a stored record did not open; the zero value is
// none.
type openFault uint8

const (
	openOK openFault = iota
	openMalformed
	openUnknownKey
	openForged
	openUndecodable
)

// message is the fixed log message of a fault: never a byte of the record.
func (f openFault) message() string {
	switch f {
	case openMalformed:
		return "idempotency: stored response is not a sealed record (wrong length or version); answered 500, the handler not run"
	case openUnknownKey:
		return "idempotency: stored response was sealed under a key that is not in the keyring; answered 500, the handler not run"
	case openForged:
		return "idempotency: stored response fails authentication (edited in the store, or moved from another key or request); answered 500, the handler not run"
	}
	return "idempotency: stored response does not decode; answered 500, the handler not run"
}

// open returns the response sealed in b for the store ID id and the
// request fingerprint fp, or why it cannot: b's length is checked
// (sealOverhead to [replay.MaxResultBytes]) before anything else, then its
// version; its key id picks the key of the ring that opens it; the
// authenticated plaintext is then decoded by [DecodeResponse]. Nothing of a
// record that fails is returned.
func (s sealer) open(id string, fp, b []byte) (Response, openFault) {
	if len(b) < sealOverhead || len(b) > replay.MaxResultBytes || b[0] != sealVersion {
		return Response{}, openMalformed
	}
	k := -1
	for i := range s.ids {
		if string(s.ids[i][:]) == string(b[1:sealHeaderSize]) {
			k = i
			break
		}
	}
	if k < 0 {
		return Response{}, openUnknownKey
	}
	var adBuf [sealHeaderSize + 8 + 128]byte
	ad := sealAD(adBuf[:0], b[:sealHeaderSize], id, fp)
	pt, err := s.aeads[k].Open(nil, b[sealHeaderSize:], ad)
	if err != nil {
		return Response{}, openForged
	}
	r, err := DecodeResponse(pt)
	if err != nil {
		return Response{}, openUndecodable
	}
	return r, openOK
}
