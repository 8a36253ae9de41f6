package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// fakeTransactor is a replay.Transactor over a MemoryStore: the leases and
// records are the MemoryStore's, and each Work is a transaction of
// "statements" (charges) that Commit moves to committed together with the
// record, or Rollback drops. It records every call in order, and the
// context of each BeginWork, Commit, Rollback and ReleaseLease.
type fakeTransactor struct {
	*replay.MemoryStore
	ctxSteps
	beginErr      error // BeginWork fails with it
	nilWork       bool  // BeginWork answers no Work and no error
	loseLease     bool  // Commit answers ErrLeaseLost, nothing kept
	rollBack      bool  // Commit answers ErrRolledBack, nothing kept
	commitErr     error // Commit fails with it, an unknown outcome ...
	commitApplied bool  // ... after committing all the same
	rollbackErr   error // Rollback fails with it (after ending the transaction)

	mu        sync.Mutex
	calls     []string
	committed []string // statements of committed transactions
}

func newFakeTransactor() *fakeTransactor {
	return &fakeTransactor{MemoryStore: newStore()}
}

func (f *fakeTransactor) call(name string) {
	f.mu.Lock()
	f.calls = append(f.calls, name)
	f.mu.Unlock()
}

func (f *fakeTransactor) callList() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, ",")
}

func (f *fakeTransactor) committedList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.committed...)
}

func (f *fakeTransactor) ReleaseLease(ctx context.Context, id, token string) error {
	f.call("release")
	f.record("ReleaseLease", ctx)
	return f.MemoryStore.ReleaseLease(ctx, id, token)
}

func (f *fakeTransactor) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, res []byte) error {
	f.call("confirm") // the transactional path must never call it
	return f.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, res)
}

func (f *fakeTransactor) BeginWork(ctx context.Context, id, token string) (replay.Work, error) {
	f.call("begin")
	f.record("BeginWork", ctx)
	if f.beginErr != nil {
		return nil, f.beginErr
	}
	if f.nilWork {
		return nil, nil
	}
	return &fakeWork{f: f, id: id, token: token}, nil
}

// errTxDone is what a statement of an ended fakeWork gets.
var errTxDone = errors.New("fake transaction: already committed or rolled back")

type fakeWork struct {
	f         *fakeTransactor
	id, token string
	mu        sync.Mutex
	pending   []string
	ended     bool
	outcome   error
}

type fakeTxKey struct{}

func (w *fakeWork) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, fakeTxKey{}, w)
}

// exec runs a statement in the transaction of ctx, as a handler does
// through pgstore.TxFrom.
func exec(ctx context.Context, stmt string) error {
	w, ok := ctx.Value(fakeTxKey{}).(*fakeWork)
	if !ok {
		return errors.New("no transaction in the context")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return errTxDone
	}
	w.pending = append(w.pending, stmt)
	return nil
}

func (w *fakeWork) Commit(ctx context.Context, until time.Time, fp, result []byte) error {
	w.f.call("commit")
	w.f.record("Commit", ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.outcome
	}
	w.ended = true
	switch {
	case w.f.loseLease:
		w.outcome = replay.ErrLeaseLost
		return w.outcome
	case w.f.rollBack:
		w.outcome = fmt.Errorf("%w: a statement of the work failed", replay.ErrRolledBack)
		return w.outcome
	case w.f.commitErr != nil && !w.f.commitApplied:
		w.outcome = w.f.commitErr
		return w.outcome
	}
	if err := w.f.MemoryStore.ConfirmRecord(ctx, w.id, w.token, until, fp, result); err != nil {
		w.outcome = err
		return err
	}
	w.f.mu.Lock()
	w.f.committed = append(w.f.committed, w.pending...)
	w.f.mu.Unlock()
	w.outcome = w.f.commitErr
	return w.outcome
}

func (w *fakeWork) Rollback(ctx context.Context) error {
	w.f.call("rollback")
	w.f.record("Rollback", ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.ended = true
		w.pending = nil
		w.outcome = w.f.rollbackErr
	}
	return w.outcome
}

