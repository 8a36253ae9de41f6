package ctoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

// benchSortKey is the sort key of a keyset page: a creation time and an ID.
var benchSortKey = itemKey{Created: 1_763_800_000, ID: "item-7f3c9a12-4b8e"}

// BenchmarkKeyset measures IssueKeyset and VerifyKeyset (the typed sort
// key encoded and decoded as CBOR) of the benchmark scope, beside the HMAC
// floor of the same cursor body: HMAC-SHA256 plus base64url, as
// BenchmarkFloorHMAC measures it, with no CBOR at all.
func BenchmarkKeyset(b *testing.B) {
	iss := benchIssuer(b)
	c, err := IssueKeyset(iss, benchScope, benchSortKey)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("issue", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if _, err := IssueKeyset(iss, benchScope, benchSortKey); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
	b.Run("verify", func(b *testing.B) {
		b.ReportMetric(float64(len(c)), "token-bytes")
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if k, err := VerifyKeyset[itemKey](iss, c, benchScope); err != nil || k != benchSortKey {
				b.Fatal(k, err)
			}
		}
		cpu.done(b)
	})
	raw, err := b64.DecodeString(c)
	if err != nil {
		b.Fatal(err)
	}
	body := raw[:len(raw)-macSize]
	h := hmac.New(sha256.New, subkey(benchKey, "bench floor"))
	sig := append(append([]byte(nil), body...), make([]byte, macSize)...)
	buf := make([]byte, 0, b64.EncodedLen(len(sig)))
	b.Run("floor/sign", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			h.Reset()
			h.Write(body)
			sig = h.Sum(sig[:len(body)])
			_ = string(b64.AppendEncode(buf[:0], sig))
		}
		cpu.done(b)
	})
	h.Reset()
	h.Write(body)
	token := b64.EncodeToString(h.Sum(append([]byte(nil), body...)))
	b.Run("floor/verify", func(b *testing.B) {
		b.ReportMetric(float64(len(token)), "token-bytes")
		benchFloorVerify(b, h, token)
	})
}
