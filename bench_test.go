package ctoken

// Benchmarks of the hot paths, and in the same file the floors they are
// measured against: what the bare primitives cost on the same bytes.
//
//   - HMAC floor: HMAC-SHA256 with a keyed state reused across iterations
//     (Reset, Write, Sum) plus base64url, over exactly the CBOR body a
//     cursor carries (or the JSON payload a signed request state carries).
//   - GCM floor: AES-256-GCM Seal/Open with a fresh crypto/rand nonce plus
//     base64url, over exactly the JSON payload an encrypted request state
//     carries (no additional data).
//
// Compare, for instance, BenchmarkCursorVerify with
// BenchmarkFloorHMAC/cursor/verify. None of these asserts anything about
// time; they are measurements only.

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/internal/cursorwire"
)

// cpuMeter measures the CPU time of a benchmark's loop on its own OS
// thread: start it before b.Loop, call done after.
type cpuMeter struct{ start int64 }

func startCPU() cpuMeter {
	runtime.LockOSThread()
	return cpuMeter{start: threadCPU()}
}

// done reports cpu-ns/op and unlocks the thread.
func (m cpuMeter) done(b *testing.B) {
	end := threadCPU()
	runtime.UnlockOSThread()
	if m.start >= 0 && end >= 0 && b.N > 0 {
		b.ReportMetric(float64(end-m.start)/float64(b.N), "cpu-ns/op")
	}
}

// benchKey is a fixed key so runs are comparable.
var benchKey = bytes.Repeat([]byte{0x5a}, 32)

// benchScope is the logical cursor of the peer comparison in bench/: tool
// search_issues, a 41-character caller ID and a bound args fingerprint.
var benchScope = CursorScope{
	ToolID:   "search_issues",
	CallerID: "user:7f3c9a12-4b8e-4d2a-9c1f-5e6b7a8c9d0e", // 41 characters
	Args:     Fingerprint(sha256.Sum256([]byte(`{"query":"is:open label:bug","per_page":50}`))),
}

// benchState is 64 bytes of opaque cursor state.
var benchState = bytes.Repeat([]byte{0xa5}, 64)

// benchRequestState is a typical MCP request state: a small JSON document.
const benchRequestState = `{"step":2,"pending":["confirm_delete"],"draft":"id-4b8e4d2a9c1f5e6b"}`

func benchIssuer(b *testing.B) *CursorIssuer {
	b.Helper()
	kr, err := NewKeyring(benchKey)
	if err != nil {
		b.Fatal(err)
	}
	iss, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: []byte("bench-01")})
	if err != nil {
		b.Fatal(err)
	}
	return iss
}

func benchPayload() CursorPayload {
	return CursorPayload{CursorScope: benchScope, Page: 3, State: benchState}
}

func BenchmarkCursorIssue(b *testing.B) {
	iss := benchIssuer(b)
	p := benchPayload()
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if _, err := iss.Issue(p); err != nil {
			b.Fatal(err)
		}
	}
	cpu.done(b)
}

func BenchmarkCursorVerify(b *testing.B) {
	iss := benchIssuer(b)
	c, err := iss.Issue(benchPayload())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(c)), "token-bytes")
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if _, err := iss.Verify(c, benchScope); err != nil {
			b.Fatal(err)
		}
	}
	cpu.done(b)
}

// benchSealedIssuer is benchIssuer with CursorConfig.Seal.
func benchSealedIssuer(b *testing.B) *CursorIssuer {
	b.Helper()
	kr, err := NewKeyring(benchKey)
	if err != nil {
		b.Fatal(err)
	}
	iss, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: []byte("bench-01"), Seal: true})
	if err != nil {
		b.Fatal(err)
	}
	return iss
}

