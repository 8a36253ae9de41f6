package ctoken

// Known-answer vectors: testdata/vectors/*.json, documented in
// testdata/vectors/README.md. TestVectors checks the library against every
// vector on every run. With -update-vectors it first regenerates the files
// (and the fuzz seed corpora, see fuzz_test.go). Regeneration cross-checks
// every value against an independent construction from the standard library
// (hand-built CBOR, HKDF from crypto/hmac, HMAC and AES-GCM directly) and
// against hand-written expectations (RFC 8785's examples), so a regenerated
// file is never merely "whatever the code does today".

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var updateVectors = flag.Bool("update-vectors", false, "regenerate testdata/vectors/*.json and testdata/fuzz seed corpora")

const vectorsDir = "testdata/vectors"

// Fixed inputs of every vector.
var (
	// vecKey is the operator key of the vectors: bytes 0x00..0x1f.
	vecKey = seqBytes(0x00, 32)
	// vecKey2 is a second key (rotation, foreign keys): bytes 0x80..0x9f.
	vecKey2 = seqBytes(0x80, 32)
	// vecSession is the cursor server session.
	vecSession = []byte("vectors1")
	// vecNow is the clock of the vectors: 2026-01-02T03:04:05Z.
	vecNow = time.Unix(1767323045, 0)
)

