package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
)

const hmacSecret2 = "hmac-test-secret-2-rotated"

func TestSetSecrets(t *testing.T) {
	t.Run("refuses invalid secrets and keeps the ones in effect", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			scheme  Scheme
			old     []string
			bad     []string
			want    error
			signer  bool
			pairKey string // a secret that signs for the old set
		}{
			{"no secret", HMACSHA256(), []string{hmacSecret}, nil, ErrNoSecret, false, hmacSecret},
			{"empty list", HMACSHA256(), []string{hmacSecret}, []string{}, ErrNoSecret, false, hmacSecret},
			{"empty secret", HMACSHA256(), []string{hmacSecret}, []string{hmacSecret2, ""}, ErrSecretInvalid, false, hmacSecret},
			{"trailing newline", HMACSHA256(), []string{hmacSecret}, []string{hmacSecret2 + "\n"}, ErrSecretInvalid, false, hmacSecret},
			{"standard secret too short", StandardWebhooks(), []string{stdSecret}, []string{"whsec_c2hvcnQ="}, ErrSecretInvalid, false, stdSecret},
			{"standard secret not base64", StandardWebhooks(), []string{stdSecret}, []string{"whsec_!!!"}, ErrSecretInvalid, false, stdSecret},
			{"stripe secret without whsec_", Stripe(), []string{stripeSecret}, []string{"sk_live_x"}, ErrSecretInvalid, false, stripeSecret},
			{"private key given to an Ed25519 verifier", StandardWebhooksEd25519(), []string{edPub}, []string{edPriv2}, ErrSecretInvalid, false, edPriv},
			{"public key given to an Ed25519 signer", StandardWebhooksEd25519(), []string{edPriv}, []string{edPub2}, ErrSecretInvalid, true, edPriv},
		} {
			t.Run(tc.name, func(t *testing.T) {
				clk := newStepClock()
				body, id := `{"id":"evt_1","event_id":"evt_1"}`, "evt_1"
				if tc.signer {
					s := newSigner(t, Config{Scheme: tc.scheme, Secrets: tc.old, Now: clk.Now})
					err := s.SetSecrets(tc.bad)
					if !errors.Is(err, tc.want) {
						t.Fatalf("SetSecrets = %v, want %v", err, tc.want)
					}
					assertNoSecretIn(t, err, tc.bad)
					v := newVerifier(t, Config{Scheme: tc.scheme, Secrets: []string{edPub}, Now: clk.Now})
					if _, err := v.Verify(signed(t, s, id, body), []byte(body)); err != nil {
						t.Fatalf("the signer lost its secrets: %v", err)
					}
					return
				}
				v := newVerifier(t, Config{Scheme: tc.scheme, Secrets: tc.old, Now: clk.Now})
				err := v.SetSecrets(tc.bad)
				if !errors.Is(err, tc.want) {
					t.Fatalf("SetSecrets = %v, want %v", err, tc.want)
				}
				assertNoSecretIn(t, err, tc.bad)
				s := newSigner(t, Config{Scheme: tc.scheme, Secrets: []string{tc.pairKey}, Now: clk.Now})
				if _, err := v.Verify(signed(t, s, id, body), []byte(body)); err != nil {
					t.Fatalf("the verifier lost its secrets: %v", err)
				}
			})
		}
	})

	t.Run("on zero values refuses", func(t *testing.T) {
		var v *Verifier
		if err := v.SetSecrets([]string{hmacSecret}); !errors.Is(err, ErrNoSecret) {
			t.Errorf("nil Verifier: %v", err)
		}
		if err := (&Verifier{}).SetSecrets([]string{hmacSecret}); !errors.Is(err, ErrNoSecret) {
			t.Errorf("zero Verifier: %v", err)
		}
		var s *Signer
		if err := s.SetSecrets([]string{hmacSecret}); !errors.Is(err, ErrNoSecret) {
			t.Errorf("nil Signer: %v", err)
		}
		if err := (&Signer{}).SetSecrets([]string{hmacSecret}); !errors.Is(err, ErrNoSecret) {
			t.Errorf("zero Signer: %v", err)
		}
	})

	// Swaps the secrets of a verifier
	// and a signer under every scheme and checks which deliveries verify, and
	// that the description counts the new secrets without printing them.
	t.Run("takes effect for the next call", func(t *testing.T) {
		for _, ss := range append(newSchemes(), senderScheme{HMACSHA256(), []string{hmacSecret}, []string{hmacSecret}, "evt_1", `{}`, false}) {
			clk := newStepClock()
			s, v := ss.pair(t, clk.Now)
			oldSigner := newSigner(t, Config{Scheme: ss.scheme, Secrets: ss.signer, Now: clk.Now})
			newSignerSecret, newVerifierSecret := rotated(ss)
			before := signed(t, oldSigner, ss.id, ss.body)
			if err := v.SetSecrets([]string{newVerifierSecret}); err != nil {
				t.Fatalf("%v: %v", ss.scheme, err)
			}
			if _, err := v.Verify(before, []byte(ss.body)); !errors.Is(err, ErrSignature) {
				t.Errorf("%v: a delivery under the dropped secret: %v", ss.scheme, err)
			}
			if err := s.SetSecrets([]string{newSignerSecret}); err != nil {
				t.Fatalf("%v: %v", ss.scheme, err)
			}
			if _, err := v.Verify(signed(t, s, ss.id, ss.body), []byte(ss.body)); err != nil {
				t.Errorf("%v: a delivery under the new secret: %v", ss.scheme, err)
			}
			if got := fmt.Sprint(v) + fmt.Sprint(s); strings.Contains(got, newSignerSecret) || strings.Contains(got, newVerifierSecret) ||
				!strings.Contains(fmt.Sprint(v), "[1 redacted]") {
				t.Errorf("%v: description %q", ss.scheme, got)
			}
		}
	})
}

