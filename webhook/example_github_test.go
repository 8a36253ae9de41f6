package webhook_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ctoken/ctoken/webhook"
)

// Verifying GitHub's published example delivery.
func ExampleVerifier_Verify() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.GitHub(),
		Secrets: []string{"It's a Secret to Everybody"},
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderGitHubDelivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set(webhook.HeaderGitHubSignature, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")

	d, err := v.Verify(h, []byte("Hello, World!"))
	fmt.Println(d.ID, err)
	_, err = v.Verify(h, []byte("Hello, World?"))
	fmt.Println(errors.Is(err, webhook.ErrSignature), webhook.Reason(err))
	// Output:
	// 72d3162e-cc78-11e3-81ab-4c9367dc0958 <nil>
	// true signature mismatch
}
