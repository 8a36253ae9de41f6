// Package ringkey gives the packages of the module outside the root package
// the one thing of a ctoken.Keyring they need: the subkeys of its keys for
// one purpose, with the keys' ids, derived exactly as the root package
// derives its own (HKDF-SHA256, salt 32 zero bytes, info = the purpose's
// label; the id is the first 4 bytes of the "ctoken.key-id" subkey). The
// root package registers the derivation when it is initialized, so no key
// and no new exported name leaves the module.
//
// It imports nothing.
package ringkey

// IDSize is the length of a key id.
const IDSize = 4

// Subkey is the subkey of one key of a ring for one label, and the id of
// that key (not of the subkey).
type Subkey struct {
	ID  [IDSize]byte
	Key []byte // 32 bytes
}

// deriver is set once, by the root package's init.
var deriver func(ring any, label string) ([]Subkey, bool)

// Register sets the derivation [Derive] uses. The root package calls it
// from its init, before any package importing the root package runs.
func Register(f func(ring any, label string) ([]Subkey, bool)) { deriver = f }

// Derive returns the subkeys for label of every key of ring, a
// *ctoken.Keyring, primary first, or false for a nil or zero ring, any
// other value, or a program that does not link the root package.
func Derive(ring any, label string) ([]Subkey, bool) {
	if deriver == nil || ring == nil {
		return nil, false
	}
	return deriver(ring, label)
}
