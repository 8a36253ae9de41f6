// Package webhooktest checks a replay store under the webhook verifier as
// a fleet uses it: [RunContract] receives one sender's deliveries on two
// instances, each with its own store value on one backend;
// [RunTransactionalContract] checks a store's transactions under the
// verifier's transactional mode. Every store of this repository runs
// them; the author of another store can too (ExampleRunContract shows the
// call from a test).
package webhooktest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
)

// RunContract runs the webhook verifier's scenarios across two instances
// of a receiver against a store: newStores returns two store values on
// one backend (two processes' stores, or two Stores in one process on the
// same server, table or file). A delivery sent to both instances at once
// is handled once: one copy gets the handler's answer (204), every other
// copy 503 (in progress: the sender retries) or 200 (a duplicate), and a
// later copy 200 without handling; a delivery whose handler failed (5xx)
// is handled again when redelivered to the other instance; distinct
// deliveries are each handled.
func RunContract(t *testing.T, newStores func(t *testing.T) (a, b replay.Store)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b *receiver, send func(r *receiver, id, body string) int)
	}{
		{"CopiesAcrossInstancesHandledOnce", copiesHandledOnce},
		{"FailedDeliveryHandledAgainOnTheOther", failedHandledAgain},
		{"DistinctDeliveriesEachHandled", distinctEachHandled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sa, sb := newStores(t)
			const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
			app := &app{handled: map[string]int{}, attempts: map[string]int{}}
			a, b := newReceiver(t, sa, secret, app), newReceiver(t, sb, secret, app)
			signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{secret}})
			if err != nil {
				t.Fatal(err)
			}
			send := func(r *receiver, id, body string) int {
				req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
				if err := signer.Sign(req.Header, id, []byte(body)); err != nil {
					t.Error(err)
					return 0
				}
				w := httptest.NewRecorder()
				r.h.ServeHTTP(w, req)
				return w.Code
			}
			tc.fn(t, a, b, send)
		})
	}
}

// app is the receiver's handler state, shared by both instances: how
// often each delivery was handled to the end and attempted, and whether
// the next handling fails. The first attempt of a delivery that finds
// hold set waits until hold is closed.
type app struct {
	mu       sync.Mutex
	handled  map[string]int
	attempts map[string]int
	fail     atomic.Bool
	hold     chan struct{}
	stuck    atomic.Bool // a held handling gave up waiting for the other copies
}

// holdLimit bounds how long a held handling waits for the other copies
// to answer: a store whose duplicates wait for the delivery in progress
// (a replay.Leaser answers LeaseBusy at once) would otherwise deadlock
// the contract. It breaks a deadlock; no answer of a correct store comes
// near it.
const holdLimit = time.Minute

func (a *app) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.handled[id]
}

// receiver is one instance: the verifier's middleware on its store, in
// front of the app both instances serve.
type receiver struct {
	h   http.Handler
	app *app
}

func newReceiver(t *testing.T, s replay.Store, secret string, a *app) *receiver {
	t.Helper()
	v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{secret}, Replay: s, Namespace: "contract"})
	if err != nil {
		t.Fatal(err)
	}
	return &receiver{app: a, h: v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := webhook.DeliveryFrom(r.Context())
		a.mu.Lock()
		a.attempts[d.ID]++
		first := a.attempts[d.ID] == 1
		a.mu.Unlock()
		if a.fail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		if a.hold != nil && first {
			select {
			case <-a.hold:
			case <-time.After(holdLimit):
				a.stuck.Store(true) // see copiesHandledOnce
			}
		}
		a.mu.Lock()
		a.handled[d.ID]++
		a.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))}
}

func copiesHandledOnce(t *testing.T, a, b *receiver, send func(*receiver, string, string) int) {
	const copies = 16
	for round := range 3 {
		id, body := fmt.Sprint("msg_c", round), fmt.Sprintf(`{"order":%d}`, round)
		// The copy that is handled is held until every other copy has
		// answered, so that each of them meets the delivery in progress.
		a.app.hold = make(chan struct{})
		var answered atomic.Int32
		codes := make([]int, copies)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range codes {
			r := a
			if i%2 == 1 {
				r = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				codes[i] = send(r, id, body)
				if answered.Add(1) == copies-1 {
					close(a.app.hold)
				}
			}()
		}
		close(start)
		wg.Wait()
		a.app.hold = nil
		if a.app.stuck.Load() {
			t.Fatalf("round %d: the other copies did not answer within %v while the first was handled: a copy waited for the delivery in progress instead of answering 503", round, holdLimit)
		}
		handled := 0
		for i, c := range codes {
			switch c {
			case http.StatusNoContent:
				handled++
			case http.StatusOK, http.StatusServiceUnavailable:
			default:
				t.Fatalf("round %d, copy %d: %d; want the handler's 204, 200 (a duplicate) or 503 (in progress)", round, i, c)
			}
		}
		if handled != 1 {
			t.Fatalf("round %d: %d of %d copies answered by the handler; want one", round, handled, copies)
		}
		for _, r := range []*receiver{a, b} {
			if c := send(r, id, body); c != http.StatusOK {
				t.Fatalf("round %d: a later copy: %d; want 200", round, c)
			}
		}
		if n := a.app.count(id); n != 1 {
			t.Fatalf("round %d: %s handled %d times; want once", round, id, n)
		}
	}
}

func failedHandledAgain(t *testing.T, a, b *receiver, send func(*receiver, string, string) int) {
	ap := a.app
	ap.fail.Store(true)
	if c := send(a, "msg_2", `{"order":2}`); c != http.StatusInternalServerError {
		t.Fatalf("the failing delivery: %d; want the handler's 500", c)
	}
	ap.fail.Store(false)
	if c := send(b, "msg_2", `{"order":2}`); c != http.StatusNoContent {
		t.Fatalf("the redelivery on the other instance: %d; want the handler's 204", c)
	}
	for _, r := range []*receiver{a, b} {
		if c := send(r, "msg_2", `{"order":2}`); c != http.StatusOK {
			t.Fatalf("a copy after the success: %d; want 200", c)
		}
	}
	a.app.mu.Lock()
	attempts := a.app.attempts["msg_2"]
	a.app.mu.Unlock()
	if n := a.app.count("msg_2"); n != 1 || attempts != 2 {
		t.Fatalf("msg_2 handled to the end %d times in %d attempts; want once, in two (the failure, the success)", n, attempts)
	}
}

func distinctEachHandled(t *testing.T, a, b *receiver, send func(*receiver, string, string) int) {
	for i := range 8 {
		r := a
		if i%2 == 1 {
			r = b
		}
		if c := send(r, fmt.Sprint("msg_d", i), fmt.Sprintf(`{"order":%d}`, i)); c != http.StatusNoContent {
			t.Fatalf("delivery %d: %d; want the handler's 204", i, c)
		}
	}
	for i := range 8 {
		if n := a.app.count(fmt.Sprint("msg_d", i)); n != 1 {
			t.Fatalf("msg_d%d handled %d times; want once", i, n)
		}
	}
}
