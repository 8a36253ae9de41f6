package main

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
)

// ringFixture is a ring of two keys, primary and previous, and a third key
// it does not hold.
type ringFixture struct {
	*fixture
	ring    *ctoken.Keyring
	keys    string // CTOKEN_KEYS: key, oldKey
	foreign []byte
}

func newRingFixture(t *testing.T) *ringFixture {
	t.Helper()
	f := newFixture(t)
	kr, err := ctoken.NewKeyring(f.key, f.oldKey)
	if err != nil {
		t.Fatal(err)
	}
	return &ringFixture{fixture: f, ring: kr, keys: ctoken.EncodeKey(f.key) + "," + ctoken.EncodeKey(f.oldKey), foreign: seqKey(0x71)}
}

func (r *ringFixture) env() map[string]string { return map[string]string{"CTOKEN_KEYS": r.keys} }

// keyIDOfKey is the key id of key, as Keyring.KeyIDs prints it.
func keyIDOfKey(t *testing.T, key []byte) string {
	t.Helper()
	kr, err := ctoken.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	return kr.KeyIDs()[0]
}

// TestInspectNamesTheKeyOfEveryKind: inspect prints the key id a token
// carries and which key of the ring in CTOKEN_KEYS it names; a request
// state says it carries none.
func TestInspectNamesTheKeyOfEveryKind(t *testing.T) {
	f := newRingFixture(t)
	ot := func(key []byte) string { return mintTok(t, f.oneTime(t, key, "agent-bootstrap", nil), bootClaims) }
	oldRing, err := ctoken.NewKeyring(f.oldKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		tok       string
		vars      map[string]string
		keyID     string // "" = none printed
		keyInRing string
	}{
		{"one-time, primary", ot(f.key), f.env(), keyIDOfKey(t, f.key), "primary"},
		{"one-time, previous", ot(f.oldKey), f.env(), keyIDOfKey(t, f.oldKey), "previous 1"},
		{"one-time, unknown", ot(f.foreign), f.env(), keyIDOfKey(t, f.foreign), unknownKeyNote},
		{"one-time, no ring", ot(f.key), nil, keyIDOfKey(t, f.key), "not looked up: CTOKEN_KEYS is not set"},
		{"one-time, ring does not parse", ot(f.key), map[string]string{"CTOKEN_KEYS": "not-a-key"}, keyIDOfKey(t, f.key), "not looked up: CTOKEN_KEYS does not parse"},
		{"signed request state", f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Keys: oldRing}, "s", "alice", "t"), f.env(), "", noStateKeyIDShown},
		{"encrypted request state", f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Keys: oldRing, Mode: ctoken.Encrypted}, "s", "alice", "t"), f.env(), "", noStateKeyIDShown},
		{"request state, no ring", f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject}, "s", "alice", "t"), nil, "", noStateKeyIDShown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", tc.vars, "inspect", tc.tok)
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			m := decodeJSON(t, r.stdout)
			if got, _ := m["keyId"].(string); got != tc.keyID {
				t.Errorf("keyId = %q, want %q", got, tc.keyID)
			}
			if m["keyInRing"] != tc.keyInRing {
				t.Errorf("keyInRing = %q, want %q", m["keyInRing"], tc.keyInRing)
			}
			if _, ok := m["verifiedBy"]; ok {
				t.Error("inspect claims a key verified the token")
			}
			if strings.Contains(r.stdout+r.stderr, f.keys) || strings.Contains(r.stdout+r.stderr, ctoken.EncodeKey(f.oldKey)) {
				t.Error("output holds a key")
			}
		})
	}
}