// BenchmarkCursorSealed measures sealed cursors (CursorConfig.Seal) of the
// benchmark payload. Compare with BenchmarkFloorGCM/cursor-seal and
// cursor-open: AES-256-GCM over the same plaintext and additional data.
func BenchmarkCursorSealed(b *testing.B) {
	iss := benchSealedIssuer(b)
	p := benchPayload()
	b.Run("issue", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if _, err := iss.Issue(p); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
	c, err := iss.Issue(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("verify", func(b *testing.B) {
		b.ReportMetric(float64(len(c)), "token-bytes")
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if _, err := iss.Verify(c, benchScope); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
}

// BenchmarkCursorVerifyObserved is BenchmarkCursorVerify with an observer
// set: a no-op one (the cost of building and passing the event) and a
// [KeySource] instead of Keys (an atomic load and a pointer compare per
// call). Compare with BenchmarkCursorVerify (nil observer, static keys) and
// BenchmarkFloorHMAC/cursor/verify.
func BenchmarkCursorVerifyObserved(b *testing.B) {
	kr, err := NewKeyring(benchKey)
	if err != nil {
		b.Fatal(err)
	}
	src, err := NewKeySource(kr)
	if err != nil {
		b.Fatal(err)
	}
	noop := ObserverFunc(func(Event) {})
	for _, bc := range []struct {
		name string
		cfg  CursorConfig
	}{
		{"noop-observer", CursorConfig{Keys: kr, Session: []byte("bench-01"), Observer: noop}},
		{"keysource", CursorConfig{KeySource: src, Session: []byte("bench-01")}},
		{"keysource+noop-observer", CursorConfig{KeySource: src, Session: []byte("bench-01"), Observer: noop}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			iss, err := NewCursorIssuer(bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			c, err := iss.Issue(benchPayload())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := iss.Verify(c, benchScope); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
		})
	}
}

// BenchmarkCursorVerifyParallel runs Verify on every P; with no shared lock
// on the hot path its ns/op falls as GOMAXPROCS grows (-cpu 1,2,4).
func BenchmarkCursorVerifyParallel(b *testing.B) {
	iss := benchIssuer(b)
	c, err := iss.Issue(benchPayload())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := iss.Verify(c, benchScope); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCursorVerifyRejectForged measures the cost of refusing a cursor
// whose MAC does not match (the common attack path).
func BenchmarkCursorVerifyRejectForged(b *testing.B) {
	iss := benchIssuer(b)
	c, err := iss.Issue(benchPayload())
	if err != nil {
		b.Fatal(err)
	}
	forged := []byte(c)
	forged[len(forged)-3] ^= 'A' ^ 'B'
	fc := string(forged)
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if _, err := iss.Verify(fc, benchScope); err == nil {
			b.Fatal("forged cursor verified")
		}
	}
	cpu.done(b)
}

var benchModes = []struct {
	name string
	mode RequestStateMode
}{{"signed", Signed}, {"encrypted", Encrypted}}

func benchCodec(b *testing.B, mode RequestStateMode) *RequestStateCodec {
	b.Helper()
	kr, err := NewKeyring(benchKey)
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewRequestStateCodec(RequestStateSecurity{Keys: kr, Mode: mode})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkStateEncode(b *testing.B) {
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			c := benchCodec(b, m.mode)
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := c.Encode(benchRequestState, benchScope.CallerID, "tools/call"); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
		})
	}
}

func BenchmarkStateDecode(b *testing.B) {
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			c := benchCodec(b, m.mode)
			w, err := c.Encode(benchRequestState, benchScope.CallerID, "tools/call")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(w)), "token-bytes")
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := c.Decode(w, benchScope.CallerID, "tools/call"); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
		})
	}
}

// benchSmallArgs are the arguments of a typical paginated tool call as a Go
// struct, fields in declaration (not canonical) order.
type benchSmallArgs struct {
	Query   string            `json:"query"`
	Repo    string            `json:"repo"`
	PerPage int               `json:"per_page"`
	Labels  []string          `json:"labels"`
	Filter  map[string]string `json:"filter"`
}

