package idempotency

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/ringkey"
	"github.com/ctoken/ctoken/internal/xaes"
	"github.com/ctoken/ctoken/replay"
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

// The CBOR of a stored response, written and read by hand: one map head,
// then the keys in order, each value with the shortest head (Core
// Deterministic Encoding). Major types and simple values used:
const (
	cborUint  = 0 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborArray = 4 << 5
	cborMap   = 5 << 5
	cborTrue  = 0xf5
)

// headSize is the length of a CBOR head carrying v.
func headSize(v int) int {
	switch {
	case v < 24:
		return 1
	case v <= 0xff:
		return 2
	case v <= 0xffff:
		return 3
	case v <= 0xffffffff:
		return 5
	}
	return 9
}

// appendHead appends the shortest CBOR head of major type major carrying v.
func appendHead(dst []byte, major byte, v int) []byte {
	switch {
	case v < 24:
		return append(dst, major|byte(v))
	case v <= 0xff:
		return append(dst, major|24, byte(v))
	case v <= 0xffff:
		return append(dst, major|25, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(dst, major|26), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, major|27), uint64(v))
}

// EncodeResponse returns the stored form of r, or an error matching
// [replay.ErrTooLarge] when it would exceed [replay.MaxResultBytes], has
// more than 64 header lines or more than [MaxStoredHeaderBytes] of them,
// and [ErrRecord] for a status outside 200 to 599, an invalid header, or
// a TooLarge response with headers or a body.
func EncodeResponse(r Response) ([]byte, error) {
	n, err := encodedSize(r)
	if err != nil {
		return nil, err
	}
	return appendResponse(make([]byte, 0, n), r), nil
}

// encodedSize checks r as [EncodeResponse] does and returns the length of
// its encoding.
func encodedSize(r Response) (int, error) {
	if err := checkResponse(r.Status, len(r.Header), r.TooLarge, len(r.Body)); err != nil {
		return 0, err
	}
	n := 1 + 2 + 1 + headSize(r.Status) // map head, key 1 and version, key 2 and status
	text := 0
	for _, kv := range r.Header {
		if !isToken(kv[0]) || !validFieldValue(kv[1]) {
			return 0, errRecordCorrupt
		}
		text += len(kv[0]) + len(kv[1])
		n += headSize(len(kv[0])) + len(kv[0]) + headSize(len(kv[1])) + len(kv[1])
	}
	if text > MaxStoredHeaderBytes || len(r.Header) > maxStoredHeaders {
		return 0, replay.ErrTooLarge
	}
	if len(r.Header) > 0 {
		n += 1 + headSize(2*len(r.Header))
	}
	if len(r.Body) > 0 {
		n += 1 + headSize(len(r.Body)) + len(r.Body)
	}
	if r.TooLarge {
		n += 2
	}
	if n > replay.MaxResultBytes {
		return 0, replay.ErrTooLarge
	}
	return n, nil
}

// appendResponse appends the encoding of r, which [encodedSize] accepted.
func appendResponse(dst []byte, r Response) []byte {
	return append(appendResponseHead(dst, r), r.Body...)
}

// appendResponseHead appends all of r's encoding but the body's bytes,
// which come last: a response with a body is never TooLarge, so key 5
// never follows it.
func appendResponseHead(dst []byte, r Response) []byte {
	fields := 2
	if len(r.Header) > 0 {
		fields++
	}
	if len(r.Body) > 0 {
		fields++
	}
	if r.TooLarge {
		fields++
	}
	dst = append(dst, cborMap|byte(fields), 1, cborUint|recordVersion, 2)
	dst = appendHead(dst, cborUint, r.Status)
	if len(r.Header) > 0 {
		dst = appendHead(append(dst, 3), cborArray, 2*len(r.Header))
		for _, kv := range r.Header {
			dst = append(appendHead(dst, cborText, len(kv[0])), kv[0]...)
			dst = append(appendHead(dst, cborText, len(kv[1])), kv[1]...)
		}
	}
	if len(r.Body) > 0 {
		dst = appendHead(append(dst, 4), cborBytes, len(r.Body))
	}
	if r.TooLarge {
		dst = append(dst, 5, cborTrue)
	}
	return dst
}

