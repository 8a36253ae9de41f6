package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"strings"

	"github.com/ctoken/ctoken"
)

// fingerprintVersion is the first byte of every fingerprint, so that a
// later version is never taken for a different request of this one.
const fingerprintVersion = 1

// FingerprintSize is the length of a request fingerprint: a version byte
// and a SHA-256 digest.
const FingerprintSize = 1 + sha256.Size

// fingerprintDomain separates the request-fingerprint hash from every
// other SHA-256 use.
const fingerprintDomain = "ctoken/idempotency request v1\x00"

// Body kinds inside the fingerprint: a JSON body is digested as its RFC
// 8785 canonical form, any other as its bytes, and the kind byte keeps the
// two from ever colliding.
const (
	bodyJSON byte = 'J'
	bodyRaw  byte = 'R'
)

// Fingerprint returns the fingerprint of a request: what two requests
// with the same key must share to count as one. It covers the method, the
// escaped path, the raw query and the body. For a JSON content type
// (application/json or any +json type) the body counts as its
// [ctoken.ArgsFingerprint] (RFC 8785 canonical JSON), so member order and
// white space do not matter; a body that ArgsFingerprint refuses, or of
// another content type, counts as its bytes. The result is
// [FingerprintSize] bytes: a version byte, then SHA-256 over a domain
// label, the method, path and query (each preceded by its length as 8
// bytes big-endian), the body kind ('J' or 'R') and the body's 32-byte
// digest. idempotency/testdata/vectors.json holds known-answer cases.
func Fingerprint(method, escapedPath, rawQuery, contentType string, body []byte) []byte {
	kind, digest := bodyRaw, sha256.Sum256(body)
	if isJSON(contentType) {
		if fp, err := ctoken.ArgsFingerprint(json.RawMessage(body)); err == nil {
			kind, digest = bodyJSON, fp
		}
	}
	var stack [256]byte
	b := append(stack[:0], fingerprintDomain...)
	b = appendField(b, method)
	b = appendField(b, escapedPath)
	b = appendField(b, rawQuery)
	b = append(b, kind)
	b = append(b, digest[:]...)
	sum := sha256.Sum256(b)
	out := make([]byte, 0, FingerprintSize)
	return append(append(out, fingerprintVersion), sum[:]...)
}

// isJSON reports whether a Content-Type value names JSON:
// application/json or a +json structured syntax suffix, any parameters
// ignored, case-insensitively.
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || !strings.EqualFold(typ, "application") {
		return false
	}
	return strings.EqualFold(sub, "json") || (len(sub) > 5 && strings.EqualFold(sub[len(sub)-5:], "+json"))
}
