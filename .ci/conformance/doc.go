// Package conformance runs idempot-dev's public Idempotency-Key feature
// file (testdata/idempotency.feature, an interpretation of the expired
// draft-ietf-httpapi-idempotency-key-header-07) against ctoken's
// idempotency middleware. It holds tests only; the module is not
// published.
//
// Each scenario runs as a subtest against a real HTTP server. A scenario
// ctoken deliberately does not follow as written is listed, with its
// reason, in the deviations table of deviations_test.go, and ctoken's
// documented behaviour is asserted in the place of its deviating steps.
// A step the runner does not know fails its scenario.
package conformance
