package ctoken

// Fuzz targets for every decoder. Seeds: the f.Add calls below plus the
// corpora in testdata/fuzz/<FuzzName>/, written from the known-answer vectors
// by `go test -run TestVectors -update-vectors` (see writeFuzzSeedCorpora).
// Without -fuzz, `go test` runs every seed as a regression test.
//
// Common properties: no panic; every error matches exactly one documented
// sentinel and its text is fixed (never derived from the input); anything
// accepted decodes to exactly what was issued, and re-issuing it reproduces
// the identical token, so no second encoding of a token is accepted.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/cursorwire"
)

// checkFuzzReasonError fails unless err matches exactly one of sentinels and its
// text is that sentinel's text plus a fixed, non-empty reason.
func checkFuzzReasonError(t *testing.T, err error, sentinels ...error) {
	t.Helper()
	var match error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			if match != nil {
				t.Fatalf("error %q matches both %v and %v", err, match, s)
			}
			match = s
		}
	}
	if match == nil {
		t.Fatalf("error %q matches none of the documented sentinels %v", err, sentinels)
	}
	r := reasonText(err)
	if r == "" || err.Error() != match.Error()+": "+r {
		t.Fatalf("error text %q is not the sentinel plus a fixed reason (%q)", err, r)
	}
}

// ---------------------------------------------------------------------------
// Cursors

var fuzzScopeSeeds = [][2]string{{"search", "user:42"}, {"list_files", "alice@example.com"}, {"t", ""}, {"t", "c"}}

func fuzzCursorIssuer(t testing.TB) *CursorIssuer {
	return vecIssuer(t, vecNow, vecSession, vecKey)
}

// checkCursorVerify verifies cursor at vecNow against (tool, caller) and
// checks the common properties.
func checkFuzzCursor(t *testing.T, iss *CursorIssuer, cursor, tool, caller string) {
	p, err := iss.Verify(cursor, CursorScope{ToolID: tool, CallerID: caller})
	if tool == "" {
		if !errors.Is(err, ErrConfig) || !reflect.DeepEqual(p, CursorPayload{}) {
			t.Fatalf("an empty ToolID = %v, %+v; want ErrConfig", err, p)
		}
		return
	}
	if err != nil {
		checkFuzzReasonError(t, err, ErrCursorInvalid, ErrCursorExpired)
		if !reflect.DeepEqual(p, CursorPayload{}) {
			t.Fatalf("rejected cursor returned a payload: %+v", p)
		}
		return
	}
	if p.ToolID != tool || p.CallerID != caller {
		t.Fatalf("accepted cursor for %q/%q as %q/%q", tool, caller, p.ToolID, p.CallerID)
	}
	if len(p.State) > MaxOpaqueStateBytes {
		t.Fatalf("accepted %d bytes of state", len(p.State))
	}
	age := vecNow.Sub(p.IssuedAt)
	if age > DefaultCursorTTL || age < -maxFutureSkew {
		t.Fatalf("accepted a cursor issued at %v, now %v", p.IssuedAt, vecNow)
	}
	if raw, _ := b64.DecodeString(cursor); len(raw) > 2 && raw[2] == cursorwire.VersionSealed {
		// A sealed cursor (random nonce) is held to the reference: its
		// header, and the canonical padded plaintext under its nonce.
		hdr := vecSealedHeader(vecKeyID(vecKey), p.IssuedAt.Unix(), vecSessionTag(vecSession))
		if len(raw) < len(hdr)+24 || !bytes.Equal(raw[:len(hdr)], hdr) {
			t.Fatalf("accepted a sealed cursor with header %x, want %x", raw, hdr)
		}
		nonce := raw[len(hdr) : len(hdr)+24]
		kx := vecXAESKey(t, vecHKDF(vecKey, vecCursorSealLabel), nonce[:12])
		pt, err := newRefGCM(t, kx).open(nonce[12:], raw[len(hdr)+24:], append(hdr, vecScope(tool, caller, nil)...))
		if want := vecPad(vecSealedInner(p.Page, p.State)); err != nil || !bytes.Equal(pt, want) {
			t.Fatalf("accepted a sealed cursor whose plaintext is %x (%v), want %x", pt, err, want)
		}
		return
	}
	again, err := vecIssuer(t, p.IssuedAt, vecSession, vecKey).Issue(p)
	if err != nil {
		t.Fatalf("re-issuing an accepted payload: %v", err)
	}
	if again != cursor {
		t.Fatalf("accepted a second encoding:\n got  %q\n issue %q", cursor, again)
	}
}

