package idempotency

import (
	"net/http"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// MaxWait is the largest [Config.Wait]: a minute.
const MaxWait = time.Minute

// Polling of a busy key in wait mode: the first poll after
// waitFirstPoll, each next one after twice the last, at most waitMaxPoll.
const (
	waitFirstPoll = 10 * time.Millisecond
	waitMaxPoll   = 250 * time.Millisecond
)

// waitOf validates Config.Wait against the lease.
func waitOf(wait, lease time.Duration) (time.Duration, error) {
	switch {
	case wait < 0 || wait > MaxWait:
		return 0, configError("idempotency: Wait is negative or over MaxWait")
	case wait > 0 && wait >= lease:
		return 0, configError("idempotency: Wait is not less than Lease")
	}
	return wait, nil
}

// busy answers a request whose key another attempt of the same request
// holds (rec is the store's LeaseBusy answer): in wait mode, the first
// request's outcome once it is known (await); otherwise 409 with a
// Retry-After from the route's run-time estimate.
func (p *params) busy(w http.ResponseWriter, a *attempt, rec replay.Record, fp, body []byte, next http.Handler) {
	if p.wait > 0 {
		p.await(w, a, rec, fp, body, next)
		return
	}
	p.refuse(w, errInProgress, a.acquired, p.busyRetryAfter(a.route, rec.Wait))
}

// await waits, until Config.Wait after the request's first store call,
// for the attempt holding a's key to end, polling the store with backoff:
// a recorded response is replayed; a released key is taken and next run
// under the new lease; a different request holding the key is 422; the
// client leaving ends the wait (503, as before a lease); a store failure
// is 503; and a key still busy when the wait is over is 409.
func (p *params) await(w http.ResponseWriter, a *attempt, rec replay.Record, fp, body []byte, next http.Handler) {
	ctx := a.r.Context()
	deadline := a.start.Add(p.wait)
	pause := waitFirstPoll
	for {
		left := time.Until(deadline)
		if left <= 0 {
			p.refuse(w, errInProgress, a.acquired, p.busyRetryAfter(a.route, rec.Wait))
			return
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			p.refuse(w, errGoneAcquire, a.acquired, p.retryAfter)
			return
		case <-t.C:
		}
		pause = min(2*pause, waitMaxPoll)
		got, ok := a.acquire(w, fp)
		if !ok || !a.answer(w, got, fp, body, next) {
			return
		}
		rec = got
	}
}
