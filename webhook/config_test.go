package webhook

import (
	"context"
	"crypto/fips140"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

func TestNewVerifierRefusesOptionsWithoutEffect(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"SignatureHeader under Standard Webhooks", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, SignatureHeader: "X-Sig"}},
		{"IDHeader under Standard Webhooks", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, IDHeader: "X-ID"}},
		{"SignatureHeader under GitHub", Config{Scheme: GitHub(), Secrets: []string{githubSecret}, SignatureHeader: "X-Sig"}},
		{"IDHeader under GitHub", Config{Scheme: GitHub(), Secrets: []string{githubSecret}, IDHeader: "X-ID"}},
		{"Tolerance under HMAC-SHA256", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Tolerance: time.Minute}},
		{"Tolerance under GitHub", Config{Scheme: GitHub(), Secrets: []string{githubSecret}, Tolerance: time.Minute}},
		{"negative Tolerance", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Tolerance: -time.Second}},
		{"negative DedupWindow", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, DedupWindow: -time.Second}},
		{"negative MaxBody", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, MaxBody: -1}},
		{"signature header not a token", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, SignatureHeader: "X Sig"}},
		{"ID header not a token", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, IDHeader: "X-ID:"}},
		{"one header for signature and ID", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, SignatureHeader: "X-A", IDHeader: "x-a"}},
		{"no scheme", Config{Secrets: []string{hmacSecret}}},
		{"scheme embedded in another type", Config{Scheme: foreignScheme{}, Secrets: []string{hmacSecret}}},
		{"scheme embedding a real one", Config{Scheme: foreignScheme{HMACSHA256()}, Secrets: []string{hmacSecret}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.cfg)
			if v != nil || !errors.Is(err, ErrConfig) || Reason(err) == "" {
				t.Fatalf("NewVerifier = %v, %v; want ErrConfig with a reason", v, err)
			}
			if s, err := NewSigner(tc.cfg); s != nil || !errors.Is(err, ErrConfig) {
				t.Fatalf("NewSigner = %v, %v; want ErrConfig", s, err)
			}
		})
	}
}

func TestNewSignerRefusesReceivingOptions(t *testing.T) {
	base := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}}
	for name, edit := range map[string]func(*Config){
		"Tolerance":   func(c *Config) { c.Tolerance = time.Minute },
		"MaxBody":     func(c *Config) { c.MaxBody = 10 },
		"Replay":      func(c *Config) { c.Replay = replay.NewMemoryStore(0) },
		"DedupWindow": func(c *Config) { c.DedupWindow = time.Hour },
		"OnReject":    func(c *Config) { c.OnReject = func(*http.Request, error) {} },
	} {
		cfg := base
		edit(&cfg)
		if s, err := NewSigner(cfg); s != nil || !errors.Is(err, ErrConfig) {
			t.Fatalf("NewSigner with %s = %v, %v; want ErrConfig", name, s, err)
		}
		if _, err := NewVerifier(cfg); err != nil {
			t.Fatalf("NewVerifier with %s: %v", name, err)
		}
	}
}

func TestZeroDurationsAndSizesMeanDefaults(t *testing.T) {
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	if v.p.tolerance != DefaultTolerance || v.p.dedup != DefaultDedupWindow || v.p.maxBody != DefaultMaxBody || v.p.store == nil {
		t.Fatalf("defaults: tolerance %v, dedup %v, maxBody %d, store %v", v.p.tolerance, v.p.dedup, v.p.maxBody, v.p.store)
	}
	v = newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Tolerance: time.Second, DedupWindow: time.Minute, MaxBody: 7})
	if v.p.tolerance != time.Second || v.p.dedup != time.Minute || v.p.maxBody != 7 {
		t.Fatalf("explicit values: tolerance %v, dedup %v, maxBody %d", v.p.tolerance, v.p.dedup, v.p.maxBody)
	}
}

