package idempotencytest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// RunTransactionalContract runs the idempotency middleware in its
// transactional mode ([idempotency.Config.Transactional]) against a fresh
// store and its effects from newWork per test: the handler makes one
// effect per run in the request's transaction ([replaytest.Effects]). A
// key ends with one committed effect and every final answer is the
// committing run's: when copies race on two instances, when a run fails
// (5xx), when the client leaves after the effect, when an
// [http.TimeoutHandler] inside answers before its handler returns, and,
// unless a Work holds the store's only writer ([replay.OneWriter]), when
// the handler outlives its lease; nor does a plain instance on the same
// store disagree while a run is in progress. A store that is a
// [replay.Transactor] runs it (storetest.Exercise does).
func RunTransactionalContract(t *testing.T, newWork func(t *testing.T) (replaytest.WorkStore, replaytest.Effects)) {
	tests := []struct {
		name             string
		fn               func(t *testing.T, s replaytest.WorkStore, e replaytest.Effects)
		concurrentWriter bool // needs a writer beside an open Work
	}{
		{"ConcurrentCopiesOnTwoInstancesCommitOnce", copiesCommitOnce, false},
		{"FailedRunKeepsNothing", failedRunKeepsNothing, false},
		{"ClientLeavingAfterTheEffectKeepsIt", clientLeavingKeepsIt, false},
		{"TimeoutHandlerInsideKeepsOneEffect", timeoutHandlerInside, false},
		{"HandlerOutlivingItsLeaseKeepsNothing", outlivingItsLease, true},
		{"PlainInstanceAgreesWhileARunIsInProgress", plainInstanceAgrees, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, e := newWork(t)
			if w, ok := s.(replay.OneWriter); tc.concurrentWriter && ok && w.WorkHoldsWriter() {
				t.Skip("a Work holds the store's only writer")
			}
			tc.fn(t, s, e)
		})
	}
}

// txApp is the handler: each run makes its effect in the request's
// transaction, runs hook (if set) with its run number, and answers 201
// with a body unique to the run unless hook answered.
type txApp struct {
	e    replaytest.Effects
	runs atomic.Int32
	hook func(n int32, w http.ResponseWriter, r *http.Request) bool // false: answered
}

func (a *txApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := a.runs.Add(1)
	if err := a.e.Write(r.Context(), "charge"); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if a.hook != nil && !a.hook(n, w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json") // recorded and replayed
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run":%d,"id":%q}`, n, rand.Text())
}

// txKeys is the keyring of every middleware of the contract.
var txKeys = func() *ctoken.Keyring {
	k, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		panic(err) // a random key always makes a keyring
	}
	return k
}()

// wrap returns h behind the middleware on s, in the transactional mode
// when tx, with lease.
func wrap(t *testing.T, s replay.Recorder, tx bool, lease time.Duration, h http.Handler) http.Handler {
	t.Helper()
	mw, err := idempotency.New(idempotency.Config{
		Store: s, Keys: txKeys, Required: true, Lease: lease, Transactional: tx,
		Caller: func(*http.Request) (string, error) { return "alice", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return mw.Wrap(h)
}

// send makes one attempt with key and body on h, with ctx.
func send(ctx context.Context, h http.Handler, key, body string) (int, string) {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charge", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

const txBody = `{"amount":100}`

// untilCreated retries key on h while it is refused for now (409, 503),
// for at most 30 s, and returns the 201's body.
func untilCreated(t *testing.T, h http.Handler, key string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		switch code, body := send(context.Background(), h, key, txBody); code {
		case http.StatusCreated:
			return body
		case http.StatusConflict, http.StatusServiceUnavailable:
		default:
			t.Errorf("%s: %d %q; want 201, or 409 or 503 for now", key, code, body)
			return ""
		}
	}
	t.Errorf("%s: no 201 within 30 s", key)
	return ""
}

// settled checks that the key has one committed effect, from runs runs
// (any number if negative), and that h answers a retry with want.
func settled(t *testing.T, e replaytest.Effects, a *txApp, runs int32, h http.Handler, want string) {
	t.Helper()
	if n := e.Count(t, "charge"); n != 1 {
		t.Fatalf("%d effects committed; want 1", n)
	}
	if code, body := send(context.Background(), h, "k", txBody); code != http.StatusCreated || body != want {
		t.Fatalf("a retry: %d %q; want 201 %q", code, body, want)
	}
	if n := a.runs.Load(); runs >= 0 && n != runs {
		t.Fatalf("the handler ran %d times; want %d", n, runs)
	}
}

func copiesCommitOnce(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	a := &txApp{e: e}
	instances := []http.Handler{wrap(t, s, true, time.Minute, a), wrap(t, s, true, time.Minute, a)}
	bodies := make([]string, 16)
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bodies[i] = untilCreated(t, instances[i%2], "k")
		}()
	}
	wg.Wait()
	for i, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("copy %d got %q, copy 0 %q: two runs answered", i, b, bodies[0])
		}
	}
	settled(t, e, a, 1, instances[1], bodies[0])
}

