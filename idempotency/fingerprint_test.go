package idempotency

import (
	"bytes"
	"net/http"
	"testing"
)

// hdr is a request header with the Content-Type ct and, unless "", the
// Content-Encoding ce.
func hdr(ct, ce string) http.Header {
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	if ce != "" {
		h.Set("Content-Encoding", ce)
	}
	return h
}

func TestFingerprint(t *testing.T) {
	base := Fingerprint("POST", "/payments", "", hdr("application/json", ""), []byte(`{"amount":100,"currency":"eur"}`))
	if len(base) != FingerprintSize || base[0] != fingerprintVersion {
		t.Fatalf("fingerprint %x", base)
	}
	for _, tc := range []struct {
		name                        string
		method, path, query, ct, ce string
		body                        string
		same                        bool
	}{
		{"member order and white space", "POST", "/payments", "", "application/json", "", " {\"currency\": \"eur\",\n\"amount\": 100}", true},
		{"number spelling", "POST", "/payments", "", "application/json", "", `{"amount":1e2,"currency":"eur"}`, true},
		{"content type parameters and case", "POST", "/payments", "", "Application/JSON; charset=utf-8", "", `{"amount":100,"currency":"eur"}`, true},
		{"+json content type", "POST", "/payments", "", "application/vnd.api+json", "", `{"currency":"eur","amount":100}`, true},
		{"other amount", "POST", "/payments", "", "application/json", "", `{"amount":101,"currency":"eur"}`, false},
		{"other method", "PATCH", "/payments", "", "application/json", "", `{"amount":100,"currency":"eur"}`, false},
		{"other path", "POST", "/payments/", "", "application/json", "", `{"amount":100,"currency":"eur"}`, false},
		{"other query", "POST", "/payments", "a=1", "application/json", "", `{"amount":100,"currency":"eur"}`, false},
		{"same bytes as raw", "POST", "/payments", "", "text/plain", "", `{"amount":100,"currency":"eur"}`, false},
		{"path and query boundary", "POST", "/payments?", "", "application/json", "", `{"amount":100,"currency":"eur"}`, false},
		{"same bytes under a content coding", "POST", "/payments", "", "application/json", "gzip", `{"amount":100,"currency":"eur"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Fingerprint(tc.method, tc.path, tc.query, hdr(tc.ct, tc.ce), []byte(tc.body))
			if bytes.Equal(got, base) != tc.same {
				t.Fatalf("same = %v, want %v", !tc.same, tc.same)
			}
		})
	}
	t.Run("a JSON body ArgsFingerprint refuses counts as its bytes", func(t *testing.T) {
		dup := []byte(`{"a":1,"a":2}`)
		asJSON := Fingerprint("POST", "/p", "", hdr("application/json", ""), dup)
		if !bytes.Equal(asJSON, Fingerprint("POST", "/p", "", hdr("Application/JSON; charset=utf-8", ""), dup)) {
			t.Fatal("refused JSON is not fingerprinted as raw bytes of its media type")
		}
		if bytes.Equal(asJSON, Fingerprint("POST", "/p", "", hdr("application/json", ""), []byte(`{"a":1, "a":2}`))) {
			t.Fatal("raw bytes with other white space fingerprint the same")
		}
	})
	t.Run("the kind byte keeps a raw body from matching a JSON one", func(t *testing.T) {
		// The canonical text of {"a":1} as a raw body digests the same
		// bytes as the JSON body's canonical form, yet differs.
		if bytes.Equal(Fingerprint("POST", "/p", "", hdr("application/json", ""), []byte(` {"a": 1}`)), Fingerprint("POST", "/p", "", hdr("", ""), []byte(`{"a":1}`))) {
			t.Fatal("a raw body collides with a JSON body of the same canonical text")
		}
	})
	t.Run("the media type of a raw body counts, its parameters and case do not", func(t *testing.T) {
		body := []byte("\x89PNG raw bytes")
		png := Fingerprint("POST", "/p", "", hdr("image/png", ""), body)
		for ct, same := range map[string]bool{"Image/PNG": true, " image/png ; q=1": true, "image/jpeg": false, "application/octet-stream": false, "": false} {
			if got := Fingerprint("POST", "/p", "", hdr(ct, ""), body); bytes.Equal(got, png) != same {
				t.Errorf("%q: same = %v, want %v", ct, !same, same)
			}
		}
	})
	t.Run("the content coding counts, its case, spacing and line split do not", func(t *testing.T) {
		body := []byte{0x1f, 0x8b, 8, 0}
		gz := Fingerprint("POST", "/p", "", hdr("application/json", "gzip, br"), body)
		split := hdr("application/json", "GZIP")
		split.Add("Content-Encoding", " br ")
		for name, h := range map[string]http.Header{"case and spaces": hdr("application/json", " GZip ,br"), "two lines": split} {
			if !bytes.Equal(Fingerprint("POST", "/p", "", h, body), gz) {
				t.Errorf("%s: fingerprint differs", name)
			}
		}
		for _, ce := range []string{"", "gzip", "br, gzip", "deflate"} {
			if bytes.Equal(Fingerprint("POST", "/p", "", hdr("application/json", ce), body), gz) {
				t.Errorf("coding %q fingerprints as gzip, br", ce)
			}
		}
	})
	t.Run("the header is read as net/http reads it", func(t *testing.T) {
		if !bytes.Equal(Fingerprint("POST", "/p", "", nil, nil), Fingerprint("POST", "/p", "", http.Header{}, nil)) {
			t.Error("a nil header differs from an empty one")
		}
		// Header.Get finds only canonical keys: a hand-built lowercase
		// key is no Content-Type, as for net/http.
		if !bytes.Equal(Fingerprint("POST", "/p", "", http.Header{"content-type": {"text/plain"}}, []byte("x")), Fingerprint("POST", "/p", "", nil, []byte("x"))) {
			t.Error("a non-canonical key was read")
		}
	})
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "APPLICATION/JSON": true, "application/json;charset=utf-8": true,
		" application/problem+json ; q=1": true, "application/x+json": true,
		"application/+json": false, "text/json": false, "application/jsonx": false, "application/json5": false,
		"": false, "json": false, "application": false, "multipart/form-data": false,
	} {
		if isJSON(ct) != want {
			t.Errorf("isJSON(%q) = %v, want %v", ct, !want, want)
		}
	}
}
