package idempotency

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// pollStore counts AcquireRecord calls, so a test can tell that a second
// request is waiting (it has polled) before it lets the first one end.
type pollStore struct {
	replay.Recorder
	acquires atomic.Int32
	failFrom atomic.Int32 // when > 0, this call and every later one fail
}

func (s *pollStore) AcquireRecord(ctx context.Context, id string, d time.Duration, fp []byte) (replay.Record, error) {
	n := s.acquires.Add(1)
	if from := s.failFrom.Load(); from > 0 && n >= from {
		return replay.Record{}, errInjected
	}
	return s.Recorder.AcquireRecord(ctx, id, d, fp)
}

// waitPolls blocks until s has answered at least n AcquireRecord calls.
func (s *pollStore) waitPolls(t *testing.T, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.acquires.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d AcquireRecord calls, want %d", s.acquires.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// gate is a handler whose first run blocks until released and then
// answers first; later runs answer 201 {"run":"later"} at once.
type gate struct {
	entered, release chan struct{}
	first            int
	runs             atomic.Int32
}

func newGate(first int) *gate {
	return &gate{entered: make(chan struct{}), release: make(chan struct{}), first: first}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if g.runs.Add(1) == 1 {
		close(g.entered)
		<-g.release
		w.WriteHeader(g.first)
		io.WriteString(w, `{"run":"first"}`)
		return
	}
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"run":"later"}`)
}

func TestMiddlewareWaitModeAnswersTheFirstRequestsOutcome(t *testing.T) {
	for _, tc := range []struct {
		name      string
		first     int // the first request's status
		wantCode  int
		wantBody  string
		replayed  string
		wantRuns  int32
		wantEvent observe.Outcome
	}{
		{"the first is recorded: the waiter gets its replay", http.StatusCreated, http.StatusCreated, `{"run":"first"}`, "true", 1, observe.OutcomeDuplicate},
		{"the first is recorded as a 4xx: the waiter gets its replay", http.StatusPaymentRequired, http.StatusPaymentRequired, `{"run":"first"}`, "true", 1, observe.OutcomeDuplicate},
		{"the first releases the key: the waiter runs the handler itself", http.StatusServiceUnavailable, http.StatusCreated, `{"run":"later"}`, "", 2, observe.OutcomeProcessed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &pollStore{Recorder: newStore()}
			g := newGate(tc.first)
			f := newFixture(t, Config{Store: store, Lease: 10 * time.Second, Wait: 5 * time.Second}, g.ServeHTTP)
			srv := httptest.NewServer(f.h)
			defer srv.Close()
			post := func() (*http.Response, string) {
				r, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":100}`))
				if err != nil {
					t.Error(err)
					return nil, ""
				}
				r.Header.Set("X-User", "alice")
				r.Header.Set("Idempotency-Key", "order-1")
				r.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Error(err)
					return nil, ""
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); post() }()
			<-g.entered
			var (
				resp *http.Response
				body string
			)
			wg.Add(1)
			go func() { defer wg.Done(); resp, body = post() }()
			store.waitPolls(t, 3) // the second request's first call and one poll: it waits
			close(g.release)
			wg.Wait()
			if resp == nil {
				t.Fatal("no answer")
			}
			if resp.StatusCode != tc.wantCode || body != tc.wantBody || resp.Header.Get(ReplayedHeader) != tc.replayed {
				t.Fatalf("waiter got %d %q replayed %q; want %d %q %q", resp.StatusCode, body, resp.Header.Get(ReplayedHeader), tc.wantCode, tc.wantBody, tc.replayed)
			}
			if g.runs.Load() != tc.wantRuns || f.runs.Load() != tc.wantRuns {
				t.Fatalf("handler ran %d times, want %d", g.runs.Load(), tc.wantRuns)
			}
			if e := f.obs.last(t); e.Outcome != tc.wantEvent || e.StoreLatency <= 0 {
				t.Fatalf("waiter's event %+v, want %s with a store latency", e, tc.wantEvent)
			}
		})
	}
}

