package ctoken

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkOneTimeMint measures Mint of the runClaims token with the
// system clock (mint) beside its floor: a fresh 16-byte crypto/rand nonce
// written into the same payload, one HMAC-SHA256 over it (a keyed state
// reused: Reset, Write, Sum) and base64url of payload and tag after the
// "ot1." prefix into one string, buffers allocated once. Mint also reads
// the clock, sorts the claim names and lays out the payload, which the
// floor does not.
func BenchmarkOneTimeMint(b *testing.B) {
	key := fixedKey(0x40)
	o := newOneTime(b, OneTimeConfig{Keys: mustKeyring(b, key)})
	b.Run("mint", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			if _, err := o.Mint(runClaims); err != nil {
				b.Fatal(err)
			}
		}
		cpu.done(b)
	})
	raw, err := b64.DecodeString(strings.TrimPrefix(mint(b, o, runClaims), oneTimePrefix))
	if err != nil {
		b.Fatal(err)
	}
	payload := raw[:len(raw)-macSize] // its capacity holds the tag
	h := hmac.New(sha256.New, subkey(key, oneTimeLabel))
	buf := make([]byte, 0, len(oneTimePrefix)+b64.EncodedLen(len(raw)))
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		for b.Loop() {
			rand.Read(payload[oneTimeNonceAt : oneTimeNonceAt+oneTimeNonceLen])
			h.Reset()
			h.Write(payload)
			_ = string(b64.AppendEncode(append(buf[:0], oneTimePrefix...), h.Sum(payload)))
		}
		cpu.done(b)
	})
}

func BenchmarkOneTimeMintAndRedeem(b *testing.B) {
	// The clock advances a second per token, so the store holds about 600
	// live entries (one per token of the last ten minutes) and never fills.
	clk := newStepClock()
	o := newOneTime(b, OneTimeConfig{Now: clk.Now})
	ctx := context.Background()
	for b.Loop() {
		clk.Advance(time.Second)
		tok, err := o.Mint(runClaims)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := o.Redeem(ctx, tok, runClaims); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOneTimeVerify measures Verify of a token signed by the LAST key
// of a ring of 1 and of 10 keys: the token names its key, so both cost one
// MAC. floor is the bare work on the same token: strict base64url decoding
// and one HMAC-SHA256 (a keyed state reused: Reset, Write, Sum) over exactly
// the bytes Verify MACs, compared in constant time. Verify also decodes the
// claims into a fresh map, which the floor does not. claims-16 is a token
// of 16 claims (past the 8 a map holds without growing), beside its own
// floor, floor-claims-16.
func BenchmarkOneTimeVerify(b *testing.B) {
	keys := make([][]byte, 10)
	for i := range keys {
		keys[i] = fixedKey(byte(0x40 + i))
	}
	now := time.Unix(1767323045, 0)
	for _, n := range []int{1, 10} {
		last := keys[n-1]
		signer := newOneTime(b, OneTimeConfig{Keys: mustKeyring(b, last), Now: fixedClock(now)})
		o := newOneTime(b, OneTimeConfig{Keys: mustKeyring(b, keys[0], keys[1:n]...), Now: fixedClock(now)})
		tok := mint(b, signer, runClaims)
		b.Run("ring-"+strconv.Itoa(n), func(b *testing.B) { benchOneTimeVerify(b, o, tok) })
	}
	tok := mint(b, newOneTime(b, OneTimeConfig{Keys: mustKeyring(b, keys[9]), Now: fixedClock(now)}), runClaims)
	h := hmac.New(sha256.New, subkey(keys[9], oneTimeLabel))
	b.Run("floor", func(b *testing.B) { benchFloorVerify(b, h, strings.TrimPrefix(tok, oneTimePrefix)) })

	many := map[string]string{}
	for i := range 16 {
		many["claim_"+strconv.Itoa(10+i)] = "value_" + strconv.Itoa(i)
	}
	o := newOneTime(b, OneTimeConfig{Keys: mustKeyring(b, keys[9]), Now: fixedClock(now)})
	tok = mint(b, o, many)
	b.Run("claims-16", func(b *testing.B) { benchOneTimeVerify(b, o, tok) })
	b.Run("floor-claims-16", func(b *testing.B) { benchFloorVerify(b, h, strings.TrimPrefix(tok, oneTimePrefix)) })
}

// benchOneTimeVerify measures o.Verify(tok), which must succeed.
func benchOneTimeVerify(b *testing.B, o *OneTimeIssuer, tok string) {
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		if _, err := o.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
	cpu.done(b)
}
