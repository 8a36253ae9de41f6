package idempotency

import (
	"bytes"
	"testing"
)

func TestFingerprint(t *testing.T) {
	base := Fingerprint("POST", "/payments", "", "application/json", []byte(`{"amount":100,"currency":"eur"}`))
	if len(base) != FingerprintSize || base[0] != fingerprintVersion {
		t.Fatalf("fingerprint %x", base)
	}
	for _, tc := range []struct {
		name                    string
		method, path, query, ct string
		body                    string
		same                    bool
	}{
		{"member order and white space", "POST", "/payments", "", "application/json", " {\"currency\": \"eur\",\n\"amount\": 100}", true},
		{"number spelling", "POST", "/payments", "", "application/json", `{"amount":1e2,"currency":"eur"}`, true},
		{"content type parameters and case", "POST", "/payments", "", "Application/JSON; charset=utf-8", `{"amount":100,"currency":"eur"}`, true},
		{"+json content type", "POST", "/payments", "", "application/vnd.api+json", `{"currency":"eur","amount":100}`, true},
		{"other amount", "POST", "/payments", "", "application/json", `{"amount":101,"currency":"eur"}`, false},
		{"other method", "PATCH", "/payments", "", "application/json", `{"amount":100,"currency":"eur"}`, false},
		{"other path", "POST", "/payments/", "", "application/json", `{"amount":100,"currency":"eur"}`, false},
		{"other query", "POST", "/payments", "a=1", "application/json", `{"amount":100,"currency":"eur"}`, false},
		{"same bytes as raw", "POST", "/payments", "", "text/plain", `{"amount":100,"currency":"eur"}`, false},
		{"path and query boundary", "POST", "/payments?", "", "application/json", `{"amount":100,"currency":"eur"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Fingerprint(tc.method, tc.path, tc.query, tc.ct, []byte(tc.body))
			if bytes.Equal(got, base) != tc.same {
				t.Fatalf("same = %v, want %v", !tc.same, tc.same)
			}
		})
	}
	t.Run("a JSON body ArgsFingerprint refuses counts as its bytes", func(t *testing.T) {
		dup := []byte(`{"a":1,"a":2}`)
		asJSON := Fingerprint("POST", "/p", "", "application/json", dup)
		if !bytes.Equal(asJSON, Fingerprint("POST", "/p", "", "text/plain", dup)) {
			t.Fatal("refused JSON is not fingerprinted as raw bytes")
		}
		if bytes.Equal(asJSON, Fingerprint("POST", "/p", "", "application/json", []byte(`{"a":1, "a":2}`))) {
			t.Fatal("raw bytes with other white space fingerprint the same")
		}
	})
	t.Run("the kind byte keeps a raw body from matching a JSON one", func(t *testing.T) {
		// The canonical text of {"a":1} as a raw body digests the same
		// bytes as the JSON body's canonical form, yet differs.
		if bytes.Equal(Fingerprint("POST", "/p", "", "application/json", []byte(` {"a": 1}`)), Fingerprint("POST", "/p", "", "text/plain", []byte(`{"a":1}`))) {
			t.Fatal("a raw body collides with a JSON body of the same canonical text")
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
