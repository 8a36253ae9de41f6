package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

// FuzzInspect feeds arbitrary text to inspect's decoders: they parse
// untrusted tokens and must never panic, whatever the framing.
func FuzzInspect(f *testing.F) {
	fx := newFixture(f)
	f.Add(fx.cursor(f, fx.issuer))
	f.Add(fx.state(f, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject}, `{"a":1}`, "alice", "tool"))
	f.Add(fx.state(f, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Mode: ctoken.Encrypted}, "x", "alice", "tool"))
	f.Add("v1.e30.AAAA")
	f.Add("v1e.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("oQFh")
	f.Add(tsSDKState(`{"p":{"a":1},"exp":1,"b":"AAAAAAAAAAAAAAAAAAAAAA"}`))
	f.Add("v1." + strings.Repeat("A", 48))
	f.Add(mintTok(f, fx.oneTime(f, fx.key, "p", nil), map[string]string{"a": "b"}))
	f.Add("ot1.AgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, tok string) {
		switch classify(tok) {
		case kindEncryptedState:
			if r, err := inspectEncrypted(tok); err == nil && r.PayloadBytes < 0 {
				t.Fatalf("negative payload length %d", r.PayloadBytes)
			}
		case kindSignedState:
			if r, err := inspectSigned(tok, now); err == nil && r.Verified {
				t.Fatal("inspect claimed a state verified")
			} else if err == nil && foreignState(tok) != "" {
				t.Fatalf("a ctoken state named as a %s state", foreignState(tok))
			}
		case kindOneTime:
			if r, err := inspectOneTime(tok, now); err == nil && (r.Verified || r.Claims == nil) {
				t.Fatal("inspect claimed a one-time token verified, or lost its claims")
			}
		default:
			r, err := inspectCursor(tok, now)
			if err != nil {
				break
			}
			switch r := r.(type) {
			case *cursorV2Report:
				if r.Verified || (r.Sealed && (r.Page != nil || r.State != "")) {
					t.Fatal("inspect claimed a cursor verified, or showed a sealed cursor's content")
				}
			default:
				t.Fatalf("inspect reported a %T", r)
			}
		}
		// Whatever the input, printed JSON holds no raw terminal control.
		var b strings.Builder
		if err := writeJSON(&b, map[string]string{"s": tok}); err != nil {
			t.Fatal(err)
		}
		for _, r := range b.String() {
			if mustEscape(r) {
				t.Fatalf("U+%04X printed raw", r)
			}
		}
	})
}
