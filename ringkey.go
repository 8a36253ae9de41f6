package ctoken

import "github.com/ctoken/ctoken/internal/ringkey"

// The packages of the module outside this one (idempotency, mcptoken) take
// their subkeys of a [Keyring] through internal/ringkey, which this package
// fills here: the ring's keys never leave the module, and no exported name
// is added for it.
func init() { ringkey.Register(ringSubkeys) }

// ringSubkeys returns the subkeys for label of every key of ring (a
// *Keyring made by [NewKeyring]) with the keys' ids, primary first, or
// false.
func ringSubkeys(ring any, label string) ([]ringkey.Subkey, bool) {
	kr, ok := ring.(*Keyring)
	if !ok || kr == nil || len(kr.keys) == 0 || len(kr.ids) != len(kr.keys) {
		return nil, false
	}
	subs := kr.derive(label)
	if len(subs) != len(kr.keys) {
		return nil, false
	}
	out := make([]ringkey.Subkey, len(subs))
	for i, s := range subs {
		out[i] = ringkey.Subkey{ID: kr.ids[i], Key: s}
	}
	return out, true
}