func FuzzCursorVerify(f *testing.F) {
	iss := fuzzCursorIssuer(f)
	for _, s := range fuzzScopeSeeds {
		tok, err := iss.Issue(CursorPayload{CursorScope: CursorScope{ToolID: s[0], CallerID: s[1]}, Page: 3, State: []byte("x")})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok, s[0], s[1])
		f.Add(tok[:len(tok)-1], s[0], s[1])
		f.Add(tok+"A", s[0], s[1])
	}
	f.Add("", "", "")
	f.Add(strings.Repeat("A", MaxCursorBytes), "", "")
	f.Add("!!!!", "", "")
	f.Fuzz(func(t *testing.T, cursor, tool, caller string) {
		checkFuzzCursor(t, iss, cursor, tool, caller)
	})
}

// sealCursorFuzz is header || nonce || XAES-256-GCM(seal subkey of key,
// nonce, inner, aad) with a fixed all-zero nonce, written out: the
// per-message key of the independent XAES (cursor_vectors_test.go) and the
// reference GCM (envelope_test.go, checked against crypto/cipher there),
// which takes a fixed nonce under GODEBUG=fips140=only too.
func sealCursorFuzz(t testing.TB, key, header, inner, aad []byte) string {
	nonce := make([]byte, 24)
	sealKey := vecHKDF(key, vecCursorSealLabel)
	sealed := newRefGCM(t, vecXAESKey(t, sealKey, nonce[:12])).seal(nonce[12:], inner, aad)
	return b64.EncodeToString(append(append(append([]byte(nil), header...), nonce...), sealed...))
}

// FuzzCursorVerifySigned MACs the fuzzed body, with its key id (raw[5:9])
// set to the key's, under the cursor MAC subkey and the fuzzed scope, so
// the strict CBOR decoder and every check after the MAC see hostile
// authenticated input.
func FuzzCursorVerifySigned(f *testing.F) {
	iss := fuzzCursorIssuer(f)
	now := vecNow.Unix()
	kid, tag := vecKeyID(vecKey), vecSessionTag(vecSession)
	f.Add(vecSignedBody(kid, 1, now, tag, nil), "t", "c")
	f.Add(vecSignedBody(kid, 2, now-10, tag, []byte("state")), "search", "user:42")
	f.Add(vecSignedBody(kid, 2, now, tag, seqBytes(0, MaxOpaqueStateBytes)), "search", "")
	f.Add(vecSignedBody(kid, 2, now, tag, seqBytes(0, MaxOpaqueStateBytes+1)), "search", "")
	f.Add(vecSignedBody(kid, 0, now+3600, tag, nil), "t", "c")
	f.Add(vecSignedBody(kid, 0, now, tag[:7], nil), "t", "c")
	f.Add(vecSignedBody(kid, 0, now, vecSessionTag([]byte("other")), nil), "t", "c")
	f.Add([]byte{0xa0}, "", "")
	f.Add([]byte{0xbf, 0xff}, "t", "")
	for _, h := range hostileCursorBodies() {
		f.Add(h.body, "t", "c")
	}
	f.Fuzz(func(t *testing.T, body []byte, tool, caller string) {
		if len(body) >= 9 {
			body = append([]byte(nil), body...)
			copy(body[5:9], kid)
		}
		cursor := vecSignCursor(vecKey, body, vecScope(tool, caller, nil))
		if len(cursor) > MaxCursorBytes {
			return
		}
		checkFuzzCursor(t, iss, cursor, tool, caller)
	})
}

