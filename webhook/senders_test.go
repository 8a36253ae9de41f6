package webhook

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// senderCase is one delivery exchanged with .ci/senders/senders.mjs.
type senderCase struct {
	Lib     string            `json:"lib"`
	Scheme  string            `json:"scheme,omitempty"`
	Label   string            `json:"label"`
	Secrets []string          `json:"secrets,omitempty"`
	Secret  string            `json:"secret,omitempty"`
	NowMs   int64             `json:"now_ms"`
	ID      string            `json:"id"`
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
}

// senderVerdict is the node side's verdict on one ctoken-signed delivery.
type senderVerdict struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// runSenders runs the cross-check script with mode, input on stdin, and
// decodes its JSON output into out.
func runSenders(t *testing.T, script, mode string, in any, out any) {
	t.Helper()
	cmd := exec.Command("node", script, mode)
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin = bytes.NewReader(raw)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("node %s printed %q: %v", mode, raw, err)
	}
}

func atMs(ms int64) func() time.Time { return func() time.Time { return time.UnixMilli(ms) } }

// TestSendersCrossCheck checks every scheme against its sender's own
// library, both ways: deliveries signed by standardwebhooks, svix,
// stripe's generateTestHeaderString, @octokit/webhooks-methods and
// node:crypto (Ed25519) verify with ctoken, and deliveries ctoken signs
// verify with standardwebhooks, svix, stripe's constructEvent,
// @octokit/webhooks-methods, @slack/bolt's verifySlackRequest and
// node:crypto, at pinned clocks on both sides of the tolerance edges, with
// tampered copies refused by both. It runs only under
// .ci/webhook-senders.sh, which installs the packages and sets
// CTOKEN_SENDERS_SCRIPT.
func TestSendersCrossCheck(t *testing.T) {
	script := os.Getenv("CTOKEN_SENDERS_SCRIPT")
	if script == "" {
		t.Skip("CTOKEN_SENDERS_SCRIPT not set: run .ci/webhook-senders.sh")
	}
	var versions map[string]string
	runSenders(t, script, "versions", nil, &versions)
	t.Logf("versions: %v", versions)

	t.Run("library signs, ctoken verifies", func(t *testing.T) {
		var cases []senderCase
		runSenders(t, script, "sign", nil, &cases)
		seen := map[string]int{}
		for _, c := range cases {
			scheme, ok := vectorSchemes[c.Scheme]
			if !ok {
				t.Fatalf("%s: unknown scheme %q", c.Lib, c.Scheme)
			}
			seen[c.Lib]++
			h := http.Header{}
			for k, v := range c.Headers {
				h.Set(k, v)
			}
			cfg := Config{Scheme: scheme, Secrets: c.Secrets, Now: atMs(c.NowMs)}
			d, err := newVerifier(t, cfg).Verify(h, []byte(c.Body))
			if err != nil || d.ID != c.ID {
				t.Errorf("%s (%s, %s): Verify = %+v, %v; want ID %q", c.Lib, c.Scheme, c.Label, d, err, c.ID)
				continue
			}
			if _, err := newVerifier(t, cfg).Verify(h, []byte(c.Body+" ")); !errors.Is(err, ErrSignature) {
				t.Errorf("%s (%s, %s): tampered body: %v, want ErrSignature", c.Lib, c.Scheme, c.Label, err)
			}
			if scheme == GitHub() {
				continue
			}
			ts := d.Timestamp.Unix()
			cfg.Now = atMs((ts + 301) * 1000)
			if _, err := newVerifier(t, cfg).Verify(h, []byte(c.Body)); !errors.Is(err, ErrTimestamp) {
				t.Errorf("%s (%s, %s): 301 s later: %v, want ErrTimestamp", c.Lib, c.Scheme, c.Label, err)
			}
		}
		for _, lib := range []string{"standardwebhooks", "svix", "stripe", "@octokit/webhooks-methods", "node:crypto"} {
			if seen[lib] == 0 {
				t.Errorf("no delivery signed by %s", lib)
			}
		}
		t.Logf("verified %d library-signed deliveries: %v", len(cases), seen)
	})

	t.Run("ctoken signs, library verifies", func(t *testing.T) {
		cases, wants, ours := ctokenSignedCases(t)
		var verdicts []senderVerdict
		runSenders(t, script, "verify", cases, &verdicts)
		if len(verdicts) != len(cases) {
			t.Fatalf("%d verdicts for %d cases", len(verdicts), len(cases))
		}
		for i, c := range cases {
			if verdicts[i].OK != wants[i] {
				t.Errorf("%s (%s): library says ok=%v (%s), want %v", c.Lib, c.Label, verdicts[i].OK, verdicts[i].Error, wants[i])
			}
			if ours[i] != nil {
				if err := ours[i](); err != nil {
					t.Errorf("%s (%s): ctoken: %v", c.Lib, c.Label, err)
				}
			}
		}
		t.Logf("%d ctoken-signed deliveries judged by the libraries", len(cases))
	})
}

