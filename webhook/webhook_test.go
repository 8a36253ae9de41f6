package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/replay"
)

const (
	githubSecret = "It's a Secret to Everybody"
	githubBody   = "Hello, World!"
	githubSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

	// The Standard Webhooks reference vector.
	stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	stdTS     = 1614265330
	stdBody   = `{"test": 2432232314}`
	stdSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	// A second Standard Webhooks secret (24 random bytes) for rotation tests.
	stdSecret2 = "whsec_3q2+7wAAAAD+ZmxvYXRpbmctcG9pbnQh"
)

func newVerifier(t testing.TB, cfg Config) *Verifier {
	t.Helper()
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// newSigner returns a signer for the sending side of cfg: the receiving
// options, which NewSigner refuses, are left out.
func newSigner(t testing.TB, cfg Config) *Signer {
	t.Helper()
	s, err := NewSigner(Config{Scheme: cfg.Scheme, Secrets: cfg.Secrets,
		SignatureHeader: cfg.SignatureHeader, IDHeader: cfg.IDHeader, Now: cfg.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hmacSecret is an HMAC-SHA256 secret long enough for FIPS 140-3 mode.
const hmacSecret = "hmac-test-secret-1"

// stepClock is the shared settable test clock.
type stepClock = clocktest.Clock

func newStepClock() *stepClock { return clocktest.New() }

// The signatures below are built with crypto/hmac directly, independently
// of the package's pooled keys and parsers.

// signSHA256 is the HMACSHA256 signature header value of body.
func signSHA256(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// standardMAC is HMAC-SHA256(secret, msg).
func standardMAC(secret []byte, msg string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// signStandard is one Standard Webhooks signature entry.
func signStandard(secret []byte, id string, ts int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(standardMAC(secret, id+"."+strconv.FormatInt(ts, 10)+"."+string(body)))
}

func TestStandardWebhooksSecretPrefixIsOptional(t *testing.T) {
	key, err := schemeStandard.parseSecret(stdSecret)
	if err != nil {
		t.Fatal(err)
	}
	key2, err := schemeStandard.parseSecret(strings.TrimPrefix(stdSecret, "whsec_"))
	if err != nil || !bytes.Equal(key, key2) {
		t.Fatalf("secret without prefix: %v", err)
	}
}

func stdHeaders(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestStandardWebhookAcceptsAnyOfSeveralSignatures(t *testing.T) {
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
}

func TestWebhookSHA256AcceptsAnyConfiguredSecret(t *testing.T) {
	oldSigner := newSigner(t, Config{Scheme: HMACSHA256(), Secrets: []string{"old secret, 16+ bytes"}})
	h := http.Header{}
	if err := oldSigner.Sign(h, "d1", []byte("body")); err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{"new secret, 16+ bytes", "old secret, 16+ bytes"}})
	if _, err := v.Verify(h, []byte("body")); err != nil {
		t.Fatalf("delivery signed with the previous secret: %v", err)
	}
}

func TestWebhookSHA256VerifierRejects(t *testing.T) {
	v := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{githubSecret}, MaxBody: 64})
	good := func() http.Header {
		h := http.Header{}
		h.Set("X-Webhook-ID", "delivery-1")
		h.Set("X-Webhook-Signature", githubSig)
		return h
	}
	tests := []struct {
		name   string
		edit   func(http.Header)
		body   string
		want   error
		reason string
	}{
		{"tampered body", nil, "Hello, World?", ErrSignature, "signature mismatch"},
		{"wrong secret", func(h http.Header) {
			h.Set("X-Webhook-Signature", signSHA256([]byte("another secret, 16+ bytes"), []byte(githubBody)))
		}, githubBody, ErrSignature, "signature mismatch"},
		{"missing signature", func(h http.Header) { h.Del("X-Webhook-Signature") }, githubBody, ErrSignature, "signature header missing or repeated"},
		{"empty signature", func(h http.Header) { h.Set("X-Webhook-Signature", "") }, githubBody, ErrSignature, "signature header missing or repeated"},
		{"repeated signature", func(h http.Header) { h.Add("X-Webhook-Signature", githubSig) }, githubBody, ErrSignature, "signature header missing or repeated"},
		{"bare hex", func(h http.Header) { h.Set("X-Webhook-Signature", githubSig[len("sha256="):]) }, githubBody, ErrSignature, "signature header malformed"},
		{"sha1 prefix", func(h http.Header) { h.Set("X-Webhook-Signature", "sha1="+githubSig[len("sha256="):]) }, githubBody, ErrSignature, "signature header malformed"},
		{"upper-case prefix", func(h http.Header) { h.Set("X-Webhook-Signature", "SHA256="+githubSig[len("sha256="):]) }, githubBody, ErrSignature, "signature header malformed"},
		{"truncated hex", func(h http.Header) { h.Set("X-Webhook-Signature", githubSig[:len(githubSig)-2]) }, githubBody, ErrSignature, "signature header malformed"},
		{"non-hex", func(h http.Header) { h.Set("X-Webhook-Signature", githubSig[:len(githubSig)-1]+"g") }, githubBody, ErrSignature, "signature header malformed"},
		{"missing id", func(h http.Header) { h.Del("X-Webhook-ID") }, githubBody, ErrMalformed, "delivery id header missing or repeated"},
		{"repeated id", func(h http.Header) { h.Add("X-Webhook-ID", "delivery-2") }, githubBody, ErrMalformed, "delivery id header missing or repeated"},
		{"id too long", func(h http.Header) { h.Set("X-Webhook-ID", strings.Repeat("a", 257)) }, githubBody, ErrMalformed, "delivery id empty or too long"},
		{"id with space", func(h http.Header) { h.Set("X-Webhook-ID", "a b") }, githubBody, ErrMalformed, "delivery id has a forbidden character"},
		{"id with non-ASCII", func(h http.Header) { h.Set("X-Webhook-ID", "é") }, githubBody, ErrMalformed, "delivery id has a forbidden character"},
		{"body over cap", nil, strings.Repeat("x", 65), ErrTooLarge, "body over cap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			if tc.edit != nil {
				tc.edit(h)
			}
			_, err := v.Verify(h, []byte(tc.body))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if got := Reason(err); got != tc.reason {
				t.Fatalf("Reason = %q, want %q", got, tc.reason)
			}
		})
	}
}

func TestStandardWebhookVerifierRejects(t *testing.T) {
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
}

func TestNewVerifierRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"no secrets", Config{Scheme: HMACSHA256()}, ErrNoSecret},
		{"empty secret", Config{Scheme: HMACSHA256(), Secrets: []string{""}}, ErrSecretInvalid},
		{"whsec not base64", Config{Scheme: StandardWebhooks(), Secrets: []string{"whsec_not base64!"}}, ErrSecretInvalid},
		{"whsec too short", Config{Scheme: StandardWebhooks(), Secrets: []string{"whsec_c2hvcnQ="}}, ErrSecretInvalid},
		{"one bad of two", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret, "whsec_"}}, ErrSecretInvalid},
		{"no scheme", Config{Secrets: []string{hmacSecret}}, ErrConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewVerifier(tc.cfg)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if _, err := NewSigner(tc.cfg); err == nil {
				t.Fatal("NewSigner accepted the config")
			}
			if strings.Contains(err.Error(), "c2hvcnQ") {
				t.Fatal("error text echoes the secret")
			}
		})
	}
}

