package webhook

import (
	"crypto/ed25519"
	"crypto/fips140"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/observe"
)

// Test secrets of the schemes added for issue 12.
const (
	stripeSecret  = "whsec_ctoken_stripe_test_secret"
	stripeSecret2 = "whsec_ctoken_stripe_test_secret_2"
	slackSecret   = "8f742231b10e8888abcd99yyyzzz85a5"
	shopifySecret = "hush-shopify-client-secret"
)

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

func TestNewSchemesSignAndVerifyRoundTrip(t *testing.T) {
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
}

func TestNewSchemesRefuseOptionsWithoutEffect(t *testing.T) {
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
}

func TestNewSchemesRefuseBadSecretsNamingPositionNotSecret(t *testing.T) {
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
}

func TestStripeSignRefusesAnIDTheBodyDoesNotCarry(t *testing.T) {
	s := newSigner(t, Config{Scheme: Stripe(), Secrets: []string{stripeSecret}})
	for _, tc := range []struct{ name, id, body string }{
		{"another id", "evt_2", `{"id":"evt_1"}`},
		{"no id in the body", "evt_1", `{"object":"event"}`},
		{"body not JSON", "evt_1", `id=evt_1`},
		{"id twice in the body", "evt_1", `{"id":"evt_1","id":"evt_1"}`},
	} {
		h := http.Header{"Keep": {"me"}}
		if err := s.Sign(h, tc.id, []byte(tc.body)); !errors.Is(err, ErrMalformed) || Reason(err) != "id is not the id of the event in the body" {
			t.Fatalf("%s: Sign = %v", tc.name, err)
		}
		if len(h) != 1 {
			t.Fatalf("%s: Sign changed the header: %v", tc.name, h)
		}
	}
}

func TestSlackSignRefusesBodiesWithoutTheEventID(t *testing.T) {
	s := newSigner(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}})
	for _, tc := range []struct{ name, id, body string }{
		{"another event_id", "Ev02", `{"event_id":"Ev01"}`},
		{"slash command (no event_id)", "Ev01", `token=x&command=%2Fhello`},
		{"JSON without event_id", "Ev01", `{"type":"url_verification"}`},
		{"broken JSON", "Ev01", `{"event_id":"Ev01"`},
	} {
		h := http.Header{}
		if err := s.Sign(h, tc.id, []byte(tc.body)); !errors.Is(err, ErrMalformed) || Reason(err) != "id is not the event_id of the body" {
			t.Fatalf("%s: Sign = %v", tc.name, err)
		}
		if len(h) != 0 {
			t.Fatalf("%s: Sign changed the header: %v", tc.name, h)
		}
	}
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

// Slack requests without an event_id are identified by their signature:
// an exact replay is a duplicate, a new request is not.
func TestSlackRequestWithoutEventIDIsIdentifiedBySignature(t *testing.T) {
	clk := clocktest.At(time.Unix(1531420618, 0))
	v := newVerifier(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}, Now: clk.Now})
	next := &recordingHandler{}
	mw := v.Middleware(next)
	body := "token=x&command=%2Fdeploy&text=prod"
	sign := func(ts int64) http.Header {
		h := http.Header{}
		h.Set(HeaderSlackTimestamp, strconv.FormatInt(ts, 10))
		h.Set(HeaderSlackSignature, "v0="+hex.EncodeToString(standardMAC([]byte(slackSecret), "v0:"+strconv.FormatInt(ts, 10)+":"+body)))
		return h
	}
	h := sign(1531420618)
	d, err := v.Verify(h, []byte(body))
	if err != nil || d.ID != h.Get(HeaderSlackSignature) {
		t.Fatalf("Verify = %+v, %v; want the signature as ID", d, err)
	}
	deliver(mw, h, body)
	deliver(mw, h, body)
	deliver(mw, sign(1531420619), body) // the same command issued again
	if n := next.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