func failedRunKeepsNothing(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	a := &txApp{e: e, hook: func(n int32, w http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			http.Error(w, "failed after the effect", http.StatusInternalServerError)
		}
		return n != 1
	}}
	h := wrap(t, s, true, time.Minute, a)
	if code, body := send(context.Background(), h, "k", txBody); code != http.StatusInternalServerError {
		t.Fatalf("the failing run: %d %q; want 500", code, body)
	}
	if n := e.Count(t, "charge"); n != 0 {
		t.Fatalf("%d effects kept from the failed run; want 0", n)
	}
	code, body := send(context.Background(), h, "k", txBody)
	if code != http.StatusCreated {
		t.Fatalf("the retry: %d %q; want 201", code, body)
	}
	settled(t, e, a, 2, h, body)
}

// clientLeavingKeepsIt: the client leaves once the effect is made; the
// handler's next step, bound to its context, still runs, and the run
// commits.
func clientLeavingKeepsIt(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	ctx, leave := context.WithCancel(context.Background())
	a := &txApp{e: e, hook: func(_ int32, w http.ResponseWriter, r *http.Request) bool {
		leave()
		if err := r.Context().Err(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return false
		}
		return true
	}}
	h := wrap(t, s, true, time.Minute, a)
	code, body := send(ctx, h, "k", txBody)
	if code != http.StatusCreated {
		t.Fatalf("the run the client left: %d %q; want 201", code, body)
	}
	settled(t, e, a, 1, h, body)
}

// timeoutHandlerInside: an http.TimeoutHandler inside the middleware
// answers 503 while the first run, its effect made, goes on; that 503
// rolls the run back, and the retry runs and commits once.
func timeoutHandlerInside(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	resume, returned := make(chan struct{}), make(chan struct{})
	a := &txApp{e: e, hook: func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			defer close(returned)
			<-resume
		}
		return true
	}}
	h := wrap(t, s, true, time.Minute, http.TimeoutHandler(a, time.Second, "timeout"))
	if code, body := send(context.Background(), h, "k", txBody); code != http.StatusServiceUnavailable {
		t.Fatalf("the timed-out run: %d %q; want 503", code, body)
	}
	close(resume)
	<-returned
	// A retry slower than the timeout is one more run rolled back.
	settled(t, e, a, -1, h, untilCreated(t, h, "k"))
}

// outlivingItsLease: the first run, its effect made, waits until a retry
// past its lease has run the handler, then answers 201: that answer is
// not sent (503), and only the retry's effect is kept.
func outlivingItsLease(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	const lease = 2 * time.Second
	running, overtaken := make(chan struct{}), make(chan struct{})
	a := &txApp{e: e, hook: func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		switch n {
		case 1:
			close(running)
			select { // ignores its context: outlives its lease
			case <-overtaken:
			case <-time.After(60 * time.Second):
				t.Error("no retry ran the handler within 60 s")
			}
		case 2:
			close(overtaken)
		}
		return true
	}}
	h := wrap(t, s, true, lease, a)
	first := make(chan int)
	go func() {
		code, _ := send(context.Background(), h, "k", txBody)
		first <- code
	}()
	<-running
	retry := untilCreated(t, h, "k")
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("the run that outlived its lease answered %d; want 503", code)
	}
	// A retry that also outlives its lease on a loaded machine is one
	// more run, and still one effect.
	settled(t, e, a, -1, h, retry)
}

// plainInstanceAgrees: a transactional and a plain instance on one store
// (the lease an open Work, or a committed row): while either runs a
// key's first request, both answer the same request 409 and a changed
// one 422; once it is done both replay its answer.
func plainInstanceAgrees(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	started, release := make(chan struct{}), make(chan struct{})
	block := func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 { // a run beside the first would not wait
			started <- struct{}{}
			<-release
		}
		return true
	}
	a := &txApp{e: e, hook: block}
	txH := wrap(t, s, true, time.Minute, a)
	var plainRuns atomic.Int32
	plainH := wrap(t, s, false, time.Minute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		block(plainRuns.Add(1), w, r)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"plain":true}`)
	}))
	for i, firstH := range []http.Handler{txH, plainH} {
		key := fmt.Sprint("first-", i)
		first := make(chan string)
		go func() {
			code, body := send(context.Background(), firstH, key, txBody)
			if code != http.StatusCreated {
				t.Errorf("the first request: %d %q; want 201", code, body)
			}
			first <- body
		}()
		<-started
		for _, h := range []http.Handler{txH, plainH} {
			if code, body := send(context.Background(), h, key, txBody); code != http.StatusConflict {
				t.Errorf("the same request while the first runs: %d %q; want 409", code, body)
			}
			if code, body := send(context.Background(), h, key, `{"amount":999}`); code != http.StatusUnprocessableEntity {
				t.Errorf("a changed request while the first runs: %d %q; want 422", code, body)
			}
		}
		release <- struct{}{}
		want := <-first
		for _, h := range []http.Handler{txH, plainH} {
			if code, body := send(context.Background(), h, key, txBody); code != http.StatusCreated || body != want {
				t.Errorf("the same request after the first: %d %q; want 201 %q", code, body, want)
			}
			if code, body := send(context.Background(), h, key, `{"amount":999}`); code != http.StatusUnprocessableEntity {
				t.Errorf("a changed request after the first: %d %q; want 422", code, body)
			}
		}
	}
	if a.runs.Load() != 1 || plainRuns.Load() != 1 || e.Count(t, "charge") != 1 {
		t.Fatalf("%d transactional runs, %d plain, %d effects; want one of each", a.runs.Load(), plainRuns.Load(), e.Count(t, "charge"))
	}
}
