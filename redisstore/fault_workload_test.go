//go:build fault

package redisstore

// The store-failure workload of issue 26: workers redeem one-time tokens
// (each with two concurrent copies on two instances) and send webhook
// deliveries (each as two concurrent copies to two instances) while a
// scenario disrupts Redis. Every acceptance and every processing is
// counted; afterwards every token is redeemed again and every delivery
// sent again on every instance, and a token accepted twice or a delivery
// processed twice is a double. The instances run in-process (their HTTP
// layer is the fleet tests' concern): what is disrupted here is the store.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
)

// wlConfig sizes a workload.
type wlConfig struct {
	workers int           // concurrent workers (issue 26: 24)
	ttl     time.Duration // one-time token lifetime
	lease   time.Duration // webhook lease
	timeout time.Duration // bound on one redeem or one delivery copy
}

// wlNode is one service instance: a one-time issuer and a webhook receiver
// over its own store handle, with its own clock.
type wlNode struct {
	name    string
	onetime *ctoken.OneTimeIssuer
	hook    http.Handler
}

// wlToken is a minted one-time token and what its redeems got.
type wlToken struct {
	tok      string
	accepted atomic.Int32 // redeems answered "accepted" (200)
	refused  atomic.Int32 // redeems the store could not decide (503)
}

// wlDelivery is a webhook delivery and what its copies got.
type wlDelivery struct {
	id        string
	acked     atomic.Bool  // some copy was answered 2xx during the run
	processed atomic.Int32 // times the handler ran (its side effect)
	leaseErr  atomic.Bool  // the middleware reported a lease step the store did not record (OnLeaseError)
}

// wlEvent is one redeem reply, for the timeline of refusals.
type wlEvent struct {
	at     time.Time
	status int
}

// workload drives the nodes. Start it with start, end it with stop, then
// call recheck.
type workload struct {
	t      *testing.T
	cfg    wlConfig
	nodes  []*wlNode
	signer *webhook.Signer
	claims map[string]string
	runID  string

	mu         sync.Mutex
	tokens     []*wlToken
	deliveries map[string]*wlDelivery
	events     []wlEvent
	reasons    map[string]int // Reason of every redeem the store could not decide

	accepts, hookAcks, redeems, copies atomic.Int64
	stopped                            atomic.Bool
	wg                                 sync.WaitGroup
	began                              time.Time
}

// wlStore is what a node needs of its store: claims and leases.
type wlStore interface {
	replay.Store
	replay.Leaser
}

// newWorkload builds one node per store; nows[i], if not nil, is node i's
// clock (tokens it mints and checks, and its webhook timestamps).
func newWorkload(t *testing.T, cfg wlConfig, stores []wlStore, nows []func() time.Time) *workload {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	wl := &workload{
		t: t, cfg: cfg, claims: map[string]string{"agent": "a1"}, runID: hex.EncodeToString(b),
		deliveries: map[string]*wlDelivery{}, reasons: map[string]int{},
	}
	for i, s := range stores {
		var now func() time.Time
		if i < len(nows) {
			now = nows[i]
		}
		ot, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "fault-workload", TTL: cfg.ttl, Replay: s, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		v, err := webhook.NewVerifier(webhook.Config{
			Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}, Replay: s, Namespace: "endpoint",
			Lease: cfg.lease, Now: now,
			OnLeaseError: func(_ *http.Request, d webhook.Delivery, _ error) {
				wl.mu.Lock()
				del := wl.deliveries[d.ID]
				wl.mu.Unlock()
				if del != nil {
					del.leaseErr.Store(true)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		hook := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, ok := webhook.DeliveryFrom(r.Context())
			if !ok {
				http.Error(w, "no delivery", http.StatusInternalServerError)
				return
			}
			wl.mu.Lock()
			del := wl.deliveries[d.ID]
			wl.mu.Unlock()
			if del == nil {
				http.Error(w, "unknown delivery", http.StatusInternalServerError)
				return
			}
			del.processed.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		wl.nodes = append(wl.nodes, &wlNode{name: fmt.Sprint("node", i), onetime: ot, hook: hook})
	}
	s, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	if err != nil {
		t.Fatal(err)
	}
	wl.signer = s
	return wl
}

// redeem redeems tok on node n and maps the outcome as a service would:
// 200 accepted, 409 already redeemed, 400 invalid or expired, 503 the store
// could not decide (fail closed).
func (wl *workload) redeem(n *wlNode, tok string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wl.cfg.timeout)
	defer cancel()
	_, err := n.onetime.Redeem(ctx, tok, wl.claims)
	switch {
	case err == nil:
		return http.StatusOK, nil
	case errors.Is(err, ctoken.ErrOneTimeRedeemed):
		return http.StatusConflict, err
	case errors.Is(err, ctoken.ErrOneTimeInvalid), errors.Is(err, ctoken.ErrOneTimeExpired), errors.Is(err, ctoken.ErrOneTimeClaims):
		return http.StatusBadRequest, err
	}
	return http.StatusServiceUnavailable, err
}

// send posts one copy of delivery id to node n, signed now by the sender's
// (true) clock, and returns the status.
func (wl *workload) send(n *wlNode, id string) int {
	body := []byte(`{"delivery":"` + id + `"}`)
	ctx, cancel := context.WithTimeout(context.Background(), wl.cfg.timeout)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/hook", bytes.NewReader(body))
	if err := wl.signer.Sign(req.Header, id, body); err != nil {
		wl.t.Error(err)
		return 0
	}
	rec := httptest.NewRecorder()
	n.hook.ServeHTTP(rec, req)
	return rec.Code
}

// record notes one redeem reply of tok.
func (wl *workload) record(tk *wlToken, status int, err error) {
	wl.redeems.Add(1)
	switch status {
	case http.StatusOK:
		tk.accepted.Add(1)
		wl.accepts.Add(1)
	case http.StatusServiceUnavailable:
		tk.refused.Add(1)
	}
	wl.mu.Lock()
	wl.events = append(wl.events, wlEvent{time.Now(), status})
	if status == http.StatusServiceUnavailable {
		wl.reasons[ctoken.Reason(err)+": "+rootCause(err)]++
	}
	wl.mu.Unlock()
}

// rootCause is the innermost error's text: the store's refusal. Store
// errors never carry token text.
func rootCause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
				err = j.Unwrap()[len(j.Unwrap())-1]
				continue
			}
			return err.Error()
		}
		err = u
	}
}

