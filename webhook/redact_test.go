package webhook

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

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