func TestMiddlewareWaitModeRefuses(t *testing.T) {
	t.Run("a different request under the key is 422 at once, without polling", func(t *testing.T) {
		store := &pollStore{Recorder: newStore()}
		g := newGate(http.StatusCreated)
		f := newFixture(t, Config{Store: store, Lease: 10 * time.Second, Wait: 5 * time.Second}, g.ServeHTTP)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); f.post(key1, `{"amount":100}`) }()
		<-g.entered
		w := f.post(key1, `{"amount":5}`)
		polls := store.acquires.Load()
		close(g.release)
		wg.Wait()
		problemOf(t, w, http.StatusUnprocessableEntity)
		if polls != 2 || g.runs.Load() != 1 {
			t.Fatalf("%d store calls, runs %d; want 2 and 1", polls, g.runs.Load())
		}
	})
	t.Run("a key still busy when Wait passes is 409 with Retry-After", func(t *testing.T) {
		store := &pollStore{Recorder: newStore()}
		g := newGate(http.StatusCreated)
		f := newFixture(t, Config{Store: store, Lease: 10 * time.Second, Wait: 300 * time.Millisecond}, g.ServeHTTP)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); f.post(key1, `{}`) }()
		<-g.entered
		w := f.post(key1, `{}`)
		polls := store.acquires.Load()
		close(g.release)
		wg.Wait()
		problemOf(t, w, http.StatusConflict)
		if ra := w.Header().Get("Retry-After"); ra != "10" && ra != "9" {
			t.Errorf("Retry-After %q, want the lease's remainder (no run recorded yet)", ra)
		}
		// 10 ms doubling to 250 ms within 300 ms: 10+20+40+80+150 (cut at the deadline).
		if polls < 3 || polls > 8 || g.runs.Load() != 1 {
			t.Fatalf("%d store calls, runs %d", polls, g.runs.Load())
		}
		if e := f.obs.all()[0]; e.Outcome != observe.OutcomeInProgress || e.Reason != observe.ReasonIdempotencyInProgress {
			t.Fatalf("waiter's event %+v", e)
		}
	})
	t.Run("a client that leaves ends its wait", func(t *testing.T) {
		store := &pollStore{Recorder: newStore()}
		g := newGate(http.StatusCreated)
		f := newFixture(t, Config{Store: store, Lease: 10 * time.Second, Wait: 5 * time.Second}, g.ServeHTTP)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); f.post(key1, `{}`) }()
		<-g.entered
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- f.do(req(http.MethodPost, "/payments", "alice", key1, `{}`).WithContext(ctx)) }()
		store.waitPolls(t, 3)
		cancel()
		w := <-done
		close(g.release)
		wg.Wait()
		problemOf(t, w, http.StatusServiceUnavailable)
		if e := f.obs.all()[0]; e.Reason != observe.ReasonIdempotencyGoneBeforeLease || g.runs.Load() != 1 {
			t.Fatalf("waiter's event %+v, runs %d", e, g.runs.Load())
		}
	})
	t.Run("a store that fails while the request waits is 503", func(t *testing.T) {
		store := &pollStore{Recorder: newStore()}
		g := newGate(http.StatusCreated)
		f := newFixture(t, Config{Store: store, Lease: 10 * time.Second, Wait: 5 * time.Second}, g.ServeHTTP)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); f.post(key1, `{}`) }()
		<-g.entered
		store.failFrom.Store(4)
		w := f.post(key1, `{}`)
		close(g.release)
		wg.Wait()
		problemOf(t, w, http.StatusServiceUnavailable)
		if w.Header().Get("Retry-After") != "5" || g.runs.Load() != 1 {
			t.Fatalf("Retry-After %q runs %d", w.Header().Get("Retry-After"), g.runs.Load())
		}
		if e := f.obs.all()[0]; e.Outcome != observe.OutcomeStoreFailure || e.Reason != observe.ReasonIdempotencyStoreAcquire {
			t.Fatalf("waiter's event %+v", e)
		}
	})
}

// scriptStore answers AcquireRecord with its records in turn, the last
// one over and over.
type scriptStore struct {
	replay.Recorder
	mu   sync.Mutex
	recs []replay.Record
}

func (s *scriptStore) AcquireRecord(context.Context, string, time.Duration, []byte) (replay.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.recs[0]
	if len(s.recs) > 1 {
		s.recs = s.recs[1:]
	}
	return rec, nil
}

func TestMiddlewareWaitModeFollowsTheStore(t *testing.T) {
	fp := Fingerprint(http.MethodPost, "/payments", "", http.Header{"Content-Type": {"application/json"}}, []byte(`{}`))
	busy := replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: 5 * time.Second}, Fingerprint: fp}
	for _, tc := range []struct {
		name   string
		then   replay.Record
		status int
		reason observe.RefusalReason
	}{
		{"another request took the key meanwhile: 422", replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: time.Second}, Fingerprint: []byte("other")}, http.StatusUnprocessableEntity, observe.ReasonIdempotencyMismatch},
		{"a lease without a token: 503", replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired}}, http.StatusServiceUnavailable, observe.ReasonIdempotencyStoreAcquire},
		{"a state outside the contract: 503", replay.Record{Lease: replay.Lease{State: replay.LeaseState(99)}}, http.StatusServiceUnavailable, observe.ReasonIdempotencyStoreAcquire},
		{"done without a stored response: 500", replay.Record{Lease: replay.Lease{State: replay.LeaseDone}}, http.StatusInternalServerError, observe.ReasonIdempotencyNoRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &scriptStore{Recorder: newStore(), recs: []replay.Record{busy, busy, tc.then}}
			f := newFixture(t, Config{Store: store, Lease: 10 * time.Second, Wait: 5 * time.Second}, nil)
			problemOf(t, f.post(key1, `{}`), tc.status)
			if e := f.obs.last(t); e.Reason != tc.reason || f.runs.Load() != 0 {
				t.Fatalf("event %+v runs %d", e, f.runs.Load())
			}
		})
	}
}

func TestNewRefusesAnInvalidWait(t *testing.T) {
	caller := func(*http.Request) (string, error) { return "a", nil }
	for _, tc := range []struct {
		name        string
		wait, lease time.Duration
		ok          bool
	}{
		{"zero: off", 0, 0, true},
		{"under the lease", 30 * time.Second, 0, true},
		{"MaxWait under a longer lease", MaxWait, 2 * MaxWait, true},
		{"negative", -time.Second, 0, false},
		{"over MaxWait", MaxWait + 1, time.Hour, false},
		{"equal to the lease", time.Minute, time.Minute, false},
		{"longer than the lease", 2 * time.Second, time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Config{Store: newStore(), Keys: testKeys, Caller: caller, Wait: tc.wait, Lease: tc.lease})
			if tc.ok != (err == nil) || !tc.ok && (!errors.Is(err, ErrConfig) || m != nil) {
				t.Fatalf("New = %v, %v", m, err)
			}
		})
	}
}