// FuzzCursorVerifySealed seals the fuzzed plaintext under a header naming
// the key (its id, the fuzzed issue time, the session tag) with the sealed
// cursor subkey and header || scope as additional data, so the decoder of
// the inner map, the padding check and every check after the open see
// hostile authenticated input; a non-empty token is verified as it is.
// Accepted plaintexts are exactly the canonical padded encoding of what
// Verify returns.
func FuzzCursorVerifySealed(f *testing.F) {
	iss := newTestIssuer(f, CursorConfig{Keys: vecKeyring(f, vecKey), Session: vecSession, Now: fixedClock(vecNow), Seal: true})
	now := vecNow.Unix()
	pad := vecPad
	f.Add(pad([]byte{0xa1, 0x05, 0x03}), now, "t", "c", "")
	f.Add(pad([]byte{0xa2, 0x05, 0x00, 0x08, 0x41, 0x78}), now-10, "search", "user:42", "")
	f.Add(pad(vecSealedInner(math.MaxUint32, seqBytes(0, MaxOpaqueStateBytes))), now, "t", "", "")
	f.Add(pad(vecSealedInner(1, seqBytes(0, MaxOpaqueStateBytes+1))), now, "t", "", "")
	f.Add([]byte{0xa1, 0x05, 0x03}, now, "t", "c", "")
	f.Add(append(pad([]byte{0xa1, 0x05, 0x03})[:63], 1), now, "t", "c", "")
	f.Add(append(pad([]byte{0xa1, 0x05, 0x03}), make([]byte, 64)...), now, "t", "c", "")
	f.Add(pad([]byte{0xa2, 0x05, 0x00, 0x08, 0x40}), now, "t", "c", "")
	f.Add(pad([]byte{0xa1, 0x09, 0x00}), now+3600, "t", "", "")
	for _, s := range fuzzScopeSeeds {
		tok, err := iss.Issue(CursorPayload{CursorScope: CursorScope{ToolID: s[0], CallerID: s[1]}, Page: 3, State: []byte("x")})
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(nil), now, s[0], s[1], tok)
		f.Add([]byte(nil), now, s[0], s[1], tok[:len(tok)-1])
	}
	kid, tag := vecKeyID(vecKey), vecSessionTag(vecSession)
	f.Fuzz(func(t *testing.T, inner []byte, issued int64, tool, caller, token string) {
		scope := CursorScope{ToolID: tool, CallerID: caller}
		built := token == ""
		if built {
			header := vecSealedHeader(kid, issued, tag)
			token = sealCursorFuzz(t, vecKey, header, inner, append(header, vecScope(tool, caller, nil)...))
			if len(token) > MaxCursorBytes {
				return
			}
		}
		p, err := iss.Verify(token, scope)
		if tool == "" {
			if !errors.Is(err, ErrConfig) || !reflect.DeepEqual(p, CursorPayload{}) {
				t.Fatalf("an empty ToolID = %v, %+v; want ErrConfig", err, p)
			}
			return
		}
		if err != nil {
			checkFuzzReasonError(t, err, ErrCursorInvalid, ErrCursorExpired)
			if !reflect.DeepEqual(p, CursorPayload{}) {
				t.Fatalf("rejected cursor returned a payload: %+v", p)
			}
			return
		}
		if p.ToolID != tool || p.CallerID != caller || len(p.State) > MaxOpaqueStateBytes {
			t.Fatalf("accepted %+v for %q/%q", p, tool, caller)
		}
		if age := vecNow.Sub(p.IssuedAt); age > DefaultCursorTTL || age < -maxFutureSkew {
			t.Fatalf("accepted a cursor issued at %v, now %v", p.IssuedAt, vecNow)
		}
		if built && !bytes.Equal(inner, pad(vecSealedInner(p.Page, p.State))) {
			t.Fatalf("accepted plaintext %x, the canonical one of what it returned is %x", inner, pad(vecSealedInner(p.Page, p.State)))
		}
	})
}