// chargeOnce is a payments handler on the transaction: it charges, then
// answers 201 with a body naming the charge.
func chargeOnce(w http.ResponseWriter, r *http.Request) {
	if err := exec(r.Context(), "charge"); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/1")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"id":"ch_1"}`)
}

func TestNewTransactional(t *testing.T) {
	caller := func(*http.Request) (string, error) { return "a", nil }
	t.Run("refuses a Store that is not a replay.Transactor", func(t *testing.T) {
		_, err := New(Config{Store: newStore(), Caller: caller, Keys: testKeys, Transactional: true})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Transactional") {
			t.Fatalf("err %v, want ErrConfig naming Transactional", err)
		}
	})
	t.Run("accepts a replay.Transactor", func(t *testing.T) {
		if _, err := New(Config{Store: newFakeTransactor(), Caller: caller, Keys: testKeys, Transactional: true}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a Transactor store without Transactional runs no transaction", func(t *testing.T) {
		st := newFakeTransactor()
		f := newFixture(t, Config{Store: st}, nil)
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || st.callList() != "confirm" {
			t.Fatalf("status %d, calls %q", w.Code, st.callList())
		}
	})
}

// TestTransactionalSettlesEveryOutcome runs the handler of each outcome
// once under Transactional and checks the store calls, what the client
// got, what was committed, the observed event, and what a retry gets.
func TestTransactionalSettlesEveryOutcome(t *testing.T) {
	bigBody := strings.Repeat("x", 100)
	for _, tc := range []struct {
		name      string
		store     func(*fakeTransactor)
		cfg       Config
		handler   http.HandlerFunc
		calls     string // the store calls, in order
		status    int    // what the client gets
		body      string // "" : not checked
		committed int    // charges committed
		reason    observe.RefusalReason
		outcome   observe.Outcome
		log       string // in the log at ERROR or WARN; "" none
		retry     int    // status of a retry
		replayed  bool   // the retry is a replay
		unknown   bool   // the 503 is the outcome-unknown problem, Retry-After the lease's end
	}{
		{
			name: "2xx commits the charge with the record, then is sent", handler: chargeOnce,
			calls: "begin,commit", status: 201, body: `{"id":"ch_1"}`, committed: 1, outcome: observe.OutcomeProcessed,
			retry: 201, replayed: true,
		},
		{
			name: "4xx is committed as the handler's decision",
			handler: func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "note")
				http.Error(w, "card declined", http.StatusPaymentRequired)
			},
			calls: "begin,commit", status: 402, committed: 1, outcome: observe.OutcomeProcessed, retry: 402, replayed: true,
		},
		{
			name:    "nothing written before the deadline is an empty 200 committed",
			handler: func(w http.ResponseWriter, r *http.Request) { exec(r.Context(), "charge") },
			calls:   "begin,commit", status: 200, committed: 1, outcome: observe.OutcomeProcessed, retry: 200, replayed: true,
		},
		{
			name: "a retry status rolls the charge back and releases the key",
			handler: func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "charge")
				http.Error(w, "downstream failed", http.StatusBadGateway)
			},
			calls: "begin,rollback,release", status: 502, body: "downstream failed\n", committed: 0,
			reason: observe.ReasonIdempotencyHandlerRetry, outcome: observe.OutcomeReleased, retry: 502,
		},
		{
			name:  "a rollback that fails is logged at Error, and the key released all the same",
			store: func(s *fakeTransactor) { s.rollbackErr = errInjected },
			handler: func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "charge")
				http.Error(w, "downstream failed", http.StatusBadGateway)
			},
			calls: "begin,rollback,release", status: 502, body: "downstream failed\n", committed: 0,
			reason: observe.ReasonIdempotencyHandlerRetry, outcome: observe.OutcomeReleased, log: "could not be rolled back", retry: 502,
		},
		{
			name: "nothing written after the deadline rolls back, releases and answers 503",
			cfg:  Config{Lease: 40 * time.Millisecond, RetryAfter: 2 * time.Second},
			handler: func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "charge")
				w.Header().Set("X-Charge", "ch_1")
				<-r.Context().Done()
			},
			calls: "begin,rollback,release", status: 503, committed: 0,
			reason: observe.ReasonIdempotencyHandlerDeadline, outcome: observe.OutcomeReleased, log: "after its deadline", retry: 503,
		},
		{
			name:  "a lost lease at the commit keeps nothing and answers 503 without the handler's response",
			store: func(s *fakeTransactor) { s.loseLease = true }, handler: chargeOnce, cfg: Config{RetryAfter: 2 * time.Second},
			calls: "begin,commit", status: 503, committed: 0,
			reason: observe.ReasonIdempotencyLeaseLost, outcome: observe.OutcomeStoreFailure, log: "lease ran out", retry: 409,
		},
		{
			// The retry runs the handler at once (and is rolled back again
			// by this store): not the 409 of a key left leased.
			name:  "a commit the store rolled back keeps nothing, releases the key and answers 503",
			store: func(s *fakeTransactor) { s.rollBack = true }, handler: chargeOnce, cfg: Config{RetryAfter: 2 * time.Second},
			calls: "begin,commit,release", status: 503, committed: 0,
			reason: observe.ReasonIdempotencyStoreConfirm, outcome: observe.OutcomeStoreFailure, log: "rolled the handler's transaction back", retry: 503,
		},
		{
			name:  "a commit with an unknown outcome that did not apply answers 503 outcome unknown and leaves the key leased",
			store: func(s *fakeTransactor) { s.commitErr = errInjected }, handler: chargeOnce, cfg: Config{RetryAfter: 2 * time.Second, Lease: 30 * time.Second},
			calls: "begin,commit", status: 503, committed: 0,
			reason: observe.ReasonIdempotencyOutcomeUnknown, outcome: observe.OutcomeStoreFailure, log: "unknown outcome", retry: 409, unknown: true,
		},
		{
			name:  "a commit with an unknown outcome that applied answers 503 outcome unknown, and the retry gets the committed response",
			store: func(s *fakeTransactor) { s.commitErr = errInjected; s.commitApplied = true }, handler: chargeOnce,
			cfg:   Config{RetryAfter: 2 * time.Second, Lease: 30 * time.Second},
			calls: "begin,commit", status: 503, committed: 1,
			reason: observe.ReasonIdempotencyOutcomeUnknown, outcome: observe.OutcomeStoreFailure, log: "unknown outcome", retry: 201, replayed: true, unknown: true,
		},
		{
			name:  "a transaction that cannot begin releases the key, answers 503 and does not run the handler",
			store: func(s *fakeTransactor) { s.beginErr = errInjected }, handler: chargeOnce, cfg: Config{RetryAfter: 2 * time.Second},
			calls: "begin,release", status: 503, committed: 0,
			reason: observe.ReasonIdempotencyStoreBegin, outcome: observe.OutcomeStoreFailure, log: "could not begin", retry: 201,
		},
		{
			name:  "a store answering BeginWork with no Work is a store failure: key released, handler not run",
			store: func(s *fakeTransactor) { s.nilWork = true }, handler: chargeOnce, cfg: Config{RetryAfter: 2 * time.Second},
			calls: "begin,release", status: 503, committed: 0,
			reason: observe.ReasonIdempotencyStoreBegin, outcome: observe.OutcomeStoreFailure, log: "outside the Recorder contract", retry: 201,
		},
		{
			name: "a response over MaxResponseBytes is held, committed with the too-large marker, then sent whole",
			cfg:  Config{MaxResponseBytes: 64},
			handler: func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "charge")
				io.WriteString(w, bigBody[:50])
				http.NewResponseController(w).Flush()
				io.WriteString(w, bigBody[50:])
				exec(r.Context(), "receipt") // after the cap: still in the transaction
			},
			calls: "begin,commit", status: 200, body: bigBody, committed: 2, outcome: observe.OutcomeProcessed,
			log: "over MaxResponseBytes", retry: 500,
		},
		{
			name: "a retry status over MaxResponseBytes is held, rolled back, released, then sent whole",
			cfg:  Config{MaxResponseBytes: 64},
			handler: func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "charge")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, bigBody)
			},
			calls: "begin,rollback,release", status: 503, body: bigBody, committed: 0,
			reason: observe.ReasonIdempotencyHandlerRetry, outcome: observe.OutcomeReleased, retry: 503,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeTransactor()
			if tc.store != nil {
				tc.store(st)
			}
			cfg := tc.cfg
			cfg.Store, cfg.Transactional = st, true
			f := newFixture(t, cfg, tc.handler)
			w := httptest.NewRecorder()
			w.Header().Set("X-Outer", "kept") // set by a middleware around this one
			f.h.ServeHTTP(w, req(http.MethodPost, "/payments", "alice", key1, `{}`))
			if got := st.callList(); got != tc.calls {
				t.Errorf("store calls %q, want %q", got, tc.calls)
			}
			if w.Code != tc.status || (tc.body != "" && w.Body.String() != tc.body) {
				t.Fatalf("answer %d %q, want %d %q", w.Code, w.Body, tc.status, tc.body)
			}
			if w.Header().Get("X-Outer") != "kept" {
				t.Errorf("an outer middleware's header was dropped: %v", w.Header())
			}
			if tc.status == http.StatusServiceUnavailable && tc.body == "" {
				// The middleware's own 503: never the handler's headers.
				p := problemOf(t, w, http.StatusServiceUnavailable)
				wantType, wantRetry := "about:blank", "2"
				if tc.unknown {
					// Not the outage's 503: the lease, taken apart from
					// the transaction (BeginWork), ends in 30 s, and the
					// retry learns the outcome then.
					wantType, wantRetry = ProblemOutcomeUnknown, "30"
				}
				if p["type"] != wantType {
					t.Errorf("problem type %v, want %s", p["type"], wantType)
				}
				if w.Header().Get("Retry-After") != wantRetry || w.Header().Get("Location") != "" || w.Header().Get("X-Charge") != "" {
					t.Errorf("headers %v, want Retry-After %s", w.Header(), wantRetry)
				}
			}
			if got := len(st.committedList()); got != tc.committed {
				t.Errorf("committed %v, want %d statements", st.committedList(), tc.committed)
			}
			if e := f.obs.last(t); e.Outcome != tc.outcome || e.Reason != tc.reason || e.StoreLatency <= 0 {
				t.Errorf("event %+v, want outcome %v reason %v", e, tc.outcome, tc.reason)
			}
			if n := len(f.obs.all()); n != 1 {
				t.Errorf("%d events for one request", n)
			}
			logs := f.logs.String()
			if tc.log == "" && logs != "" || tc.log != "" && !strings.Contains(logs, tc.log) {
				t.Errorf("log %q, want %q", logs, tc.log)
			}
			if strings.Contains(logs, "injected") != (st.beginErr != nil || st.commitErr != nil || st.rollbackErr != nil) {
				t.Errorf("log %q: the store's error is missing or unexpected", logs)
			}
			runs := f.runs.Load()
			if ran := runs != 0; ran != (tc.calls != "begin,release") {
				t.Errorf("handler ran %d times with store calls %q", runs, tc.calls)
			}
			st.beginErr, st.nilWork = nil, false
			r := f.post(key1, `{}`)
			if r.Code != tc.retry || (r.Header().Get(ReplayedHeader) == "true") != tc.replayed {
				t.Fatalf("retry %d replayed %q, want %d replayed %v", r.Code, r.Header().Get(ReplayedHeader), tc.retry, tc.replayed)
			}
			if tc.replayed && (r.Body.String() != w.Body.String() && tc.status == tc.retry) {
				t.Errorf("replay %q, first %q", r.Body, w.Body)
			}
			if tc.replayed && f.runs.Load() != runs {
				t.Errorf("the replay ran the handler")
			}
		})
	}
}

