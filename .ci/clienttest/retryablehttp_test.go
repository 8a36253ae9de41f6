package clienttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// fenceRefusal is a store refusal that says when it ends, as redisstore's
// refusal of a fenced shard does (replay.RetryAt).
type fenceRefusal struct{ end time.Time }

func (e fenceRefusal) Error() string      { return "store: shard fenced" }
func (e fenceRefusal) RetryAt() time.Time { return e.end }

// fencedStore is a MemoryStore behind a fence that refuses every
// AcquireRecord with a fenceRefusal until an operator reopens it.
type fencedStore struct {
	*replay.MemoryStore
	end    time.Time
	fenced atomic.Bool
}

func (s *fencedStore) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	if s.fenced.Load() {
		return replay.Record{}, fmt.Errorf("acquire: %w", fenceRefusal{s.end})
	}
	return s.MemoryStore.AcquireRecord(ctx, id, lease, fp)
}

// reopen is the operator's reopen: the store serves from now on.
func (s *fencedStore) reopen() { s.fenced.Store(false) }

// fencedAPI is an httptest server whose POST /v1/charges runs behind
// idempotency.Middleware on a fenced store whose fence ends at end.
func fencedAPI(t *testing.T, end time.Time) (*httptest.Server, *fencedStore, *atomic.Int32) {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	store := &fencedStore{MemoryStore: &replay.MemoryStore{}, end: end}
	store.fenced.Store(true)
	mw, err := idempotency.New(idempotency.Config{
		Store:  store,
		Keys:   keys,
		Caller: func(r *http.Request) (string, error) { return "alice", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("POST /v1/charges", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, store, &runs
}

// A go-retryablehttp client sleeps for a 503's Retry-After as sent
// (DefaultBackoff). During a fence whose end is a day or 90 000 s away,
// the middleware's Retry-After is at most idempotency.MaxFenceRetryAfter,
// so the client, once an operator reopens the store early, is served by
// its next attempt, at most 30 s (the sleep the client chose, recorded
// from its own backoff) after the reopen: within a minute. The handler
// runs once; the body of the 503 states the fence's end.
func TestRetryablehttpClientIsServedWithinAMinuteOfAnEarlyReopen(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	tests := []struct {
		name        string
		end         time.Time
		reopenAfter int           // refused attempts before the operator reopens
		wantSleep   time.Duration // the client's sleep after each refused attempt
	}{
		{"fence of a day, reopened after the first refusal", now.Add(25 * time.Hour), 1, idempotency.MaxFenceRetryAfter},
		{"fence of 90 000 s, reopened after three refusals", now.Add(90000 * time.Second), 3, idempotency.MaxFenceRetryAfter},
		{"fence ending in 20 s: its own end", now.Add(20 * time.Second), 1, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, store, runs := fencedAPI(t, tt.end)

			// What the client sees: a 503 whose body states the fence's end.
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(`{"amount":100}`))
			req.Header.Set("Idempotency-Key", "probe-b3c1e0d2")
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var problem struct{ Detail string }
			if err := json.Unmarshal(body, &problem); err != nil || res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("probe: %d %s (%v); want a 503 problem", res.StatusCode, body, err)
			}
			if want := tt.end.UTC().Format(time.RFC3339); !strings.Contains(problem.Detail, want) {
				t.Fatalf("probe detail %q; want the fence's end %s", problem.Detail, want)
			}

			var (
				mu      sync.Mutex
				sleeps  []time.Duration // the client's own backoff, from the header
				headers []string
			)
			c := retryablehttp.NewClient()
			c.HTTPClient = srv.Client()
			c.Logger = nil
			c.RetryMax = tt.reopenAfter + 2
			c.Backoff = func(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
				d := retryablehttp.DefaultBackoff(min, max, attempt, resp)
				mu.Lock()
				sleeps = append(sleeps, d)
				if resp != nil {
					headers = append(headers, resp.Header.Get("Retry-After"))
				}
				if len(sleeps) == tt.reopenAfter {
					store.reopen() // the operator reopens while the client sleeps
				}
				mu.Unlock()
				return time.Millisecond // the test does not wait out the sleep it recorded
			}
			rreq, err := retryablehttp.NewRequest(http.MethodPost, srv.URL+"/v1/charges", []byte(`{"amount":100}`))
			if err != nil {
				t.Fatal(err)
			}
			rreq.Header.Set("Content-Type", "application/json")
			rreq.Header.Set("Idempotency-Key", "charge-7f4e2a9c-1b3d-4c5e-8f6a-0b1c2d3e4f5a")
			res, err = c.Do(rreq)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusCreated || runs.Load() != 1 {
				t.Fatalf("final status %d, handler runs %d; want 201 and one run", res.StatusCode, runs.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sleeps) != tt.reopenAfter {
				t.Fatalf("the client slept %d times (%v); want %d, one per refusal", len(sleeps), sleeps, tt.reopenAfter)
			}
			for i, d := range sleeps {
				if d < tt.wantSleep-time.Second || d > tt.wantSleep || d > time.Minute {
					t.Fatalf("sleep %d: the client chose %v (Retry-After %q); want %v, within a minute", i, d, headers[i], tt.wantSleep)
				}
			}
			// The reopen came during the last sleep: the client was served by
			// the attempt that followed it, that sleep after the reopen.
			if last := sleeps[len(sleeps)-1]; last > time.Minute {
				t.Fatalf("served %v after the reopen; want within a minute", last)
			}
		})
	}
}