var benchSmall = benchSmallArgs{
	Query:   "is:open label:bug sort:updated-desc",
	Repo:    "ctoken/ctoken",
	PerPage: 50,
	Labels:  []string{"p1", "backend"},
	Filter:  map[string]string{"state": "open", "author": "octocat"},
}

// benchSmallText is benchSmall's canonical JSON (about 135 bytes), and
// benchSmallLoose the same arguments spelled otherwise: members shuffled,
// white space, an escape and 5.0e1 for 50.
const (
	benchSmallText  = `{"filter":{"author":"octocat","state":"open"},"labels":["p1","backend"],"per_page":50,"query":"is:open label:bug sort:updated-desc","repo":"ctoken/ctoken"}`
	benchSmallLoose = `{ "repo": "ctoken/ctoken", "per_page": 5.0e1, "query": "is:open label:bug sort:updated-desc",
  "labels": [ "p1", "backend" ], "filter": { "state": "open", "author": "octo\u0063at" } }`
)

// benchNestedText returns a canonical JSON object of about 1.4 KiB holding
// 24 nested objects with non-integer numbers, and benchNestedLoose the same
// value spelled otherwise (members in reverse order, white space, numbers
// with exponents and trailing zeros).
func benchNestedText() []byte {
	var sb strings.Builder
	sb.WriteString(`{`)
	for i := range 24 {
		if i > 0 {
			sb.WriteString(`,`)
		}
		fmt.Fprintf(&sb, `"item_%02d":{"ratio":0.%03d,"tags":["a","b"],"value":%d.125}`, i, 125+i, 12345+i)
	}
	sb.WriteString(`}`)
	return []byte(sb.String())
}

func benchNestedLoose() []byte {
	var sb strings.Builder
	sb.WriteString("{\n")
	for i := 23; i >= 0; i-- {
		fmt.Fprintf(&sb, "  \"item_%02d\" : { \"value\" : %d.1250e0, \"tags\" : [ \"a\", \"b\" ], \"ratio\" : %d.0e-3 }", i, 12345+i, 125+i)
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("\n")
	}
	sb.WriteString("}")
	return []byte(sb.String())
}

// BenchmarkArgsFingerprint measures ArgsFingerprint of JSON text, each
// input beside sha256.Sum256 of the same bytes (its floor).
func BenchmarkArgsFingerprint(b *testing.B) {
	inputs := []struct {
		name string
		text []byte
	}{
		{"small", []byte(benchSmallText)},
		{"small-noncanonical", []byte(benchSmallLoose)},
		{"nested-1.4KiB", benchNestedText()},
		{"nested-1.4KiB-noncanonical", benchNestedLoose()},
	}
	want, err := ArgsFingerprint(inputs[2].text)
	if err != nil {
		b.Fatal(err)
	}
	if got, err := ArgsFingerprint(inputs[3].text); err != nil || got != want {
		b.Fatal("the nested inputs differ in meaning")
	}
	if got, err := CanonicalJSON(inputs[0].text); err != nil || string(got) != benchSmallText {
		b.Fatal("benchSmallText is not canonical")
	}
	for _, in := range inputs {
		b.Run(in.name+"/fingerprint", func(b *testing.B) {
			b.SetBytes(int64(len(in.text)))
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := ArgsFingerprint(in.text); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
		})
		b.Run(in.name+"/sha256", func(b *testing.B) {
			b.SetBytes(int64(len(in.text)))
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				_ = sha256.Sum256(in.text)
			}
			cpu.done(b)
		})
	}
}

// BenchmarkArgsFingerprintStruct measures ArgsFingerprint of the small
// arguments as a typed Go struct, beside json.Marshal of the same value.
func BenchmarkArgsFingerprintStruct(b *testing.B) {
	benchGoValue(b, benchSmall)
}

// BenchmarkArgsFingerprintMap measures ArgsFingerprint of the small
// arguments decoded by encoding/json into a map[string]any (the shape of
// untyped tool arguments), beside json.Marshal of the same value.
func BenchmarkArgsFingerprintMap(b *testing.B) {
	var args map[string]any
	if err := json.Unmarshal([]byte(benchSmallText), &args); err != nil {
		b.Fatal(err)
	}
	benchGoValue(b, args)
}