// fuzzState is an application's typed cursor state.
type fuzzState struct {
	Offset uint64   `cbor:"1,keyasint"`
	After  string   `cbor:"2,keyasint,omitempty"`
	Seen   []int32  `cbor:"3,keyasint,omitempty"`
	Extra  []byte   `cbor:"4,keyasint,omitempty"`
	Ratio  *float32 `cbor:"5,keyasint,omitempty"`
}

// fuzzStateSeeds are typed states as IssueState encodes them.
func fuzzStateSeeds(t testing.TB) [][]byte {
	half := float32(0.5)
	var out [][]byte
	for _, v := range []any{
		fuzzState{Offset: 42},
		fuzzState{Offset: 1 << 40, After: "file-0042", Seen: []int32{-1, 0, 7}, Extra: []byte{0, 1}, Ratio: &half},
		map[string]any{"k": []any{uint64(1), "two", []byte{3}}},
		[]any{nil, true, -1.5},
	} {
		b, err := stateEncMode.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzVerifyState puts the fuzzed bytes in the opaque state of an authentic
// cursor, so VerifyState's typed decoder sees hostile CBOR. Accepted typed
// states must survive IssueState and VerifyState unchanged.
func FuzzVerifyState(f *testing.F) {
	iss := fuzzCursorIssuer(f)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	for _, b := range fuzzStateSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte{0x9f, 0x9f, 0xff, 0xff})
	f.Add([]byte{0xc1, 0x1a, 0x69, 0x57, 0x35, 0xa5})
	f.Fuzz(func(t *testing.T, state []byte) {
		cursor, err := iss.Issue(CursorPayload{CursorScope: scope, State: state})
		if err != nil {
			if len(state) > MaxOpaqueStateBytes && errors.Is(err, ErrOpaqueStateTooLarge) {
				return
			}
			t.Fatalf("Issue: %v", err)
		}
		if v, p, err := VerifyState[any](iss, cursor, scope); err != nil {
			checkFuzzReasonError(t, err, ErrCursorInvalid)
			if v != nil || p.State != nil {
				t.Fatalf("rejected state returned %v, %+v", v, p)
			}
		} else if !bytes.Equal(p.State, state) && len(state) > 0 {
			t.Fatalf("state %x came back as %x", state, p.State)
		}
		v, _, err := VerifyState[fuzzState](iss, cursor, scope)
		if err != nil {
			checkFuzzReasonError(t, err, ErrCursorInvalid)
			if !reflect.DeepEqual(v, fuzzState{}) {
				t.Fatalf("rejected state returned %+v", v)
			}
			return
		}
		again, err := IssueState(iss, scope, 0, v)
		if err != nil {
			t.Fatalf("IssueState of an accepted state: %v", err)
		}
		w, _, err := VerifyState[fuzzState](iss, again, scope)
		// Compared by encoding: nil and empty slices are the same state.
		vb, _ := stateEncMode.Marshal(v)
		wb, _ := stateEncMode.Marshal(w)
		if err != nil || !bytes.Equal(vb, wb) {
			t.Fatalf("typed state %+v came back as %+v, %v", v, w, err)
		}
	})
}

// ---------------------------------------------------------------------------
// Request state

func fuzzCodecs(t testing.TB) map[[2]uint8]*RequestStateCodec {
	m := map[[2]uint8]*RequestStateCodec{}
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		for _, b := range []RequestStateBinding{BindSubject, BindSubjectAndTool, BindNone} {
			m[[2]uint8{uint8(mode), uint8(b)}] = vecCodec(t, mode, b, vecNow, vecKey)
		}
	}
	return m
}

