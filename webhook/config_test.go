package webhook

import (
	"context"
	"crypto/fips140"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"log/slog"

	"github.com/ctoken/ctoken/observe"
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
		{"Dedup by signature under Standard Webhooks", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Dedup: DedupSignature}},
		{"Dedup by ID and signature under Standard Webhooks", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Dedup: DedupIDAndSignature}},
		{"undefined Dedup", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Dedup: DedupIDAndSignature + 1}},
		{"negative Lease", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: -time.Second}},
		{"Lease under a millisecond", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: time.Microsecond}},
		{"Lease over MaxLease", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: MaxLease + time.Millisecond}},
		{"Lease of MaxInt64", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: math.MaxInt64}},
		{"negative RetryAfter", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, RetryAfter: -time.Second}},
		{"RetryAfter over MaxRetryAfter", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, RetryAfter: MaxRetryAfter + time.Nanosecond}},
		{"SignatureHeader under Shopify", Config{Scheme: Shopify(), Secrets: []string{shopifySecret}, SignatureHeader: "X-Sig"}},
		{"ShopifyByEvent without a policy on the event ID", Config{Scheme: ShopifyByEvent(), Secrets: []string{shopifySecret}, Dedup: DedupSignature}},
		{"Tolerance over MaxTolerance", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Tolerance: MaxTolerance + time.Second}},
		{"Tolerance of MaxInt64", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Tolerance: math.MaxInt64}},
		{"DedupWindow over MaxDedupWindow", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, DedupWindow: MaxDedupWindow + 1}},
		{"DedupWindow of MaxInt64", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, DedupWindow: math.MaxInt64}},
		{"Replay store without leases", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: claimOnlyStore{replay.NewMemoryStore(0)}, Namespace: "endpoint"}},
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

// TestConstructorsNameEveryFaultAtOnce pins that a config with several
// faults is refused with one error naming each (the user who sets Scheme
// does not meet the missing secret next), matching each fault's sentinel.
func TestConstructorsNameEveryFaultAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		signer bool
		cfg    Config
		is     []error
		names  []string
	}{
		{"verifier, all zero", false, Config{}, []error{ErrConfig, ErrNoSecret}, []string{"2 configuration faults", "no scheme (set Config.Scheme", "no secret"}},
		{"signer, all zero", true, Config{}, []error{ErrConfig, ErrNoSecret}, []string{"2 configuration faults", "no scheme", "no secret"}},
		{"verifier, every duration negative", false, Config{Scheme: HMACSHA256(), Lease: -1, Tolerance: -1, MaxBody: -1, DedupWindow: -1, RetryAfter: -1},
			[]error{ErrConfig, ErrNoSecret}, []string{"6 configuration faults", "no secret"}},
		{"signer with receiving options and a foreign scheme", true, Config{Scheme: foreignScheme{HMACSHA256()}, Secrets: []string{hmacSecret}, MaxBody: 1, Lease: time.Second, Transactional: true},
			[]error{ErrConfig}, []string{"4 configuration faults", "scheme not from this package"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.signer {
				_, err = NewSigner(tc.cfg)
			} else {
				_, err = NewVerifier(tc.cfg)
			}
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not match %v", err, want)
				}
			}
			for _, name := range tc.names {
				if err == nil || !strings.Contains(err.Error(), name) {
					t.Errorf("error %v does not name %q", err, name)
				}
			}
			if r := ReasonOf(err); r != observe.ReasonNone {
				t.Errorf("ReasonOf = %q: a configuration error is not a refusal", r)
			}
		})
	}
}

