package webhook

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/observe"
)

// A hex tag (Stripe v1, Slack v0) with one digit replaced by a character
// that is not a hex digit, or by another digit ('A' is 10), is refused, even
// where the digit replaced was a '0' (which a lax parser reading the bad
// character as 0 would accept).
func TestLowerHexTagsRefuseAnyNonHexDigit(t *testing.T) {
	clk := newStepClock()
	for _, tc := range []struct {
		scheme       Scheme
		secret, id   string
		body, header string
		prefix       string // before the hex in the header
	}{
		{Stripe(), stripeSecret, "evt_1", `{"id":"evt_1"}`, HeaderStripeSignature, ",v1="},
		{Slack(), slackSecret, "Ev01", `{"event_id":"Ev01"}`, HeaderSlackSignature, "v0="},
	} {
		cfg := Config{Scheme: tc.scheme, Secrets: []string{tc.secret}, Now: clk.Now}
		s, v := newSigner(t, cfg), newVerifier(t, cfg)
		tried := 0
		for n := 0; tried < 2 && n < 100; n++ {
			body := strings.Replace(tc.body, `"}`, `","n":`+strconv.Itoa(n)+`}`, 1)
			h := http.Header{}
			if err := s.Sign(h, tc.id, []byte(body)); err != nil {
				t.Fatal(err)
			}
			sig := h.Get(tc.header)
			start := strings.Index(sig, tc.prefix) + len(tc.prefix)
			hexText := sig[start : start+64]
			// A '0' in the high and then in the low nibble of a byte.
			k := strings.IndexByte(hexText, '0')
			if k < 0 || k%2 != tried {
				continue
			}
			tried++
			for _, c := range []byte{'g', 'G', '/', ':', '`', 'A', ' ', 0x80} {
				bad := sig[:start+k] + string([]byte{c}) + sig[start+k+1:]
				h.Set(tc.header, bad)
				if _, err := v.Verify(h, []byte(body)); err == nil {
					t.Fatalf("%v: %q accepted for %q", tc.scheme, bad, sig)
				}
			}
		}
		if tried < 2 {
			t.Fatalf("%v: no signature with a 0 in both nibble positions", tc.scheme)
		}
	}
}

