package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/httpx"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
	"github.com/ctoken/ctoken/replay"
)

// TestWebhookMiddleware pins Verifier.Middleware: one delivery reaches the handler once,
// refusals answer with the right status, and the lease follows the handler.
func TestWebhookMiddleware(t *testing.T) {
	t.Run("passes first delivery with readable body", func(t *testing.T) {
		for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
			cfg := Config{Scheme: scheme, Secrets: []string{stdSecret}}
			next := &recordingHandler{status: http.StatusAccepted}
			mw := newVerifier(t, cfg).Middleware(next)
			rec := deliver(mw, signed(t, newSigner(t, cfg), "evt-1", `{"ok":true}`), `{"ok":true}`)
			if rec.Code != http.StatusAccepted || rec.Body.String() != "processed" {
				t.Fatalf("scheme %v: got %d %q", scheme, rec.Code, rec.Body)
			}
			if next.calls.Load() != 1 || next.bodies[0] != `{"ok":true}` || next.ids[0] != "evt-1" {
				t.Fatalf("scheme %v: handler saw calls=%d bodies=%q ids=%q", scheme, next.calls.Load(), next.bodies, next.ids)
			}
		}
	})

	t.Run("acknowledges duplicate without calling handler", func(t *testing.T) {
		for _, scheme := range []Scheme{HMACSHA256(), StandardWebhooks()} {
			cfg := Config{Scheme: scheme, Secrets: []string{stdSecret}}
			next := &recordingHandler{}
			mw := newVerifier(t, cfg).Middleware(next)
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			for i := range 3 {
				rec := deliver(mw, h, "payload")
				if rec.Code != http.StatusOK {
					t.Fatalf("scheme %v delivery %d: status %d", scheme, i, rec.Code)
				}
			}
			if n := next.calls.Load(); n != 1 {
				t.Fatalf("scheme %v: handler called %d times, want 1", scheme, n)
			}
		}
	})

	// Under a scheme whose ID header is unsigned, the policy decides which
	// deliveries are one; every delivery acknowledged without running the
	// handler is seen by OnDuplicate.
	t.Run("dedup policies", func(t *testing.T) {
		type send struct{ id, body string }
		// A first delivery, its retry, a captured copy replayed under a fresh
		// ID, and a distinct delivery reusing the ID.
		sends := []send{{"evt-1", "payload"}, {"evt-1", "payload"}, {"evt-forged", "payload"}, {"evt-1", "changed"}}
		tests := []struct {
			dedup Dedup
			calls []string // the sends the handler processed, by id/body
			dups  int
		}{
			{DedupDefault, []string{"evt-1/payload", "evt-1/changed"}, 2},
			{DedupSignature, []string{"evt-1/payload", "evt-1/changed"}, 2},
			{DedupID, []string{"evt-1/payload", "evt-forged/payload"}, 2},
			{DedupIDAndSignature, []string{"evt-1/payload", "evt-forged/payload", "evt-1/changed"}, 1},
		}
		for _, tc := range tests {
			t.Run(tc.dedup.String(), func(t *testing.T) {
				var dups []string
				cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Dedup: tc.dedup,
					OnDuplicate: func(_ *http.Request, d Delivery) { dups = append(dups, d.ID) }}
				next := &recordingHandler{}
				mw := newVerifier(t, cfg).Middleware(next)
				signer := newSigner(t, cfg)
				for _, sd := range sends {
					if rec := deliver(mw, signed(t, signer, sd.id, sd.body), sd.body); rec.Code != http.StatusOK {
						t.Fatalf("%v: status %d", sd, rec.Code)
					}
				}
				var got []string
				for i := range next.ids {
					got = append(got, next.ids[i]+"/"+next.bodies[i])
				}
				if !slices.Equal(got, tc.calls) {
					t.Fatalf("handler processed %q, want %q", got, tc.calls)
				}
				if len(dups) != tc.dups || len(dups)+len(got) != len(sends) {
					t.Fatalf("OnDuplicate saw %q, want %d: every send is processed or seen", dups, tc.dups)
				}
			})
		}
	})

	// The case: three deliveries with distinct IDs and the same body
	// under the default policy are processed once, and OnDuplicate sees the
	// other two; under DedupIDAndSignature each is processed.
	t.Run("same body distinct IDs never dropped silently", func(t *testing.T) {
		for _, dedup := range []Dedup{DedupDefault, DedupIDAndSignature} {
			var dups atomic.Int32
			cfg := Config{Scheme: GitHub(), Secrets: []string{githubSecret}, Dedup: dedup,
				OnDuplicate: func(*http.Request, Delivery) { dups.Add(1) }}
			next := &recordingHandler{}
			mw := newVerifier(t, cfg).Middleware(next)
			for _, id := range []string{"a", "b", "c"} {
				deliver(mw, signed(t, newSigner(t, cfg), id, githubBody), githubBody)
			}
			if next.calls.Load()+dups.Load() != 3 {
				t.Fatalf("%v: %d processed, %d seen as duplicates; want all 3 accounted for", dedup, next.calls.Load(), dups.Load())
			}
			if dedup == DedupIDAndSignature && next.calls.Load() != 3 {
				t.Fatalf("%v: %d processed, want 3", dedup, next.calls.Load())
			}
		}
	})

	t.Run("refusals", func(t *testing.T) {
		clk := newStepClock()
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, MaxBody: 16, Now: clk.Now}
		signer := newSigner(t, cfg)
		good := signed(t, signer, "evt-1", "small")
		clk.Advance(-time.Hour)
		old := signed(t, signer, "evt-2", "small")
		clk.Advance(time.Hour)
		without := func(name string) http.Header {
			h := good.Clone()
			h.Del(name)
			return h
		}
		tests := []struct {
			name string
			h    http.Header
			body string
			code int
			want error
		}{
			{"missing signature", without("webhook-signature"), "small", http.StatusUnauthorized, ErrSignature},
			{"tampered body", good, "smell", http.StatusUnauthorized, ErrSignature},
			{"old timestamp", old, "small", http.StatusUnauthorized, ErrTimestamp},
			{"missing id", without("webhook-id"), "small", http.StatusBadRequest, ErrMalformed},
			{"missing timestamp", without("webhook-timestamp"), "small", http.StatusBadRequest, ErrMalformed},
			{"body over cap", good, strings.Repeat("x", 17), http.StatusRequestEntityTooLarge, ErrTooLarge},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				var rejected error
				c := cfg
				c.OnReject = func(_ *http.Request, err error) { rejected = err }
				next := &recordingHandler{}
				rec := deliver(newVerifier(t, c).Middleware(next), tc.h, tc.body)
				if rec.Code != tc.code {
					t.Fatalf("status %d, want %d", rec.Code, tc.code)
				}
				if !errors.Is(rejected, tc.want) {
					t.Fatalf("OnReject got %v, want %v", rejected, tc.want)
				}
				if next.calls.Load() != 0 {
					t.Fatal("handler called for a refused delivery")
				}
				if strings.Contains(rec.Body.String(), "small") {
					t.Fatal("response echoes the body")
				}
			})
		}
	})

	t.Run("refuses declared oversize body unread", func(t *testing.T) {
		next := &recordingHandler{}
		mw := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}).Middleware(next)
		req := httptest.NewRequest(http.MethodPost, "/hook", errReader{})
		req.ContentLength = DefaultMaxBody + 1
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || next.calls.Load() != 0 {
			t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
		}
	})

	t.Run("tolerates nil body", func(t *testing.T) {
		next := &recordingHandler{}
		mw := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}).Middleware(next)
		req := httptest.NewRequest(http.MethodPost, "/hook", nil)
		req.Body = nil
		req.Header.Set("X-Webhook-ID", "d1")
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || next.calls.Load() != 0 {
			t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
		}
	})

	t.Run("refuses unreadable body", func(t *testing.T) {
		next := &recordingHandler{}
		mw := newVerifier(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}).Middleware(next)
		req := httptest.NewRequest(http.MethodPost, "/hook", errReader{})
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || next.calls.Load() != 0 {
			t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
		}
	})

	t.Run("fails closed when store cannot decide", func(t *testing.T) {
		clk := newStepClock()
		full := &replay.MemoryStore{Max: 2, Now: clk.Now}
		for _, tc := range []struct {
			name  string
			store replay.Store
			want  error
		}{
			{"store down", failingStore{}, nil},
			{"store full", full, replay.ErrFull},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var rejected error
				cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: tc.store, Namespace: "endpoint", Now: clk.Now,
					OnReject: func(_ *http.Request, err error) { rejected = err }}
				next := &recordingHandler{}
				mw := newVerifier(t, cfg).Middleware(next)
				signer := newSigner(t, cfg)
				if tc.store == full {
					// One delivery takes one entry.
					deliver(mw, signed(t, signer, "first", "a"), "a")
					deliver(mw, signed(t, signer, "second", "c"), "c")
					next.calls.Store(0)
				}
				rec := deliver(mw, signed(t, signer, "evt", "b"), "b")
				if rec.Code != http.StatusServiceUnavailable || next.calls.Load() != 0 {
					t.Fatalf("status %d, handler calls %d", rec.Code, next.calls.Load())
				}
				if rejected == nil || (tc.want != nil && !errors.Is(rejected, tc.want)) {
					t.Fatalf("OnReject got %v, want %v", rejected, tc.want)
				}
			})
		}
	})

	t.Run("releases claim when handler fails", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			status int
			panics bool
		}{
			{"5xx", http.StatusInternalServerError, false},
			{"panic", 0, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
				next := &recordingHandler{status: tc.status, panics: tc.panics}
				mw := newVerifier(t, cfg).Middleware(next)
				h := signed(t, newSigner(t, cfg), "evt-1", "payload")
				func() {
					defer func() {
						if p := recover(); (p != nil) != tc.panics {
							t.Fatalf("recovered %v", p)
						}
					}()
					deliver(mw, h, "payload")
				}()
				next.status, next.panics = 0, false
				if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
					t.Fatalf("retry: %d %q", rec.Code, rec.Body)
				}
				if n := next.calls.Load(); n != 2 {
					t.Fatalf("handler called %d times, want 2 (failure, then retry)", n)
				}
			})
		}
	})

	t.Run("keeps claim when handler refuses 4xx", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
		next := &recordingHandler{status: http.StatusUnprocessableEntity}
		mw := newVerifier(t, cfg).Middleware(next)
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		deliver(mw, h, "payload")
		deliver(mw, h, "payload")
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("handler called %d times, want 1", n)
		}
	})

	// 32 concurrent copies of one delivery: the handler runs once; every other
	// copy is told to retry (503, in progress) or acknowledged as processed
	// (200), and every copy retried afterwards is acknowledged.
	t.Run("concurrent copies reach handler once", func(t *testing.T) {
		for _, scheme := range []Scheme{StandardWebhooks(), HMACSHA256()} {
			secret := stdSecret
			if scheme == HMACSHA256() {
				secret = hmacSecret
			}
			var dups atomic.Int32
			cfg := Config{Scheme: scheme, Secrets: []string{secret}, OnDuplicate: func(*http.Request, Delivery) { dups.Add(1) }}
			release := make(chan struct{})
			var calls atomic.Int32
			mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				<-release // slow: every copy arrives while this one runs
				w.WriteHeader(http.StatusNoContent)
			}))
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			const copies = 32
			codes := make(chan int, copies)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					codes <- deliver(mw, h, "payload").Code
				}()
			}
			close(start)
			// Wait until every copy but the one in the handler has its answer.
			for deadline := time.Now().Add(10 * time.Second); len(codes) < copies-1 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			close(release)
			wg.Wait()
			close(codes)
			count := map[int]int{}
			for c := range codes {
				count[c]++
			}
			if calls.Load() != 1 || count[http.StatusNoContent] != 1 || count[http.StatusServiceUnavailable] != copies-1 {
				t.Fatalf("%v: handler ran %d times, statuses %v; want once, one 204 and %d 503", scheme, calls.Load(), count, copies-1)
			}
			for range copies - 1 {
				if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK {
					t.Fatalf("%v: retry after processing: status %d, want 200", scheme, rec.Code)
				}
			}
			if calls.Load() != 1 || dups.Load() != copies-1 {
				t.Fatalf("%v: handler ran %d times, OnDuplicate saw %d; want 1 and %d", scheme, calls.Load(), dups.Load(), copies-1)
			}
		}
	})

	// The "lost while in progress": a copy arriving while the first
	// attempt runs is told to retry later (never acknowledged); the first
	// attempt then fails, and the sender's later retry is processed.
	t.Run("copy during failing attempt is retried not lost", func(t *testing.T) {
		for _, fail := range []string{"5xx", "panic"} {
			t.Run(fail, func(t *testing.T) {
				var rejected []error
				var mu sync.Mutex
				cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, OnReject: func(_ *http.Request, err error) {
					mu.Lock()
					rejected = append(rejected, err)
					mu.Unlock()
				}}
				inHandler, finish := make(chan struct{}), make(chan struct{})
				var calls atomic.Int32
				mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if calls.Add(1) == 1 {
						close(inHandler)
						<-finish
						if fail == "panic" {
							panic(http.ErrAbortHandler)
						}
						w.WriteHeader(http.StatusBadGateway)
						return
					}
					w.WriteHeader(http.StatusNoContent)
				}))
				h := signed(t, newSigner(t, cfg), "evt-1", "payload")
				done := make(chan int)
				go func() {
					defer func() {
						recover()
						done <- -1
					}()
					done <- deliver(mw, h, "payload").Code
				}()
				<-inHandler
				rec := deliver(mw, h, "payload")
				if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
					t.Fatalf("copy while in progress: status %d, Retry-After %q; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
				}
				mu.Lock()
				if len(rejected) != 1 || !errors.Is(rejected[0], ErrInProgress) {
					t.Fatalf("OnReject saw %v, want ErrInProgress", rejected)
				}
				mu.Unlock()
				close(finish)
				<-done
				if rec := deliver(mw, h, "payload"); rec.Code != http.StatusNoContent {
					t.Fatalf("retry after the failed attempt: status %d, want 204 (processed)", rec.Code)
				}
				if n := calls.Load(); n != 2 {
					t.Fatalf("handler ran %d times, want 2 (the failure, then the retry)", n)
				}
			})
		}
	})

	// Retry-After is the lease's remaining time in whole seconds, rounded up:
	// a whole number of seconds is itself, any part of a second counts as one.
	t.Run("Retry-After is the remaining lease", func(t *testing.T) {
		for _, tc := range []struct {
			elapsed time.Duration // since the other attempt took its 30 s lease
			want    string
		}{
			{10 * time.Second, "20"},
			{10*time.Second + time.Millisecond, "20"},
			{10*time.Second - time.Nanosecond, "21"},
			{29 * time.Second, "1"},
			{30*time.Second - time.Nanosecond, "1"},
		} {
			t.Run(tc.elapsed.String(), func(t *testing.T) {
				clk := newStepClock()
				store := &replay.MemoryStore{Now: clk.Now}
				cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now, Lease: 30 * time.Second}
				v := newVerifier(t, cfg)
				h := signed(t, newSigner(t, cfg), "evt-1", "payload")
				d, err := v.Verify(h, []byte("payload"))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := v.Acquire(context.Background(), d); err != nil { // another instance's attempt
					t.Fatal(err)
				}
				clk.Advance(tc.elapsed)
				rec := deliver(v.Middleware(&recordingHandler{}), h, "payload")
				if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != tc.want {
					t.Fatalf("status %d, Retry-After %q; want 503 and %s (seconds, rounded up)", rec.Code, rec.Header().Get("Retry-After"), tc.want)
				}
			})
		}
	})

	// An instance that dies mid-handler never confirms nor releases: copies
	// are refused while its lease runs, and the first copy after the lease
	// ends is processed.
	t.Run("processes retry after crashed attempt's lease ends", func(t *testing.T) {
		clk := newStepClock()
		store := &replay.MemoryStore{Now: clk.Now}
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now}
		crashed := newVerifier(t, cfg)
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		d, err := crashed.Verify(h, []byte("payload"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := crashed.Acquire(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		next := &recordingHandler{}
		survivor := newVerifier(t, cfg).Middleware(next)
		clk.Advance(DefaultLease - time.Millisecond)
		if rec := deliver(survivor, h, "payload"); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("copy during the dead attempt's lease: status %d, want 503", rec.Code)
		}
		clk.Advance(time.Millisecond)
		if rec := deliver(survivor, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
			t.Fatalf("copy after the lease: %d %q, want processed", rec.Code, rec.Body)
		}
		if rec := deliver(survivor, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "" {
			t.Fatalf("copy after processing: %d %q, want an empty 200", rec.Code, rec.Body)
		}
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	t.Run("handler context ends within lease", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: 400 * time.Millisecond}
		var deadline time.Time
		var hasDeadline bool
		start := time.Now()
		v := newVerifier(t, cfg)
		mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			deadline, hasDeadline = r.Context().Deadline()
			<-r.Context().Done()
			w.WriteHeader(http.StatusServiceUnavailable) // gave up: the sender retries
		}))
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		if rec := deliver(mw, h, "payload"); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d", rec.Code)
		}
		if !hasDeadline || deadline.Sub(start) > 300*time.Millisecond+50*time.Millisecond || deadline.Sub(start) < 250*time.Millisecond {
			t.Fatalf("handler deadline %v after the request, want three quarters of the 400ms lease", deadline.Sub(start))
		}
		// The handler gave up with a 5xx, so the lease was released: the retry
		// is processed at once, not refused until the lease ends.
		next := &recordingHandler{}
		if rec := deliver(v.Middleware(next), h, "payload"); rec.Code != http.StatusOK || next.calls.Load() != 1 {
			t.Fatalf("retry after the handler gave up: status %d, handler calls %d; want processed", rec.Code, next.calls.Load())
		}
	})

	t.Run("reports unrecorded outcome and keeps handler status", func(t *testing.T) {
		store := &flakyStore{MemoryStore: replay.NewMemoryStore(0)}
		var leaseErrs []error
		var ids []string
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Lease: 100 * time.Millisecond,
			OnLeaseError: func(_ *http.Request, d Delivery, err error) {
				leaseErrs = append(leaseErrs, err)
				ids = append(ids, d.ID)
			}}
		next := &recordingHandler{status: http.StatusAccepted}
		mw := newVerifier(t, cfg).Middleware(next)
		signer := newSigner(t, cfg)
		store.failing.Store(true)
		if rec := deliver(mw, signed(t, signer, "evt-1", "x"), "x"); rec.Code != http.StatusAccepted {
			t.Fatalf("status %d, want the handler's 202", rec.Code)
		}
		next.status = http.StatusInternalServerError
		if rec := deliver(mw, signed(t, signer, "evt-2", "x"), "x"); rec.Code != http.StatusInternalServerError {
			t.Fatalf("status %d, want the handler's 500", rec.Code)
		}
		if len(leaseErrs) != 2 || !slices.Equal(ids, []string{"evt-1", "evt-2"}) {
			t.Fatalf("OnLeaseError saw %v for %v, want the confirm and release failures", leaseErrs, ids)
		}
		for _, err := range leaseErrs {
			if !errors.Is(err, ErrReplayStore) || !errors.Is(err, errStoreDown) || Reason(err) == "" {
				t.Fatalf("OnLeaseError got %v, want ErrReplayStore wrapping the store's error", err)
			}
		}
	})

	t.Run("lets handler flush", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
		var flushed, controlled bool
		mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
				flushed = true
			}
			controlled = http.NewResponseController(w).Flush() == nil
		}))
		rec := deliver(mw, signed(t, newSigner(t, cfg), "evt-1", "x"), "x")
		if !flushed || !controlled || !rec.Flushed {
			t.Fatalf("flushed=%v controlled=%v recorder flushed=%v", flushed, controlled, rec.Flushed)
		}
	})

	t.Run("exposes underlying writer to response controller", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
		deadlineErr := make(chan error, 1)
		mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			deadlineErr <- http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
		}))
		srv := httptest.NewServer(mw)
		defer srv.Close()
		body := "x"
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := newSigner(t, cfg).Sign(req.Header, "evt-1", []byte(body)); err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if err := <-deadlineErr; err != nil {
			t.Fatalf("SetWriteDeadline through the middleware: %v", err)
		}
	})

	// A delivery refused because the store was full is processed when the
	// sender retries after room is made, never acknowledged as a duplicate.
	t.Run("retry after full store is processed", func(t *testing.T) {
		clk := newStepClock()
		store := &replay.MemoryStore{Max: 1, Now: clk.Now}
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now}
		next := &recordingHandler{}
		mw := newVerifier(t, cfg).Middleware(next)
		signer := newSigner(t, cfg)
		deliver(mw, signed(t, signer, "first", "a"), "a") // the only entry
		clk.Advance(time.Hour)
		h := signed(t, signer, "evt", "b")
		if rec := deliver(mw, h, "b"); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("delivery into a full store: status %d, want 503", rec.Code)
		}
		clk.Advance(DefaultDedupWindow - time.Hour) // "first" expires: room again
		if rec := deliver(mw, h, "b"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
			t.Fatalf("retry: %d %q, want the handler's reply", rec.Code, rec.Body)
		}
		if n := next.calls.Load(); n != 2 {
			t.Fatalf("handler called %d times, want 2 (first, then the retry of evt)", n)
		}
	})

	// The memory-store form of the slow-store case: the acquire is
	// applied but its answer is lost, so the delivery is refused (503). The
	// sender's retries are refused while that orphaned lease runs, and the
	// first retry after it ends is processed: never acknowledged unprocessed.
	t.Run("acquire applied but answer lost is retried not duplicate", func(t *testing.T) {
		clk := newStepClock()
		store := &lostReplyStore{MemoryStore: &replay.MemoryStore{Now: clk.Now}}
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now, Lease: 10 * time.Second}
		next := &recordingHandler{}
		mw := newVerifier(t, cfg).Middleware(next)
		h := signed(t, newSigner(t, cfg), "evt-1", "payload")
		store.lose.Store(true)
		if rec := deliver(mw, h, "payload"); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("delivery whose acquire answer was lost: status %d, want 503", rec.Code)
		}
		store.lose.Store(false)
		clk.Advance(5 * time.Second)
		if rec := deliver(mw, h, "payload"); rec.Code != http.StatusServiceUnavailable || next.calls.Load() != 0 {
			t.Fatalf("retry during the orphaned lease: status %d, handler calls %d; want 503 and none", rec.Code, next.calls.Load())
		}
		clk.Advance(5 * time.Second)
		if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK || rec.Body.String() != "processed" {
			t.Fatalf("retry after the orphaned lease ended: %d %q, want processed", rec.Code, rec.Body)
		}
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	// A handler that ignores its context and outruns the lease: when nobody
	// took the delivery meanwhile, the late confirmation still records it; when
	// a copy was processed meanwhile, OnLeaseError reports the lost lease (the
	// delivery ran twice).
	t.Run("handler outrunning its lease", func(t *testing.T) {
		for _, copyMeanwhile := range []bool{false, true} {
			var leaseErrs []error
			var mu sync.Mutex
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Lease: 100 * time.Millisecond,
				OnLeaseError: func(_ *http.Request, _ Delivery, err error) {
					mu.Lock()
					leaseErrs = append(leaseErrs, err)
					mu.Unlock()
				}}
			var calls atomic.Int32
			overrun := make(chan struct{})
			mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					<-overrun // ignores r.Context()
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			done := make(chan int)
			go func() { done <- deliver(mw, h, "payload").Code }()
			time.Sleep(200 * time.Millisecond) // the lease has ended
			if copyMeanwhile {
				if rec := deliver(mw, h, "payload"); rec.Code != http.StatusNoContent {
					t.Fatalf("copy after the lease ended: status %d, want 204 (processed)", rec.Code)
				}
			}
			close(overrun)
			if code := <-done; code != http.StatusNoContent {
				t.Fatalf("overrunning attempt: status %d, want its 204", code)
			}
			if rec := deliver(mw, h, "payload"); rec.Code != http.StatusOK {
				t.Fatalf("copy afterwards: status %d, want 200", rec.Code)
			}
			mu.Lock()
			switch {
			case !copyMeanwhile && (len(leaseErrs) != 0 || calls.Load() != 1):
				t.Fatalf("no copy meanwhile: lease errors %v, handler calls %d; want none and 1", leaseErrs, calls.Load())
			case copyMeanwhile && (len(leaseErrs) != 1 || !errors.Is(leaseErrs[0], replay.ErrLeaseLost) || calls.Load() != 2):
				t.Fatalf("copy meanwhile: lease errors %v, handler calls %d; want ErrLeaseLost and 2", leaseErrs, calls.Load())
			}
			mu.Unlock()
		}
	})
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// claimOnlyStore is a working replay.Store without Release.
type claimOnlyStore struct{ s *replay.MemoryStore }