func TestSignerRejectsUnusableIDs(t *testing.T) {
	std := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	sha := newSigner(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}})
	for _, id := range []string{"", strings.Repeat("a", 257), "a\nb", "a b"} {
		for _, s := range []*Signer{std, sha} {
			if err := s.Sign(http.Header{}, id, nil); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Sign(id %q) = %v, want ErrMalformed", id, err)
			}
		}
	}
	if err := std.Sign(http.Header{}, "a.b", nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Standard Sign(id with dot) = %v, want ErrMalformed", err)
	}
	if err := sha.Sign(http.Header{}, "a.b", nil); err != nil {
		t.Fatalf("SHA256 Sign(id with dot) = %v", err)
	}
}

// --- middleware ---

// recordingHandler counts calls and records the body and delivery it saw.
type recordingHandler struct {
	calls  atomic.Int32
	status int
	panics bool
	mu     sync.Mutex
	bodies []string
	ids    []string
}

func (h *recordingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Add(1)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		panic(err)
	}
	d, _ := DeliveryFrom(r.Context())
	h.mu.Lock()
	h.bodies = append(h.bodies, string(b))
	h.ids = append(h.ids, d.ID)
	h.mu.Unlock()
	if h.panics {
		panic(http.ErrAbortHandler)
	}
	if h.status != 0 {
		w.WriteHeader(h.status)
	}
	io.WriteString(w, "processed")
}

func deliver(h http.Handler, hdr http.Header, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func signed(t *testing.T, s *Signer, id, body string) http.Header {
	t.Helper()
	h := http.Header{}
	if err := s.Sign(h, id, []byte(body)); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestWebhookMiddlewarePassesFirstDeliveryWithReadableBody(t *testing.T) {
	for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
		cfg := Config{Scheme: scheme, Secrets: []string{stdSecret}}
		next := &recordingHandler{status: http.StatusAccepted}
		mw := newVerifier(t, cfg).Middleware(next)
		rec := deliver(mw, signed(t, newSigner(t, cfg), "evt-1", `{"ok":true}`), `{"ok":true}`)
		if rec.Code != http.StatusAccepted || rec.Body.String() != "processed" {
			t.Fatalf("scheme %v: got %d %q", scheme, rec.Code, rec.Body)
		}
		if next.calls.Load() != 1 || next.bodies[0] != `{"ok":true}` || next.ids[0] != "evt-1" {
			t.Fatalf("scheme %v: handler saw calls=%d bodies=%q ids=%q", scheme, next.calls.Load(), next.bodies, next.ids)
		}
	}
}

func TestWebhookMiddlewareAcknowledgesDuplicateWithoutCallingHandler(t *testing.T) {
	for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
		cfg := Config{Scheme: scheme, Secrets: []string{stdSecret}}
		next := &recordingHandler{}
		mw := newVerifier(t, cfg).Middleware(next)
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		for i := range 3 {
			rec := deliver(mw, h, "payload")
			if rec.Code != http.StatusOK {
				t.Fatalf("scheme %v delivery %d: status %d", scheme, i, rec.Code)
			}
		}
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("scheme %v: handler called %d times, want 1", scheme, n)
		}
	}
}

