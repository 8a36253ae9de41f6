package webhook_test

import (
	"fmt"
	"net/http"

	"github.com/ctoken/ctoken/webhook"
)

// Verifying a sender of the common "sha256=<hex HMAC of the body>" format
// under header names of its own: Config.SignatureHeader and
// Config.IDHeader rename the headers. The delivery is GitHub's published
// example, sent as a hypothetical sender "Acme" would.
func ExampleHMACSHA256() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:          webhook.HMACSHA256(),
		Secrets:         []string{"It's a Secret to Everybody"},
		SignatureHeader: "X-Acme-Signature",
		IDHeader:        "X-Acme-Delivery",
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("X-Acme-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set("X-Acme-Signature", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	d, err := v.Verify(h, []byte("Hello, World!"))
	fmt.Println(d.ID, err)
	// Output:
	// 72d3162e-cc78-11e3-81ab-4c9367dc0958 <nil>
}
