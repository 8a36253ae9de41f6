package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/fxamacker/cbor/v2"
)

const inspectUsage = `Usage: ctoken inspect [-keys-env NAME] TOKEN|-

Decodes a ctoken token WITHOUT verifying it and prints its fields as JSON.
It recognises a pagination cursor (bare base64url; also a keyset cursor or
a protopage page token), a signed request state ("v1."), an encrypted
request state ("v1e."; only its framing can be read without the key) and a
one-time token ("ot1."; purpose, claims, times).

Cursors and one-time tokens name the key that signed them by a key id
("keyId", 8 hex digits, as ctoken.Keyring.KeyIDs prints it). When the
environment variable -keys-env (default CTOKEN_KEYS) holds a key ring,
"keyInRing" says which of its keys the id names: primary, previous N, or
unknown (a retired key, another deployment's key, or an altered id). A
request state (v1./v1e., fixed by the reference D implementation) carries
no key id.

Every field is printed as JSON. DEL, C1 control characters and bidi controls
(U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) are printed as \uXXXX
escapes, like the C0 controls JSON always escapes, so a forged field cannot
drive the terminal or reorder what you read. A session is shown as text (the
form of CTOKEN_SESSION) when it is UTF-8, and always as base64url.

UNVERIFIED: inspect checks no signature. Anyone can forge every field it
prints. Use "ctoken verify" to decide whether a token is authentic.

A TOKEN of "-" is read from standard input.
`

const unverifiedWarning = "UNVERIFIED: decoded without a key; the signature was not checked, so every field here may be forged"

var (
	errNotCursor    = errors.New("not a ctoken cursor, request state or one-time token")
	errStateFraming = errors.New("not a well-formed v1. request state")
	errSealedShort  = errors.New("not a well-formed v1e. request state: shorter than a nonce and a GCM tag")
	errSealedBase64 = errors.New("not a well-formed v1e. request state: not base64url")
)

const (
	gcmNonceBytes = 12
	gcmTagBytes   = 16
	macBytes      = sha256.Size
)

func cmdInspect(args []string, e *env) int {
	fs := newFlagSet("inspect", inspectUsage, e)
	keysEnv := fs.String("keys-env", "CTOKEN_KEYS", "environment variable holding the keys to look the key id up in (optional)")
	if done, status := parseFlags(fs, args, e); done {
		return status
	}
	tok, err := tokenArg(fs.Args(), e)
	if err != nil {
		return usageError(fs, e, "%v", err)
	}
	var out interface{ setKey(keyReport) }
	switch classify(tok) {
	case kindEncryptedState:
		out, err = inspectEncrypted(tok)
	case kindSignedState:
		out, err = inspectSigned(tok, time.Now())
		if sdk := foreignState(tok); err != nil && sdk != "" {
			err = fmt.Errorf("not a ctoken request state: looks like a %s state (a v1. format of its own, which ctoken does not read; see docs/wire-format.md)", sdk)
		}
	case kindOneTime:
		out, err = inspectOneTime(tok, time.Now())
	default:
		out, err = inspectCursor(tok, time.Now())
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "ctoken inspect: %v\n", err)
		return exitUsage
	}
	kr, noRing := inspectRing(e, *keysEnv)
	k := keyOf(tok, kr, noRing)
	if k.KeyInRing == noStateKeyID {
		k.KeyInRing = noStateKeyIDShown // inspect tries no key
	}
	out.setKey(k)
	fmt.Fprintln(e.stderr, unverifiedWarning)
	if err := writeJSON(e.stdout, out); err != nil {
		fmt.Fprintf(e.stderr, "ctoken inspect: %v\n", err)
		return exitUsage
	}
	return exitOK
}

// inspectDecMode decodes what a cursor body may hold, and nothing deeper:
// the input is untrusted.
var inspectDecMode = func() cbor.DecMode {
	m, err := cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		MaxNestedLevels:  4,
		MaxArrayElements: 16,
		MaxMapPairs:      16,
		UTF8:             cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return m
}()