func TestNewSignerRefusesReceivingOptions(t *testing.T) {
	base := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}}
	for name, edit := range map[string]func(*Config){
		"Tolerance": func(c *Config) { c.Tolerance = time.Minute },
		"MaxBody":   func(c *Config) { c.MaxBody = 10 },
		"Replay": func(c *Config) {
			c.Replay, c.Namespace = replay.NewMemoryStore(0), "endpoint"
		},
		"DedupWindow": func(c *Config) { c.DedupWindow = time.Hour },
		"Namespace":   func(c *Config) { c.Namespace = "endpoint" },
		"OnReject":    func(c *Config) { c.OnReject = func(*http.Request, error) {} },
		"Dedup":       func(c *Config) { c.Dedup = DedupID },
		"RetryAfter":  func(c *Config) { c.RetryAfter = time.Second },
		"Lease":       func(c *Config) { c.Lease = time.Second },
		"OnDuplicate": func(c *Config) { c.OnDuplicate = func(*http.Request, Delivery) {} },
		"OnLeaseError": func(c *Config) {
			c.OnLeaseError = func(*http.Request, Delivery, error) {}
		},
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
	if m, ok := v.p.store.(*replay.MemoryStore); !ok || m.Max != DefaultReplayMax || v.p.lease != DefaultLease || v.p.dedupBy != DedupID {
		t.Fatalf("defaults: store %T, lease %v, dedup %v", v.p.store, v.p.lease, v.p.dedupBy)
	}
	for scheme, want := range map[Scheme]Dedup{HMACSHA256(): DedupSignature, GitHub(): DedupSignature, StandardWebhooks(): DedupID} {
		secret := hmacSecret
		if scheme == StandardWebhooks() {
			secret = stdSecret
		}
		if got := newVerifier(t, Config{Scheme: scheme, Secrets: []string{secret}}).p.dedupBy; got != want {
			t.Errorf("default Dedup under %v = %v, want %v", scheme, got, want)
		}
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
		if l, err := v.Acquire(context.Background(), Delivery{ID: "a", verified: true}); l != nil || !errors.Is(err, ErrNoSecret) {
			t.Fatalf("Acquire = %v, %v", l, err)
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

var errStoreDown = errors.New("store unreachable")

// failingStore is a replay store with leases that is down.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errStoreDown
}
func (failingStore) AcquireLease(context.Context, string, time.Duration) (replay.Lease, error) {
	return replay.Lease{}, errStoreDown
}
func (failingStore) ConfirmLease(context.Context, string, string, time.Time) error {
	return errStoreDown
}
func (failingStore) ReleaseLease(context.Context, string, string) error { return errStoreDown }

// tokenlessStore breaks the Leaser contract: it reports a lease acquired
// without a token.
type tokenlessStore struct{ *replay.MemoryStore }

func (tokenlessStore) AcquireLease(context.Context, string, time.Duration) (replay.Lease, error) {
	return replay.Lease{State: replay.LeaseAcquired}, nil
}

// flakyStore is a MemoryStore whose ConfirmLease and ReleaseLease fail
// while failing is set, counting the attempts.
type flakyStore struct {
	*replay.MemoryStore
	failing           atomic.Bool
	confirms, release atomic.Int32
}

func (f *flakyStore) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	f.confirms.Add(1)
	if f.failing.Load() {
		return errStoreDown
	}
	return f.MemoryStore.ConfirmLease(ctx, id, token, until)
}

func (f *flakyStore) ReleaseLease(ctx context.Context, id, token string) error {
	f.release.Add(1)
	if f.failing.Load() {
		return errStoreDown
	}
	return f.MemoryStore.ReleaseLease(ctx, id, token)
}

// TestNewVerifierTransactionalNeedsATransactor: Transactional is refused
// with ErrConfig, naming the field, unless the Replay store implements
// replay.Transactor (the default private store does not), and on a Signer.
func TestNewVerifierTransactionalNeedsATransactor(t *testing.T) {
	base := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Transactional: true}
	for _, tc := range []struct {
		name  string
		store replay.Store
		ok    bool
	}{
		{"default store", nil, false},
		{"MemoryStore", replay.NewMemoryStore(0), false},
		{"Leaser without transactions", &flakyStore{MemoryStore: replay.NewMemoryStore(0)}, false},
		{"Transactor", newTxStore(nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			if tc.store != nil {
				cfg.Replay, cfg.Namespace = tc.store, "endpoint"
			}
			v, err := NewVerifier(cfg)
			if tc.ok {
				if err != nil || v == nil {
					t.Fatalf("NewVerifier = %v, %v", v, err)
				}
				return
			}
			if v != nil || !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "Transactional") {
				t.Fatalf("NewVerifier = %v, %v; want ErrConfig naming Transactional", v, err)
			}
		})
	}
	t.Run("Signer", func(t *testing.T) {
		if s, err := NewSigner(Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Transactional: true}); s != nil ||
			!errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "Transactional") {
			t.Fatalf("NewSigner = %v, %v; want ErrConfig naming Transactional", s, err)
		}
	})
}

// foreignScheme satisfies Scheme by embedding it; the constructors refuse
// it rather than call methods that are not the package's own (or nil).
type foreignScheme struct{ Scheme }

