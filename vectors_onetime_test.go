package ctoken

// One-time token vectors: testdata/vectors/onetime*.json, documented in
// testdata/vectors/README.md. One loop runs every row of every file; each
// row says what must happen in its "expect" field. Under -update-vectors
// onetime.json is regenerated from payloads built by hand and MACs computed
// with the independent HKDF and HMAC constructions of vectors_test.go.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type oneTimeFile struct {
	Comment string          `json:"comment"`
	KeyHex  string          `json:"key_hex"`
	Key2Hex string          `json:"key2_hex"`
	MACKey  string          `json:"mac_key_hex"`
	KeyID   string          `json:"key_id_hex"`
	Key2ID  string          `json:"key2_id_hex"`
	Purpose string          `json:"purpose"`
	TTL     int64           `json:"ttl_seconds"`
	Rows    []oneTimeVector `json:"vectors"`
}

type oneTimeVector struct {
	Name string `json:"name"`
	// KeysHex is the redeemer's ring, primary first; empty means [key_hex].
	KeysHex []string `json:"keys_hex,omitempty"`
	// Purpose is the redeemer's purpose; empty means the file's.
	Purpose    string            `json:"purpose,omitempty"`
	NowUnix    int64             `json:"now_unix"`
	PayloadHex string            `json:"payload_hex,omitempty"` // the signed payload, when well-framed
	Token      string            `json:"token"`
	Want       map[string]string `json:"want_claims"`
	// Expect is "ok", "invalid", "expired" or "claims".
	Expect string `json:"expect"`
	// Reason is the Reason of the refusal, when the row pins it.
	Reason string `json:"reason,omitempty"`
}

// vecKeyID is the key id of key, computed independently of the library:
// the first 4 bytes of HKDF-SHA256(key, 32 zero bytes, "ctoken.key-id").
func vecKeyID(key []byte) []byte { return vecHKDF(key, "ctoken.key-id")[:4] }

