package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctoken/ctoken"
)

// The ot1. payload layout (see the ctoken package documentation): version
// byte 3, the 4-byte key id of the signing key, 16-byte nonce, issued-at and
// expiry as big-endian int64 Unix seconds, uvarint-prefixed purpose, then
// uvarint-prefixed name/value pairs.
const (
	oneTimeVersion  = 3
	oneTimeNonceLen = 16
	oneTimeNonceAt  = oneTimeKeyIDAt + keyIDBytes
	oneTimeTimesAt  = oneTimeNonceAt + oneTimeNonceLen
	oneTimeFixedLen = oneTimeTimesAt + 8 + 8
)

var errNotOneTime = errors.New("not a well-formed ot1. one-time token")

// oneTimeWire is an ot1. token split into its fields, unverified.
type oneTimeWire struct {
	version         byte
	nonce           []byte
	issued, expires int64
	purpose         string
	names, values   []string // in token order
	mac             []byte
}

// parseOneTime decodes tok's framing and payload without checking its MAC.
func parseOneTime(tok string) (w oneTimeWire, err error) {
	raw, err := b64.DecodeString(strings.TrimPrefix(tok, oneTimePrefix))
	if err != nil {
		return w, fmt.Errorf("%w: not base64url", errNotOneTime)
	}
	if len(raw) < oneTimeFixedLen+macBytes {
		return w, fmt.Errorf("%w: shorter than its fixed fields and %d-byte MAC", errNotOneTime, macBytes)
	}
	p, mac := raw[:len(raw)-macBytes], raw[len(raw)-macBytes:]
	w.version, w.mac = p[0], mac
	if w.version != oneTimeVersion {
		return w, fmt.Errorf("%w: unknown payload version %d", errNotOneTime, w.version)
	}
	w.nonce = p[oneTimeNonceAt : oneTimeNonceAt+oneTimeNonceLen]
	w.issued = int64(binary.BigEndian.Uint64(p[oneTimeTimesAt:]))
	w.expires = int64(binary.BigEndian.Uint64(p[oneTimeTimesAt+8:]))
	purpose, rest, ok := cutUvarintString(p[oneTimeFixedLen:])
	if !ok {
		return w, fmt.Errorf("%w: malformed purpose", errNotOneTime)
	}
	w.purpose = purpose
	for len(rest) > 0 {
		name, r, ok := cutUvarintString(rest)
		if !ok {
			return w, fmt.Errorf("%w: malformed claim", errNotOneTime)
		}
		value, r, ok := cutUvarintString(r)
		if !ok {
			return w, fmt.Errorf("%w: malformed claim", errNotOneTime)
		}
		w.names, w.values, rest = append(w.names, name), append(w.values, value), r
	}
	return w, nil
}

// cutUvarintString splits a uvarint-length-prefixed string off b.
func cutUvarintString(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// binaryClaim is a claim whose name or value is not UTF-8, in hex: JSON
// strings cannot carry it without loss.
type binaryClaim struct {
	NameHex  string `json:"nameHex"`
	ValueHex string `json:"valueHex"`
}

// splitClaims returns the UTF-8 claims as a map and the others in hex.
func splitClaims(names, values []string) (map[string]string, []binaryClaim) {
	claims := map[string]string{}
	var binary []binaryClaim
	for i, n := range names {
		if utf8.ValidString(n) && utf8.ValidString(values[i]) {
			claims[n] = values[i]
		} else {
			binary = append(binary, binaryClaim{hex.EncodeToString([]byte(n)), hex.EncodeToString([]byte(values[i]))})
		}
	}
	return claims, binary
}

// textOrHex returns s for a JSON string field, or "" and its hex when s is
// not UTF-8.
func textOrHex(s string) (string, string) {
	if utf8.ValidString(s) {
		return s, ""
	}
	return "", hex.EncodeToString([]byte(s))
}

// oneTimeReport is what inspect prints for an ot1. token.
type oneTimeReport struct {
	Kind         string            `json:"kind"`
	Verified     bool              `json:"verified"`
	Warning      string            `json:"warning"`
	Bytes        int               `json:"bytes"`
	OverCap      bool              `json:"overCap,omitempty"`
	Version      byte              `json:"version"`
	Purpose      string            `json:"purpose"`
	PurposeHex   string            `json:"purposeHex,omitempty"`
	Claims       map[string]string `json:"claims"`
	BinaryClaims []binaryClaim     `json:"binaryClaims,omitempty"`
	IssuedAt     string            `json:"issuedAt"`
	ExpiresAt    string            `json:"expiresAt"`
	Expired      bool              `json:"expired"`
	Nonce        string            `json:"nonce"`
	MAC          string            `json:"mac"`
	keyReport
}

func inspectOneTime(tok string, now time.Time) (*oneTimeReport, error) {
	w, err := parseOneTime(tok)
	if err != nil {
		return nil, err
	}
	r := &oneTimeReport{
		Kind:      "one-time",
		Warning:   unverifiedWarning,
		Bytes:     len(tok),
		OverCap:   len(tok) > ctoken.MaxOneTimeTokenBytes,
		Version:   w.version,
		IssuedAt:  time.Unix(w.issued, 0).UTC().Format(time.RFC3339),
		ExpiresAt: time.Unix(w.expires, 0).UTC().Format(time.RFC3339),
		Expired:   now.Unix() >= w.expires,
		Nonce:     hex.EncodeToString(w.nonce),
		MAC:       hex.EncodeToString(w.mac),
	}
	r.Purpose, r.PurposeHex = textOrHex(w.purpose)
	r.Claims, r.BinaryClaims = splitClaims(w.names, w.values)
	return r, nil
}

// oneTimeResult is what verify prints for an authentic ot1. token.
type oneTimeResult struct {
	Kind         string            `json:"kind"`
	Verified     bool              `json:"verified"`
	Purpose      string            `json:"purpose"`
	Claims       map[string]string `json:"claims"`
	BinaryClaims []binaryClaim     `json:"binaryClaims,omitempty"`
	IssuedAt     string            `json:"issuedAt"`
	ExpiresAt    string            `json:"expiresAt"`
	Redeemed     string            `json:"redeemed"`
	keyReport
}

// notRedeemedNote says what verify cannot know about a one-time token.
const notRedeemedNote = "not checked: verify does not consult or change the replay store, so the token may already be redeemed"

func verifyOneTime(tok string, kr *ctoken.Keyring, keysEnv, purpose string, e *env) int {
	seen := &keySeen{}
	iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: kr, Purpose: purpose, Observer: seen})
	if err != nil {
		fmt.Fprintf(e.stderr, "ctoken verify: -purpose: %v\n", err)
		return exitUsage
	}
	v, err := iss.Verify(tok)
	if err != nil {
		return rejectedKey(e, err, tok, kr, keysEnv)
	}
	names := make([]string, 0, len(v.Claims))
	values := make([]string, 0, len(v.Claims))
	for n, val := range v.Claims {
		names, values = append(names, n), append(values, val)
	}
	res := oneTimeResult{
		Kind:      "one-time",
		Verified:  true,
		Purpose:   v.Purpose,
		IssuedAt:  v.IssuedAt.UTC().Format(time.RFC3339),
		ExpiresAt: v.ExpiresAt.UTC().Format(time.RFC3339),
		Redeemed:  notRedeemedNote,
		keyReport: seen.verified(tok, kr),
	}
	res.Claims, res.BinaryClaims = splitClaims(names, values)
	if err := writeJSON(e.stdout, res); err != nil {
		fmt.Fprintf(e.stderr, "ctoken verify: %v\n", err)
		return exitUsage
	}
	return exitOK
}
