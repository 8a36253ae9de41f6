package webhook_test

import (
	"fmt"
	"net/http"

	"github.com/ctoken/ctoken/webhook"
)

// Verifying a Cursor agent webhook: the vector of
// testdata/vectors/webhook.json, signed with the secret
// "cursor-webhook-secret-0123".
func ExampleCursor() {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:  webhook.Cursor(),
		Secrets: []string{"cursor-webhook-secret-0123"}, // in a server: os.Getenv("CURSOR_WEBHOOK_SECRET")
	})
	if err != nil {
		panic(err)
	}
	body := []byte(`{"event":"statusChange","status":"FINISHED"}`)
	h := http.Header{}
	h.Set(webhook.HeaderWebhookID, "evt_1")
	h.Set(webhook.HeaderWebhookSignature, "sha256=f262341f2101e8fc125ce6cfe90fafaf61b9abeccebfe093fc7ef7e50625a392")

	d, err := v.Verify(h, body)
	fmt.Println(d.ID, err)
	// In a server: mux.Handle("POST /hooks/cursor", v.Middleware(handler))
	// Output:
	// evt_1 <nil>
}
