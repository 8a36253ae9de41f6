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
	"hash"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/ctoken/ctoken/internal/xaes"
	"github.com/ctoken/ctoken/observe"
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

func BenchmarkCursorIssue(b *testing.B) { benchIssueLoop(b, benchIssuer(b), benchPayload()) }

// benchIssueLoop times iss.Issue(p), in ns and cpu-ns, with its allocations.
func benchIssueLoop(b *testing.B, iss *CursorIssuer, p CursorPayload) {
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if _, err := iss.Issue(p); err != nil {
			b.Fatal(err)
		}
	}
	cpu.done(b)
}

// benchVerifyLoop times iss.Verify(cursor, benchScope) the same way.
func benchVerifyLoop(b *testing.B, iss *CursorIssuer, cursor string) {
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if _, err := iss.Verify(cursor, benchScope); err != nil {
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
	benchVerifyLoop(b, iss, c)
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
	noop := observe.ObserverFunc(func(observe.Event) {})
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

// BenchmarkCursorClock is BenchmarkCursorIssue and BenchmarkCursorVerify
// with the issuer's default clock (time.Now) and with a clock that returns
// a fixed time: the difference is what the clock read costs each call, a
// part of the page turn no floor pays for.
func BenchmarkCursorClock(b *testing.B) {
	kr, err := NewKeyring(benchKey)
	if err != nil {
		b.Fatal(err)
	}
	fixed := time.Now()
	for _, c := range []struct {
		name string
		now  func() time.Time
	}{{"time.Now", nil}, {"fixed", func() time.Time { return fixed }}} {
		iss, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: []byte("bench-01"), Now: c.now})
		if err != nil {
			b.Fatal(err)
		}
		p := benchPayload()
		cursor, err := iss.Issue(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("issue/"+c.name, func(b *testing.B) { benchIssueLoop(b, iss, p) })
		b.Run("verify/"+c.name, func(b *testing.B) { benchVerifyLoop(b, iss, cursor) })
	}
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

// BenchmarkRefusalReason measures what a refusal costs a caller that
// labels it: Reason of a forged cursor's error and its String (the log and
// metric text), and the forged cursor's Verify with an observer that reads
// the event's reason. The floor is BenchmarkCursorVerifyRejectForged, which
// refuses the same cursor with no observer and no reason read.
func BenchmarkRefusalReason(b *testing.B) {
	iss := benchIssuer(b)
	c, err := iss.Issue(benchPayload())
	if err != nil {
		b.Fatal(err)
	}
	forged := []byte(c)
	forged[len(forged)-3] ^= 'A' ^ 'B'
	fc := string(forged)
	_, refusal := iss.Verify(fc, benchScope)
	if refusal == nil {
		b.Fatal("forged cursor verified")
	}
	var sink string
	b.Run("Reason+String", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			sink = Reason(refusal).String()
		}
		cpu.done(b)
	})
	kr, err := NewKeyring(benchKey)
	if err != nil {
		b.Fatal(err)
	}
	obs := observe.ObserverFunc(func(e observe.Event) { sink = e.Reason.String() })
	observed, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: []byte("bench-01"), Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("verify-forged+observer", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if _, err := observed.Verify(fc, benchScope); err == nil {
				b.Fatal("forged cursor verified")
			}
		}
		cpu.done(b)
	})
	if sink == "" {
		b.Fatal("no reason read")
	}
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
	c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode})
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

// BenchmarkArgsFingerprintBoxing measures ArgsFingerprint of the small
// arguments as JSON text passed as a []byte (per-call: since the generic
// signature of issue 47 the slice is not boxed, no allocation; before it,
// 24 bytes boxed into the any parameter on every call), beside the same
// text boxed into an any once outside the loop (once: the path of a caller
// that holds its arguments as an any).
func BenchmarkArgsFingerprintBoxing(b *testing.B) {
	text := []byte(benchSmallText)
	var boxed any = text
	benchCPUOf(b, "per-call", func() error { _, err := ArgsFingerprint(text); return err })
	benchCPUOf(b, "once", func() error { _, err := ArgsFingerprint(boxed); return err })
}