// DecodeResponse decodes a stored response strictly: at most
// [replay.MaxResultBytes], checked before decoding; one CBOR map of the
// keys above in Core Deterministic Encoding (re-encoding it gives the same
// bytes), no duplicate, unknown or missing key, no tag, no indefinite
// length, valid UTF-8; version 1, a status of 200 to 599, header names
// that are tokens and values without control characters, at most 64
// lines and [MaxStoredHeaderBytes]. Any other input is an error matching
// [ErrRecord]; it never panics. The Body it returns is a copy.
func DecodeResponse(b []byte) (Response, error) {
	r, err := decodeResponse(b)
	r.Body = bytes.Clone(r.Body)
	return r, err
}

// decodeResponse is [DecodeResponse] with a Body that is b's own bytes.
// It accepts exactly what [EncodeResponse] writes: every head the
// shortest, the keys in order, the optional ones present only when not
// empty (TooLarge only when true), nothing after the map.
func decodeResponse(b []byte) (Response, error) {
	if len(b) == 0 || len(b) > replay.MaxResultBytes {
		return Response{}, errRecordCorrupt
	}
	d := cborReader{b: b}
	fields := d.head(cborMap)
	if fields < 2 || fields > 5 || d.byte() != 1 || d.head(cborUint) != recordVersion || d.byte() != 2 {
		return Response{}, errRecordCorrupt
	}
	r := Response{Status: d.head(cborUint)}
	// Header item i (names and values alternating) is b[at[i]:at[i]+size[i]].
	var at, size [2 * maxStoredHeaders]int
	items, textLen := 0, 0
	last := byte(2)
	for range fields - 2 {
		key := d.byte()
		if key <= last {
			d.bad = true // out of order, repeated, or not a key
		}
		last = key
		switch key {
		case 3:
			items = d.head(cborArray)
			if items == 0 || items%2 != 0 || items > len(at) {
				return Response{}, errRecordCorrupt
			}
			for i := range items {
				size[i] = d.head(cborText)
				at[i] = d.off
				d.skip(size[i])
				textLen += size[i]
			}
		case 4:
			n := d.head(cborBytes)
			d.bad = d.bad || n == 0
			r.Body = d.skip(n)
		case 5:
			r.TooLarge = d.byte() == cborTrue
			d.bad = d.bad || !r.TooLarge
		default:
			d.bad = true
		}
		if d.bad {
			return Response{}, errRecordCorrupt
		}
	}
	if d.off != len(b) {
		return Response{}, errRecordCorrupt
	}
	if err := checkResponse(r.Status, items/2, r.TooLarge, len(r.Body)); err != nil {
		return Response{}, errRecordCorrupt
	}
	if items > 0 {
		if textLen > MaxStoredHeaderBytes {
			return Response{}, errRecordCorrupt
		}
		// One string holds every name and value.
		var sb strings.Builder
		sb.Grow(textLen)
		for i := range items {
			sb.Write(b[at[i] : at[i]+size[i]])
		}
		all := sb.String()
		if !utf8.ValidString(all) {
			return Response{}, errRecordCorrupt
		}
		r.Header = make([][2]string, items/2)
		start := 0
		for i := range items {
			r.Header[i/2][i%2] = all[start : start+size[i]]
			start += size[i]
		}
		for _, kv := range r.Header {
			if !isToken(kv[0]) || !validFieldValue(kv[1]) {
				return Response{}, errRecordCorrupt
			}
		}
	}
	return r, nil
}

// cborReader reads the heads and items of a stored response. Any head
// that is not the shortest, of another major type, indefinite, or past
// the end sets bad, after which every read returns zero.
type cborReader struct {
	b   []byte
	off int
	bad bool
}

