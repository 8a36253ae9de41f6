package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

// result is the outcome of one in-process run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs the command in-process with args, stdin and an environment
// holding only vars.
func runCmd(t *testing.T, stdin string, vars map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{
		stdin:  strings.NewReader(stdin),
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) string { return vars[k] },
	}
	code := run(args, e)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// decodeJSON parses a command's JSON output into a map.
func decodeJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
	return m
}

// seqKey is a deterministic test key: bytes start, start+1, ... (random
// enough for ParseKeyring, which refuses degenerate keys).
func seqKey(start byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = start + byte(i)
	}
	return k
}

// fixture holds keys and tokens shared by the tests.
type fixture struct {
	key, oldKey []byte
	keys        string // CTOKEN_KEYS value: key only
	session     []byte
	issuer      *ctoken.CursorIssuer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{
		key:     seqKey(0x42),
		oldKey:  seqKey(0x17),
		session: []byte("fleet-01"),
	}
	f.keys = ctoken.EncodeKey(f.key)
	f.issuer = f.cursorIssuer(t, f.key, time.Now)
	return f
}

func (f *fixture) cursorIssuer(t testing.TB, key []byte, now func() time.Time) *ctoken.CursorIssuer {
	t.Helper()
	kr, err := ctoken.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: f.session, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

func (f *fixture) env() map[string]string { return map[string]string{"CTOKEN_KEYS": f.keys} }

const searchArgs = `{"query":"shoes","limit":10}`

func mustFingerprint(t testing.TB, js string) ctoken.Fingerprint {
	t.Helper()
	fp, err := ctoken.ArgsFingerprint(json.RawMessage(js))
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// cursor issues a cursor for the "search" tool of alice, bound to searchArgs.
func (f *fixture) cursor(t testing.TB, iss *ctoken.CursorIssuer) string {
	t.Helper()
	c, err := iss.Issue(ctoken.CursorPayload{
		CursorScope: ctoken.CursorScope{
			ToolID:   ctoken.MCPTarget("tools/call", "search"),
			CallerID: "alice",
			Args:     mustFingerprint(t, searchArgs),
		},
		Page:  3,
		State: []byte("offset=30"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fixture) state(t testing.TB, sec ctoken.RequestStateSecurity, state, subject, tool string) string {
	t.Helper()
	if sec.Keys == nil {
		kr, err := ctoken.NewKeyring(f.key)
		if err != nil {
			t.Fatal(err)
		}
		sec.Keys = kr
	}
	codec, err := ctoken.NewRequestStateCodec(sec)
	if err != nil {
		t.Fatal(err)
	}
	w, err := codec.Encode(state, subject, tool)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestEveryCommandPrintsHelpAndExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"help", "verify"},
		{"keygen", "-h"}, {"inspect", "-h"}, {"verify", "-h"}, {"verify", "-help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCmd(t, "", nil, args...)
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, "Usage") {
				t.Errorf("stdout has no usage: %q", r.stdout)
			}
		})
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // in stderr
	}{
		{"no command", nil, nil, "Usage"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", nil, []string{"keygen", "-x"}, "flag provided but not defined"},
		{"keygen extra argument", nil, []string{"keygen", "extra"}, "unexpected argument"},
		{"keygen zero", nil, []string{"keygen", "-n", "0"}, "-n must be between"},
		{"keygen too many", nil, []string{"keygen", "-n", "17"}, "-n must be between"},
		{"inspect no token", nil, []string{"inspect"}, "exactly one TOKEN"},
		{"inspect two tokens", nil, []string{"inspect", "a", "b"}, "exactly one TOKEN"},
		{"verify no keys", nil, []string{"verify", "abc"}, "CTOKEN_KEYS is not set"},
		{"verify empty keys", map[string]string{"CTOKEN_KEYS": "  "}, []string{"verify", "abc"}, "CTOKEN_KEYS is not set"},
		{"verify other keys env unset", f.env(), []string{"verify", "-keys-env", "MY_KEYS", "abc"}, "MY_KEYS is not set"},
		{"verify malformed keys", map[string]string{"CTOKEN_KEYS": "not*base64"}, []string{"verify", "abc"}, "malformed key"},
		{"verify short key", map[string]string{"CTOKEN_KEYS": "c2hvcnQ"}, []string{"verify", "abc"}, "shorter than 32 bytes"},
		{"verify bad args JSON", f.env(), []string{"verify", "-args", "{", "abc"}, "-args is not valid JSON"},
		{"verify empty session", f.env(), []string{"verify", "-session", "", "abc"}, "-session is empty"},
		{"verify long session", f.env(), []string{"verify", "-session", strings.Repeat("s", ctoken.MaxSessionBytes+1), "abc"}, "-session is longer than"},
		{"verify one-time without purpose", f.env(), []string{"verify", "ot1.AAAA"}, "needs -purpose"},
		{"verify cursor flag on one-time", f.env(), []string{"verify", "-purpose", "p", "-caller", "alice", "ot1.AAAA"}, "-caller does not apply to one-time tokens"},
		{"verify purpose on cursor", f.env(), []string{"verify", "-purpose", "p", "abc"}, "-purpose applies to one-time tokens"},
		{"verify invalid purpose", f.env(), []string{"verify", "-purpose", "", "ot1.AAAA"}, "Purpose is empty"},
		{"verify method without tool", f.env(), []string{"verify", "-method", "tools/call", "abc"}, "-method needs -tool"},
		{"verify state flag on cursor", f.env(), []string{"verify", "-subject", "alice", "abc"}, "-subject applies to request states"},
		{"verify cursor flag on state", f.env(), []string{"verify", "-caller", "alice", "v1.abc.def"}, "-caller applies to cursors"},
		{"verify bad mode", f.env(), []string{"verify", "-mode", "rot13", "v1.abc.def"}, "-mode must be"},
		{"verify bad binding", f.env(), []string{"verify", "-binding", "all", "v1.abc.def"}, "-binding must be"},
		{"verify empty stdin", f.env(), []string{"verify", "-"}, "the token is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", tc.env, tc.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.want)
			}
			if strings.Contains(r.stderr, "not*base64") {
				t.Errorf("stderr echoes key material: %q", r.stderr)
			}
		})
	}
}

