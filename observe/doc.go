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
// Two kinds of exported name live here, with different promises.
//
// The API, stable across minor versions like any Go API: the types
// ([Event], [Observer], [ObserverFunc], [TokenKind], [Outcome],
// [RefusalReason], [KeyPosition]), the functions and methods ([Multi],
// [KeyAt], [ParseReason], [TokenKinds], [Outcomes], [RefusalReasons],
// String, [KeyPosition.Previous]) and the fields of [Event]. None is
// renamed, retyped or dropped in a minor version.
//
// The labels: the constants of the four sets (KindCursor, OutcomeRefused,
// KeyPrimary, ReasonMACMismatch, ...). Each is its label text (the four
// types are strings), so string(x), %s, %v and String print the same words
// ("cursor", "refused", "primary", "mac mismatch"); the one exception is
// [KeyNone], whose value is "" and whose String is "none". A constant's Go
// name and text never change and none is dropped in a minor version, but a
// set may gain members: a switch over a set needs a default, and a
// dashboard should expect new label values. A value outside a set (a
// string converted by a caller) prints as "" through String, so a metric
// label stays bounded whatever is converted.
//
// No new label is added unseen, least of all a new reason for a feature:
// the module's API file (api/ctoken.txt) lists every constant with its
// text, the API check fails until the file is rewritten, so each addition
// is a reviewed line of a pull request, and TestRefusalReasonSetIsUniqueAndNamed
// pins the number of reasons.
package observe
