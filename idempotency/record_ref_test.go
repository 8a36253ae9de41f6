package idempotency

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/fxamacker/cbor/v2"
)

// The record codec as it was written on a CBOR library (fxamacker/cbor,
// Core Deterministic Encoding, a strict decoder, and a decode that
// re-encodes to refuse what is not canonical): the reference that the
// hand-written EncodeResponse and DecodeResponse must match byte for byte
// and verdict for verdict (TestCodecMatchesTheCBORLibrary,
// FuzzRecordDecodeMatchesTheCBORLibrary).

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

// refEncodeResponse is EncodeResponse on the CBOR library.
func refEncodeResponse(r Response) ([]byte, error) {
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

// refDecodeResponse is DecodeResponse on the CBOR library.
func refDecodeResponse(b []byte) (Response, error) {
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
		return Response{}, errRecordCorrupt
	}
	return r, nil
}

// sameVerdict reports whether two codec errors agree: both nil, or both
// matching the same of replay.ErrTooLarge and ErrRecord.
func sameVerdict(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return errors.Is(a, replay.ErrTooLarge) == errors.Is(b, replay.ErrTooLarge) && errors.Is(a, ErrRecord) == errors.Is(b, ErrRecord)
}

// checkDecodeMatches decodes b with both codecs and fails unless they
// agree on the verdict and, when both accept, on the response.
func checkDecodeMatches(t *testing.T, b []byte) {
	t.Helper()
	got, err := DecodeResponse(b)
	want, wantErr := refDecodeResponse(b)
	if !sameVerdict(err, wantErr) {
		t.Fatalf("DecodeResponse(%x) error %v, the CBOR library's %v", b, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeResponse(%x) = %+v, the CBOR library's %+v", b, got, want)
	}
}

// codecResponses returns responses around every edge of the encoding:
// each head size of status, header count, name, value and body, the caps
// on lines and header bytes, invalid fields and the TooLarge marker.
func codecResponses() []Response {
	var rs []Response
	for _, st := range []int{0, 199, 200, 201, 255, 256, 404, 599, 600, 65535, 65536, 1 << 40, -1} {
		rs = append(rs, Response{Status: st}, Response{Status: st, Body: []byte("x")}, Response{Status: st, TooLarge: true})
	}
	for _, n := range []int{1, 23, 24, 255, 256, 65535, 65536, replay.MaxResultBytes - 12, replay.MaxResultBytes - 11} {
		rs = append(rs, Response{Status: 200, Body: bytes.Repeat([]byte{0xff}, n)})
	}
	for _, lines := range []int{1, 11, 12, 13, 63, 64, 65} {
		var h [][2]string
		for i := range lines {
			h = append(h, [2]string{"X-L" + strconv.Itoa(i), strings.Repeat("v", i*7)})
		}
		rs = append(rs, Response{Status: 201, Header: h, Body: []byte("{}")}, Response{Status: 201, Header: h, TooLarge: true})
	}
	for _, v := range []string{"", "a", strings.Repeat("a", 23), strings.Repeat("a", 24), strings.Repeat("a", 255), strings.Repeat("a", 256),
		strings.Repeat("a", MaxStoredHeaderBytes-12), strings.Repeat("a", MaxStoredHeaderBytes-11), "é", "\xff", "a\x00b", " a", "a\t", "a\tb"} {
		rs = append(rs, Response{Status: 200, Header: [][2]string{{"Content-Type", v}}})
	}
	for _, n := range []string{"", "Bad Name", "X-Ok", "é", strings.Repeat("n", 300)} {
		rs = append(rs, Response{Status: 200, Header: [][2]string{{n, "v"}}, Body: []byte("b")})
	}
	return rs
}

// TestCodecMatchesTheCBORLibrary checks the hand-written codec against
// the CBOR library: EncodeResponse writes the same bytes (or refuses with
// the same error) for responses around every edge, and DecodeResponse
// gives the same verdict and response for each encoding and for every
// one-byte change, truncation and extension of it.
func TestCodecMatchesTheCBORLibrary(t *testing.T) {
	for i, r := range codecResponses() {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			got, err := EncodeResponse(r)
			want, wantErr := refEncodeResponse(r)
			if !sameVerdict(err, wantErr) || !bytes.Equal(got, want) {
				t.Fatalf("EncodeResponse = %x, %v; the CBOR library %x, %v", got, err, want, wantErr)
			}
			if err != nil || len(want) > 4<<10 {
				if err == nil {
					checkDecodeMatches(t, want)
				}
				return
			}
			checkDecodeMatches(t, want)
			for j := range want {
				checkDecodeMatches(t, want[:j])
				for _, c := range []byte{0x00, 0x01, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1f, 0x40, 0x5f, 0x60, 0x7f, 0x80, 0x9f, 0xa0, 0xa6, 0xbf, 0xc0, 0xf4, 0xf5, 0xf6, 0xff, want[j] + 1, want[j] - 1} {
					b := bytes.Clone(want)
					b[j] = c
					checkDecodeMatches(t, b)
				}
			}
			checkDecodeMatches(t, append(bytes.Clone(want), 0x00))
		})
	}
	t.Run("non-minimal heads", func(t *testing.T) {
		for _, hexed := range []string{
			"a2010118c8", "a2180101021900c8", "a2011801021900c8", "a3010218c804581a" + strings.Repeat("00", 26),
			"a401011900c80381646e616d650441ff", "a301011900c804590001ff", "a301011900c8045a00000001ff",
			"a301011900c8045b0000000000000001ff", "a301011900c8f5", "a301011900c805f4", "a401011900c8040141ff05f5",
		} {
			b, err := hex.DecodeString(hexed)
			if err != nil {
				t.Fatal(err)
			}
			checkDecodeMatches(t, b)
		}
	})
}

// FuzzRecordDecodeMatchesTheCBORLibrary feeds arbitrary bytes to both
// codecs: the verdicts and the responses agree.
func FuzzRecordDecodeMatchesTheCBORLibrary(f *testing.F) {
	for _, r := range codecResponses() {
		if b, err := refEncodeResponse(r); err == nil && len(b) < 4<<10 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecodeMatches(t, b) })
}