// TestTransactionalPanicRollsBackAndReleases pins the panic outcome: the
// charge is rolled back, the key released, and the panic goes on.
func TestTransactionalPanicRollsBackAndReleases(t *testing.T) {
	st := newFakeTransactor()
	f := newFixture(t, Config{Store: st, Transactional: true}, func(w http.ResponseWriter, r *http.Request) {
		exec(r.Context(), "charge")
		panic("boom")
	})
	func() {
		defer func() {
			if pv := recover(); pv != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", pv)
			}
		}()
		f.post(key1, `{}`)
	}()
	if st.callList() != "begin,rollback,release" || len(st.committedList()) != 0 {
		t.Fatalf("calls %q, committed %v", st.callList(), st.committedList())
	}
	if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased || e.Reason != observe.ReasonIdempotencyHandlerPanic {
		t.Errorf("event %+v", e)
	}
}

// TestTransactionalStatementsAfterTheEndAreRefused pins that a goroutine
// of the handler that outlives it cannot write: its transaction ended
// with the request.
func TestTransactionalStatementsAfterTheEndAreRefused(t *testing.T) {
	for _, status := range []int{http.StatusCreated, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			st := newFakeTransactor()
			late := make(chan error, 1)
			f := newFixture(t, Config{Store: st, Transactional: true}, func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "charge")
				ctx := r.Context()
				go func() {
					time.Sleep(20 * time.Millisecond)
					late <- exec(ctx, "late write")
				}()
				w.WriteHeader(status)
			})
			f.post(key1, `{}`)
			if err := <-late; !errors.Is(err, errTxDone) {
				t.Fatalf("late statement: %v, want it refused", err)
			}
			want := 0
			if status == http.StatusCreated {
				want = 1
			}
			if got := st.committedList(); len(got) != want {
				t.Fatalf("committed %v", got)
			}
		})
	}
}