func (c claimOnlyStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	return c.s.Claim(ctx, id, until)
}

// lostReplyStore takes leases but, while lose is set, reports a timeout
// instead of the answer: the store's state changed, the caller cannot know.
type lostReplyStore struct {
	*replay.MemoryStore
	lose atomic.Bool
}

var errTimeout = errors.New("store timed out")

func (s *lostReplyStore) AcquireLease(ctx context.Context, id string, d time.Duration) (replay.Lease, error) {
	l, err := s.MemoryStore.AcquireLease(ctx, id, d)
	if s.lose.Load() {
		return replay.Lease{}, errTimeout
	}
	return l, err
}

// A body of exactly MaxBody bytes is accepted; one byte more is refused,
// by Verify and by the middleware (whether declared or only read).
func TestBodyAtMaxBodyAcceptedAndOneOverRefused(t *testing.T) {
	const max = 64
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, MaxBody: max}
	v := newVerifier(t, cfg)
	s := newSigner(t, cfg)
	at, over := strings.Repeat("a", max), strings.Repeat("a", max+1)
	if _, err := v.Verify(signed(t, s, "evt-1", at), []byte(at)); err != nil {
		t.Fatalf("body of MaxBody bytes: %v", err)
	}
	if _, err := v.Verify(signed(t, s, "evt-2", over), []byte(over)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("body of MaxBody+1 bytes: %v, want ErrTooLarge", err)
	}
	next := &recordingHandler{}
	mw := v.Middleware(next)
	if rec := deliver(mw, signed(t, s, "evt-3", at), at); rec.Code != http.StatusOK || next.calls.Load() != 1 {
		t.Fatalf("middleware, MaxBody bytes: status %d, calls %d", rec.Code, next.calls.Load())
	}
	for _, declared := range []bool{true, false} {
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(over))
		for k, vs := range signed(t, s, "evt-4", over) {
			req.Header[k] = vs
		}
		if !declared {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || next.calls.Load() != 1 {
			t.Fatalf("middleware, MaxBody+1 bytes (declared %v): status %d, calls %d", declared, rec.Code, next.calls.Load())
		}
	}
}