// cursorV2Report is what inspect prints for a version 2 or sealed cursor:
// what it shows without the key. The tool, caller and arguments are never
// in it, the session only as its tag.
type cursorV2Report struct {
	Kind     string `json:"kind"`
	Verified bool   `json:"verified"`
	Warning  string `json:"warning"`
	Bytes    int    `json:"bytes"`
	OverCap  bool   `json:"overCap,omitempty"`

	Version      uint64  `json:"version"`
	Sealed       bool    `json:"sealed"`
	Scope        string  `json:"scope"`
	Page         *uint64 `json:"page,omitempty"`
	IssuedAt     string  `json:"issuedAt"`
	IssuedAtUnix int64   `json:"issuedAtUnix"`
	Age          string  `json:"age"`
	SessionTag   string  `json:"sessionTag"`
	State        string  `json:"state,omitempty"`
	StateBytes   *int    `json:"stateBytes,omitempty"`
	SealedBytes  int     `json:"sealedBytes,omitempty"`
	MAC          string  `json:"mac,omitempty"`
	keyReport
}

const (
	scopeDigestNote = "tool, caller and arguments are not in the cursor: the MAC (HMAC-SHA256) covers them; ctoken verify -tool -caller -args -session checks them"
	scopeSealedNote = "page, state, tool, caller and arguments are sealed (XAES-256-GCM): not readable; ctoken verify -tool -caller -args -session opens it"
)

// inspectCursorV2 reports a version 2 or sealed cursor.
func inspectCursorV2(tok string, now time.Time) (*cursorV2Report, error) {
	raw, err := b64.DecodeString(tok)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url", errNotCursor)
	}
	r := &cursorV2Report{Kind: "cursor", Warning: unverifiedWarning, Bytes: len(tok), OverCap: len(tok) > ctoken.MaxCursorBytes}
	var issued int64
	var session []byte
	if raw[2] == cursorwire.VersionSealed {
		var h cursorwire.SealedHeader
		f, n, ok := cursorwire.DecodeSealedHeader(raw)
		if !ok || len(raw)-n < gcmNonceBytes+gcmTagBytes {
			return nil, fmt.Errorf("%w: not a sealed cursor header and ciphertext", errNotCursor)
		}
		h = cursorwire.SealedHeader{Version: f.Version, IssuedAt: f.Issued, Session: f.Session}
		r.Version, r.Sealed, r.Scope, r.SealedBytes = h.Version, true, scopeSealedNote, len(raw)-n
		issued, session = h.IssuedAt, h.Session
	} else {
		if len(raw) <= cursorwire.MACSize {
			return nil, fmt.Errorf("%w: shorter than its %d-byte MAC", errNotCursor, cursorwire.MACSize)
		}
		var w cursorwire.PayloadV2
		body := raw[:len(raw)-cursorwire.MACSize]
		if err := inspectDecMode.Unmarshal(body, &w); err != nil {
			return nil, fmt.Errorf("%w: payload is not a cursor CBOR map", errNotCursor)
		}
		n := len(w.State)
		r.Version, r.Scope, r.Page = w.Version, scopeDigestNote, &w.Page
		r.State, r.StateBytes, r.MAC = b64.EncodeToString(w.State), &n, hex.EncodeToString(raw[len(raw)-cursorwire.MACSize:])
		issued, session = w.IssuedAt, w.Session
	}
	t := time.Unix(issued, 0).UTC()
	r.IssuedAt, r.IssuedAtUnix, r.Age = t.Format(time.RFC3339), issued, now.Sub(t).Truncate(time.Second).String()
	r.SessionTag = hex.EncodeToString(session)
	return r, nil
}

func inspectCursor(tok string, now time.Time) (interface{ setKey(keyReport) }, error) {
	raw, err := b64.DecodeString(tok)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: not base64url", errNotCursor)
	case len(raw) <= cursorwire.MACSize:
		return nil, fmt.Errorf("%w: shorter than its %d-byte MAC", errNotCursor, cursorwire.MACSize)
	}
	if _, _, ok := cursorwire.ReadPrefix(raw); !ok {
		// Format 1 (tool and caller in clear) and the layout before key
		// ids were never released and no issuer reads them.
		return nil, fmt.Errorf("%w: payload is not a cursor CBOR map of a layout this version reads", errNotCursor)
	}
	return inspectCursorV2(tok, now)
}