func TestKeygenPrintsParsableKeyring(t *testing.T) {
	for _, n := range []int{1, 3, maxKeygen} {
		args := []string{"keygen"}
		if n != 1 {
			args = append(args, "-n", strconv.Itoa(n))
		}
		r := runCmd(t, "", nil, args...)
		if r.code != exitOK {
			t.Fatalf("keygen -n %d: exit %d, %q", n, r.code, r.stderr)
		}
		line := strings.TrimSuffix(r.stdout, "\n")
		kr, err := ctoken.ParseKeyring(line)
		if err != nil {
			t.Fatalf("keygen -n %d output does not parse: %v", n, err)
		}
		if kr.Len() != n {
			t.Errorf("keygen -n %d gave %d keys", n, kr.Len())
		}
		seen := map[string]bool{}
		for _, k := range strings.Split(line, ",") {
			raw, err := base64.RawURLEncoding.DecodeString(k)
			if err != nil || len(raw) != 32 {
				t.Errorf("key %q is not 32 bytes of base64url", k)
			}
			if seen[k] {
				t.Errorf("keygen repeated a key")
			}
			seen[k] = true
		}
	}
}

func TestInspectCursorPrintsFieldsMarkedUnverified(t *testing.T) {
	f := newFixture(t)
	c := f.cursor(t, f.issuer)
	for _, via := range []string{"argument", "stdin"} {
		t.Run(via, func(t *testing.T) {
			var r result
			if via == "stdin" {
				r = runCmd(t, c+"\n", nil, "inspect", "-")
			} else {
				r = runCmd(t, "", nil, "inspect", c)
			}
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, "UNVERIFIED") {
				t.Errorf("stderr does not say UNVERIFIED: %q", r.stderr)
			}
			m := decodeJSON(t, r.stdout)
			want := map[string]any{
				"kind":       "cursor",
				"verified":   false,
				"version":    2.0,
				"sealed":     false,
				"scope":      scopeDigestNote,
				"page":       3.0,
				"state":      base64.RawURLEncoding.EncodeToString([]byte("offset=30")),
				"stateBytes": 9.0,
				"bytes":      float64(len(c)),
			}
			if tag, _ := m["sessionTag"].(string); len(tag) != 16 || strings.Contains(r.stdout, "alice") || strings.Contains(r.stdout, "search") {
				t.Errorf("session tag %q, or the caller or tool in the report: %s", tag, r.stdout)
			}
			for k, v := range want {
				if m[k] != v {
					t.Errorf("%s = %#v, want %#v", k, m[k], v)
				}
			}
			if w, _ := m["warning"].(string); !strings.HasPrefix(w, "UNVERIFIED") {
				t.Errorf("warning = %q", w)
			}
		})
	}
}

