package webhooktest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/ctoken/ctoken/webhook"
)

// RunTransactionalContract runs the webhook verifier in its transactional
// mode ([webhook.Config.Transactional]) against a fresh store and its
// effects from newWork per test: the handler makes one effect per run in
// the delivery's transaction ([replaytest.Effects]). A delivery ends with
// one committed effect: when copies race on two instances, when a run
// fails (5xx), and, unless a Work holds the store's only writer
// ([replay.OneWriter]), when the handler outlives its lease (that run
// answered 503, as a lost lease). Through [webhook.Lease.Begin], Confirm
// commits the effect with the record, Release rolls it back, a Confirm
// past the lease keeps nothing (replay.ErrLeaseLost) whether or not
// another attempt took the delivery, and no write follows the end. A
// store that is a [replay.Transactor] runs it (storetest.Exercise does).
func RunTransactionalContract(t *testing.T, newWork func(t *testing.T) (replaytest.WorkStore, replaytest.Effects)) {
	tests := []struct {
		name             string
		fn               func(t *testing.T, s replaytest.WorkStore, e replaytest.Effects)
		concurrentWriter bool // needs a writer beside an open Work
	}{
		{"CopiesOnTwoInstancesCommitOnce", txCopiesCommitOnce, false},
		{"FailedRunKeepsNothing", txFailedRunKeepsNothing, false},
		{"HandlerOutlivingItsLeaseKeepsNothing", txOutlivingItsLease, true},
		{"LeaseBeginConfirmOrRelease", txLeaseBegin(false), false},
		{"LeaseBeginPastItsLease", txLeaseBegin(true), true},
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

const txSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// txApp is the handler: each run makes its effect in the delivery's
// transaction, then runs hook (if set) with its run number and answers
// its status (201 without hook).
type txApp struct {
	e    replaytest.Effects
	runs atomic.Int32
	hook func(n int32) int
}

func (a *txApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := a.runs.Add(1)
	if err := a.e.Write(r.Context(), "delivery"); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	status := http.StatusCreated
	if a.hook != nil {
		status = a.hook(n)
	}
	w.WriteHeader(status)
}

// txReceiver returns a in front of the verifier on s in the
// transactional mode, with lease, and a sender of the one delivery.
func txReceiver(t *testing.T, s replay.Store, lease time.Duration, a *txApp) (h http.Handler, send func(h http.Handler) int) {
	t.Helper()
	cfg := webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{txSecret}}
	signer, err := webhook.NewSigner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Replay, cfg.Namespace, cfg.Lease, cfg.Transactional = s, "tx", lease, true
	v, err := webhook.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v.Middleware(a), func(h http.Handler) int {
		const body = `{"type":"charge.requested"}`
		req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
		if err := signer.Sign(req.Header, "msg_tx", []byte(body)); err != nil {
			t.Error(err)
			return 0
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
}

// untilHandled redelivers while h answers 503 (in progress), for at
// most 30 s, and returns the last answer.
func untilHandled(h http.Handler, send func(http.Handler) int) int {
	code := send(h)
	for deadline := time.Now().Add(30 * time.Second); code == http.StatusServiceUnavailable && time.Now().Before(deadline); code = send(h) {
		time.Sleep(20 * time.Millisecond)
	}
	return code
}

// txHandledOnce checks that the delivery has one committed effect, from
// runs runs (any number if negative), and that a later copy is a
// duplicate (200).
func txHandledOnce(t *testing.T, e replaytest.Effects, a *txApp, runs int32, h http.Handler, send func(http.Handler) int) {
	t.Helper()
	if n := e.Count(t, "delivery"); n != 1 {
		t.Fatalf("%d effects committed; want 1", n)
	}
	if code := send(h); code != http.StatusOK {
		t.Fatalf("a later copy: %d; want 200", code)
	}
	if n := a.runs.Load(); runs >= 0 && n != runs {
		t.Fatalf("the handler ran %d times; want %d", n, runs)
	}
}

func txCopiesCommitOnce(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	a := &txApp{e: e}
	one, send := txReceiver(t, s, time.Minute, a)
	other, _ := txReceiver(t, s, time.Minute, a)
	var created atomic.Int32
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch code := untilHandled([]http.Handler{one, other}[i%2], send); code {
			case http.StatusCreated:
				created.Add(1)
			case http.StatusOK:
			default:
				t.Errorf("copy %d: %d; want 201 or 200 (a duplicate)", i, code)
			}
		}()
	}
	wg.Wait()
	if n := created.Load(); n != 1 {
		t.Fatalf("%d copies got the handler's 201; want 1", n)
	}
	txHandledOnce(t, e, a, 1, other, send)
}

func txFailedRunKeepsNothing(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	a := &txApp{e: e, hook: func(n int32) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusCreated
	}}
	h, send := txReceiver(t, s, time.Minute, a)
	if code := send(h); code != http.StatusInternalServerError {
		t.Fatalf("the failing run: %d; want 500", code)
	}
	if n := e.Count(t, "delivery"); n != 0 {
		t.Fatalf("%d effects kept from the failed run; want 0", n)
	}
	if code := send(h); code != http.StatusCreated {
		t.Fatalf("the redelivery: %d; want 201", code)
	}
	txHandledOnce(t, e, a, 2, h, send)
}