// TestTransactionalLogsNeverHoldTheKeyTheCallerOrABody pins that the
// records the transactional path logs (a transaction that cannot begin, a
// lost lease, an unknown commit, a failed rollback) name no key, caller or
// body.
func TestTransactionalLogsNeverHoldTheKeyTheCallerOrABody(t *testing.T) {
	const caller, key, reqBody, respBody = "caller-secret-7", "key-secret-9", "request-secret-3", "response-secret-5"
	for name, fault := range map[string]func(*fakeTransactor){
		"begin":    func(s *fakeTransactor) { s.beginErr = errInjected },
		"lease":    func(s *fakeTransactor) { s.loseLease = true },
		"commit":   func(s *fakeTransactor) { s.commitErr = errInjected },
		"rollback": func(s *fakeTransactor) { s.rollbackErr = errInjected },
	} {
		t.Run(name, func(t *testing.T) {
			st := newFakeTransactor()
			fault(st)
			status := http.StatusCreated
			if name == "rollback" {
				status = http.StatusInternalServerError
			}
			f := newFixture(t, Config{Store: st, Transactional: true}, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				io.WriteString(w, respBody)
			})
			f.do(req(http.MethodPost, "/payments", caller, `"`+key+`"`, `{"x":"`+reqBody+`"}`))
			logs := f.logs.String()
			if !strings.Contains(logs, "level=") {
				t.Fatal("nothing logged")
			}
			for _, secret := range []string{caller, key, reqBody, respBody} {
				if strings.Contains(logs, secret) {
					t.Errorf("log holds %q: %s", secret, logs)
				}
			}
		})
	}
}