// assertNoSecretIn checks that err's text holds none of secrets.
func assertNoSecretIn(t *testing.T, err error, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.TrimSpace(s) != "" && strings.Contains(err.Error(), strings.TrimSpace(s)) {
			t.Errorf("error %q holds a secret", err)
		}
	}
}

// rotated returns a second secret for ss's scheme: the signer's form and
// the verifier's.
func rotated(ss senderScheme) (signer, verifier string) {
	switch ss.scheme {
	case StandardWebhooksEd25519():
		return edPriv2, edPub2
	case Stripe():
		return stripeSecret2, stripeSecret2
	case Svix(), StandardWebhooks():
		return stdSecret2, stdSecret2
	}
	return hmacSecret2, hmacSecret2
}

// keyCounter counts webhook events by outcome and key position.
type keyCounter struct {
	verified [256]atomic.Int64 // by keyIndex
	refused  atomic.Int64
	issued   atomic.Int64
}

// keyIndex numbers a key position: 0 none, 1 primary, N+1 previous N.
func keyIndex(p observe.KeyPosition) int {
	if p == observe.KeyPrimary {
		return 1
	}
	if n := p.Previous(); n > 0 {
		return n + 1
	}
	return 0
}

func (c *keyCounter) Observe(e observe.Event) {
	switch e.Outcome {
	case observe.OutcomeVerified:
		c.verified[keyIndex(e.Key)].Add(1)
	case observe.OutcomeIssued:
		c.issued.Add(1)
	default:
		c.refused.Add(1)
	}
}