// checkFuzzState decodes wire and checks the common properties.
func checkFuzzState(t *testing.T, c *RequestStateCodec, mode RequestStateMode, binding RequestStateBinding, wire, subject, tool string) {
	s, err := c.Decode(wire, subject, tool)
	if err != nil {
		checkFuzzReasonError(t, err, ErrStateInvalid, ErrStateExpired)
		if s != "" {
			t.Fatalf("rejected state returned %q", s)
		}
		return
	}
	if !utf8.ValidString(s) {
		t.Fatalf("accepted state is not UTF-8: %q", s)
	}
	// Re-encode at the same clock (and, encrypted, with the same nonce)
	// by the reference construction: every seed was issued at vecNow, and
	// only the key holder can make another token.
	tag := vecBindTag(vecKey, binding, subject, tool)
	payload := vecStatePayload(s, vecNow.Add(defaultStateTTL).Unix(), tag)
	again := vecSignedWire(vecKey, payload)
	if mode == Encrypted {
		_, nonce, err := vecOpenEncrypted(t, vecKey, wire, tag)
		if err != nil {
			t.Fatalf("accepted a state the reference GCM cannot open: %v", err)
		}
		again = vecEncryptedWire(t, vecKey, nonce, payload, tag)
	} else if enc, err := c.Encode(s, subject, tool); err != nil || enc != again {
		t.Fatalf("re-encoding an accepted state: %q, %v; reference %q", enc, err, again)
	}
	if again != wire {
		t.Fatalf("accepted a second encoding:\n got    %q\n encode %q", wire, again)
	}
}

func FuzzStateDecode(f *testing.F) {
	codecs := fuzzCodecs(f)
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		for _, b := range []RequestStateBinding{BindSubject, BindSubjectAndTool, BindNone} {
			w, err := vecCodec(f, mode, b, vecNow, vecKey).Encode(`{"page":2}`, "alice", "tools/call\x00search")
			if err != nil {
				f.Fatal(err)
			}
			f.Add(mode == Encrypted, uint8(b-1), w, "alice", "tools/call\x00search")
			f.Add(mode == Encrypted, uint8(b-1), w[:len(w)-2], "alice", "tools/call\x00search")
		}
	}
	f.Add(false, uint8(0), "", "", "")
	f.Add(true, uint8(0), "v1e.", "", "")
	f.Add(false, uint8(0), "v1..", "", "")
	f.Fuzz(func(t *testing.T, encrypted bool, binding uint8, wire, subject, tool string) {
		mode := Signed
		if encrypted {
			mode = Encrypted
		}
		// binding%3 is the binding's index: 0 BindSubject, 1
		// BindSubjectAndTool, 2 BindNone (the corpus predates the unset zero).
		b := RequestStateBinding(binding%3) + 1
		checkFuzzState(t, codecs[[2]uint8{uint8(mode), uint8(b)}], mode, b, wire, subject, tool)
	})
}