// benchGoValue checks that v, the small arguments as a Go value, has the
// text's fingerprint, then measures ArgsFingerprint(v) beside
// json.Marshal(v). v is a type parameter so that each call converts it to
// any, as a caller's call does.
func benchGoValue[T any](b *testing.B, v T) {
	fp, err := ArgsFingerprint(v)
	if err != nil || fp != sha256.Sum256([]byte(benchSmallText)) {
		b.Fatalf("%T and text fingerprints differ (%v)", v, err)
	}
	b.Run("fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if _, err := ArgsFingerprint(v); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
}

// BenchmarkPageTurn measures what ctoken costs a paginated call: the
// fingerprint of the small arguments (text), Verify of the presented
// cursor and Issue of the next. floor is SHA-256 of the arguments plus the
// HMAC verify and sign floors (see BenchmarkFloorHMAC) on the cursor body.
func BenchmarkPageTurn(b *testing.B) {
	args := []byte(benchSmallText)
	iss := benchIssuer(b)
	fp, err := ArgsFingerprint(args)
	if err != nil {
		b.Fatal(err)
	}
	scope := CursorScope{ToolID: benchScope.ToolID, CallerID: benchScope.CallerID, Args: fp}
	presented, err := iss.Issue(CursorPayload{CursorScope: scope, Page: 3, State: benchState})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ctoken", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			fp, err := ArgsFingerprint(args)
			if err != nil {
				b.Fatal(err)
			}
			want := CursorScope{ToolID: benchScope.ToolID, CallerID: benchScope.CallerID, Args: fp}
			p, err := iss.Verify(presented, want)
			if err != nil {
				b.Fatal(err)
			}
			p.Page++
			if _, err := iss.Issue(p); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
	body := benchCursorBody(b)
	h := hmac.New(sha256.New, subkey(benchKey, "bench floor"))
	h.Write(body)
	token := b64.EncodeToString(h.Sum(append([]byte(nil), body...)))
	raw := make([]byte, len(body)+macSize)
	buf := make([]byte, 0, b64.EncodedLen(len(raw)))
	dec := make([]byte, len(raw))
	var sum [macSize]byte
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			_ = sha256.Sum256(args)
			n, err := b64.Decode(dec, []byte(token))
			if err != nil || n <= macSize {
				b.Fatal("floor token does not decode")
			}
			h.Reset()
			h.Write(dec[:n-macSize])
			if !hmac.Equal(h.Sum(sum[:0]), dec[n-macSize:n]) {
				b.Fatal("floor MAC mismatch")
			}
			h.Reset()
			h.Write(body)
			raw = h.Sum(raw[:0])
			_ = string(b64.AppendEncode(buf[:0], append(append(dec[:0], body...), raw...)))
		}
		cpu.done(b)
	})
}

// benchCursorBody returns the CBOR body of the benchmark cursor: the bytes
// the HMAC floor signs.
func benchCursorBody(b *testing.B) []byte {
	c, err := benchIssuer(b).Issue(benchPayload())
	if err != nil {
		b.Fatal(err)
	}
	raw, err := b64.DecodeString(c)
	if err != nil {
		b.Fatal(err)
	}
	return raw[:len(raw)-macSize]
}

// benchStatePayload returns the JSON payload a request state carries: the
// bytes the HMAC and GCM floors of request state protect.
func benchStatePayload(b *testing.B) []byte {
	w, err := benchCodec(b, Signed).Encode(benchRequestState, benchScope.CallerID, "tools/call")
	if err != nil {
		b.Fatal(err)
	}
	body, _, _ := strings.Cut(strings.TrimPrefix(w, signedPrefix), ".")
	payload, err := b64.DecodeString(body)
	if err != nil {
		b.Fatal(err)
	}
	return payload
}