// Under a scheme whose ID header is unsigned, the policy decides which
// deliveries are one; every delivery acknowledged without running the
// handler is seen by OnDuplicate.
func TestWebhookMiddlewareDedupPolicies(t *testing.T) {
	type send struct{ id, body string }
	// A first delivery, its retry, a captured copy replayed under a fresh
	// ID, and a distinct delivery reusing the ID.
	sends := []send{{"evt-1", "payload"}, {"evt-1", "payload"}, {"evt-forged", "payload"}, {"evt-1", "changed"}}
	tests := []struct {
		dedup Dedup
		calls []string // the sends the handler processed, by id/body
		dups  int
	}{
		{DedupDefault, []string{"evt-1/payload", "evt-1/changed"}, 2},
		{DedupSignature, []string{"evt-1/payload", "evt-1/changed"}, 2},
		{DedupID, []string{"evt-1/payload", "evt-forged/payload"}, 2},
		{DedupIDAndSignature, []string{"evt-1/payload", "evt-forged/payload", "evt-1/changed"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.dedup.String(), func(t *testing.T) {
			var dups []string
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Dedup: tc.dedup,
				OnDuplicate: func(_ *http.Request, d Delivery) { dups = append(dups, d.ID) }}
			next := &recordingHandler{}
			mw := newVerifier(t, cfg).Middleware(next)
			signer := newSigner(t, cfg)
			for _, sd := range sends {
				if rec := deliver(mw, signed(t, signer, sd.id, sd.body), sd.body); rec.Code != http.StatusOK {
					t.Fatalf("%v: status %d", sd, rec.Code)
				}
			}
			var got []string
			for i := range next.ids {
				got = append(got, next.ids[i]+"/"+next.bodies[i])
			}
			if !slices.Equal(got, tc.calls) {
				t.Fatalf("handler processed %q, want %q", got, tc.calls)
			}
			if len(dups) != tc.dups || len(dups)+len(got) != len(sends) {
				t.Fatalf("OnDuplicate saw %q, want %d: every send is processed or seen", dups, tc.dups)
			}
		})
	}
}

// The case: three deliveries with distinct IDs and the same body
// under the default policy are processed once, and OnDuplicate sees the
// other two; under DedupIDAndSignature each is processed.
func TestWebhookMiddlewareSameBodyDistinctIDsNeverDroppedSilently(t *testing.T) {
	for _, dedup := range []Dedup{DedupDefault, DedupIDAndSignature} {
		var dups atomic.Int32
		cfg := Config{Scheme: GitHub(), Secrets: []string{githubSecret}, Dedup: dedup,
			OnDuplicate: func(*http.Request, Delivery) { dups.Add(1) }}
		next := &recordingHandler{}
		mw := newVerifier(t, cfg).Middleware(next)
		for _, id := range []string{"a", "b", "c"} {
			deliver(mw, signed(t, newSigner(t, cfg), id, githubBody), githubBody)
		}
		if next.calls.Load()+dups.Load() != 3 {
			t.Fatalf("%v: %d processed, %d seen as duplicates; want all 3 accounted for", dedup, next.calls.Load(), dups.Load())
		}
		if dedup == DedupIDAndSignature && next.calls.Load() != 3 {
			t.Fatalf("%v: %d processed, want 3", dedup, next.calls.Load())
		}
	}
}

func TestWebhookMiddlewareRefusals(t *testing.T) {
	clk := newStepClock()
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, MaxBody: 16, Now: clk.Now}
	signer := newSigner(t, cfg)
	good := signed(t, signer, "evt-1", "small")
	clk.Advance(-time.Hour)
	old := signed(t, signer, "evt-2", "small")
	clk.Advance(time.Hour)
	without := func(name string) http.Header {
		h := good.Clone()
		h.Del(name)
		return h
	}
	tests := []struct {
		name string
		h    http.Header
		body string
		code int
		want error
	}{
		{"missing signature", without("webhook-signature"), "small", http.StatusUnauthorized, ErrSignature},
		{"tampered body", good, "smell", http.StatusUnauthorized, ErrSignature},
		{"old timestamp", old, "small", http.StatusUnauthorized, ErrTimestamp},
		{"missing id", without("webhook-id"), "small", http.StatusBadRequest, ErrMalformed},
		{"missing timestamp", without("webhook-timestamp"), "small", http.StatusBadRequest, ErrMalformed},
		{"body over cap", good, strings.Repeat("x", 17), http.StatusRequestEntityTooLarge, ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rejected error
			c := cfg
			c.OnReject = func(_ *http.Request, err error) { rejected = err }
			next := &recordingHandler{}
			rec := deliver(newVerifier(t, c).Middleware(next), tc.h, tc.body)
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d", rec.Code, tc.code)
			}
			if !errors.Is(rejected, tc.want) {
				t.Fatalf("OnReject got %v, want %v", rejected, tc.want)
			}
			if next.calls.Load() != 0 {
				t.Fatal("handler called for a refused delivery")
			}
			if strings.Contains(rec.Body.String(), "small") {
				t.Fatal("response echoes the body")
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestWebhookMiddlewareRefusesDeclaredOversizeBodyUnread(t *testing.T) {
	next := &recordingHandler{}
	mw := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}).Middleware(next)
	req := httptest.NewRequest(http.MethodPost, "/hook", errReader{})
	req.ContentLength = DefaultMaxBody + 1
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || next.calls.Load() != 0 {
		t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
	}
}