// FuzzStatePayload seals the fuzzed payload with the codec's own keys (HMAC
// for signed, AES-GCM with the bind tag as AAD for encrypted), so the payload
// parser sees hostile JSON behind a valid MAC. Accepted payloads must be JSON
// objects that encoding/json reads to the same state.
func FuzzStatePayload(f *testing.F) {
	codecs := fuzzCodecs(f)
	tag := vecBindTag(vecKey, BindSubject, "alice", "")
	exp := strconv.FormatInt(vecNow.Unix()+300, 10)
	f.Add(false, []byte(`{"s":"{\"page\":2}","exp":`+exp+`,"b":"`+tag+`"}`), "alice")
	f.Add(true, []byte(`{"s":"","exp":`+exp+`,"b":"`+tag+`"}`), "alice")
	f.Add(false, []byte(` { "b" : "`+tag+`" , "s" : "\u00e9\ud83d\ude00" , "exp" : `+exp+` } `), "alice")
	f.Add(false, []byte(`{"s":"x","exp":`+exp+`,"b":"`+tag+`","s":"y"}`), "alice")
	f.Add(true, []byte(`{"s":"x","exp":1e3,"b":"`+tag+`"}`), "alice")
	f.Add(false, []byte(`{"s":"x","exp":-0,"b":"`+tag+`"}`), "alice")
	f.Fuzz(func(t *testing.T, encrypted bool, payload []byte, subject string) {
		if len(payload) > 4096 {
			return
		}
		var wire string
		mode := Signed
		if encrypted {
			mode = Encrypted
			nonce := seqBytes(7, gcmNonceSize)
			wire = vecEncryptedWire(t, vecKey, nonce, payload, vecBindTag(vecKey, BindSubject, subject, ""))
		} else {
			wire = vecSignedWire(vecKey, payload)
		}
		c := codecs[[2]uint8{uint8(mode), uint8(BindSubject)}]
		s, err := c.Decode(wire, subject, "")
		if err != nil {
			checkFuzzReasonError(t, err, ErrStateInvalid, ErrStateExpired)
			if s != "" {
				t.Fatalf("rejected state returned %q", s)
			}
			return
		}
		var obj map[string]json.RawMessage
		if !json.Valid(payload) || json.Unmarshal(payload, &obj) != nil || len(obj) != 3 {
			t.Fatalf("accepted payload %q is not a JSON object of three members", payload)
		}
		var js string
		var jexp int64
		var jb string
		if json.Unmarshal(obj["s"], &js) != nil || json.Unmarshal(obj["exp"], &jexp) != nil || json.Unmarshal(obj["b"], &jb) != nil {
			t.Fatalf("accepted payload %q has members of the wrong types", payload)
		}
		if js != s {
			t.Fatalf("state %q, encoding/json reads %q", s, js)
		}
		if jb != vecBindTag(vecKey, BindSubject, subject, "") {
			t.Fatalf("accepted bind tag %q for subject %q", jb, subject)
		}
		if jexp < vecNow.Unix() {
			t.Fatalf("accepted exp %d < now", jexp)
		}
	})
}

// ---------------------------------------------------------------------------
// Keyring

var keyringErrText = regexp.MustCompile(`^ctoken: (key shorter than 32 bytes|malformed key): key [0-9]+ of [0-9]+ [^(]+ \(want comma-separated base64url .*\)$`)

func FuzzParseKeyring(f *testing.F) {
	f.Add(EncodeKey(vecKey))
	f.Add(EncodeKey(vecKey) + ", " + base64.StdEncoding.EncodeToString(vecKey2))
	f.Add(" " + base64.RawStdEncoding.EncodeToString(seqBytes(0xf0, 48)) + "\n")
	f.Add(EncodeKey(vecKey[:31]))
	f.Add(EncodeKey(vecKey) + ",")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		kr, err := ParseKeyring(s)
		if err != nil {
			if kr != nil {
				t.Fatal("error with a keyring")
			}
			n := 0
			for _, e := range []error{ErrKeyTooShort, ErrKeyInvalid} {
				if errors.Is(err, e) {
					n++
				}
			}
			if n != 1 || !keyringErrText.MatchString(err.Error()) {
				t.Fatalf("error %q is not exactly one sentinel with a position", err)
			}
			return
		}
		parts := strings.Split(s, ",")
		if kr.Len() != len(parts) {
			t.Fatalf("%d keys from %d entries", kr.Len(), len(parts))
		}
		enc := make([]string, kr.Len())
		for i, k := range kr.keys {
			if len(k) < MinKeyBytes {
				t.Fatalf("accepted a %d-byte key", len(k))
			}
			enc[i] = EncodeKey(k)
		}
		again, err := ParseKeyring(strings.Join(enc, ","))
		if err != nil || !reflect.DeepEqual(again.keys, kr.keys) {
			t.Fatalf("keys do not survive EncodeKey and ParseKeyring: %v", err)
		}
		if str := fmt.Sprintf("%v %#v %s", kr, kr, kr); strings.Contains(str, strings.TrimSpace(parts[0])) {
			t.Fatalf("keyring formatting %q shows a key", str)
		}
	})
}

// ---------------------------------------------------------------------------
// Seed corpora

