//go:build fault

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	// pauseTimeout is the store timeout of the pause test.
	pauseTimeout = 250 * time.Millisecond
	// pauseBound is how much longer than the store timeout a call may take
	// to fail while Redis is paused: the store returns at its deadline, so
	// the rest is HTTP and goroutine scheduling on a loaded 2-core machine
	// under -race. Measured there: up to 326 ms in total on a quiet machine,
	// 832 ms with six other builds running; the bound (1.75 s in total) is
	// twice the loaded figure, so load alone never fails the test, and
	// Redis stays paused for twice the bound (see pausedAtLeast), so a call
	// that waited for the resume still fails it.
	pauseBound = 1500 * time.Millisecond
	// pausedAtLeast is how long Redis stays stopped.
	pausedAtLeast = 2 * (pauseTimeout + pauseBound)
	// pauseLease is the webhook lease of the pause test's receivers.
	pauseLease = time.Second
)

// TestPausedRedisFailsClosedWithinTimeout stops Redis (SIGSTOP) for several
// store timeouts while redeems, webhook copies and direct claims arrive in
// two waves (the second dialling afresh), then resumes it. Every call made
// during the pause fails closed (503, ErrUnavailable) within pauseTimeout +
// pauseBound. Redis then runs the commands already in its buffers, so a
// failed claim may be recorded after all: such a token is refused from then
// on, never accepted twice, and each pause-time delivery, sent again until
// acknowledged, is processed exactly once within its lease of the resume.
func TestPausedRedisFailsClosedWithinTimeout(t *testing.T) {
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	rp := newServer(t)
	store := faultStore(t, standaloneClient(t, rp.addr()), pauseTimeout)
	var hooks acceptLog
	var ins []*instance
	for i := range 3 {
		ins = append(ins, startInstance(t, fmt.Sprint("i", i), store, withHook(hookEndpoint(t, store, pauseLease, 0, nil, hooks.add))))
	}
	c := faultClient(t)
	sender := newHookSender(t, c)

	// Warm the pool: these redeems succeed and leave connections idle.
	for i, s := range mintMany(t, c, ins, 10) {
		if st := redeem(c, ins[i%3].srv.URL, s); st != http.StatusOK {
			t.Fatalf("redeem before the pause: status %d", st)
		}
	}
	const waves, perKind, claimsPerWave = 2, 16, 16
	toks, ids, hookIDs := make([][]single, waves), make([][]string, waves), make([][]string, waves)
	for w := range waves {
		toks[w] = mintMany(t, c, ins, perKind)
		for i := range claimsPerWave {
			ids[w] = append(ids[w], fmt.Sprintf("pause-%d-%d", w, i))
			hookIDs[w] = append(hookIDs[w], fmt.Sprintf("msg_pause_%d_%d", w, i))
		}
	}
	until := time.Now().Add(time.Hour)

	type result struct {
		what string
		took time.Duration
		err  error
	}
	var mu sync.Mutex
	var results []result
	var ctxErrs atomic.Int32 // store errors that also match context.DeadlineExceeded
	rp.signal(syscall.SIGSTOP)
	paused := time.Now()
	for w := range waves {
		var wg sync.WaitGroup
		// timed runs call in a goroutine of the wave, recording how long it
		// took to fail and whether it failed as it should.
		timed := func(what string, call func() error) {
			spawn(&wg, func() {
				start := time.Now()
				err := call()
				took := time.Since(start)
				mu.Lock()
				results = append(results, result{what, took, err})
				mu.Unlock()
			})
		}
		for i, s := range toks[w] {
			timed(s.kind+" redeem", func() error {
				if st := redeem(c, ins[i%3].srv.URL, s); st != http.StatusServiceUnavailable {
					return fmt.Errorf("status %d, want 503", st)
				}
				return nil
			})
		}
		for i, id := range hookIDs[w] {
			timed("webhook", func() error {
				if st := sender.send(ins[i%3].srv.URL, id); st != http.StatusServiceUnavailable {
					return fmt.Errorf("status %d, want 503", st)
				}
				return nil
			})
		}
		for _, id := range ids[w] {
			timed("claim", func() error {
				first, err := store.Claim(context.Background(), id, until)
				switch {
				case first:
					return errors.New("first = true while Redis is paused")
				case !errors.Is(err, ErrUnavailable):
					return fmt.Errorf("err = %v, want ErrUnavailable", err)
				case errors.Is(err, context.DeadlineExceeded):
					ctxErrs.Add(1)
				}
				return nil
			})
		}
		wg.Wait()
	}
	// Stay paused for twice the bound in all.
	if d := pausedAtLeast - time.Since(paused); d > 0 {
		time.Sleep(d)
	}
	pausedFor := time.Since(paused)
	rp.signal(syscall.SIGCONT)
	must(t, waitPing(rp.addr(), nil, 10*time.Second))

	var took []time.Duration
	worstOf := map[string]time.Duration{}
	for _, r := range results {
		if r.err != nil {
			t.Errorf("%s during the pause: %v", r.what, r.err)
		}
		took = append(took, r.took)
		worstOf[r.what] = max(worstOf[r.what], r.took)
	}
	t.Logf("slowest refusal per call: %v", worstOf)
	slices.Sort(took)
	worst := took[len(took)-1]
	t.Logf("paused %v; %d calls during the pause, all refused: p50 %v, max %v (timeout %v, bound %v); %d of %d store errors also match context.DeadlineExceeded (the rest are the socket's i/o timeout)",
		pausedFor.Round(time.Millisecond), len(took), quantile(took, 0.5).Round(time.Millisecond),
		worst.Round(time.Millisecond), pauseTimeout, pauseTimeout+pauseBound, ctxErrs.Load(), waves*claimsPerWave)
	if worst > pauseTimeout+pauseBound {
		t.Errorf("slowest refusal took %v, want at most timeout + %v = %v", worst, pauseBound, pauseTimeout+pauseBound)
	}

	// After the resume: each pause-time token is accepted at most once,
	// whichever instance sees it; those whose claim Redis executed on resume
	// are refused everywhere.
	burned, acceptedOnce := 0, 0
	for i, s := range slices.Concat(toks...) {
		accepted := 0
		for j := range ins {
			switch st := redeemDecided(t, c, ins[(i+j)%3].srv.URL, s, nil); st {
			case http.StatusOK:
				accepted++
			case http.StatusConflict:
			default:
				t.Fatalf("redeem after the resume: status %d, want 200 or 409", st)
			}
		}
		switch accepted {
		case 0:
			burned++
		case 1:
			acceptedOnce++
		default:
			t.Fatalf("%s token of the pause accepted %d times after the resume", s.kind, accepted)
		}
	}
	recorded := 0
	for _, id := range slices.Concat(ids...) {
		first, err := store.Claim(context.Background(), id, until)
		wantErr(t, err, nil, "claim after the resume")
		if !first {
			recorded++ // the pause-time claim ran when Redis resumed
		}
		wantClaim(t, store, id, until, false)
	}
	t.Logf("after the resume: %d of %d pause-time tokens were burned (their claim ran on resume), %d accepted once; %d of %d pause-time store claims had been recorded",
		burned, burned+acceptedOnce, acceptedOnce, recorded, waves*claimsPerWave)
	// Every pause-time webhook delivery is processed exactly once: a lease
	// Redis took on resume holds it for at most pauseLease, then a retry
	// acquires it.
	resumed := time.Now()
	var slowest time.Duration
	var hwg sync.WaitGroup
	for i, id := range slices.Concat(hookIDs...) {
		spawn(&hwg, func() {
			start := time.Now()
			rr := i
			if _, err := sender.deliver(func() string { rr++; return ins[rr%3].srv.URL }, id, 50*time.Millisecond, pauseLease+10*time.Second); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			slowest = max(slowest, time.Since(start))
			mu.Unlock()
		})
	}
	hwg.Wait()
	// Each once more, as a sender whose acknowledgement got lost would send
	// it: a duplicate (200), not processed again.
	for i, id := range slices.Concat(hookIDs...) {
		if code := sender.send(ins[i%3].srv.URL, id); code != http.StatusOK {
			t.Errorf("pause-time delivery %s sent again after its acknowledgement: status %d, want 200", id, code)
		}
		if n := hooks.count(id); n != 1 {
			t.Errorf("pause-time delivery %s processed %d times, want exactly once", id, n)
		}
	}
	t.Logf("after the resume: every pause-time webhook delivery acknowledged and processed once; the slowest within %v (lease %v), all within %v",
		slowest.Round(time.Millisecond), pauseLease, time.Since(resumed).Round(time.Millisecond))
	if slowest > pauseLease+2*time.Second {
		t.Errorf("a pause-time delivery took %v after the resume, want at most the lease %v + 2 s", slowest, pauseLease)
	}

	fresh := mintMany(t, c, ins, 1)
	for i, s := range fresh {
		if st := redeem(c, ins[i%3].srv.URL, s); st != http.StatusOK {
			t.Fatalf("fresh %s token after the resume: status %d, want 200", s.kind, st)
		}
	}
}