// vecOneTimePayload is the ot1 payload built by hand: version, key id,
// nonce, times, purpose, claims.
func vecOneTimePayload(version byte, kid, nonce []byte, issued, expires int64, purpose string, claims ...string) []byte {
	p := []byte{version}
	p = append(p, kid...)
	p = append(p, nonce...)
	p = binary.BigEndian.AppendUint64(p, uint64(issued))
	p = binary.BigEndian.AppendUint64(p, uint64(expires))
	for _, s := range append([]string{purpose}, claims...) {
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	return p
}

// vecOneTimeToken signs payload with key's one-time subkey, independently
// of the library.
func vecOneTimeToken(key, payload []byte) string {
	raw := append(append([]byte(nil), payload...), vecHMAC(vecHKDF(key, oneTimeLabel), payload)...)
	return oneTimePrefix + b64.EncodeToString(raw)
}

func genOneTimeVectors(t *testing.T) oneTimeFile {
	const purpose = "agent-bootstrap"
	now, ttl := vecNow.Unix(), int64(600)
	nonce := seqBytes(0xa0, oneTimeNonceLen)
	kid, kid2 := vecKeyID(vecKey), vecKeyID(vecKey2)
	f := oneTimeFile{
		Comment: "token = \"ot1.\" + base64url_nopad(payload || HMAC-SHA256(mac_key, payload)); payload = 0x03 || key_id || ...; key_id = HKDF-SHA256(key, 32 zero bytes, \"ctoken.key-id\")[:4]; mac_key = DeriveKey(key, \"" + oneTimeLabel + "\"); see README.md",
		KeyHex:  hex.EncodeToString(vecKey),
		Key2Hex: hex.EncodeToString(vecKey2),
		MACKey:  hex.EncodeToString(vecHKDF(vecKey, oneTimeLabel)),
		KeyID:   hex.EncodeToString(vecKeyID(vecKey)),
		Key2ID:  hex.EncodeToString(vecKeyID(vecKey2)),
		Purpose: purpose,
		TTL:     ttl,
	}
	claims := []string{"agent", "agt_42", "company", "co_7", "run", "run_1"}
	want := map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_1"}
	row := func(name string, payload []byte, at int64, want map[string]string, expect, reason string) oneTimeVector {
		return oneTimeVector{Name: name, NowUnix: at, PayloadHex: hex.EncodeToString(payload), Token: vecOneTimeToken(vecKey, payload), Want: want, Expect: expect, Reason: reason}
	}
	good := vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose, claims...)
	goodTok := vecOneTimeToken(vecKey, good)
	tampered := []byte(goodTok)
	tampered[len(tampered)-5] ^= 'A' ^ 'B'
	// withKID is good with its key id replaced, its MAC unchanged.
	withKID := func(id []byte) string {
		p := append([]byte(nil), good...)
		copy(p[1:], id)
		return oneTimePrefix + b64.EncodeToString(append(p, vecHMAC(vecHKDF(vecKey, oneTimeLabel), good)...))
	}
	ring := func(keys ...[]byte) []string {
		var out []string
		for _, k := range keys {
			out = append(out, hex.EncodeToString(k))
		}
		return out
	}
	foreign := []byte{0xde, 0xad, 0xbe, 0xef}
	kid2Payload := vecOneTimePayload(oneTimeVersion, kid2, nonce, now, now+ttl, purpose, claims...)
	big := strings.Repeat("x", 600)
	rows := []oneTimeVector{
		row("three claims", good, now, want, "ok", ""),
		row("no claims", vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose), now, map[string]string{}, "ok", ""),
		row("claim named \"\" and an empty value", vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose, "", "anon", "run", ""), now, map[string]string{"": "anon", "run": ""}, "ok", ""),
		row("one second before expiry", good, now+ttl-1, want, "ok", ""),
		row("at expiry", good, now+ttl, want, "expired", "expired"),
		row("issued 60 s in the future (clock skew allowed)", good, now-60, want, "ok", ""),
		row("issued 61 s in the future", good, now-61, want, "invalid", "issued in the future"),
		row("other claims", good, now, map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_2"}, "claims", "claims mismatch"),
		row("fewer claims wanted", good, now, map[string]string{"agent": "agt_42"}, "claims", "claims mismatch"),
		row("long claim", vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose, "v", big), now, map[string]string{"v": big}, "ok", ""),
		row("mac-valid: version byte 1 (a development layout)", append([]byte{1}, vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose, claims...)[1+keyIDSize:]...), now, want, "invalid", "unknown format"),
		row("mac-valid: version 2 (the development layout without a key id)", append([]byte{2}, vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose, claims...)[1+keyIDSize:]...), now, want, "invalid", "unknown format"),
		row("mac-valid: version 4", vecOneTimePayload(4, kid, nonce, now, now+ttl, purpose, claims...), now, want, "invalid", "unknown format"),
		row("mac-valid: key id of no key", vecOneTimePayload(oneTimeVersion, foreign, nonce, now, now+ttl, purpose, claims...), now, want, "invalid", "signed by a key not in the ring: retired or foreign"),
		row("mac-valid: key id of key2, ring holds key only", kid2Payload, now, want, "invalid", "signed by a key not in the ring: retired or foreign"),
		row("mac-valid: unsorted claims", vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose, "run", "run_1", "agent", "agt_42"), now, map[string]string{"agent": "agt_42", "run": "run_1"}, "invalid", "malformed payload"),
		row("mac-valid: duplicate claim", vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose, "a", "1", "a", "1"), now, map[string]string{"a": "1"}, "invalid", "malformed payload"),
		row("mac-valid: trailing byte", append(vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose), 0), now, map[string]string{}, "invalid", "malformed payload"),
		row("mac-valid: claim length past the end", append(vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose), 9, 'a'), now, map[string]string{}, "invalid", "malformed payload"),
		row("mac-valid: non-minimal uvarint", append(vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, purpose), 0x81, 0x00, 'a', 0), now, map[string]string{"a": ""}, "invalid", "malformed payload"),
		row("mac-valid: other purpose", vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, "password-reset", claims...), now, want, "invalid", "other purpose"),
		row("mac-valid: empty purpose", vecOneTimePayload(oneTimeVersion, kid, nonce, now, now+ttl, "", claims...), now, want, "invalid", "other purpose"),
		{Name: "redeemer of another purpose", Purpose: "password-reset", NowUnix: now, PayloadHex: hex.EncodeToString(good), Token: goodTok, Want: want, Expect: "invalid", Reason: "other purpose"},
		{Name: "signed by the previous key of the ring", KeysHex: ring(vecKey2, vecKey), NowUnix: now, PayloadHex: hex.EncodeToString(good), Token: goodTok, Want: want, Expect: "ok"},
		{Name: "key not in the ring (retired)", KeysHex: ring(vecKey2), NowUnix: now, PayloadHex: hex.EncodeToString(good), Token: goodTok, Want: want, Expect: "invalid", Reason: "signed by a key not in the ring: retired or foreign"},
		{Name: "mac-valid: key id of key2, ring holds both", KeysHex: ring(vecKey, vecKey2), NowUnix: now, PayloadHex: hex.EncodeToString(kid2Payload), Token: vecOneTimeToken(vecKey, kid2Payload), Want: want, Expect: "invalid", Reason: "mac mismatch"},
		{Name: "key id altered to key2's, ring holds both", KeysHex: ring(vecKey, vecKey2), NowUnix: now, Token: withKID(kid2), Want: want, Expect: "invalid", Reason: "mac mismatch"},
		{Name: "key id altered to key2's, ring holds key2 only", KeysHex: ring(vecKey2), NowUnix: now, Token: withKID(kid2), Want: want, Expect: "invalid", Reason: "mac mismatch"},
		{Name: "key id altered to no key's", NowUnix: now, Token: withKID(foreign), Want: want, Expect: "invalid", Reason: "signed by a key not in the ring: retired or foreign"},
		{Name: "key id altered by one bit", NowUnix: now, Token: withKID([]byte{kid[0], kid[1], kid[2], kid[3] ^ 1}), Want: want, Expect: "invalid", Reason: "signed by a key not in the ring: retired or foreign"},
		{Name: "tampered", NowUnix: now, Token: string(tampered), Want: want, Expect: "invalid"},
		{Name: "truncated", NowUnix: now, Token: goodTok[:len(goodTok)-4], Want: want, Expect: "invalid"},
		{Name: "no prefix", NowUnix: now, Token: goodTok[len(oneTimePrefix):], Want: want, Expect: "invalid", Reason: "unknown format"},
		{Name: "line feed inside", NowUnix: now, Token: goodTok[:10] + "\n" + goodTok[10:], Want: want, Expect: "invalid", Reason: "bad base64"},
		{Name: "padded", NowUnix: now, Token: goodTok + "=", Want: want, Expect: "invalid", Reason: "bad base64"},
		{Name: "over MaxOneTimeTokenBytes", NowUnix: now, Token: oneTimePrefix + strings.Repeat("A", MaxOneTimeTokenBytes-len(oneTimePrefix)+1), Want: want, Expect: "invalid", Reason: "oversize"},
	}
	f.Rows = rows
	return f
}