// TestVerifyNamesTheKeyOfEveryKind: verify prints the key a token names
// and the key that verified it; a rejection names the token's key id and,
// for an id the ring lacks, the ids it holds.
func TestVerifyNamesTheKeyOfEveryKind(t *testing.T) {
	f := newRingFixture(t)
	ot := func(key []byte) string { return mintTok(t, f.oneTime(t, key, "agent-bootstrap", nil), bootClaims) }
	oldRing, err := ctoken.NewKeyring(f.oldKey)
	if err != nil {
		t.Fatal(err)
	}
	primaryID, previousID := keyIDOfKey(t, f.key), keyIDOfKey(t, f.oldKey)
	oneTime := []string{"-purpose", "agent-bootstrap"}
	state := []string{"-subject", "alice"}

	t.Run("accepted", func(t *testing.T) {
		for _, tc := range []struct {
			name                         string
			tok                          string
			flags                        []string
			keyID, keyInRing, verifiedBy string
		}{
			{"one-time, primary", ot(f.key), oneTime, primaryID, "primary", "primary"},
			{"one-time, previous", ot(f.oldKey), oneTime, previousID, "previous 1", "previous 1"},
			{"signed request state, previous", f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Keys: oldRing}, "s", "alice", ""), state, "", noStateKeyID, "previous 1"},
			{"encrypted request state, previous", f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Keys: oldRing, Mode: ctoken.Encrypted}, "s", "alice", ""), state, "", noStateKeyID, "previous 1"},
			{"signed request state, primary", f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject}, "s", "alice", ""), state, "", noStateKeyID, "primary"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := runCmd(t, "", f.env(), append(append([]string{"verify"}, tc.flags...), tc.tok)...)
				if r.code != exitOK {
					t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
				}
				m := decodeJSON(t, r.stdout)
				if got, _ := m["keyId"].(string); got != tc.keyID {
					t.Errorf("keyId = %q, want %q", got, tc.keyID)
				}
				if m["keyInRing"] != tc.keyInRing || m["verifiedBy"] != tc.verifiedBy {
					t.Errorf("keyInRing %q, verifiedBy %q; want %q, %q", m["keyInRing"], m["verifiedBy"], tc.keyInRing, tc.verifiedBy)
				}
			})
		}
	})

	t.Run("rejected", func(t *testing.T) {
		tok := ot(f.key)
		raw, err := b64.DecodeString(strings.TrimPrefix(tok, oneTimePrefix))
		if err != nil {
			t.Fatal(err)
		}
		altered := append([]byte(nil), raw...)
		old, _ := hex.DecodeString(previousID)
		copy(altered[oneTimeKeyIDAt:], old)
		for _, tc := range []struct {
			name   string
			tok    string
			flags  []string
			reason string
			keyRow string
		}{
			{"one-time of a key the ring lacks", ot(f.foreign), oneTime, "signed by a key not in the ring: retired or foreign",
				"key id: " + keyIDOfKey(t, f.foreign) + ", " + unknownKeyNote + "; CTOKEN_KEYS holds " + primaryID + " (primary), " + previousID + " (previous 1)"},
			{"one-time with its key id altered to the previous key's", oneTimePrefix + b64.EncodeToString(altered), oneTime, "mac mismatch",
				"key id: " + previousID + ", the previous 1 key of CTOKEN_KEYS"},
			{"one-time tampered under the primary", tok[:len(tok)-2] + flipLast(tok), oneTime, "mac mismatch",
				"key id: " + primaryID + ", the primary key of CTOKEN_KEYS"},
			{"request state of a key the ring lacks", f.state(t, ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Keys: mustRing(t, f.foreign)}, "s", "alice", ""), state, "mac mismatch",
				"key: " + noStateKeyID},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := runCmd(t, "", f.env(), append(append([]string{"verify"}, tc.flags...), tc.tok)...)
				if r.code != exitRejected || r.stdout != "" {
					t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
				}
				if !strings.Contains(r.stderr, "reason: "+tc.reason+"\n") || !strings.Contains(r.stderr, tc.keyRow+"\n") {
					t.Errorf("stderr %q\nlacks reason %q or %q", r.stderr, tc.reason, tc.keyRow)
				}
			})
		}
	})
}

// flipLast returns the last two characters of a base64url token with the
// last MAC bits changed.
func flipLast(tok string) string {
	if strings.HasSuffix(tok, "AA") {
		return "BA"
	}
	return "AA"
}

func mustRing(t *testing.T, keys ...[]byte) *ctoken.Keyring {
	t.Helper()
	kr, err := ctoken.NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// TestCursorKeyID pins where a cursor's key id is read: after the map
// head, key 1 and a one-byte version, key 2 and the head of a 4-byte byte
// string; anything else is not read.
func TestCursorKeyID(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef}
	mac := make([]byte, 32)
	tok := func(b ...byte) string { return b64.EncodeToString(append(b, mac...)) }
	for _, tc := range []struct {
		name    string
		tok     string
		version byte
		id      []byte
	}{
		{"signed, version 2", tok(append([]byte{0xa5, 0x01, 0x02, 0x02, 0x44}, id...)...), 2, id},
		{"sealed, version 3", tok(append([]byte{0xa4, 0x01, 0x03, 0x02, 0x44}, id...)...), 3, id},
		{"no key id (key 5 second)", tok(0xa4, 0x01, 0x02, 0x05, 0x03, 0x06, 0x00, 0x07, 0x40), 0, nil},
		{"key id of 3 bytes", tok(0xa5, 0x01, 0x02, 0x02, 0x43, 1, 2, 3, 0x05), 0, nil},
		{"not a map", tok(append([]byte{0x85, 0x01, 0x02, 0x02, 0x44}, id...)...), 0, nil},
		{"too short", b64.EncodeToString([]byte{0xa5, 0x01, 0x02, 0x02, 0x44, 1, 2}), 0, nil},
		{"not base64url", "***", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, got, ok := cursorKeyID(tc.tok)
			if ok != (tc.id != nil) || v != tc.version || string(got) != string(tc.id) {
				t.Fatalf("cursorKeyID = %d, %x, %v; want %d, %x", v, got, ok, tc.version, tc.id)
			}
			k := keyOf(tc.tok, nil, "not looked up")
			if tc.id == nil && (k.KeyID != "" || k.KeyInRing != cursorKeyIDNotRead) {
				t.Fatalf("keyOf = %+v, want %q", k, cursorKeyIDNotRead)
			}
			if tc.id != nil && k.KeyID != hex.EncodeToString(tc.id) {
				t.Fatalf("keyOf = %+v, want key id %x", k, tc.id)
			}
		})
	}
}