func seqBytes(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func vecHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func vecKeyring(t testing.TB, keys ...[]byte) *Keyring {
	t.Helper()
	kr, err := NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// ---------------------------------------------------------------------------
// Independent constructions (standard library only), used to cross-check the
// library when generating vectors and when checking them.

// vecHKDF is HKDF-SHA256 (RFC 5869) with a 32-byte zero salt and 32 bytes of
// output, written out with crypto/hmac.
func vecIssuer(t testing.TB, now time.Time, session []byte, keys ...[]byte) *CursorIssuer {
	t.Helper()
	if len(keys) == 0 {
		keys = [][]byte{vecKey}
	}
	i, err := NewCursorIssuer(CursorConfig{Keys: vecKeyring(t, keys...), Session: session, Now: fixedClock(now)})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func vecHKDF(ikm []byte, label string) []byte {
	ext := hmac.New(sha256.New, make([]byte, 32))
	ext.Write(ikm)
	prk := ext.Sum(nil)
	exp := hmac.New(sha256.New, prk)
	exp.Write([]byte(label))
	exp.Write([]byte{1})
	return exp.Sum(nil)
}

func vecHMAC(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// cborHead appends a CBOR head with the shortest argument encoding.
func cborHead(dst []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(dst, m|byte(n))
	case n <= math.MaxUint8:
		return append(dst, m|24, byte(n))
	case n <= math.MaxUint16:
		return append(dst, m|25, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(dst, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
		byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func cborInt(dst []byte, v int64) []byte {
	if v < 0 {
		return cborHead(dst, 1, uint64(-1-v))
	}
	return cborHead(dst, 0, uint64(v))
}

// vecBindTag is SPEC §4's bind tag: the material is the subject, subject +
// NUL + tool (an empty subject included), or empty for BindNone.
func vecBindTag(key []byte, binding RequestStateBinding, subject, tool string) string {
	var material string
	switch binding {
	case BindSubject:
		material = subject
	case BindSubjectAndTool:
		material = subject + "\x00" + tool
	}
	return hex.EncodeToString(vecHMAC(vecHKDF(key, stateBindLabel), []byte(material)))
}

// vecJCSString is a JSON string with only RFC 8785's escapes: \" and \\,
// the short forms \b \t \n \f \r, \u00xx (lowercase hex) for the other
// control characters, everything else verbatim.
func vecJCSString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteString(hex.EncodeToString([]byte{byte(r)}))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// vecStatePayload is SPEC §4's payload: the state as a JCS string, exp in
// decimal, the bind tag, in that member order, no white space.
func vecStatePayload(state string, exp int64, tag string) []byte {
	return []byte(`{"s":` + vecJCSString(state) + `,"exp":` + strconv.FormatInt(exp, 10) + `,"b":"` + tag + `"}`)
}

func vecSignedWire(key, payload []byte) string {
	return "v1." + base64.RawURLEncoding.EncodeToString(payload) + "." +
		base64.RawURLEncoding.EncodeToString(vecHMAC(vecHKDF(key, statePayloadLabel), payload))
}

func vecEncryptedWire(t testing.TB, key, nonce, payload []byte, tag string) string {
	t.Helper()
	sealed := newRefGCM(t, vecHKDF(key, stateAESLabel)).seal(nonce, payload, []byte(tag))
	return "v1e." + base64.RawURLEncoding.EncodeToString(append(append([]byte(nil), nonce...), sealed...))
}

// vecOpenEncrypted opens an encrypted wire by hand, with the hand-written
// GCM of envelope_test.go and the nonce taken from the wire's first 12
// bytes, independently of the codec and of crypto/cipher: the known answer
// for the encrypt side, whose nonce is random. It returns the payload and
// the nonce.
func vecOpenEncrypted(t testing.TB, key []byte, wire, tag string) (payload, nonce []byte, err error) {
	t.Helper()
	if !strings.HasPrefix(wire, "v1e.") {
		return nil, nil, errors.New("no v1e. prefix")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(wire[len("v1e."):])
	if err != nil {
		return nil, nil, err
	}
	if len(raw) < 12+16 {
		return nil, nil, errors.New("shorter than nonce and tag")
	}
	payload, err = newRefGCM(t, vecHKDF(key, stateAESLabel)).open(raw[:12], raw[12:], []byte(tag))
	return payload, raw[:12], err
}

// ---------------------------------------------------------------------------
// File formats (documented in testdata/vectors/README.md).

type hkdfFile struct {
	Comment string       `json:"comment"`
	Salt    string       `json:"salt_hex"`
	Vectors []hkdfVector `json:"vectors"`
}

type hkdfVector struct {
	Key    string `json:"key_hex"`
	Label  string `json:"label"`
	Subkey string `json:"subkey_hex"`
}

type stateFile struct {
	Comment    string              `json:"comment"`
	Key        string              `json:"key_hex"`
	Key2       string              `json:"key2_hex"`
	AESKey     string              `json:"aes_key_hex"`
	BindKey    string              `json:"bind_key_hex"`
	PayloadKey string              `json:"payload_key_hex"`
	TTLSeconds int64               `json:"ttl_seconds"`
	BindTags   []bindTagVector     `json:"bind_tags"`
	Encode     []stateEncodeVector `json:"encode"`
	Decode     []stateDecodeVector `json:"decode"`
}

type bindTagVector struct {
	Binding  string `json:"binding"`
	Subject  string `json:"subject"`
	Tool     string `json:"tool"`
	Material string `json:"material_hex"`
	Tag      string `json:"tag"`
}

type stateEncodeVector struct {
	Name    string `json:"name"`
	Key     string `json:"key_hex"`
	Mode    string `json:"mode"`
	Binding string `json:"binding"`
	Subject string `json:"subject"`
	Tool    string `json:"tool"`
	State   string `json:"state"`
	Now     int64  `json:"now_unix"`
	Exp     int64  `json:"exp_unix"`
	BindTag string `json:"bind_tag"`
	Payload string `json:"payload"`
	Nonce   string `json:"nonce_hex,omitempty"`
	Wire    string `json:"wire"`
}

type stateDecodeVector struct {
	Name    string   `json:"name"`
	Keys    []string `json:"keys_hex"`
	Mode    string   `json:"mode"`
	Binding string   `json:"binding"`
	Wire    string   `json:"wire"`
	Subject string   `json:"subject"`
	Tool    string   `json:"tool"`
	Now     int64    `json:"now_unix"`
	Result  string   `json:"result"`
	State   *string  `json:"state,omitempty"`
}

type jcsFile struct {
	Comment string           `json:"comment"`
	Valid   []jcsValidVector `json:"valid"`
	Invalid []jcsBadVector   `json:"invalid"`
}

type jcsValidVector struct {
	Name        string `json:"name"`
	Input       string `json:"input"`
	Canonical   string `json:"canonical"`
	Fingerprint string `json:"fingerprint_hex"`
}

type jcsBadVector struct {
	Name     string `json:"name"`
	Input    string `json:"input,omitempty"`
	InputHex string `json:"input_hex,omitempty"`
	Reason   string `json:"reason"`
}

func (v jcsBadVector) bytes(t testing.TB) []byte {
	if v.InputHex != "" {
		return vecHex(t, v.InputHex)
	}
	return []byte(v.Input)
}

var modeNames = map[RequestStateMode]string{Signed: "signed", Encrypted: "encrypted"}

var bindingNames = map[RequestStateBinding]string{
	BindSubject: "subject", BindSubjectAndTool: "subject_and_tool", BindNone: "none",
}

func parseMode(t testing.TB, s string) RequestStateMode {
	for m, n := range modeNames {
		if n == s {
			return m
		}
	}
	t.Fatalf("unknown mode %q", s)
	return 0
}

func parseBinding(t testing.TB, s string) RequestStateBinding {
	for b, n := range bindingNames {
		if n == s {
			return b
		}
	}
	t.Fatalf("unknown binding %q", s)
	return 0
}

// resultOf classifies err as a vector result.
func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrCursorExpired), errors.Is(err, ErrStateExpired):
		return "expired"
	case errors.Is(err, ErrCursorInvalid), errors.Is(err, ErrStateInvalid):
		return "invalid"
	}
	return "error: " + err.Error()
}

func readVectors(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorsDir, name))
	if err != nil {
		t.Fatalf("%v (regenerate with go test -run TestVectors -update-vectors)", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func writeVectors(t *testing.T, name string, v any) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(vectorsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vectorsDir, name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVectors checks the library against every known-answer vector in
// testdata/vectors, after regenerating them under -update-vectors.
func TestVectors(t *testing.T) {
	if *updateVectors {
		writeVectors(t, "hkdf.json", genHKDFVectors(t))
		writeVectors(t, "cursor.json", genCursorVectors(t))
		writeVectors(t, "request_state.json", genStateVectors(t))
		writeVectors(t, "request_state_audience.json", genStateAudienceVectors(t))
		writeVectors(t, "jcs.json", genJCSVectors(t))
		writeFuzzSeedCorpora(t)
	}
	t.Run("HKDF", checkHKDFVectors)
	t.Run("Cursor", checkCursorVectors)
	t.Run("RequestState", checkStateVectors)
	t.Run("RequestStateAudience", checkStateAudienceVectors)
	t.Run("JCS", checkJCSVectors)
}

// ---------------------------------------------------------------------------
// HKDF

var vectorLabels = []string{cursorKeyLabel, cursorSealLabel, keyIDLabel, stateAESLabel, stateBindLabel, statePayloadLabel}

func genHKDFVectors(t *testing.T) hkdfFile {
	f := hkdfFile{
		Comment: "DeriveKey(key, label) = HKDF-SHA256(ikm=key, salt=32 zero bytes, info=label, L=32)",
		Salt:    hex.EncodeToString(make([]byte, 32)),
	}
	long := seqBytes(0x40, 64)
	for _, key := range [][]byte{vecKey, vecKey2, long} {
		for _, label := range vectorLabels {
			sub := subkey(key, label)
			if ref := vecHKDF(key, label); !bytes.Equal(sub, ref) {
				t.Fatalf("DeriveKey(%x, %q) = %x, RFC 5869 construction gives %x", key, label, sub, ref)
			}
			f.Vectors = append(f.Vectors, hkdfVector{hex.EncodeToString(key), label, hex.EncodeToString(sub)})
		}
	}
	return f
}

func checkHKDFVectors(t *testing.T) {
	var f hkdfFile
	readVectors(t, "hkdf.json", &f)
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range f.Vectors {
		key := vecHex(t, v.Key)
		if got := hex.EncodeToString(subkey(key, v.Label)); got != v.Subkey {
			t.Errorf("DeriveKey(%s, %q) = %s, want %s", v.Key, v.Label, got, v.Subkey)
		}
		if got := hex.EncodeToString(vecHKDF(key, v.Label)); got != v.Subkey {
			t.Errorf("reference HKDF(%s, %q) = %s, want %s", v.Key, v.Label, got, v.Subkey)
		}
	}
}

// ---------------------------------------------------------------------------
// Request state

func vecCodec(t testing.TB, mode RequestStateMode, binding RequestStateBinding, now time.Time, keys ...[]byte) *RequestStateCodec {
	t.Helper()
	c, err := NewRequestStateCodec(RequestStateSecurity{
		Keys: vecKeyring(t, keys...), Mode: mode, Binding: binding, Now: fixedClock(now),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkEncodeVector checks v against the codec and the reference
// construction. A signed encoding is deterministic: Encode must give v.Wire.
// An encrypted one has a random nonce: Encode's output, opened by the
// hand-written GCM, must hold exactly v.Payload, two encodings must
// differ, and v.Wire (sealed by the reference construction with v.Nonce)
// must decode to v.State.
func checkEncodeVector(t testing.TB, v stateEncodeVector) {
	t.Helper()
	key := vecHex(t, v.Key)
	mode, binding := parseMode(t, v.Mode), parseBinding(t, v.Binding)
	c := vecCodec(t, mode, binding, time.Unix(v.Now, 0), key)
	wire, err := c.Encode(v.State, v.Subject, v.Tool)
	if err != nil {
		t.Fatalf("encode %q: %v", v.Name, err)
	}
	if tag := vecBindTag(key, binding, v.Subject, v.Tool); tag != v.BindTag {
		t.Errorf("encode %q: bind tag %s, want %s", v.Name, tag, v.BindTag)
	}
	if p := vecStatePayload(v.State, v.Exp, v.BindTag); string(p) != v.Payload {
		t.Errorf("encode %q: payload %s, want %s", v.Name, p, v.Payload)
	}
	ref := vecSignedWire(key, []byte(v.Payload))
	if mode == Encrypted {
		ref = vecEncryptedWire(t, key, vecHex(t, v.Nonce), []byte(v.Payload), v.BindTag)
		pt, nonce, err := vecOpenEncrypted(t, key, wire, v.BindTag)
		if err != nil || string(pt) != v.Payload {
			t.Errorf("encode %q: reference GCM opens Encode's output to %q, %v; want %s", v.Name, pt, err, v.Payload)
		}
		if again, _ := c.Encode(v.State, v.Subject, v.Tool); again == wire || len(again) != len(wire) {
			t.Errorf("encode %q: two encodings %q and %q: nonce reused or layout unstable", v.Name, wire, again)
		}
		if len(wire) != len(ref) || bytes.Equal(nonce, make([]byte, gcmNonceSize)) {
			t.Errorf("encode %q: wire of %d bytes, reference %d, nonce %x", v.Name, len(wire), len(ref), nonce)
		}
		wire = ref
	}
	if wire != v.Wire || ref != v.Wire {
		t.Errorf("encode %q: Encode gives\n %s\nreference construction\n %s\nvector\n %s", v.Name, wire, ref, v.Wire)
	}
	if s, err := c.Decode(v.Wire, v.Subject, v.Tool); err != nil || s != v.State {
		t.Errorf("encode %q: the vector's wire decodes to %q, %v", v.Name, s, err)
	}
}

func genStateVectors(t *testing.T) stateFile {
	f := stateFile{
		Comment:    "request state wire formats of SPEC §4 (mcp.d request_state); see README.md",
		Key:        hex.EncodeToString(vecKey),
		Key2:       hex.EncodeToString(vecKey2),
		AESKey:     hex.EncodeToString(subkey(vecKey, stateAESLabel)),
		BindKey:    hex.EncodeToString(subkey(vecKey, stateBindLabel)),
		PayloadKey: hex.EncodeToString(subkey(vecKey, statePayloadLabel)),
		TTLSeconds: int64(defaultStateTTL / time.Second),
	}
	target := MCPTarget("tools/call", "search")
	for _, b := range []struct {
		binding       RequestStateBinding
		subject, tool string
		material      string
	}{
		{BindSubject, "alice", target, "alice"},
		{BindSubject, "", target, ""},
		{BindSubjectAndTool, "alice", target, "alice\x00tools/call\x00search"},
		{BindSubjectAndTool, "alice", "", "alice\x00"},
		{BindSubjectAndTool, "", target, "\x00tools/call\x00search"},
		{BindSubjectAndTool, "Zoë 😀", "tools/call\x00résumé", "Zoë 😀\x00tools/call\x00résumé"},
		{BindNone, "alice", target, ""},
	} {
		tag := vecBindTag(vecKey, b.binding, b.subject, b.tool)
		c := vecCodec(t, Signed, b.binding, vecNow, vecKey)
		if got := string(c.bindTag(nil, 0, b.subject, b.tool)); got != tag {
			t.Fatalf("bind tag %v %q %q = %s, reference %s", b.binding, b.subject, b.tool, got, tag)
		}
		if want := hex.EncodeToString(vecHMAC(subkey(vecKey, stateBindLabel), []byte(b.material))); want != tag {
			t.Fatalf("bind material of %v %q %q is not %q", b.binding, b.subject, b.tool, b.material)
		}
		f.BindTags = append(f.BindTags, bindTagVector{bindingNames[b.binding], b.subject, b.tool, hex.EncodeToString([]byte(b.material)), tag})
	}

	now := vecNow.Unix()
	exp := now + f.TTLSeconds
	tricky := "line1\nline2 \"quoted\" back\\slash \x01\x1f\x7f </script> é 😀 \u2028"
	encodes := []stateEncodeVector{
		{Name: "signed, subject", Mode: "signed", Binding: "subject", Subject: "alice", Tool: target, State: `{"step":2}`},
		{Name: "signed, subject and tool, escapes", Mode: "signed", Binding: "subject_and_tool", Subject: "alice", Tool: target, State: tricky},
		{Name: "signed, unbound, empty state", Mode: "signed", Binding: "none", State: ""},
		{Name: "signed, subject and tool, empty subject", Mode: "signed", Binding: "subject_and_tool", Subject: "", Tool: target, State: `{"anon":1}`},
		{Name: "signed, previous key", Key: hex.EncodeToString(vecKey2), Mode: "signed", Binding: "subject", Subject: "alice", State: `{"step":3}`},
		{Name: "encrypted, subject", Mode: "encrypted", Binding: "subject", Subject: "alice", Tool: target, State: `{"step":2}`, Nonce: hex.EncodeToString(seqBytes(0, gcmNonceSize))},
		{Name: "encrypted, subject and tool, escapes", Mode: "encrypted", Binding: "subject_and_tool", Subject: "alice", Tool: target, State: tricky, Nonce: "ffffffffffffffffffffffff"},
		{Name: "encrypted, unbound, empty state", Mode: "encrypted", Binding: "none", State: "", Nonce: "000000000000000000000000"},
		{Name: "encrypted, subject and tool, empty subject", Mode: "encrypted", Binding: "subject_and_tool", Subject: "", Tool: target, State: `{"anon":1}`, Nonce: hex.EncodeToString(seqBytes(0x60, gcmNonceSize))},
		{Name: "encrypted, previous key", Key: hex.EncodeToString(vecKey2), Mode: "encrypted", Binding: "subject", Subject: "alice", State: `{"step":3}`, Nonce: hex.EncodeToString(seqBytes(0x30, gcmNonceSize))},
	}
	wires := map[string]string{}
	for i := range encodes {
		v := &encodes[i]
		if v.Key == "" {
			v.Key = hex.EncodeToString(vecKey)
		}
		key := vecHex(t, v.Key)
		v.Now, v.Exp = now, exp
		mode, binding := parseMode(t, v.Mode), parseBinding(t, v.Binding)
		v.BindTag = vecBindTag(key, binding, v.Subject, v.Tool)
		payload := vecStatePayload(v.State, exp, v.BindTag)
		v.Payload = string(payload)
		// The expected wire comes from the reference construction (the
		// vector's nonce for an encrypted state); checkEncodeVector then
		// holds the codec to it.
		v.Wire = vecSignedWire(key, payload)
		if mode == Encrypted {
			v.Wire = vecEncryptedWire(t, key, vecHex(t, v.Nonce), payload, v.BindTag)
		}
		checkEncodeVector(t, *v)
		wires[v.Name] = v.Wire
	}
	f.Encode = encodes

	k1, k2 := hex.EncodeToString(vecKey), hex.EncodeToString(vecKey2)
	str := func(s string) *string { return &s }
	sS, sE := wires["signed, subject"], wires["encrypted, subject"]
	sT, eT := wires["signed, subject and tool, escapes"], wires["encrypted, subject and tool, escapes"]
	tamper := func(w string) string {
		b := []byte(w)
		i := len(b) / 2
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	// setUnusedBits sets the unused low bits of the last base64 character
	// of w (which must have some): the same bytes to a lenient decoder.
	setUnusedBits := func(w string) string {
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		i := strings.IndexByte(alphabet, w[len(w)-1])
		return w[:len(w)-1] + string(alphabet[i|1])
	}
	if len(sS)%4 == 0 || len(sE)%4 == 0 {
		t.Fatal("no unused bits to set")
	}
	ring := []string{k1}
	rotated := []string{k1, k2}
	f.Decode = []stateDecodeVector{
		{Name: "signed: ok", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS, Subject: "alice", Tool: target, Now: now, Result: "ok", State: str(`{"step":2}`)},
		{Name: "signed: tool not bound under subject binding", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS, Subject: "alice", Tool: "other", Now: now, Result: "ok", State: str(`{"step":2}`)},
		{Name: "signed: at exp", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS, Subject: "alice", Now: exp, Result: "ok", State: str(`{"step":2}`)},
		{Name: "signed: exp + 1 s", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS, Subject: "alice", Now: exp + 1, Result: "expired"},
		{Name: "signed: wrong subject", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS, Subject: "mallory", Now: now, Result: "invalid"},
		{Name: "signed: empty subject", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS, Subject: "", Now: now, Result: "invalid"},
		{Name: "signed: subject and tool ok", Keys: ring, Mode: "signed", Binding: "subject_and_tool", Wire: sT, Subject: "alice", Tool: target, Now: now, Result: "ok", State: str(tricky)},
		{Name: "signed: wrong tool", Keys: ring, Mode: "signed", Binding: "subject_and_tool", Wire: sT, Subject: "alice", Tool: MCPTarget("tools/call", "delete"), Now: now, Result: "invalid"},
		{Name: "signed: unbound, any subject", Keys: ring, Mode: "signed", Binding: "none", Wire: wires["signed, unbound, empty state"], Subject: "anyone", Tool: "x", Now: now, Result: "ok", State: str("")},
		{Name: "signed: previous key in ring", Keys: rotated, Mode: "signed", Binding: "subject", Wire: wires["signed, previous key"], Subject: "alice", Now: now, Result: "ok", State: str(`{"step":3}`)},
		{Name: "signed: previous key not in ring", Keys: ring, Mode: "signed", Binding: "subject", Wire: wires["signed, previous key"], Subject: "alice", Now: now, Result: "invalid"},
		{Name: "signed: tampered", Keys: ring, Mode: "signed", Binding: "subject", Wire: tamper(sS), Subject: "alice", Now: now, Result: "invalid"},
		{Name: "signed: wire given to an encrypted codec", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: sS, Subject: "alice", Now: now, Result: "invalid"},
		{Name: "signed: unused trailing bits set in mac", Keys: ring, Mode: "signed", Binding: "subject", Wire: setUnusedBits(sS), Subject: "alice", Now: now, Result: "invalid"},
		{Name: "encrypted: unused trailing bits set", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: setUnusedBits(sE), Subject: "alice", Now: now, Result: "invalid"},
		{Name: "signed: padding in mac", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS + "=", Subject: "alice", Now: now, Result: "invalid"},
		{Name: "encrypted: ok", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: sE, Subject: "alice", Tool: target, Now: now, Result: "ok", State: str(`{"step":2}`)},
		{Name: "encrypted: at exp", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: sE, Subject: "alice", Now: exp, Result: "ok", State: str(`{"step":2}`)},
		{Name: "encrypted: exp + 1 s", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: sE, Subject: "alice", Now: exp + 1, Result: "expired"},
		{Name: "encrypted: wrong subject (GCM open fails)", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: sE, Subject: "mallory", Now: now, Result: "invalid"},
		{Name: "encrypted: subject and tool ok", Keys: ring, Mode: "encrypted", Binding: "subject_and_tool", Wire: eT, Subject: "alice", Tool: target, Now: now, Result: "ok", State: str(tricky)},
		{Name: "encrypted: wrong tool", Keys: ring, Mode: "encrypted", Binding: "subject_and_tool", Wire: eT, Subject: "alice", Tool: MCPTarget("tools/call", "delete"), Now: now, Result: "invalid"},
		{Name: "signed: anonymous state, its own tool", Keys: ring, Mode: "signed", Binding: "subject_and_tool", Wire: wires["signed, subject and tool, empty subject"], Subject: "", Tool: target, Now: now, Result: "ok", State: str(`{"anon":1}`)},
		{Name: "signed: anonymous state, another tool", Keys: ring, Mode: "signed", Binding: "subject_and_tool", Wire: wires["signed, subject and tool, empty subject"], Subject: "", Tool: MCPTarget("tools/call", "delete"), Now: now, Result: "invalid"},
		{Name: "signed: anonymous state, a subject", Keys: ring, Mode: "signed", Binding: "subject_and_tool", Wire: wires["signed, subject and tool, empty subject"], Subject: "alice", Tool: target, Now: now, Result: "invalid"},
		{Name: "encrypted: anonymous state, its own tool", Keys: ring, Mode: "encrypted", Binding: "subject_and_tool", Wire: wires["encrypted, subject and tool, empty subject"], Subject: "", Tool: target, Now: now, Result: "ok", State: str(`{"anon":1}`)},
		{Name: "encrypted: anonymous state, another tool", Keys: ring, Mode: "encrypted", Binding: "subject_and_tool", Wire: wires["encrypted, subject and tool, empty subject"], Subject: "", Tool: MCPTarget("tools/call", "delete"), Now: now, Result: "invalid"},
		{Name: "encrypted: unbound", Keys: ring, Mode: "encrypted", Binding: "none", Wire: wires["encrypted, unbound, empty state"], Subject: "anyone", Now: now, Result: "ok", State: str("")},
		{Name: "encrypted: previous key in ring", Keys: rotated, Mode: "encrypted", Binding: "subject", Wire: wires["encrypted, previous key"], Subject: "alice", Now: now, Result: "ok", State: str(`{"step":3}`)},
		{Name: "encrypted: previous key not in ring", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: wires["encrypted, previous key"], Subject: "alice", Now: now, Result: "invalid"},
		{Name: "encrypted: tampered", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: tamper(sE), Subject: "alice", Now: now, Result: "invalid"},
		{Name: "encrypted: wire given to a signed codec", Keys: ring, Mode: "signed", Binding: "subject", Wire: sE, Subject: "alice", Now: now, Result: "invalid"},
		{Name: "encrypted: truncated below nonce and tag", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: sE[:len(encryptedPrefix)+30], Subject: "alice", Now: now, Result: "invalid"},
		{Name: "signed: line feed in payload (encoding/base64 would skip it)", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS[:10] + "\n" + sS[10:], Subject: "alice", Now: now, Result: "invalid"},
		{Name: "signed: CR LF in mac", Keys: ring, Mode: "signed", Binding: "subject", Wire: sS[:len(sS)-10] + "\r\n" + sS[len(sS)-10:], Subject: "alice", Now: now, Result: "invalid"},
		{Name: "encrypted: line feed inside", Keys: ring, Mode: "encrypted", Binding: "subject", Wire: sE[:10] + "\n" + sE[10:], Subject: "alice", Now: now, Result: "invalid"},
		{Name: "empty", Keys: ring, Mode: "signed", Binding: "subject", Wire: "", Subject: "alice", Now: now, Result: "invalid"},
		{Name: "unknown prefix", Keys: ring, Mode: "signed", Binding: "subject", Wire: "v2." + sS[len(signedPrefix):], Subject: "alice", Now: now, Result: "invalid"},
	}
	checkStateDecode(t, f)
	return f
}

func checkStateDecode(t *testing.T, f stateFile) {
	t.Helper()
	for _, v := range f.Decode {
		keys := make([][]byte, len(v.Keys))
		for i, k := range v.Keys {
			keys[i] = vecHex(t, k)
		}
		c := vecCodec(t, parseMode(t, v.Mode), parseBinding(t, v.Binding), time.Unix(v.Now, 0), keys...)
		got, err := c.Decode(v.Wire, v.Subject, v.Tool)
		if r := resultOf(err); r != v.Result {
			t.Errorf("decode %q: result %s (%v), want %s", v.Name, r, err, v.Result)
			continue
		}
		if v.Result == "ok" && (v.State == nil || got != *v.State) {
			t.Errorf("decode %q: state %q, want %v", v.Name, got, v.State)
		}
		if v.Result != "ok" && got != "" {
			t.Errorf("decode %q: rejected but returned state %q", v.Name, got)
		}
	}
}

func checkStateVectors(t *testing.T) {
	var f stateFile
	readVectors(t, "request_state.json", &f)
	key := vecHex(t, f.Key)
	for label, want := range map[string]string{stateAESLabel: f.AESKey, stateBindLabel: f.BindKey, statePayloadLabel: f.PayloadKey} {
		if got := hex.EncodeToString(subkey(key, label)); got != want {
			t.Errorf("subkey %q = %s, want %s", label, got, want)
		}
	}
	if len(f.BindTags) == 0 || len(f.Encode) == 0 || len(f.Decode) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range f.BindTags {
		c := vecCodec(t, Signed, parseBinding(t, v.Binding), vecNow, key)
		if got := string(c.bindTag(nil, 0, v.Subject, v.Tool)); got != v.Tag {
			t.Errorf("bind tag %s %q %q = %s, want %s", v.Binding, v.Subject, v.Tool, got, v.Tag)
		}
		if got := hex.EncodeToString(vecHMAC(vecHex(t, f.BindKey), vecHex(t, v.Material))); got != v.Tag {
			t.Errorf("HMAC(bind key, material %s) = %s, want %s", v.Material, got, v.Tag)
		}
	}
	for _, v := range f.Encode {
		checkEncodeVector(t, v)
	}
	checkStateDecode(t, f)
}

// ---------------------------------------------------------------------------
// JCS

// jcsExpectations are hand-written (the RFC 8785 ones copied from the RFC);
// generation fails if CanonicalJSON disagrees with any of them.
var jcsExpectations = []struct{ name, input, canonical string }{
	{"RFC 8785 §3.2.2 sample with its inexact 333333333.33333329 written exactly",
		"{\n  \"numbers\": [333333333.3333333, 1E30, 4.50,\n              2e-3, 0.000000000000000000000000001],\n  \"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n  \"literals\": [null, true, false]\n}",
		`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
	{"RFC 8785 §3.2.3 sorting by UTF-16 code units",
		"{\n  \"\\u20ac\": \"Euro Sign\",\n  \"\\r\": \"Carriage Return\",\n  \"\\ufb33\": \"Hebrew Letter Dalet With Dagesh\",\n  \"1\": \"One\",\n  \"\\ud83d\\ude00\": \"Emoji: Grinning Face\",\n  \"\\u0080\": \"Control\",\n  \"\\u00f6\": \"Latin Small Letter O With Diaeresis\"\n}",
		"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
	{"empty object", " { } ", `{}`},
	{"empty array", "[ ]", `[]`},
	{"top-level string with mandatory escapes", `"\u0000\b\t\n\f\r\u001F\u007f\"\\\/"`, "\"\\u0000\\b\\t\\n\\f\\r\\u001f\u007f\\\"\\\\/\""},
	{"unnecessary escapes removed", `"\u00e9\u2028<>&"`, "\"é\u2028<>&\""},
	{"nested key order", `{"b":{"z":1,"a":[3,{"y":null,"x":true}]},"a":false}`, `{"a":false,"b":{"a":[3,{"x":true,"y":null}],"z":1}}`},
	{"number spellings", `[1.0, 1e2, 1E+2, -0, -0.0, 0.1, 100e-2, 1e21, 1e20, 1e-6, 1e-7, 123456789012345690000000, 0.00e999, 4.50]`,
		`[1,100,100,0,0,0.1,1,1e+21,100000000000000000000,0.000001,1e-7,1.2345678901234569e+23,0,4.5]`},
	{"integers a double holds exactly, beyond 2^53", `[9007199254740992, 1234567890123456800, -1.2345678901234568e18, 1e22]`,
		`[9007199254740992,1234567890123456800,-1234567890123456800,1e+22]`},
	{"long spellings of short decimals", `[0.10000000000000000000000, 12.50e-1, 0.0000050e+6, 1000000000000000000000e-21]`, `[0.1,1.25,5,1]`},
	{"key order ignores value", `{"a":1,"A":2,"aa":3,"":4}`, `{"":4,"A":2,"a":1,"aa":3}`},
	{"white space everywhere", " \t\r\n[ \n1 ,\t\"x\" , { \"k\" : [ ] } ]\n", `[1,"x",{"k":[]}]`},
	{"depth 256 (MaxJSONDepth)", strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth), strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth)},
}

// rfc8785AppendixB is RFC 8785 Appendix B: IEEE 754 bit patterns and their
// canonical text (NaN and Infinity cannot be written in JSON).
var rfc8785AppendixB = []struct {
	bits uint64
	text string
}{
	{0x0000000000000000, "0"},
	{0x8000000000000000, "0"},
	{0x0000000000000001, "5e-324"},
	{0x8000000000000001, "-5e-324"},
	{0x7fefffffffffffff, "1.7976931348623157e+308"},
	{0xffefffffffffffff, "-1.7976931348623157e+308"},
	{0x4340000000000000, "9007199254740992"},
	{0xc340000000000000, "-9007199254740992"},
	{0x4430000000000000, "295147905179352830000"},
	{0x44b52d02c7e14af5, "9.999999999999997e+22"},
	{0x44b52d02c7e14af6, "1e+23"},
	{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
	{0x444b1ae4d6e2ef4e, "999999999999999700000"},
	{0x444b1ae4d6e2ef4f, "999999999999999900000"},
	{0x444b1ae4d6e2ef50, "1e+21"},
	{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	{0x3eb0c6f7a0b5ed8d, "0.000001"},
	{0x41b3de4355555553, "333333333.3333332"},
	{0x41b3de4355555554, "333333333.33333325"},
	{0x41b3de4355555555, "333333333.3333333"},
	{0x41b3de4355555556, "333333333.3333334"},
	{0x41b3de4355555557, "333333333.33333343"},
	{0xbecbf647612f3696, "-0.0000033333333333333333"},
	{0x43143ff3c1cb0959, "1424953923781206.2"},
}

// TestCanonicalJSONRFC8785Numbers feeds RFC 8785 Appendix B through
// CanonicalJSON.
func TestCanonicalJSONRFC8785Numbers(t *testing.T) {
	// RFC 8785 Appendix B: IEEE 754 bit patterns and their serialization.
	for _, c := range rfc8785AppendixB {
		f := math.Float64frombits(c.bits)
		// Feed the shortest Go spelling through the parser.
		in, _ := json.Marshal(f)
		got, err := CanonicalJSON(in)
		if err != nil {
			t.Fatalf("%016x: %v", c.bits, err)
		}
		if string(got) != c.text {
			t.Errorf("%016x: got %s, want %s", c.bits, got, c.text)
		}
	}
}

// jcsInvalid is text CanonicalJSON refuses; Reason is what [Reason] says.
var jcsInvalid = []jcsBadVector{
	{Name: "duplicate key", Input: `{"a":1,"a":2}`, Reason: "duplicate object member name"},
	{Name: "duplicate key after unescaping", Input: `{"a":1,"\u0061":2}`, Reason: "duplicate object member name"},
	{Name: "nested duplicate key", Input: `[{"x":{"k":1,"k":1}}]`, Reason: "duplicate object member name"},
	{Name: "lone high surrogate", Input: `"\ud800"`, Reason: "lone surrogate escape"},
	{Name: "lone low surrogate", Input: `"\udc00x"`, Reason: "lone surrogate escape"},
	{Name: "reversed surrogate pair", Input: `"\ude00\ud83d"`, Reason: "lone surrogate escape"},
	{Name: "invalid UTF-8", InputHex: "22ff22", Reason: "invalid UTF-8"},
	{Name: "invalid UTF-8 in a member name", InputHex: "7b227265706f7274fe2e706466223a317d", Reason: "invalid UTF-8"},
	{Name: "UTF-8 encoded surrogate", InputHex: "22eda08022", Reason: "invalid UTF-8"},
	{Name: "number over double range", Input: `1e309`, Reason: "number outside double range"},
	{Name: "negative number over double range", Input: `[-1e400]`, Reason: "number outside double range"},
	{Name: "RFC 8785 §3.2.2 sample (333333333.33333329 is not a double)",
		Input:  "{\n  \"numbers\": [333333333.33333329, 1E30, 4.50,\n              2e-3, 0.000000000000000000000000001],\n  \"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n  \"literals\": [null, true, false]\n}",
		Reason: jcsInexact},
	{Name: "integer 2^53+1", Input: `9007199254740993`, Reason: jcsInexact},
	{Name: "integer 1234567890123456789", Input: `{"id":1234567890123456789}`, Reason: jcsInexact},
	{Name: "integer 2^60 (exact as a double, printed as 1152921504606847000)", Input: `1152921504606846976`, Reason: jcsInexact},
	{Name: "int64 maximum", Input: `9223372036854775807`, Reason: jcsInexact},
	{Name: "decimal longer than a double", Input: `0.10000000000000000001`, Reason: jcsInexact},
	{Name: "17 significant digits, not the shortest", Input: `0.10000000000000001`, Reason: jcsInexact},
	{Name: "24 significant digits", Input: `123456789012345678901234`, Reason: jcsInexact},
	{Name: "underflow to zero", Input: `1e-400`, Reason: jcsInexact},
	{Name: "below the smallest subnormal", Input: `[-3e-324]`, Reason: jcsInexact},
	{Name: "depth 257", Input: strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1), Reason: "nested deeper than MaxJSONDepth"},
	{Name: "empty input", Input: "", Reason: "not JSON"},
	{Name: "trailing comma", Input: `[1,]`, Reason: "not JSON"},
	{Name: "leading zero", Input: `01`, Reason: "not JSON"},
	{Name: "NaN", Input: `NaN`, Reason: "not JSON"},
	{Name: "single quotes", Input: `{'a':1}`, Reason: "not JSON"},
	{Name: "trailing garbage", Input: `{} x`, Reason: "not JSON"},
	{Name: "raw control character in string", Input: "\"a\tb\"", Reason: "not JSON"},
	{Name: "two documents", Input: `1 2`, Reason: "not JSON"},
}

const jcsInexact = "number whose canonical form has another value (send it as a string)"

func genJCSVectors(t *testing.T) jcsFile {
	f := jcsFile{Comment: "RFC 8785 canonical forms; fingerprint = SHA-256(canonical); see README.md"}
	add := func(name, input, want string) {
		got, err := CanonicalJSON([]byte(input))
		if err != nil || string(got) != want {
			t.Fatalf("%s: CanonicalJSON = %q, %v; want %q", name, got, err, want)
		}
		fp := sha256.Sum256(got)
		f.Valid = append(f.Valid, jcsValidVector{name, input, want, hex.EncodeToString(fp[:])})
	}
	for _, e := range jcsExpectations {
		add(e.name, e.input, e.canonical)
	}
	for _, b := range rfc8785AppendixB {
		// The shortest round-trip digits in Go's exponent form, a spelling
		// of exactly the double's canonical value.
		input := strconv.FormatFloat(math.Float64frombits(b.bits), 'e', -1, 64)
		add("RFC 8785 Appendix B 0x"+strconv.FormatUint(b.bits, 16), input, b.text)
	}
	for _, v := range jcsInvalid {
		if _, err := CanonicalJSON(v.bytes(t)); !errors.Is(err, ErrArgsInvalid) || reasonText(err) != v.Reason {
			t.Fatalf("%s: CanonicalJSON error %v, want ErrArgsInvalid: %s", v.Name, err, v.Reason)
		}
	}
	f.Invalid = jcsInvalid
	return f
}

func checkJCSVectors(t *testing.T) {
	var f jcsFile
	readVectors(t, "jcs.json", &f)
	if len(f.Valid) == 0 || len(f.Invalid) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range f.Valid {
		got, err := CanonicalJSON([]byte(v.Input))
		if err != nil || string(got) != v.Canonical {
			t.Errorf("%s: CanonicalJSON = %q, %v; want %q", v.Name, got, err, v.Canonical)
		}
		fp, err := ArgsFingerprint([]byte(v.Input))
		if err != nil || hex.EncodeToString(fp[:]) != v.Fingerprint {
			t.Errorf("%s: ArgsFingerprint = %x, %v; want %s", v.Name, fp, err, v.Fingerprint)
		}
		if sum := sha256.Sum256([]byte(v.Canonical)); hex.EncodeToString(sum[:]) != v.Fingerprint {
			t.Errorf("%s: SHA-256 of canonical form is %x, vector says %s", v.Name, sum, v.Fingerprint)
		}
	}
	for _, v := range f.Invalid {
		if got, err := CanonicalJSON(v.bytes(t)); !errors.Is(err, ErrArgsInvalid) || got != nil || reasonText(err) != v.Reason {
			t.Errorf("%s: CanonicalJSON = %q, %v; want ErrArgsInvalid: %s", v.Name, got, err, v.Reason)
		}
		if _, err := ArgsFingerprint(json.RawMessage(v.bytes(t))); !errors.Is(err, ErrArgsInvalid) {
			t.Errorf("%s: ArgsFingerprint error %v, want ErrArgsInvalid", v.Name, err)
		}
	}
}

// ---------------------------------------------------------------------------
// Request state with an Audience (ctoken's extension; the reference has none)

type stateAudienceFile struct {
	Comment         string                `json:"comment"`
	Key             string                `json:"key_hex"`
	AudienceBindKey string                `json:"audience_bind_key_hex"`
	TTLSeconds      int64                 `json:"ttl_seconds"`
	Vectors         []stateAudienceVector `json:"vectors"`
}

type stateAudienceVector struct {
	Name     string `json:"name"`
	Audience string `json:"audience"`
	Mode     string `json:"mode"`
	Binding  string `json:"binding"`
	Subject  string `json:"subject"`
	Tool     string `json:"tool"`
	State    string `json:"state"`
	Material string `json:"material_hex"`
	BindTag  string `json:"bind_tag"`
	Now      int64  `json:"now_unix"`
	Payload  string `json:"payload"`
	Nonce    string `json:"nonce_hex,omitempty"`
	Wire     string `json:"wire"`
	// OtherAudience is an audience under which Wire must not open.
	OtherAudience string `json:"other_audience"`
}

func vecAudienceCodec(t testing.TB, v stateAudienceVector, aud string, key []byte) *RequestStateCodec {
	t.Helper()
	c, err := NewRequestStateCodec(RequestStateSecurity{
		Keys: vecKeyring(t, key), Mode: parseMode(t, v.Mode), Binding: parseBinding(t, v.Binding),
		Audience: aud, Now: fixedClock(time.Unix(v.Now, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func genStateAudienceVectors(t *testing.T) stateAudienceFile {
	f := stateAudienceFile{
		Comment: "request state with RequestStateSecurity.Audience: bind_tag = hex(HMAC-SHA256(audience_bind_key, audience || 0x00 || material)), " +
			"audience_bind_key = HKDF-SHA256(key, salt 32 zero bytes, info \"" + stateAudienceBindLabel + "\"); payload and wire as request_state.json; see README.md",
		Key:             hex.EncodeToString(vecKey),
		AudienceBindKey: hex.EncodeToString(subkey(vecKey, stateAudienceBindLabel)),
		TTLSeconds:      int64(defaultStateTTL / time.Second),
	}
	target := MCPTarget("tools/call", "search")
	now := vecNow.Unix()
	exp := now + f.TTLSeconds
	vs := []stateAudienceVector{
		{Name: "signed, subject and tool", Audience: "billing.prod", Mode: "signed", Binding: "subject_and_tool", Subject: "alice", Tool: target, State: `{"step":2}`, OtherAudience: "billing.staging"},
		{Name: "signed, subject", Audience: "billing.prod", Mode: "signed", Binding: "subject", Subject: "alice", Tool: target, State: `{"step":2}`, OtherAudience: ""},
		{Name: "signed, unbound", Audience: "a", Mode: "signed", Binding: "none", State: "", OtherAudience: "b"},
		{Name: "encrypted, subject and tool", Audience: "billing.prod", Mode: "encrypted", Binding: "subject_and_tool", Subject: "alice", Tool: target, State: `{"step":2}`, Nonce: hex.EncodeToString(seqBytes(0x10, gcmNonceSize)), OtherAudience: "billing.staging"},
		{Name: "encrypted, unbound", Audience: "Zoë 😀", Mode: "encrypted", Binding: "none", State: "x", Nonce: hex.EncodeToString(seqBytes(0x20, gcmNonceSize)), OtherAudience: ""},
	}
	for i := range vs {
		v := &vs[i]
		var material string
		switch parseBinding(t, v.Binding) {
		case BindSubject:
			material = v.Subject
		case BindSubjectAndTool:
			material = v.Subject + "\x00" + v.Tool
		}
		material = v.Audience + "\x00" + material
		v.Material = hex.EncodeToString([]byte(material))
		v.BindTag = hex.EncodeToString(vecHMAC(vecHKDF(vecKey, stateAudienceBindLabel), []byte(material)))
		v.Now = now
		v.Payload = string(vecStatePayload(v.State, exp, v.BindTag))
		v.Wire = vecSignedWire(vecKey, []byte(v.Payload))
		if v.Mode == "encrypted" {
			v.Wire = vecEncryptedWire(t, vecKey, vecHex(t, v.Nonce), []byte(v.Payload), v.BindTag)
		}
	}
	f.Vectors = vs
	checkStateAudience(t, f)
	return f
}

func checkStateAudienceVectors(t *testing.T) {
	var f stateAudienceFile
	readVectors(t, "request_state_audience.json", &f)
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	checkStateAudience(t, f)
}

// checkStateAudience holds the codec to f: the audience bind subkey, each
// vector's bind tag (from its material, and from the codec), its wire
// (Encode's, for a signed state; the reference GCM's opening of Encode's
// output, for an encrypted one), and that the wire opens under its
// audience only.
func checkStateAudience(t *testing.T, f stateAudienceFile) {
	t.Helper()
	key := vecHex(t, f.Key)
	if got := hex.EncodeToString(subkey(key, stateAudienceBindLabel)); got != f.AudienceBindKey {
		t.Fatalf("audience bind subkey %s, want %s", got, f.AudienceBindKey)
	}
	for _, v := range f.Vectors {
		c := vecAudienceCodec(t, v, v.Audience, key)
		if got := hex.EncodeToString(vecHMAC(vecHex(t, f.AudienceBindKey), vecHex(t, v.Material))); got != v.BindTag {
			t.Errorf("%s: HMAC(audience bind key, material) = %s, want %s", v.Name, got, v.BindTag)
		}
		if got := string(c.bindTag(nil, 0, v.Subject, v.Tool)); got != v.BindTag {
			t.Errorf("%s: codec bind tag %s, want %s", v.Name, got, v.BindTag)
		}
		wire, err := c.Encode(v.State, v.Subject, v.Tool)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if v.Mode == "encrypted" {
			if pt, _, err := vecOpenEncrypted(t, key, wire, v.BindTag); err != nil || string(pt) != v.Payload {
				t.Errorf("%s: reference GCM opens Encode's output to %q, %v; want %s", v.Name, pt, err, v.Payload)
			}
		} else if wire != v.Wire {
			t.Errorf("%s: Encode gives %s, want %s", v.Name, wire, v.Wire)
		}
		if s, err := c.Decode(v.Wire, v.Subject, v.Tool); err != nil || s != v.State {
			t.Errorf("%s: the vector's wire decodes to %q, %v", v.Name, s, err)
		}
		other := vecAudienceCodec(t, v, v.OtherAudience, key)
		if s, err := other.Decode(v.Wire, v.Subject, v.Tool); !errors.Is(err, ErrStateInvalid) || s != "" {
			t.Errorf("%s: opens under audience %q: %q, %v", v.Name, v.OtherAudience, s, err)
		}
	}
}
