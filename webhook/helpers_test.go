package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctoken/ctoken/internal/clocktest"
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

func stdHeaders(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

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

// hmacSecret is an HMAC-SHA256 secret long enough for FIPS 140-3 mode.
const hmacSecret = "hmac-test-secret-1"

// Test secrets of the schemes added for issue 12.
const (
	stripeSecret  = "whsec_ctoken_stripe_test_secret"
	stripeSecret2 = "whsec_ctoken_stripe_test_secret_2"
	slackSecret   = "8f742231b10e8888abcd99yyyzzz85a5"
	shopifySecret = "hush-shopify-client-secret"
)