// The handler's status is the first it sends: a stray WriteHeader(500)
// after a 200 keeps the claim (the retry is a duplicate), while a 500
// followed by a Flush releases it (the retry is processed).
func TestMiddlewareRecordsTheFirstStatusTheHandlerSends(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handler   func(w http.ResponseWriter)
		wantCalls int32
	}{
		{"200 then stray 500 keeps the claim", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			w.WriteHeader(http.StatusInternalServerError)
		}, 1},
		{"Write then stray 500 keeps the claim", func(w http.ResponseWriter) {
			w.Write([]byte("done"))
			w.WriteHeader(http.StatusInternalServerError)
		}, 1},
		{"500 then Flush releases the claim", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusInternalServerError)
			w.(http.Flusher).Flush()
		}, 2},
		{"Flush then 500 keeps the claim", func(w http.ResponseWriter) {
			w.(http.Flusher).Flush()
			w.WriteHeader(http.StatusInternalServerError)
		}, 1},
		{"103 then 500 releases the claim", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusInternalServerError)
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}}
			var calls int32
			mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				tc.handler(w)
			}))
			h := signed(t, newSigner(t, cfg), "evt-1", "payload")
			deliver(mw, h, "payload")
			deliver(mw, h, "payload")
			if calls != tc.wantCalls {
				t.Fatalf("handler called %d times, want %d", calls, tc.wantCalls)
			}
		})
	}
}

