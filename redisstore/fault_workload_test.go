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
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
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

// wlNode is one service instance: it mints and redeems one-time tokens and
// receives webhook deliveries over its own store handle, with its own
// clock. A service node does so through ctoken (newWorkload); a direct node
// calls the store as they do, with lifetimes short enough for a test to
// wait out a fence (newDirectWorkload).
type wlNode struct {
	name   string
	mint   func() (string, error)
	redeem func(ctx context.Context, tok string) (int, error)
	send   func(ctx context.Context, id string) int

	accepted  atomic.Int64 // redeems this node accepted
	processed atomic.Int64 // delivery copies this node processed (204)
	skewed    atomic.Int64 // redeems this node's store refused for clock skew
}

// wlToken is a minted one-time token and what its redeems got.
type wlToken struct {
	tok      string
	accepted atomic.Int32 // redeems answered "accepted" (200)
}

// wlDelivery is a webhook delivery and what its copies got.
type wlDelivery struct {
	id        string
	expires   time.Time    // direct nodes: refused as stale from then on (a signed timestamp's role)
	acked     atomic.Bool  // some copy was answered 2xx during the run
	processed atomic.Int32 // times the handler ran (its side effect)
	leaseErr  atomic.Bool  // the middleware reported a lease step the store did not record (OnLeaseError)
}

// wlEvent is one redeem reply, for the timeline of refusals.
type wlEvent struct {
	sent, at time.Time
	status   int
	fenced   bool      // a 503 for ErrFenced
	fenceEnd time.Time // for ErrFenced, when its fence opens (replay.RetryAt)
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
	reasons    map[string]int // why the store refused, per kind (refusalKind), over every 503 redeem

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
	must(t, err)
	wl := &workload{
		t: t, cfg: cfg, claims: map[string]string{"agent": "a1"}, runID: newToken()[:12],
		deliveries: map[string]*wlDelivery{}, reasons: map[string]int{},
	}
	for i, s := range stores {
		var now func() time.Time
		if i < len(nows) {
			now = nows[i]
		}
		ot, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "fault-workload", TTL: cfg.ttl, Replay: s, Now: now})
		must(t, err)
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
		must(t, err)
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
		wl.nodes = append(wl.nodes, &wlNode{
			name: fmt.Sprint("node", i),
			mint: func() (string, error) { return ot.Mint(wl.claims) },
			redeem: func(ctx context.Context, tok string) (int, error) {
				_, err := ot.Redeem(ctx, tok, wl.claims)
				switch {
				case err == nil:
					return http.StatusOK, nil
				case errors.Is(err, ctoken.ErrOneTimeRedeemed):
					return http.StatusConflict, err
				case errors.Is(err, ctoken.ErrOneTimeInvalid), errors.Is(err, ctoken.ErrOneTimeExpired), errors.Is(err, ctoken.ErrOneTimeClaims):
					return http.StatusBadRequest, err
				}
				return http.StatusServiceUnavailable, err
			},
			send: func(ctx context.Context, id string) int { return wl.sendHTTP(ctx, hook, id) },
		})
	}
	s, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	must(t, err)
	wl.signer = s
	return wl
}

// directMargin is how long a direct node holds a claim past the ID's
// lifetime: replay.SkewMargin's role, shortened with the lifetimes.
const directMargin = 500 * time.Millisecond

// newDirectWorkload builds one direct node per store: a token is a random
// ID and its expiry (now + cfg.ttl), claimed until the expiry plus
// directMargin as OneTimeIssuer.Redeem does; a delivery is taken, processed
// and confirmed through the store's Leaser as the webhook middleware does,
// held until its expiry plus directMargin, and refused as stale (400) from
// its expiry on, as a signed timestamp past the tolerance would be. The
// lifetimes can so be shorter than ctoken's (which add replay.SkewMargin,
// 60 s) and fit in a short store horizon.
func newDirectWorkload(t *testing.T, cfg wlConfig, stores []*Store) *workload {
	t.Helper()
	wl := newWorkload(t, cfg, nil, nil)
	for i, s := range stores {
		wl.nodes = append(wl.nodes, &wlNode{
			name: fmt.Sprint("direct", i),
			mint: func() (string, error) {
				return newToken()[:24] + "." + strconv.FormatInt(time.Now().Add(cfg.ttl).UnixMilli(), 10), nil
			},
			redeem: func(ctx context.Context, tok string) (int, error) {
				id, ms, _ := strings.Cut(tok, ".")
				n, err := strconv.ParseInt(ms, 10, 64)
				if err != nil {
					return http.StatusBadRequest, err
				}
				exp := time.UnixMilli(n)
				if !time.Now().Before(exp) {
					return http.StatusBadRequest, replay.ErrExpired
				}
				first, err := s.Claim(ctx, "tok:"+id, exp.Add(directMargin))
				switch {
				case errors.Is(err, replay.ErrExpired):
					return http.StatusBadRequest, err
				case err != nil:
					return http.StatusServiceUnavailable, err
				case first:
					return http.StatusOK, nil
				}
				return http.StatusConflict, nil
			},
			send: func(ctx context.Context, id string) int {
				wl.mu.Lock()
				del := wl.deliveries[id]
				wl.mu.Unlock()
				if del == nil || !time.Now().Before(del.expires) {
					return http.StatusBadRequest
				}
				l, err := s.AcquireLease(ctx, "hook:"+id, cfg.lease)
				switch {
				case errors.Is(err, replay.ErrExpired):
					return http.StatusBadRequest
				case err != nil:
					return http.StatusServiceUnavailable
				case l.State == replay.LeaseDone:
					return http.StatusOK
				case l.State != replay.LeaseAcquired:
					return http.StatusServiceUnavailable
				}
				del.processed.Add(1)
				if err := s.ConfirmLease(ctx, "hook:"+id, l.Token, del.expires.Add(directMargin)); err != nil {
					del.leaseErr.Store(true) // the middleware's OnLeaseError; its response stands
				}
				return http.StatusNoContent
			},
		})
	}
	return wl
}

