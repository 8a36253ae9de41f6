package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
)

// tsSDKState mints a state as the TypeScript SDK's createRequestStateCodec
// does: "v1." b64url(JSON) "." b64url(HMAC-SHA256(key, "v1." + body)).
func tsSDKState(payload string) string {
	body := base64.RawURLEncoding.EncodeToString([]byte(payload))
	m := hmac.New(sha256.New, make([]byte, 32))
	m.Write([]byte("v1." + body))
	return "v1." + body + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// pySDKState mints a state as the Python SDK's AESGCMRequestStateCodec
// does: "v1." b64url(kid4 || nonce12 || AES-256-GCM(payload, aad "v1." kid)).
func pySDKState(t *testing.T, payload string) string {
	block, err := aes.NewCipher(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	// A random nonce, prepended by Seal: the Python layout, and what
	// GODEBUG=fips140=only allows.
	gcm, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		t.Fatal(err)
	}
	kid := []byte{1, 2, 3, 4}
	raw := append(append([]byte(nil), kid...), gcm.Seal(nil, nil, []byte(payload), append([]byte("v1."), kid...))...)
	return "v1." + base64.RawURLEncoding.EncodeToString(raw)
}

// inspect names the SDK of a v1. state minted by the TypeScript or Python
// MCP SDK instead of calling it invalid; ctoken's own states and malformed
// tokens are unaffected.
func TestInspectNamesAnotherSDKsState(t *testing.T) {
	f := newFixture(t)
	own := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject}, `{"step":2}`, "alice", "tools/call\x00deploy")
	for _, tc := range []struct {
		name, tok, want string
	}{
		{"TypeScript SDK, bound", tsSDKState(`{"p":{"step":2},"exp":1767323345,"b":"AAAAAAAAAAAAAAAAAAAAAA"}`), "looks like a TypeScript-SDK state"},
		{"TypeScript SDK, unbound", tsSDKState(`{"p":"x","exp":1767323345}`), "looks like a TypeScript-SDK state"},
		{"Python SDK", pySDKState(t, `{"state":"x"}`), "looks like a Python-SDK state"},
		{"TypeScript shape with a ctoken member", tsSDKState(`{"p":1,"s":"x","exp":1}`), `lacks "s"`},
		{"TypeScript shape with a long tag", tsSDKState(`{"p":1,"exp":1,"b":"` + strings.Repeat("a", 64) + `"}`), `lacks "s"`},
		{"one short segment", "v1.e30", "want v1.PAYLOAD.MAC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", nil, "inspect", tc.tok)
			if r.code == exitOK || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a refusal saying %q", r.code, r.stdout, r.stderr, tc.want)
			}
			if strings.Contains(tc.want, "SDK") && strings.Contains(r.stderr, "not a well-formed") {
				t.Fatalf("called invalid: %q", r.stderr)
			}
		})
	}
	t.Run("ctoken state", func(t *testing.T) {
		if r := runCmd(t, "", nil, "inspect", own); r.code != exitOK || foreignState(own) != "" {
			t.Fatalf("exit %d, stderr %q, foreignState %q", r.code, r.stderr, foreignState(own))
		}
	})
}
