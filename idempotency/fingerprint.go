package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ctoken/ctoken"
)

// fingerprintVersion is the first byte of every fingerprint, so that a
// later version is never taken for a different request of this one.
// Version 2 added the content coding and the media type.
const fingerprintVersion = 2

// FingerprintSize is the length of a request fingerprint: a version byte
// and a SHA-256 digest.
const FingerprintSize = 1 + sha256.Size

// fingerprintDomain separates the request-fingerprint hash from every
// other SHA-256 use.
const fingerprintDomain = "ctoken/idempotency request v2\x00"

// Body kinds inside the fingerprint: a JSON body is digested as its RFC
// 8785 canonical form, any other as its bytes, and the kind byte keeps the
// two from ever colliding.
const (
	bodyJSON byte = 'J'
	bodyRaw  byte = 'R'
)

// Fingerprint returns the fingerprint of a request: what two requests
// with the same key must share to count as one. It covers the method, the
// escaped path, the raw query, the request's content coding (its
// Content-Encoding header) and the body. A body without a content coding
// and of a JSON content type (application/json or any +json type) counts
// as its [ctoken.ArgsFingerprint] (RFC 8785 canonical JSON), so member
// order and white space do not matter; any other body — of another type,
// encoded (gzip), or one ArgsFingerprint refuses — counts as its bytes and
// its media type (the Content-Type without parameters, lowercased), so the
// same bytes sent as two types, or once gzip-encoded and once not, are two
// requests.
//
// The result is [FingerprintSize] bytes: the version byte 2, then SHA-256
// over the domain label "ctoken/idempotency request v2" and a zero byte;
// the method, the path, the query and the content coding, each preceded
// by its length as 8 bytes big-endian; the body kind ('J' or 'R'); the
// media type, length-prefixed the same way (empty for 'J'); and the body's
// 32-byte digest. The content coding is the header's values joined with
// commas, split at the commas, each trimmed of spaces and tabs and
// lowercased, the empty ones dropped, joined with commas ("" without the
// header). idempotency/testdata/vectors.json holds known-answer cases.
func Fingerprint(method, escapedPath, rawQuery string, header http.Header, body []byte) []byte {
	coding, contentType := contentCoding(header.Values("Content-Encoding")), header.Get("Content-Type")
	kind, media, digest := bodyRaw, "", [sha256.Size]byte{}
	if coding == "" && isJSON(contentType) {
		if fp, err := ctoken.ArgsFingerprint(json.RawMessage(body)); err == nil {
			kind, digest = bodyJSON, fp
		}
	}
	if kind == bodyRaw { // the body's bytes are hashed only when they count
		media, digest = mediaType(contentType), sha256.Sum256(body)
	}
	var stack [256]byte
	b := append(stack[:0], fingerprintDomain...)
	b = appendField(b, method)
	b = appendField(b, escapedPath)
	b = appendField(b, rawQuery)
	b = appendField(b, coding)
	b = append(b, kind)
	b = appendField(b, media)
	b = append(b, digest[:]...)
	sum := sha256.Sum256(b)
	out := make([]byte, 0, FingerprintSize)
	return append(append(out, fingerprintVersion), sum[:]...)
}

// contentCoding is the normal form of Content-Encoding values: the codings
// trimmed and lowercased, empty ones dropped, joined with commas.
func contentCoding(values []string) string {
	if len(values) == 0 {
		return ""
	}
	var out []string
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.Trim(c, " \t"); c != "" {
				out = append(out, strings.ToLower(c))
			}
		}
	}
	return strings.Join(out, ",")
}

// mediaType is a Content-Type value without its parameters, trimmed of
// spaces and tabs and lowercased.
func mediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.Trim(mt, " \t"))
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
