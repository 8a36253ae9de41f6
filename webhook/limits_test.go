package webhook

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
)

// A body of exactly MaxBody bytes is accepted; one byte more is refused,
// by Verify and by the middleware (whether declared or only read).
func TestBodyAtMaxBodyAcceptedAndOneOverRefused(t *testing.T) {
	const max = 64
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, MaxBody: max}
	v := newVerifier(t, cfg)
	s := newSigner(t, cfg)
	at, over := strings.Repeat("a", max), strings.Repeat("a", max+1)
	if _, err := v.Verify(signed(t, s, "evt-1", at), []byte(at)); err != nil {
		t.Fatalf("body of MaxBody bytes: %v", err)
	}
	if _, err := v.Verify(signed(t, s, "evt-2", over), []byte(over)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("body of MaxBody+1 bytes: %v, want ErrTooLarge", err)
	}
	next := &recordingHandler{}
	mw := v.Middleware(next)
	if rec := deliver(mw, signed(t, s, "evt-3", at), at); rec.Code != http.StatusOK || next.calls.Load() != 1 {
		t.Fatalf("middleware, MaxBody bytes: status %d, calls %d", rec.Code, next.calls.Load())
	}
	for _, declared := range []bool{true, false} {
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(over))
		for k, vs := range signed(t, s, "evt-4", over) {
			req.Header[k] = vs
		}
		if !declared {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || next.calls.Load() != 1 {
			t.Fatalf("middleware, MaxBody+1 bytes (declared %v): status %d, calls %d", declared, rec.Code, next.calls.Load())
		}
	}
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

// A header with more than 16 entries is not refused: every v1 entry up to
// the header cap is compared, so the genuine one is found even after 84
// well-formed forgeries (85 entries of 47 bytes fill 4096 bytes).
func TestStandardWebhooksChecksEveryV1EntryUpToTheHeaderCap(t *testing.T) {
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
}

// IDs of 256 bytes are accepted and 257 refused; every printable ASCII
// character but space is allowed ('~' and '!' at the edges), DEL and
// controls are not.
func TestDeliveryIDLimits(t *testing.T) {
	clk := newStepClock()
	for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
		secret := hmacSecret
		if scheme == StandardWebhooks() {
			secret = stdSecret
		}
		cfg := Config{Scheme: scheme, Secrets: []string{secret}, Now: clk.Now}
		v := newVerifier(t, cfg)
		s := newSigner(t, cfg)
		for _, id := range []string{strings.Repeat("a", MaxIDBytes), "evt~1", "!", "~"} {
			if _, err := v.Verify(signed(t, s, id, "x"), []byte("x")); err != nil {
				t.Fatalf("%v: id %q: %v", scheme, id, err)
			}
		}
		for _, id := range []string{strings.Repeat("a", MaxIDBytes+1), "evt\x7f", "evt\x00", "a b", "\t"} {
			h := signed(t, s, "evt-1", "x")
			h.Set(v.p.idHeader, id)
			if _, err := v.Verify(h, []byte("x")); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v: id %q: %v, want ErrMalformed", scheme, id, err)
			}
			if err := s.Sign(http.Header{}, id, nil); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v: Sign(id %q) = %v, want ErrMalformed", scheme, id, err)
			}
		}
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

// The handler's status is the first it sends: a stray WriteHeader(500)
// after a 200 keeps the claim (the retry is a duplicate), while a 500
// followed by a Flush releases it (the retry is processed).
func TestMiddlewareRecordsTheFirstStatusTheHandlerSends(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handler   func(w http.ResponseWriter)
		wantCalls int32
	}{
		{"200 then stray 500 keeps the claim", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			w.WriteHeader(http.StatusInternalServerError)
		}, 1},
		{"Write then stray 500 keeps the claim", func(w http.ResponseWriter) {
			w.Write([]byte("done"))
			w.WriteHeader(http.StatusInternalServerError)
		}, 1},
		{"500 then Flush releases the claim", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusInternalServerError)
			w.(http.Flusher).Flush()
		}, 2},
		{"Flush then 500 keeps the claim", func(w http.ResponseWriter) {
			w.(http.Flusher).Flush()
			w.WriteHeader(http.StatusInternalServerError)
		}, 1},
		{"103 then 500 releases the claim", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusInternalServerError)
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
			var calls int32
			mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				tc.handler(w)
			}))
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			deliver(mw, h, "payload")
			deliver(mw, h, "payload")
			if calls != tc.wantCalls {
				t.Fatalf("handler called %d times, want %d", calls, tc.wantCalls)
			}
		})
	}
}
