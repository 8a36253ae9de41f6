package webhook

import (
	"crypto/ed25519"
	"fmt"

	"github.com/ctoken/ctoken/internal/mac"
)

// keySet is one validated set of secrets, parsed for the scheme. A
// [Verifier] or [Signer] holds its set behind an atomic pointer and
// replaces it whole ([Verifier.SetSecrets], [Signer.SetSecrets]); a set is
// never modified once stored, so a call that loaded it sees one consistent
// set.
type keySet struct {
	keys   []*mac.Key           // the HMAC schemes
	edPub  []ed25519.PublicKey  // StandardWebhooksEd25519, verifier
	edPriv []ed25519.PrivateKey // StandardWebhooksEd25519, signer
}

// loadSecrets validates and parses secrets for scheme, for a signer when
// signer is set. An error names a secret's position, never the secret.
func loadSecrets(scheme Scheme, secrets []string, signer bool) (*keySet, error) {
	if len(secrets) == 0 {
		return nil, errNoSecrets
	}
	for i, s := range secrets {
		if surroundedBySpace(s) {
			return nil, fmt.Errorf("%w (secret %d of %d)", errSecretSpace, i+1, len(secrets))
		}
	}
	ks := &keySet{}
	if err := scheme.loadKeys(ks, secrets, signer); err != nil {
		return nil, err
	}
	return ks, nil
}

// SetSecrets replaces the verifier's secrets, while it runs, with secrets,
// validated exactly as [NewVerifier] validates [Config.Secrets]: an empty
// list is [ErrNoSecret], a malformed or (in FIPS 140-3 mode) too short
// secret [ErrSecretInvalid], and on any error the secrets in effect are
// kept. Once it returns nil, every Verify that starts checks signatures
// under the new secrets; a Verify already running finishes under the set
// it started with (each call reads the set once, with one atomic load and
// no lock). Deliveries held in the replay store are not affected: their
// keys do not depend on the secrets.
//
// To rotate without refusing a valid delivery, add the new secret first
// (SetSecrets(new, old)) before the sender signs with it, and drop the old
// one once the key position of verified deliveries ([observe.Event.Key],
// "previous 1") has drained to zero. A zero Verifier refuses with
// [ErrNoSecret].
func (v *Verifier) SetSecrets(secrets []string) error {
	if v == nil || v.p == nil {
		return errZeroVerifier
	}
	return v.p.setSecrets(secrets)
}

// SetSecrets replaces the signer's secrets, while it runs, with secrets,
// validated exactly as [NewSigner] validates [Config.Secrets]; on any error
// the secrets in effect are kept. Once it returns nil, every Sign that
// starts signs under the new secrets (under the first only, or under every
// one, as the scheme documents); a Sign already running finishes under the
// set it started with. A zero Signer refuses with [ErrNoSecret].
func (s *Signer) SetSecrets(secrets []string) error {
	if s == nil || s.p == nil {
		return errZeroSigner
	}
	return s.p.setSecrets(secrets)
}

func (p *params) setSecrets(secrets []string) error {
	ks, err := loadSecrets(p.scheme, secrets, p.signer)
	if err != nil {
		return err
	}
	p.set.Store(ks)
	return nil
}