// BenchmarkFloorHMAC is the floor of an HMAC token: one keyed HMAC-SHA256
// state, reused (Reset, Write, Sum) plus base64url, with buffers allocated
// once outside the loop. sign returns the token as a string (1 alloc);
// verify decodes, recomputes and compares in constant time.
func BenchmarkFloorHMAC(b *testing.B) {
	inputs := []struct {
		name string
		body []byte
	}{{"cursor", benchCursorBody(b)}, {"state", benchStatePayload(b)}}
	for _, in := range inputs {
		key := subkey(benchKey, "bench floor")
		h := hmac.New(sha256.New, key)
		raw := append(append([]byte(nil), in.body...), make([]byte, macSize)...)
		buf := make([]byte, 0, b64.EncodedLen(len(raw)))
		b.Run(in.name+"/sign", func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				h.Reset()
				h.Write(in.body)
				raw = h.Sum(raw[:len(in.body)])
				_ = string(b64.AppendEncode(buf[:0], raw))
			}
			cpu.done(b)
		})
		h.Reset()
		h.Write(in.body)
		token := b64.EncodeToString(h.Sum(append([]byte(nil), in.body...)))
		dec := make([]byte, len(raw))
		var sum [macSize]byte
		b.Run(in.name+"/verify", func(b *testing.B) {
			b.ReportMetric(float64(len(token)), "token-bytes")
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				n, err := b64.Decode(dec, []byte(token))
				if err != nil || n <= macSize {
					b.Fatal("floor token does not decode")
				}
				h.Reset()
				h.Write(dec[:n-macSize])
				if !hmac.Equal(h.Sum(sum[:0]), dec[n-macSize:n]) {
					b.Fatal("floor MAC mismatch")
				}
			}
			cpu.done(b)
		})
	}
}

// BenchmarkFloorCursorGCM is the floor of a sealed cursor: AES-256-GCM
// with a fresh crypto/rand nonce over exactly the plaintext a sealed cursor
// of the benchmark payload encrypts, with exactly its additional data (the
// clear header and the scope), plus base64url; buffers allocated once.
func BenchmarkFloorCursorGCM(b *testing.B) {
	c, err := benchSealedIssuer(b).Issue(benchPayload())
	if err != nil {
		b.Fatal(err)
	}
	raw, err := b64.DecodeString(c)
	if err != nil {
		b.Fatal(err)
	}
	_, hn, ok := cursorwire.DecodeSealedHeader(raw)
	if !ok {
		b.Fatal("no sealed header")
	}
	header := raw[:hn]
	aad := appendScope(append([]byte(nil), header...), &benchScope)
	pt := cursorwire.AppendSealedInner(nil, benchPayload().Page, benchState)
	block, err := aes.NewCipher(subkey(benchKey, "bench floor"))
	if err != nil {
		b.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		b.Fatal(err)
	}
	sealed := make([]byte, 0, hn+gcmNonceSize+len(pt)+gcmTagSize)
	buf := make([]byte, 0, b64.EncodedLen(cap(sealed)))
	b.Run("cursor-seal", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			s := append(sealed[:0], header...)
			nonce := s[hn : hn+gcmNonceSize]
			rand.Read(nonce)
			s = aead.Seal(s[:hn+gcmNonceSize], nonce, pt, aad)
			_ = string(b64.AppendEncode(buf[:0], s))
		}
		cpu.done(b)
	})
	s := append(append([]byte(nil), header...), make([]byte, gcmNonceSize)...)
	rand.Read(s[hn:])
	token := b64.EncodeToString(aead.Seal(s, s[hn:], pt, aad))
	dec := make([]byte, cap(sealed))
	out := make([]byte, 0, len(pt))
	b.Run("cursor-open", func(b *testing.B) {
		b.ReportMetric(float64(len(token)), "token-bytes")
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			n, err := b64.Decode(dec, []byte(token))
			if err != nil || n < hn+gcmNonceSize+gcmTagSize {
				b.Fatal("floor token does not decode")
			}
			if _, err := aead.Open(out[:0], dec[hn:hn+gcmNonceSize], dec[hn+gcmNonceSize:n], aad); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
}

// BenchmarkFloorHMACScope is the floor of what a version 2 cursor computes
// by design: the HMAC-SHA256 of the body (BenchmarkFloorHMAC/cursor) and
// the HMAC-SHA256 of the scope (the binding digest), each with a keyed
// state reused, plus base64url.
func BenchmarkFloorHMACScope(b *testing.B) {
	body := benchCursorBody(b)
	scope := appendScope(nil, &benchScope)
	h := hmac.New(sha256.New, subkey(benchKey, "bench floor"))
	hb := hmac.New(sha256.New, subkey(benchKey, "bench floor bind"))
	raw := make([]byte, 0, len(body)+macSize)
	buf := make([]byte, 0, b64.EncodedLen(len(body)+macSize))
	var sum [macSize]byte
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			hb.Reset()
			hb.Write(scope)
			hb.Sum(sum[:0])
			h.Reset()
			h.Write(body)
			raw = h.Sum(append(raw[:0], body...))
			_ = string(b64.AppendEncode(buf[:0], raw))
		}
		cpu.done(b)
	})
	h.Reset()
	h.Write(body)
	token := b64.EncodeToString(h.Sum(append([]byte(nil), body...)))
	dec := make([]byte, len(body)+macSize)
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			n, err := b64.Decode(dec, []byte(token))
			if err != nil || n <= macSize {
				b.Fatal("floor token does not decode")
			}
			h.Reset()
			h.Write(dec[:n-macSize])
			if !hmac.Equal(h.Sum(sum[:0]), dec[n-macSize:n]) {
				b.Fatal("floor MAC mismatch")
			}
			hb.Reset()
			hb.Write(scope)
			if hmac.Equal(hb.Sum(sum[:0]), dec[:macSize]) {
				b.Fatal("unexpected")
			}
		}
		cpu.done(b)
	})
}

