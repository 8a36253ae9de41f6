// Package idempotencytest checks a replay store under the idempotency
// middleware as a fleet uses it: [RunContract] serves one app from two
// instances, each with its own store value on one backend;
// [RunTransactionalContract] checks a store's transactions under the
// middleware's transactional mode. Every store of this repository runs
// them; the author of another store can too (ExampleRunContract shows the
// call from a test).
package idempotencytest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// RunContract runs the idempotency middleware's scenarios
// across two instances of a service against a store: newStores returns
// two store values on one backend (two processes' stores, or two Stores
// in one process on the same server, table or file), and the instances
// share a keyring, as a fleet does. A request retried on both instances
// at once runs its handler once and every retry gets the first answer; a
// changed body under a used key is refused on the other instance; a
// failure (5xx) frees the key for a retry on the other instance. Every
// store of this repository runs it.
func RunContract(t *testing.T, newStores func(t *testing.T) (a, b replay.Recorder)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b *instance)
	}{
		{"ConcurrentRetriesAcrossInstancesRunOnce", concurrentRetriesRunOnce},
		{"ChangedBodyRefusedOnTheOtherInstance", changedBodyRefused},
		{"FailureFreesTheKeyForTheOtherInstance", failureFreesTheKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sa, sb := newStores(t)
			keys, err := ctoken.NewKeyring(ctoken.RandomKey())
			if err != nil {
				t.Fatal(err)
			}
			app := &service{}
			tc.fn(t, newInstance(t, sa, keys, app), newInstance(t, sb, keys, app))
		})
	}
}

// service is the app both instances serve: POST /charge runs once per
// accepted request, answering 201 with its run number, or failing with
// 503 while fail is set.
type service struct {
	runs atomic.Int32
	fail atomic.Bool
}

// instance is one process of the service: its middleware on its store.
type instance struct {
	app *service
	h   http.Handler
}

func newInstance(t *testing.T, s replay.Recorder, keys *ctoken.Keyring, app *service) *instance {
	t.Helper()
	mw, err := idempotency.New(idempotency.Config{
		Store: s,
		Keys:  keys,
		Caller: func(r *http.Request) (string, error) {
			return r.Header.Get("X-Caller"), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charge", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if app.fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		n := app.runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	})))
	return &instance{app: app, h: mux}
}

// post sends POST /charge with key and body, and returns the status, the
// body and whether the middleware replayed the answer.
func (in *instance) post(key, body string) (int, string, bool) {
	r := httptest.NewRequest(http.MethodPost, "/charge", strings.NewReader(body))
	r.Header.Set("X-Caller", "alice")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	in.h.ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b), w.Header().Get("Idempotent-Replayed") == "true"
}

func concurrentRetriesRunOnce(t *testing.T, a, b *instance) {
	const key, body = "5f0b6c9e-2a3d-4e1f-9b8a-7c6d5e4f3a21", `{"amount":100}`
	type answer struct {
		code     int
		body     string
		replayed bool
	}
	answers := make([]answer, 16)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		in := a
		if i%2 == 1 {
			in = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, body, replayed := in.post(key, body)
			answers[i] = answer{code, body, replayed}
		}()
	}
	close(start)
	wg.Wait()
	first := ""
	for i, ans := range answers {
		switch {
		case ans.code == http.StatusCreated:
			if first == "" {
				first = ans.body
			}
			if ans.body != first {
				t.Fatalf("answer %d: %q; the first was %q: two runs answered", i, ans.body, first)
			}
		case ans.code == http.StatusConflict: // in flight on the other instance: retry later
		default:
			t.Fatalf("answer %d: %d %q; want 201 or 409", i, ans.code, ans.body)
		}
	}
	// Every retry from now on, on either instance, gets the first answer.
	for _, in := range []*instance{a, b} {
		code, got, replayed := in.post(key, body)
		if code != http.StatusCreated || !replayed || (first != "" && got != first) {
			t.Fatalf("a retry after the race: %d %q replayed %v; want 201 %q replayed", code, got, replayed, first)
		}
	}
	if n := runs(a, b); n != 1 {
		t.Fatalf("the handler ran %d times for one key; want once", n)
	}
}

// runs is the handler's run count (both instances serve one app).
func runs(a, _ *instance) int32 { return a.app.runs.Load() }

func changedBodyRefused(t *testing.T, a, b *instance) {
	const key = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	if code, body, _ := a.post(key, `{"amount":100}`); code != http.StatusCreated {
		t.Fatalf("first request: %d %q", code, body)
	}
	if code, body, _ := b.post(key, `{"amount":999}`); code != http.StatusUnprocessableEntity {
		t.Fatalf("a changed body under the used key on the other instance: %d %q; want 422", code, body)
	}
	if n := runs(a, b); n != 1 {
		t.Fatalf("the handler ran %d times; want once", n)
	}
}

func failureFreesTheKey(t *testing.T, a, b *instance) {
	const key, body = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", `{"amount":100}`
	app := a.app
	app.fail.Store(true)
	if code, got, _ := a.post(key, body); code != http.StatusServiceUnavailable {
		t.Fatalf("the failing request: %d %q; want 503", code, got)
	}
	app.fail.Store(false)
	code, got, replayed := b.post(key, body)
	if code != http.StatusCreated || replayed {
		t.Fatalf("the retry on the other instance after a 503: %d %q replayed %v; want a fresh 201", code, got, replayed)
	}
	if code, again, replayed := a.post(key, body); code != http.StatusCreated || !replayed || again != got {
		t.Fatalf("a retry after the success: %d %q replayed %v; want %q replayed", code, again, replayed, got)
	}
	if n := runs(a, b); n != 1 {
		t.Fatalf("the handler succeeded %d times; want once", n)
	}
}