// txOutlivingItsLease: the first run, its effect made, waits until a
// copy past its lease has run the handler, then answers 201: the sender
// gets 503, and only the copy's effect is kept.
func txOutlivingItsLease(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	running, overtaken := make(chan struct{}), make(chan struct{})
	a := &txApp{e: e, hook: func(n int32) int {
		switch n {
		case 1:
			close(running)
			select { // ignores its context: outlives its lease
			case <-overtaken:
			case <-time.After(60 * time.Second):
				t.Error("no copy ran the handler within 60 s")
			}
		case 2:
			close(overtaken)
		}
		return http.StatusCreated
	}}
	h, send := txReceiver(t, s, 2*time.Second, a)
	first := make(chan int)
	go func() { first <- send(h) }()
	<-running
	if code := untilHandled(h, send); code != http.StatusCreated {
		t.Fatalf("the copy past the lease: %d; want 201", code)
	}
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("the run that outlived its lease answered %d; want 503", code)
	}
	// A copy that also outlives its lease on a loaded machine is one more
	// run, and still one effect.
	txHandledOnce(t, e, a, -1, h, send)
}

// txLeaseBegin drives webhook.Lease.Begin through each outcome whose
// lease is lost or not, as lost says: finish after the effect (and
// between, if set), then a copy's Acquire gets next (nil: acquired).
func txLeaseBegin(lost bool) func(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
	return func(t *testing.T, s replaytest.WorkStore, e replaytest.Effects) {
		const lease = time.Second // a late Confirm has a quarter of it
		cfg := webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{txSecret}}
		signer, err := webhook.NewSigner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Replay, cfg.Namespace, cfg.Lease = s, "begin", lease
		v, err := webhook.NewVerifier(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// begin acquires d, begins its work and makes the effect of id in it.
		begin := func(t *testing.T, d webhook.Delivery, id string) (*webhook.Lease, context.Context) {
			t.Helper()
			l, err := v.Acquire(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			wctx, err := l.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Write(wctx, id); err != nil {
				t.Fatal(err)
			}
			return l, wctx
		}
		past := func(*testing.T, webhook.Delivery, string) { time.Sleep(lease + 100*time.Millisecond) }
		tests := []struct {
			name    string
			between func(t *testing.T, d webhook.Delivery, id string)
			finish  func(l *webhook.Lease, ctx context.Context) error
			lost    bool
			effects int
			next    error
		}{
			{"confirm commits the effect with the record", nil, (*webhook.Lease).Confirm, false, 1, webhook.ErrDuplicate},
			{"release rolls the effect back", nil, (*webhook.Lease).Release, false, 0, nil},
			{"a lease that ran out keeps nothing", past, (*webhook.Lease).Confirm, true, 0, nil},
			{"a lease taken over keeps only the other attempt's", func(t *testing.T, d webhook.Delivery, id string) {
				past(t, d, id)
				other, _ := begin(t, d, id)
				if err := other.Confirm(ctx); err != nil {
					t.Fatal(err)
				}
			}, (*webhook.Lease).Confirm, true, 1, webhook.ErrDuplicate},
		}
		for i, tc := range tests {
			if tc.lost != lost {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				id := fmt.Sprint("msg_begin_", i)
				h := http.Header{}
				if err := signer.Sign(h, id, []byte("{}")); err != nil {
					t.Fatal(err)
				}
				d, err := v.Verify(h, []byte("{}"))
				if err != nil {
					t.Fatal(err)
				}
				l, wctx := begin(t, d, id)
				if tc.between != nil {
					tc.between(t, d, id)
				}
				err = tc.finish(l, ctx)
				if lost := errors.Is(err, replay.ErrLeaseLost) && errors.Is(err, webhook.ErrReplayStore); lost != tc.lost || (!tc.lost && err != nil) {
					t.Fatalf("finish = %v; want the lease lost: %v", err, tc.lost)
				}
				if err := e.Write(wctx, id); err == nil {
					t.Fatal("a write after the lease ended was accepted")
				}
				if n := e.Count(t, id); n != tc.effects {
					t.Fatalf("%d effects committed; want %d", n, tc.effects)
				}
				if _, err := v.Acquire(ctx, d); !errors.Is(err, tc.next) || (tc.next == nil && err != nil) {
					t.Fatalf("a copy's Acquire = %v; want %v", err, tc.next)
				}
			})
		}
	}
}