func TestInspectSignedStateShowsPayload(t *testing.T) {
	f := newFixture(t)
	past := func() time.Time { return time.Now().Add(-time.Hour) }
	for _, tc := range []struct {
		name    string
		now     func() time.Time
		expired bool
	}{
		{"live", nil, false},
		{"expired", past, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Now: tc.now}, `{"step":2}`, "alice", "tools/call\x00deploy")
			r := runCmd(t, "", nil, "inspect", w)
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			m := decodeJSON(t, r.stdout)
			if m["kind"] != "request-state" || m["mode"] != "signed" || m["verified"] != false {
				t.Errorf("kind/mode/verified = %v/%v/%v", m["kind"], m["mode"], m["verified"])
			}
			if m["state"] != `{"step":2}` {
				t.Errorf("state = %v", m["state"])
			}
			if m["expired"] != tc.expired {
				t.Errorf("expired = %v, want %v", m["expired"], tc.expired)
			}
			if tag, _ := m["bindTag"].(string); len(tag) != 64 {
				t.Errorf("bindTag = %q, want 64 hex digits", tag)
			}
		})
	}
}

func TestInspectEncryptedStateRevealsOnlyFraming(t *testing.T) {
	f := newFixture(t)
	const secret = "the-plaintext-state"
	w := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Mode: ctoken.Encrypted}, secret, "alice", "deploy")
	r := runCmd(t, "", nil, "inspect", w)
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, secret) {
		t.Fatalf("inspect printed encrypted content: %s", r.stdout)
	}
	m := decodeJSON(t, r.stdout)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(w, "v1e."))
	if err != nil {
		t.Fatal(err)
	}
	if m["mode"] != "encrypted" || m["verified"] != false {
		t.Errorf("mode/verified = %v/%v", m["mode"], m["verified"])
	}
	if m["nonce"] != hex.EncodeToString(raw[:12]) {
		t.Errorf("nonce = %v, want %x", m["nonce"], raw[:12])
	}
	if m["payloadBytes"] != float64(len(raw)-12-16) {
		t.Errorf("payloadBytes = %v, want %d", m["payloadBytes"], len(raw)-28)
	}
}

func TestInspectRejectsWhatIsNoToken(t *testing.T) {
	f := newFixture(t)
	c := f.cursor(t, f.issuer)
	sealed40 := base64.RawURLEncoding.EncodeToString(make([]byte, 40))
	for _, tc := range []struct{ name, tok, want string }{
		{"not base64", "!!!", "not base64url"},
		{"shorter than a MAC", base64.RawURLEncoding.EncodeToString(make([]byte, 32)), "shorter than its 32-byte MAC"},
		{"not CBOR", base64.RawURLEncoding.EncodeToString(make([]byte, 40)), "not a cursor CBOR map"},
		{"truncated cursor", c[:len(c)/2], "not"},
		{"v1 without MAC", "v1.e30", "want v1.PAYLOAD.MAC"},
		{"v1 bad payload base64", "v1.***.AAAA", "payload is not base64url"},
		{"v1 bad MAC base64", "v1.e30.***", "MAC is not base64url"},
		{"v1 payload not JSON", "v1.AAAA.AAAA", "not a JSON object"},
		{"v1 payload missing fields", "v1.e30.AAAA", `lacks "s"`},
		{"v1e bad base64", "v1e.***", "not base64url"},
		{"v1e short", "v1e.AAAA", "shorter than a nonce"},
		// encoding/base64 skips CR and LF even in Strict mode; the CLI
		// decodes through the library's strict decoder, which does not.
		{"cursor with inner LF", c[:10] + "\n" + c[10:], "not base64url"},
		{"cursor with inner CR", c[:10] + "\r" + c[10:], "not base64url"},
		{"v1e with inner LF", "v1e." + sealed40[:20] + "\n" + sealed40[20:], "not base64url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", nil, "inspect", tc.tok)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d; stdout %q", r.code, exitUsage, r.stdout)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("printed output for a non-token: %q", r.stdout)
			}
		})
	}
}

