package idempotency

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMiddlewareBusyRetryAfterFollowsTheRouteRunTime drives the
// Retry-After of a 409 through real requests: a route whose recorded runs
// took about 1.1 s answers a busy key with about the time left of such a
// run (2 s), not the lease's remainder (60 s); routes without a recorded
// run, and runs that released their key, keep the lease's remainder.
func TestMiddlewareBusyRetryAfterFollowsTheRouteRunTime(t *testing.T) {
	const run = 1100 * time.Millisecond
	for _, tc := range []struct {
		name      string
		seed      string // route of the seeding run; "" for none
		seedFails bool   // the seeding run answers 503 (released, not recorded)
		busy      string // route of the busy key
		want      []string
	}{
		{"a recorded run of the route", "/payments", false, "/payments", []string{"2"}},
		{"no recorded run yet: the lease's remainder", "", false, "/payments", []string{"60", "59"}},
		{"a recorded run of another route only", "/refunds", false, "/payments", []string{"60", "59"}},
		{"a run that released its key is not a recorded run", "/payments", true, "/payments", []string{"60", "59"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			entered, release := make(chan struct{}), make(chan struct{})
			f := newFixture(t, Config{Lease: time.Minute, Route: func(r *http.Request) string { return r.URL.Path }},
				func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Block") != "" {
						close(entered)
						<-release
						w.WriteHeader(http.StatusCreated)
						return
					}
					time.Sleep(run)
					if tc.seedFails {
						w.WriteHeader(http.StatusServiceUnavailable)
						return
					}
					w.WriteHeader(http.StatusCreated)
				})
			if tc.seed != "" {
				w := f.do(req(http.MethodPost, tc.seed, "alice", `"seed"`, `{}`))
				if w.Code/100 != 2 && !tc.seedFails {
					t.Fatalf("seeding run answered %d", w.Code)
				}
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := req(http.MethodPost, tc.busy, "alice", key1, `{}`)
				r.Header.Set("X-Block", "1")
				f.do(r)
			}()
			<-entered
			w := f.do(req(http.MethodPost, tc.busy, "alice", key1, `{}`))
			close(release)
			wg.Wait()
			problemOf(t, w, http.StatusConflict)
			if ra := w.Header().Get("Retry-After"); !contains(tc.want, ra) {
				t.Fatalf("Retry-After %q, want one of %q", ra, tc.want)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestBusyRetryAfterIsTheEstimateLessTheElapsedLeaseClamped(t *testing.T) {
	const lease = time.Minute
	for _, tc := range []struct {
		name string
		runs []time.Duration
		wait time.Duration // what the store reports is left of the lease
		want string
	}{
		{"no estimate: the lease's remainder", nil, 42 * time.Second, "42"},
		{"no estimate, no wait reported: the lease", nil, 0, "60"},
		{"no estimate, a wait over the lease: the lease", nil, 2 * lease, "60"},
		{"just started", []time.Duration{1500 * time.Millisecond}, lease, "2"},
		{"half done", []time.Duration{10 * time.Second}, lease - 5*time.Second, "5"},
		{"overdue: at least a second", []time.Duration{10 * time.Second}, lease - 30*time.Second, "1"},
		{"estimate past the lease: at most its remainder", []time.Duration{2 * lease}, 20 * time.Second, "20"},
		{"no wait reported counts as just started", []time.Duration{3 * time.Second}, 0, "3"},
		{"the 90th percentile of the runs, not the slowest",
			append(repeat(time.Second, 28), 4*time.Second, 4*time.Second, 4*time.Second, 30*time.Second), lease, "4"},
		{"only the newest runs count", append(repeat(50*time.Second, 10), repeat(2*time.Second, estimateRuns)...), lease, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Config{Store: newStore(), Keys: testKeys, Caller: func(*http.Request) (string, error) { return "a", nil }, Lease: lease})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range tc.runs {
				m.p.observeRun("POST /payments", d)
			}
			if got := m.p.busyRetryAfter("POST /payments", tc.wait); got != tc.want {
				t.Fatalf("Retry-After %s, want %s", got, tc.want)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestRunEstimatesAreBounded(t *testing.T) {
	m, err := New(Config{Store: newStore(), Keys: testKeys, Caller: func(*http.Request) (string, error) { return "a", nil }})
	if err != nil {
		t.Fatal(err)
	}
	p := m.p
	t.Run("at most estimateRoutes routes", func(t *testing.T) {
		for i := range 3 * estimateRoutes {
			p.observeRun("POST /r/"+strconv.Itoa(i), time.Second)
		}
		if n := len(p.runs.routes); n != estimateRoutes {
			t.Fatalf("%d routes kept", n)
		}
		if _, ok := p.estimate("POST /r/" + strconv.Itoa(3*estimateRoutes-1)); !ok {
			t.Fatal("the newest route has no estimate")
		}
	})
	t.Run("a route over estimateRouteBytes is not kept", func(t *testing.T) {
		long := strings.Repeat("r", estimateRouteBytes+1)
		p.observeRun(long, time.Second)
		if _, ok := p.estimate(long); ok {
			t.Fatal("a long route was kept")
		}
	})
	t.Run("a run of no duration is not kept", func(t *testing.T) {
		p.observeRun("POST /zero", 0)
		if _, ok := p.estimate("POST /zero"); ok {
			t.Fatal("a zero run was kept")
		}
	})
	t.Run("two Middlewares keep their own estimates", func(t *testing.T) {
		m2, err := New(Config{Store: newStore(), Keys: testKeys, Caller: func(*http.Request) (string, error) { return "a", nil }})
		if err != nil {
			t.Fatal(err)
		}
		p.observeRun("POST /own", time.Second)
		if _, ok := m2.p.estimate("POST /own"); ok {
			t.Fatal("an estimate leaked between Middlewares")
		}
	})
}
