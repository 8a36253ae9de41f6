package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

var bootClaims = map[string]string{"agent": "agt_42", "run": "run_7"}

func (f *fixture) oneTime(t testing.TB, key []byte, purpose string, now func() time.Time) *ctoken.OneTimeIssuer {
	t.Helper()
	kr, err := ctoken.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	o, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: kr, Purpose: purpose, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mintTok(t testing.TB, o *ctoken.OneTimeIssuer, claims map[string]string) string {
	t.Helper()
	tok, err := o.Mint(claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestInspectOneTimeShowsPurposeAndClaims(t *testing.T) {
	f := newFixture(t)
	tok := mintTok(t, f.oneTime(t, f.key, "agent-bootstrap", nil), bootClaims)
	r := runCmd(t, "", nil, "inspect", tok)
	if r.code != exitOK || !strings.Contains(r.stderr, "UNVERIFIED") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	m := decodeJSON(t, r.stdout)
	if m["kind"] != "one-time" || m["verified"] != false || m["purpose"] != "agent-bootstrap" || m["expired"] != false || m["version"] != 3.0 {
		t.Errorf("unexpected report: %v", m)
	}
	claims, _ := m["claims"].(map[string]any)
	if len(claims) != 2 || claims["agent"] != "agt_42" || claims["run"] != "run_7" {
		t.Errorf("claims = %v", m["claims"])
	}
	if w, _ := m["warning"].(string); !strings.HasPrefix(w, "UNVERIFIED") {
		t.Errorf("warning = %q", w)
	}
}

func TestInspectRejectsMalformedOneTimeTokens(t *testing.T) {
	for _, tc := range []struct{ name, tok, want string }{
		{"not base64", "ot1.***", "not base64url"},
		{"short", "ot1.AAAA", "shorter than"},
		{"version 1", "ot1." + base64.RawURLEncoding.EncodeToString(append([]byte{1}, make([]byte, 80)...)), "unknown payload version 1"},
		{"version 2 (no key id)", "ot1." + base64.RawURLEncoding.EncodeToString(append([]byte{2}, make([]byte, 80)...)), "unknown payload version 2"},
		{"purpose past end", "ot1." + base64.RawURLEncoding.EncodeToString(append(append([]byte{3}, make([]byte, 36)...), append([]byte{9, 'a'}, make([]byte, 32)...)...)), "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", nil, "inspect", tc.tok)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
}

func TestVerifyOneTimeChecksKeyPurposeAndExpiry(t *testing.T) {
	f := newFixture(t)
	tok := mintTok(t, f.oneTime(t, f.key, "agent-bootstrap", nil), bootClaims)
	r := runCmd(t, tok, f.env(), "verify", "-purpose", "agent-bootstrap", "-")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	m := decodeJSON(t, r.stdout)
	claims, _ := m["claims"].(map[string]any)
	if m["verified"] != true || m["purpose"] != "agent-bootstrap" || claims["run"] != "run_7" {
		t.Errorf("unexpected result: %v", m)
	}
	if red, _ := m["redeemed"].(string); !strings.HasPrefix(red, "not checked") {
		t.Errorf("redeemed = %q, want a not-checked note", red)
	}
	// verify does not redeem: a second verify still succeeds.
	if r := runCmd(t, "", f.env(), "verify", "-purpose", "agent-bootstrap", tok); r.code != exitOK {
		t.Fatalf("second verify: exit %d, %q", r.code, r.stderr)
	}

	expired := mintTok(t, f.oneTime(t, f.key, "agent-bootstrap", func() time.Time { return time.Now().Add(-time.Hour) }), bootClaims)
	foreign := mintTok(t, f.oneTime(t, f.oldKey, "agent-bootstrap", nil), bootClaims)
	tampered := tok[:len(tok)-2] + "AA"
	if tampered == tok {
		tampered = tok[:len(tok)-2] + "BA"
	}
	for _, tc := range []struct {
		name, tok, purpose, class, reason string
	}{
		{"other purpose", tok, "password-reset", "invalid one-time token", "other purpose"},
		{"foreign key", foreign, "agent-bootstrap", "invalid one-time token", "signed by a key not in the ring: retired or foreign"},
		{"expired", expired, "agent-bootstrap", "expired one-time token", "expired"},
		{"tampered", tampered, "agent-bootstrap", "invalid one-time token", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", f.env(), "verify", "-purpose", tc.purpose, tc.tok)
			if r.code != exitRejected || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.class) || !strings.Contains(r.stderr, "reason: "+tc.reason) {
				t.Errorf("stderr %q lacks %q / reason %q", r.stderr, tc.class, tc.reason)
			}
			if strings.Contains(r.stderr, tc.tok[4:16]) {
				t.Errorf("stderr echoes the token: %q", r.stderr)
			}
		})
	}
}

// hostile is text a forged token might carry to mislead a terminal: DEL,
// C1 controls (NEL, CSI), and every bidi control.
const hostile = "a\x7fb\u0085c\u009bd\u202ee\u202af\u2066g\u2069h\u200ei\u200fj\u061ck"

func TestInspectEscapesTerminalControlsInEveryField(t *testing.T) {
	f := newFixture(t)
	// No cursor here: a cursor carries no text (its tool and caller are
	// not in it; its state prints as base64url, its tags as hex).
	// A forged one-time token (inspect checks no MAC) with a hostile
	// purpose and claim.
	p := []byte{3}
	p = append(p, make([]byte, 4+16+16)...)
	for _, s := range []string{hostile, hostile, hostile} { // purpose, name, value
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	mac := make([]byte, 32)
	rand.Read(mac)
	ot := "ot1." + base64.RawURLEncoding.EncodeToString(append(p, mac...))
	// A request state whose JSON state string carries the characters.
	w := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject}, hostile, "alice", "t")

	for name, tok := range map[string]string{"one-time": ot, "request state": w} {
		t.Run(name, func(t *testing.T) {
			r := runCmd(t, "", nil, "inspect", tok)
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			for _, ch := range []rune{0x7f, 0x85, 0x9b, 0x202e, 0x202a, 0x2066, 0x2069, 0x200e, 0x200f, 0x061c} {
				if strings.ContainsRune(r.stdout, ch) {
					t.Errorf("output holds U+%04X raw", ch)
				}
			}
			if !strings.Contains(r.stdout, `\u202e`) || !strings.Contains(r.stdout, `\u007f`) || !strings.Contains(r.stdout, `\u0085`) {
				t.Errorf("output lacks the escapes: %s", r.stdout)
			}
			// The escapes are JSON's: the fields still decode to the
			// exact text.
			var m map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, v := range m {
				if v == hostile {
					found = true
				}
				if sub, ok := v.(map[string]any); ok && sub[hostile] == hostile {
					found = true
				}
			}
			if !found {
				t.Errorf("no field decodes back to the original text: %v", m)
			}
		})
	}
}

func TestKeygenHelpDescribesTwoPassRotation(t *testing.T) {
	r := runCmd(t, "", nil, "keygen", "-h")
	if r.code != exitOK {
		t.Fatalf("exit %d", r.code)
	}
	for _, want := range []string{"two passes", "CTOKEN_KEYS=old,new", "CTOKEN_KEYS=new,old", "CTOKEN_KEYS=new.", "every instance"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("keygen -h lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Index(r.stdout, "CTOKEN_KEYS=old,new") > strings.Index(r.stdout, "CTOKEN_KEYS=new,old") {
		t.Error("keygen -h gives the passes out of order")
	}
}

// -session is what the server reads from CTOKEN_SESSION: the text itself,
// not an encoding of it.
func TestVerifySessionTakesTheFormOfCTOKEN_SESSION(t *testing.T) {
	f := newFixture(t)
	c := f.cursor(t, f.issuer)
	scope := []string{"-method", "tools/call", "-tool", "search", "-caller", "alice", "-args", searchArgs}
	if r := runCmd(t, "", f.env(), append(append([]string{"verify"}, scope...), "-session", string(f.session), c)...); r.code != exitOK {
		t.Fatalf("-session %q: exit %d, %q", f.session, r.code, r.stderr)
	}
	encoded := base64.RawURLEncoding.EncodeToString(f.session)
	r := runCmd(t, "", f.env(), append(append([]string{"verify"}, scope...), "-session", encoded, c)...)
	if r.code != exitRejected || !strings.Contains(r.stderr, "other server session") {
		t.Fatalf("-session in base64 = exit %d, %q; want another session", r.code, r.stderr)
	}
}