func TestWebhookMiddlewareToleratesNilBody(t *testing.T) {
	next := &recordingHandler{}
	mw := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}).Middleware(next)
	req := httptest.NewRequest(http.MethodPost, "/hook", nil)
	req.Body = nil
	req.Header.Set("X-Webhook-ID", "d1")
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || next.calls.Load() != 0 {
		t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
	}
}

func TestWebhookMiddlewareRefusesUnreadableBody(t *testing.T) {
	next := &recordingHandler{}
	mw := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}).Middleware(next)
	req := httptest.NewRequest(http.MethodPost, "/hook", errReader{})
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || next.calls.Load() != 0 {
		t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
	}
}

func TestWebhookMiddlewareFailsClosedWhenStoreCannotDecide(t *testing.T) {
	clk := newStepClock()
	full := &replay.MemoryStore{Max: 2, Now: clk.Now}
	for _, tc := range []struct {
		name  string
		store replay.Store
		want  error
	}{
		{"store down", failingStore{}, nil},
		{"store full", full, replay.ErrFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rejected error
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: tc.store, Namespace: "endpoint", Now: clk.Now,
				OnReject: func(_ *http.Request, err error) { rejected = err }}
			next := &recordingHandler{}
			mw := newVerifier(t, cfg).Middleware(next)
			signer := newSigner(t, cfg)
			if tc.store == full {
				// One delivery takes one entry.
				deliver(mw, signed(t, signer, "first", "a"), "a")
				deliver(mw, signed(t, signer, "second", "c"), "c")
				next.calls.Store(0)
			}
			rec := deliver(mw, signed(t, signer, "evt", "b"), "b")
			if rec.Code != http.StatusServiceUnavailable || next.calls.Load() != 0 {
				t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
			}
			if rejected == nil || (tc.want != nil && !errors.Is(rejected, tc.want)) {
				t.Fatalf("OnReject got %v, want %v", rejected, tc.want)
			}
		})
	}
}

func TestWebhookMiddlewareReleasesClaimWhenHandlerFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		panics bool
	}{
		{"5xx", http.StatusInternalServerError, false},
		{"panic", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
			next := &recordingHandler{status: tc.status, panics: tc.panics}
			mw := newVerifier(t, cfg).Middleware(next)
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			func() {
				defer func() {
					if p := recover(); (p != nil) != tc.panics {
						t.Fatalf("recovered %v", p)
					}
				}()
				deliver(mw, h, "payload")
			}()
			next.status, next.panics = 0, false
			if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
				t.Fatalf("retry: %d %q", rec.Code, rec.Body)
			}
			if n := next.calls.Load(); n != 2 {
				t.Fatalf("handler called %d times, want 2 (failure, then retry)", n)
			}
		})
	}
}

func TestWebhookMiddlewareKeepsClaimWhenHandlerRefuses4xx(t *testing.T) {
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
	next := &recordingHandler{status: http.StatusUnprocessableEntity}
	mw := newVerifier(t, cfg).Middleware(next)
	h := signed(t, newSigner(t, cfg), "evt-1", "payload")
	deliver(mw, h, "payload")
	deliver(mw, h, "payload")
	if n := next.calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
}

func TestStandardWebhookRetryWithFreshTimestampIsDuplicate(t *testing.T) {
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
}

func TestStandardWebhookDuplicateRefusedUntilTimestampLeavesWindow(t *testing.T) {
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
}

