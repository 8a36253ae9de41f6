// Package exchange is an OAuth 2.0 Token Exchange (RFC 8693) endpoint that
// trades a one-time token ([ctoken.OneTimeIssuer], "ot1.") for a
// credential, once: the bootstrap of an agent run, a device, an invitation.
// Most users need one [Handler], from [NewHandler] with the issuer that
// minted the tokens, an Authorize check and an Issue function that makes
// the credential; ExampleHandler is that path, from the mint to a refused
// second exchange.
//
// The token is consumed only after Authorize accepted the request: an
// Authorize refusal consumes nothing. With a shared replay store in
// [ctoken.OneTimeConfig.Replay], one instance of a fleet wins each token.
// [Handler] documents the request, the responses and every refusal.
package exchange
