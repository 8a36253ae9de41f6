package ctoken

import (
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// Kills the redact.go mutants that negate a nil or empty test in a
// description: the redacted %v form of each config and issuer says what is
// set (a key count, a session length, "set" or "nil") and never more.
func TestRedactedDescriptionsSayWhatIsSet(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	now := func() time.Time { return time.Unix(0, 0) }
	store := &replay.MemoryStore{}
	iss := newTestIssuer(t, CursorConfig{Keys: kr, Session: []byte("abc")})
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"cursor config, nothing set", CursorConfig{},
			"ctoken.CursorConfig{Keys: nil, TTL: 0s, Session: nil, Now: nil}"},
		{"cursor config, all set", CursorConfig{Keys: kr, TTL: time.Minute, Session: []byte("abc"), Now: now},
			"ctoken.CursorConfig{Keys: ctoken.Keyring(1 keys), TTL: 1m0s, Session: 3 bytes, Now: set}"},
		{"one-time config, nothing set", OneTimeConfig{},
			`ctoken.OneTimeConfig{Keys: nil, Purpose: "", TTL: 0s, Replay: nil, Now: nil}`},
		{"one-time config, all set", OneTimeConfig{Keys: kr, Purpose: "p", TTL: time.Minute, Replay: store, Now: now},
			`ctoken.OneTimeConfig{Keys: ctoken.Keyring(1 keys), Purpose: "p", TTL: 1m0s, Replay: set, Now: set}`},
		{"state security, nothing set", RequestStateSecurity{},
			"ctoken.RequestStateSecurity{Keys: nil, Mode: 0, Binding: 0, TTL: 0s, MaxBytes: 0, Now: nil, Replay: nil}"},
		{"state security, all set", RequestStateSecurity{Keys: kr, Mode: Encrypted, Binding: BindNone, TTL: time.Minute, MaxBytes: 4096, Now: now, Replay: store},
			"ctoken.RequestStateSecurity{Keys: ctoken.Keyring(1 keys), Mode: 1, Binding: 3, TTL: 1m0s, MaxBytes: 4096, Now: set, Replay: set}"},
		{"cursor issuer", *iss, "ctoken.CursorIssuer(1 keys, TTL 5m0s, session of 3 bytes)"},
		{"zero cursor issuer", CursorIssuer{}, "ctoken.CursorIssuer(no key)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprintf("%v", tc.v); got != tc.want {
				t.Fatalf("%%v = %s\nwant  %s", got, tc.want)
			}
		})
	}
}