// redeem redeems tok on node n and maps the outcome as a service would:
// 200 accepted, 409 already redeemed, 400 invalid or expired, 503 the store
// could not decide (fail closed).
func (wl *workload) redeem(n *wlNode, tok string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wl.cfg.timeout)
	defer cancel()
	st, err := n.redeem(ctx, tok)
	switch {
	case st == http.StatusOK:
		n.accepted.Add(1)
	case errors.Is(err, ErrClockSkew):
		n.skewed.Add(1)
	}
	return st, err
}

// send sends one copy of delivery id to node n and returns the status: 2xx
// acknowledged (204 processed, 200 a duplicate), 503 refused for now, 400
// stale.
func (wl *workload) send(n *wlNode, id string) int {
	ctx, cancel := context.WithTimeout(context.Background(), wl.cfg.timeout)
	defer cancel()
	code := n.send(ctx, id)
	if code == http.StatusNoContent {
		n.processed.Add(1)
	}
	return code
}

// sendHTTP posts one copy of delivery id to a webhook middleware, signed
// now by the sender's (true) clock, and returns the status.
func (wl *workload) sendHTTP(ctx context.Context, hook http.Handler, id string) int {
	body := []byte(`{"delivery":"` + id + `"}`)
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/hook", bytes.NewReader(body))
	if err := wl.signer.Sign(req.Header, id, body); err != nil {
		wl.t.Error(err)
		return 0
	}
	rec := httptest.NewRecorder()
	hook.ServeHTTP(rec, req)
	return rec.Code
}

// record notes one redeem reply of tok, for a request sent at sent.
func (wl *workload) record(tk *wlToken, sent time.Time, status int, err error) {
	wl.redeems.Add(1)
	if status == http.StatusOK {
		tk.accepted.Add(1)
		wl.accepts.Add(1)
	}
	wl.mu.Lock()
	end, _ := replay.RetryAt(err)
	wl.events = append(wl.events, wlEvent{sent, time.Now(), status, errors.Is(err, ErrFenced), end})
	if status == http.StatusServiceUnavailable {
		wl.reasons[refusalKind(err)]++
	}
	wl.mu.Unlock()
}

// refusalKind names why the store refused: one of its refusals, or the
// innermost error (a connection error, a timeout).
func refusalKind(err error) string {
	switch {
	case errors.Is(err, ErrFenced):
		return "ErrFenced (shard fenced after a loss)"
	case errors.Is(err, ErrClockSkew):
		return "ErrClockSkew (instance clock behind Redis)"
	case errors.Is(err, ErrNotDurable):
		return "ErrNotDurable (too few replicas acknowledged)"
	}
	return rootCause(err)
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
		spawn(&wl.wg, func() {
			for i := 0; !wl.stopped.Load(); i++ {
				a := (w + i) % len(wl.nodes)
				b := (a + 1) % len(wl.nodes)
				tok, err := wl.nodes[a].mint()
				if err != nil {
					wl.t.Error(err)
					return
				}
				tk := &wlToken{tok: tok}
				id := fmt.Sprintf("msg_%s_%d_%d", wl.runID, w, i)
				del := &wlDelivery{id: id, expires: time.Now().Add(wl.cfg.ttl)}
				wl.mu.Lock()
				wl.tokens = append(wl.tokens, tk)
				wl.deliveries[id] = del
				wl.mu.Unlock()

				var pair sync.WaitGroup
				var decided atomic.Bool
				for _, n := range []int{a, b} {
					spawn(&pair, func() {
						sent := time.Now()
						st, err := wl.redeem(wl.nodes[n], tok)
						wl.record(tk, sent, st, err)
						if st != http.StatusServiceUnavailable {
							decided.Store(true)
						}
					})
					spawn(&pair, func() {
						code := wl.send(wl.nodes[n], id)
						wl.copies.Add(1)
						if code/100 == 2 && !del.acked.Swap(true) {
							wl.hookAcks.Add(1)
						}
					})
				}
				pair.Wait()
				if !decided.Load() && !del.acked.Load() {
					time.Sleep(10 * time.Millisecond) // the store is down: back off as a client would
				}
			}
		})
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

// awaitSuccesses waits until the workload has accepted tokens plus
// acknowledged deliveries at least n times and returns the mark it saw;
// it fails the test if that takes longer than limit.
func (wl *workload) awaitSuccesses(n int64, limit time.Duration) wlMark {
	wl.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		m := wl.mark()
		if m.accepts+m.acks >= n {
			return m
		}
		if m.at.After(deadline) {
			wl.t.Fatalf("%d successes after %v, waiting for %d", m.accepts+m.acks, limit, n)
		}
		time.Sleep(time.Millisecond)
	}
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
	recheckExpired            int // token redeems the recheck found invalid or expired (400: not a decision on use)
	recheckStale              int // delivery copies the recheck found stale (likewise)
	undecided                 int // tokens or deliveries the recheck could not decide by its deadline
	reasons                   map[string]int
}

