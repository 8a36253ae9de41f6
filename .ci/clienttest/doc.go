// Package clienttest holds the idempotency middleware's tests against
// real client libraries: stripe-go, openai-go (a Stainless-generated
// SDK) and go-retryablehttp (through a fenced store's 503s), each pointed
// at an httptest server that runs the middleware, and
// a differential fuzz of idempotency.ParseKey against the RFC 8941 parser
// github.com/dunglas/httpsfv. It is a module of its own so that the root
// module depends on none of them. It exports nothing.
package clienttest
