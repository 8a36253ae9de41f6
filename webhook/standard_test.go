package webhook

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"bytes"
	"sync/atomic"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/replay"
)

// TestStandardWebhooks pins the StandardWebhooks scheme.
func TestStandardWebhooks(t *testing.T) {
	// A timestamp of "0" is one digit, not a leading zero: it is well formed,
	// so an authentic delivery signed at 0 is refused as too old (401), not
	// as malformed (400).
	t.Run("timestamp zero is well-formed", func(t *testing.T) {
		v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clocktest.At(time.Unix(stdTS, 0)).Now})
		key, err := schemeStandard.parseSecret(stdSecret)
		if err != nil {
			t.Fatal(err)
		}
		h := stdHeaders(stdID, 0, signStandard(key, stdID, 0, []byte(stdBody)))
		if h.Get(HeaderStandardTimestamp) != "0" {
			t.Fatalf("test premise: timestamp %q", h.Get(HeaderStandardTimestamp))
		}
		if _, err := v.Verify(h, []byte(stdBody)); !errors.Is(err, ErrTimestamp) || Reason(err) != "timestamp too old" {
			t.Fatalf("Verify = %v (%q), want ErrTimestamp (timestamp too old)", err, Reason(err))
		}
	})

	// A v1 entry is the canonical standard base64 of exactly 32 bytes: 44
	// characters holding 33 bytes (no padding) whose first 32 are the genuine
	// MAC are not a signature, under Standard Webhooks and Svix.
	t.Run("refuses v1 entry of thirty three bytes", func(t *testing.T) {
		key, err := schemeStandard.parseSecret(stdSecret)
		if err != nil {
			t.Fatal(err)
		}
		long := "v1," + base64.StdEncoding.EncodeToString(append(standardMAC(key, stdID+"."+strconv.Itoa(stdTS)+"."+stdBody), 0))
		if len(long) != len(stdSig) {
			t.Fatalf("test premise: %d characters", len(long))
		}
		for _, scheme := range []Scheme{StandardWebhooks(), Svix()} {
			v := newVerifier(t, Config{Scheme: scheme, Secrets: []string{stdSecret}, Now: clocktest.At(time.Unix(stdTS, 0)).Now})
			p := v.p
			h := http.Header{}
			h.Set(p.idHeader, stdID)
			h.Set(p.tsHeader, strconv.Itoa(stdTS))
			h.Set(p.sigHeader, stdSig)
			if _, err := v.Verify(h, []byte(stdBody)); err != nil {
				t.Fatalf("%v: genuine delivery refused: %v", scheme, err)
			}
			h.Set(p.sigHeader, long)
			if _, err := v.Verify(h, []byte(stdBody)); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
				t.Fatalf("%v: 33-byte entry: %v (%q), want ErrSignature (signature header malformed)", scheme, err, Reason(err))
			}
		}
	})

	// A v1 entry of the right length that is not canonical base64 is skipped,
	// not the end of the header: the genuine entry after it is still found.
	t.Run("skips undecodable v1 entry and checks the next", func(t *testing.T) {
		v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clocktest.At(time.Unix(stdTS, 0)).Now})
		for _, bad := range []string{
			"v1," + strings.Repeat("!", sigTextLen),          // not base64
			"v1," + strings.Repeat("A", sigTextLen-1) + "B",  // 33 bytes, no padding
			"v1," + strings.Repeat("A", sigTextLen-2) + "==", // 31 bytes
			"v1," + strings.Repeat("A", sigTextLen-2) + "B=", // non-zero trailing bits
		} {
			if len(bad) != len(stdSig) {
				t.Fatalf("test premise: %q is %d characters", bad, len(bad))
			}
			if _, err := v.Verify(stdHeaders(stdID, stdTS, bad+" "+stdSig), []byte(stdBody)); err != nil {
				t.Fatalf("%q then the genuine entry: %v", bad, err)
			}
		}
	})

	t.Run("secret prefix is optional", func(t *testing.T) {
		key, err := schemeStandard.parseSecret(stdSecret)
		if err != nil {
			t.Fatal(err)
		}
		key2, err := schemeStandard.parseSecret(strings.TrimPrefix(stdSecret, "whsec_"))
		if err != nil || !bytes.Equal(key, key2) {
			t.Fatalf("secret without prefix: %v", err)
		}
	})

	t.Run("accepts any of several signatures", func(t *testing.T) {
		clk := newStepClock()
		both := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret2, stdSecret}, Now: clk.Now})
		h := http.Header{}
		if err := both.Sign(h, "msg_1", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if n := len(strings.Fields(h.Get("webhook-signature"))); n != 2 {
			t.Fatalf("signer with two secrets sent %d signatures", n)
		}
		for _, secrets := range [][]string{{stdSecret}, {stdSecret2}, {stdSecret2, stdSecret}} {
			v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: secrets, Now: clk.Now})
			if _, err := v.Verify(h, []byte("{}")); err != nil {
				t.Fatalf("verifier with %d secrets: %v", len(secrets), err)
			}
		}
	})

	t.Run("verifier rejects", func(t *testing.T) {
		clk := clocktest.At(time.Unix(stdTS, 0))
		v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now})
		key, _ := schemeStandard.parseSecret(stdSecret)
		otherKey, _ := schemeStandard.parseSecret(stdSecret2)
		tol := int64(DefaultTolerance / time.Second)
		tests := []struct {
			name   string
			h      http.Header
			body   string
			want   error
			reason string
		}{
			{"tampered body", stdHeaders(stdID, stdTS, stdSig), `{"test": 2432232315}`, ErrSignature, "signature mismatch"},
			{"tampered id", stdHeaders("msg_other", stdTS, stdSig), stdBody, ErrSignature, "signature mismatch"},
			{"tampered timestamp", stdHeaders(stdID, stdTS+1, stdSig), stdBody, ErrSignature, "signature mismatch"},
			{"other secret", stdHeaders(stdID, stdTS, signStandard(otherKey, stdID, stdTS, []byte(stdBody))), stdBody, ErrSignature, "signature mismatch"},
			{"only unknown versions", stdHeaders(stdID, stdTS, "v2,"+stdSig[3:]), stdBody, ErrSignature, "signature header malformed"},
			{"signature not base64", stdHeaders(stdID, stdTS, "v1,"+strings.Repeat("!", 44)), stdBody, ErrSignature, "signature header malformed"},
			{"signature header over 4 KiB", stdHeaders(stdID, stdTS, strings.Repeat(" ", 4096)+stdSig), stdBody, ErrSignature, "signature header malformed"},
			{"many well-formed signatures, none genuine", stdHeaders(stdID, stdTS, strings.Repeat(signStandard(otherKey, stdID, stdTS, []byte(stdBody))+" ", 40)), stdBody, ErrSignature, "signature mismatch"},
			{"timestamp with a leading zero", func() http.Header {
				h := stdHeaders(stdID, stdTS, stdSig)
				h.Set("webhook-timestamp", "0"+strconv.Itoa(stdTS))
				return h
			}(), stdBody, ErrMalformed, "timestamp malformed"},
			{"missing signature", func() http.Header { h := stdHeaders(stdID, stdTS, stdSig); h.Del("webhook-signature"); return h }(), stdBody, ErrSignature, "signature header missing or repeated"},
			{"missing id", func() http.Header { h := stdHeaders(stdID, stdTS, stdSig); h.Del("webhook-id"); return h }(), stdBody, ErrMalformed, "delivery id header missing or repeated"},
			{"missing timestamp", func() http.Header { h := stdHeaders(stdID, stdTS, stdSig); h.Del("webhook-timestamp"); return h }(), stdBody, ErrMalformed, "timestamp header missing or repeated"},
			{"repeated timestamp", func() http.Header { h := stdHeaders(stdID, stdTS, stdSig); h.Add("webhook-timestamp", "1"); return h }(), stdBody, ErrMalformed, "timestamp header missing or repeated"},
			{"timestamp not a number", func() http.Header {
				h := stdHeaders(stdID, stdTS, stdSig)
				h.Set("webhook-timestamp", "soon")
				return h
			}(), stdBody, ErrMalformed, "timestamp malformed"},
			{"negative timestamp", stdHeaders(stdID, -stdTS, stdSig), stdBody, ErrMalformed, "timestamp malformed"},
			{"timestamp too long", func() http.Header {
				h := stdHeaders(stdID, stdTS, stdSig)
				h.Set("webhook-timestamp", "0001614265330")
				return h
			}(), stdBody, ErrMalformed, "timestamp malformed"},
			{"id with a dot", stdHeaders("msg.1", stdTS, stdSig), stdBody, ErrMalformed, "delivery id has a forbidden character"},
			{"too old", stdHeaders(stdID, stdTS-tol-1, signStandard(key, stdID, stdTS-tol-1, []byte(stdBody))), stdBody, ErrTimestamp, "timestamp too old"},
			{"too far in the future", stdHeaders(stdID, stdTS+tol+1, signStandard(key, stdID, stdTS+tol+1, []byte(stdBody))), stdBody, ErrTimestamp, "timestamp in the future"},
			{"old and forged", stdHeaders(stdID, stdTS-tol-1, stdSig), stdBody, ErrSignature, "signature mismatch"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := v.Verify(tc.h, []byte(tc.body))
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if got := Reason(err); got != tc.reason {
					t.Fatalf("Reason = %q, want %q", got, tc.reason)
				}
			})
		}
	})

	t.Run("retry with fresh timestamp is duplicate", func(t *testing.T) {
		clk := newStepClock()
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now}
		next := &recordingHandler{}
		mw := newVerifier(t, cfg).Middleware(next)
		signer := newSigner(t, cfg)
		deliver(mw, signed(t, signer, "evt-1", "payload"), "payload")
		// The sender retries two hours later: same ID, fresh timestamp and signature.
		clk.Advance(2 * time.Hour)
		if rec := deliver(mw, signed(t, signer, "evt-1", "payload"), "payload"); rec.Code != http.StatusOK {
			t.Fatalf("retry: status %d", rec.Code)
		}
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("handler called %d times, want 1", n)
		}
		// Once the dedup window has passed, the ID is forgotten.
		clk.Advance(DefaultDedupWindow)
		deliver(mw, signed(t, signer, "evt-1", "payload"), "payload")
		if n := next.calls.Load(); n != 2 {
			t.Fatalf("handler called %d times after the dedup window, want 2", n)
		}
	})

	t.Run("duplicate refused until timestamp leaves window", func(t *testing.T) {
		clk := newStepClock()
		// A dedup window shorter than the tolerance: the claim must still
		// outlive the timestamp check.
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now, DedupWindow: time.Second}
		next := &recordingHandler{}
		mw := newVerifier(t, cfg).Middleware(next)
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		deliver(mw, h, "payload")
		// At the last instant the timestamp is still accepted, the claim must
		// still be live.
		clk.Advance(DefaultTolerance)
		if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK {
			t.Fatalf("replay at the window edge: status %d", rec.Code)
		}
		clk.Advance(time.Second)
		if rec := deliver(mw, h, "payload"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("replay after the window: status %d, want 401", rec.Code)
		}
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("handler called %d times, want 1", n)
		}
	})

	// Standard Webhooks IDs are held SkewMargin past the last instant the
	// timestamp check accepts them: an instance whose clock lags by 59 s still
	// refuses a replay the leading instance processed, even with a short dedup
	// window.
	t.Run("replay refused on instance lagging by skew margin", func(t *testing.T) {
		leading := newStepClock()
		lagging := func() time.Time { return leading.Now().Add(-replay.SkewMargin + time.Second) }
		store := &replay.MemoryStore{Now: leading.Now} // the store keeps the leading clock
		base := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", DedupWindow: time.Second}
		a, b := base, base
		a.Now, b.Now = leading.Now, lagging
		next := &recordingHandler{}
		h := signed(t, newSigner(t, a), "evt-1", "payload")
		if rec := deliver(newVerifier(t, a).Middleware(next), h, "payload"); rec.Code != http.StatusOK || next.calls.Load() != 1 {
			t.Fatalf("first delivery: status %d", rec.Code)
		}
		// On the lagging instance's clock the timestamp is exactly at the edge
		// of the tolerance: still accepted, so only the store can refuse it.
		leading.Advance(DefaultTolerance + replay.SkewMargin - time.Second)
		var dups atomic.Int32
		b.OnDuplicate = func(*http.Request, Delivery) { dups.Add(1) }
		if rec := deliver(newVerifier(t, b).Middleware(next), h, "payload"); rec.Code != http.StatusOK || next.calls.Load() != 1 || dups.Load() != 1 {
			t.Fatalf("replay on the lagging instance: status %d, handler calls %d, duplicates %d; want a refused duplicate", rec.Code, next.calls.Load(), dups.Load())
		}
	})

	// A header with more than 16 entries is not refused: every v1 entry up to
	// the header cap is compared, so the genuine one is found even after 84
	// well-formed forgeries (85 entries of 47 bytes fill 4096 bytes).
	t.Run("checks every v1 entry up to the header cap", func(t *testing.T) {
		clk := clocktest.At(time.Unix(stdTS, 0))
		for _, scheme := range []Scheme{StandardWebhooks(), Svix()} {
			v := newVerifier(t, Config{Scheme: scheme, Secrets: []string{stdSecret}, Now: clk.Now})
			p := v.p
			junk := "v1," + strings.Repeat("A", 43) + "= "
			for _, n := range []int{MaxSignatures, MaxSignatures + 1, maxV1Entries - 1} {
				sig := strings.Repeat(junk, n) + stdSig
				if len(sig) > MaxSignatureHeaderBytes {
					t.Fatalf("%d junk entries make %d bytes", n, len(sig))
				}
				h := http.Header{}
				h.Set(p.idHeader, stdID)
				h.Set(p.tsHeader, strconv.Itoa(stdTS))
				h.Set(p.sigHeader, sig)
				if _, err := v.Verify(h, []byte(stdBody)); err != nil {
					t.Fatalf("%v: %d forged entries then the genuine one: %v", scheme, n, err)
				}
			}
		}
		if maxV1Entries != 85 {
			t.Fatalf("maxV1Entries = %d, want 85", maxV1Entries)
		}
	})

	// A padded whsec_ secret (its length not a multiple of 3 bytes) is
	// accepted, as is the same secret without padding; both are one key.
	t.Run("accepts padded and unpadded secrets", func(t *testing.T) {
		padded := "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3OA==" // 25 bytes
		unpadded := strings.TrimRight(padded, "=")
		a, err := schemeStandard.parseSecret(padded)
		if err != nil {
			t.Fatalf("padded: %v", err)
		}
		b, err := schemeStandard.parseSecret(unpadded)
		if err != nil || string(a) != string(b) || len(a) != 25 {
			t.Fatalf("unpadded: %x, %v; want %x", b, err, a)
		}
		for _, bad := range []string{padded[:len(padded)-1], padded + "="} {
			if _, err := schemeStandard.parseSecret(bad); !errors.Is(err, ErrSecretInvalid) {
				t.Fatalf("parseSecret(%q) = %v, want ErrSecretInvalid", bad, err)
			}
		}
		clk := newStepClock()
		s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{padded}, Now: clk.Now})
		v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{unpadded}, Now: clk.Now})
		if _, err := v.Verify(signed(t, s, "evt-1", "x"), []byte("x")); err != nil {
			t.Fatalf("delivery signed with the padded secret, verified with the unpadded one: %v", err)
		}
	})
}