// sendSigned signs body as delivery id with s and sends it through h,
// returning the status.
func sendSigned(t *testing.T, h http.Handler, s *Signer, id string, body []byte) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	if err := s.Sign(req.Header, id, body); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func TestVerifierAtMaxDurationsProcessesOnce(t *testing.T) {
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret},
		DedupWindow: MaxDedupWindow, Lease: MaxLease, Tolerance: MaxTolerance})
	s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	var ran atomic.Int32
	h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Add(1) }))
	for i := range 2 {
		if code := sendSigned(t, h, s, "msg_1", []byte(`{}`)); code != http.StatusOK {
			t.Fatalf("copy %d: status %d", i, code)
		}
	}
	if ran.Load() != 1 {
		t.Fatalf("handler ran %d times for one delivery at MaxDedupWindow", ran.Load())
	}
	hdr := http.Header{}
	if err := s.Sign(hdr, "msg_2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	d, err := v.Verify(hdr, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := v.Acquire(context.Background(), d); l == nil || err != nil {
		t.Fatalf("first Acquire at MaxLease = %v, %v", l, err)
	}
	if l, err := v.Acquire(context.Background(), d); l != nil || !errors.Is(err, ErrInProgress) {
		t.Fatalf("second Acquire at MaxLease = %v, %v; want ErrInProgress", l, err)
	}
}

// TestMiddlewareReleasesDeliveryOnRetryStatus: a handler status that asks
// the sender to retry leaves the delivery unprocessed, so the retry runs
// the handler; any other status is the handler's decision, and the retry
// is acknowledged without running it.
func TestMiddlewareReleasesDeliveryOnRetryStatus(t *testing.T) {
	tests := []struct {
		status    int
		retryRuns bool
	}{
		{http.StatusRequestTimeout, true},
		{http.StatusLocked, true},
		{http.StatusTooEarly, true},
		{http.StatusTooManyRequests, true},
		{http.StatusInternalServerError, true},
		{http.StatusServiceUnavailable, true},
		{http.StatusBadRequest, false},
		{http.StatusNotFound, false},
		{http.StatusConflict, false},
		{http.StatusUnprocessableEntity, false},
		{http.StatusAccepted, false},
	}
	for _, tc := range tests {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
			s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
			var calls atomic.Int32
			h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.WriteHeader(tc.status)
				}
			}))
			if code := sendSigned(t, h, s, "msg_retry", []byte(`{}`)); code != tc.status {
				t.Fatalf("first attempt: status %d, want the handler's %d", code, tc.status)
			}
			if code := sendSigned(t, h, s, "msg_retry", []byte(`{}`)); code != http.StatusOK {
				t.Fatalf("retry: status %d, want 200", code)
			}
			if ran := calls.Load() == 2; ran != tc.retryRuns {
				t.Fatalf("after %d the retry ran the handler: %v, want %v", tc.status, ran, tc.retryRuns)
			}
		})
	}
}

