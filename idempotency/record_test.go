package idempotency

import (
	"bytes"
	"errors"
	"net/http"
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

func TestDecodeResponseRefusesOversizeBeforeDecoding(t *testing.T) {
	b, err := EncodeResponse(Response{Status: 200, Body: make([]byte, replay.MaxResultBytes-16)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeResponse(b); err != nil {
		t.Fatalf("a response just under the cap: %v", err)
	}
	if _, err := DecodeResponse(append(b, make([]byte, 32)...)); !errors.Is(err, ErrRecord) {
		t.Fatalf("over the cap: %v", err)
	}
}

func TestStoredHeader(t *testing.T) {
	h := http.Header{}
	h.Add("Content-Type", "text/plain")
	h.Add("X-A", " a\r\nb\x00 ")
	h.Add("X-A", "c")
	h.Add("X-Skipped", "s")
	got := storedHeader(h, []string{"X-A", "Content-Type", "Location"})
	want := [][2]string{{"X-A", "a  b"}, {"X-A", "c"}, {"Content-Type", "text/plain"}}
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
