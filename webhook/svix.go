package webhook

// Header names of [Svix].
const (
	// HeaderSvixID is the delivery ID header of [Svix].
	HeaderSvixID = "svix-id"
	// HeaderSvixTimestamp is the timestamp header (unix seconds) of [Svix].
	HeaderSvixTimestamp = "svix-timestamp"
	// HeaderSvixSignature is the signature header of [Svix].
	HeaderSvixSignature = "svix-signature"
)

var schemeSvix = &standard{
	name:      "svix",
	idHeader:  HeaderSvixID,
	tsHeader:  HeaderSvixTimestamp,
	sigHeader: HeaderSvixSignature,
}

// Svix returns the scheme of Svix (https://www.svix.com), the most widely
// deployed Standard Webhooks sender: the algorithm, secrets, rules and
// replay protection of [StandardWebhooks], under the headers
// [HeaderSvixID], [HeaderSvixTimestamp] and [HeaderSvixSignature]. A
// delivery Svix sends under the webhook-* names as well is accepted by
// either scheme; a verifier reads only its own scheme's headers.
func Svix() Scheme { return schemeSvix }
