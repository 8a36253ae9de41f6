//go:build fault

package redisstore

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
)

// hookEndpoint is an instance's webhook receiver: the exactly-once
// middleware over store with the given lease, in front of a handler that
// calls started (if not nil) with the delivery ID, works for delay, and then
// calls processed with the ID before it answers 204. processed is the
// handler's side effect: a delivery processed twice is work done twice.
func hookEndpoint(t testing.TB, store replay.Store, lease, delay time.Duration, started, processed func(id string)) http.Handler {
	t.Helper()
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}, Replay: store, Namespace: "endpoint", Lease: lease,
		OnLeaseError: func(_ *http.Request, d webhook.Delivery, err error) {
			t.Logf("delivery %s: lease step not recorded: %v", d.ID, err)
		},
	})
	must(t, err)
	return v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := webhook.DeliveryFrom(r.Context())
		if !ok {
			http.Error(w, "no delivery", http.StatusInternalServerError)
			return
		}
		if started != nil {
			started(d.ID)
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		processed(d.ID)
		w.WriteHeader(http.StatusNoContent)
	}))
}

// withHook adds POST /hook, served by hook, to an instance's handler.
func withHook(hook http.Handler) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.Handle("POST /hook", hook)
		return mux
	}
}

// hookSender signs and sends webhook deliveries as a Standard Webhooks
// sender does: at least once, retrying until a 2xx.
type hookSender struct {
	signer *webhook.Signer
	c      *http.Client
}

func newHookSender(t testing.TB, c *http.Client) *hookSender {
	t.Helper()
	s, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	must(t, err)
	return &hookSender{signer: s, c: c}
}

// send posts one copy of delivery id to the instance at base and returns
// the status, or 0 when the instance did not answer.
func (s *hookSender) send(base, id string) int {
	body := []byte(`{"delivery":"` + id + `"}`)
	req, err := http.NewRequest(http.MethodPost, base+"/hook", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	if err := s.signer.Sign(req.Header, id, body); err != nil {
		return 0
	}
	res, err := s.c.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// deliver sends copies of id, each to next(), every interval until one is
// acknowledged (2xx). A 503 (in progress elsewhere, or the store could not
// decide) or no answer is retried; anything else, or no 2xx within limit,
// is an error: the delivery would be lost.
func (s *hookSender) deliver(next func() string, id string, interval, limit time.Duration) (int, error) {
	var codes []int
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(interval) {
		code := s.send(next(), id)
		codes = append(codes, code)
		switch {
		case code/100 == 2:
			return code, nil
		case code != http.StatusServiceUnavailable && code != 0:
			return code, fmt.Errorf("delivery %s: status %d, want 2xx, 503 or no answer (statuses %v)", id, code, codes)
		}
	}
	return 0, fmt.Errorf("delivery %s not acknowledged within %v (statuses %v)", id, limit, codes)
}