// TestRotationUnderLoadRefusesNoValidDelivery rotates the secret of a
// running signer and verifier through the two passes of the runbook while
// 8 goroutines sign and verify without pause: no valid delivery is refused,
// the old secret verifies ("previous 1") only between pass 2 and the drain,
// and invalid secret lists offered meanwhile change nothing.
func TestRotationUnderLoadRefusesNoValidDelivery(t *testing.T) {
	const workers = 8
	obs := &keyCounter{}
	a, b := hmacSecret, hmacSecret2
	v := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{a}, Observer: obs})
	s, err := NewSigner(Config{Scheme: HMACSHA256(), Secrets: []string{a}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var refusals atomic.Int64
	var firstErr atomic.Value
	var rounds [workers]atomic.Int64 // deliveries each worker finished
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(`{"worker":` + strconv.Itoa(w) + `}`)
			for i := 0; !stop.Load(); i++ {
				h := http.Header{}
				if err := s.Sign(h, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i), body); err != nil {
					refusals.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if _, err := v.Verify(h, body); err != nil {
					refusals.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				rounds[w].Add(1)
			}
		}()
	}
	prev := func() int64 { return obs.verified[keyIndex(observe.KeyAt(1))].Load() }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// settled waits until every worker has finished two more deliveries,
	// so none still holds one signed before the last swap.
	settled := func(what string) {
		t.Helper()
		var at [workers]int64
		for w := range rounds {
			at[w] = rounds[w].Load()
		}
		waitFor(what, func() bool {
			for w := range rounds {
				if rounds[w].Load() < at[w]+2 {
					return false
				}
			}
			return true
		})
	}
	start := obs.verified[keyIndex(observe.KeyPrimary)].Load()
	waitFor("deliveries under A", func() bool { return obs.verified[keyIndex(observe.KeyPrimary)].Load() > start+100 })

	// Pass 1: the verifier learns B; A still signs.
	mustSet(t, v.SetSecrets([]string{a, b}))
	// Offered meanwhile: invalid lists, refused, changing nothing.
	if err := v.SetSecrets(nil); !errors.Is(err, ErrNoSecret) {
		t.Errorf("empty list: %v", err)
	}
	if err := s.SetSecrets([]string{b + "\n"}); !errors.Is(err, ErrSecretInvalid) {
		t.Errorf("secret with a newline: %v", err)
	}
	if prev() != 0 {
		t.Errorf("previous 1 verified %d deliveries before pass 2", prev())
	}
	mark := obs.verified[keyIndex(observe.KeyPrimary)].Load()
	waitFor("deliveries after pass 1", func() bool { return obs.verified[keyIndex(observe.KeyPrimary)].Load() > mark+100 })

	// Pass 2: B first on the verifier, so A's deliveries verify as
	// previous 1 until the signer switches to B.
	mustSet(t, v.SetSecrets([]string{b, a}))
	waitFor("deliveries under the previous secret", func() bool { return prev() > 0 })
	mustSet(t, s.SetSecrets([]string{b, a}))
	atSwitch := prev()
	settled("the deliveries signed under A to drain")
	drained := prev()
	if drained-atSwitch > workers {
		t.Errorf("previous 1 rose by %d after the signer switched; at most the %d in flight may", drained-atSwitch, workers)
	}
	mark = obs.verified[keyIndex(observe.KeyPrimary)].Load()
	waitFor("more deliveries under B", func() bool { return obs.verified[keyIndex(observe.KeyPrimary)].Load() > mark+1000 })
	settled("every worker to run under B")
	if prev() != drained {
		t.Errorf("previous 1 still rising after the drain: %d, then %d", drained, prev())
	}

	// Pass 3: drop A, once previous 1 has stopped rising.
	mustSet(t, v.SetSecrets([]string{b}))
	mustSet(t, s.SetSecrets([]string{b}))
	mark = obs.verified[keyIndex(observe.KeyPrimary)].Load()
	waitFor("deliveries after pass 3", func() bool { return obs.verified[keyIndex(observe.KeyPrimary)].Load() > mark+100 })
	stop.Store(true)
	wg.Wait()

	if n := refusals.Load(); n != 0 {
		t.Fatalf("%d valid deliveries refused; first: %v", n, firstErr.Load())
	}
	if n := obs.refused.Load(); n != 0 {
		t.Errorf("the observer saw %d refusals", n)
	}
	var verified int64
	for i := range obs.verified {
		verified += obs.verified[i].Load()
	}
	if obs.issued.Load() < verified || verified-obs.verified[keyIndex(observe.KeyPrimary)].Load() != prev() {
		t.Errorf("issued %d, verified %d of which previous 1 %d: other positions verified", obs.issued.Load(), verified, prev())
	}
	t.Logf("signed %d, verified %d (previous 1: %d, all before the drain), refused 0", obs.issued.Load(), verified, prev())
}

