package idempotency

import (
	"slices"
	"sync"
	"time"

	"github.com/ctoken/ctoken/internal/httpx"
)

// Bounds of the run-time estimates a Middleware keeps for the Retry-After
// of a 409.
const (
	// estimateRuns is how many recorded runs of a route the estimate
	// keeps: the newest ones.
	estimateRuns = 32
	// estimateRoutes is how many routes have an estimate at once; a new
	// route past it evicts one (an arbitrary one: map order).
	estimateRoutes = 256
	// estimateRouteBytes is the longest route that gets an estimate: a
	// longer one (a Config.Route that returns something unbounded) gets
	// the lease-based Retry-After.
	estimateRouteBytes = 512
	// estimatePercentile is the share of the kept runs the estimate is
	// at least as long as, in percent.
	estimatePercentile = 90
)

// runEstimates keeps, per route, how long the newest recorded runs took
// (from the lease being taken to the response recorded), so that a 409
// can say when the running attempt is likely done. It is bounded in
// routes and runs per route, and lives in its Middleware.
type runEstimates struct {
	mu     sync.Mutex
	routes map[string]*runRing
}

// runRing holds the newest runs of one route.
type runRing struct {
	took [estimateRuns]time.Duration
	n    int // runs held, at most estimateRuns
	next int // where the next run goes
}

// observeRun records that a run of route took took, from its lease being
// taken to its response recorded. attempt.confirm calls it when a
// response is recorded.
func (p *params) observeRun(route string, took time.Duration) {
	if took <= 0 || len(route) > estimateRouteBytes {
		return
	}
	e := &p.runs
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.routes[route]
	if r == nil {
		if e.routes == nil {
			e.routes = make(map[string]*runRing)
		}
		if len(e.routes) >= estimateRoutes {
			for k := range e.routes {
				delete(e.routes, k)
				break
			}
		}
		r = &runRing{}
		e.routes[route] = r
	}
	r.took[r.next] = took
	r.next = (r.next + 1) % estimateRuns
	r.n = min(r.n+1, estimateRuns)
}

// estimate returns how long a run of route is likely to take: the 90th
// percentile of its newest recorded runs; false when none was recorded.
func (p *params) estimate(route string) (time.Duration, bool) {
	e := &p.runs
	var buf [estimateRuns]time.Duration
	e.mu.Lock()
	r := e.routes[route]
	if r == nil {
		e.mu.Unlock()
		return 0, false
	}
	took := buf[:r.n]
	copy(took, r.took[:r.n])
	e.mu.Unlock()
	slices.Sort(took)
	i := (len(took)*estimatePercentile+99)/100 - 1 // nearest rank
	return took[i], true
}

// busyRetryAfter is the Retry-After of a 409 for a key of route whose
// lease has wait left, as the store reports it. With an estimate of the
// route's runs, it is the estimate less the time the lease has run
// (Lease − wait), at least a second and at most wait; without one, wait.
// A wait the store does not report, or one longer than the lease, counts
// as the whole lease.
func (p *params) busyRetryAfter(route string, wait time.Duration) string {
	if wait <= 0 || wait > p.lease {
		wait = p.lease
	}
	est, ok := p.estimate(route)
	if !ok {
		return httpx.RetryAfterSeconds(wait)
	}
	left := est - (p.lease - wait)
	return httpx.RetryAfterSeconds(min(max(left, time.Second), wait))
}