// A Slack signature in upper-case hex (accepted, as slack-go accepts it) is
// the same delivery as the lower-case one Slack sends: re-casing the hex of
// a captured request without an event_id does not get it processed again.
func TestSlackReCasedSignatureIsTheSameDelivery(t *testing.T) {
	clk := clocktest.At(time.Unix(1531420618, 0))
	v := newVerifier(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}, Now: clk.Now})
	next := &recordingHandler{}
	mw := v.Middleware(next)
	body := "token=x&command=%2Fdeploy&text=prod"
	lower := "v0=" + hex.EncodeToString(standardMAC([]byte(slackSecret), "v0:1531420618:"+body))
	for _, sig := range []string{lower, strings.ToUpper(lower[:3]) + strings.ToUpper(lower[3:]), "v0=" + strings.ToUpper(lower[3:])} {
		h := http.Header{}
		h.Set(HeaderSlackTimestamp, "1531420618")
		h.Set(HeaderSlackSignature, sig)
		d, err := v.Verify(h, []byte(body))
		if sig[:3] != "v0=" {
			if !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
				t.Fatalf("%s: Verify = %+v, %v; want the prefix refused", sig, d, err)
			}
			continue
		}
		if err != nil || d.ID != lower {
			t.Fatalf("%s: Verify = %+v, %v; want the lower-case signature as ID", sig, d, err)
		}
		if rec := deliver(mw, h, body); rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d", sig, rec.Code)
		}
	}
	if n := next.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// Cursor() is HMACSHA256() under Cursor's fixed headers: either verifies
// what the other signs, with the X-Webhook-ID as the delivery ID, and only
// the name differs.
func TestCursorIsHMACSHA256UnderFixedHeaders(t *testing.T) {
	if Cursor().String() != "cursor" || HMACSHA256().String() != "hmac-sha256" {
		t.Fatalf("names %q, %q", Cursor(), HMACSHA256())
	}
	clk := newStepClock()
	body := `{"event":"statusChange","status":"FINISHED"}`
	for _, pair := range [][2]Scheme{{Cursor(), HMACSHA256()}, {HMACSHA256(), Cursor()}} {
		s := newSigner(t, Config{Scheme: pair[0], Secrets: []string{hmacSecret}, Now: clk.Now})
		v := newVerifier(t, Config{Scheme: pair[1], Secrets: []string{hmacSecret}, Now: clk.Now})
		h := signed(t, s, "evt_cursor_1", body)
		if len(h) != 2 || h.Get(HeaderWebhookID) != "evt_cursor_1" || !strings.HasPrefix(h.Get(HeaderWebhookSignature), "sha256=") {
			t.Fatalf("%v signed %v", pair[0], h)
		}
		if d, err := v.Verify(h, []byte(body)); err != nil || d.ID != "evt_cursor_1" {
			t.Fatalf("%v signs, %v verifies: %+v, %v", pair[0], pair[1], d, err)
		}
	}
	for _, cfg := range []Config{
		{Scheme: Cursor(), Secrets: []string{hmacSecret}, SignatureHeader: "X-Sig"},
		{Scheme: Cursor(), Secrets: []string{hmacSecret}, IDHeader: "X-ID"},
		{Scheme: Cursor(), Secrets: []string{hmacSecret}, Tolerance: time.Minute},
	} {
		if _, err := NewVerifier(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
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

func TestStripeSignatureHeaderOverCapRefused(t *testing.T) {
	clk := newStepClock()
	cfg := Config{Scheme: Stripe(), Secrets: []string{stripeSecret}, Now: clk.Now}
	v := newVerifier(t, cfg)
	body := `{"id":"evt_1"}`
	h := signed(t, newSigner(t, cfg), "evt_1", body)
	sig := h.Get(HeaderStripeSignature)
	// Forged v1 items before the genuine one, up to the cap: all compared.
	junk := ",v1=" + strings.Repeat("0", 64)
	n := (MaxSignatureHeaderBytes - len(sig)) / len(junk)
	at := sig[:strings.Index(sig, ",")] + strings.Repeat(junk, n) + sig[strings.Index(sig, ","):]
	h.Set(HeaderStripeSignature, at)
	if _, err := v.Verify(h, []byte(body)); err != nil || n < MaxSignatures {
		t.Fatalf("%d forged v1 items then the genuine one (%d bytes): %v", n, len(at), err)
	}
	h.Set(HeaderStripeSignature, at+strings.Repeat(",", MaxSignatureHeaderBytes+1-len(at)))
	if _, err := v.Verify(h, []byte(body)); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
		t.Fatalf("header over the cap: %v", err)
	}
}

// At most MaxSignatures v1a entries are verified: the genuine one in
// sixteenth place is found, in seventeenth place it is not looked at.
func TestEd25519VerifiesAtMostMaxSignaturesEntries(t *testing.T) {
	clk := newStepClock()
	s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
	forger := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv2}, Now: clk.Now})
	v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
	genuine := signed(t, s, "msg_1", "{}").Get(HeaderStandardSignature)
	forged := signed(t, forger, "msg_1", "{}").Get(HeaderStandardSignature)
	for _, tc := range []struct {
		before int
		want   error
	}{{MaxSignatures - 1, nil}, {MaxSignatures, ErrSignature}} {
		h := signed(t, s, "msg_1", "{}")
		h.Set(HeaderStandardSignature, strings.Repeat(forged+" ", tc.before)+genuine)
		if _, err := v.Verify(h, []byte("{}")); !errors.Is(err, tc.want) {
			t.Fatalf("genuine entry after %d forged ones: %v, want %v", tc.before, err, tc.want)
		}
	}
}