func TestVerifyCursor(t *testing.T) {
	t.Run("prints payload", func(t *testing.T) {
		f := newFixture(t)
		c := f.cursor(t, f.issuer)
		session := string(f.session) // the CTOKEN_SESSION form
		r := runCmd(t, "", f.env(), "verify",
			"-method", "tools/call", "-tool", "search", "-caller", "alice",
			"-args", `{"limit":10, "query":"shoes"}`, "-session", session, c)
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		m := decodeJSON(t, r.stdout)
		if m["verified"] != true || m["page"] != 3.0 || m["caller"] != "alice" || m["toolName"] != "search" {
			t.Errorf("unexpected payload: %v", m)
		}
		if m["state"] != base64.RawURLEncoding.EncodeToString([]byte("offset=30")) {
			t.Errorf("state = %v", m["state"])
		}
		if _, ok := m["unchecked"]; ok {
			t.Errorf("every scope flag was given, yet unchecked = %v", m["unchecked"])
		}
	})

	t.Run("accepts previous key", func(t *testing.T) {
		f := newFixture(t)
		c := f.cursor(t, f.cursorIssuer(t, f.oldKey, time.Now))
		vars := map[string]string{"ROTATED": ctoken.EncodeKey(f.key) + ", " + ctoken.EncodeKey(f.oldKey)}
		if r := runCmd(t, "", vars, append(append([]string{"verify", "-keys-env", "ROTATED"}, cursorFlags(f)...), c)...); r.code != exitOK {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		// With the old key dropped from the ring, the same cursor is refused.
		if r := runCmd(t, "", f.env(), append(append([]string{"verify"}, cursorFlags(f)...), c)...); r.code != exitRejected {
			t.Fatalf("exit %d after rotation, want %d", r.code, exitRejected)
		}
	})

	t.Run("rejections", func(t *testing.T) {
		f := newFixture(t)
		c := f.cursor(t, f.issuer)
		old := f.cursor(t, f.cursorIssuer(t, f.key, func() time.Time { return time.Now().Add(-time.Hour) }))
		foreign := f.cursor(t, f.cursorIssuer(t, f.oldKey, time.Now))
		tampered := []byte(c)
		tampered[10] ^= 'A' ^ 'B'
		if tampered[10] == c[10] {
			tampered[10] = 'C'
		}
		otherSession := "fleet-02"
		for _, tc := range []struct {
			name   string
			tok    string
			flags  []string
			class  string // error class in stderr
			reason string
		}{
			{"wrong tool", c, []string{"-method", "tools/call", "-tool", "delete"}, "invalid cursor", "forged or wrong scope"},
			{"tool of another method", c, []string{"-method", "prompts/get"}, "invalid cursor", "forged or wrong scope"},
			{"wrong caller", c, []string{"-caller", "bob"}, "invalid cursor", "forged or wrong scope"},
			{"wrong args", c, []string{"-args", `{"query":"boots","limit":10}`}, "invalid cursor", "forged or wrong scope"},
			{"other session", c, []string{"-session", otherSession}, "expired cursor", "other server session"},
			{"older than TTL", old, nil, "expired cursor", "older than TTL"},
			{"shorter TTL", c, []string{"-ttl", "1ns"}, "", ""},
			{"foreign key", foreign, nil, "invalid cursor", "signed by a key not in the ring"}, // the key id names no key of the ring
			{"tampered", string(tampered), nil, "invalid cursor", ""},
			{"truncated", c[:len(c)-4], nil, "invalid cursor", ""},
			{"oversize", strings.Repeat("A", ctoken.MaxCursorBytes+1), nil, "invalid cursor", "over MaxCursorBytes"},
			{"garbage", "!!!", nil, "invalid cursor", "not base64url"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.name == "shorter TTL" {
					// A cursor issued this second may be 0 s old: issue one a
					// few seconds back to make 1ns a certain failure.
					tc.tok = f.cursor(t, f.cursorIssuer(t, f.key, func() time.Time { return time.Now().Add(-5 * time.Second) }))
					tc.class, tc.reason = "expired cursor", "older than TTL"
				}
				// The case's flags after the cursor's own: the last value wins.
				r := runCmd(t, "", f.env(), append(append(append([]string{"verify"}, cursorFlags(f)...), tc.flags...), tc.tok)...)
				if r.code != exitRejected {
					t.Fatalf("exit %d, want %d; stdout %q stderr %q", r.code, exitRejected, r.stdout, r.stderr)
				}
				if r.stdout != "" {
					t.Errorf("printed a payload for a rejected cursor: %q", r.stdout)
				}
				if !strings.Contains(r.stderr, "REJECTED") || !strings.Contains(r.stderr, tc.class) {
					t.Errorf("stderr %q lacks REJECTED / %q", r.stderr, tc.class)
				}
				if tc.reason != "" && !strings.Contains(r.stderr, "reason: "+tc.reason) {
					t.Errorf("stderr %q lacks reason %q", r.stderr, tc.reason)
				}
				if len(tc.tok) > 8 && strings.Contains(r.stderr, tc.tok[:8]) || strings.Contains(r.stderr, f.keys) {
					t.Errorf("stderr echoes the token or key: %q", r.stderr)
				}
			})
		}
	})
}

