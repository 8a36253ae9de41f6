// Package observe is the vocabulary ctoken's packages report their outcomes
// in: an [Event] per operation, given to the [Observer] of a config, whose
// labels come from fixed, exported sets ([TokenKind], [Outcome],
// [RefusalReason], [KeyPosition]) so that metrics can be pre-registered with
// a bounded number of label values. An Event never holds token text, a
// delivery, a subject, a caller, a claim or key material.
// Most users never build an Event: they give an [Observer] (ctokenotel's, or
// their own) to a config, and read a refusal's reason with
// [RefusalReason.String]; ExampleRefusalReason shows the reason of a refused
// cursor.
//
// Every config of the module takes an [Observer] of this package: the root
// package's issuers and codecs, the webhook package's verifiers and
// signers, and the idempotency package's middleware. The package depends
// on the standard library only, so that webhook-only users can name these
// types without linking the root package.
//
// The values of these sets and their String forms are stable across minor
// versions: a minor version may add values, never rename, renumber or drop
// one.
package observe