// Every limit of a Config is inclusive: a Lease of exactly a millisecond
// or MaxLease, a Tolerance of MaxTolerance and a DedupWindow of
// MaxDedupWindow are accepted (one unit past each is refused, see
// TestNewVerifierRefusesOptionsWithoutEffect), and so is a namespace with
// '~' and space inside; DEL is refused.
func TestConfigLimitsAreInclusive(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"Lease of a millisecond", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: time.Millisecond}},
		{"Lease of MaxLease", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: MaxLease}},
		{"Tolerance of MaxTolerance", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Tolerance: MaxTolerance}},
		{"DedupWindow of MaxDedupWindow", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, DedupWindow: MaxDedupWindow}},
		{"namespace with ~ and space", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Namespace: "a ~b"}},
	} {
		if _, err := NewVerifier(tc.cfg); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Namespace: "a\x7fb"}
	if _, err := NewVerifier(cfg); !errors.Is(err, ErrConfig) || Reason(err) != Reason(errNamespaceText) {
		t.Errorf("namespace with DEL: %v, want %v", err, errNamespaceText)
	}
}

// log/slog sees a configured Verifier or Signer as its scheme and its
// number of secrets, and a zero one as {zero: true}.
func TestLogValueDescribesSchemeAndSecretCount(t *testing.T) {
	render := func(v slog.Value) string {
		var b strings.Builder
		for _, a := range v.Resolve().Group() {
			b.WriteString(a.String() + ";")
		}
		return b.String()
	}
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret, stdSecret2}}
	for _, tc := range []struct {
		name string
		got  slog.Value
		want string
	}{
		{"verifier", newVerifier(t, cfg).LogValue(), "scheme=standard-webhooks;secrets=2;"},
		{"signer", newSigner(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}}).LogValue(), "scheme=slack;secrets=1;"},
		{"zero verifier", Verifier{}.LogValue(), "zero=true;"},
		{"zero signer", Signer{}.LogValue(), "zero=true;"},
	} {
		if got := render(tc.got); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
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

// boundedStore is a memory store that says it holds nothing past horizon.
type boundedStore struct {
	*replay.MemoryStore
	horizon time.Duration
}

func (b boundedStore) Horizon() time.Duration { return b.horizon }

// A store that refuses entries past its horizon would refuse every
// confirmation of a verifier whose DedupWindow (or Lease) reaches further,
// and every delivery would be processed again after its lease: refused at
// construction.
func TestNewVerifierRefusesDedupWindowPastTheStoresHorizon(t *testing.T) {
	tests := []struct {
		name    string
		horizon time.Duration
		dedup   time.Duration
		lease   time.Duration
		ok      bool
	}{
		{"default window fits the default horizon", 25 * time.Hour, 0, 0, true},
		{"window over the horizon", 25 * time.Hour, 4 * 24 * time.Hour, 0, false},
		{"window plus skew over the horizon", 24 * time.Hour, 24 * time.Hour, 0, false},
		{"lease over the horizon", 2 * time.Hour, time.Hour, 3 * time.Hour, false},
		{"short horizon, short window", 2 * time.Hour, time.Hour, time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewVerifier(Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Namespace: "ns",
				Replay: boundedStore{replay.NewMemoryStore(10), tt.horizon}, DedupWindow: tt.dedup, Lease: tt.lease})
			switch {
			case tt.ok && err != nil:
				t.Fatalf("NewVerifier: %v", err)
			case !tt.ok && (!errors.Is(err, ErrConfig) || err != errStoreHorizon):
				t.Fatalf("NewVerifier = %v; want %v", err, errStoreHorizon)
			}
		})
	}
}

func TestNewVerifierRefusesBadNamespace(t *testing.T) {
	store := replay.NewMemoryStore(0)
	tests := []struct {
		name, ns string
		want     error
	}{
		{"missing with a Replay store", "", errNoNamespace},
		{"over MaxNamespaceBytes", strings.Repeat("n", MaxNamespaceBytes+1), errLongNamespace},
		{"trailing space", "orders ", errNamespaceText},
		{"leading space", " orders", errNamespaceText},
		{"newline", "orders\n", errNamespaceText},
		{"control byte", "ord\x00ers", errNamespaceText},
		{"non-ASCII", "ordérs", errNamespaceText},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(Config{Scheme: Stripe(), Secrets: []string{"whsec_endpoint_a"}, Replay: store, Namespace: tc.ns})
			if v != nil || !errors.Is(err, ErrConfig) || !errors.Is(err, tc.want) {
				t.Fatalf("NewVerifier = %v, %v; want %v", v, err, tc.want)
			}
		})
	}
	for _, ns := range []string{"", "orders", strings.Repeat("n", MaxNamespaceBytes), "billing / prod"} {
		if _, err := NewVerifier(Config{Scheme: Stripe(), Secrets: []string{"whsec_endpoint_a"}, Namespace: ns}); err != nil {
			t.Errorf("Namespace %q with the private store refused: %v", ns, err)
		}
	}
}