// benchCPUOf runs fn as the sub-benchmark name, reporting its allocations
// and CPU time (cpu-ns/op).
func benchCPUOf(b *testing.B, name string, fn func() error) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if err := fn(); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
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
// HMAC verify and sign floors (see BenchmarkFloorHMAC) on the cursor body;
// floor-v2 MACs the body followed by the scope, as version 2 does: keyed
// with the issuer's cursor subkey, over the presented cursor's own body,
// its token is the presented cursor byte for byte (checked before it runs).
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
	// floor MACs the body alone; floor-v2 MACs the body followed by the
	// scope, as a version 2 cursor does (see BenchmarkFloorHMACScope), once
	// to verify the presented cursor and once to issue the next. Both use
	// the presented cursor's body and the issuer's cursor MAC subkey, so
	// floor-v2's token must be the presented cursor itself.
	raw0, err := b64.DecodeString(presented)
	if err != nil {
		b.Fatal(err)
	}
	body := raw0[:len(raw0)-macSize]
	h := hmac.New(sha256.New, subkey(benchKey, cursorKeyLabel))
	for _, c := range []struct {
		name  string
		scope []byte
	}{{"floor", nil}, {"floor-v2", appendScope(nil, &scope)}} {
		h.Reset()
		h.Write(body)
		h.Write(c.scope)
		token := b64.EncodeToString(h.Sum(append([]byte(nil), body...)))
		if c.name == "floor-v2" && token != presented {
			b.Fatal("floor-v2 does not MAC what a version 2 cursor MACs: its token is not the presented cursor")
		}
		raw := make([]byte, len(body)+macSize)
		buf := make([]byte, 0, b64.EncodedLen(len(raw)))
		dec := make([]byte, len(raw))
		var sum [macSize]byte
		b.Run(c.name, func(b *testing.B) {
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
				h.Write(c.scope)
				if !hmac.Equal(h.Sum(sum[:0]), dec[n-macSize:n]) {
					b.Fatal("floor MAC mismatch")
				}
				h.Reset()
				h.Write(body)
				h.Write(c.scope)
				raw = h.Sum(raw[:0])
				_ = string(b64.AppendEncode(buf[:0], append(append(dec[:0], body...), raw...)))
			}
			cpu.done(b)
		})
	}
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
		b.Run(in.name+"/verify", func(b *testing.B) {
			b.ReportMetric(float64(len(token)), "token-bytes")
			benchFloorVerify(b, h, token)
		})
	}
}

// benchFloorVerify is the floor of verifying token, base64url of
// body || HMAC(body): a strict decode into a buffer allocated once and one
// MAC with h (keyed, reused), compared in constant time.
func benchFloorVerify(b *testing.B, h hash.Hash, token string) {
	dec := make([]byte, b64.DecodedLen(len(token)))
	var sum [macSize]byte
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
}