// Plain Ed25519 is approved in FIPS 140-3 mode: the scheme signs and
// verifies under GODEBUG=fips140=only. The check runs in a child process,
// since the mode is fixed at start-up.
func TestEd25519SchemeWorksUnderFIPS140Only(t *testing.T) {
	if os.Getenv("CTOKEN_FIPS_CHILD") == "1" {
		if !fips140.Enabled() {
			t.Fatal("child not in FIPS 140-3 mode")
		}
		clk := newStepClock()
		s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
		v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
		if _, err := v.Verify(signed(t, s, "msg_1", "{}"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		t.Log("ed25519 ok under fips140=only")
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEd25519SchemeWorksUnderFIPS140Only$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "CTOKEN_FIPS_CHILD=1", "GODEBUG=fips140=only")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ed25519 ok under fips140=only") {
		t.Fatalf("child under GODEBUG=fips140=only: %v\n%s", err, out)
	}
}

// A whpk_ key of 32 bytes that is not a point of the curve would make
// every delivery fail as forged; it is refused at construction instead.
func TestEd25519VerifierRefusesAPublicKeyOffTheCurve(t *testing.T) {
	var off []byte
	for i := 0; off == nil; i++ {
		k := make([]byte, 32)
		k[0] = byte(i)
		err := ed25519.VerifyWithOptions(ed25519.PublicKey(k), []byte("m"), make([]byte, 64), &ed25519.Options{})
		if err != nil && strings.Contains(err.Error(), "public key") {
			off = k
		}
	}
	secret := Ed25519PublicKeyPrefix + base64.StdEncoding.EncodeToString(off)
	v, err := NewVerifier(Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub, secret}})
	if v != nil || !errors.Is(err, ErrSecretInvalid) || Reason(err) != "Ed25519 public key is not a point of the curve" || !strings.Contains(err.Error(), "(secret 2 of 2)") {
		t.Fatalf("NewVerifier = %v, %v", v, err)
	}
}

// A v1a signer with two private keys (a rotation) writes one entry per
// key; a verifier holding either public key accepts the delivery.
func TestEd25519SignerSignsWithEveryKeyForRotation(t *testing.T) {
	clk := newStepClock()
	s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv, edPriv2}, Now: clk.Now})
	h := signed(t, s, "msg_1", "{}")
	if entries := strings.Fields(h.Get(HeaderStandardSignature)); len(entries) != 2 || !strings.HasPrefix(entries[1], "v1a,") {
		t.Fatalf("signature header %q", h.Get(HeaderStandardSignature))
	}
	for _, pubs := range [][]string{{edPub}, {edPub2}, {edPub2, edPub}} {
		v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: pubs, Now: clk.Now})
		if _, err := v.Verify(h, []byte("{}")); err != nil {
			t.Fatalf("verifier with %d keys: %v", len(pubs), err)
		}
	}
}
