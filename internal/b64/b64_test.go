package b64

import (
	"bytes"
	"errors"
	"testing"
)

func TestDecodeRefusesSecondSpellings(t *testing.T) {
	tests := []struct {
		name string
		enc  Encoding
		in   string
	}{
		{"url with LF", URL, "AAEC\nAw"},
		{"url with CR", URL, "AAECAw\r"},
		{"url with CRLF inside", URL, "AA\r\nECAw"},
		{"url non-zero trailing bits", URL, "AAECAx"},
		{"url padding", URL, "AAECAw=="},
		{"url std alphabet", URL, "+/8"},
		{"url trailing single char", URL, "AAECA"},
		{"std missing padding", Std, "AAECAw"},
		{"std LF before padding", Std, "AAECAw\n=="},
		{"std trailing LF", Std, "AAECAw==\n"},
		{"std non-zero trailing bits", Std, "AAECAx=="},
		{"std url alphabet", Std, "-_8="},
		{"rawstd padding", RawStd, "AAECAw=="},
		{"rawstd LF", RawStd, "AAEC\nAw"},
		{"space", URL, "AAEC Aw"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := tc.enc.DecodeString(tc.in); !errors.Is(err, ErrInvalid) || b != nil {
				t.Fatalf("DecodeString(%q) = %x, %v; want nil, ErrInvalid", tc.in, b, err)
			}
			dst := make([]byte, 64)
			if n, err := tc.enc.Decode(dst, []byte(tc.in)); !errors.Is(err, ErrInvalid) || n != 0 {
				t.Fatalf("Decode(%q) = %d, %v; want 0, ErrInvalid", tc.in, n, err)
			}
		})
	}
}

func TestDecodeAcceptsCanonicalEncodingAndRoundTrips(t *testing.T) {
	for _, enc := range []Encoding{URL, Std, RawStd} {
		for n := range 40 {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*37 + n)
			}
			text := enc.EncodeToString(src)
			if len(text) != enc.EncodedLen(n) || string(enc.AppendEncode([]byte("x"), src)) != "x"+text {
				t.Fatalf("encoding of %d bytes: %q", n, text)
			}
			buf := make([]byte, enc.EncodedLen(n))
			enc.Encode(buf, src)
			if string(buf) != text {
				t.Fatalf("Encode = %q, EncodeToString = %q", buf, text)
			}
			got, err := enc.DecodeString(text)
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("DecodeString(%q) = %x, %v; want %x", text, got, err, src)
			}
		}
	}
}

func TestDecodeRefusesShortDestinationWithoutPanic(t *testing.T) {
	dst := make([]byte, 2)
	if n, err := URL.Decode(dst, []byte("AAECAw")); !errors.Is(err, ErrInvalid) || n != 0 {
		t.Fatalf("Decode into a short dst = %d, %v; want 0, ErrInvalid", n, err)
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	src := []byte(URL.EncodeToString(make([]byte, 300)))
	dst := make([]byte, 300)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := URL.Decode(dst, src); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Decode allocates %v times", n)
	}
}

func FuzzDecodeIsCanonical(f *testing.F) {
	for _, s := range []string{"", "AA", "AAECAw", "AAECAw==", "AA\nEC", "AAECAx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, enc := range []Encoding{URL, Std, RawStd} {
			b, err := enc.DecodeString(s)
			if err != nil {
				continue
			}
			if enc.EncodeToString(b) != s {
				t.Fatalf("accepted %q, which is not the canonical encoding of %x", s, b)
			}
		}
	})
}
