//go:build fault

package redisstore

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

const (
	// loadLease is the webhook lease of the load test's receivers: it must
	// outlast the Redis restart plus the clients' reconnection, or a
	// delivery whose confirmation could not be recorded within its lease
	// is processed again when re-sent.
	loadLease    = 5 * time.Second
	loadItems    = 100_000
	loadPageSize = 500
	loadTool     = "items.big"
)

// bigList serves GET /big: the 100 000-item collection of the load test,
// paged with cursors from the instance's current configuration.
func bigList(in *atomic.Pointer[instance]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ins := in.Load()
		cfg := ins.cfg.Load()
		args, err := ctoken.ArgsFingerprint(map[string]string{"collection": "big"})
		if err != nil {
			ins.reply(w, http.StatusInternalServerError, fleetResp{Error: "fingerprint"})
			return
		}
		scope := ctoken.CursorScope{ToolID: loadTool, CallerID: callerOf(r), Args: args}
		var st listState
		if c := r.URL.Query().Get("cursor"); c != "" {
			if st, _, err = ctoken.VerifyState[listState](cfg.cursors, c, scope); err != nil {
				ins.reply(w, http.StatusBadRequest, fleetResp{Code: ctoken.ErrorCode(err), Error: ctoken.Reason(err).String()})
				return
			}
			if st.Offset == 0 || st.Offset >= loadItems || st.Offset%loadPageSize != 0 {
				ins.reply(w, http.StatusBadRequest, fleetResp{Error: "offset out of range"})
				return
			}
		}
		end := min(int(st.Offset)+loadPageSize, loadItems)
		resp := fleetResp{Items: make([]int, 0, end-int(st.Offset))}
		for i := int(st.Offset); i < end; i++ {
			resp.Items = append(resp.Items, i)
		}
		if end < loadItems {
			if resp.Next, err = ctoken.IssueState(cfg.cursors, scope, uint32(end/loadPageSize), listState{Offset: uint32(end)}); err != nil {
				ins.reply(w, http.StatusInternalServerError, fleetResp{Error: "issue failed"})
				return
			}
		}
		ins.reply(w, http.StatusOK, resp)
	}
}

// loadClient is one of the load test's concurrent clients.
type loadClient struct {
	id        int
	caller    string
	cursor    string
	seen      []uint8 // items seen in the current listing
	pages     int     // pages of the current listing
	completed int     // listings seen through to the end
	tokens    []single
	hooks     []string // webhook delivery IDs sent, each acknowledged

	mu  sync.Mutex // guards lat: a redeem's two copies record at once
	lat map[string][]time.Duration
}

// time records the latency of op begun at start.
func (lc *loadClient) time(op string, start time.Time) {
	d := time.Since(start)
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.lat[op] = append(lc.lat[op], d)
}