func mustSet(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A delivery signed by several of the verifier's HMAC secrets (a sender
// signing with both during a rotation) is reported as verified by the
// first of them in the verifier's order.
func TestHMACSchemesReportTheFirstMatchingSecret(t *testing.T) {
	clk := newStepClock()
	log := &observetest.Recorder{}
	s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret, stdSecret2}, Now: clk.Now})
	h := signed(t, s, "msg_1", "{}")
	for _, secrets := range [][]string{
		{stdSecret, stdSecret2},
		{stdSecret2, stdSecret},
		{stdSecret, stdSecret, stdSecret2},
	} {
		v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: secrets, Now: clk.Now, Observer: log})
		if _, err := v.Verify(h, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if e := log.Only(t, "verify"); e != webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary) {
			t.Fatalf("%d secrets: event %+v, want verified by the primary", len(secrets), e)
		}
	}
}

// secretForms returns every way a secret's bytes could leak into text: the
// configured string, its decoded bytes raw, as a decimal list (fmt's %v of
// a []byte), as hex and as base64 in both alphabets.
func secretForms(t *testing.T, configured string, raw []byte) []string {
	t.Helper()
	forms := []string{configured, string(raw), hex.EncodeToString(raw),
		base64.StdEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw)}
	dec := fmt.Sprint(raw) // "[1 2 3 ...]"
	forms = append(forms, strings.Trim(dec, "[]"))
	// Also a short prefix of each, so a partial leak is caught.
	for _, f := range forms[:] {
		if len(f) > 12 {
			forms = append(forms, f[:12])
		}
	}
	return forms
}

// Every type that holds a secret prints it redacted, by value and by
// pointer, under every fmt verb, through log/slog and through encoding/json.
func TestSecretsNeverPrint(t *testing.T) {
	hmacRaw := []byte(githubSecret)
	stdRaw, err := schemeStandard.parseSecret(stdSecret)
	if err != nil {
		t.Fatal(err)
	}
	var forms []string
	forms = append(forms, secretForms(t, githubSecret, hmacRaw)...)
	forms = append(forms, secretForms(t, stdSecret, stdRaw)...)

	ghCfg := Config{Scheme: GitHub(), Secrets: []string{githubSecret}}
	stdCfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}}
	ghV, stdV := newVerifier(t, ghCfg), newVerifier(t, stdCfg)
	ghS, stdS := newSigner(t, ghCfg), newSigner(t, stdCfg)
	values := map[string]any{
		"Config (GitHub)": ghCfg, "*Config (GitHub)": &ghCfg,
		"Config (Standard)": stdCfg, "*Config (Standard)": &stdCfg,
		"Verifier (GitHub)": *ghV, "*Verifier (GitHub)": ghV,
		"Verifier (Standard)": *stdV, "*Verifier (Standard)": stdV,
		"Signer (GitHub)": *ghS, "*Signer (GitHub)": ghS,
		"Signer (Standard)": *stdS, "*Signer (Standard)": stdS,
		"[]any": []any{ghCfg, ghV, stdS},
		"struct field": struct {
			Cfg Config
			V   *Verifier
		}{stdCfg, stdV},
	}
	for name, val := range values {
		assertPrintsNoSecret(t, name, val, forms)
	}
	// The redacted form still says what it is.
	if got := fmt.Sprintf("%+v", stdCfg); !strings.Contains(got, "standard-webhooks") || !strings.Contains(got, "[1 redacted]") {
		t.Fatalf("redacted Config = %s", got)
	}
	if got := fmt.Sprint(ghV); !strings.Contains(got, "webhook.Verifier{Scheme: github") {
		t.Fatalf("redacted Verifier = %s", got)
	}
}