// corpusFile renders values in the go test fuzz v1 corpus format.
func corpusFile(vals ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case bool:
			fmt.Fprintf(&b, "bool(%v)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case int64:
			fmt.Fprintf(&b, "int64(%d)\n", v)
		default:
			panic(fmt.Sprintf("corpusFile: %T", v))
		}
	}
	return b.Bytes()
}

// writeFuzzSeedCorpora writes testdata/fuzz/<FuzzName>/ from the vector
// files, one corpus entry per real token, body, payload or document.
func writeFuzzSeedCorpora(t *testing.T) {
	seeds := map[string][][]byte{}
	add := func(target string, vals ...any) { seeds[target] = append(seeds[target], corpusFile(vals...)) }

	var cf cursorFile
	readVectors(t, "cursor.json", &cf)
	kid := vecKeyID(vecKey)
	for _, v := range cf.Issue {
		add("FuzzCursorVerify", v.Token, v.Tool, v.Caller)
		if v.SignKey != cf.Key || v.Args != "" {
			continue // the targets MAC and seal under vecKey with no arguments
		}
		if v.Layout == "signed" {
			add("FuzzCursorVerifySigned", vecHex(t, v.Body), v.Tool, v.Caller)
		} else {
			add("FuzzCursorVerifySealed", vecHex(t, v.Plaintext), v.IssuedAt, v.Tool, v.Caller, "")
		}
	}
	for _, v := range cf.Verify {
		add("FuzzCursorVerify", v.Token, v.WantTool, v.WantCaller)
		raw, err := base64.RawURLEncoding.Strict().DecodeString(v.Token)
		if err != nil || len(raw) < 9 || raw[2] != 2 || !bytes.Equal(raw[5:9], kid) || len(raw) <= macSize {
			continue
		}
		add("FuzzCursorVerifySigned", raw[:len(raw)-macSize], v.WantTool, v.WantCaller)
	}

	for _, b := range fuzzStateSeeds(t) {
		add("FuzzVerifyState", b)
	}

	var sf stateFile
	readVectors(t, "request_state.json", &sf)
	for _, v := range sf.Encode {
		if v.Key != sf.Key {
			continue // FuzzStateDecode's codecs hold vecKey only
		}
		enc := v.Mode == "encrypted"
		add("FuzzStateDecode", enc, uint8(parseBinding(t, v.Binding)-1), v.Wire, v.Subject, v.Tool)
		if v.Binding == "subject" {
			add("FuzzStatePayload", enc, []byte(v.Payload), v.Subject)
		}
	}
	for _, v := range sf.Decode {
		add("FuzzStateDecode", v.Mode == "encrypted", uint8(parseBinding(t, v.Binding)-1), v.Wire, v.Subject, v.Tool)
	}

	var jf jcsFile
	readVectors(t, "jcs.json", &jf)
	for _, v := range jf.Valid {
		add("FuzzArgsFingerprint", []byte(v.Input))
	}
	for _, v := range jf.Invalid {
		add("FuzzArgsFingerprint", v.bytes(t))
	}

	k1, k2 := EncodeKey(vecKey), EncodeKey(vecKey2)
	for _, s := range []string{
		k1,
		k1 + "," + k2,
		" " + k1 + " ,\t" + base64.StdEncoding.EncodeToString(vecKey2) + "\n",
		base64.RawStdEncoding.EncodeToString(seqBytes(0xfb, 40)),
		base64.StdEncoding.EncodeToString(seqBytes(0xfb, 40)),
		EncodeKey(vecKey[:31]),
		k1 + ",," + k2,
		k1 + "=",
		hex.EncodeToString(vecKey),
	} {
		add("FuzzParseKeyring", s)
	}

	for target, files := range seeds {
		dir := fuzzCorpusDir(target)
		// Replace the generated seeds; keep crashers the fuzzer found.
		old, _ := filepath.Glob(filepath.Join(dir, "seed-*"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, b := range files {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", i)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fuzzCorpusDir is the seed corpus directory of a fuzz target:
// testdata/fuzz/<target> of the package that holds it (the canonicalizer's
// targets are in internal/jcs).
func fuzzCorpusDir(target string) string {
	if target == "FuzzArgsFingerprint" {
		return filepath.Join("internal", "jcs", "testdata", "fuzz", target)
	}
	return filepath.Join("testdata", "fuzz", target)
}

// TestFuzzSeedCorporaPresent guards against losing the committed seeds.
func TestFuzzSeedCorporaPresent(t *testing.T) {
	for _, target := range []string{"FuzzCursorVerify", "FuzzCursorVerifySigned", "FuzzCursorVerifySealed", "FuzzStateDecode", "FuzzStatePayload", "FuzzVerifyState", "FuzzArgsFingerprint", "FuzzParseKeyring"} {
		entries, err := os.ReadDir(fuzzCorpusDir(target))
		if err != nil || len(entries) == 0 {
			t.Errorf("%s: no seed corpus (%v); regenerate with go test -run TestVectors -update-vectors", target, err)
		}
	}
}

// respellings returns other spellings of the base64url text at tok[start:]
// that a lenient decoder maps to the same bytes: CR and LF inserted (which
// encoding/base64 skips even in Strict mode), padding, and set unused
// trailing bits.
func respellings(tok string, start int) map[string]string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	mid := start + (len(tok)-start)/2
	out := map[string]string{
		"line feed inside":       tok[:mid] + "\n" + tok[mid:],
		"CR LF at the end":       tok + "\r\n",
		"line feed at the start": tok[:start] + "\n" + tok[start:],
	}
	if r := (len(tok) - start) % 4; r != 0 {
		out["padding"] = tok + strings.Repeat("=", 4-r)
		i := strings.IndexByte(alphabet, tok[len(tok)-1])
		out["unused trailing bits set"] = tok[:len(tok)-1] + string(alphabet[i|1])
	}
	return out
}

// TestTokensHaveOneSpelling checks that no token type accepts a second
// spelling of an authentic token.
func TestTokensHaveOneSpelling(t *testing.T) {
	iss := fuzzCursorIssuer(t)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	codecs := fuzzCodecs(t)
	ot, err := NewOneTimeIssuer(OneTimeConfig{Keys: vecKeyring(t, vecKey), Purpose: "spelling", Now: fixedClock(vecNow)})
	if err != nil {
		t.Fatal(err)
	}
	type kind struct {
		name   string
		token  func(n int) string // an authentic token; n varies its length
		start  int                // where the base64url text starts
		verify func(string) error
	}
	kinds := []kind{
		{"cursor", func(n int) string {
			tok, err := iss.Issue(CursorPayload{CursorScope: scope, State: seqBytes(0, n)})
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, 0, func(s string) error { _, err := iss.Verify(s, scope); return err }},
		{"one-time token", func(n int) string {
			tok, err := ot.Mint(map[string]string{"k": strings.Repeat("v", n)})
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, len(oneTimePrefix), func(s string) error { _, err := verifyOneTime(new(oneTimeFields), ot.ring(), s); return err }}, // verify: Redeem would consume it
	}
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c := codecs[[2]uint8{uint8(mode), uint8(BindSubject)}]
		start := len(signedPrefix)
		if mode == Encrypted {
			start = len(encryptedPrefix)
		}
		kinds = append(kinds, kind{modeNames[mode] + " request state", func(n int) string {
			w, err := c.Encode(strings.Repeat("x", n), "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			return w
		}, start, func(s string) error { _, err := c.Decode(s, "alice", ""); return err }})
	}
	for _, k := range kinds {
		for n := range 3 { // three lengths: every base64 remainder
			tok := k.token(n)
			if err := k.verify(tok); err != nil {
				t.Fatalf("%s: authentic token refused: %v", k.name, err)
			}
			for what, alt := range respellings(tok, k.start) {
				if err := k.verify(alt); err == nil {
					t.Errorf("%s (%d bytes): accepted with %s", k.name, n, what)
				}
			}
		}
	}
}
