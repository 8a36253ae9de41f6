package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ctoken/ctoken/webhook"
)

// Verifying a Stripe delivery: the delivery ID is the event's id, read
// from the authentic body. The header was made by Stripe's own
// generateTestHeaderString.
func ExampleStripe() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.Stripe(),
		Secrets: []string{"whsec_test_secret"},
		Now:     func() time.Time { return time.Unix(1614265330, 0) },
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderStripeSignature, "t=1614265330,v1=af4ead0627a34a8cca29808e8de9ada8e41a92e6237c63cef6eacf51d36cca34")
	d, err := v.Verify(h, []byte("{\n  \"id\": \"evt_test_webhook\",\n  \"object\": \"event\"\n}"))
	fmt.Println(d.ID, d.Timestamp.Unix(), err)
	// Output:
	// evt_test_webhook 1614265330 <nil>
}
