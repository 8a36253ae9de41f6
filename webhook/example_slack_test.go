package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ctoken/ctoken/webhook"
)

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
