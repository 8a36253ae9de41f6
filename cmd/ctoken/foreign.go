package main

import (
	"encoding/json"
	"strings"
)

// Two MCP SDKs mint request states that begin "v1." too, in formats of
// their own that ctoken cannot read (docs/wire-format.md, "The v1. prefix
// is not unique"):
//
//   - the TypeScript SDK's createRequestStateCodec (packages/server,
//     requestStateCodec.ts): "v1." b64url(JSON {"p":…,"exp":…,"b":…?}) "."
//     b64url(HMAC-SHA256), the optional "b" a 22-character base64url tag;
//   - the Python SDK's AESGCMRequestStateCodec (mcp/server/request_state.py):
//     "v1." b64url(kid4 || nonce12 || AES-256-GCM ciphertext and tag), one
//     segment with no second ".".
//
// foreignState names the SDK whose shape a v1. token that is not a ctoken
// state has, or "" for none. It reads the shape only; it verifies nothing.
func foreignState(tok string) string {
	rest, ok := strings.CutPrefix(tok, signedPrefix)
	if !ok {
		return ""
	}
	body, mac, twoParts := strings.Cut(rest, ".")
	if !twoParts {
		// kid (4) + nonce (12) + GCM tag (16), and at least one byte of JSON.
		if raw, err := b64.DecodeString(rest); err == nil && len(raw) > 4+12+16 {
			return "Python-SDK"
		}
		return ""
	}
	if strings.Contains(mac, ".") {
		return ""
	}
	payload, err := b64.DecodeString(body)
	if err != nil {
		return ""
	}
	if m, err := b64.DecodeString(mac); err != nil || len(m) != macBytes {
		return ""
	}
	var env map[string]json.RawMessage
	if json.Unmarshal(payload, &env) != nil {
		return ""
	}
	_, hasP := env["p"]
	_, hasS := env["s"]
	var exp float64
	if !hasP || hasS || json.Unmarshal(env["exp"], &exp) != nil {
		return ""
	}
	if b, ok := env["b"]; ok {
		var tag string
		if json.Unmarshal(b, &tag) != nil || len(tag) != 22 {
			return ""
		}
	}
	return "TypeScript-SDK"
}
