package main

import (
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

// FuzzInspect feeds arbitrary text to inspect's decoders: they parse
// untrusted tokens and must never panic, whatever the framing.
func FuzzInspect(f *testing.F) {
	fx := newFixture(f)
	f.Add(fx.cursor(f, fx.issuer))
	f.Add(fx.state(f, ctoken.RequestStateSecurity{}, `{"a":1}`, "alice", "tool"))
	f.Add(fx.state(f, ctoken.RequestStateSecurity{Mode: ctoken.Encrypted}, "x", "alice", "tool"))
	f.Add("v1.e30.AAAA")
	f.Add("v1e.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("oQFh")
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
			}
		default:
			if r, err := inspectCursor(tok, now); err == nil && r.Verified {
				t.Fatal("inspect claimed a cursor verified")
			}
		}
	})
}
