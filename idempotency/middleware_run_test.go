package idempotency

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
)

// retryUntilAnswered posts body with key to url as a client with the given
// timeout does: after a timeout (or a 409 while the first request runs) it
// sends the same request again, at most 30 times, until it gets another
// answer, which it returns with its body (nil if none came).
func retryUntilAnswered(t *testing.T, url, key, body string, timeout time.Duration) (*http.Response, []byte) {
	t.Helper()
	client := &http.Client{Timeout: timeout}
	for range 30 {
		r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-User", "alice")
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Content-Type", "application/json")
		res, err := client.Do(r)
		if err != nil {
			var ne interface{ Timeout() bool }
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("client: %v", err)
			}
			continue // the client gave up: retry with the same key
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if res.StatusCode == http.StatusConflict {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		return res, b
	}
	t.Error("no answer after 30 tries")
	return nil, nil
}

// TestRunClientLeavingDoesNotEndTheHandlersContext pins issue 45 point 1:
// a client that times out and retries does not make the handler run
// twice, because the client leaving does not cancel the handler's context.
func TestRunClientLeavingDoesNotEndTheHandlersContext(t *testing.T) {
	const first = `{"id":"ch_1","amount":100}`
	var charges atomic.Int32
	var contextEnded atomic.Bool
	f := newFixture(t, Config{Lease: 5 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1) // the effect
		select {       // one more context-bound step: writing the receipt
		case <-r.Context().Done():
			contextEnded.Store(true)
			http.Error(w, r.Context().Err().Error(), http.StatusInternalServerError)
			return
		case <-time.After(200 * time.Millisecond):
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, first)
	})
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	res, body := retryUntilAnswered(t, srv.URL+"/payments", key1, `{"amount":100}`, 100*time.Millisecond)
	if n := charges.Load(); n != 1 || contextEnded.Load() {
		t.Fatalf("%d charges (context ended: %v), want exactly 1", n, contextEnded.Load())
	}
	if res == nil || res.StatusCode != http.StatusCreated || string(body) != first || res.Header.Get(ReplayedHeader) != "true" ||
		res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("final answer %+v %q, want the first response replayed", res, body)
	}
}