// TestMiddlewareSendsRetryAfterWithEvery503: a store failure gets
// Config.RetryAfter in whole seconds rounded up (DefaultRetryAfter when
// zero), a copy of a delivery in progress the seconds its lease may still
// run; no other refusal carries the header.
func TestMiddlewareSendsRetryAfterWithEvery503(t *testing.T) {
	clk := newStepClock()
	for _, tc := range []struct {
		name       string
		retryAfter time.Duration
		want       string
	}{
		{"default", 0, "10"},
		{"a second", time.Second, "1"},
		{"rounded up", 1500 * time.Millisecond, "2"},
		{"under a second", time.Nanosecond, "1"},
		{"MaxRetryAfter", MaxRetryAfter, "3600"},
	} {
		t.Run("store down, "+tc.name, func(t *testing.T) {
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: failingStore{}, Namespace: "endpoint",
				RetryAfter: tc.retryAfter, Now: clk.Now}
			next := &recordingHandler{}
			rec := deliver(newVerifier(t, cfg).Middleware(next), signed(t, newSigner(t, cfg), "evt", "b"), "b")
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Values("Retry-After")[0] != tc.want ||
				len(rec.Header().Values("Retry-After")) != 1 || next.calls.Load() != 0 {
				t.Fatalf("status %d, Retry-After %q, handler calls %d; want 503, %q, 0",
					rec.Code, rec.Header().Values("Retry-After"), next.calls.Load(), tc.want)
			}
		})
	}
	t.Run("store full", func(t *testing.T) {
		full := replay.NewMemoryStore(1)
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: full, Namespace: "endpoint", RetryAfter: 7 * time.Second, Now: clk.Now}
		mw := newVerifier(t, cfg).Middleware(&recordingHandler{})
		s := newSigner(t, cfg)
		deliver(mw, signed(t, s, "first", "a"), "a")
		rec := deliver(mw, signed(t, s, "second", "c"), "c")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "7" {
			t.Fatalf("status %d, Retry-After %q; want 503, 7", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
	t.Run("in progress: the lease, not RetryAfter", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: 42 * time.Second, RetryAfter: 7 * time.Second, Now: clk.Now}
		v := newVerifier(t, cfg)
		h := signed(t, newSigner(t, cfg), "evt", "b")
		d, err := v.Verify(h, []byte("b"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Acquire(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		rec := deliver(v.Middleware(&recordingHandler{}), h, "b")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Values("Retry-After")[0] != "42" || len(rec.Header().Values("Retry-After")) != 1 {
			t.Fatalf("status %d, Retry-After %q; want 503, [42]", rec.Code, rec.Header().Values("Retry-After"))
		}
	})
	t.Run("no header on other refusals", func(t *testing.T) {
		cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, RetryAfter: 7 * time.Second, Now: clk.Now}
		mw := newVerifier(t, cfg).Middleware(&recordingHandler{})
		for name, h := range map[string]http.Header{
			"forged":     {HeaderWebhookSignature: {"sha256=" + string(make([]byte, 64))}, HeaderWebhookID: {"evt"}},
			"no ID":      {HeaderWebhookSignature: {signSHA256([]byte(hmacSecret), []byte("b"))}},
			"no headers": {},
		} {
			if rec := deliver(mw, h, "b"); rec.Code == http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "" {
				t.Errorf("%s: status %d, Retry-After %q", name, rec.Code, rec.Header().Get("Retry-After"))
			}
		}
		var zero *Verifier
		if rec := deliver(zero.Middleware(&recordingHandler{}), http.Header{}, "b"); rec.Code != http.StatusInternalServerError || rec.Header().Get("Retry-After") != "" {
			t.Errorf("zero Verifier: status %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
}

// TestMiddlewareTransactionalCommitsTheHandlersWritesOnce drives
// Config.Transactional through every outcome with signed deliveries: the
// handler's write is kept exactly when the delivery is recorded, the
// sender gets the handler's response only when its outcome was recorded
// (a retryable 503 otherwise), each hook and the observer see what
// happened, and the sender's retry finds the delivery as the outcome left
// it.
func TestMiddlewareTransactionalCommitsTheHandlersWritesOnce(t *testing.T) {
	const lease = time.Second
	type env = txEnv
	tests := []struct {
		name    string
		fault   func(*txStore)
		first   func(e *env, w http.ResponseWriter, r *http.Request) // the handler's first call; later ones answer 201
		code    int                                                  // the sender gets
		held    bool                                                 // ... the handler's response (header and body)
		rows    int                                                  // kept after the first attempt
		leaseE  error                                                // OnLeaseError sees it; nil: not called
		notE    error                                                // ... and not this
		reject  error                                                // OnReject sees it; nil: not called
		release int                                                  // ReleaseLease calls
		event   observe.Event                                        // the first attempt's last event
		copy    int                                                  // a copy sent at once gets; 0: none sent
		expire  bool                                                 // the lease runs out before the retry
		retry   int                                                  // the retry gets
		calls   int                                                  // handler calls in all
	}{
		{
			name: "2xx commits the writes with the record", first: answer(http.StatusCreated),
			code: http.StatusCreated, held: true, rows: 1,
			event: webhookEvent(observe.OutcomeProcessed, observe.ReasonNone, observe.KeyPrimary),
			retry: http.StatusOK, calls: 1,
		},
		{
			name: "a decided 4xx commits too", first: answer(http.StatusUnprocessableEntity),
			code: http.StatusUnprocessableEntity, held: true, rows: 1,
			event: webhookEvent(observe.OutcomeProcessed, observe.ReasonNone, observe.KeyPrimary),
			retry: http.StatusOK, calls: 1,
		},
		{
			name: "5xx rolls back and releases", first: answer(http.StatusInternalServerError),
			code: http.StatusInternalServerError, held: true, release: 1,
			event: webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary),
			retry: http.StatusCreated, calls: 2,
		},
		{
			name: "429 rolls back and releases", first: answer(http.StatusTooManyRequests),
			code: http.StatusTooManyRequests, held: true, release: 1,
			event: webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary),
			retry: http.StatusCreated, calls: 2,
		},
		{
			name: "a panic rolls back and releases",
			first: func(_ *env, w http.ResponseWriter, r *http.Request) {
				answer(http.StatusCreated)(nil, w, r)
				panic(http.ErrAbortHandler)
			},
			code: -1, release: 1,
			event: webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary),
			retry: http.StatusCreated, calls: 2,
		},
		{
			name: "a handler that outlives its lease keeps nothing",
			first: func(e *env, w http.ResponseWriter, r *http.Request) {
				if err := txInsert(r.Context(), "first attempt"); err != nil {
					panic(err)
				}
				e.clk.Advance(2 * lease) // the lease runs out; the sender's copy takes it and is processed
				if rec := e.send(); rec.Code != http.StatusCreated {
					panic(fmt.Sprintf("the copy got %d", rec.Code))
				}
				w.WriteHeader(http.StatusCreated)
			},
			code: http.StatusServiceUnavailable, rows: 1, leaseE: replay.ErrLeaseLost,
			event: webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookLeaseLost, observe.KeyPrimary),
			retry: http.StatusOK, calls: 2,
		},
		{
			name: "a handler that outlives its lease with no copy arriving keeps nothing",
			first: func(e *env, w http.ResponseWriter, r *http.Request) {
				if err := txInsert(r.Context(), "first attempt"); err != nil {
					panic(err)
				}
				e.clk.Advance(2 * lease)
				w.WriteHeader(http.StatusCreated)
			},
			code: http.StatusServiceUnavailable, leaseE: replay.ErrLeaseLost,
			event: webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookLeaseLost, observe.KeyPrimary),
			retry: http.StatusCreated, calls: 2,
		},
		{
			name:  "an unknown outcome that committed: 503, not released",
			fault: func(s *txStore) { s.commitErr, s.commitKeeps = errStoreDown, true },
			first: answer(http.StatusCreated),
			code:  http.StatusServiceUnavailable, rows: 1, leaseE: errStoreDown, notE: replay.ErrLeaseLost,
			event: webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookStoreConfirm, observe.KeyPrimary),
			retry: http.StatusOK, calls: 1,
		},
		{
			name:  "an unknown outcome that did not commit: 503, processed once the lease ends",
			fault: func(s *txStore) { s.commitErr = errStoreDown },
			first: answer(http.StatusCreated),
			code:  http.StatusServiceUnavailable, leaseE: errStoreDown, notE: replay.ErrLeaseLost,
			event: webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookStoreConfirm, observe.KeyPrimary),
			copy:  http.StatusServiceUnavailable, expire: true,
			retry: http.StatusCreated, calls: 2,
		},
		{
			name:  "a transaction that cannot be opened: 503, handler not run",
			fault: func(s *txStore) { s.beginErr = errStoreDown },
			first: answer(http.StatusCreated),
			code:  http.StatusServiceUnavailable, reject: errStoreDown, release: 1,
			event: webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookStoreRecord, observe.KeyPrimary),
			retry: http.StatusCreated, calls: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{clk: newStepClock()}
			e.store = newTxStore(e.clk.Now)
			log := &observetest.Recorder{}
			var leaseErrs, rejects []error
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: e.store, Namespace: "endpoint",
				Lease: lease, Now: e.clk.Now, Transactional: true, Observer: log,
				OnLeaseError: func(_ *http.Request, _ Delivery, err error) { leaseErrs = append(leaseErrs, err) },
				OnReject:     func(_ *http.Request, err error) { rejects = append(rejects, err) },
			}
			v, s := newVerifier(t, cfg), newSigner(t, cfg)
			var calls atomic.Int32
			e.mw = v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					tc.first(e, w, r)
					return
				}
				answer(http.StatusCreated)(e, w, r)
			}))
			e.send = func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}"))
				if err := s.Sign(req.Header, "msg_1", []byte("{}")); err != nil {
					t.Error(err)
				}
				rec := httptest.NewRecorder()
				rec.Header().Set("X-Outer", "set before the middleware")
				e.mw.ServeHTTP(rec, req)
				return rec
			}
			if tc.fault != nil {
				tc.fault(e.store)
			}

			var rec *httptest.ResponseRecorder
			panicked := func() (p any) {
				defer func() { p = recover() }()
				rec = e.send()
				return nil
			}()
			if tc.code == -1 {
				if panicked != http.ErrAbortHandler {
					t.Fatalf("the handler's panic came out as %v", panicked)
				}
			} else {
				if panicked != nil {
					t.Fatal(panicked)
				}
				if rec.Code != tc.code {
					t.Fatalf("status %d, want %d", rec.Code, tc.code)
				}
				got := rec.Header().Get("X-Order") != "" && rec.Body.String() == "done"
				if got != tc.held || rec.Header().Get("X-Outer") == "" {
					t.Fatalf("header %v, body %q: the handler's response sent: %v, want %v (and the outer header kept)", rec.Header(), rec.Body, got, tc.held)
				}
				if rec.Code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") != "10" {
					t.Fatalf("503 with Retry-After %q, want the default 10", rec.Header().Get("Retry-After"))
				}
			}
			wantHook(t, "OnLeaseError", leaseErrs, tc.leaseE, tc.notE)
			wantHook(t, "OnReject", rejects, tc.reject, nil)
			if got := log.Take(); len(got) == 0 {
				t.Errorf("no event, want the last %+v", tc.event)
			} else if last, _ := hadStore(got[len(got)-1]); last != tc.event {
				t.Errorf("events %+v, want the last %+v", got, tc.event)
			}
			rows, _ := e.store.stats()
			if n := rows["msg_1"] + rows["first attempt"]; n != tc.rows || len(rows) > 1 {
				t.Fatalf("rows %v after the first attempt, want %d", rows, tc.rows)
			}
			if _, _, _, releases := e.store.counts(); releases != tc.release {
				t.Fatalf("ReleaseLease called %d times, want %d", releases, tc.release)
			}

			e.store.mu.Lock()
			e.store.beginErr, e.store.commitErr = nil, nil
			e.store.mu.Unlock()
			if tc.copy != 0 {
				if rec := e.send(); rec.Code != tc.copy {
					t.Fatalf("a copy at once: status %d, want %d", rec.Code, tc.copy)
				}
			}
			if tc.expire {
				e.clk.Advance(2 * lease)
			}
			if rec := e.send(); rec.Code != tc.retry {
				t.Fatalf("the retry: status %d, want %d", rec.Code, tc.retry)
			}
			if n := calls.Load(); int(n) != tc.calls {
				t.Fatalf("handler called %d times, want %d", n, tc.calls)
			}
			rows, _ = e.store.stats()
			if n := rows["msg_1"] + rows["first attempt"]; n != 1 {
				t.Fatalf("rows %v at the end, want exactly one write for the delivery", rows)
			}
		})
	}
}