// A cursor carries neither its tool, its caller nor its session: verify
// cannot take them from the token and asks for them; an empty tool is a
// usage error too (no cursor is bound to one).
func TestVerifyCursorNeedsItsScopeFlags(t *testing.T) {
	f := newFixture(t)
	c := f.cursor(t, f.issuer)
	for name, flags := range map[string][]string{
		"none":       nil,
		"no session": {"-method", "tools/call", "-tool", "search", "-caller", "alice"},
		"no caller":  {"-method", "tools/call", "-tool", "search", "-session", string(f.session)},
		"no tool":    {"-caller", "alice", "-session", string(f.session)},
		"empty tool": {"-tool", "", "-caller", "alice", "-session", string(f.session)},
	} {
		t.Run(name, func(t *testing.T) {
			r := runCmd(t, "", f.env(), append(append([]string{"verify"}, flags...), c)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "give -tool, -caller and -session") || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// cursorFlags are the verify flags of the fixture's cursor.
func cursorFlags(f *fixture) []string {
	return []string{"-method", "tools/call", "-tool", "search", "-caller", "alice", "-args", searchArgs, "-session", string(f.session)}
}

func TestVerifyRequestState(t *testing.T) {
	f := newFixture(t)
	tool := ctoken.MCPTarget("tools/call", "deploy")
	for _, tc := range []struct {
		name    string
		sec     ctoken.RequestStateSecurity
		binding string
		mode    string
	}{
		{"signed, subject", ctoken.RequestStateSecurity{Binding: ctoken.BindSubject}, "subject", "signed"},
		{"signed, subject and tool", ctoken.RequestStateSecurity{Binding: ctoken.BindSubjectAndTool}, "subject-and-tool", "signed"},
		{"encrypted, subject and tool", ctoken.RequestStateSecurity{Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool}, "subject-and-tool", "encrypted"},
		{"encrypted, none", ctoken.RequestStateSecurity{Mode: ctoken.Encrypted, Binding: ctoken.BindNone}, "none", "encrypted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.state(t, tc.sec, `{"step":2}`, "alice", tool)
			// Only the flags the binding checks: verify refuses the others.
			args := []string{"verify", "-binding", tc.binding}
			if tc.binding != "none" {
				args = append(args, "-subject", "alice")
			}
			if tc.binding == "subject-and-tool" {
				args = append(args, "-method", "tools/call", "-tool", "deploy")
			}
			r := runCmd(t, w, f.env(), append(args, "-")...)
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			m := decodeJSON(t, r.stdout)
			wantSubject := "alice"
			if tc.binding == "none" {
				wantSubject = ""
			}
			if m["verified"] != true || m["state"] != `{"step":2}` || m["mode"] != tc.mode || m["subject"] != wantSubject {
				t.Errorf("unexpected payload: %v", m)
			}
			if _, hasExp := m["expiresAt"]; hasExp != (tc.mode == "signed") {
				t.Errorf("expiresAt present = %v for mode %s", hasExp, tc.mode)
			}
		})
	}
}

func TestVerifyRequestStateRejections(t *testing.T) {
	f := newFixture(t)
	tool := ctoken.MCPTarget("tools/call", "deploy")
	both := ctoken.RequestStateSecurity{Binding: ctoken.BindSubjectAndTool}
	signed := f.state(t, both, "s", "alice", tool)
	sealed := f.state(t, ctoken.RequestStateSecurity{Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool}, "s", "alice", tool)
	expired := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubjectAndTool, Now: func() time.Time { return time.Now().Add(-time.Hour) }}, "s", "alice", tool)
	oldKR, err := ctoken.NewKeyring(f.oldKey)
	if err != nil {
		t.Fatal(err)
	}
	foreign := f.state(t, ctoken.RequestStateSecurity{Keys: oldKR, Binding: ctoken.BindSubjectAndTool}, "s", "alice", tool)
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, tok, subject, tool, class string
		extra                           []string
	}{
		{"wrong subject", signed, "bob", "deploy", "invalid request state", nil},
		{"wrong tool", signed, "alice", "destroy", "invalid request state", nil},
		{"encrypted wrong subject", sealed, "bob", "deploy", "invalid request state", nil},
		{"expired", expired, "alice", "deploy", "expired request state", nil},
		{"foreign key", foreign, "alice", "deploy", "invalid request state", nil},
		{"tampered payload", flip(signed, 5), "alice", "deploy", "invalid request state", nil},
		{"tampered ciphertext", flip(sealed, len(sealed)-3), "alice", "deploy", "invalid request state", nil},
		{"mode mismatch", sealed, "alice", "deploy", "invalid request state", []string{"-mode", "signed"}},
		{"over size cap", signed, "alice", "deploy", "invalid request state", []string{"-max-bytes", strconv.Itoa(len(signed) - 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"verify", "-binding", "subject-and-tool", "-subject", tc.subject, "-method", "tools/call", "-tool", tc.tool}, tc.extra...)
			r := runCmd(t, "", f.env(), append(args, tc.tok)...)
			if r.code != exitRejected {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", r.code, exitRejected, r.stdout, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("printed a payload for a rejected state: %q", r.stdout)
			}
			if !strings.Contains(r.stderr, tc.class) || !strings.Contains(r.stderr, "reason: ") {
				t.Errorf("stderr %q lacks %q and a reason", r.stderr, tc.class)
			}
			if strings.Contains(r.stderr, tc.tok[4:12]) {
				t.Errorf("stderr echoes the token: %q", r.stderr)
			}
		})
	}
}