// TestRunHandlerContext pins what the handler's context keeps of the
// request's and what it does not.
func TestRunHandlerContext(t *testing.T) {
	type ctxKey struct{}
	t.Run("keeps the request's values and the lease's deadline, not its cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		var value any
		var doneAfterCancel bool
		var left time.Duration
		f := newFixture(t, Config{Lease: 8 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
			cancel() // the client goes away while the handler runs
			value = r.Context().Value(ctxKey{})
			select {
			case <-r.Context().Done():
				doneAfterCancel = true
			case <-time.After(20 * time.Millisecond):
			}
			if d, ok := r.Context().Deadline(); ok {
				left = time.Until(d)
			}
			w.WriteHeader(http.StatusCreated)
		})
		w := f.do(req(http.MethodPost, "/payments", "alice", key1, `{}`).WithContext(ctx))
		if value != "v" || doneAfterCancel || left <= 5*time.Second || left > 6*time.Second || w.Code != http.StatusCreated {
			t.Fatalf("value %v, done after the client left %v, deadline in %v (want about 6s), status %d", value, doneAfterCancel, left, w.Code)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeProcessed {
			t.Errorf("event %+v", e)
		}
		if w := f.post(key1, `{}`); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "true" || f.runs.Load() != 1 {
			t.Fatalf("retry %d replayed %q runs %d", w.Code, w.Header().Get(ReplayedHeader), f.runs.Load())
		}
	})
	t.Run("an earlier deadline of the request does not reach the handler", func(t *testing.T) {
		// The request's deadline (4 s) is earlier than the handler's (6 s,
		// three quarters of the Lease), and the request ends while the
		// handler runs: neither reaches it. The handler ends the request
		// itself, so that no step before it races the deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		var left time.Duration
		f := newFixture(t, Config{Lease: 8 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
			cancel()
			if d, ok := r.Context().Deadline(); ok {
				left = time.Until(d)
			}
			if r.Context().Err() != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		if w := f.do(req(http.MethodPost, "/payments", "alice", key1, `{}`).WithContext(ctx)); w.Code != http.StatusCreated || left <= 5*time.Second {
			t.Fatalf("status %d, deadline in %v", w.Code, left)
		}
	})
}

// TestWrapTimeoutHandler pins issue 45 point 2: an http.TimeoutHandler
// inside Wrap answers 503 while its handler goes on running, so that 503
// would release the key to a retry running the handler beside itself.
// Outside Transactional it is refused loudly; with Transactional the
// handler's writes are rolled back with the 503; outside Wrap it is safe.
func TestWrapTimeoutHandler(t *testing.T) {
	// slowCharge charges; on the first request (the one carrying the
	// X-First-Run header, which the fingerprint does not cover) it then
	// waits, without looking at its context, until resume is closed (the
	// test closes it once the TimeoutHandler's 503 was answered), and then
	// writes the receipt. Waiting on resume rather than sleeping keeps the
	// order charge, 503, receipt however slowly goroutines are scheduled.
	slowCharge := func(charges *atomic.Int32, resume <-chan struct{}, done chan<- error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			charges.Add(1)
			err := exec(r.Context(), "charge")
			if r.Header.Get("X-First-Run") != "" {
				select {
				case <-resume:
				case <-time.After(10 * time.Second):
				}
				err = errors.Join(err, exec(r.Context(), "receipt"))
				defer func() { done <- err }()
			} else if err == nil {
				err = exec(r.Context(), "receipt")
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"ch_1"}`)
		}
	}
	t.Run("inside Wrap without Transactional: every covered request refused, nothing charged, logged at Error", func(t *testing.T) {
		var charges atomic.Int32
		f := newFixture(t, Config{}, nil)
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			charges.Add(1)
			if r.Method == http.MethodPost {
				time.Sleep(100 * time.Millisecond) // past the TimeoutHandler's 50 ms
			}
			w.WriteHeader(http.StatusCreated)
		})
		h := f.mw.Wrap(http.TimeoutHandler(inner, 50*time.Millisecond, "timed out"))
		if !strings.Contains(f.logs.String(), "level=ERROR") || !strings.Contains(f.logs.String(), "TimeoutHandler") {
			t.Errorf("Wrap did not log at Error: %q", f.logs)
		}
		for i, r := range []*http.Request{
			req(http.MethodPost, "/payments", "alice", key1, `{}`),
			req(http.MethodPost, "/payments", "alice", key1, `{}`), // the retry
			req(http.MethodPatch, "/payments", "alice", "", `{}`),  // covered, no key
		} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			problemOf(t, w, http.StatusInternalServerError)
			if e := f.obs.last(t); e.Outcome != observe.OutcomeRefused || e.Reason != observe.ReasonIdempotencyTimeoutHandler {
				t.Errorf("request %d: event %+v", i, e)
			}
		}
		if n := charges.Load(); n != 0 {
			t.Fatalf("%d charges, want none", n)
		}
		if got := strings.Count(f.logs.String(), "level=ERROR"); got != 4 {
			t.Errorf("%d records at Error, want one at Wrap and one per request: %s", got, f.logs)
		}
		if strings.Contains(f.logs.String(), strings.Trim(key1, `"`)) || strings.Contains(f.logs.String(), "alice") {
			t.Errorf("log holds the key or the caller: %s", f.logs)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req(http.MethodGet, "/payments", "alice", "", ""))
		if w.Code != http.StatusCreated || charges.Load() != 1 {
			t.Fatalf("a request Methods does not cover: status %d, runs %d; want it passed to the handler", w.Code, charges.Load())
		}
	})
	t.Run("inside Wrap with Transactional: the timed-out run is rolled back, one charge committed", func(t *testing.T) {
		var charges atomic.Int32
		resume := make(chan struct{})
		done := make(chan error, 1)
		st := newFakeTransactor()
		f := newFixture(t, Config{Store: st, Transactional: true}, nil)
		h := f.mw.Wrap(http.TimeoutHandler(slowCharge(&charges, resume, done), 50*time.Millisecond, "timed out"))
		w := httptest.NewRecorder()
		r := req(http.MethodPost, "/payments", "alice", key1, `{}`)
		r.Header.Set("X-First-Run", "1")
		h.ServeHTTP(w, r)
		close(resume) // the 503 was answered: the first run writes its receipt now
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("first answer %d, want the TimeoutHandler's 503", w.Code)
		}
		w = httptest.NewRecorder()
		h.ServeHTTP(w, req(http.MethodPost, "/payments", "alice", key1, `{}`))
		if w.Code != http.StatusCreated || w.Body.String() != `{"id":"ch_1"}` {
			t.Fatalf("retry %d %q, want 201", w.Code, w.Body)
		}
		if err := <-done; !errors.Is(err, errTxDone) {
			t.Fatalf("the timed-out run's receipt: %v, want it refused", err)
		}
		w = httptest.NewRecorder()
		h.ServeHTTP(w, req(http.MethodPost, "/payments", "alice", key1, `{}`))
		if w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("second retry %d replayed %q", w.Code, w.Header().Get(ReplayedHeader))
		}
		if got := st.committedList(); strings.Join(got, ",") != "charge,receipt" || charges.Load() != 2 {
			t.Fatalf("committed %v after %d runs, want one charge and its receipt", got, charges.Load())
		}
	})
	t.Run("outside Wrap: the handler finishes under its own deadline, one charge, the retry gets it", func(t *testing.T) {
		// The handler charges, then waits, on its own context, until the
		// TimeoutHandler's 503 has reached the client (resume): it must
		// see no cancellation, and the order charge, 503, receipt holds
		// however slowly goroutines are scheduled. The TimeoutHandler's
		// timeout is no mechanism: retries answered by it (a loaded
		// machine) are retried until a generous deadline.
		var charges atomic.Int32
		resume := make(chan struct{})
		f := newFixture(t, Config{Lease: time.Minute}, func(w http.ResponseWriter, r *http.Request) {
			charges.Add(1)
			select {
			case <-r.Context().Done():
				http.Error(w, r.Context().Err().Error(), http.StatusInternalServerError)
				return
			case <-resume:
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"ch_1"}`)
		})
		h := http.TimeoutHandler(f.h, 200*time.Millisecond, "timed out")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req(http.MethodPost, "/payments", "alice", key1, `{}`))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("first answer %d, want the TimeoutHandler's 503", w.Code)
		}
		close(resume)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			w = httptest.NewRecorder()
			h.ServeHTTP(w, req(http.MethodPost, "/payments", "alice", key1, `{}`))
			if w.Code != http.StatusServiceUnavailable && w.Code != http.StatusConflict {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if charges.Load() != 1 || w.Code != http.StatusCreated || w.Body.String() != `{"id":"ch_1"}` || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("%d charges; final answer %d %q replayed %q", charges.Load(), w.Code, w.Body, w.Header().Get(ReplayedHeader))
		}
	})
}

// gatewayErrorHandler is the ReverseProxy.ErrorHandler of
// docs/idempotency.md ("A gateway in front of an upstream"), as written
// there.
func gatewayErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	var dial *net.OpError
	if errors.As(err, &dial) && dial.Op == "dial" {
		// The upstream was never reached: nothing happened. 503 frees
		// the key, so the client's retry reaches the upstream.
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// The upstream may have acted: 502 is recorded, never run again.
	w.WriteHeader(http.StatusBadGateway)
}

// postOnce sends one POST of a payment with key to url over a connection
// of its own (so the client's transport never re-sends it by itself) and
// returns the answer, with its body read, or the client's error.
func postOnce(t *testing.T, url, key string) (*http.Response, []byte, error) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":100}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-User", "alice")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(r)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// TestReverseProxyBehindTheMiddleware pins issue 106 with a real
// httputil.ReverseProxy behind the middleware on a real server, in front
// of an upstream server that counts the requests that reach it (each one
// a payment): a payment is never made twice under one key, and an
// upstream never reached leaves the key free for the retry.
func TestReverseProxyBehindTheMiddleware(t *testing.T) {
	// gateway serves f.h, whose handler is a ReverseProxy to the
	// upstream target returns, on a real server, and returns its URL.
	gateway := func(t *testing.T, target func() *url.URL, errorHandler func(http.ResponseWriter, *http.Request, error)) (*fixture, string) {
		tr := &http.Transport{DisableKeepAlives: true} // every upstream request on a connection of its own
		t.Cleanup(tr.CloseIdleConnections)
		proxy := &httputil.ReverseProxy{
			Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(target()) },
			Transport:    tr,
			ErrorHandler: errorHandler,
			ErrorLog:     log.New(io.Discard, "", 0),
		}
		f := newFixture(t, Config{}, proxy.ServeHTTP)
		srv := httptest.NewServer(f.h)
		t.Cleanup(srv.Close)
		return f, srv.URL + "/payments"
	}
	upstream := func(t *testing.T, h http.HandlerFunc) *url.URL {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		u, err := url.Parse(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	t.Run("an upstream that cuts its body after its 201 is paid once; the retry gets outcome unknown", func(t *testing.T) {
		var payments atomic.Int32
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
			payments.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"ch_1"`)
			rc := http.NewResponseController(w)
			rc.Flush()
			conn, _, err := rc.Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close() // the body cut: 12 of its 100 bytes sent
		})
		f, gw := gateway(t, func() *url.URL { return up }, nil)
		if res, _, err := postOnce(t, gw, key1); err == nil {
			t.Fatalf("first answer %d, want the connection broken (ReverseProxy panics with http.ErrAbortHandler)", res.StatusCode)
		}
		for range 2 {
			res, body, err := postOnce(t, gw, key1)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(ReplayedHeader) != "true" ||
				!strings.Contains(string(body), ProblemOutcomeUnknown) {
				t.Fatalf("retry %d %v %s, want the outcome-unknown problem replayed", res.StatusCode, res.Header, body)
			}
		}
		if n := payments.Load(); n != 1 || f.runs.Load() != 1 {
			t.Fatalf("%d payments, %d gateway runs; want 1 and 1", n, f.runs.Load())
		}
	})

	t.Run("the ErrorHandler of the docs answers 503 for an upstream never reached; the retry pays once", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := &url.URL{Scheme: "http", Host: l.Addr().String()}
		l.Close() // nothing listens there: a dial is refused
		var payments atomic.Int32
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
			payments.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"ch_1"}`)
		})
		var target atomic.Pointer[url.URL]
		target.Store(dead)
		f, gw := gateway(t, target.Load, gatewayErrorHandler)
		res, _, err := postOnce(t, gw, key1)
		if err != nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("first answer %v, %v; want 503 with Retry-After 1", res, err)
		}
		if e := f.obs.last(t); e.Outcome != observe.OutcomeReleased {
			t.Errorf("event %+v, want the key released", e)
		}
		target.Store(up) // the upstream is back
		for i, want := range []string{"", "true"} {
			res, body, err := postOnce(t, gw, key1)
			if err != nil || res.StatusCode != http.StatusCreated || string(body) != `{"id":"ch_1"}` || res.Header.Get(ReplayedHeader) != want {
				t.Fatalf("answer %d after the outage: %v %q, %v; want 201 (replayed %q)", i+1, res, body, err, want)
			}
		}
		if n := payments.Load(); n != 1 || f.runs.Load() != 2 {
			t.Fatalf("%d payments, %d gateway runs; want 1 and 2", n, f.runs.Load())
		}
	})

	t.Run("the ErrorHandler of the docs answers 502 for an upstream that took the request; recorded", func(t *testing.T) {
		var payments atomic.Int32
		up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
			payments.Add(1) // paid, then the connection breaks before any answer
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close()
		})
		f, gw := gateway(t, func() *url.URL { return up }, gatewayErrorHandler)
		for i, want := range []string{"", "true"} {
			res, _, err := postOnce(t, gw, key1)
			if err != nil || res.StatusCode != http.StatusBadGateway || res.Header.Get(ReplayedHeader) != want {
				t.Fatalf("answer %d: %v, %v; want 502 (replayed %q)", i+1, res, err, want)
			}
		}
		if n := payments.Load(); n != 1 || f.runs.Load() != 1 {
			t.Fatalf("%d payments, %d gateway runs; want 1 and 1", n, f.runs.Load())
		}
	})
}