// 32 concurrent copies of one delivery: the handler runs once; every other
// copy is told to retry (503, in progress) or acknowledged as processed
// (200), and every copy retried afterwards is acknowledged.
func TestWebhookMiddlewareConcurrentCopiesReachHandlerOnce(t *testing.T) {
	for _, scheme := range []Scheme{StandardWebhooks(), HMACSHA256()} {
		secret := stdSecret
		if scheme == HMACSHA256() {
			secret = hmacSecret
		}
		var dups atomic.Int32
		cfg := Config{Scheme: scheme, Secrets: []string{secret}, OnDuplicate: func(*http.Request, Delivery) { dups.Add(1) }}
		release := make(chan struct{})
		var calls atomic.Int32
		mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			<-release // slow: every copy arrives while this one runs
			w.WriteHeader(http.StatusNoContent)
		}))
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		const copies = 32
		codes := make(chan int, copies)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				codes <- deliver(mw, h, "payload").Code
			}()
		}
		close(start)
		// Wait until every copy but the one in the handler has its answer.
		for deadline := time.Now().Add(10 * time.Second); len(codes) < copies-1 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		close(release)
		wg.Wait()
		close(codes)
		count := map[int]int{}
		for c := range codes {
			count[c]++
		}
		if calls.Load() != 1 || count[http.StatusNoContent] != 1 || count[http.StatusServiceUnavailable] != copies-1 {
			t.Fatalf("%v: handler ran %d times, statuses %v; want once, one 204 and %d 503", scheme, calls.Load(), count, copies-1)
		}
		for range copies - 1 {
			if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK {
				t.Fatalf("%v: retry after processing: status %d, want 200", scheme, rec.Code)
			}
		}
		if calls.Load() != 1 || dups.Load() != copies-1 {
			t.Fatalf("%v: handler ran %d times, OnDuplicate saw %d; want 1 and %d", scheme, calls.Load(), dups.Load(), copies-1)
		}
	}
}

// The "lost while in progress": a copy arriving while the first
// attempt runs is told to retry later (never acknowledged); the first
// attempt then fails, and the sender's later retry is processed.
func TestWebhookMiddlewareCopyDuringFailingAttemptIsRetriedNotLost(t *testing.T) {
	for _, fail := range []string{"5xx", "panic"} {
		t.Run(fail, func(t *testing.T) {
			var rejected []error
			var mu sync.Mutex
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, OnReject: func(_ *http.Request, err error) {
				mu.Lock()
				rejected = append(rejected, err)
				mu.Unlock()
			}}
			inHandler, finish := make(chan struct{}), make(chan struct{})
			var calls atomic.Int32
			mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					close(inHandler)
					<-finish
					if fail == "panic" {
						panic(http.ErrAbortHandler)
					}
					w.WriteHeader(http.StatusBadGateway)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			done := make(chan int)
			go func() {
				defer func() {
					recover()
					done <- -1
				}()
				done <- deliver(mw, h, "payload").Code
			}()
			<-inHandler
			rec := deliver(mw, h, "payload")
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
				t.Fatalf("copy while in progress: status %d, Retry-After %q; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
			}
			mu.Lock()
			if len(rejected) != 1 || !errors.Is(rejected[0], ErrInProgress) {
				t.Fatalf("OnReject saw %v, want ErrInProgress", rejected)
			}
			mu.Unlock()
			close(finish)
			<-done
			if rec := deliver(mw, h, "payload"); rec.Code != http.StatusNoContent {
				t.Fatalf("retry after the failed attempt: status %d, want 204 (processed)", rec.Code)
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2 (the failure, then the retry)", n)
			}
		})
	}
}

// Retry-After is the lease's remaining time in whole seconds, rounded up:
// a whole number of seconds is itself, any part of a second counts as one.
func TestWebhookMiddlewareRetryAfterIsTheRemainingLease(t *testing.T) {
	for _, tc := range []struct {
		elapsed time.Duration // since the other attempt took its 30 s lease
		want    string
	}{
		{10 * time.Second, "20"},
		{10*time.Second + time.Millisecond, "20"},
		{10*time.Second - time.Nanosecond, "21"},
		{29 * time.Second, "1"},
		{30*time.Second - time.Nanosecond, "1"},
	} {
		t.Run(tc.elapsed.String(), func(t *testing.T) {
			clk := newStepClock()
			store := &replay.MemoryStore{Now: clk.Now}
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now, Lease: 30 * time.Second}
			v := newVerifier(t, cfg)
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			d, err := v.Verify(h, []byte("payload"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Acquire(context.Background(), d); err != nil { // another instance's attempt
				t.Fatal(err)
			}
			clk.Advance(tc.elapsed)
			rec := deliver(v.Middleware(&recordingHandler{}), h, "payload")
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != tc.want {
				t.Fatalf("status %d, Retry-After %q; want 503 and %s (seconds, rounded up)", rec.Code, rec.Header().Get("Retry-After"), tc.want)
			}
		})
	}
}

// An instance that dies mid-handler never confirms nor releases: copies
// are refused while its lease runs, and the first copy after the lease
// ends is processed.
func TestWebhookMiddlewareProcessesRetryAfterCrashedAttemptsLeaseEnds(t *testing.T) {
	clk := newStepClock()
	store := &replay.MemoryStore{Now: clk.Now}
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now}
	crashed := newVerifier(t, cfg)
	h := signed(t, newSigner(t, cfg), "evt-1", "payload")
	d, err := crashed.Verify(h, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.Acquire(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	next := &recordingHandler{}
	survivor := newVerifier(t, cfg).Middleware(next)
	clk.Advance(DefaultLease - time.Millisecond)
	if rec := deliver(survivor, h, "payload"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("copy during the dead attempt's lease: status %d, want 503", rec.Code)
	}
	clk.Advance(time.Millisecond)
	if rec := deliver(survivor, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
		t.Fatalf("copy after the lease: %d %q, want processed", rec.Code, rec.Body)
	}
	if rec := deliver(survivor, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "" {
		t.Fatalf("copy after processing: %d %q, want an empty 200", rec.Code, rec.Body)
	}
	if n := next.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestWebhookMiddlewareHandlerContextEndsWithinLease(t *testing.T) {
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: 400 * time.Millisecond}
	var deadline time.Time
	var hasDeadline bool
	start := time.Now()
	v := newVerifier(t, cfg)
	mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline, hasDeadline = r.Context().Deadline()
		<-r.Context().Done()
		w.WriteHeader(http.StatusServiceUnavailable) // gave up: the sender retries
	}))
	h := signed(t, newSigner(t, cfg), "evt-1", "payload")
	if rec := deliver(mw, h, "payload"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", rec.Code)
	}
	if !hasDeadline || deadline.Sub(start) > 300*time.Millisecond+50*time.Millisecond || deadline.Sub(start) < 250*time.Millisecond {
		t.Fatalf("handler deadline %v after the request, want three quarters of the 400ms lease", deadline.Sub(start))
	}
	// The handler gave up with a 5xx, so the lease was released: the retry
	// is processed at once, not refused until the lease ends.
	next := &recordingHandler{}
	if rec := deliver(v.Middleware(next), h, "payload"); rec.Code != http.StatusOK || next.calls.Load() != 1 {
		t.Fatalf("retry after the handler gave up: status %d, handler calls %d; want processed", rec.Code, next.calls.Load())
	}
}