// TestSustainedLoadLosesNothing runs three instances sharing one Redis (AOF,
// appendfsync always) under 64 concurrent clients (CTOKEN_LOAD_CLIENTS) for
// 30 s (CTOKEN_LOAD_DURATION; a soak sets it longer). Each client pages
// through a 100 000-item collection with cursors, 500 items a page, round
// robin over the instances; between pages it mints a one-time token and a
// single-use state and redeems each with two concurrent copies on two
// instances, and sends a webhook delivery as two concurrent copies to two
// instances, retrying until acknowledged. Meanwhile the keys rotate in two
// passes (new key added as previous on every instance, then promoted) and
// Redis is killed and restarted once; after the restart, and again after
// the run, every delivery acknowledged so far is sent once more. It asserts every item is seen exactly
// once in every listing (completed listings whole, the unfinished one
// without duplicates; when none ended within the run, the longest is paged
// to its end after it), no page is refused, every token is accepted at most
// once and acted on exactly when accepted, a token never accepted had a
// redeem the store could not decide, every token is refused after the run,
// and every webhook delivery was processed exactly once. It logs throughput
// and p50/p99 latency per operation.
func TestSustainedLoadLosesNothing(t *testing.T) {
	duration := envDuration(t, "CTOKEN_LOAD_DURATION", 30*time.Second)
	clients := envInt(t, "CTOKEN_LOAD_CLIENTS", 64)
	k1, k2 := fleetKey(), fleetKey()
	t.Setenv(envFleetKeys, k1)
	t.Setenv(envFleetSession, "fleet-session-1")
	rp := newServer(t, "--appendonly", "yes", "--appendfsync", "always")
	store := faultStore(t, standaloneClient(t, rp.addr()), 2*time.Second)
	var work, hooks acceptLog
	var ins []*instance
	for i := range 3 {
		holder := new(atomic.Pointer[instance])
		hook := hookEndpoint(t, store, loadLease, 0, nil, hooks.add)
		in := startInstance(t, fmt.Sprint("i", i), store, func(h http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/", recordAccepts(h, 0, work.add))
			mux.Handle("GET /big", bigList(holder))
			mux.Handle("POST /hook", hook)
			return mux
		})
		holder.Store(in)
		ins = append(ins, in)
	}
	c := faultClient(t)
	sender := newHookSender(t, c)

	var (
		stop     atomic.Bool
		rr       atomic.Uint64
		outs     outcomes
		failures = make(chan error, clients)
		wg       sync.WaitGroup
		lcs      = make([]*loadClient, clients)
		// deliveries none of whose first two copies was acknowledged
		hookRetries atomic.Int32
		// every delivery acknowledged so far, for the re-sends after each
		// disruption
		ackedMu sync.Mutex
		acked   []string
		resent  atomic.Int64
	)
	next := func() string { return ins[rr.Add(1)%uint64(len(ins))].srv.URL }
	// redeemPair redeems s on two instances at once.
	redeemPair := func(lc *loadClient, s single) {
		var pair sync.WaitGroup
		a := int(rr.Add(1) % 3)
		for _, i := range []int{a, (a + 1) % 3} {
			spawn(&pair, func() {
				start := time.Now()
				st := redeem(c, ins[i].srv.URL, s)
				lc.time(s.kind+".redeem", start)
				outs.add(s.tok, st)
			})
		}
		pair.Wait()
	}
	page := func(lc *loadClient) error {
		start := time.Now()
		r, err := call(c, http.MethodGet, next()+"/big?cursor="+url.QueryEscape(lc.cursor), lc.caller, nil)
		if err != nil {
			return nil // not served: ask again with the same cursor
		}
		lc.time("page", start)
		if r.Status != http.StatusOK {
			return fmt.Errorf("client %d page %d refused: status %d code %d %q", lc.id, lc.pages, r.Status, r.Code, r.Error)
		}
		for _, it := range r.Items {
			if it < 0 || it >= loadItems {
				return fmt.Errorf("client %d: item %d out of range", lc.id, it)
			}
			if lc.seen[it]++; lc.seen[it] > 1 {
				return fmt.Errorf("client %d: item %d seen twice in one listing", lc.id, it)
			}
		}
		lc.pages++
		if lc.cursor = r.Next; lc.cursor == "" {
			for i, n := range lc.seen {
				if n != 1 {
					return fmt.Errorf("client %d: listing finished but item %d seen %d times", lc.id, i, n)
				}
			}
			clear(lc.seen)
			lc.pages = 0
			lc.completed++
		}
		return nil
	}
	start := time.Now()
	for i := range clients {
		lc := &loadClient{id: i, caller: "caller-" + strconv.Itoa(i), seen: make([]uint8, loadItems), lat: map[string][]time.Duration{}}
		lcs[i] = lc
		spawn(&wg, func() {
			for !stop.Load() {
				for range 8 {
					if err := page(lc); err != nil {
						failures <- err
						return
					}
				}
				for _, kind := range singleUseKinds {
					t0 := time.Now()
					tok, err := mint(c, next(), kind, "alice")
					if err != nil {
						failures <- fmt.Errorf("client %d: %w", lc.id, err)
						return
					}
					lc.time(kind+".mint", t0)
					s := single{kind, tok}
					lc.tokens = append(lc.tokens, s)
					redeemPair(lc, s)
				}
				// A webhook delivery, sent twice at once to two instances
				// (a sender's retry racing the first attempt), then
				// retried until acknowledged.
				id := fmt.Sprintf("msg_load_%d_%d", lc.id, len(lc.hooks))
				lc.hooks = append(lc.hooks, id)
				t0 := time.Now()
				a := int(rr.Add(1) % 3)
				codes := make([]int, 2)
				var copies sync.WaitGroup
				for j, i := range []int{a, (a + 1) % 3} {
					spawn(&copies, func() {
						t1 := time.Now()
						codes[j] = sender.send(ins[i].srv.URL, id)
						lc.time("webhook.copy", t1)
					})
				}
				copies.Wait()
				if codes[0]/100 != 2 && codes[1]/100 != 2 {
					hookRetries.Add(1)
					if _, err := sender.deliver(next, id, 50*time.Millisecond, loadLease+15*time.Second); err != nil {
						failures <- err
						return
					}
				}
				lc.time("webhook.acked", t0)
				ackedMu.Lock()
				acked = append(acked, id)
				ackedMu.Unlock()
			}
		})
	}

	// resendAcked sends every delivery acknowledged so far once more, as a
	// sender whose acknowledgement got lost would, until it is acknowledged
	// again; hooks counts a processing done twice.
	resendAcked := func() {
		ackedMu.Lock()
		ids := slices.Clone(acked)
		ackedMu.Unlock()
		inParallel(ids, 32, func(id string) {
			if _, err := sender.deliver(next, id, 20*time.Millisecond, loadLease+15*time.Second); err != nil {
				failures <- fmt.Errorf("re-sending an acknowledged delivery: %w", err)
			}
			resent.Add(1)
		})()
	}

	// The disruptions, at fixed fractions of the run.
	at := func(frac float64) {
		if d := time.Duration(frac*float64(duration)) - time.Since(start); d > 0 {
			time.Sleep(d)
		}
	}
	reloadAll := func(keys string) {
		os.Setenv(envFleetKeys, keys)
		for _, in := range ins {
			reloadInstance(t, in)
			time.Sleep(200 * time.Millisecond)
		}
	}
	at(0.25)
	reloadAll(k1 + "," + k2) // pass 1: every instance verifies k2
	at(0.50)
	reloadAll(k2 + "," + k1) // pass 2: every instance signs with k2
	at(0.65)
	restartAt := time.Since(start)
	rp.restart(syscall.SIGKILL)
	restartTook := time.Since(start) - restartAt
	resent1 := make(chan time.Duration, 1)
	go func() { // while the clients go on
		t0 := time.Now()
		resendAcked()
		resent1 <- time.Since(t0)
	}()
	at(1)
	resendTook := <-resent1 // the run lasts at least as long as the re-sends
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	// On a slow machine no listing may have ended within the run. Every
	// listing then began before the first disruption, so the longest one
	// is paged to its end now: a listing that spans the key rotation and
	// the restart still comes out whole.
	if lc := slices.MaxFunc(lcs, func(a, b *loadClient) int {
		return cmp.Compare(a.completed*loadItems+a.pages, b.completed*loadItems+b.pages)
	}); lc.completed == 0 {
		for try := 0; lc.completed == 0; try++ {
			if try == 4*loadItems/loadPageSize {
				t.Fatalf("client %d: listing not finished after the run in %d requests", lc.id, try)
			}
			must(t, page(lc))
		}
		t.Logf("no listing ended within the run; client %d's, begun at the start, was paged to its end after it", lc.id)
	}
	t1 := time.Now()
	resendAcked()
	resendTook2 := time.Since(t1)
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	var lat latencies
	var tokens []single
	var deliveries []string
	completed, partial := 0, 0
	for _, lc := range lcs {
		lat.merge(lc.lat)
		tokens = append(tokens, lc.tokens...)
		deliveries = append(deliveries, lc.hooks...)
		completed += lc.completed
		if lc.pages > 0 {
			partial++
		}
	}
	// Redeem every token until refused (409) and check its history.
	var burned, accepted int
	var mu sync.Mutex
	var checkErr error
	inParallel(tokens, 16, func(s single) {
		err := func() error {
			for attempt := 0; ; attempt++ {
				st := redeem(c, next(), s)
				outs.add(s.tok, st)
				switch st {
				case http.StatusConflict:
					return nil
				case http.StatusOK:
					// Undecided during the run (Redis down, nothing
					// recorded): accepted now, and refused from then on.
					continue
				case http.StatusServiceUnavailable, 0:
					if attempt > 50 {
						return errors.New("undecided after the run")
					}
					time.Sleep(20 * time.Millisecond)
				default:
					return fmt.Errorf("redeem after the run: status %d, want 200 or 409", st)
				}
			}
		}()
		ok := outs.get(s.tok, http.StatusOK)
		switch {
		case err != nil:
		case ok > 1:
			err = fmt.Errorf("%s token accepted %d times", s.kind, ok)
		case work.count(s.tok) != ok:
			err = fmt.Errorf("%s token: %d acceptances but acted on %d times", s.kind, ok, work.count(s.tok))
		case ok == 0 && outs.get(s.tok, http.StatusServiceUnavailable) == 0:
			err = fmt.Errorf("%s token refused as redeemed but never accepted nor undecided", s.kind)
		}
		mu.Lock()
		if err != nil && checkErr == nil {
			checkErr = err
		}
		if ok == 0 {
			burned++
		} else {
			accepted++
		}
		mu.Unlock()
	})()
	if checkErr != nil {
		t.Fatal(checkErr)
	}
	for _, id := range deliveries {
		if n := hooks.count(id); n != 1 {
			t.Fatalf("webhook delivery %s acknowledged and processed %d times, want exactly once", id, n)
		}
	}

	tot := outs.totals()
	t.Logf("%d clients for %v (Redis restarted at %v, down and reloaded in %v; keys rotated at 25%% and 50%%)",
		clients, elapsed.Round(time.Millisecond), restartAt.Round(time.Millisecond), restartTook.Round(time.Millisecond))
	t.Logf("listings of %d items: %d completed (every item exactly once), %d unfinished at the end (no item twice)", loadItems, completed, partial)
	t.Logf("single-use tokens: %d minted, %d accepted once, %d never accepted (a redeem got 503 and its claim was recorded); redeem replies 200=%d 409=%d 503=%d",
		len(tokens), accepted, burned, tot[http.StatusOK], tot[http.StatusConflict], tot[http.StatusServiceUnavailable])
	t.Logf("webhook deliveries: %d, each acknowledged and processed exactly once; %d needed a retry after both first copies were refused; %d acknowledged ones sent again after the restart (in %v, during the run) and after the run (in %v)",
		len(deliveries), hookRetries.Load(), resent.Load(), resendTook.Round(time.Millisecond), resendTook2.Round(time.Millisecond))
	lat.report(t, elapsed)
	if completed == 0 {
		t.Error("no listing completed: the run was too short or too slow to show anything")
	}
}