// statePayload is the JSON payload of a request state.
type statePayload struct {
	S   *string `json:"s"`
	Exp *int64  `json:"exp"`
	B   *string `json:"b"`
}

// parseSigned splits a v1. state into its payload and MAC and parses the
// payload, without checking the MAC.
func parseSigned(tok string) (p statePayload, payload, mac []byte, err error) {
	parts := strings.Split(strings.TrimPrefix(tok, signedPrefix), ".")
	if len(parts) != 2 {
		return p, nil, nil, fmt.Errorf("%w: want v1.PAYLOAD.MAC", errStateFraming)
	}
	if payload, err = b64.DecodeString(parts[0]); err != nil {
		return p, nil, nil, fmt.Errorf("%w: payload is not base64url", errStateFraming)
	}
	if mac, err = b64.DecodeString(parts[1]); err != nil {
		return p, nil, nil, fmt.Errorf("%w: MAC is not base64url", errStateFraming)
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return p, nil, nil, fmt.Errorf("%w: payload is not a JSON object", errStateFraming)
	}
	if p.S == nil || p.Exp == nil || p.B == nil {
		return p, nil, nil, fmt.Errorf(`%w: payload lacks "s", "exp" or "b"`, errStateFraming)
	}
	return p, payload, mac, nil
}

// signedReport is what inspect prints for a v1. request state.
type signedReport struct {
	Kind      string `json:"kind"`
	Mode      string `json:"mode"`
	Verified  bool   `json:"verified"`
	Warning   string `json:"warning"`
	Bytes     int    `json:"bytes"`
	State     string `json:"state"`
	ExpiresAt string `json:"expiresAt"`
	Exp       int64  `json:"exp"`
	Expired   bool   `json:"expired"`
	BindTag   string `json:"bindTag"`
	MAC       string `json:"mac"`
	keyReport
}

func inspectSigned(tok string, now time.Time) (*signedReport, error) {
	p, _, mac, err := parseSigned(tok)
	if err != nil {
		return nil, err
	}
	return &signedReport{
		Kind:      "request-state",
		Mode:      "signed",
		Warning:   unverifiedWarning,
		Bytes:     len(tok),
		State:     *p.S,
		ExpiresAt: time.Unix(*p.Exp, 0).UTC().Format(time.RFC3339),
		Exp:       *p.Exp,
		Expired:   *p.Exp < now.Unix(),
		BindTag:   *p.B,
		MAC:       hex.EncodeToString(mac),
	}, nil
}

// sealedReport is what inspect prints for a v1e. request state: only what
// its framing shows without the key.
type sealedReport struct {
	Kind         string `json:"kind"`
	Mode         string `json:"mode"`
	Verified     bool   `json:"verified"`
	Warning      string `json:"warning"`
	Bytes        int    `json:"bytes"`
	Nonce        string `json:"nonce"`
	SealedBytes  int    `json:"sealedBytes"`
	PayloadBytes int    `json:"payloadBytes"`
	Note         string `json:"note"`
	keyReport
}

func inspectEncrypted(tok string) (*sealedReport, error) {
	raw, err := b64.DecodeString(strings.TrimPrefix(tok, encryptedPrefix))
	if err != nil {
		return nil, errSealedBase64
	}
	if len(raw) < gcmNonceBytes+gcmTagBytes {
		return nil, errSealedShort
	}
	return &sealedReport{
		Kind:         "request-state",
		Mode:         "encrypted",
		Warning:      unverifiedWarning,
		Bytes:        len(tok),
		Nonce:        hex.EncodeToString(raw[:gcmNonceBytes]),
		SealedBytes:  len(raw) - gcmNonceBytes,
		PayloadBytes: len(raw) - gcmNonceBytes - gcmTagBytes,
		Note:         "state, expiry and binding are encrypted (AES-256-GCM); only ctoken verify with the key can read them",
	}, nil
}

// sessionText is a session in the form of CTOKEN_SESSION (its bytes as
// text), or "" when it is not UTF-8 (see the base64url field).
func sessionText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return ""
}