// BenchmarkFloorGCM is the floor of a sealed token: AES-256-GCM with a
// fresh 12-byte crypto/rand nonce, plus base64url, with buffers allocated
// once outside the loop. seal returns the token as a string (1 alloc).
func BenchmarkFloorGCM(b *testing.B) {
	payload := benchStatePayload(b)
	block, err := aes.NewCipher(subkey(benchKey, "bench floor"))
	if err != nil {
		b.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		b.Fatal(err)
	}
	sealed := make([]byte, 0, gcmNonceSize+len(payload)+gcmTagSize)
	buf := make([]byte, 0, b64.EncodedLen(cap(sealed)))
	b.Run("seal", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			s := sealed[:gcmNonceSize]
			rand.Read(s)
			s = aead.Seal(s, s, payload, nil)
			_ = string(b64.AppendEncode(buf[:0], s))
		}
		cpu.done(b)
	})
	// open is the floor of a request state without additional data;
	// open-aad also authenticates bindTagLen bytes of additional data, as
	// the wire format seals the bind tag: the floor for the bytes Decode
	// opens.
	dec := make([]byte, cap(sealed))
	pt := make([]byte, 0, len(payload))
	for _, o := range []struct {
		name string
		aad  []byte
	}{{"open", nil}, {"open-aad", bytes.Repeat([]byte{'a'}, bindTagLen)}} {
		s := make([]byte, gcmNonceSize, cap(sealed))
		rand.Read(s)
		token := b64.EncodeToString(aead.Seal(s, s, payload, o.aad))
		b.Run(o.name, func(b *testing.B) {
			b.ReportMetric(float64(len(token)), "token-bytes")
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				n, err := b64.Decode(dec, []byte(token))
				if err != nil || n < gcmNonceSize+gcmTagSize {
					b.Fatal("floor token does not decode")
				}
				if _, err := aead.Open(pt[:0], dec[:gcmNonceSize], dec[gcmNonceSize:n], o.aad); err != nil {
					b.Fatal(err)
				}
			}
			cpu.done(b)
		})
	}
}