// start runs the workers until stop.
func (wl *workload) start() {
	wl.began = time.Now()
	for w := range wl.cfg.workers {
		wl.wg.Add(1)
		go func() {
			defer wl.wg.Done()
			for i := 0; !wl.stopped.Load(); i++ {
				a := (w + i) % len(wl.nodes)
				b := (a + 1) % len(wl.nodes)
				tok, err := wl.nodes[a].onetime.Mint(wl.claims)
				if err != nil {
					wl.t.Error(err)
					return
				}
				tk := &wlToken{tok: tok}
				id := fmt.Sprintf("msg_%s_%d_%d", wl.runID, w, i)
				del := &wlDelivery{id: id}
				wl.mu.Lock()
				wl.tokens = append(wl.tokens, tk)
				wl.deliveries[id] = del
				wl.mu.Unlock()

				var pair sync.WaitGroup
				var decided atomic.Bool
				for _, n := range []int{a, b} {
					pair.Add(2)
					go func() {
						defer pair.Done()
						st, err := wl.redeem(wl.nodes[n], tok)
						wl.record(tk, st, err)
						if st != http.StatusServiceUnavailable {
							decided.Store(true)
						}
					}()
					go func() {
						defer pair.Done()
						code := wl.send(wl.nodes[n], id)
						wl.copies.Add(1)
						if code/100 == 2 && !del.acked.Swap(true) {
							wl.hookAcks.Add(1)
						}
					}()
				}
				pair.Wait()
				if !decided.Load() && !del.acked.Load() {
					time.Sleep(10 * time.Millisecond) // the store is down: back off as a client would
				}
			}
		}()
	}
}

// stop ends the workers and waits for them.
func (wl *workload) stop() {
	wl.stopped.Store(true)
	wl.wg.Wait()
}

// wlMark is the workload's counters at one instant.
type wlMark struct {
	at                        time.Time
	accepts, acks, redeems, n int64
}

func (wl *workload) mark() wlMark {
	return wlMark{time.Now(), wl.accepts.Load(), wl.hookAcks.Load(), wl.redeems.Load(), wl.copies.Load()}
}

// rate is the tokens accepted plus deliveries acknowledged per second
// between two marks.
func rate(a, b wlMark) float64 {
	return float64(b.accepts-a.accepts+b.acks-a.acks) / b.at.Sub(a.at).Seconds()
}

