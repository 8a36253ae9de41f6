package idempotency

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

func TestEncodeResponse(t *testing.T) {
	t.Run("round trip", func(t *testing.T) {
		in := Response{Status: 201, Header: [][2]string{{"Content-Type", "application/json"}, {"Link", "</a>"}, {"Link", "</b>"}}, Body: []byte{0, 1, 2, 0xff}}
		b, err := EncodeResponse(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeResponse(b)
		if err != nil || out.Status != 201 || !bytes.Equal(out.Body, in.Body) || len(out.Header) != 3 || out.Header[2] != in.Header[2] || out.TooLarge {
			t.Fatalf("DecodeResponse = %+v, %v", out, err)
		}
	})
	for _, tc := range []struct {
		name string
		r    Response
		want error
	}{
		{"status 199", Response{Status: 199}, ErrRecord},
		{"status 600", Response{Status: 600}, ErrRecord},
		{"status 0", Response{}, ErrRecord},
		{"header name not a token", Response{Status: 200, Header: [][2]string{{"Bad Name", "v"}}}, ErrRecord},
		{"header value with CR", Response{Status: 200, Header: [][2]string{{"X-A", "a\rb"}}}, ErrRecord},
		{"too large marker with a body", Response{Status: 200, TooLarge: true, Body: []byte("x")}, ErrRecord},
		{"too large marker with a header", Response{Status: 200, TooLarge: true, Header: [][2]string{{"X-A", "a"}}}, ErrRecord},
		{"65 header lines", Response{Status: 200, Header: make([][2]string, maxStoredHeaders+1)}, replay.ErrTooLarge},
		{"headers over MaxStoredHeaderBytes", Response{Status: 200, Header: [][2]string{{"X-A", strings.Repeat("a", MaxStoredHeaderBytes)}}}, replay.ErrTooLarge},
		{"body over MaxResultBytes", Response{Status: 200, Body: make([]byte, replay.MaxResultBytes)}, replay.ErrTooLarge},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			for i := range tc.r.Header {
				if tc.r.Header[i][0] == "" {
					tc.r.Header[i] = [2]string{"X-A", "a"}
				}
			}
			if b, err := EncodeResponse(tc.r); !errors.Is(err, tc.want) || b != nil {
				t.Fatalf("EncodeResponse = %x, %v; want %v", b, err, tc.want)
			}
		})
	}
}

func TestResponseLimits(t *testing.T) {
	// A status-200 record with a body of n bytes encodes to 12 + n bytes
	// near the cap: map head, version, status (2 bytes), key 4 and a
	// 5-byte byte-string head.
	const overhead = 12
	raw := func(t *testing.T, w wireResponse) []byte {
		t.Helper()
		b, err := recordEnc.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("exactly MaxResultBytes encodes and decodes", func(t *testing.T) {
		b, err := EncodeResponse(Response{Status: 200, Body: make([]byte, replay.MaxResultBytes-overhead)})
		if err != nil || len(b) != replay.MaxResultBytes {
			t.Fatalf("%d bytes, %v", len(b), err)
		}
		if _, err := DecodeResponse(b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("one byte over MaxResultBytes is refused both ways", func(t *testing.T) {
		if _, err := EncodeResponse(Response{Status: 200, Body: make([]byte, replay.MaxResultBytes-overhead+1)}); !errors.Is(err, replay.ErrTooLarge) {
			t.Fatalf("encode: %v", err)
		}
		b := raw(t, wireResponse{Version: 1, Status: 200, Body: make([]byte, replay.MaxResultBytes-overhead+1)})
		if _, err := DecodeResponse(b); len(b) != replay.MaxResultBytes+1 || !errors.Is(err, ErrRecord) {
			t.Fatalf("decode of %d bytes: %v", len(b), err)
		}
	})
	t.Run("64 header lines decode, 65 do not", func(t *testing.T) {
		var hdr [][2]string
		for i := range maxStoredHeaders {
			hdr = append(hdr, [2]string{"X-H", strconv.Itoa(i)})
		}
		b, err := EncodeResponse(Response{Status: 200, Header: hdr})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := DecodeResponse(b); err != nil || len(r.Header) != maxStoredHeaders || r.Header[63] != hdr[63] {
			t.Fatalf("decode: %d headers, %v", len(r.Header), err)
		}
		flat := []string{}
		for range maxStoredHeaders + 1 {
			flat = append(flat, "X-H", "v")
		}
		if _, err := DecodeResponse(raw(t, wireResponse{Version: 1, Status: 200, Header: flat})); !errors.Is(err, ErrRecord) {
			t.Fatalf("65 lines: %v", err)
		}
	})
	t.Run("header bytes up to MaxStoredHeaderBytes decode, one more does not", func(t *testing.T) {
		at := func(n int) []byte {
			return raw(t, wireResponse{Version: 1, Status: 200, Header: []string{"X-A", strings.Repeat("v", n-len("X-A"))}})
		}
		if _, err := DecodeResponse(at(MaxStoredHeaderBytes)); err != nil {
			t.Fatalf("at the cap: %v", err)
		}
		if _, err := DecodeResponse(at(MaxStoredHeaderBytes + 1)); !errors.Is(err, ErrRecord) {
			t.Fatalf("over the cap: %v", err)
		}
		if _, err := EncodeResponse(Response{Status: 200, Header: [][2]string{{"X-A", strings.Repeat("v", MaxStoredHeaderBytes-3)}}}); err != nil {
			t.Fatalf("encode at the cap: %v", err)
		}
	})
	t.Run("a status past the int range is refused", func(t *testing.T) {
		for _, st := range []uint{600, 999, 1000, 1 << 63, ^uint(0)} {
			if _, err := DecodeResponse(raw(t, wireResponse{Version: 1, Status: st})); !errors.Is(err, ErrRecord) {
				t.Errorf("status %d: %v", st, err)
			}
		}
	})
}

func TestStoredHeader(t *testing.T) {
	h := http.Header{}
	h.Add("Content-Type", "text/plain")
	h.Add("X-A", " a\r\nb\x00 \x7f")
	h.Add("X-A", "c")
	h.Add("X-Skipped", "s")
	got := storedHeader(h, []string{"X-A", "Content-Type", "Location"})
	want := [][2]string{{"X-A", "a  b"}, {"X-A", "c"}, {"Content-Type", "text/plain"}}
	h.Add("X-Tab", "a\tb c")
	if got := storedHeader(h, []string{"X-Tab"}); len(got) != 1 || got[0][1] != "a\tb c" {
		t.Fatalf("a valid value with a tab and a space changed: %q", got)
	}
	if len(got) != len(want) {
		t.Fatalf("storedHeader = %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("header %d = %q, want %q", i, got[i], want[i])
		}
	}
	if _, err := EncodeResponse(Response{Status: 200, Header: got}); err != nil {
		t.Fatalf("cleaned headers do not encode: %v", err)
	}
}
