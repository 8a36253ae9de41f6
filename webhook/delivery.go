package webhook

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/ctoken/ctoken/observe"
)

// Delivery describes an authentic delivery, as returned by
// [Verifier.Verify]. Only a Delivery from Verify can be claimed.
type Delivery struct {
	// ID is the delivery ID from the request.
	ID string
	// Timestamp is the signed send time for schemes that sign one
	// ([StandardWebhooks]); zero otherwise.
	Timestamp time.Time

	body     [sha256.Size]byte   // the SHA-256 of the body, under the Dedup policies that need it
	key      observe.KeyPosition // the secret that verified it, for the observer
	verified bool                // set by Verify
}

type deliveryKey struct{}

// DeliveryFrom returns the delivery that [Verifier.Middleware] verified
// for the request whose context is ctx.
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}
