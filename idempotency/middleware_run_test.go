package idempotency

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		var left time.Duration
		f := newFixture(t, Config{Lease: 8 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
			<-ctx.Done()
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
