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
// # Stable names and labels
//
// Stable across minor versions (a minor version may add a value, never
// rename, renumber or drop one): the Go name of every exported constant,
// the number of every [TokenKind], [Outcome] and [KeyPosition], and the text
// of every value. The texts are the labels: a metric or a log line records
// String's text ("cursor", "refused", "primary", "previous 2", "mac
// mismatch"), never a number. A [RefusalReason] is its text (its kind is
// string), so string(r) and fmt print the words too; the other three are
// small integers that print their label only through String (%s and %v
// call it), never through string(k) or %d.
//
// New values need a review: the module's API file (api/ctoken.txt) lists
// every constant with its text, and its check keeps the file in step with
// the code, so a feature cannot add or reword a reason unseen.
package observe