// ctokenSignedCases signs deliveries with ctoken for each library to judge,
// with the verdict each library must give and, per case, a check that
// ctoken's own verifier judges the same delivery at the same clock as
// documented (equal verdicts, except that ctoken also refuses deliveries
// from more than the tolerance in the future, which Stripe's and Slack's
// libraries accept).
func ctokenSignedCases(t *testing.T) (cases []senderCase, wants []bool, ours []func() error) {
	const T = 1700000000
	signAt := func(cfg Config, h http.Header, id, body string) {
		t.Helper()
		cfg.Now = func() time.Time { return time.Unix(T, 0) }
		if err := newSigner(t, cfg).Sign(h, id, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	flat := func(h http.Header) map[string]string {
		m := map[string]string{}
		for k := range h {
			m[k] = h.Get(k)
		}
		return m
	}
	type clock struct {
		label string
		ms    int64
		want  bool // the library's verdict
		ours  bool // ctoken's verdict
	}
	clocks := func(futureAccepted bool) []clock {
		return []clock{
			{"at signing", T * 1000, true, true},
			{"300.999 s later", (T+300)*1000 + 999, true, true},
			{"301 s later", (T + 301) * 1000, false, false},
			{"301 s early", (T - 301) * 1000, futureAccepted, false},
		}
	}
	add := func(scheme Scheme, verifySecrets []string, c senderCase, want, oursOK bool) {
		cases, wants = append(cases, c), append(wants, want)
		h := http.Header{}
		for k, v := range c.Headers {
			h.Set(k, v)
		}
		ours = append(ours, func() error {
			_, err := newVerifier(t, Config{Scheme: scheme, Secrets: verifySecrets, Now: atMs(c.NowMs)}).Verify(h, []byte(c.Body))
			if (err == nil) != oursOK {
				return errors.New("Verify = " + errString(err) + ", want ok=" + map[bool]string{true: "true", false: "false"}[oursOK])
			}
			return nil
		})
	}
	body := `{"type":"invoice.paid","data":{"amount":1250,"note":"caf\u00e9 \ud83d\ude00"}}`
	tampered := strings.Replace(body, "1250", "9250", 1)

	// Standard Webhooks and Svix: two secrets (rotation), each verifies.
	std2 := "whsec_" + base64.StdEncoding.EncodeToString([]byte("ctoken-cross-check-secret-2"))
	for _, tc := range []struct {
		lib    string
		scheme Scheme
	}{{"standardwebhooks", StandardWebhooks()}, {"svix", Svix()}} {
		h := http.Header{}
		signAt(Config{Scheme: tc.scheme, Secrets: []string{stdSecret, std2}}, h, "msg_ctoken1", body)
		for _, secret := range []string{stdSecret, std2} {
			for _, ck := range clocks(false) {
				add(tc.scheme, []string{secret}, senderCase{Lib: tc.lib, Label: ck.label + ", secret " + secret[:10], Secret: secret, NowMs: ck.ms, Body: body, Headers: flat(h)}, ck.want, ck.ours)
			}
		}
		add(tc.scheme, []string{stdSecret}, senderCase{Lib: tc.lib, Label: "tampered body", Secret: stdSecret, NowMs: T * 1000, Body: tampered, Headers: flat(h)}, false, false)
	}

	// Stripe: two secrets; Stripe's library refuses only the past side.
	stripeBody := `{"id":"evt_ctoken_1","object":"event","data":{"object":{"amount":1250}}}`
	h := http.Header{}
	stripeSecrets := []string{"whsec_ctoken_cross_check_1", "whsec_ctoken_cross_check_2"}
	signAt(Config{Scheme: Stripe(), Secrets: stripeSecrets}, h, "evt_ctoken_1", stripeBody)
	for _, secret := range stripeSecrets {
		for _, ck := range clocks(true) {
			add(Stripe(), []string{secret}, senderCase{Lib: "stripe", Label: ck.label + ", secret " + secret, Secret: secret, NowMs: ck.ms, ID: "evt_ctoken_1", Body: stripeBody, Headers: flat(h)}, ck.want, ck.ours)
		}
	}
	add(Stripe(), stripeSecrets[:1], senderCase{Lib: "stripe", Label: "tampered body", Secret: stripeSecrets[0], NowMs: T * 1000, ID: "evt_ctoken_1", Body: strings.Replace(stripeBody, "1250", "9250", 1), Headers: flat(h)}, false, false)

	// GitHub (@octokit/webhooks-methods): no timestamp.
	h = http.Header{}
	signAt(Config{Scheme: GitHub(), Secrets: []string{githubSecret}}, h, "72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
	add(GitHub(), []string{githubSecret}, senderCase{Lib: "@octokit/webhooks-methods", Label: "signed", Secret: githubSecret, NowMs: T * 1000, Body: body, Headers: flat(h)}, true, true)
	add(GitHub(), []string{githubSecret}, senderCase{Lib: "@octokit/webhooks-methods", Label: "tampered body", Secret: githubSecret, NowMs: T * 1000, Body: tampered, Headers: flat(h)}, false, false)

	// Slack (@slack/bolt's verifySlackRequest): refuses only the past side.
	const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	slackBody := `{"token":"XXYYZZ","type":"event_callback","event_id":"Ev0CTOKEN1","event":{"type":"app_mention","text":"caf\u00e9"}}`
	h = http.Header{}
	signAt(Config{Scheme: Slack(), Secrets: []string{slackSecret}}, h, "Ev0CTOKEN1", slackBody)
	for _, ck := range clocks(true) {
		add(Slack(), []string{slackSecret}, senderCase{Lib: "@slack/bolt", Label: ck.label, Secret: slackSecret, NowMs: ck.ms, Body: slackBody, Headers: flat(h)}, ck.want, ck.ours)
	}
	add(Slack(), []string{slackSecret}, senderCase{Lib: "@slack/bolt", Label: "tampered body", Secret: slackSecret, NowMs: T * 1000, Body: strings.Replace(slackBody, "caf", "kaf", 1), Headers: flat(h)}, false, false)

	// Ed25519 (v1a): no JavaScript Standard Webhooks library implements it;
	// node:crypto (OpenSSL) is the independent verifier.
	seeds := [][]byte{[]byte("ctoken-cross-check-ed25519-key-1"), []byte("ctoken-cross-check-ed25519-key-2")}
	var sks, pks []string
	for _, s := range seeds {
		sks = append(sks, Ed25519PrivateKeyPrefix+base64.StdEncoding.EncodeToString(s))
		pks = append(pks, Ed25519PublicKeyPrefix+base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(s).Public().(ed25519.PublicKey)))
	}
	h = http.Header{}
	signAt(Config{Scheme: StandardWebhooksEd25519(), Secrets: sks}, h, "msg_ctoken1", body)
	for _, pk := range pks {
		add(StandardWebhooksEd25519(), []string{pk}, senderCase{Lib: "node:crypto", Label: "signed, key " + pk[:12], Secret: pk, NowMs: T * 1000, Body: body, Headers: flat(h)}, true, true)
	}
	add(StandardWebhooksEd25519(), pks[:1], senderCase{Lib: "node:crypto", Label: "tampered body", Secret: pks[0], NowMs: T * 1000, Body: tampered, Headers: flat(h)}, false, false)
	return cases, wants, ours
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