// oneTimeExpect classifies a Redeem error as a vector expectation.
func oneTimeExpect(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrOneTimeInvalid):
		return "invalid"
	case errors.Is(err, ErrOneTimeExpired):
		return "expired"
	case errors.Is(err, ErrOneTimeClaims):
		return "claims"
	}
	return "error: " + err.Error()
}

// TestOneTimeVectors runs every row of every testdata/vectors/onetime*.json
// file through Redeem (after regenerating onetime.json under
// -update-vectors).
func TestOneTimeVectors(t *testing.T) {
	if *updateVectors {
		writeVectors(t, "onetime.json", genOneTimeVectors(t))
	}
	files, err := filepath.Glob(filepath.Join(vectorsDir, "onetime*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no one-time vector files (%v); regenerate with -update-vectors", err)
	}
	for _, path := range files {
		var f oneTimeFile
		readVectors(t, filepath.Base(path), &f)
		if len(f.Rows) == 0 {
			t.Fatalf("%s: no vectors", path)
		}
		key := vecHex(t, f.KeyHex)
		if got := hex.EncodeToString(subkey(key, oneTimeLabel)); got != f.MACKey {
			t.Fatalf("%s: one-time subkey %s, file says %s", path, got, f.MACKey)
		}
		if got := vecKeyring(t, key, vecHex(t, f.Key2Hex)).KeyIDs(); got[0] != f.KeyID || got[1] != f.Key2ID {
			t.Fatalf("%s: key ids %v, file says %s, %s", path, got, f.KeyID, f.Key2ID)
		}
		for _, v := range f.Rows {
			t.Run(filepath.Base(path)+"/"+v.Name, func(t *testing.T) { checkOneTimeVector(t, f, v) })
		}
	}
}