// txEnv is a transactional middleware under test, its store and clock,
// and a sender of one signed delivery to it.
type txEnv struct {
	clk   *stepClock
	store *txStore
	mw    http.Handler
	send  func() *httptest.ResponseRecorder
}

// answer is a handler that writes the delivery's row in its transaction,
// then answers status with a header and a body.
func answer(status int) func(*txEnv, http.ResponseWriter, *http.Request) {
	return func(_ *txEnv, w http.ResponseWriter, r *http.Request) {
		d, _ := DeliveryFrom(r.Context())
		if err := txInsert(r.Context(), d.ID); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Order", "1")
		w.WriteHeader(status)
		io.WriteString(w, "done")
	}
}

// wantHook fails t unless a hook saw exactly one error matching want (and
// not notE), or none when want is nil.
func wantHook(t *testing.T, hook string, got []error, want, notE error) {
	t.Helper()
	switch {
	case want == nil && len(got) != 0:
		t.Fatalf("%s saw %v, want nothing", hook, got)
	case want == nil:
	case len(got) != 1 || !errors.Is(got[0], want) || (notE != nil && errors.Is(got[0], notE)):
		t.Fatalf("%s saw %v, want one error matching %v", hook, got, want)
	}
}

// commitWatcher is a ResponseWriter that records how many commits the
// store had made when the status was sent.
type commitWatcher struct {
	*httptest.ResponseRecorder
	store         *txStore
	commitsAtSend int
}

func (w *commitWatcher) WriteHeader(code int) {
	_, w.commitsAtSend, _, _ = w.store.counts()
	w.ResponseRecorder.WriteHeader(code)
}

// TestMiddlewareTransactionalHoldsTheResponseUntilTheCommit: under
// Transactional nothing reaches the sender before the commit: the writer
// the handler gets cannot flush, informational statuses are dropped, and
// the status goes out after the store committed.
func TestMiddlewareTransactionalHoldsTheResponseUntilTheCommit(t *testing.T) {
	store := newTxStore(nil)
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Transactional: true}
	v, s := newVerifier(t, cfg), newSigner(t, cfg)
	var checks []string
	mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Flusher); ok {
			checks = append(checks, "the writer is an http.Flusher")
		}
		if err := http.NewResponseController(w).Flush(); !errors.Is(err, http.ErrNotSupported) {
			checks = append(checks, fmt.Sprintf("ResponseController.Flush = %v, want ErrNotSupported", err))
		}
		if err := txInsert(r.Context(), "row"); err != nil {
			checks = append(checks, err.Error())
		}
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
		w.WriteHeader(http.StatusInternalServerError) // stray: changes nothing
		io.WriteString(w, "queued")
	}))
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}"))
	if err := s.Sign(req.Header, "msg_1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	w := &commitWatcher{ResponseRecorder: httptest.NewRecorder(), store: store}
	mw.ServeHTTP(w, req)
	if len(checks) != 0 {
		t.Fatal(checks)
	}
	if w.Code != http.StatusAccepted || w.Body.String() != "queued" || w.commitsAtSend != 1 {
		t.Fatalf("status %d, body %q, sent after %d commits; want 202, queued, after 1", w.Code, w.Body, w.commitsAtSend)
	}
	if rows, _ := store.stats(); rows["row"] != 1 {
		t.Fatalf("rows %v", rows)
	}
}

// TestMiddlewareTransactional pins Config.Transactional where the table
// of TestMiddlewareTransactionalCommitsTheHandlersWritesOnce does not
// reach: a handler that outlives a timeout, concurrent copies, a commit
// the store rolled back or refused, and a replay.WorkAcquirer.
func TestMiddlewareTransactional(t *testing.T) {
	// The http.TimeoutHandler composition: the wrapper answers 503
	// while the handler runs on, the middleware rolls the work back and
	// releases the delivery, and the handler's late write is refused instead
	// of committed beside the retry's.
	t.Run("late writes after a timeout are dropped", func(t *testing.T) {
		store := newTxStore(nil)
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Transactional: true}
		v, s := newVerifier(t, cfg), newSigner(t, cfg)
		late := make(chan struct{})
		lateErr := make(chan error, 1)
		var calls atomic.Int32
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				<-r.Context().Done() // TimeoutHandler gave up on it
				<-late               // ... and the middleware has answered
				lateErr <- txInsert(r.Context(), "charge")
				return
			}
			if err := txInsert(r.Context(), "charge"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		mw := v.Middleware(http.TimeoutHandler(inner, 20*time.Millisecond, "timed out"))
		if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusServiceUnavailable {
			t.Fatalf("first attempt: status %d, want TimeoutHandler's 503", code)
		}
		close(late)
		if err := <-lateErr; !errors.Is(err, errTxEnded) {
			t.Fatalf("the late write = %v, want it refused", err)
		}
		if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusNoContent {
			t.Fatalf("the retry: status %d, want 204", code)
		}
		if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusOK {
			t.Fatalf("a later copy: status %d, want 200", code)
		}
		if rows, refused := store.stats(); rows["charge"] != 1 || refused != 1 {
			t.Fatalf("rows %v, %d writes refused; want one charge, the late write refused", rows, refused)
		}
	})

	// Each of several deliveries is sent as concurrent copies, each retried
	// until it is acknowledged, with a handler whose first attempt at each
	// delivery outlives its lease (on the real clock): every delivery's write
	// is kept exactly once.
	t.Run("concurrent copies commit once per delivery", func(t *testing.T) {
		const (
			deliveries = 8
			copies     = 4
			lease      = 40 * time.Millisecond
		)
		store := newTxStore(nil)
		var slow sync.Map // delivery ID → its first attempt has started
		var lost atomic.Int32
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint",
			Lease: lease, Transactional: true,
			OnLeaseError: func(_ *http.Request, _ Delivery, err error) {
				if errors.Is(err, replay.ErrLeaseLost) {
					lost.Add(1)
				}
			}}
		v, s := newVerifier(t, cfg), newSigner(t, cfg)
		mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := DeliveryFrom(r.Context())
			if err := txInsert(r.Context(), d.ID); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if _, seen := slow.LoadOrStore(d.ID, true); !seen {
				time.Sleep(2 * lease) // ignores its context: outlives the lease
			}
			w.WriteHeader(http.StatusCreated)
		}))
		var wg sync.WaitGroup
		errs := make(chan error, deliveries*copies)
		for i := range deliveries {
			id := fmt.Sprintf("msg_%d", i)
			for range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for attempt := 0; ; attempt++ {
						req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}"))
						if err := s.Sign(req.Header, id, []byte("{}")); err != nil {
							errs <- err
							return
						}
						rec := httptest.NewRecorder()
						mw.ServeHTTP(rec, req)
						switch {
						case rec.Code == http.StatusOK || rec.Code == http.StatusCreated:
							return
						case rec.Code != http.StatusServiceUnavailable:
							errs <- fmt.Errorf("%s: status %d", id, rec.Code)
							return
						case attempt == 200:
							errs <- fmt.Errorf("%s: still 503 after %d attempts", id, attempt)
							return
						}
						time.Sleep(lease / 4)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		rows, _ := store.stats()
		for i := range deliveries {
			if id := fmt.Sprintf("msg_%d", i); rows[id] != 1 {
				t.Errorf("%s: %d rows kept, want 1", id, rows[id])
			}
		}
		if len(rows) != deliveries {
			t.Errorf("rows %v, want one per delivery", rows)
		}
		if lost.Load() == 0 {
			t.Error("no attempt lost its lease: the test did not exercise a handler outliving its lease")
		}
	})

	// A commit the store rolled back for a reason it knows (a statement of the
	// handler's work had failed: replay.ErrRolledBack) kept nothing, so the
	// delivery is released and the sender's retry processes it at once,
	// instead of being told it is in progress until the lease ends.
	t.Run("a rolled-back commit releases the delivery", func(t *testing.T) {
		store := newTxStore(nil)
		store.commitErr = fmt.Errorf("%w: a statement of the work failed", replay.ErrRolledBack)
		var leaseErr error
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Transactional: true, Lease: time.Minute,
			OnLeaseError: func(_ *http.Request, _ Delivery, err error) { leaseErr = err }}
		v, s := newVerifier(t, cfg), newSigner(t, cfg)
		mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := txInsert(r.Context(), "charge"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusServiceUnavailable {
			t.Fatalf("first copy: status %d, want 503", code)
		}
		if !errors.Is(leaseErr, ErrReplayStore) || !errors.Is(leaseErr, replay.ErrRolledBack) {
			t.Fatalf("OnLeaseError saw %v; want ErrReplayStore and replay.ErrRolledBack", leaseErr)
		}
		if _, _, _, releases := store.counts(); releases != 1 {
			t.Fatalf("%d releases, want 1: the rolled-back delivery released", releases)
		}
		store.mu.Lock()
		store.commitErr = nil
		store.mu.Unlock()
		if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusNoContent {
			t.Fatalf("the sender's retry: status %d, want 204 (processed at once)", code)
		}
		if rows, _ := store.stats(); rows["charge"] != 1 {
			t.Fatalf("rows %v, want one charge", rows)
		}
	})

	// A commit the store refused is answered like a refusal of Acquire:
	// Retry-After the seconds until the refusal ends when the store says (at
	// most MaxFenceRetryAfter, the end in the body), RetryAfter when it does
	// not, and none (a body naming the operator, still 503) when only an
	// operator can lift it.
	t.Run("a refused commit tells when to retry", func(t *testing.T) {
		tests := []struct {
			name     string
			err      error
			want     string
			operator bool
		}{
			{"fenced for 20 s", fencedError{time.Now().Add(20 * time.Second)}, "20", false},
			{"fenced for 90 s: capped", fencedError{time.Now().Add(90 * time.Second)}, "30", false},
			{"end unknown", errStoreDown, "7", false},
			{"operator only", fmt.Errorf("store: %w", replay.ErrConfig), "", true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				store := newTxStore(nil)
				store.commitErr = tt.err
				cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint",
					Transactional: true, Lease: time.Minute, RetryAfter: 7 * time.Second,
					OnLeaseError: func(*http.Request, Delivery, error) {}}
				mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
				body := []byte("{}")
				req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
				if err := newSigner(t, cfg).Sign(req.Header, "msg_1", body); err != nil {
					t.Fatal(err)
				}
				rec := httptest.NewRecorder()
				mw.ServeHTTP(rec, req)
				if rec.Code != http.StatusServiceUnavailable {
					t.Fatalf("status %d; want 503", rec.Code)
				}
				if got := rec.Header().Values("Retry-After"); (tt.want == "" && len(got) != 0) || (tt.want != "" && (len(got) != 1 || got[0] != tt.want)) {
					t.Fatalf("Retry-After %q; want %q", got, tt.want)
				}
				if strings.Contains(rec.Body.String(), "operator") != tt.operator {
					t.Fatalf("body %q; operator named: want %v", rec.Body, tt.operator)
				}
				if fe, ok := tt.err.(fencedError); ok && !strings.Contains(rec.Body.String(), httpx.FenceEnd(fe.at)) {
					t.Fatalf("body %q; want the fence's end %s", rec.Body, httpx.FenceEnd(fe.at))
				}
			})
		}
	})

	// On a replay.WorkAcquirer the first delivery runs the handler in the
	// work Acquire took (no BeginWork, no ReleaseLease) and commits once; its
	// copy is acknowledged as a duplicate without running the handler; a
	// handler's retry status rolls the work back, which frees the delivery
	// for the sender's retry.
	t.Run("takes no committed lease on a WorkAcquirer", func(t *testing.T) {
		tests := []struct {
			name       string
			status     int
			wantStatus []int // the first delivery's, then its copy's
			rows       map[string]int
			runs       int // of the handler
			commits    int
			rollbacks  int
		}{
			{"processed", http.StatusCreated, []int{http.StatusCreated, http.StatusOK}, map[string]int{"msg_1": 1}, 1, 1, 0},
			{"retry status", http.StatusServiceUnavailable, []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable}, map[string]int{}, 2, 0, 2},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				store := &heldTxStore{txStore: newTxStore(nil)}
				cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Transactional: true}
				v, s := newVerifier(t, cfg), newSigner(t, cfg)
				runs := 0
				mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs++
					if err := txInsert(r.Context(), "msg_1"); err != nil {
						t.Error(err)
					}
					w.WriteHeader(tc.status)
				}))
				for i, want := range tc.wantStatus {
					req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}"))
					if err := s.Sign(req.Header, "msg_1", []byte("{}")); err != nil {
						t.Fatal(err)
					}
					rec := httptest.NewRecorder()
					mw.ServeHTTP(rec, req)
					if rec.Code != want {
						t.Fatalf("delivery %d: status %d, want %d", i, rec.Code, want)
					}
				}
				if rows, _ := store.stats(); !maps.Equal(rows, tc.rows) {
					t.Fatalf("rows %v, want %v", rows, tc.rows)
				}
				begins, commits, rollbacks, releases := store.counts()
				if begins != 0 || releases != 0 || commits != tc.commits || rollbacks != tc.rollbacks {
					t.Fatalf("BeginWork %d, Commit %d, Rollback %d, ReleaseLease %d; want 0, %d, %d, 0", begins, commits, rollbacks, releases, tc.commits, tc.rollbacks)
				}
				if runs != tc.runs {
					t.Fatalf("handler ran %d times, want %d", runs, tc.runs)
				}
			})
		}
	})
}