func TestWebhookMiddlewareReportsUnrecordedOutcomeAndKeepsHandlerStatus(t *testing.T) {
	store := &flakyStore{MemoryStore: replay.NewMemoryStore(0)}
	var leaseErrs []error
	var ids []string
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Lease: 100 * time.Millisecond,
		OnLeaseError: func(_ *http.Request, d Delivery, err error) {
			leaseErrs = append(leaseErrs, err)
			ids = append(ids, d.ID)
		}}
	next := &recordingHandler{status: http.StatusAccepted}
	mw := newVerifier(t, cfg).Middleware(next)
	signer := newSigner(t, cfg)
	store.failing.Store(true)
	if rec := deliver(mw, signed(t, signer, "evt-1", "x"), "x"); rec.Code != http.StatusAccepted {
		t.Fatalf("status %d, want the handler's 202", rec.Code)
	}
	next.status = http.StatusInternalServerError
	if rec := deliver(mw, signed(t, signer, "evt-2", "x"), "x"); rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want the handler's 500", rec.Code)
	}
	if len(leaseErrs) != 2 || !slices.Equal(ids, []string{"evt-1", "evt-2"}) {
		t.Fatalf("OnLeaseError saw %v for %v, want the confirm and release failures", leaseErrs, ids)
	}
	for _, err := range leaseErrs {
		if !errors.Is(err, ErrReplayStore) || !errors.Is(err, errStoreDown) || Reason(err) == "" {
			t.Fatalf("OnLeaseError got %v, want ErrReplayStore wrapping the store's error", err)
		}
	}
}

// --- fuzzing ---

func FuzzParseStandardSignatures(f *testing.F) {
	for _, s := range []string{stdSig, "v1,bm9wZQ== " + stdSig, "v1a,x v1,y", "", " ", ",", "v1,", strings.Repeat("v1,a ", 20)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var sigs [maxV1Entries][32]byte
		n, ok := parseStandardSignatures(s, &sigs)
		if ok != (n > 0) || n > strings.Count(s, "v1,") {
			t.Fatalf("ok=%v with %d signatures", ok, n)
		}
		for _, b := range sigs[:n] {
			if !strings.Contains(s, "v1,"+base64.StdEncoding.EncodeToString(b[:])) {
				t.Fatalf("decoded %x, which the header does not carry", b)
			}
		}
	})
}

func FuzzParseSHA256Signature(f *testing.F) {
	for _, s := range []string{githubSig, "sha256=", "sha256=zz", strings.ToUpper(githubSig), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var arr [32]byte
		if !parseSHA256Signature(s, &arr) {
			return
		}
		b := arr[:]
		if len(b) != 32 || !strings.HasPrefix(s, "sha256=") || !strings.EqualFold(hex.EncodeToString(b), s[len("sha256="):]) {
			t.Fatalf("accepted %q as %x", s, b)
		}
	})
}

// FuzzStandardWebhookVerify checks that Verify never panics and accepts a
// delivery only when it carries the genuine signature of its id, timestamp
// and body.
func FuzzStandardWebhookVerify(f *testing.F) {
	f.Add(stdID, strconv.Itoa(stdTS), stdSig, stdBody)
	f.Add(stdID, "1614265331", stdSig, stdBody)
	f.Add("", "", "", "")
	f.Add("a.b", "-1", "v1,", "{}")
	key, _ := schemeStandard.parseSecret(stdSecret)
	clk := clocktest.At(time.Unix(stdTS, 0))
	v := newVerifier(f, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now})
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		d, err := v.Verify(h, []byte(body))
		if err != nil {
			if Reason(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		want := "v1," + base64.StdEncoding.EncodeToString(standardMAC(key, id+"."+ts+"."+body))
		if !slices.Contains(strings.Fields(sig), want) {
			t.Fatalf("accepted id=%q ts=%q sig=%q without the genuine signature", id, ts, sig)
		}
		if d.ID != id {
			t.Fatalf("delivery id %q, want %q", d.ID, id)
		}
	})
}

