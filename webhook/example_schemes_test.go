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

// Verifying Slack's published example, a slash command: it carries no
// event_id, so its signature identifies it.
func ExampleSlack() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.Slack(),
		Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"},
		Now:     func() time.Time { return time.Unix(1531420618, 0) },
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderSlackTimestamp, "1531420618")
	h.Set(webhook.HeaderSlackSignature, "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	body := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	d, err := v.Verify(h, []byte(body))
	fmt.Println(d.ID == h.Get(webhook.HeaderSlackSignature), err)
	// Output:
	// true <nil>
}

// Signing with a Standard Webhooks Ed25519 (v1a) private key reproduces
// the Standard Webhooks Go library's published signature; receivers
// verify with the matching whpk_ public key.
func ExampleStandardWebhooksEd25519() {
	now := func() time.Time { return time.Unix(1614265330, 0) }
	s, err := webhook.NewSigner(webhook.Config{
		Scheme:  webhook.StandardWebhooksEd25519(),
		Secrets: []string{"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="},
		Now:     now,
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	if err := s.Sign(h, "msg_p5jXN8AQM9LWM0D4loKWxJek", []byte(`{"test": 2432232314}`)); err != nil {
		panic(err)
	}
	fmt.Println(h.Get(webhook.HeaderStandardSignature))

	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.StandardWebhooksEd25519(),
		Secrets: []string{"whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="},
		Now:     now,
	})
	if err != nil {
		panic(err)
	}
	_, err = v.Verify(h, []byte(`{"test": 2432232314}`))
	fmt.Println(err)
	// Output:
	// v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==
	// <nil>
}