// TestMiddlewareSenderLeavingDoesNotEndTheHandlersContext: a sender that
// times out while the handler works (it processes the delivery, then
// takes one more context-bound step) does not cancel the handler's
// context, so the delivery is confirmed, not released, and the sender's
// retry is acknowledged as a duplicate without running the handler again.
func TestMiddlewareSenderLeavingDoesNotEndTheHandlersContext(t *testing.T) {
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: &replay.MemoryStore{}, Namespace: "endpoint"}
	var processed atomic.Int64
	done := make(chan int, 1)
	mw := newVerifier(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		processed.Add(1)
		select {
		case <-r.Context().Done():
			http.Error(w, r.Context().Err().Error(), http.StatusInternalServerError)
			done <- http.StatusInternalServerError
		case <-time.After(300 * time.Millisecond): // the receipt
			w.WriteHeader(http.StatusNoContent)
			done <- http.StatusNoContent
		}
	}))
	srv := httptest.NewServer(mw)
	defer srv.Close()
	signer := newSigner(t, cfg)
	send := func(client *http.Client) (int, error) {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		if err := signer.Sign(req.Header, "evt-1", []byte("x")); err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if _, err := send(&http.Client{Timeout: 100 * time.Millisecond}); err == nil {
		t.Fatal("the impatient sender got an answer within 100 ms; the test needs it to give up")
	}
	if status := <-done; status != http.StatusNoContent {
		t.Fatalf("the handler answered %d after the sender left; want 204 (its context not ended)", status)
	}
	// The handler has answered; the middleware confirms the delivery just
	// after, so a retry sent in between finds it still leased (503, retry
	// later). Retry as a sender would, for a bounded time.
	var status int
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status, err = send(srv.Client())
		if err != nil || status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || status != http.StatusOK {
		t.Fatalf("the sender's retry: %d, %v; want 200, the duplicate's acknowledgement", status, err)
	}
	if n := processed.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once", n)
	}
}

// TestMiddlewareTimeoutHandlerComposition pins what docs/webhooks.md says
// of http.TimeoutHandler without Transactional: inside the middleware its
// 503 would release the delivery while the handler still runs, so the
// sender's retry would run the handler beside itself; the middleware
// refuses that composition (500, ErrConfig to OnReject, no run). Outside,
// the handler runs on under its own deadline, the delivery is recorded,
// and the retry is acknowledged without a second run.
func TestMiddlewareTimeoutHandlerComposition(t *testing.T) {
	t.Run("inside the middleware: refused, no run", func(t *testing.T) {
		var rejected error
		cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: &replay.MemoryStore{}, Namespace: "endpoint",
			OnReject: func(_ *http.Request, err error) { rejected = err }}
		v, s := newVerifier(t, cfg), newSigner(t, cfg)
		var runs atomic.Int32
		mw := v.Middleware(http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}), 20*time.Millisecond, "timed out"))
		for range 2 {
			if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusInternalServerError {
				t.Fatalf("status %d, want 500", code)
			}
		}
		if n := runs.Load(); n != 0 || !errors.Is(rejected, ErrConfig) {
			t.Fatalf("%d runs, OnReject saw %v; want no run and ErrConfig", n, rejected)
		}
	})

	tests := []struct {
		name     string
		compose  func(v *Verifier, h http.Handler) http.Handler
		wantRuns int32
		wantLast int // the status of the copy sent once the first run ended
	}{
		{"outside the middleware: one run", func(v *Verifier, h http.Handler) http.Handler {
			return http.TimeoutHandler(v.Middleware(h), 20*time.Millisecond, "timed out")
		}, 1, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: &replay.MemoryStore{}, Namespace: "endpoint", Lease: 10 * time.Second}
			v, s := newVerifier(t, cfg), newSigner(t, cfg)
			var runs atomic.Int32
			release := make(chan struct{})
			firstDone := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					defer close(firstDone)
					select { // outlives the TimeoutHandler, ignoring its context
					case <-release:
					case <-time.After(10 * time.Second):
					}
				}
				w.WriteHeader(http.StatusNoContent)
			})
			mw := tt.compose(v, h)
			if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusServiceUnavailable {
				t.Fatalf("first copy: status %d, want the TimeoutHandler's 503", code)
			}
			retry := sendSigned(t, mw, s, "msg_1", []byte("{}")) // while the first run still runs
			close(release)
			<-firstDone
			var last int
			for range 100 { // the first run's outcome is recorded just after it returns
				if last = sendSigned(t, mw, s, "msg_1", []byte("{}")); last == tt.wantLast {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if got := runs.Load(); got != tt.wantRuns || last != tt.wantLast {
				t.Fatalf("%d runs (the retry during the first run got %d), last copy %d; want %d runs, last %d", got, retry, last, tt.wantRuns, tt.wantLast)
			}
		})
	}
}

