package idempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// testKeys seals the records of every test's middleware.
var testKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		panic(err)
	}
	return kr
}()

// newStore returns a fresh in-memory Recorder.
func newStore() *replay.MemoryStore { return &replay.MemoryStore{} }

// faultStore wraps a Recorder and fails the calls it is told to.
type faultStore struct {
	replay.Recorder
	acquireErr   error        // every AcquireRecord fails with it
	noToken      bool         // AcquireRecord answers Acquired without a token
	confirmErr   error        // ConfirmRecord fails with it ...
	confirmFails atomic.Int32 // ... this many times (negative: always)
	releaseErr   error        // every ReleaseLease fails with it
	confirms     atomic.Int32
	releases     atomic.Int32
	acquires     atomic.Int32
	// duringAcquire, when set, runs inside every AcquireRecord with its
	// context, before the store answers.
	duringAcquire func(ctx context.Context)
}

var errInjected = errors.New("injected store failure")

func (f *faultStore) AcquireRecord(ctx context.Context, id string, d time.Duration, fp []byte) (replay.Record, error) {
	f.acquires.Add(1)
	if f.duringAcquire != nil {
		f.duringAcquire(ctx)
	}
	if f.acquireErr != nil {
		return replay.Record{}, f.acquireErr
	}
	if f.noToken {
		return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired}}, nil
	}
	return f.Recorder.AcquireRecord(ctx, id, d, fp)
}

func (f *faultStore) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, res []byte) error {
	f.confirms.Add(1)
	if n := f.confirmFails.Load(); n != 0 {
		f.confirmFails.Add(-1)
		if n < 0 {
			f.confirmFails.Store(-1)
		}
		return f.confirmErr
	}
	return f.Recorder.ConfirmRecord(ctx, id, token, until, fp, res)
}

func (f *faultStore) ReleaseLease(ctx context.Context, id, token string) error {
	f.releases.Add(1)
	if f.releaseErr != nil {
		return f.releaseErr
	}
	return f.Recorder.ReleaseLease(ctx, id, token)
}

// events records observe events.
type events struct {
	mu  sync.Mutex
	got []observe.Event
}

func (e *events) Observe(ev observe.Event) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func (e *events) last(t *testing.T) observe.Event {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.got) == 0 {
		t.Fatal("no event observed")
	}
	return e.got[len(e.got)-1]
}

func (e *events) all() []observe.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]observe.Event(nil), e.got...)
}

// fixture is a middleware over a handler that counts its runs.
type fixture struct {
	t     *testing.T
	store replay.Recorder
	mw    *Middleware
	h     http.Handler
	runs  atomic.Int32
	obs   *events
	logs  *bytes.Buffer
}

// newFixture wraps handler (nil: a payments handler answering 201 with a
// body unique per run) with a middleware of cfg over store (nil: a fresh
// memory store); Caller is the X-User header unless cfg sets one.
func newFixture(t *testing.T, cfg Config, handler http.HandlerFunc) *fixture {
	t.Helper()
	f := &fixture{t: t, obs: &events{}, logs: &bytes.Buffer{}}
	if cfg.Store == nil {
		cfg.Store = newStore()
	}
	f.store = cfg.Store
	if cfg.Caller == nil {
		cfg.Caller = func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
	}
	if cfg.Keys == nil {
		cfg.Keys = testKeys
	}
	if cfg.Route == nil {
		cfg.Route = func(*http.Request) string { return "POST /payments" }
	}
	cfg.Observer = f.obs
	cfg.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mw, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.mw = mw
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/payments/1")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"run":`+strconv.Itoa(int(f.runs.Load()))+`,"echo":`+strconv.Quote(string(body))+`}`)
		}
	}
	f.h = mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.runs.Add(1)
		handler(w, r)
	}))
	return f
}

// req builds a request; key "" sends no key header.
func req(method, target, user, key, body string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if user != "" {
		r.Header.Set("X-User", user)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	r.Header.Set("Content-Type", "application/json")
	return r
}

func (f *fixture) do(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

func (f *fixture) post(key, body string) *httptest.ResponseRecorder {
	return f.do(req(http.MethodPost, "/payments", "alice", key, body))
}

// stubStore answers every AcquireRecord with rec.
type stubStore struct {
	replay.Recorder
	rec replay.Record
}

func (s stubStore) AcquireRecord(context.Context, string, time.Duration, []byte) (replay.Record, error) {
	return s.rec, nil
}

// ctxSteps records, for each store step a test store sees, whether its
// context is one only a deadline ends (replay.EndsOnlyAtDeadline), whether
// it was already done, and its deadline.
type ctxSteps struct {
	mu    sync.Mutex
	steps []ctxStep
}

type ctxStep struct {
	method       string
	deadlineOnly bool
	err          error
	deadline     time.Time
}

func (s *ctxSteps) record(method string, ctx context.Context) {
	d, _ := ctx.Deadline()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, ctxStep{method, replay.EndsOnlyAtDeadline(ctx), ctx.Err(), d})
}

func (s *ctxSteps) list() []ctxStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ctxStep(nil), s.steps...)
}

// stepWant is a store step a test expects, and its deadline: after after
// the request began.
type stepWant struct {
	method string
	after  time.Duration
}

// checkSteps fails t unless steps are want's, in order, each under a live
// context that only its deadline ends, a deadline within after of the
// request's window [from, to].
func checkSteps(t *testing.T, steps []ctxStep, want []stepWant, from, to time.Time) {
	t.Helper()
	if len(steps) != len(want) {
		t.Fatalf("store steps %+v, want %+v", steps, want)
	}
	for i, w := range want {
		got := steps[i]
		if got.method != w.method {
			t.Fatalf("store steps %+v, want %+v", steps, want)
		}
		if !got.deadlineOnly || got.err != nil {
			t.Fatalf("%s ran under deadline-only %v, done %v; want a live context only its deadline ends", got.method, got.deadlineOnly, got.err)
		}
		if lo, hi := from.Add(w.after), to.Add(w.after); got.deadline.Before(lo) || got.deadline.After(hi) {
			t.Fatalf("%s deadline %v, want within [%v, %v]", got.method, got.deadline, lo, hi)
		}
	}
}

// cancellable returns r under a context that can be cancelled, as a real
// server's request is, and its cancel.
func cancellable(r *http.Request) (*http.Request, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	return r.WithContext(ctx), cancel
}