// TestHandlerGoexitReleasesTheKey: a handler that ends its goroutine with
// runtime.Goexit (t.FailNow, a library's) returns no response, as a panic
// does: the key is released (and, in the transactional mode, the work
// rolled back first), so the retry runs the handler, never leaving the
// key leased or a transaction open.
func TestHandlerGoexitReleasesTheKey(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		t.Run(fmt.Sprint("transactional=", transactional), func(t *testing.T) {
			st := newFakeTransactor()
			var runs atomic.Int32
			f := newFixture(t, Config{Store: st, Transactional: transactional}, func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					if transactional {
						exec(r.Context(), "charge")
					}
					runtime.Goexit()
				}
				w.WriteHeader(http.StatusCreated)
			})
			done := make(chan struct{})
			go func() {
				defer close(done)
				f.post(key1, `{}`)
			}()
			<-done
			if transactional && (st.callList() != "begin,rollback,release" || len(st.committedList()) != 0) {
				t.Fatalf("calls %q, committed %v; want the work rolled back and the key released", st.callList(), st.committedList())
			}
			if w := f.post(key1, `{}`); w.Code != http.StatusCreated || runs.Load() != 2 {
				t.Fatalf("retry: %d after %d runs; want 201 from a second run", w.Code, runs.Load())
			}
		})
	}
}