// TestNewSchemes pins what every scheme added in issue 12 shares.
func TestNewSchemes(t *testing.T) {
	// The same holds for the schemes added for issue 12: a forged, malformed or
	// stale delivery is refused without allocating. The one exception is a
	// well-formed forged Ed25519 signature, whose verification by
	// crypto/ed25519 allocates its failure error: one allocation per
	// verification, so one here (one key, one entry).
	t.Run("reject without allocating", func(t *testing.T) {
		if raceEnabled {
			t.Skip("allocation counts are not meaningful under -race")
		}
		for _, obs := range allocObservers {
			for _, ss := range newSchemes() {
				clk := newStepClock()
				s, v := ss.observedPair(t, clk.Now, obs)
				good := signed(t, s, ss.id, ss.body)
				type rejection struct {
					name   string
					h      http.Header
					body   string
					want   error
					allocs float64
				}
				forgedAllocs := 0.0
				if ss.scheme == StandardWebhooksEd25519() {
					forgedAllocs = 1
				}
				malformed := good.Clone()
				malformed.Set(v.p.sigHeader, "v9,"+strings.Repeat("x", 40))
				if ss.scheme == Stripe() {
					malformed.Set(v.p.sigHeader, "t=1,v9="+strings.Repeat("x", 40))
				}
				cases := []rejection{
					{"forged", good, ss.body + " ", ErrSignature, forgedAllocs},
					{"malformed signature", malformed, ss.body, ErrSignature, 0},
					{"no signature", func() http.Header { h := good.Clone(); h.Del(v.p.sigHeader); return h }(), ss.body, ErrSignature, 0},
				}
				if ss.signsTime {
					clk.Advance(-time.Hour)
					stale := signed(t, s, ss.id, ss.body)
					clk.Advance(time.Hour)
					cases = append(cases, rejection{"stale", stale, ss.body, ErrTimestamp, 0})
				}
				for _, tc := range cases {
					if _, err := v.Verify(tc.h, []byte(tc.body)); !errors.Is(err, tc.want) {
						t.Fatalf("%v %s: %v, want %v", ss.scheme, tc.name, err, tc.want)
					}
					body := []byte(tc.body)
					if n := testing.AllocsPerRun(200, func() {
						if _, err := v.Verify(tc.h, body); err == nil {
							t.Fatal("accepted")
						}
					}); n != tc.allocs {
						t.Fatalf("%v, observer %v: refusing a %s delivery allocates %v times, want %v", ss.scheme, obs != nil, tc.name, n, tc.allocs)
					}
				}
			}
		}
	})

	t.Run("sign and verify round trip", func(t *testing.T) {
		clk := newStepClock()
		for _, ss := range newSchemes() {
			s, v := ss.pair(t, clk.Now)
			h := signed(t, s, ss.id, ss.body)
			d, err := v.Verify(h, []byte(ss.body))
			if err != nil || d.ID != ss.id {
				t.Fatalf("%v: Verify = %+v, %v", ss.scheme, d, err)
			}
			if ss.signsTime != !d.Timestamp.IsZero() || (ss.signsTime && !d.Timestamp.Equal(clk.Now().Truncate(time.Second))) {
				t.Fatalf("%v: delivery timestamp %v", ss.scheme, d.Timestamp)
			}
		}
	})

	t.Run("refuse options without effect", func(t *testing.T) {
		var tests []struct {
			name string
			cfg  Config
		}
		add := func(name string, cfg Config) {
			tests = append(tests, struct {
				name string
				cfg  Config
			}{name, cfg})
		}
		for _, ss := range newSchemes() {
			add("SignatureHeader under "+ss.scheme.String(), Config{Scheme: ss.scheme, Secrets: ss.verifier, SignatureHeader: "X-Sig"})
			add("IDHeader under "+ss.scheme.String(), Config{Scheme: ss.scheme, Secrets: ss.verifier, IDHeader: "X-ID"})
			if ss.signsTime {
				add("fractional Tolerance under "+ss.scheme.String(), Config{Scheme: ss.scheme, Secrets: ss.verifier, Tolerance: 1500 * time.Millisecond})
			} else {
				add("Tolerance under "+ss.scheme.String(), Config{Scheme: ss.scheme, Secrets: ss.verifier, Tolerance: time.Minute})
			}
		}
		add("fractional Tolerance under standard-webhooks", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Tolerance: time.Minute + time.Nanosecond})
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if v, err := NewVerifier(tc.cfg); v != nil || !errors.Is(err, ErrConfig) || Reason(err) == "" {
					t.Fatalf("NewVerifier = %v, %v; want ErrConfig with a reason", v, err)
				}
			})
		}
		// A whole number of seconds other than the default is accepted.
		for _, ss := range newSchemes() {
			if ss.signsTime {
				newVerifier(t, Config{Scheme: ss.scheme, Secrets: ss.verifier, Tolerance: 42 * time.Second})
			}
		}
	})

	t.Run("refuse bad secrets naming position not secret", func(t *testing.T) {
		tests := []struct {
			name    string
			scheme  Scheme
			signer  bool
			secrets []string
			reason  string
		}{
			{"Stripe secret without whsec_ (an API key)", Stripe(), false, []string{stripeSecret, "sk_test_4eC39HqLyjWDarjtT1zdp7dc"}, "Stripe signing secret does not start with whsec_"},
			{"Stripe secret of the bare prefix", Stripe(), true, []string{"whsec_"}, "Stripe signing secret does not start with whsec_"},
			{"empty Stripe secret", Stripe(), false, []string{""}, "secret empty"},
			{"empty Slack secret", Slack(), false, []string{slackSecret, ""}, "secret empty"},
			{"empty Shopify secret", Shopify(), true, []string{""}, "secret empty"},
			{"empty Svix secret", Svix(), false, []string{""}, "secret empty"},
			{"Svix secret too short", Svix(), false, []string{"whsec_c2hvcnQ="}, "secret shorter than 24 bytes"},
			{"Ed25519 private key on a Verifier", StandardWebhooksEd25519(), false, []string{edPub, edPriv}, "an Ed25519 Verifier takes whpk_ public keys and a Signer whsk_ private keys"},
			{"Ed25519 public key on a Signer", StandardWebhooksEd25519(), true, []string{edPub}, "an Ed25519 Verifier takes whpk_ public keys and a Signer whsk_ private keys"},
			{"whsec_ secret under Ed25519", StandardWebhooksEd25519(), false, []string{stdSecret}, "an Ed25519 Verifier takes whpk_ public keys and a Signer whsk_ private keys"},
			{"unprefixed Ed25519 key", StandardWebhooksEd25519(), false, []string{strings.TrimPrefix(edPub, "whpk_")}, "an Ed25519 Verifier takes whpk_ public keys and a Signer whsk_ private keys"},
			{"Ed25519 key of 31 bytes", StandardWebhooksEd25519(), false, []string{"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31))}, "Ed25519 key not padded standard base64 of 32 bytes after its prefix"},
			{"Ed25519 key of 64 bytes", StandardWebhooksEd25519(), true, []string{"whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 64))}, "Ed25519 key not padded standard base64 of 32 bytes after its prefix"},
			{"Ed25519 key without padding", StandardWebhooksEd25519(), false, []string{strings.TrimRight(edPub, "=")}, "Ed25519 key not padded standard base64 of 32 bytes after its prefix"},
			{"Ed25519 key with a newline", StandardWebhooksEd25519(), true, []string{edPriv[:20] + "\n" + edPriv[20:]}, "Ed25519 key not padded standard base64 of 32 bytes after its prefix"},
			{"empty Ed25519 key", StandardWebhooksEd25519(), false, []string{""}, "secret empty"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				cfg := Config{Scheme: tc.scheme, Secrets: tc.secrets}
				var err error
				if tc.signer {
					var s *Signer
					s, err = NewSigner(cfg)
					if s != nil {
						t.Fatal("NewSigner returned a signer with an error")
					}
				} else {
					var v *Verifier
					v, err = NewVerifier(cfg)
					if v != nil {
						t.Fatal("NewVerifier returned a verifier with an error")
					}
				}
				pos := "(secret " + string(rune('0'+len(tc.secrets))) + " of "
				if !errors.Is(err, ErrSecretInvalid) || Reason(err) != tc.reason || !strings.Contains(err.Error(), pos) {
					t.Fatalf("err = %v (reason %q), want ErrSecretInvalid with reason %q naming %q", err, Reason(err), tc.reason, pos)
				}
				last := tc.secrets[len(tc.secrets)-1]
				if len(last) > 8 && strings.Contains(err.Error(), last[len(last)-8:]) {
					t.Fatalf("error text echoes the secret: %v", err)
				}
			})
		}
	})
}

// Ed25519 test keys: whsk_ seeds and their whpk_ public keys.
var edPriv, edPub, edPriv2, edPub2 = func() (string, string, string, string) {
	key := func(seed string) (string, string) {
		pub := ed25519.NewKeyFromSeed([]byte(seed)).Public().(ed25519.PublicKey)
		return Ed25519PrivateKeyPrefix + base64.StdEncoding.EncodeToString([]byte(seed)),
			Ed25519PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
	}
	a, b := key("ctoken-test-ed25519-seed-1------")
	c, d := key("ctoken-test-ed25519-seed-2------")
	return a, b, c, d
}()

// senderScheme is one scheme with a matching signer and verifier
// configuration and a body and ID that fit it.
type senderScheme struct {
	scheme           Scheme
	signer, verifier []string // secrets
	id, body         string
	signsTime        bool
}

// newSchemes lists every scheme added for issue 12.
func newSchemes() []senderScheme {
	return []senderScheme{
		{Svix(), []string{stdSecret}, []string{stdSecret}, "msg_1", `{"a":1}`, true},
		{Stripe(), []string{stripeSecret}, []string{stripeSecret}, "evt_1", `{"id":"evt_1","object":"event"}`, true},
		{Slack(), []string{slackSecret}, []string{slackSecret}, "Ev01", `{"type":"event_callback","event_id":"Ev01"}`, true},
		{Shopify(), []string{shopifySecret}, []string{shopifySecret}, "b54557e4-bdd9", `{"id":820982911946154508}`, false},
		{StandardWebhooksEd25519(), []string{edPriv}, []string{edPub}, "msg_1", `{"a":1}`, true},
	}
}

func (ss senderScheme) pair(t testing.TB, now func() time.Time) (*Signer, *Verifier) {
	t.Helper()
	return ss.observedPair(t, now, nil)
}

// observedPair is pair with obs as the Observer of both.
func (ss senderScheme) observedPair(t testing.TB, now func() time.Time, obs observe.Observer) (*Signer, *Verifier) {
	t.Helper()
	s, err := NewSigner(Config{Scheme: ss.scheme, Secrets: ss.signer, Now: now, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return s, newVerifier(t, Config{Scheme: ss.scheme, Secrets: ss.verifier, Now: now, Observer: obs})
}

// A sender's retry carries a fresh timestamp and signature but the same
// event: the middleware runs the handler once and acknowledges the retry.
func TestRetryOfAnEventWithAFreshSignatureIsADuplicate(t *testing.T) {
	for _, ss := range newSchemes() {
		clk := newStepClock()
		s, v := ss.pair(t, clk.Now)
		next := &recordingHandler{}
		mw := v.Middleware(next)
		first := signed(t, s, ss.id, ss.body)
		clk.Advance(90 * time.Second)
		retry := signed(t, s, ss.id, ss.body)
		if ss.signsTime && first.Get(v.p.sigHeader) == retry.Get(v.p.sigHeader) {
			t.Fatalf("%v: the retry's signature is the first's", ss.scheme)
		}
		for i, h := range []http.Header{first, retry} {
			if rec := deliver(mw, h, ss.body); rec.Code != http.StatusOK {
				t.Fatalf("%v: delivery %d: status %d", ss.scheme, i, rec.Code)
			}
		}
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("%v: handler ran %d times", ss.scheme, n)
		}
	}
}

// With a non-default Tolerance, the edge is compared in whole seconds
// under every scheme that signs a time: tolerance + 0.999 s is accepted,
// tolerance + 1 s refused, both ways.
func TestToleranceComparedInWholeSeconds(t *testing.T) {
	const tol = 10 * time.Second
	schemes := append(newSchemes(), senderScheme{StandardWebhooks(), []string{stdSecret}, []string{stdSecret}, "msg_1", "{}", true})
	for _, ss := range schemes {
		if !ss.signsTime {
			continue
		}
		clk := clocktest.At(time.Unix(1700000000, 0))
		s, _ := ss.pair(t, clk.Now)
		h := signed(t, s, ss.id, ss.body)
		for _, tc := range []struct {
			offset time.Duration
			want   error
			reason string
		}{
			{tol + 999*time.Millisecond, nil, ""},
			{tol + time.Second, ErrTimestamp, "timestamp too old"},
			{-tol, nil, ""},
			{-tol - time.Nanosecond, ErrTimestamp, "timestamp in the future"}, // truncated to -tol-1 s
		} {
			at := clocktest.At(time.Unix(1700000000, 0).Add(tc.offset))
			v := newVerifier(t, Config{Scheme: ss.scheme, Secrets: ss.verifier, Tolerance: tol, Now: at.Now})
			_, err := v.Verify(h, []byte(ss.body))
			if !errors.Is(err, tc.want) || Reason(err) != tc.reason {
				t.Fatalf("%v at %v: %v, want %v (%q)", ss.scheme, tc.offset, err, tc.want, tc.reason)
			}
		}
	}
}