func (r wlResult) String() string {
	return fmt.Sprintf("%d tokens: %d accepted twice (%d first accepted by the recheck, whose redeems found %d invalid or expired); "+
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
	dels := slices.Collect(maps.Values(wl.deliveries))
	wl.mu.Unlock()
	deadline := time.Now().Add(limit)
	var undecided, expired, stale, firstNow atomic.Int32
	// untilDecided calls try until it reports a decision, every 20 ms,
	// and counts it undecided past the deadline.
	untilDecided := func(try func() bool) {
		for !try() {
			if time.Now().After(deadline) {
				undecided.Add(1)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var jobs []func()
	for _, tk := range tokens {
		jobs = append(jobs, func() {
			before := tk.accepted.Load()
			for _, n := range wl.nodes {
				untilDecided(func() bool {
					sent := time.Now()
					st, err := wl.redeem(n, tk.tok)
					wl.record(tk, sent, st, err)
					if st == http.StatusBadRequest {
						expired.Add(1)
					}
					return st != http.StatusServiceUnavailable
				})
			}
			if before == 0 && tk.accepted.Load() > 0 {
				firstNow.Add(1)
			}
		})
	}
	for _, d := range dels {
		jobs = append(jobs, func() {
			for _, n := range wl.nodes {
				untilDecided(func() bool {
					switch code := wl.send(n, d.id); {
					case code == http.StatusBadRequest:
						stale.Add(1) // past its lifetime: refused whatever the store holds
					case code/100 != 2 && code != http.StatusServiceUnavailable && code != 0:
						wl.t.Errorf("resending a delivery: status %d, want 2xx, 400 (stale) or 503", code)
					case code/100 != 2:
						return false
					}
					return true
				})
			}
		})
	}
	inParallel(jobs, 16, func(job func()) { job() })()

	r := wlResult{tokens: len(tokens), deliveries: len(dels), undecided: int(undecided.Load()),
		recheckAccepted: int(firstNow.Load()), recheckExpired: int(expired.Load()), recheckStale: int(stale.Load())}
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
	r.reasons = maps.Clone(wl.reasons)
	wl.mu.Unlock()
	return r
}

// logReasons logs the store's refusals, most frequent first.
func logReasons(t *testing.T, r wlResult) {
	t.Helper()
	kinds := slices.SortedFunc(maps.Keys(r.reasons), func(a, b string) int { return r.reasons[b] - r.reasons[a] })
	for i, k := range kinds {
		if i == 6 {
			t.Logf("  ... %d more kinds", len(kinds)-i)
			break
		}
		t.Logf("  refused %6d× %s", r.reasons[k], k)
	}
}

// fenceWindow returns the first and last redeem refused as fenced
// (ErrFenced) at or after from, and the first accepted after the last.
func (wl *workload) fenceWindow(from time.Time) (first, last, backAt time.Time) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	evs := slices.Clone(wl.events)
	slices.SortFunc(evs, func(a, b wlEvent) int { return a.at.Compare(b.at) })
	for _, e := range evs {
		if e.at.Before(from) {
			continue
		}
		if e.fenced {
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

// fenceSpan is what the redeems refused by one fence saw: the reply to
// the first, and the latest time one of them was sent.
type fenceSpan struct{ firstReply, lastSent time.Time }

// fenceSpans groups the redeems refused as fenced at or after from by
// their fence's end (each shard's fence has its own). A refusal while the
// store is still fencing a loss it found has no end yet and is left out.
func (wl *workload) fenceSpans(from time.Time) map[time.Time]fenceSpan {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	spans := map[time.Time]fenceSpan{}
	for _, e := range wl.events {
		if !e.fenced || e.fenceEnd.IsZero() || e.at.Before(from) {
			continue
		}
		sp, ok := spans[e.fenceEnd]
		if !ok || e.at.Before(sp.firstReply) {
			sp.firstReply = e.at
		}
		if e.sent.After(sp.lastSent) {
			sp.lastSent = e.sent
		}
		spans[e.fenceEnd] = sp
	}
	return spans
}

// refusedBefore counts the redeems refused (503) before t.
func (wl *workload) refusedBefore(t time.Time) int {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	n := 0
	for _, e := range wl.events {
		if e.at.Before(t) && e.status == http.StatusServiceUnavailable {
			n++
		}
	}
	return n
}
