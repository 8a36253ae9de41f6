package ctoken

// Known-answer vectors of cursors: testdata/vectors/cursor.json, both
// layouts (version 2 signed, version 3 sealed), documented in
// testdata/vectors/README.md. Every token is built here from the standard
// library alone: CBOR by hand (cborHead), HKDF written out with HMAC
// (vecHKDF), HMAC-SHA256, and XAES-256-GCM written out from crypto/aes
// (the CMAC-based key derivation) and cipher.NewGCM with the vector's
// fixed nonce. Signed tokens must equal what Issue writes; sealed ones,
// whose Issue draws a random nonce, must open with Verify to the vector's
// payload, and Issue's output must open with the independent XAES to the
// vector's plaintext. Under GODEBUG=fips140=only cipher.NewGCM refuses a
// caller-chosen nonce: only that seal (and open) direction is skipped,
// Verify of every vector still runs.

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

type cursorFile struct {
	Comment     string               `json:"comment"`
	Key         string               `json:"key_hex"`
	Key2        string               `json:"key2_hex"`
	KeyID       string               `json:"key_id_hex"`
	Key2ID      string               `json:"key2_id_hex"`
	MACKey      string               `json:"mac_key_hex"`
	SealKey     string               `json:"seal_key_hex"`
	Key2MACKey  string               `json:"key2_mac_key_hex"`
	Key2SealKey string               `json:"key2_seal_key_hex"`
	Session     string               `json:"session_hex"`
	SessionTag  string               `json:"session_tag_hex"`
	TTLSeconds  int64                `json:"ttl_seconds"`
	Issue       []cursorIssueVector  `json:"issue"`
	Verify      []cursorVerifyVector `json:"verify"`
}

// cursorIssueVector is one token and every step of its construction.
type cursorIssueVector struct {
	Name      string `json:"name"`
	Layout    string `json:"layout"` // "signed" or "sealed"
	SignKey   string `json:"key_hex"`
	Tool      string `json:"tool"`
	Caller    string `json:"caller"`
	Args      string `json:"args_hex"`
	Page      uint32 `json:"page"`
	State     string `json:"state_hex"`
	IssuedAt  int64  `json:"issued_at_unix"`
	KeyID     string `json:"key_id_hex"`
	Scope     string `json:"scope_hex"`
	Body      string `json:"body_hex,omitempty"`   // signed: the CBOR body
	MAC       string `json:"mac_hex,omitempty"`    // signed: HMAC-SHA256(mac key, body || scope)
	Header    string `json:"header_hex,omitempty"` // sealed: the clear CBOR header
	Nonce     string `json:"nonce_hex,omitempty"`  // sealed: 24 bytes
	Plaintext string `json:"plaintext_hex,omitempty"`
	Token     string `json:"token"`
}

type cursorPayloadJSON struct {
	Tool     string `json:"tool"`
	Caller   string `json:"caller"`
	Args     string `json:"args_hex"`
	Page     uint32 `json:"page"`
	State    string `json:"state_hex"`
	IssuedAt int64  `json:"issued_at_unix"`
}

// cursorVerifyVector is a token given to Verify: the verifier holds Keys
// (hex, primary first) and the file's session, its clock is Now.
type cursorVerifyVector struct {
	Name       string             `json:"name"`
	Token      string             `json:"token"`
	Keys       []string           `json:"keys_hex"`
	Now        int64              `json:"now_unix"`
	WantTool   string             `json:"want_tool"`
	WantCaller string             `json:"want_caller"`
	WantArgs   string             `json:"want_args_hex"`
	Result     string             `json:"result"`
	Reason     string             `json:"reason,omitempty"`
	Payload    *cursorPayloadJSON `json:"payload,omitempty"`
}

func (p cursorPayloadJSON) payload(t testing.TB) CursorPayload {
	var cp CursorPayload
	cp.ToolID, cp.CallerID, cp.Page = p.Tool, p.Caller, p.Page
	if p.Args != "" {
		copy(cp.Args[:], vecHex(t, p.Args))
	}
	if p.State != "" {
		cp.State = vecHex(t, p.State)
	}
	return cp
}