// FuzzSHA256WebhookVerify is the same property for the HMAC-SHA256 scheme.
func FuzzSHA256WebhookVerify(f *testing.F) {
	f.Add("d1", githubSig, githubBody)
	f.Add("d1", githubSig, "Hello, World?")
	f.Add("", "", "")
	v := newVerifier(f, Config{Scheme: HMACSHA256(), Secrets: []string{githubSecret}})
	f.Fuzz(func(t *testing.T, id, sig, body string) {
		h := http.Header{}
		h.Set("X-Webhook-ID", id)
		h.Set("X-Webhook-Signature", sig)
		if _, err := v.Verify(h, []byte(body)); err != nil {
			if Reason(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if !strings.EqualFold(sig, signSHA256([]byte(githubSecret), []byte(body))) {
			t.Fatalf("accepted sig=%q for body %q", sig, body)
		}
	})
}

// claimOnlyStore is a working replay.Store without Release.
type claimOnlyStore struct{ s *replay.MemoryStore }

func (c claimOnlyStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	return c.s.Claim(ctx, id, until)
}

func TestWebhookMiddlewareLetsHandlerFlush(t *testing.T) {
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
	var flushed, controlled bool
	mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
			flushed = true
		}
		controlled = http.NewResponseController(w).Flush() == nil
	}))
	rec := deliver(mw, signed(t, newSigner(t, cfg), "evt-1", "x"), "x")
	if !flushed || !controlled || !rec.Flushed {
		t.Fatalf("flushed=%v controlled=%v recorder flushed=%v", flushed, controlled, rec.Flushed)
	}
}

func TestWebhookMiddlewareExposesUnderlyingWriterToResponseController(t *testing.T) {
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
	deadlineErr := make(chan error, 1)
	mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadlineErr <- http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
	}))
	srv := httptest.NewServer(mw)
	defer srv.Close()
	body := "x"
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := newSigner(t, cfg).Sign(req.Header, "evt-1", []byte(body)); err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-deadlineErr; err != nil {
		t.Fatalf("SetWriteDeadline through the middleware: %v", err)
	}
}

// A delivery refused because the store was full is processed when the
// sender retries after room is made, never acknowledged as a duplicate.
func TestWebhookMiddlewareRetryAfterFullStoreIsProcessed(t *testing.T) {
	clk := newStepClock()
	store := &replay.MemoryStore{Max: 1, Now: clk.Now}
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now}
	next := &recordingHandler{}
	mw := newVerifier(t, cfg).Middleware(next)
	signer := newSigner(t, cfg)
	deliver(mw, signed(t, signer, "first", "a"), "a") // the only entry
	clk.Advance(time.Hour)
	h := signed(t, signer, "evt", "b")
	if rec := deliver(mw, h, "b"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("delivery into a full store: status %d, want 503", rec.Code)
	}
	clk.Advance(DefaultDedupWindow - time.Hour) // "first" expires: room again
	if rec := deliver(mw, h, "b"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
		t.Fatalf("retry: %d %q, want the handler's reply", rec.Code, rec.Body)
	}
	if n := next.calls.Load(); n != 2 {
		t.Fatalf("handler called %d times, want 2 (first, then the retry of evt)", n)
	}
}

// Acquire takes a delivery from Verify. A hand-made Delivery carries no
// verified signature: acquiring it must fail, not file every such delivery
// under one empty signature key (which would make all but the first a
// "duplicate" that is acknowledged and never processed).
func TestWebhookAcquireRefusesDeliveryNotFromVerify(t *testing.T) {
	v := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}})
	for _, id := range []string{"a", "b"} {
		l, err := v.Acquire(context.Background(), Delivery{ID: id})
		if l != nil || !errors.Is(err, ErrMalformed) {
			t.Fatalf("Acquire(unverified %q) = %v, %v; want nil, ErrMalformed", id, l, err)
		}
	}
	std := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	if l, err := std.Acquire(context.Background(), Delivery{}); l != nil || !errors.Is(err, ErrMalformed) {
		t.Fatalf("Acquire(empty delivery) = %v, %v; want nil, ErrMalformed", l, err)
	}
}

// A zero Signer (not from NewSigner) has no secret: Sign
// refuses instead of panicking.
func TestZeroSignerRefusesWithoutPanic(t *testing.T) {
	var zero Signer
	h := http.Header{}
	if err := zero.Sign(h, "evt-1", []byte("x")); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("Sign on a zero signer = %v, want ErrNoSecret", err)
	}
	if len(h) != 0 {
		t.Fatalf("zero signer set headers %v", h)
	}
}