// fakeAcquirer is a fakeTransactor that is also a replay.WorkAcquirer:
// AcquireWork takes the MemoryStore's record lease and returns a Work
// whose Rollback releases it, as a store whose lease is the transaction.
type fakeAcquirer struct {
	*fakeTransactor
	noWork    bool // AcquireWork answers acquired without a Work
	extraWork bool // AcquireWork answers busy or done with a Work
	extra     *fakeWork
}

func (f *fakeAcquirer) AcquireWork(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, replay.Work, error) {
	f.call("acquirework")
	rec, err := f.MemoryStore.AcquireRecord(ctx, id, lease, fp)
	if err != nil {
		return rec, nil, err
	}
	if rec.State != replay.LeaseAcquired {
		if f.extraWork {
			f.extra = &fakeWork{f: f.fakeTransactor, id: id}
			return rec, f.extra, nil
		}
		return rec, nil, nil
	}
	if f.noWork {
		return rec, nil, nil
	}
	return rec, &acquiredWork{fakeWork: fakeWork{f: f.fakeTransactor, id: id, token: rec.Token}}, nil
}

// acquiredWork is the Work of fakeAcquirer: its Rollback frees the key.
type acquiredWork struct{ fakeWork }

func (w *acquiredWork) Context(ctx context.Context) context.Context {
	return w.fakeWork.Context(ctx)
}

func (w *acquiredWork) Commit(ctx context.Context, until time.Time, fp, result []byte) error {
	err := w.fakeWork.Commit(ctx, until, fp, result)
	if errors.Is(err, replay.ErrLeaseLost) || errors.Is(err, replay.ErrRolledBack) {
		w.f.MemoryStore.ReleaseLease(ctx, w.id, w.token) // the transaction ended: the key is free
	}
	return err
}

func (w *acquiredWork) Rollback(ctx context.Context) error {
	err := w.fakeWork.Rollback(ctx)
	w.f.MemoryStore.ReleaseLease(ctx, w.id, w.token)
	return err
}

// TestTransactionalWithAWorkAcquirer: with a store that takes the lease
// in the handler's transaction (replay.WorkAcquirer), the middleware asks
// it for the Work instead of AcquireRecord and BeginWork, commits the
// record with the charge, frees the key by the Work's Rollback (no
// ReleaseLease), and answers 503 for an answer outside the contract,
// holding nothing.
func TestTransactionalWithAWorkAcquirer(t *testing.T) {
	tests := []struct {
		name      string
		store     func(*fakeAcquirer)
		handler   http.HandlerFunc
		calls     string
		status    int
		committed int
		retry     int
	}{
		{
			name: "2xx commits the charge with the record", handler: chargeOnce,
			calls: "acquirework,commit", status: 201, committed: 1, retry: 201,
		},
		{
			name: "a retry status rolls back, which frees the key",
			handler: func(w http.ResponseWriter, r *http.Request) {
				exec(r.Context(), "charge")
				http.Error(w, "downstream failed", http.StatusBadGateway)
			},
			// The release is the Work's Rollback again: a no-op.
			calls: "acquirework,rollback,rollback", status: 502, committed: 0, retry: 502,
		},
		{
			name: "a lost lease keeps nothing; the retry runs once the Work ended", store: func(f *fakeAcquirer) { f.loseLease = true },
			handler: chargeOnce, calls: "acquirework,commit", status: 503, committed: 0, retry: 201,
		},
		{
			name: "acquired without a Work is refused", store: func(f *fakeAcquirer) { f.noWork = true },
			handler: chargeOnce, calls: "acquirework", status: 503, committed: 0, retry: 409,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeAcquirer{fakeTransactor: newFakeTransactor()}
			if tt.store != nil {
				tt.store(st)
			}
			f := newFixture(t, Config{Store: st, Transactional: true}, tt.handler)
			if r := f.post(key1, `{}`); r.Code != tt.status {
				t.Fatalf("status %d (%s), want %d", r.Code, r.Body, tt.status)
			}
			if got := st.callList(); got != tt.calls {
				t.Errorf("store calls %q, want %q", got, tt.calls)
			}
			if got := len(st.committedList()); got != tt.committed {
				t.Errorf("%d statements committed, want %d", got, tt.committed)
			}
			st.loseLease, st.noWork = false, false
			if r := f.post(key1, `{}`); r.Code != tt.retry {
				t.Errorf("retry: status %d (%s), want %d", r.Code, r.Body, tt.retry)
			}
		})
	}
	t.Run("a done answer with a Work rolls that Work back", func(t *testing.T) {
		st := &fakeAcquirer{fakeTransactor: newFakeTransactor()}
		f := newFixture(t, Config{Store: st, Transactional: true}, chargeOnce)
		first := f.post(key1, `{}`)
		st.extraWork = true
		if r := f.post(key1, `{}`); r.Code != first.Code || r.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("retry %d (%s), want the replay of %d", r.Code, r.Body, first.Code)
		}
		if st.extra == nil || !st.extra.ended {
			t.Fatal("the Work returned with a done answer was not rolled back")
		}
	})
}