func checkOneTimeVector(t *testing.T, f oneTimeFile, v oneTimeVector) {
	keys := [][]byte{vecHex(t, f.KeyHex)}
	if len(v.KeysHex) > 0 {
		keys = keys[:0]
		for _, k := range v.KeysHex {
			keys = append(keys, vecHex(t, k))
		}
	}
	purpose := f.Purpose
	if v.Purpose != "" {
		purpose = v.Purpose
	}
	// The token is the hand-built payload signed by the independent
	// construction: the wire format, not whatever Mint does.
	if v.PayloadHex != "" {
		if want := vecOneTimeToken(vecHex(t, f.KeyHex), vecHex(t, v.PayloadHex)); v.Token != want {
			t.Fatalf("token %q is not payload_hex signed with key_hex (%q)", v.Token, want)
		}
	}
	o, err := NewOneTimeIssuer(OneTimeConfig{
		Keys: vecKeyring(t, keys...), Purpose: purpose,
		TTL: time.Duration(f.TTL) * time.Second, Now: fixedClock(time.Unix(v.NowUnix, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.Redeem(context.Background(), v.Token, v.Want)
	if e := oneTimeExpect(err); e != v.Expect {
		t.Fatalf("Redeem = %v (%s), want %s", err, e, v.Expect)
	}
	if v.Reason != "" && Reason(err) != v.Reason {
		t.Fatalf("reason %q, want %q", Reason(err), v.Reason)
	}
	if v.Expect == "ok" && !maps.Equal(got, v.Want) {
		t.Fatalf("claims %v, want %v", got, v.Want)
	}
	if v.Expect != "ok" && got != nil {
		t.Fatalf("refused, yet returned claims %v", got)
	}
}

// Mint writes exactly the layout of the vectors: rebuild its token by hand
// from its own nonce and compare.
func TestOneTimeMintMatchesTheWireFormat(t *testing.T) {
	o, err := NewOneTimeIssuer(OneTimeConfig{Keys: vecKeyring(t, vecKey), Purpose: "agent-bootstrap", TTL: 10 * time.Minute, Now: fixedClock(vecNow)})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := o.Mint(map[string]string{"run": "run_1", "agent": "agt_42", "": "x"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b64.DecodeString(strings.TrimPrefix(tok, oneTimePrefix))
	if err != nil {
		t.Fatal(err)
	}
	nonce := raw[oneTimeNonceAt : oneTimeNonceAt+oneTimeNonceLen]
	want := vecOneTimeToken(vecKey, vecOneTimePayload(oneTimeVersion, vecKeyID(vecKey), nonce, vecNow.Unix(), vecNow.Add(10*time.Minute).Unix(), "agent-bootstrap", "", "x", "agent", "agt_42", "run", "run_1"))
	if tok != want {
		t.Fatalf("Mint = %s\nhand-built %s", tok, want)
	}
}