// byte reads one byte.
func (d *cborReader) byte() byte {
	if d.bad || d.off >= len(d.b) {
		d.bad = true
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

// head reads a head of major type major and returns its value, at most
// [replay.MaxResultBytes] (no item of a stored response is longer).
func (d *cborReader) head(major byte) int {
	c := d.byte()
	if c&0xe0 != major {
		d.bad = true
		return 0
	}
	info := c & 0x1f
	var v uint64
	switch {
	case info < 24:
		return int(info)
	case info == 24:
		v = uint64(d.byte())
		d.bad = d.bad || v < 24
	case info == 25:
		v = uint64(d.byte())<<8 | uint64(d.byte())
		d.bad = d.bad || v <= 0xff
	case info == 26:
		v = uint64(d.byte())<<24 | uint64(d.byte())<<16 | uint64(d.byte())<<8 | uint64(d.byte())
		d.bad = d.bad || v <= 0xffff
	default: // 27 needs a value over 32 bits; 28 to 31 are reserved or indefinite
		d.bad = true
	}
	if d.bad || v > replay.MaxResultBytes {
		d.bad = true
		return 0
	}
	return int(v)
}

// skip returns the next n bytes and moves past them.
func (d *cborReader) skip(n int) []byte {
	if d.bad || n > len(d.b)-d.off {
		d.bad = true
		return nil
	}
	s := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return s
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
	lines := 0
	for _, n := range names {
		lines += len(h[n])
	}
	if lines == 0 {
		return nil
	}
	out := make([][2]string, 0, lines)
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
	return s.sealIn(id, fp, r, nil)
}

// sealBuffered is seal of the response with status, header and the body
// held in buf, whose room in front of the body it writes the start of the
// encoding into, so the body is sealed where the handler wrote it.
func (s sealer) sealBuffered(id string, fp []byte, status int, header [][2]string, buf *respBuffer) ([]byte, error) {
	return s.sealIn(id, fp, Response{Status: status, Header: header, Body: buf.Bytes()}, buf.b)
}

// sealIn is seal. When whole is not nil, r.Body is whole[respRoom:] and
// whole[:respRoom] may be overwritten: if what comes before the body in
// the encoding fits there, it is written there and sealed with the body
// in place; otherwise the encoding is put together in a new slice, with
// one copy of the body.
func (s sealer) sealIn(id string, fp []byte, r Response, whole []byte) ([]byte, error) {
	n, err := encodedSize(r)
	if err != nil {
		return nil, err
	}
	if n > maxSealedPlaintext {
		return nil, replay.ErrTooLarge
	}
	if len(s.aeads) == 0 {
		return nil, errRecordCorrupt // a zero Middleware: New never builds one
	}
	var enc []byte
	if head := n - len(r.Body); len(r.Body) > 0 && head <= respRoom && len(whole) == respRoom+len(r.Body) {
		enc = whole[respRoom-head:]
		appendResponseHead(enc[:0], r)
	} else {
		enc = appendResponse(make([]byte, 0, n), r)
	}
	out := make([]byte, sealHeaderSize, sealOverhead+len(enc))
	out[0] = sealVersion
	copy(out[1:], s.ids[0][:])
	var adBuf [sealHeaderSize + 8 + 128]byte
	ad := sealAD(adBuf[:0], out[:sealHeaderSize], id, fp)
	return s.aeads[0].Seal(out, enc, ad), nil
}

// respRoom is the room a [respBuffer] keeps in front of the body for the
// start of the stored encoding: the map head, version, status and the
// body's head, and a few short header lines (Content-Type, Location).
const respRoom = 256

// respBuffer holds a handler's response body with [respRoom] bytes in
// front of it, once it has one, for [sealer.sealBuffered].
type respBuffer struct {
	b []byte // b[:respRoom] the room, b[respRoom:] the body; nil while empty
}

// Len returns the length of the body.
func (r *respBuffer) Len() int { return max(len(r.b)-respRoom, 0) }

// Bytes returns the body, nil when empty.
func (r *respBuffer) Bytes() []byte {
	if len(r.b) == 0 {
		return nil
	}
	return r.b[respRoom:]
}

// Write appends p to the body.
func (r *respBuffer) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.b == nil {
		r.b = make([]byte, respRoom, respRoom+max(len(p), 512))
	}
	r.b = append(r.b, p...)
	return len(p), nil
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
	r, err := decodeResponse(pt) // pt is ours: the body stays in it
	if err != nil {
		return Response{}, openUndecodable
	}
	return r, openOK
}