// wlResult is what a workload and its recheck found.
type wlResult struct {
	tokens, deliveries, acked int
	acceptedTwice             int // tokens accepted more than once
	processedTwice            int // deliveries processed more than once
	ackedTwice                int // of those, deliveries acknowledged during the run
	leaseErrTwice             int // of those, deliveries whose lease step the middleware reported unrecorded
	leaseErrs                 int // deliveries with a lease step reported unrecorded (OnLeaseError)
	recheckAccepted           int // tokens first accepted by the recheck
	recheckExpired            int // tokens the recheck found expired (not a decision on use)
	undecided                 int // tokens or deliveries the recheck could not decide by its deadline
	reasons                   map[string]int
}

func (r wlResult) String() string {
	return fmt.Sprintf("%d tokens: %d accepted twice (%d first accepted by the recheck, %d expired by then); "+
		"%d deliveries (%d acknowledged during the run, %d with a lease step reported unrecorded): "+
		"%d processed twice (%d of them acknowledged, %d reported unrecorded); %d undecided",
		r.tokens, r.acceptedTwice, r.recheckAccepted, r.recheckExpired,
		r.deliveries, r.acked, r.leaseErrs, r.processedTwice, r.ackedTwice, r.leaseErrTwice, r.undecided)
}

// recheck redeems every token again and sends every delivery again on
// every node, retrying a 503 (the store could not decide, or a lease is
// held) until limit, and counts the doubles.
func (wl *workload) recheck(limit time.Duration) wlResult {
	wl.mu.Lock()
	tokens := slices.Clone(wl.tokens)
	dels := make([]*wlDelivery, 0, len(wl.deliveries))
	for _, d := range wl.deliveries {
		dels = append(dels, d)
	}
	wl.mu.Unlock()
	deadline := time.Now().Add(limit)
	var undecided, expired, firstNow atomic.Int32
	work := make(chan func())
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				f()
			}
		}()
	}
	for _, tk := range tokens {
		work <- func() {
			before := tk.accepted.Load()
			for _, n := range wl.nodes {
				for {
					st, err := wl.redeem(n, tk.tok)
					wl.record(tk, st, err)
					if st != http.StatusServiceUnavailable {
						if st == http.StatusBadRequest {
							expired.Add(1)
						}
						break
					}
					if time.Now().After(deadline) {
						undecided.Add(1)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if before == 0 && tk.accepted.Load() > 0 {
				firstNow.Add(1)
			}
		}
	}
	for _, d := range dels {
		work <- func() {
			for _, n := range wl.nodes {
				for {
					code := wl.send(n, d.id)
					if code/100 == 2 {
						break
					}
					if code != http.StatusServiceUnavailable && code != 0 {
						wl.t.Errorf("resending a delivery: status %d, want 2xx or 503", code)
						break
					}
					if time.Now().After(deadline) {
						undecided.Add(1)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	}
	close(work)
	wg.Wait()

	r := wlResult{tokens: len(tokens), deliveries: len(dels), undecided: int(undecided.Load()),
		recheckAccepted: int(firstNow.Load()), recheckExpired: int(expired.Load()), reasons: map[string]int{}}
	for _, tk := range tokens {
		if tk.accepted.Load() > 1 {
			r.acceptedTwice++
		}
	}
	for _, d := range dels {
		if d.acked.Load() {
			r.acked++
		}
		if d.leaseErr.Load() {
			r.leaseErrs++
		}
		if d.processed.Load() > 1 {
			r.processedTwice++
			if d.acked.Load() {
				r.ackedTwice++
			}
			if d.leaseErr.Load() {
				r.leaseErrTwice++
			}
		}
	}
	wl.mu.Lock()
	for k, v := range wl.reasons {
		r.reasons[k] = v
	}
	wl.mu.Unlock()
	return r
}

// logReasons logs the store's refusals, most frequent first.
func logReasons(t *testing.T, r wlResult) {
	t.Helper()
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range r.reasons {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	for i, e := range all {
		if i == 6 {
			t.Logf("  ... %d more kinds", len(all)-i)
			break
		}
		t.Logf("  refused %6d× %s", e.v, e.k)
	}
}

// refusalWindow returns the first and last 503 among the redeem replies at
// or after from, and the first 200 after the last 503.
func (wl *workload) refusalWindow(from time.Time) (first, last, backAt time.Time) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	evs := slices.Clone(wl.events)
	slices.SortFunc(evs, func(a, b wlEvent) int { return a.at.Compare(b.at) })
	for _, e := range evs {
		if e.at.Before(from) {
			continue
		}
		if e.status == http.StatusServiceUnavailable {
			if first.IsZero() {
				first = e.at
			}
			last = e.at
			backAt = time.Time{}
		} else if e.status == http.StatusOK && !last.IsZero() && backAt.IsZero() {
			backAt = e.at
		}
	}
	return first, last, backAt
}