func TestTokenFromStdinIsCapped(t *testing.T) {
	r := runCmd(t, strings.Repeat("A", maxTokenInput+1), nil, "inspect", "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "longer than") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// A flag the chosen binding does not check must not be accepted and then
// echoed in a "verified" payload, as if the state had been checked
// against it.
func TestVerifyStateRefusesFlagsItsBindingIgnores(t *testing.T) {
	f := newFixture(t)
	tool := ctoken.MCPTarget("tools/call", "deploy")
	bySubject := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject}, "s", "alice", tool)
	unbound := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindNone}, "s", "alice", tool)
	for _, tc := range []struct {
		name, tok string
		args      []string
		want      string
	}{
		{"tool under subject binding", bySubject, []string{"-subject", "alice", "-tool", "bogus"}, "-tool is not checked"},
		{"method and tool under subject binding", bySubject, []string{"-subject", "alice", "-method", "tools/call", "-tool", "bogus"}, "-tool is not checked"},
		{"subject under no binding", unbound, []string{"-binding", "none", "-subject", "mallory"}, "-subject is not checked"},
		{"tool under no binding", unbound, []string{"-binding", "none", "-tool", "bogus"}, "-tool is not checked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", f.env(), append(append([]string{"verify"}, tc.args...), tc.tok)...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d; stdout %q", r.code, exitUsage, r.stdout)
			}
			if r.stdout != "" {
				t.Errorf("printed a payload: %q", r.stdout)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.want)
			}
		})
	}
}