// TestMiddlewareHandlerGoexitReleasesTheDelivery: a handler that ends its
// goroutine with runtime.Goexit did not finish, as a panic: the delivery
// is released (under Transactional, its work rolled back), never
// confirmed, so the sender's retry processes it.
func TestMiddlewareHandlerGoexitReleasesTheDelivery(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		t.Run(fmt.Sprint("transactional=", transactional), func(t *testing.T) {
			store := newTxStore(nil)
			cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Transactional: transactional}
			v, s := newVerifier(t, cfg), newSigner(t, cfg)
			var runs atomic.Int32
			mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					if transactional {
						txInsert(r.Context(), "charge")
					}
					runtime.Goexit()
				}
				if transactional {
					txInsert(r.Context(), "charge")
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			done := make(chan struct{})
			go func() {
				defer close(done)
				sendSigned(t, mw, s, "msg_1", []byte("{}"))
			}()
			<-done
			if code := sendSigned(t, mw, s, "msg_1", []byte("{}")); code != http.StatusNoContent || runs.Load() != 2 {
				t.Fatalf("the sender's retry: %d after %d runs; want 204 from a second run", code, runs.Load())
			}
			if rows, _ := store.stats(); transactional && rows["charge"] != 1 {
				t.Fatalf("rows %v, want one charge", rows)
			}
		})
	}
}

// refusingStore refuses every call with err.
type refusingStore struct{ err error }

func (s refusingStore) Claim(context.Context, string, time.Time) (bool, error) { return false, s.err }
func (s refusingStore) AcquireLease(context.Context, string, time.Duration) (replay.Lease, error) {
	return replay.Lease{}, s.err
}
func (s refusingStore) ConfirmLease(context.Context, string, string, time.Time) error { return s.err }
func (s refusingStore) ReleaseLease(context.Context, string, string) error            { return s.err }

// fencedError is a store refusal that knows when it ends (as redisstore's
// fenced shard does).
type fencedError struct{ at time.Time }

func (e fencedError) Error() string      { return "store: shard fenced" }
func (e fencedError) RetryAt() time.Time { return e.at }

// A store refusal is answered 503 (never a 4xx: the sender keeps the
// delivery) with a Retry-After of the seconds until it ends when the store
// says (replay.RetryAt), at most MaxFenceRetryAfter however far the end
// is, with a body stating the end; Config.RetryAfter when it does not say;
// and without Retry-After, with a body naming the operator, when only an
// operator can lift it (replay.ErrConfig).
func TestMiddlewareStoreRefusalRetryAfterTellsWhenItEnds(t *testing.T) {
	clk := newStepClock()
	day := time.Now().Add(25 * time.Hour)
	tests := []struct {
		name     string
		err      error
		want     string    // Retry-After; "" for none
		end      time.Time // the end the body states; zero for none
		operator bool
	}{
		{"fence ends in 30 s", fmt.Errorf("claim: %w", fencedError{time.Now().Add(30 * time.Second)}), "30", time.Time{}, false},
		{"fence ends in 1.2 s: rounded up", fencedError{time.Now().Add(1200 * time.Millisecond)}, "2", time.Time{}, false},
		{"fence already over: at least 1", fencedError{time.Now().Add(-time.Minute)}, "1", time.Time{}, false},
		{"fence ends in 25 h: capped at MaxFenceRetryAfter, the end in the body", fencedError{day}, "30", day, false},
		{"fence ends in 90 000 s: capped", fmt.Errorf("claim: %w", fencedError{day.Add(time.Hour)}), "30", day.Add(time.Hour), false},
		{"end unknown: RetryAfter", fencedError{}, "7", time.Time{}, false},
		{"store down: RetryAfter", errStoreDown, "7", time.Time{}, false},
		{"operator only", fmt.Errorf("store: %w", replay.ErrConfig), "", time.Time{}, true},
		{"operator only, even with an end", errors.Join(replay.ErrConfig, fencedError{time.Now().Add(time.Hour)}), "", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rejected error
			cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: refusingStore{tt.err}, Namespace: "endpoint",
				RetryAfter: 7 * time.Second, Now: clk.Now, OnReject: func(_ *http.Request, err error) { rejected = err }}
			next := &recordingHandler{}
			rec := deliver(newVerifier(t, cfg).Middleware(next), signed(t, newSigner(t, cfg), "evt", "b"), "b")
			if rec.Code != http.StatusServiceUnavailable || next.calls.Load() != 0 {
				t.Fatalf("status %d, handler calls %d; want 503, 0", rec.Code, next.calls.Load())
			}
			if got := rec.Header().Values("Retry-After"); (tt.want == "" && len(got) != 0) || (tt.want != "" && (len(got) != 1 || got[0] != tt.want)) {
				t.Fatalf("Retry-After %q; want %q", got, tt.want)
			}
			if strings.Contains(rec.Body.String(), "operator") != tt.operator {
				t.Fatalf("body %q; operator named: want %v", rec.Body, tt.operator)
			}
			if !tt.end.IsZero() && !strings.Contains(rec.Body.String(), httpx.FenceEnd(tt.end)) {
				t.Fatalf("body %q; want the fence's end %s", rec.Body, httpx.FenceEnd(tt.end))
			}
			if !errors.Is(rejected, ErrReplayStore) {
				t.Fatalf("OnReject saw %v; want ErrReplayStore", rejected)
			}
		})
	}
}

// ctxStore is a MemoryStore that records, for each lease step, whether
// its context is one only a deadline ends (replay.EndsOnlyAtDeadline),
// whether it was already done, and its deadline.
type ctxStore struct {
	*replay.MemoryStore
	mu    sync.Mutex
	steps []ctxStep
}

type ctxStep struct {
	method       string
	deadlineOnly bool
	err          error
	deadline     time.Time
}

func (s *ctxStore) record(method string, ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, stepOf(method, ctx))
}

// stepOf is the step of method under ctx.
func stepOf(method string, ctx context.Context) ctxStep {
	d, _ := ctx.Deadline()
	return ctxStep{method, replay.EndsOnlyAtDeadline(ctx), ctx.Err(), d}
}

func (s *ctxStore) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	s.record("AcquireLease", ctx)
	return s.MemoryStore.AcquireLease(ctx, id, lease)
}

func (s *ctxStore) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	s.record("ConfirmLease", ctx)
	return s.MemoryStore.ConfirmLease(ctx, id, token, until)
}

// TestMiddlewareLeaseStepsIgnoreTheSendersCancellation sends a delivery
// whose request context is already cancelled (the sender disconnected):
// the middleware still takes the lease, runs the handler and confirms,
// under contexts that only their deadlines end (replay.WithDeadlineOnly),
// the acquire's a quarter of the lease from the request and the
// confirm's at most the lease's expiry.
func TestMiddlewareLeaseStepsIgnoreTheSendersCancellation(t *testing.T) {
	const lease = 40 * time.Second
	store := &ctxStore{MemoryStore: replay.NewMemoryStore(16)}
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Lease: lease})
	s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	next := &recordingHandler{status: http.StatusNoContent}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/hook", strings.NewReader(benchBody))
	for k, vs := range signed(t, s, "msg_gone", benchBody) {
		req.Header[k] = vs
	}
	start := time.Now()
	rec := httptest.NewRecorder()
	v.Middleware(next).ServeHTTP(rec, req)
	end := time.Now()
	if rec.Code != http.StatusNoContent || next.calls.Load() != 1 {
		t.Fatalf("status %d, handler calls %d; want 204 and 1", rec.Code, next.calls.Load())
	}
	want := []struct {
		method         string
		earliest, last time.Time
	}{
		{"AcquireLease", start.Add(lease / 4), end.Add(lease / 4)},
		{"ConfirmLease", start, end.Add(lease)},
	}
	if len(store.steps) != len(want) {
		t.Fatalf("store steps = %+v, want AcquireLease then ConfirmLease", store.steps)
	}
	for i, w := range want {
		t.Run(w.method, func(t *testing.T) {
			got := store.steps[i]
			if got.method != w.method || !got.deadlineOnly || got.err != nil {
				t.Fatalf("step = %+v; want %s under a live context only its deadline ends", got, w.method)
			}
			if got.deadline.Before(w.earliest) || got.deadline.After(w.last) {
				t.Fatalf("deadline %v, want within [%v, %v]", got.deadline, w.earliest, w.last)
			}
		})
	}
}