func vecArgs(t testing.TB, args string) string {
	fp, err := ArgsFingerprint([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(fp[:])
}

// ---------------------------------------------------------------------------
// The independent construction.

// Labels, written out rather than taken from the code under test.
const (
	vecCursorMACLabel  = "ctoken.cursor hmac-sha256 key"
	vecCursorSealLabel = "ctoken.cursor xaes-256-gcm key"
	vecKeyIDLabel      = "ctoken.key-id"
	vecSessTagLabel    = "ctoken.cursor session tag\x00"
)

// vecKeyID (vectors_onetime_test.go) is HKDF-SHA256(key, zero salt,
// "ctoken.key-id")[:4].

// vecSessionTag is SHA-256("ctoken.cursor session tag\x00" || session)[:8].
func vecSessionTag(session []byte) []byte {
	s := sha256.Sum256(append([]byte(vecSessTagLabel), session...))
	return s[:8]
}

// vecScope is the scope: the label, the tool and the caller each after its
// uvarint length, then 0x00, or 0x01 and the 32-byte fingerprint.
func vecScope(tool, caller string, args []byte) []byte {
	b := []byte("ctoken.scope\x00")
	b = binary.AppendUvarint(b, uint64(len(tool)))
	b = append(b, tool...)
	b = binary.AppendUvarint(b, uint64(len(caller)))
	b = append(b, caller...)
	if len(args) == 0 {
		return append(b, 0x00)
	}
	return append(append(b, 0x01), args...)
}

// vecSignedBody is the signed body { 1: 2, 2: kid, 5: page, 6: issued,
// 7: tag, 8: state (omitted when empty) } in canonical CBOR.
func vecSignedBody(kid []byte, page uint32, issued int64, tag, state []byte) []byte {
	pairs := uint64(5)
	if len(state) > 0 {
		pairs++
	}
	b := cborHead(nil, 5, pairs)
	b = append(b, 0x01, 0x02, 0x02)
	b = append(cborHead(b, 2, uint64(len(kid))), kid...)
	b = cborHead(append(b, 0x05), 0, uint64(page))
	b = cborInt(append(b, 0x06), issued)
	b = append(cborHead(append(b, 0x07), 2, uint64(len(tag))), tag...)
	if len(state) > 0 {
		b = append(cborHead(append(b, 0x08), 2, uint64(len(state))), state...)
	}
	return b
}

// vecSealedHeader is the sealed header { 1: 3, 2: kid, 6: issued, 7: tag }.
func vecSealedHeader(kid []byte, issued int64, tag []byte) []byte {
	b := []byte{0xa4, 0x01, 0x03, 0x02}
	b = append(cborHead(b, 2, uint64(len(kid))), kid...)
	b = cborInt(append(b, 0x06), issued)
	return append(cborHead(append(b, 0x07), 2, uint64(len(tag))), tag...)
}

// vecSealedInner is { 5: page, 8: state (omitted when empty) }.
func vecSealedInner(page uint32, state []byte) []byte {
	pairs := uint64(1)
	if len(state) > 0 {
		pairs++
	}
	b := cborHead(append(cborHead(nil, 5, pairs), 0x05), 0, uint64(page))
	if len(state) > 0 {
		b = append(cborHead(append(b, 0x08), 2, uint64(len(state))), state...)
	}
	return b
}

// vecPad pads inner with zero bytes to the next multiple of 64, or to 288
// past 256, of the length inner would have with the longest page (a 5-byte
// head), so that the padded length tells nothing of the page.
func vecPad(inner []byte) []byte {
	longest := len(inner)
	if len(inner) >= 3 { // { 5: page ...: the page's head is inner[2]
		switch h := inner[2]; {
		case h < 24:
			longest += 4
		case h == 24:
			longest += 3
		case h == 25:
			longest += 2
		}
	}
	n := (longest + 63) / 64 * 64
	if longest > 256 {
		n = 288
	}
	if n < len(inner) {
		n = len(inner)
	}
	return append(append([]byte(nil), inner...), make([]byte, n-len(inner))...)
}

// vecSignCursor is base64url(body || HMAC-SHA256(HKDF(key, MAC label), body || scope)).
func vecSignCursor(key, body, scope []byte) string {
	mac := vecHMAC(vecHKDF(key, vecCursorMACLabel), append(append([]byte(nil), body...), scope...))
	return base64.RawURLEncoding.EncodeToString(append(append([]byte(nil), body...), mac...))
}

// vecXAESKey is XAES-256-GCM's per-message key (C2SP): with L =
// AES-256_K(0^128) and K1 = L << 1 (xor 0x87 into the last byte when the
// bit shifted out is set), K_x = AES_K(M1 ^ K1) || AES_K(M2 ^ K1), M_i =
// 0x00 || i || "X" || 0x00 || nonce[:12]: one-block CMAC, written out.
func vecXAESKey(t testing.TB, key, nonce12 []byte) []byte {
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	l := make([]byte, 16)
	block.Encrypt(l, l)
	k1 := make([]byte, 16)
	for i := range 16 {
		k1[i] = l[i] << 1
		if i < 15 {
			k1[i] |= l[i+1] >> 7
		}
	}
	if l[0]&0x80 != 0 {
		k1[15] ^= 0x87
	}
	out := make([]byte, 0, 32)
	for i := byte(1); i <= 2; i++ {
		m := append([]byte{0x00, i, 'X', 0x00}, nonce12...)
		for j := range m {
			m[j] ^= k1[j]
		}
		block.Encrypt(m, m)
		out = append(out, m...)
	}
	return out
}

// vecXAESGCM is AES-256-GCM under the key of nonce[:12], or nil when
// cipher.NewGCM refuses (a caller-chosen nonce under fips140=only).
func vecXAESGCM(t testing.TB, key, nonce []byte) cipher.AEAD {
	block, err := aes.NewCipher(vecXAESKey(t, key, nonce[:12]))
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		return nil
	}
	return g
}

// vecXAESSeal is nonce || XAES-256-GCM(key, nonce, pt, ad); ok is false
// when cipher.NewGCM is not available.
func vecXAESSeal(t testing.TB, key, nonce, pt, ad []byte) ([]byte, bool) {
	g := vecXAESGCM(t, key, nonce)
	if g == nil {
		return nil, false
	}
	return g.Seal(append([]byte(nil), nonce...), nonce[12:], pt, ad), true
}

// vecXAESOpen opens nonce || ciphertext || tag.
func vecXAESOpen(t testing.TB, key, sealed, ad []byte) (pt []byte, ok bool, err error) {
	if len(sealed) < 24+16 {
		return nil, true, errors.New("shorter than nonce and tag")
	}
	g := vecXAESGCM(t, key, sealed[:24])
	if g == nil {
		return nil, false, nil
	}
	pt, err = g.Open(nil, sealed[12:24], sealed[24:], ad)
	return pt, true, err
}

// vecSealCursor is base64url(header || XAES-256-GCM(HKDF(key, seal label),
// nonce, plaintext, header || scope)); "" when cipher.NewGCM is not
// available.
func vecSealCursor(t testing.TB, key, header, nonce, plaintext, scope []byte) string {
	sealed, ok := vecXAESSeal(t, vecHKDF(key, vecCursorSealLabel), nonce, plaintext, append(append([]byte(nil), header...), scope...))
	if !ok {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(append(append([]byte(nil), header...), sealed...))
}

// vecBuildCursor fills in v's key id, scope, body or header and plaintext,
// MAC and token from its inputs. A sealed token is left empty when
// cipher.NewGCM is not available.
func vecBuildCursor(t testing.TB, session []byte, v *cursorIssueVector) {
	key := vecHex(t, v.SignKey)
	kid, tag := vecKeyID(key), vecSessionTag(session)
	scope := vecScope(v.Tool, v.Caller, vecHex(t, v.Args))
	state := vecHex(t, v.State)
	v.KeyID, v.Scope = hex.EncodeToString(kid), hex.EncodeToString(scope)
	if v.Layout == "signed" {
		body := vecSignedBody(kid, v.Page, v.IssuedAt, tag, state)
		v.Body = hex.EncodeToString(body)
		v.MAC = hex.EncodeToString(vecHMAC(vecHKDF(key, vecCursorMACLabel), append(append([]byte(nil), body...), scope...)))
		v.Token = vecSignCursor(key, body, scope)
		return
	}
	header := vecSealedHeader(kid, v.IssuedAt, tag)
	pt := vecPad(vecSealedInner(v.Page, state))
	v.Header, v.Plaintext = hex.EncodeToString(header), hex.EncodeToString(pt)
	v.Token = vecSealCursor(t, key, header, vecHex(t, v.Nonce), pt, scope)
}

// TestVecXAESMatchesC2SP holds the independent XAES to the first C2SP
// vector (key 0x01 * 32, nonce "ABCDEFGHIJKLMNOPQRSTUVWX", plaintext
// "XAES-256-GCM", no additional data).
func TestVecXAESMatchesC2SP(t *testing.T) {
	nonce := []byte("ABCDEFGHIJKLMNOPQRSTUVWX")
	sealed, ok := vecXAESSeal(t, bytes.Repeat([]byte{1}, 32), nonce, []byte("XAES-256-GCM"), nil)
	if !ok {
		t.Skip("cipher.NewGCM refuses a caller-chosen nonce (fips140=only)")
	}
	if got := hex.EncodeToString(sealed[24:]); got != "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271" {
		t.Fatalf("XAES-256-GCM = %s", got)
	}
}

// ---------------------------------------------------------------------------
// Generation and checks.

// Format-1 and pre-key-id tokens, from the vector files of those layouts
// (testdata/vectors/cursor.json before key ids and cursor_v2.json): both
// must now be refused as malformed at the fixed prefix.
const (
	// format 1, "bound args": tool search, caller user:42, in the token.
	vecFormat1Token = "pwEBAmZzZWFyY2gDZ3VzZXI6NDIEWCAaIvqh9gcaTtUXWjfytC19by10o9AH0UhV2WJaZb60rgUCBhppVzWlB0h2ZWN0b3JzMYGGlerfgzbf6SiBRX1yW0EoKT3Rwcf8L8Fkb4iYo8ko"
)

func genCursorVectors(t *testing.T) cursorFile {
	k1, k2 := hex.EncodeToString(vecKey), hex.EncodeToString(vecKey2)
	f := cursorFile{
		Comment: "signed (version 2): token = base64url_nopad(body || HMAC-SHA256(mac_key, body || scope)); " +
			"sealed (version 3): token = base64url_nopad(header || nonce[24] || XAES-256-GCM(seal_key, nonce, plaintext, header || scope)), plaintext = inner || zero padding; " +
			"key id = HKDF-SHA256(key, \"" + vecKeyIDLabel + "\")[:4]; mac_key = HKDF-SHA256(key, \"" + vecCursorMACLabel + "\"); seal_key = HKDF-SHA256(key, \"" + vecCursorSealLabel + "\"); " +
			"session tag = SHA-256(\"ctoken.cursor session tag\\x00\" || session)[:8]; scope = \"ctoken.scope\\x00\" uvarint(len(tool)) tool uvarint(len(caller)) caller (0x00 | 0x01 args[32]); see README.md",
		Key: k1, Key2: k2,
		KeyID: hex.EncodeToString(vecKeyID(vecKey)), Key2ID: hex.EncodeToString(vecKeyID(vecKey2)),
		MACKey: hex.EncodeToString(vecHKDF(vecKey, vecCursorMACLabel)), SealKey: hex.EncodeToString(vecHKDF(vecKey, vecCursorSealLabel)),
		Key2MACKey: hex.EncodeToString(vecHKDF(vecKey2, vecCursorMACLabel)), Key2SealKey: hex.EncodeToString(vecHKDF(vecKey2, vecCursorSealLabel)),
		Session: hex.EncodeToString(vecSession), SessionTag: hex.EncodeToString(vecSessionTag(vecSession)),
		TTLSeconds: int64(DefaultCursorTTL / time.Second),
	}
	now := vecNow.Unix()
	args := vecArgs(t, `{"q":"go","limit":10}`)
	h := func(s string) string { return hex.EncodeToString([]byte(s)) }
	maxState := hex.EncodeToString(seqBytes(0, MaxOpaqueStateBytes))
	issues := []cursorIssueVector{
		{Name: "signed, minimal", Layout: "signed", Tool: "t"},
		{Name: "signed, bound args", Layout: "signed", Tool: "search", Caller: "user:42", Args: args, Page: 2},
		{Name: "signed, opaque state", Layout: "signed", Tool: "list_files", Caller: "alice@example.com", Page: 7, State: h("after=file-0042")},
		{Name: "signed, args and state, unicode ids, max page, max state", Layout: "signed", Tool: "búsqueda", Caller: "用户-7", Args: args, Page: math.MaxUint32, State: maxState},
		{Name: "signed, previous key", Layout: "signed", SignKey: k2, Tool: "search", Caller: "user:42", Page: 3, State: h("x")},
		{Name: "sealed, minimal", Layout: "sealed", Tool: "t", Nonce: hex.EncodeToString(seqBytes(0x10, 24))},
		{Name: "sealed, args and state", Layout: "sealed", Tool: "search", Caller: "user:42", Args: args, Page: 2, State: h("after=file-0042"), Nonce: hex.EncodeToString(seqBytes(0x40, 24))},
		{Name: "sealed, max page, max state (288-byte class)", Layout: "sealed", Tool: "list_files", Caller: "alice@example.com", Page: math.MaxUint32, State: maxState, Nonce: hex.EncodeToString(seqBytes(0x80, 24))},
		{Name: "sealed, previous key", Layout: "sealed", SignKey: k2, Tool: "search", Caller: "user:42", Page: 3, State: h("x"), Nonce: hex.EncodeToString(seqBytes(0xc0, 24))},
	}
	byName := map[string]cursorIssueVector{}
	for i := range issues {
		v := &issues[i]
		if v.SignKey == "" {
			v.SignKey = k1
		}
		v.IssuedAt = now
		vecBuildCursor(t, vecSession, v)
		if v.Token == "" {
			t.Fatal("cipher.NewGCM refuses a caller-chosen nonce: generate the vectors without GODEBUG=fips140=only")
		}
		byName[v.Name] = *v
	}
	f.Issue = issues

	payloadOf := func(v cursorIssueVector) *cursorPayloadJSON {
		return &cursorPayloadJSON{Tool: v.Tool, Caller: v.Caller, Args: v.Args, Page: v.Page, State: v.State, IssuedAt: v.IssuedAt}
	}
	ring, rotated := []string{k1}, []string{k1, k2}
	ttl := f.TTLSeconds
	bound, sealed := byName["signed, bound args"], byName["sealed, args and state"]
	prev, sealedPrev := byName["signed, previous key"], byName["sealed, previous key"]
	ok := func(name string, v cursorIssueVector, keys []string, at int64) cursorVerifyVector {
		return cursorVerifyVector{Name: name, Token: v.Token, Keys: keys, Now: at, WantTool: v.Tool, WantCaller: v.Caller, WantArgs: v.Args, Result: "ok", Payload: payloadOf(v)}
	}
	refuse := func(name, token string, keys []string, at int64, scopeOf cursorIssueVector, result, reason string) cursorVerifyVector {
		return cursorVerifyVector{Name: name, Token: token, Keys: keys, Now: at, WantTool: scopeOf.Tool, WantCaller: scopeOf.Caller, WantArgs: scopeOf.Args, Result: result, Reason: reason}
	}
	const (
		rScope     = "forged or wrong scope (tool, caller or arguments)"
		rUnknown   = "signed by a key not in the ring: retired or foreign"
		rMalformed = "malformed or non-canonical payload"
		rMAC       = "mac mismatch" // the MAC fails and the body does not decode
		rSealed    = "sealed cursor does not open (tampered, other key, or other scope)"
	)
	// Hand-built refusals.
	kid1, kid2, tag := vecKeyID(vecKey), vecKeyID(vecKey2), vecSessionTag(vecSession)
	otherTag := vecSessionTag([]byte("vectors2"))
	boundScope := vecScope(bound.Tool, bound.Caller, vecHex(t, bound.Args))
	sealedScope := vecScope(sealed.Tool, sealed.Caller, vecHex(t, sealed.Args))
	signed := func(key, kid []byte, issued int64, tag, state []byte) string {
		return vecSignCursor(key, vecSignedBody(kid, bound.Page, issued, tag, state), boundScope)
	}
	sealWith := func(key, kid []byte, issued int64, tag, pt []byte) string {
		tok := vecSealCursor(t, key, vecSealedHeader(kid, issued, tag), seqBytes(0x50, 24), pt, sealedScope)
		if tok == "" {
			t.Fatal("cipher.NewGCM unavailable")
		}
		return tok
	}
	sealedPT := vecPad(vecSealedInner(sealed.Page, vecHex(t, sealed.State)))
	badPad := append([]byte(nil), sealedPT...)
	badPad[len(badPad)-1] = 0x01
	// Tamper: flip a bit of the page (body byte 10) of the signed token,
	// and a bit of the ciphertext of the sealed one.
	flip := func(tok string, i int) string {
		raw, _ := base64.RawURLEncoding.DecodeString(tok)
		raw[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	// Key id altered: to bytes no key has, and to the other key's id.
	withKID := func(tok string, kid []byte) string {
		raw, _ := base64.RawURLEncoding.DecodeString(tok)
		copy(raw[5:9], kid)
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	sealedRaw, _ := base64.RawURLEncoding.DecodeString(sealed.Token)
	// The signed layout before key ids: { 1: 2, 5: page, 6: issued, 7: tag },
	// signed as it was (cursor_v2.json).
	preKeyID := vecSignCursor(vecKey, append([]byte{0xa4, 0x01, 0x02, 0x05, 0x02, 0x06}, append(cborInt(nil, now), append([]byte{0x07, 0x48}, tag...)...)...), boundScope)
	preKeyIDSealed := vecSealCursor(t, vecKey, append([]byte{0xa3, 0x01, 0x03, 0x06}, append(cborInt(nil, now), append([]byte{0x07, 0x48}, tag...)...)...), seqBytes(0x50, 24), sealedPT, sealedScope)
	emptyState := append(append([]byte{0xa6}, vecSignedBody(kid1, bound.Page, now, tag, nil)[1:]...), 0x08, 0x40)
	oversizeState := vecSignedBody(kid1, bound.Page, now, tag, bytes.Repeat([]byte{7}, MaxOpaqueStateBytes+1))
	f.Verify = []cursorVerifyVector{
		ok("signed: authentic, at issue time", bound, ring, now),
		ok("signed: previous key of a 2-key ring", prev, rotated, now),
		ok("sealed: authentic, at issue time", sealed, ring, now),
		ok("sealed: previous key of a 2-key ring", sealedPrev, rotated, now),
		ok("signed: age exactly TTL", bound, ring, now+ttl),
		ok("signed: issued 60 s in the future (clock skew allowed)", bound, ring, now-60),
		refuse("signed: age TTL + 1 s", bound.Token, ring, now+ttl+1, bound, "expired", "older than TTL"),
		refuse("sealed: age TTL + 1 s", sealed.Token, ring, now+ttl+1, sealed, "expired", "older than TTL"),
		refuse("signed: issued 61 s in the future", bound.Token, ring, now-61, bound, "invalid", "issued in the future"),
		refuse("sealed: issued 61 s in the future", sealed.Token, ring, now-61, sealed, "invalid", "issued in the future"),
		refuse("signed: wrong tool", bound.Token, ring, now, cursorIssueVector{Tool: "Search", Caller: bound.Caller, Args: bound.Args}, "invalid", rScope),
		refuse("signed: wrong caller", bound.Token, ring, now, cursorIssueVector{Tool: bound.Tool, Caller: "user:43", Args: bound.Args}, "invalid", rScope),
		refuse("signed: wrong args", bound.Token, ring, now, cursorIssueVector{Tool: bound.Tool, Caller: bound.Caller, Args: vecArgs(t, `{"q":"go","limit":20}`)}, "invalid", rScope),
		refuse("signed: args dropped", bound.Token, ring, now, cursorIssueVector{Tool: bound.Tool, Caller: bound.Caller}, "invalid", rScope),
		refuse("sealed: wrong caller", sealed.Token, ring, now, cursorIssueVector{Tool: sealed.Tool, Caller: "user:43", Args: sealed.Args}, "invalid", rSealed),
		refuse("sealed: args dropped", sealed.Token, ring, now, cursorIssueVector{Tool: sealed.Tool, Caller: sealed.Caller}, "invalid", rSealed),
		refuse("signed: previous key not in the ring (unknown key id)", prev.Token, ring, now, prev, "invalid", rUnknown),
		refuse("sealed: previous key not in the ring (unknown key id)", sealedPrev.Token, ring, now, sealedPrev, "invalid", rUnknown),
		refuse("signed: unknown key id, other session", signed(vecKey2, kid2, now, otherTag, nil), ring, now, bound, "expired", rUnknown),
		refuse("sealed: unknown key id, other session", sealWith(vecKey2, kid2, now, otherTag, sealedPT), ring, now, sealed, "expired", rUnknown),
		refuse("signed: key id altered to one no key has", withKID(bound.Token, []byte{0xde, 0xad, 0xbe, 0xef}), ring, now, bound, "invalid", rUnknown),
		refuse("signed: key id altered to the other key of the ring", withKID(bound.Token, kid2), rotated, now, bound, "invalid", rScope),
		refuse("sealed: key id altered to the other key of the ring", withKID(sealed.Token, kid2), rotated, now, sealed, "invalid", rSealed),
		refuse("signed: tampered page byte", flip(bound.Token, 10), ring, now, bound, "invalid", rScope),
		refuse("signed: tampered MAC byte", flip(bound.Token, len(vecHex(t, bound.Body))+5), ring, now, bound, "invalid", rScope),
		refuse("sealed: tampered ciphertext byte", flip(sealed.Token, len(sealedRaw)-20), ring, now, sealed, "invalid", rSealed),
		refuse("sealed: tampered issued-at in the header", flip(sealed.Token, 13), ring, now, sealed, "invalid", rSealed),
		refuse("signed: truncated MAC", base64.RawURLEncoding.EncodeToString(vecHex(t, bound.Body+bound.MAC[:len(bound.MAC)-6])), ring, now, bound, "invalid", rMAC),
		refuse("signed: truncated inside the prefix", bound.Token[:8], ring, now, bound, "invalid", "truncated"),
		refuse("sealed: truncated below nonce and tag", base64.RawURLEncoding.EncodeToString(sealedRaw[:len(vecHex(t, sealed.Header))+30]), ring, now, sealed, "invalid", "truncated"),
		refuse("signed: other server session", signed(vecKey, kid1, now, otherTag, nil), ring, now, bound, "expired", "other server session"),
		refuse("sealed: other server session", sealWith(vecKey, kid1, now, otherTag, sealedPT), ring, now, sealed, "expired", "other server session"),
		refuse("format 1 (tool and caller in the token)", vecFormat1Token, ring, now, bound, "invalid", rMalformed),
		refuse("signed layout before key ids", preKeyID, ring, now, bound, "invalid", rMalformed),
		refuse("sealed layout before key ids", preKeyIDSealed, ring, now, sealed, "invalid", rMalformed),
		refuse("sealed: a padding byte non-zero", sealWith(vecKey, kid1, now, tag, badPad), ring, now, sealed, "invalid", rMalformed),
		refuse("sealed: no padding", sealWith(vecKey, kid1, now, tag, vecSealedInner(sealed.Page, vecHex(t, sealed.State))), ring, now, sealed, "invalid", rMalformed),
		refuse("sealed: one padding block too many", sealWith(vecKey, kid1, now, tag, append(append([]byte(nil), sealedPT...), make([]byte, 64)...)), ring, now, sealed, "invalid", rMalformed),
		refuse("signed, MAC-valid: explicit empty state", vecSignCursor(vecKey, emptyState, boundScope), ring, now, bound, "invalid", rMalformed),
		refuse("signed, MAC-valid: state over MaxOpaqueStateBytes", vecSignCursor(vecKey, oversizeState, boundScope), ring, now, bound, "invalid", rMalformed),
		refuse("signed, MAC-valid: non-minimal page", vecSignCursor(vecKey, bytes.Replace(vecSignedBody(kid1, 2, now, tag, nil), []byte{0x05, 0x02}, []byte{0x05, 0x18, 0x02}, 1), boundScope), ring, now, bound, "invalid", rMalformed),
		refuse("signed, MAC-valid: session tag of 7 bytes", signed(vecKey, kid1, now, tag[:7], nil), ring, now, bound, "invalid", rMalformed),
		refuse("signed, MAC-valid: trailing byte", vecSignCursor(vecKey, append(vecSignedBody(kid1, 2, now, tag, nil), 0x00), boundScope), ring, now, bound, "invalid", rMalformed),
		refuse("empty", "", ring, now, bound, "invalid", "empty"),
		refuse("over MaxCursorBytes", strings.Repeat("A", MaxCursorBytes+1), ring, now, bound, "invalid", "over MaxCursorBytes"),
		refuse("padded base64url", bound.Token+strings.Repeat("=", (4-len(bound.Token)%4)%4), ring, now, bound, "invalid", "not base64url"),
		refuse("line feed inside (encoding/base64 would skip it)", bound.Token[:5]+"\n"+bound.Token[5:], ring, now, bound, "invalid", "not base64url"),
		refuse("standard alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(bound.Token), ring, now, bound, "invalid", "not base64url"),
	}
	if len(bound.Token)%4 == 0 || !strings.ContainsAny(bound.Token, "-_") {
		t.Fatal("the padded and standard-alphabet vectors need another token")
	}
	checkCursorFile(t, f)
	return f
}

func checkCursorVectors(t *testing.T) {
	var f cursorFile
	readVectors(t, "cursor.json", &f)
	if len(f.Issue) == 0 || len(f.Verify) == 0 {
		t.Fatal("no vectors")
	}
	checkCursorFile(t, f)
}

// checkCursorFile holds the library and the independent construction to f.
func checkCursorFile(t *testing.T, f cursorFile) {
	t.Helper()
	key, key2, session := vecHex(t, f.Key), vecHex(t, f.Key2), vecHex(t, f.Session)
	for _, c := range []struct{ got, want, what string }{
		{hex.EncodeToString(subkey(key, cursorKeyLabel)), f.MACKey, "MAC key"},
		{hex.EncodeToString(subkey(key, cursorSealLabel)), f.SealKey, "seal key"},
		{hex.EncodeToString(subkey(key2, cursorKeyLabel)), f.Key2MACKey, "key2 MAC key"},
		{hex.EncodeToString(subkey(key2, cursorSealLabel)), f.Key2SealKey, "key2 seal key"},
		{hex.EncodeToString(vecHKDF(key, vecCursorMACLabel)), f.MACKey, "reference MAC key"},
		{hex.EncodeToString(vecKeyID(key)), f.KeyID, "reference key id"},
		{hex.EncodeToString(vecKeyID(key2)), f.Key2ID, "reference key2 id"},
		{hex.EncodeToString(vecSessionTag(session)), f.SessionTag, "reference session tag"},
		{strings.Join(vecKeyring(t, key, key2).KeyIDs(), ","), f.KeyID + "," + f.Key2ID, "Keyring.KeyIDs"},
	} {
		if c.got != c.want {
			t.Errorf("%s %s, want %s", c.what, c.got, c.want)
		}
	}
	if tag := cursorSessionTag(session); hex.EncodeToString(tag[:]) != f.SessionTag {
		t.Errorf("session tag %x, want %s", tag, f.SessionTag)
	}
	gcmOK := vecXAESGCM(t, key, make([]byte, 24)) != nil
	if !gcmOK {
		t.Log("cipher.NewGCM refuses a caller-chosen nonce (fips140=only): the independent XAES seal and open are skipped")
	}
	for _, v := range f.Issue {
		t.Run(v.Name, func(t *testing.T) { checkCursorIssueVector(t, f, v, gcmOK) })
	}
	for _, v := range f.Verify {
		keys := make([][]byte, len(v.Keys))
		for i, k := range v.Keys {
			keys[i] = vecHex(t, k)
		}
		var want CursorScope
		want.ToolID, want.CallerID = v.WantTool, v.WantCaller
		if v.WantArgs != "" {
			copy(want.Args[:], vecHex(t, v.WantArgs))
		}
		got, err := vecIssuer(t, time.Unix(v.Now, 0), session, keys...).Verify(v.Token, want)
		if r := resultOf(err); r != v.Result || Reason(err).String() != v.Reason {
			t.Errorf("verify %q: %s, reason %q (%v); want %s, reason %q", v.Name, r, Reason(err), err, v.Result, v.Reason)
			continue
		}
		if v.Result != "ok" {
			if !isZeroPayload(got) {
				t.Errorf("verify %q: refused but returned %+v", v.Name, got)
			}
			continue
		}
		if v.Payload == nil {
			t.Errorf("verify %q: ok vector without payload", v.Name)
			continue
		}
		wp := v.Payload.payload(t)
		if got.ToolID != wp.ToolID || got.CallerID != wp.CallerID || got.Args != wp.Args ||
			got.Page != wp.Page || !bytes.Equal(got.State, wp.State) || got.IssuedAt.Unix() != v.Payload.IssuedAt {
			t.Errorf("verify %q: payload %+v, want %+v", v.Name, got, wp)
		}
	}
}

func checkCursorIssueVector(t *testing.T, f cursorFile, v cursorIssueVector, gcmOK bool) {
	session := vecHex(t, f.Session)
	rebuilt := v
	vecBuildCursor(t, session, &rebuilt)
	if !gcmOK && v.Layout == "sealed" {
		rebuilt.Token = v.Token
	}
	if rebuilt != v {
		t.Fatalf("the independent construction differs:\n got  %+v\n want %+v", rebuilt, v)
	}
	key := vecHex(t, v.SignKey)
	var args Fingerprint
	copy(args[:], vecHex(t, v.Args))
	scope := CursorScope{ToolID: v.Tool, CallerID: v.Caller, Args: args}
	p := CursorPayload{CursorScope: scope, Page: v.Page, State: vecHex(t, v.State)}
	iss := newTestIssuer(t, CursorConfig{Keys: vecKeyring(t, key), Session: session, Now: fixedClock(time.Unix(v.IssuedAt, 0)), Seal: v.Layout == "sealed"})
	tok, err := iss.Issue(p)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(v.Token)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw[5:9], vecHex(t, v.KeyID)) {
		t.Errorf("key id at raw[5:9] is %x, want %s", raw[5:9], v.KeyID)
	}
	if v.Caller != "" && bytes.Contains(raw, []byte(v.Caller)) || bytes.Contains(raw, []byte("ctoken.scope")) {
		t.Error("the token carries its scope")
	}
	switch v.Layout {
	case "signed":
		if tok != v.Token {
			t.Errorf("Issue = %s, want %s", tok, v.Token)
		}
		body := vecHex(t, v.Body)
		if !bytes.Equal(raw, append(append([]byte(nil), body...), vecHex(t, v.MAC)...)) {
			t.Error("token is not body || mac")
		}
	case "sealed":
		hdr := vecHex(t, v.Header)
		if !bytes.Equal(raw[:len(hdr)], hdr) || !bytes.Equal(raw[len(hdr):len(hdr)+24], vecHex(t, v.Nonce)) {
			t.Error("token is not header || nonce || ...")
		}
		if len(tok) != len(v.Token) {
			t.Errorf("Issue's sealed cursor is %d characters, the vector %d", len(tok), len(v.Token))
		}
		if gcmOK {
			// Issue's output (random nonce) opens with the independent
			// XAES to the vector's plaintext, under the same header.
			iraw, _ := base64.RawURLEncoding.DecodeString(tok)
			ad := append(append([]byte(nil), iraw[:len(hdr)]...), vecHex(t, v.Scope)...)
			pt, _, err := vecXAESOpen(t, vecHKDF(key, vecCursorSealLabel), iraw[len(hdr):], ad)
			if err != nil || !bytes.Equal(iraw[:len(hdr)], hdr) || hex.EncodeToString(pt) != v.Plaintext {
				t.Errorf("Issue's sealed cursor opens to %x, %v; want %s", pt, err, v.Plaintext)
			}
		}
	default:
		t.Fatalf("layout %q", v.Layout)
	}
	// Verify, by a ring holding the key alone and by the 2-key ring.
	for _, ring := range [][][]byte{{key}, {vecHex(t, f.Key), vecHex(t, f.Key2)}} {
		got, err := vecIssuer(t, time.Unix(v.IssuedAt, 0), session, ring...).Verify(v.Token, scope)
		if err != nil || got.Page != v.Page || !bytes.Equal(got.State, p.State) || got.IssuedAt.Unix() != v.IssuedAt || got.CursorScope != scope {
			t.Errorf("Verify (ring of %d) = %+v, %v", len(ring), got, err)
		}
	}
}