// Under subject-and-tool an anonymous state (empty subject) is still bound
// to its tool: verify checks -tool and refuses another one.
func TestVerifyAnonymousStateChecksItsTool(t *testing.T) {
	f := newFixture(t)
	tool := ctoken.MCPTarget("tools/call", "deploy")
	for _, sec := range []ctoken.RequestStateSecurity{
		{Binding: ctoken.BindSubjectAndTool},
		{Binding: ctoken.BindSubjectAndTool, Mode: ctoken.Encrypted},
	} {
		anonymous := f.state(t, sec, "s", "", tool)
		args := []string{"verify", "-binding", "subject-and-tool", "-method", "tools/call"}
		ok := runCmd(t, "", f.env(), append(args, "-tool", "deploy", anonymous)...)
		if ok.code != 0 || ok.stdout == "" {
			t.Fatalf("own tool: exit %d, stdout %q, stderr %q", ok.code, ok.stdout, ok.stderr)
		}
		bad := runCmd(t, "", f.env(), append(args, "-tool", "delete", anonymous)...)
		if bad.code == 0 || bad.stdout != "" {
			t.Fatalf("another tool: exit %d, stdout %q", bad.code, bad.stdout)
		}
	}
}

// A token pasted where the command belongs ("ctoken TOKEN") is not echoed
// back into the terminal or a CI log.
func TestUnknownCommandDoesNotEchoAToken(t *testing.T) {
	f := newFixture(t)
	c := f.cursor(t, f.issuer)
	r := runCmd(t, "", nil, c)
	if r.code != exitUsage || !strings.Contains(r.stderr, "unknown command") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, c[:16]) {
		t.Errorf("stderr echoes the token: %q", r.stderr)
	}
}

// A sealed cursor shows its header only (version, issue time, session
// tag); verify with the scope flags and the key opens it.
func TestInspectAndVerifySealedCursor(t *testing.T) {
	f := newFixture(t)
	kr, err := ctoken.NewKeyring(f.key)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: f.session, Seal: true})
	if err != nil {
		t.Fatal(err)
	}
	c := f.cursor(t, iss)
	r := runCmd(t, "", nil, "inspect", c)
	if r.code != exitOK {
		t.Fatalf("inspect: exit %d, stderr %q", r.code, r.stderr)
	}
	m := decodeJSON(t, r.stdout)
	if m["version"] != 3.0 || m["sealed"] != true || m["scope"] != scopeSealedNote || m["kind"] != "cursor" {
		t.Errorf("inspect report %v", m)
	}
	for _, k := range []string{"page", "state", "stateBytes", "binding", "mac", "caller", "tool"} {
		if _, ok := m[k]; ok {
			t.Errorf("inspect shows %q of a sealed cursor", k)
		}
	}
	if strings.Contains(r.stdout, "alice") || strings.Contains(r.stdout, base64.RawURLEncoding.EncodeToString([]byte("offset=30"))) {
		t.Errorf("inspect shows sealed content: %s", r.stdout)
	}
	r = runCmd(t, "", f.env(), append(append([]string{"verify"}, cursorFlags(f)...), c)...)
	if r.code != exitOK {
		t.Fatalf("verify: exit %d, stderr %q", r.code, r.stderr)
	}
	if m := decodeJSON(t, r.stdout); m["page"] != 3.0 || m["state"] != base64.RawURLEncoding.EncodeToString([]byte("offset=30")) {
		t.Errorf("verify report %v", m)
	}
	r = runCmd(t, "", f.env(), append(append([]string{"verify"}, cursorFlags(f)...), "-caller", "bob", c)...)
	if r.code != exitRejected || !strings.Contains(r.stderr, "sealed cursor does not open") {
		t.Errorf("verify for another caller: exit %d, stderr %q", r.code, r.stderr)
	}
}
