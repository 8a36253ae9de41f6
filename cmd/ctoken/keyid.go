package main

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/ctoken/ctoken/observe"
)

// Every token ctoken mints names the key that signed it by a 4-byte key id
// (ctoken.Keyring.KeyIDs), except request states, whose v1./v1e. formats
// are fixed by the reference D implementation and carry none. This file
// reads the id of each kind and says which key of the ring given it names.

// keyIDBytes is the length of a key id.
const keyIDBytes = cursorwire.KeyIDSize

// oneTimeKeyIDAt is where the key id is in a decoded ot1. token: after its
// version byte.
const oneTimeKeyIDAt = 1

// Notes of keyReport.KeyInRing that are not a key position.
const (
	noStateKeyID       = "no key id (v1 request state; tried every key)"
	noStateKeyIDShown  = "no key id (v1 request state; verify tries every key)"
	cursorKeyIDNotRead = "key id not read (not a cursor of a known layout: no version and key id at its start)"
	unknownKeyNote     = "unknown: no key of the ring has this id (a retired key, another deployment's key, or an altered id)"
)

// keyReport says which key of a ring a token names. It is embedded in
// every report and result, so its fields print with them.
type keyReport struct {
	// KeyID is the id the token carries, 8 hex digits as
	// ctoken.Keyring.KeyIDs prints them; empty for a request state.
	KeyID string `json:"keyId,omitempty"`
	// KeyInRing is "primary", "previous N" (as observe.KeyPosition prints
	// it), unknownKeyNote, or why the id was not looked up.
	KeyInRing string `json:"keyInRing"`
	// VerifiedBy is, after a successful verify, the key whose MAC (or GCM
	// tag) matched: the same key as KeyInRing for a token with a key id,
	// and the only way to tell it for a request state.
	VerifiedBy string `json:"verifiedBy,omitempty"`
}

// oneTimeKeyID returns the key id an ot1. token carries, or false when it
// is not long enough to hold one or has another layout.
func oneTimeKeyID(tok string) ([]byte, bool) {
	raw, err := b64.DecodeString(strings.TrimPrefix(tok, oneTimePrefix))
	if err != nil || len(raw) < oneTimeFixedLen || raw[0] != oneTimeVersion {
		return nil, false
	}
	return raw[oneTimeKeyIDAt : oneTimeKeyIDAt+keyIDBytes], true
}

// cursorKeyID returns the key id a cursor carries at its fixed place, with
// the version before it, or false for a cursor that does not start with
// both. Every cursor (signed, sealed, keyset, and a protopage page token)
// starts with a CBOR map whose key 1 is the version and key 2 the key id, a
// 4-byte byte string: map head, 0x01, version, 0x02, 0x44, then the id
// (cursorwire.ReadPrefix, which the library's Verify reads too).
func cursorKeyID(tok string) (version byte, id []byte, ok bool) {
	raw, err := b64.DecodeString(tok)
	if err != nil {
		return 0, nil, false
	}
	return cursorwire.ReadPrefix(raw)
}

// keyIDOf reads the key id of tok, of any kind. For a token without one
// it returns the note that says why instead.
func keyIDOf(tok string) (id []byte, note string) {
	switch classify(tok) {
	case kindSignedState, kindEncryptedState:
		return nil, noStateKeyID
	case kindOneTime:
		if id, ok := oneTimeKeyID(tok); ok {
			return id, ""
		}
		return nil, "key id not read (not a well-formed ot1. token)"
	default:
		if _, id, ok := cursorKeyID(tok); ok {
			return id, ""
		}
		return nil, cursorKeyIDNotRead
	}
}

// lookupKey says which key of kr the id names.
func lookupKey(id []byte, kr *ctoken.Keyring) string {
	h := hex.EncodeToString(id)
	for i, k := range kr.KeyIDs() {
		if k == h {
			return observe.KeyAt(i).String()
		}
	}
	return unknownKeyNote
}

// keyOf reports the key id of tok and its place in kr. A nil kr is a ring
// that was not given: noRing says why.
func keyOf(tok string, kr *ctoken.Keyring, noRing string) keyReport {
	id, note := keyIDOf(tok)
	if id == nil {
		return keyReport{KeyInRing: note}
	}
	r := keyReport{KeyID: hex.EncodeToString(id)}
	if kr == nil {
		r.KeyInRing = noRing
	} else {
		r.KeyInRing = lookupKey(id, kr)
	}
	return r
}

// ringText lists the key ids of kr with their positions, for a rejection:
// "20ea6109 (primary), e30d58fd (previous 1)".
func ringText(kr *ctoken.Keyring) string {
	ids := kr.KeyIDs()
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s (%v)", id, observe.KeyAt(i))
	}
	return strings.Join(parts, ", ")
}

// explainKey prints, after a rejection, which key of the ring in keysEnv
// the token names: whether a refusal is about a key the ring lacks or about
// a token altered under a key it has.
func explainKey(e *env, tok string, kr *ctoken.Keyring, keysEnv string) {
	k := keyOf(tok, kr, "")
	switch {
	case k.KeyID == "":
		fmt.Fprintf(e.stderr, "key: %s\n", k.KeyInRing)
	case k.KeyInRing == unknownKeyNote:
		fmt.Fprintf(e.stderr, "key id: %s, %s; %s holds %s\n", k.KeyID, k.KeyInRing, keysEnv, ringText(kr))
	default:
		fmt.Fprintf(e.stderr, "key id: %s, the %s key of %s\n", k.KeyID, k.KeyInRing, keysEnv)
	}
}

// keySeen records the key position of the last successful verification an
// issuer or codec reports: the key whose MAC (or GCM tag) matched.
type keySeen struct{ pos observe.KeyPosition }

// Observe implements observe.Observer.
func (k *keySeen) Observe(ev observe.Event) {
	if ev.Outcome == observe.OutcomeVerified {
		k.pos = ev.Key
	}
}

// verified returns the report of a verified token: its key id and position
// in kr, and the key that verified it.
func (k *keySeen) verified(tok string, kr *ctoken.Keyring) keyReport {
	r := keyOf(tok, kr, "")
	if k.pos != observe.KeyNone {
		r.VerifiedBy = k.pos.String()
	}
	return r
}

// setKey sets the key fields of a report.
func (k *keyReport) setKey(r keyReport) { *k = r }

// inspectRing returns the ring inspect looks key ids up in, from the
// environment variable keysEnv, or nil and why there is none. A ring that
// does not parse is reported, not fatal: inspect needs no key.
func inspectRing(e *env, keysEnv string) (*ctoken.Keyring, string) {
	keys := strings.TrimSpace(e.getenv(keysEnv))
	if keys == "" {
		return nil, "not looked up: " + keysEnv + " is not set"
	}
	kr, err := ctoken.ParseKeyring(keys)
	if err != nil {
		fmt.Fprintf(e.stderr, "ctoken inspect: %s: %v (key id not looked up)\n", keysEnv, err)
		return nil, "not looked up: " + keysEnv + " does not parse"
	}
	return kr, ""
}