// TestCursorsNameTheirKey: every cursor kind (signed, sealed, keyset; a
// protopage page token is a signed or sealed cursor) carries the key id of
// the key that signed it, which inspect and verify look up in the ring.
func TestCursorsNameTheirKey(t *testing.T) {
	f := newRingFixture(t)
	scope := ctoken.CursorScope{ToolID: ctoken.MCPTarget("tools/call", "search"), CallerID: "alice", Args: mustFingerprint(t, searchArgs)}
	issuer := func(key []byte, seal bool) *ctoken.CursorIssuer {
		iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: mustRing(t, key), Session: f.session, Seal: seal})
		if err != nil {
			t.Fatal(err)
		}
		return iss
	}
	kinds := map[string]func(key []byte) string{
		"signed": func(key []byte) string { return f.cursor(t, issuer(key, false)) },
		"sealed": func(key []byte) string { return f.cursor(t, issuer(key, true)) },
		"keyset": func(key []byte) string {
			c, err := ctoken.IssueKeyset(issuer(key, false), scope, struct{ ID int }{42})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	}
	primaryID, previousID, foreignID := keyIDOfKey(t, f.key), keyIDOfKey(t, f.oldKey), keyIDOfKey(t, f.foreign)
	for kind, mint := range kinds {
		for _, tc := range []struct {
			name             string
			key              []byte
			keyID, keyInRing string
		}{
			{"primary", f.key, primaryID, "primary"},
			{"previous", f.oldKey, previousID, "previous 1"},
			{"unknown", f.foreign, foreignID, unknownKeyNote},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				c := mint(tc.key)
				r := runCmd(t, "", f.env(), "inspect", c)
				if r.code != exitOK {
					t.Fatalf("inspect: exit %d, stderr %q", r.code, r.stderr)
				}
				if m := decodeJSON(t, r.stdout); m["keyId"] != tc.keyID || m["keyInRing"] != tc.keyInRing {
					t.Errorf("inspect: keyId %v, keyInRing %v; want %s, %s", m["keyId"], m["keyInRing"], tc.keyID, tc.keyInRing)
				}
				r = runCmd(t, "", f.env(), append(append([]string{"verify"}, cursorFlags(f.fixture)...), c)...)
				if tc.keyInRing == unknownKeyNote {
					want := "key id: " + foreignID + ", " + unknownKeyNote + "; CTOKEN_KEYS holds " + primaryID + " (primary), " + previousID + " (previous 1)\n"
					if r.code != exitRejected || !strings.Contains(r.stderr, "reason: signed by a key not in the ring: retired or foreign\n") || !strings.Contains(r.stderr, want) {
						t.Fatalf("verify: exit %d, stderr %q; want the unknown key named", r.code, r.stderr)
					}
					return
				}
				if r.code != exitOK {
					t.Fatalf("verify: exit %d, stderr %q", r.code, r.stderr)
				}
				if m := decodeJSON(t, r.stdout); m["keyId"] != tc.keyID || m["keyInRing"] != tc.keyInRing || m["verifiedBy"] != tc.keyInRing {
					t.Errorf("verify: keyId %v, keyInRing %v, verifiedBy %v; want %s, %s", m["keyId"], m["keyInRing"], m["verifiedBy"], tc.keyID, tc.keyInRing)
				}
				// Another caller under a known key: the key is named, the
				// refusal is the scope's.
				r = runCmd(t, "", f.env(), append(append([]string{"verify"}, cursorFlags(f.fixture)...), "-caller", "bob", c)...)
				if r.code != exitRejected || !strings.Contains(r.stderr, "key id: "+tc.keyID+", the "+tc.keyInRing+" key of CTOKEN_KEYS\n") {
					t.Errorf("verify for bob: exit %d, stderr %q", r.code, r.stderr)
				}
			})
		}
	}
}
