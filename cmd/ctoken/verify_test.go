package main

import (
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
)

// verify -audience checks a state sealed with RequestStateSecurity.Audience:
// the same audience verifies, another or none is rejected, and the flag is
// refused for a cursor.
func TestVerifyRequestStateChecksAudience(t *testing.T) {
	f := newFixture(t)
	w := f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Mode: ctoken.Encrypted, Audience: "billing.prod"}, `{"step":2}`, "alice", "t")
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"same audience", []string{"-audience", "billing.prod"}, exitOK},
		{"other audience", []string{"-audience", "billing.staging"}, exitRejected},
		{"no audience", nil, exitRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"verify", "-subject", "alice"}, tc.args...), w)
			r := runCmd(t, "", f.env(), args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, tc.code, r.stderr)
			}
			if tc.code == exitOK {
				if m := decodeJSON(t, r.stdout); m["audience"] != "billing.prod" || m["state"] != `{"step":2}` {
					t.Fatalf("payload %v", m)
				}
			}
		})
	}
	t.Run("cursor", func(t *testing.T) {
		r := runCmd(t, "", f.env(), "verify", "-audience", "x", f.cursor(t, f.issuer))
		if r.code != exitUsage || !strings.Contains(r.stderr, "-audience applies to request states") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// verify names a v1. state of the TypeScript MCP SDK in its rejection.
func TestVerifyNamesAnotherSDKsState(t *testing.T) {
	f := newFixture(t)
	r := runCmd(t, "", f.env(), "verify", "-subject", "alice", tsSDKState(`{"p":1,"exp":1767323345}`))
	if r.code != exitRejected || !strings.Contains(r.stderr, "looks like a TypeScript-SDK state") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}