func TestSignatureHeaderAtCapAcceptedAndOneOverRefused(t *testing.T) {
	clk := clocktest.At(time.Unix(stdTS, 0))
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now})
	at := stdSig + strings.Repeat(" ", MaxSignatureHeaderBytes-len(stdSig))
	if len(at) != 4096 {
		t.Fatalf("header of %d bytes", len(at))
	}
	if _, err := v.Verify(stdHeaders(stdID, stdTS, at), []byte(stdBody)); err != nil {
		t.Fatalf("4096-byte signature header: %v", err)
	}
	_, err := v.Verify(stdHeaders(stdID, stdTS, at+" "), []byte(stdBody))
	if !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
		t.Fatalf("4097-byte signature header: %v", err)
	}
}

// A 12-digit timestamp is well formed: the signature (then the window)
// decides, so the middleware answers 401, not 400. Thirteen digits are
// malformed (400).
func TestTwelveDigitTimestampIsUnauthorizedNotBadRequest(t *testing.T) {
	clk := clocktest.At(time.Unix(stdTS, 0))
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now}
	next := &recordingHandler{}
	mw := newVerifier(t, cfg).Middleware(next)
	key, _ := schemeStandard.parseSecret(stdSecret)
	for _, tc := range []struct {
		ts   int64
		sig  string
		code int
	}{
		{999_999_999_999, stdSig, http.StatusUnauthorized},
		{999_999_999_999, signStandard(key, stdID, 999_999_999_999, []byte(stdBody)), http.StatusUnauthorized},
		{1_000_000_000_000, stdSig, http.StatusBadRequest},
	} {
		if rec := deliver(mw, stdHeaders(stdID, tc.ts, tc.sig), stdBody); rec.Code != tc.code {
			t.Fatalf("timestamp %s: status %d, want %d", strconv.FormatInt(tc.ts, 10), rec.Code, tc.code)
		}
	}
	if next.calls.Load() != 0 {
		t.Fatal("handler called")
	}
}
