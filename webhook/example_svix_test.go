package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ctoken/ctoken/webhook"
)

// Verifying a Svix delivery: Standard Webhooks' published example, sent
// under Svix's svix-* header names. The ID is signed, so it keys the
// delivery in the replay store.
func ExampleSvix() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.Svix(),
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		Now:     func() time.Time { return time.Unix(1614265330, 0) },
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderSvixID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(webhook.HeaderSvixTimestamp, "1614265330")
	h.Set(webhook.HeaderSvixSignature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	d, err := v.Verify(h, []byte(`{"test": 2432232314}`))
	fmt.Println(d.ID, err)

	h.Set(webhook.HeaderSvixTimestamp, "1614265331") // the timestamp is signed too
	_, err = v.Verify(h, []byte(`{"test": 2432232314}`))
	fmt.Println(webhook.Reason(err))
	// Output:
	// msg_p5jXN8AQM9LWM0D4loKWxJek <nil>
	// signature mismatch
}