func TestNewVerifierRefusesBadSecretsNamingPositionNotSecret(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		want   error
		reason string
		pos    string
	}{
		{"no secrets", Config{Scheme: HMACSHA256()}, ErrNoSecret, "no secret", ""},
		{"empty HMAC secret", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret, ""}}, ErrSecretInvalid, "secret empty", "(secret 2 of 2)"},
		{"empty whsec", Config{Scheme: StandardWebhooks(), Secrets: []string{"whsec_"}}, ErrSecretInvalid, "secret empty", "(secret 1 of 1)"},
		{"whsec not base64", Config{Scheme: StandardWebhooks(), Secrets: []string{"whsec_not base64!"}}, ErrSecretInvalid, "secret not standard base64 after whsec_", "(secret 1 of 1)"},
		{"whsec with a line feed", Config{Scheme: StandardWebhooks(), Secrets: []string{"whsec_MfKQ9r8GKYqr\nTwjUPD8ILPZIo2LaLaSw"}}, ErrSecretInvalid, "secret not standard base64 after whsec_", "(secret 1 of 1)"},
		{"whsec url alphabet", Config{Scheme: StandardWebhooks(), Secrets: []string{"whsec_3q2-7wAAAAD-ZmxvYXRpbmctcG9pbnQh"}}, ErrSecretInvalid, "secret not standard base64 after whsec_", "(secret 1 of 1)"},
		{"whsec too short", Config{Scheme: StandardWebhooks(), Secrets: []string{"whsec_c2hvcnQ="}}, ErrSecretInvalid, "secret shorter than 24 bytes", "(secret 1 of 1)"},
		{"second of three bad", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret, "whsec_c2hvcnQ=", stdSecret2}}, ErrSecretInvalid, "secret shorter than 24 bytes", "(secret 2 of 3)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{
				func() error { _, err := NewVerifier(tc.cfg); return err }(),
				func() error { _, err := NewSigner(tc.cfg); return err }(),
			} {
				if !errors.Is(err, tc.want) || Reason(err) != tc.reason || !strings.Contains(err.Error(), tc.pos) {
					t.Fatalf("err = %v (reason %q), want %v with reason %q naming %q", err, Reason(err), tc.want, tc.reason, tc.pos)
				}
				if strings.Contains(err.Error(), "c2hvcnQ") || strings.Contains(err.Error(), "base64!") {
					t.Fatal("error text echoes the secret")
				}
			}
		})
	}
}

// A padded whsec_ secret (its length not a multiple of 3 bytes) is
// accepted, as is the same secret without padding; both are one key.
func TestStandardWebhooksAcceptsPaddedAndUnpaddedSecrets(t *testing.T) {
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
}

// HMAC keys under 112 bits are not allowed in FIPS 140-3 mode, and
// crypto/hmac panics on them under GODEBUG=fips140=only. They are refused
// at construction when the mode is on, and work when it is off.
func TestShortHMACSecretRefusedInFIPSModeOnly(t *testing.T) {
	const short = "gh-secret" // 72 bits
	for _, scheme := range []Scheme{HMACSHA256(), GitHub(), Shopify()} {
		cfg := Config{Scheme: scheme, Secrets: []string{short}}
		v, verr := NewVerifier(cfg)
		s, serr := NewSigner(cfg)
		if fips140.Enabled() {
			for _, err := range []error{verr, serr} {
				if !errors.Is(err, ErrSecretInvalid) || !strings.Contains(err.Error(), "FIPS 140-3 mode") || strings.Contains(err.Error(), short) {
					t.Fatalf("%v, FIPS mode: %v; want ErrSecretInvalid naming the mode", scheme, err)
				}
			}
			if v != nil || s != nil {
				t.Fatal("constructor returned a value with an error")
			}
			continue
		}
		if verr != nil || serr != nil {
			t.Fatalf("%v outside FIPS mode: %v, %v", scheme, verr, serr)
		}
		if _, err := v.Verify(signed(t, s, "evt-1", "x"), []byte("x")); err != nil {
			t.Fatalf("%v: %v", scheme, err)
		}
	}
	// Slack and Stripe secrets are HMAC keys too: refused exactly when the
	// mode is on.
	for _, cfg := range []Config{{Scheme: Slack(), Secrets: []string{short}}, {Scheme: Stripe(), Secrets: []string{"whsec_short"}}} {
		_, err := NewVerifier(cfg)
		if fips140.Enabled() != (err != nil) || (err != nil && !strings.Contains(err.Error(), "FIPS 140-3 mode")) {
			t.Fatalf("%v, FIPS mode %v: %v", cfg.Scheme, fips140.Enabled(), err)
		}
	}
	// 14 bytes (112 bits) are allowed in every mode.
	if _, err := NewVerifier(Config{Scheme: HMACSHA256(), Secrets: []string{"fourteen bytes"}}); err != nil {
		t.Fatalf("14-byte secret: %v", err)
	}
}

// A zero Verifier or Signer (or a nil pointer) refuses every call with
// ErrNoSecret and a reason; it never panics, and its middleware answers
// 500 (a misconfigured receiver), not a misleading 4xx.
func TestZeroVerifierAndSignerRefuseEveryCall(t *testing.T) {
	var nilVerifier *Verifier
	for _, v := range []*Verifier{{}, nilVerifier} {
		if d, err := v.Verify(http.Header{}, nil); !errors.Is(err, ErrNoSecret) || Reason(err) == "" || d != (Delivery{}) {
			t.Fatalf("Verify = %+v, %v", d, err)
		}
		if first, err := v.Claim(context.Background(), Delivery{ID: "a", verified: true}); first || !errors.Is(err, ErrNoSecret) {
			t.Fatalf("Claim = %v, %v", first, err)
		}
		if err := v.Release(context.Background(), Delivery{ID: "a", verified: true}); !errors.Is(err, ErrNoSecret) {
			t.Fatalf("Release = %v", err)
		}
		called := false
		mw := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("x"))
		req.ContentLength = 1 << 40 // would be 413 if the zero cap were used
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		if rec.Code != http.StatusInternalServerError || called {
			t.Fatalf("middleware of a zero verifier: status %d, handler called %v", rec.Code, called)
		}
	}
	var nilSigner *Signer
	for _, s := range []*Signer{{}, nilSigner} {
		h := http.Header{}
		if err := s.Sign(h, "evt-1", []byte("x")); !errors.Is(err, ErrNoSecret) || Reason(err) == "" || len(h) != 0 {
			t.Fatalf("Sign = %v, headers %v", err, h)
		}
	}
}