// TestTransactionalStoreStepsRunUnderADeadlineOnlyContext: under
// Transactional, the store steps around the handler (the transaction's
// begin, its commit, its rollback, a release, and a held work's rollback,
// which frees its key) run under a context that only its deadline ends
// (replay.WithDeadlineOnly), however the client's request ends (it is
// cancelled while the handler runs), so that a store whose client enforces
// deadlines itself could run them on the caller's goroutine. Each deadline
// is the one meant: the begin's a quarter of the lease after the lease
// ends, the commit's at the lease's end, a rollback's and a release's a
// quarter of the lease after they began.
func TestTransactionalStoreStepsRunUnderADeadlineOnlyContext(t *testing.T) {
	const lease = time.Minute
	retry := func(w http.ResponseWriter, r *http.Request) {
		exec(r.Context(), "charge")
		http.Error(w, "downstream failed", http.StatusBadGateway)
	}
	tests := []struct {
		name     string
		acquirer bool // the store is a WorkAcquirer: the lease is the work
		store    func(*fakeTransactor)
		handler  http.HandlerFunc
		status   int
		want     []stepWant
	}{
		{
			name: "2xx: begun and committed", handler: chargeOnce, status: http.StatusCreated,
			want: []stepWant{{"BeginWork", lease + lease/4}, {"Commit", lease}},
		},
		{
			name: "a retry status: rolled back and released", handler: retry, status: http.StatusBadGateway,
			want: []stepWant{{"BeginWork", lease + lease/4}, {"Rollback", lease / 4}, {"ReleaseLease", lease / 4}},
		},
		{
			name: "a commit the store rolled back: released", store: func(f *fakeTransactor) { f.rollBack = true },
			handler: chargeOnce, status: http.StatusServiceUnavailable,
			want: []stepWant{{"BeginWork", lease + lease/4}, {"Commit", lease}, {"ReleaseLease", lease / 4}},
		},
		{
			name: "a held work, 2xx: committed", acquirer: true, handler: chargeOnce, status: http.StatusCreated,
			want: []stepWant{{"Commit", lease}},
		},
		{
			name: "a held work, a retry status: rolled back, then ended to free the key", acquirer: true,
			handler: retry, status: http.StatusBadGateway,
			want: []stepWant{{"Rollback", lease / 4}, {"Rollback", lease / 4}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTransactor()
			if tc.store != nil {
				tc.store(tx)
			}
			var store replay.Recorder = tx
			if tc.acquirer {
				store = &fakeAcquirer{fakeTransactor: tx}
			}
			r, cancel := cancellable(req(http.MethodPost, "/payments", "alice", key1, `{}`))
			defer cancel()
			f := newFixture(t, Config{Store: store, Lease: lease, Transactional: true}, func(w http.ResponseWriter, r *http.Request) {
				cancel() // the client goes away while the handler runs
				tc.handler(w, r)
			})
			from := time.Now()
			w := f.do(r)
			to := time.Now()
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			checkSteps(t, tx.list(), tc.want, from, to)
		})
	}
}
