package ctoken_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// redactLabels are the HKDF labels of every subkey the root package derives;
// a printed subkey is as bad as a printed key.
var redactLabels = []string{
	"ctoken.cursor hmac-sha256 key",
	"ctoken.onetime hmac key",
	"mcp.requestState aes-256-gcm key",
	"mcp.requestState bind-hmac key",
	"mcp.requestState payload-hmac key",
}

// secretForms returns every spelling of secret's bytes the test looks for:
// raw, decimal lists (as %v and %d print a []byte, and comma-separated as
// JSON prints []int), hex in both cases, and base64 in the four alphabets at
// each of the three alignments a byte string can have inside a longer
// encoded blob.
func secretForms(secret []byte) map[string]string {
	forms := map[string]string{}
	const w = 8 // window: long enough that no description matches by chance
	for i := 0; i+w <= len(secret); i++ {
		win := secret[i : i+w]
		forms["raw@"+strconv.Itoa(i)] = string(win)
		forms["hex@"+strconv.Itoa(i)] = hex.EncodeToString(win)
		forms["HEX@"+strconv.Itoa(i)] = strings.ToUpper(hex.EncodeToString(win))
		dec := make([]string, 4)
		for j := range dec {
			dec[j] = strconv.Itoa(int(win[j]))
		}
		forms["decimal@"+strconv.Itoa(i)] = strings.Join(dec, " ")
		forms["decimal,@"+strconv.Itoa(i)] = strings.Join(dec, ",")
	}
	for _, enc := range []struct {
		name string
		e    *base64.Encoding
	}{{"std", base64.StdEncoding}, {"url", base64.URLEncoding}, {"rawstd", base64.RawStdEncoding}, {"rawurl", base64.RawURLEncoding}} {
		for s := range 3 {
			forms[enc.name+"@"+strconv.Itoa(s)] = enc.e.EncodeToString(secret[s:])[:12]
		}
	}
	return forms
}

// leak returns the name of the first spelling of a secret found in out, or "".
func leak(out string, secrets [][]byte) string {
	for n, secret := range secrets {
		for form, s := range secretForms(secret) {
			if strings.Contains(out, s) {
				return fmt.Sprintf("secret %d as %s", n, form)
			}
		}
	}
	return ""
}

// printings renders v every way a program might print or log it.
func printings(t *testing.T, v any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		out[verb] = fmt.Sprintf(verb, v)
		out["nested "+verb] = fmt.Sprintf(verb, struct{ Field any }{v})
	}
	out["Sprint"] = fmt.Sprint(v)
	out["Sprintln slice"] = fmt.Sprintln([]any{v, v})
	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"slog text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"slog json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("configured", "value", v, slog.Group("g", "inner", v))
		out[name] = b.String()
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%T): %v", v, err)
	}
	out["json"] = string(js)
	js, err = json.Marshal(map[string]any{"nested": v})
	if err != nil {
		t.Fatalf("json.Marshal(nested %T): %v", v, err)
	}
	out["json nested"] = string(js)
	return out
}

// TestSecretsNeverPrint prints every root type that holds key material, by
// value and by pointer, every way, and fails if any key or subkey byte
// sequence appears raw, as decimals, hex or base64.
func TestSecretsNeverPrint(t *testing.T) {
	k1, k2 := ctoken.RandomKey(), ctoken.RandomKey()
	secrets := [][]byte{k1, k2}
	for _, k := range [][]byte{k1, k2} {
		for _, label := range redactLabels {
			sub, err := ctoken.DeriveKey(k, label)
			if err != nil {
				t.Fatal(err)
			}
			secrets = append(secrets, sub)
		}
	}
	kr, err := ctoken.NewKeyring(k1, k2)
	if err != nil {
		t.Fatal(err)
	}
	session := []byte("fleet-session")
	cursorCfg := ctoken.CursorConfig{Keys: kr, TTL: time.Minute, Session: session, Now: time.Now}
	cursors, err := ctoken.NewCursorIssuer(cursorCfg)
	if err != nil {
		t.Fatal(err)
	}
	// Use the issuers so that pooled MAC states exist when printing.
	tok, err := cursors.Issue(ctoken.CursorPayload{CursorScope: ctoken.CursorScope{ToolID: "t", CallerID: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cursors.Verify(tok, ctoken.CursorScope{ToolID: "t", CallerID: "c"}); err != nil {
		t.Fatal(err)
	}
	oneTimeCfg := ctoken.OneTimeConfig{Keys: kr, Purpose: "agent-bootstrap", Replay: replay.NewMemoryStore(0)}
	oneTime, err := ctoken.NewOneTimeIssuer(oneTimeCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oneTime.Mint(map[string]string{"run": "r"}); err != nil {
		t.Fatal(err)
	}
	stateSec := ctoken.RequestStateSecurity{Keys: kr, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool}
	states, err := ctoken.NewRequestStateCodec(stateSec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := states.Encode("s", "alice", "tool"); err != nil {
		t.Fatal(err)
	}
	signedSec := ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Keys: kr}
	signed, err := ctoken.NewRequestStateCodec(signedSec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signed.Encode("s", "alice", ""); err != nil {
		t.Fatal(err)
	}

	// One row per way a secret-holding value reaches a printer. Types
	// holding a sync.Pool (RequestStateCodec) are used by pointer only: go
	// vet refuses copies of them.
	rows := []struct {
		name string
		v    any
	}{
		{"Keyring value", *kr},
		{"Keyring pointer", kr},
		{"CursorIssuer value", *cursors},
		{"CursorIssuer pointer", cursors},
		{"OneTimeIssuer value", *oneTime},
		{"OneTimeIssuer pointer", oneTime},
		{"RequestStateCodec (encrypted) pointer", states},
		{"RequestStateCodec (signed) pointer", signed},
		{"CursorConfig value", cursorCfg},
		{"CursorConfig pointer", &cursorCfg},
		{"OneTimeConfig value", oneTimeCfg},
		{"OneTimeConfig pointer", &oneTimeCfg},
		{"RequestStateSecurity value", stateSec},
		{"RequestStateSecurity pointer", &stateSec},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for how, out := range printings(t, row.v) {
				if l := leak(out, secrets); l != "" {
					t.Errorf("%s prints %s: %s", how, l, out)
				}
			}
		})
	}
}

// TestSecretsNeverPrintDetectsLeaks proves the detector above: printing the
// key bytes themselves, or a struct that holds them, is caught in every
// form, so TestSecretsNeverPrint cannot pass by looking for the wrong thing.
func TestSecretsNeverPrintDetectsLeaks(t *testing.T) {
	k := ctoken.RandomKey()
	type holder struct{ Key []byte }
	for _, out := range []string{
		string(k),
		fmt.Sprintf("%v", k),
		fmt.Sprintf("%+v", holder{k}),
		fmt.Sprintf("%x", k[3:]),
		fmt.Sprintf("%X", k),
		base64.StdEncoding.EncodeToString(append([]byte{1}, k...)),
		base64.RawURLEncoding.EncodeToString(append([]byte{1, 2}, k...)),
		func() string { b, _ := json.Marshal(holder{k}); return string(b) }(),
		func() string {
			ints := make([]int, len(k))
			for i, b := range k {
				ints[i] = int(b)
			}
			b, _ := json.Marshal(ints)
			return string(b)
		}(),
	} {
		if leak(out, [][]byte{k}) == "" {
			t.Errorf("detector misses a leak: %q", out)
		}
	}
	if l := leak("ctoken.Keyring(2 keys)", [][]byte{k}); l != "" {
		t.Errorf("detector flags a description: %s", l)
	}
}