func TestSignRefusesNilHeader(t *testing.T) {
	s := newSigner(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}})
	if err := s.Sign(nil, "evt-1", nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Sign(nil header) = %v, want ErrMalformed", err)
	}
}

// Store failures carry a reason and match both ErrReplayStore and the
// store's own error; the middleware answers them 503.
func TestClaimStoreFailureHasReasonAndWrapsStoreError(t *testing.T) {
	clk := newStepClock()
	full := &replay.MemoryStore{Max: 1, Now: clk.Now}
	for _, tc := range []struct {
		name  string
		store replay.Store
		cause error
	}{
		{"store down", failingStore{}, errStoreDown},
		{"store full", full, replay.ErrFull},
		{"bad store config", replay.NewMemoryStore(-1), replay.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: tc.store, Now: clk.Now}
			v := newVerifier(t, cfg)
			d, err := v.Verify(signed(t, newSigner(t, cfg), "evt", "b"), []byte("b"))
			if err != nil {
				t.Fatal(err)
			}
			first, err := v.Claim(context.Background(), d)
			if first || !errors.Is(err, ErrReplayStore) || !errors.Is(err, tc.cause) || Reason(err) == "" {
				t.Fatalf("Claim = %v, %v (reason %q); want ErrReplayStore wrapping %v", first, err, Reason(err), tc.cause)
			}
			if StatusCode(err) != http.StatusServiceUnavailable {
				t.Fatalf("StatusCode = %d, want 503", StatusCode(err))
			}
		})
	}
}

func TestStatusCodeMapsEveryError(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{errBodyTooLarge, http.StatusRequestEntityTooLarge},
		{errIDHeader, http.StatusBadRequest},
		{errTSMalformed, http.StatusBadRequest},
		{errNotVerified, http.StatusBadRequest},
		{errSigMismatch, http.StatusUnauthorized},
		{errTSTooOld, http.StatusUnauthorized},
		{storeError(errStoreDown), http.StatusServiceUnavailable},
		{errZeroVerifier, http.StatusInternalServerError},
		{errNegTolerance, http.StatusInternalServerError},
		{errSecretFIPS, http.StatusInternalServerError},
		{errors.New("anything else"), http.StatusInternalServerError},
	}
	for _, tc := range tests {
		if got := StatusCode(tc.err); got != tc.want {
			t.Errorf("StatusCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

var errStoreDown = errors.New("store unreachable")

// failingStore is a replay.Store that is down.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errStoreDown
}

// brokenReleaseStore claims like a MemoryStore but cannot release.
type brokenReleaseStore struct{ *replay.MemoryStore }

func (brokenReleaseStore) Release(context.Context, string) error { return errStoreDown }

func TestReleaseRefusesUnverifiedDeliveryAndReportsStoreFailure(t *testing.T) {
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: brokenReleaseStore{replay.NewMemoryStore(0)}}
	v := newVerifier(t, cfg)
	ctx := context.Background()
	if err := v.Release(ctx, Delivery{ID: "evt-1"}); !errors.Is(err, ErrMalformed) || Reason(err) != "delivery not verified" {
		t.Fatalf("Release(unverified) = %v, want ErrMalformed", err)
	}
	d, err := v.Verify(signed(t, newSigner(t, cfg), "evt-1", "x"), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if first, err := v.Claim(ctx, d); !first || err != nil {
		t.Fatalf("Claim = %v, %v", first, err)
	}
	if err := v.Release(ctx, d); !errors.Is(err, ErrReplayStore) || !errors.Is(err, errStoreDown) || Reason(err) == "" {
		t.Fatalf("Release with a failing store = %v, want ErrReplayStore wrapping the store's error", err)
	}
	// A working releaser makes the delivery first again.
	ok := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	if first, err := ok.Claim(ctx, d); !first || err != nil {
		t.Fatalf("Claim = %v, %v", first, err)
	}
	if err := ok.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	if first, err := ok.Claim(ctx, d); !first || err != nil {
		t.Fatalf("Claim after Release = %v, %v; want first", first, err)
	}
}

// foreignScheme satisfies Scheme by embedding it; the constructors refuse
// it rather than call methods that are not the package's own (or nil).
type foreignScheme struct{ Scheme }