// BenchmarkFloorCursorGCM is the floor of a sealed cursor: XAES-256-GCM
// (cursor-seal-xaes, cursor-open-xaes: the construction Issue seals with),
// and for comparison AES-256-GCM with a fresh crypto/rand 96-bit nonce
// (cursor-seal, cursor-open: the construction before 1.0), over exactly the
// padded plaintext a sealed cursor of the benchmark payload encrypts, with exactly its additional data (the
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
	pt := cursorwire.AppendSealedInner(nil, benchPayload().Page, benchState) // padded, as Issue seals it
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
	// The floor of a sealed cursor: XAES-256-GCM (internal/xaes, what
	// Issue seals with) over the same header, padded plaintext and
	// additional data, plus base64url.
	xa, err := xaes.New(subkey(benchKey, "bench floor"))
	if err != nil {
		b.Fatal(err)
	}
	xsealed := make([]byte, 0, hn+xaes.Overhead+len(pt))
	xbuf := make([]byte, 0, b64.EncodedLen(cap(xsealed)))
	b.Run("cursor-seal-xaes", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			s := xa.Seal(append(xsealed[:0], header...), pt, aad)
			_ = string(b64.AppendEncode(xbuf[:0], s))
		}
		cpu.done(b)
	})
	xtoken := b64.EncodeToString(xa.Seal(append([]byte(nil), header...), pt, aad))
	b.Run("cursor-open-xaes", func(b *testing.B) {
		b.ReportAllocs()
		xdec, xout := make([]byte, len(xtoken)), make([]byte, 0, len(pt))
		cpu := startCPU()
		for b.Loop() {
			n, err := b64.Decode(xdec, []byte(xtoken))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := xa.Open(xout[:0], xdec[hn:n], aad); err != nil {
				b.Fatal(err)
			}
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

// BenchmarkFloorHMACScope is the floor of a version 2 cursor: one
// HMAC-SHA256 over the body and then the scope (the exact bytes Issue and
// Verify MAC: the body, then the scope encoding), the token being body ||
// tag; a keyed state reused, two Writes (body, scope), plus base64url,
// buffers allocated once. BenchmarkFloorHMAC/cursor is the same without
// the scope.
func BenchmarkFloorHMACScope(b *testing.B) {
	body := benchCursorBody(b)
	scope := appendScope(nil, &benchScope)
	h := hmac.New(sha256.New, subkey(benchKey, "bench floor"))
	raw := make([]byte, 0, len(body)+macSize)
	buf := make([]byte, 0, b64.EncodedLen(len(body)+macSize))
	var sum [macSize]byte
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			h.Reset()
			h.Write(body)
			h.Write(scope)
			raw = h.Sum(append(raw[:0], body...))
			_ = string(b64.AppendEncode(buf[:0], raw))
		}
		cpu.done(b)
	})
	h.Reset()
	h.Write(body)
	h.Write(scope)
	token := b64.EncodeToString(h.Sum(append([]byte(nil), body...)))
	dec := make([]byte, len(body)+macSize)
	b.Run("verify", func(b *testing.B) {
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
			h.Write(scope)
			if !hmac.Equal(h.Sum(sum[:0]), dec[n-macSize:n]) {
				b.Fatal("floor MAC mismatch")
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

// A generated family of JSON argument shapes for BenchmarkArgsFingerprintShapes:
// rather than a few hand-picked documents, each shape is built by a
// deterministic generator (a fixed seed) to about benchShapeBytes, and
// each stresses one part of the canonicalizer: long strings (plain, with
// escapes, non-ASCII written raw or as \u escapes), deep nesting, wide
// objects (in canonical or arbitrary member order, names that share long
// prefixes), numbers in every JSON spelling, and names that sort
// differently by UTF-16 code units than by code points.

// benchShapeBytes is the size each generated shape grows to (about 1.5 KiB,
// the size of the held-out text shape of issue 34).
const benchShapeBytes = 1536

// benchShapeGen writes JSON text.
type benchShapeGen struct {
	r      *mrand.Rand
	sb     strings.Builder
	indent bool // pretty-print with new lines and two-space indentation
	depth  int
	// escape selects how strings are spelled: 0 only the mandatory
	// escapes (RFC 8785's choice), 'u' every non-ASCII character as a \u
	// escape (Python's ensure_ascii), 'h' encoding/json's HTML escapes and
	// \/ besides, 'x' a mix of needless escapes (\/, \u0041, \t).
	escape byte
}

// Word lists the text generators draw from.
var (
	benchWordsASCII  = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were their one all we can her has there been if more when will would who so no paginate cursor token argument request issue label repository query updated open closed review merge branch commit`)
	benchWordsLatin  = strings.Fields(`élan café naïve façade über straße Ærø søster crème brûlée déjà vu señor año mañana piñata Zürich Kraków łódź żółw Ελλάδα καλημέρα Москва привет`)
	benchWordsCJK    = strings.Fields(`東京 大阪 日本語 文字列 検索 結果 次の ページ 中文 汉字 搜索 结果 한국어 검색 결과 다음 페이지`)
	benchWordsAstral = strings.Fields(`😀 🚀 👍🏽 🇯🇵 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀋 𩸽 🎉 🧪 🐈‍⬛`)
	// benchKeyRunes are name characters that order differently by UTF-16
	// code units than by code points: U+E000–U+FFFF above the astral
	// planes' surrogates, beside ASCII, Latin and CJK.
	benchKeyRunes = []rune("aZ_0éñß中文\ue000\uf8ff\ufb01\uff21\ufffd😀𝔘𠀋")
)

func (g *benchShapeGen) nl() {
	if g.indent {
		g.sb.WriteByte('\n')
		for range g.depth {
			g.sb.WriteString("  ")
		}
	}
}

func (g *benchShapeGen) colon() {
	g.sb.WriteByte(':')
	if g.indent {
		g.sb.WriteByte(' ')
	}
}

// str writes s as a JSON string in g's escape style.
func (g *benchShapeGen) str(s string) {
	const hex = "0123456789abcdef"
	g.sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			g.sb.WriteByte('\\')
			g.sb.WriteRune(r)
		case r == '\n':
			g.sb.WriteString(`\n`)
		case r == '\t' && g.escape != 'x':
			g.sb.WriteString(`\t`)
		case r < 0x20 || (g.escape == 'h' && (r == '<' || r == '>' || r == '&')) ||
			(g.escape == 'x' && (r == '\t' || r == 'A')):
			g.sb.WriteString(`\u00`)
			g.sb.WriteByte(hex[r>>4])
			g.sb.WriteByte(hex[r&0xF])
		case r == '/' && (g.escape == 'h' || g.escape == 'x'):
			g.sb.WriteString(`\/`)
		case r >= utf8.RuneSelf && g.escape == 'u':
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&g.sb, `\u%04x`, u)
			}
		default:
			g.sb.WriteRune(r)
		}
	}
	g.sb.WriteByte('"')
}

// prose returns about n bytes of words from words, with the punctuation,
// quotes, new lines and tabs of running text.
func (g *benchShapeGen) prose(words []string, n int) string {
	var sb strings.Builder
	for sb.Len() < n {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[g.r.IntN(len(words))])
		switch g.r.IntN(24) {
		case 0:
			sb.WriteString(`, "quoted"`)
		case 1:
			sb.WriteString(".\n")
		case 2:
			sb.WriteString("\tC:\\path/to <a&b>")
		case 3:
			sb.WriteString("; A/B")
		}
	}
	return sb.String()
}

// object writes an object of n members named by name(i) with values
// written by value(i), in the order of the permutation perm (nil: i order).
func (g *benchShapeGen) object(n int, perm []int, name func(int) string, value func(int)) {
	g.sb.WriteByte('{')
	g.depth++
	for j := range n {
		i := j
		if perm != nil {
			i = perm[j]
		}
		if j > 0 {
			g.sb.WriteByte(',')
		}
		g.nl()
		g.str(name(i))
		g.colon()
		value(i)
	}
	g.depth--
	g.nl()
	g.sb.WriteByte('}')
}

// array writes an array of n values written by value(i).
func (g *benchShapeGen) array(n int, value func(int)) {
	g.sb.WriteByte('[')
	g.depth++
	for i := range n {
		if i > 0 {
			g.sb.WriteByte(',')
		}
		g.nl()
		value(i)
	}
	g.depth--
	g.nl()
	g.sb.WriteByte(']')
}

// textDoc writes a tool call's arguments dominated by one long string of
// prose from words.
func (g *benchShapeGen) textDoc(words []string) {
	names := []string{"body", "title", "labels"}
	g.object(3, []int{1, 0, 2}, func(i int) string { return names[i] }, func(i int) {
		switch i {
		case 0:
			g.str(g.prose(words, benchShapeBytes-160))
		case 1:
			g.str(g.prose(words, 60))
		default:
			g.array(3, func(int) { g.str(words[g.r.IntN(len(words))]) })
		}
	})
}

// number returns a double-exact JSON number in one of the spellings of
// the given kind.
func (g *benchShapeGen) number(kind byte) string {
	r := g.r
	switch kind {
	case 'i': // integers up to 2^53, any sign
		n := r.Int64N(1<<53) >> r.IntN(53)
		if r.IntN(2) == 0 {
			n = -n
		}
		return strconv.FormatInt(n, 10)
	case 'd': // short decimals, as a person or a form writes them
		return strconv.FormatFloat(float64(r.IntN(2000000)-1000000)/float64([]int{10, 100, 1000, 10000}[r.IntN(4)]), 'f', -1, 64)
	case 'e': // exponents in every spelling
		m := float64(r.IntN(99999)+1) / 1000
		e := r.IntN(60) - 30
		f := strconv.FormatFloat(m, 'f', -1, 64)
		return f + []string{"e", "E", "e+", "E-", "e-"}[r.IntN(5)] + strconv.Itoa(max(e, -e))
	case 'f': // full-precision doubles (measurements, embeddings): 15–17 digits
		return strconv.FormatFloat((r.Float64()-0.5)*math.Pow(10, float64(r.IntN(12)-6)), 'g', -1, 64)
	}
	// Edge cases: zeros, negative zero, trailing zeros, the extremes.
	edges := []string{"0", "-0", "0.0", "-0.0e0", "0e-7", "1e21", "1e-7", "1E+2", "100e-2", "12.5000",
		"1.0", "5e-324", "1.7976931348623157e308", "2.2250738585072014e-308", "9007199254740992",
		"-9007199254740992", "123456789012345680000", "0.30000000000000004", "1e300", "-1.5e-300",
		"0.000001", "0.0000001", "999999999999999900000", "4.35", "1.5E1"}
	return edges[r.IntN(len(edges))]
}

// benchShape is one generated input.
type benchShape struct {
	name string
	text []byte
}

// benchShapes returns the generated family, each at about benchShapeBytes.
func benchShapes() []benchShape {
	type gen struct {
		name   string
		indent bool
		escape byte
		write  func(g *benchShapeGen)
	}
	numbers := func(kind byte) func(g *benchShapeGen) {
		return func(g *benchShapeGen) {
			var nums []string
			for n := 0; n < benchShapeBytes-20; {
				nums = append(nums, g.number(kind))
				n += len(nums[len(nums)-1]) + 1
			}
			names := []string{"values"}
			g.object(1, nil, func(i int) string { return names[i] }, func(int) {
				g.array(len(nums), func(i int) { g.sb.WriteString(nums[i]) })
			})
		}
	}
	// wide writes an object of n members named by name, in a shuffled
	// order unless sorted, whose values are small scalars.
	wide := func(n int, sorted bool, name func(g *benchShapeGen, i int) string) func(g *benchShapeGen) {
		return func(g *benchShapeGen) {
			names := make([]string, n)
			seen := map[string]bool{}
			for i := range names {
				for names[i] == "" || seen[names[i]] {
					names[i] = name(g, i)
				}
				seen[names[i]] = true
			}
			if sorted {
				slices.SortFunc(names, func(a, b string) int {
					return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
				})
			}
			var perm []int
			if !sorted {
				perm = g.r.Perm(n)
			}
			g.object(n, perm, func(i int) string { return names[i] }, func(i int) {
				switch i % 4 {
				case 0:
					g.sb.WriteString(strconv.Itoa(i))
				case 1:
					g.sb.WriteString("true")
				case 2:
					g.str(names[i][:1])
				default:
					g.sb.WriteString("null")
				}
			})
		}
	}
	shortName := func(g *benchShapeGen, _ int) string {
		const letters = "abcdefghijklmnopqrstuvwxyz_"
		b := make([]byte, 3+g.r.IntN(8))
		for i := range b {
			b[i] = letters[g.r.IntN(len(letters))]
		}
		return string(b)
	}
	prefixedName := func(g *benchShapeGen, _ int) string {
		return fmt.Sprintf("configuration.option_%03d", g.r.IntN(1000))
	}
	unicodeName := func(g *benchShapeGen, _ int) string {
		rs := make([]rune, 1+g.r.IntN(4))
		for i := range rs {
			rs[i] = benchKeyRunes[g.r.IntN(len(benchKeyRunes))]
		}
		return string(rs)
	}
	deep := func(objects bool) func(g *benchShapeGen) {
		return func(g *benchShapeGen) {
			const levels = 200
			for i := range levels {
				if objects {
					fmt.Fprintf(&g.sb, `{"n":%d,"next":`, i)
				} else {
					fmt.Fprintf(&g.sb, `[%d,`, i)
				}
			}
			g.sb.WriteString(`"end"`)
			for range levels {
				if objects {
					g.sb.WriteByte('}')
				} else {
					g.sb.WriteByte(']')
				}
			}
		}
	}
	records := func(g *benchShapeGen) {
		fields := []string{"id", "name", "email", "active", "score", "tags", "created_at"}
		g.array(11, func(i int) {
			g.object(len(fields), g.r.Perm(len(fields)), func(k int) string { return fields[k] }, func(k int) {
				switch k {
				case 0:
					g.sb.WriteString(strconv.Itoa(1000 + i))
				case 1:
					g.str(g.prose(benchWordsLatin, 12))
				case 2:
					g.str(fmt.Sprintf("user%d@example.com", i))
				case 3:
					g.sb.WriteString([]string{"true", "false"}[i%2])
				case 4:
					g.sb.WriteString(g.number('d'))
				case 5:
					g.array(2, func(int) { g.str(benchWordsASCII[g.r.IntN(len(benchWordsASCII))]) })
				default:
					g.str("2026-11-23T10:00:00Z")
				}
			})
		})
	}
	gens := []gen{
		{"text-ascii", false, 0, func(g *benchShapeGen) { g.textDoc(benchWordsASCII) }},
		{"text-ascii-needless-escapes", false, 'x', func(g *benchShapeGen) { g.textDoc(benchWordsASCII) }},
		{"text-ascii-html-escapes", false, 'h', func(g *benchShapeGen) { g.textDoc(benchWordsASCII) }},
		{"text-latin", false, 0, func(g *benchShapeGen) { g.textDoc(benchWordsLatin) }},
		{"text-latin-u-escaped", false, 'u', func(g *benchShapeGen) { g.textDoc(benchWordsLatin) }},
		{"text-cjk", false, 0, func(g *benchShapeGen) { g.textDoc(benchWordsCJK) }},
		{"text-cjk-u-escaped", false, 'u', func(g *benchShapeGen) { g.textDoc(benchWordsCJK) }},
		{"text-astral", false, 0, func(g *benchShapeGen) { g.textDoc(benchWordsAstral) }},
		{"text-astral-u-escaped", false, 'u', func(g *benchShapeGen) { g.textDoc(benchWordsAstral) }},
		{"deep-arrays", false, 0, deep(false)},
		{"deep-objects", false, 0, deep(true)},
		{"wide-sorted", false, 0, wide(90, true, shortName)},
		{"wide-shuffled", false, 0, wide(90, false, shortName)},
		{"wide-long-prefix", false, 0, wide(45, false, prefixedName)},
		{"wide-unicode-names", false, 0, wide(80, false, unicodeName)},
		{"wide-unicode-names-u-escaped", false, 'u', wide(55, false, unicodeName)},
		{"records-pretty", true, 0, records},
		{"numbers-integers", false, 0, numbers('i')},
		{"numbers-decimals", false, 0, numbers('d')},
		{"numbers-exponents", false, 0, numbers('e')},
		{"numbers-full-precision", false, 0, numbers('f')},
		{"numbers-edge-cases", true, 0, numbers('x')},
	}
	shapes := make([]benchShape, 0, len(gens))
	for k, gn := range gens {
		g := &benchShapeGen{r: mrand.New(mrand.NewPCG(34, uint64(k))), indent: gn.indent, escape: gn.escape}
		gn.write(g)
		shapes = append(shapes, benchShape{gn.name, []byte(g.sb.String())})
	}
	return shapes
}

// BenchmarkArgsFingerprintShapes measures ArgsFingerprint of each
// generated shape as sent and, where that differs, of its canonical form,
// each beside sha256.Sum256 of the same bytes measured in the same run:
// the two loops alternate in 16 slices of b.N iterations on one locked OS
// thread, and x-sha256 is the ratio of their CPU times (cpu-ns/op over
// sha256-cpu-ns/op), which on a busy machine counts no time spent waiting
// for a CPU.
func BenchmarkArgsFingerprintShapes(b *testing.B) {
	for _, s := range benchShapes() {
		canon, err := CanonicalJSON(s.text)
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		inputs := []benchShape{{s.name, s.text}}
		if !bytes.Equal(canon, s.text) {
			inputs = append(inputs, benchShape{s.name + "-canonical", canon})
		}
		for _, in := range inputs {
			if fp, err := ArgsFingerprint(in.text); err != nil || fp != sha256.Sum256(canon) {
				b.Fatalf("%s: fingerprint is not the SHA-256 of the canonical form (%v)", in.name, err)
			}
			b.Run(in.name, func(b *testing.B) { benchVersusSHA256(b, in.text) })
		}
	}
}

// benchVersusSHA256 times ArgsFingerprint(text) against sha256.Sum256(text)
// in alternating slices, as BenchmarkArgsFingerprintShapes describes.
func benchVersusSHA256(b *testing.B, text []byte) {
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var fpCPU, shaCPU int64
	const slices = 16
	for done := 0; done < b.N; {
		n := max(1, b.N/slices)
		n = min(n, b.N-done)
		t0 := threadCPU()
		for range n {
			if _, err := ArgsFingerprint(text); err != nil {
				b.Fatal(err)
			}
		}
		t1 := threadCPU()
		b.StopTimer()
		t2 := threadCPU()
		for range n {
			benchSink = sha256.Sum256(text)
		}
		t3 := threadCPU()
		b.StartTimer()
		fpCPU += t1 - t0
		shaCPU += t3 - t2
		done += n
	}
	if fpCPU > 0 && shaCPU > 0 {
		b.ReportMetric(float64(fpCPU)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(shaCPU)/float64(b.N), "sha256-cpu-ns/op")
		b.ReportMetric(float64(fpCPU)/float64(shaCPU), "x-sha256")
	}
}

// benchSink keeps the compiler from discarding a floor's result.
var benchSink [32]byte

// BenchmarkCursorVerifyRing shows that Verify's cost does not depend on
// the size of the ring: the cursor names its key by id (raw[5:9]), so
// Verify runs one MAC whatever the ring holds. The cursor is signed by the
// LAST key of the ring (a previous key, the worst case of a verifier that
// tried every key). floor is HMAC-SHA256 (crypto/hmac, keyed once) over
// exactly the bytes Verify MACs, body || scope.
func BenchmarkCursorVerifyRing(b *testing.B) {
	keys := make([][]byte, 10)
	for i := range keys {
		keys[i] = bytes.Repeat([]byte{byte(i + 1)}, 32)
	}
	var cursor string
	for _, n := range []int{1, 10} {
		ring := keys[10-n:]
		kr, err := NewKeyring(ring[0], ring[1:]...)
		if err != nil {
			b.Fatal(err)
		}
		iss, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: []byte("bench-01")})
		if err != nil {
			b.Fatal(err)
		}
		signer, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(b, keys[9]), Session: []byte("bench-01")})
		if err != nil {
			b.Fatal(err)
		}
		if cursor, err = signer.Issue(benchPayload()); err != nil {
			b.Fatal(err)
		}
		b.Run("ring="+strconv.Itoa(n), func(b *testing.B) { benchVerifyLoop(b, iss, cursor) })
	}
	raw, err := b64.DecodeString(cursor)
	if err != nil {
		b.Fatal(err)
	}
	msg := appendScope(append([]byte(nil), raw[:len(raw)-macSize]...), &benchScope)
	b.Run("floor", func(b *testing.B) {
		m := hmac.New(sha256.New, subkey(keys[9], cursorKeyLabel))
		var sum [sha256.Size]byte
		b.ReportAllocs()
		for b.Loop() {
			m.Reset()
			m.Write(msg)
			m.Sum(sum[:0])
		}
		if !hmac.Equal(sum[:], raw[len(raw)-macSize:]) {
			b.Fatal("the floor's MAC is not the cursor's")
		}
	})
}