// assertPrintsNoSecret fails if val, printed under any fmt verb, through
// log/slog or through encoding/json, shows any of forms.
func assertPrintsNoSecret(t *testing.T, name string, val any, forms []string) {
	t.Helper()
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, val))
	}
	outs = append(outs, fmt.Sprint(val), fmt.Sprintln(val))
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		slog.New(h(&buf)).Info("webhook", "value", val)
		outs = append(outs, buf.String())
	}
	if b, err := json.Marshal(val); err == nil {
		outs = append(outs, string(b))
	} else {
		t.Fatalf("%s: json.Marshal: %v", name, err)
	}
	for _, out := range outs {
		for _, form := range forms {
			if strings.Contains(out, form) {
				t.Fatalf("%s prints secret material %q: %s", name, form, out)
			}
		}
	}
}

// The schemes added for issue 12 print no secret either: not the Stripe,
// Slack or Shopify secret, and not an Ed25519 private key (seed or the
// expanded key) held by a Signer.
func TestNewSchemeSecretsNeverPrint(t *testing.T) {
	seed, err := parseEd25519Key(edPriv, Ed25519PrivateKeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var forms []string
	forms = append(forms, secretForms(t, edPriv, seed)...)
	forms = append(forms, secretForms(t, edPriv, ed25519.NewKeyFromSeed(seed))...)
	for _, secret := range []string{stripeSecret, slackSecret, shopifySecret} {
		forms = append(forms, secretForms(t, secret, []byte(secret))...)
	}
	for _, ss := range newSchemes() {
		cfg := Config{Scheme: ss.scheme, Secrets: ss.signer}
		s := newSigner(t, cfg)
		vcfg := Config{Scheme: ss.scheme, Secrets: ss.verifier}
		v := newVerifier(t, vcfg)
		for name, val := range map[string]any{"Config": cfg, "*Config": &cfg, "Signer": *s, "*Signer": s, "Verifier": *v, "*Verifier": v, "verifier Config": vcfg} {
			assertPrintsNoSecret(t, ss.scheme.String()+" "+name, val, forms)
		}
		if got := fmt.Sprint(s); !strings.Contains(got, ss.scheme.String()) || !strings.Contains(got, "[1 redacted]") {
			t.Fatalf("redacted Signer = %s", got)
		}
	}
}

func TestNewVerifierRefusesSecretWithSurroundingSpace(t *testing.T) {
	std := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef01234567"))
	schemes := []struct {
		scheme Scheme
		secret string
		signer bool
	}{
		{HMACSHA256(), "hmac-shared-secret", false},
		{GitHub(), "hmac-shared-secret", false},
		{StandardWebhooks(), std, false},
		{Svix(), std, false},
		{Stripe(), "whsec_stripe_endpoint", false},
		{Slack(), "slack-signing-secret", false},
		{Shopify(), "shopify-secret", false},
		{StandardWebhooksEd25519(), edPub, false},
		{StandardWebhooksEd25519(), edPriv, true},
	}
	for _, sc := range schemes {
		for _, bad := range []string{sc.secret + "\n", " " + sc.secret, sc.secret + "\r\n", "\t" + sc.secret, sc.secret + "\u00a0"} {
			cfg := Config{Scheme: sc.scheme, Secrets: []string{sc.secret, bad}}
			var err error
			if sc.signer {
				_, err = NewSigner(cfg)
			} else {
				_, err = NewVerifier(cfg)
			}
			if !errors.Is(err, ErrSecretInvalid) || !errors.Is(err, errSecretSpace) || !strings.Contains(err.Error(), "secret 2 of 2") {
				t.Errorf("%s %q: err = %v, want the white space refusal naming secret 2 of 2", sc.scheme, bad, err)
			}
			if err != nil && strings.Contains(err.Error(), sc.secret) {
				t.Errorf("%s: error %q prints the secret", sc.scheme, err)
			}
		}
		if _, err := NewSigner(Config{Scheme: sc.scheme, Secrets: []string{sc.secret}}); sc.scheme != StandardWebhooksEd25519() && err != nil {
			t.Errorf("%s: the clean secret is refused: %v", sc.scheme, err)
		}
	}
}