func TestWebhookVerifyReturnsNothingOfARefusedDelivery(t *testing.T) {
	for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
		secret := "It's a Secret to Everybody"
		if scheme == StandardWebhooks() {
			secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef01234567"))
		}
		v, err := NewVerifier(Config{Scheme: scheme, Secrets: []string{secret}})
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("X-Webhook-ID", "delivery-1")
		h.Set("X-Webhook-Signature", "sha256="+strings.Repeat("0", 64))
		h.Set("webhook-id", "delivery-1")
		h.Set("webhook-timestamp", "1700000000")
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
		d, err := v.Verify(h, []byte("body"))
		if !errors.Is(err, ErrSignature) {
			t.Fatalf("scheme %v: error %v, want ErrSignature", scheme, err)
		}
		if d != (Delivery{}) {
			t.Fatalf("scheme %v: refused delivery returned %+v", scheme, d)
		}
	}
}

// Standard Webhooks IDs are held SkewMargin past the last instant the
// timestamp check accepts them: an instance whose clock lags by 59 s still
// refuses a replay the leading instance processed, even with a short dedup
// window.
func TestStandardWebhookReplayRefusedOnInstanceLaggingBySkewMargin(t *testing.T) {
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
}

// lostReplyStore takes leases but, while lose is set, reports a timeout
// instead of the answer: the store's state changed, the caller cannot know.
type lostReplyStore struct {
	*replay.MemoryStore
	lose atomic.Bool
}

var errTimeout = errors.New("store timed out")

func (s *lostReplyStore) AcquireLease(ctx context.Context, id string, d time.Duration) (replay.Lease, error) {
	l, err := s.MemoryStore.AcquireLease(ctx, id, d)
	if s.lose.Load() {
		return replay.Lease{}, errTimeout
	}
	return l, err
}

// The memory-store form of the slow-store case: the acquire is
// applied but its answer is lost, so the delivery is refused (503). The
// sender's retries are refused while that orphaned lease runs, and the
// first retry after it ends is processed: never acknowledged unprocessed.
func TestWebhookMiddlewareAcquireAppliedButAnswerLostIsRetriedNotDuplicate(t *testing.T) {
	clk := newStepClock()
	store := &lostReplyStore{MemoryStore: &replay.MemoryStore{Now: clk.Now}}
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now, Lease: 10 * time.Second}
	next := &recordingHandler{}
	mw := newVerifier(t, cfg).Middleware(next)
	h := signed(t, newSigner(t, cfg), "evt-1", "payload")
	store.lose.Store(true)
	if rec := deliver(mw, h, "payload"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("delivery whose acquire answer was lost: status %d, want 503", rec.Code)
	}
	store.lose.Store(false)
	clk.Advance(5 * time.Second)
	if rec := deliver(mw, h, "payload"); rec.Code != http.StatusServiceUnavailable || next.calls.Load() != 0 {
		t.Fatalf("retry during the orphaned lease: status %d, handler calls %d; want 503 and none", rec.Code, next.calls.Load())
	}
	clk.Advance(5 * time.Second)
	if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
		t.Fatalf("retry after the orphaned lease ended: %d %q, want processed", rec.Code, rec.Body)
	}
	if n := next.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// A handler that ignores its context and outruns the lease: when nobody
// took the delivery meanwhile, the late confirmation still records it; when
// a copy was processed meanwhile, OnLeaseError reports the lost lease (the
// delivery ran twice).
func TestWebhookMiddlewareHandlerOutrunningItsLease(t *testing.T) {
	for _, copyMeanwhile := range []bool{false, true} {
		var leaseErrs []error
		var mu sync.Mutex
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Lease: 100 * time.Millisecond,
			OnLeaseError: func(_ *http.Request, _ Delivery, err error) {
				mu.Lock()
				leaseErrs = append(leaseErrs, err)
				mu.Unlock()
			}}
		var calls atomic.Int32
		overrun := make(chan struct{})
		mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				<-overrun // ignores r.Context()
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		done := make(chan int)
		go func() { done <- deliver(mw, h, "payload").Code }()
		time.Sleep(200 * time.Millisecond) // the lease has ended
		if copyMeanwhile {
			if rec := deliver(mw, h, "payload"); rec.Code != http.StatusNoContent {
				t.Fatalf("copy after the lease ended: status %d, want 204 (processed)", rec.Code)
			}
		}
		close(overrun)
		if code := <-done; code != http.StatusNoContent {
			t.Fatalf("overrunning attempt: status %d, want its 204", code)
		}
		if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK {
			t.Fatalf("copy afterwards: status %d, want 200", rec.Code)
		}
		mu.Lock()
		switch {
		case !copyMeanwhile && (len(leaseErrs) != 0 || calls.Load() != 1):
			t.Fatalf("no copy meanwhile: lease errors %v, handler calls %d; want none and 1", leaseErrs, calls.Load())
		case copyMeanwhile && (len(leaseErrs) != 1 || !errors.Is(leaseErrs[0], replay.ErrLeaseLost) || calls.Load() != 2):
			t.Fatalf("copy meanwhile: lease errors %v, handler calls %d; want ErrLeaseLost and 2", leaseErrs, calls.Load())
		}
		mu.Unlock()
	}
}
