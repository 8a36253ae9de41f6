package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// benchBody is a typical small delivery.
var benchBody = `{"type":"statusChange","id":"bc-123456","status":"FINISHED","at":"2026-01-02T03:04:05Z"}`

// signedRequests returns n signed Standard Webhooks requests for distinct
// deliveries, IDs starting at first.
func signedRequests(tb testing.TB, s *Signer, first, n int) []*http.Request {
	tb.Helper()
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(benchBody))
		if err := s.Sign(r.Header, "msg_"+strconv.Itoa(first+i), []byte(benchBody)); err != nil {
			tb.Fatal(err)
		}
		reqs[i] = r
	}
	return reqs
}

// BenchmarkMiddleware measures new deliveries through the middleware with
// the memory store: read, verify, acquire the lease, run a handler that
// answers 204, confirm. "serial" excludes signing; "parallel" includes it
// (each goroutine signs its own deliveries). "floor/serial" is the same
// deliveries verified and deduped in a map, without a lease.
func BenchmarkMiddleware(b *testing.B) {
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: replay.NewMemoryStore(1 << 23), Namespace: "endpoint"}
	v := newVerifier(b, cfg)
	signer := newSigner(b, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	// The floor: the body read and the signature verified by a Verifier
	// without a lease, the ID put in a map under a mutex (a dedupe that
	// survives nothing), 204.
	plain := newVerifier(b, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	var mu sync.Mutex
	seen := make(map[string]struct{})
	floor := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body", http.StatusBadRequest)
			return
		}
		d, err := plain.Verify(r.Header, raw)
		if err != nil {
			http.Error(w, "signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		_, dup := seen[d.ID]
		seen[d.ID] = struct{}{}
		mu.Unlock()
		if dup {
			http.Error(w, "duplicate", http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	var next atomic.Int64
	serial := func(h http.Handler) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			const batch = 1024
			var reqs []*http.Request
			for i := range b.N {
				if i%batch == 0 {
					b.StopTimer()
					reqs = signedRequests(b, signer, int(next.Add(batch))-batch, batch)
					b.StartTimer()
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, reqs[i%batch])
				if rec.Code != http.StatusNoContent {
					b.Fatalf("status %d", rec.Code)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		}
	}
	b.Run("memory/serial", serial(mw))
	b.Run("floor/serial", serial(floor))
	b.Run("memory/parallel+sign", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r := signedRequests(b, signer, int(next.Add(1)), 1)[0]
				rec := httptest.NewRecorder()
				mw.ServeHTTP(rec, r)
				if rec.Code != http.StatusNoContent {
					b.Errorf("status %d", rec.Code)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
	})
}

// retainedBytesPerDelivery processes n distinct Standard Webhooks
// deliveries through a Verifier of the default configuration (its private
// memory store) and returns the heap retained per delivery after a full
// collection.
func retainedBytesPerDelivery(tb testing.TB, n int) float64 {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := newVerifier(tb, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	ctx, now := context.Background(), time.Now()
	for i := range n {
		// A Delivery as Verify returns it, without the signing and
		// verifying that leave nothing behind.
		d := Delivery{ID: "msg_2KWPBgLlAfxdpx2AI54pPJ85f1W" + strconv.Itoa(i), Timestamp: now, verified: true}
		l, err := v.Acquire(ctx, d)
		if err != nil {
			tb.Fatalf("delivery %d: %v", i, err)
		}
		if err := l.Confirm(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := v.p.store.(*replay.MemoryStore).Len(); got != n {
		tb.Fatalf("store holds %d deliveries, want %d", got, n)
	}
	runtime.KeepAlive(v)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkRetainedDeliveryBytes fills the default configuration's store
// to its capacity, DefaultReplayMax deliveries (more than 1 000 000 a day
// under the 24 h DefaultDedupWindow), and reports the heap retained per
// delivery. Run it with -benchtime=1x.
func BenchmarkRetainedDeliveryBytes(b *testing.B) {
	var per float64
	for b.Loop() {
		per = retainedBytesPerDelivery(b, DefaultReplayMax)
	}
	b.ReportMetric(per, "bytes/delivery")
	b.ReportMetric(per*DefaultReplayMax/(1<<20), "MiB/full-store")
}

// TestRetainedBytesPerDeliveryBounded holds the bound DefaultReplayMax
// documents (96 bytes per delivery) on a smaller store.
func TestRetainedBytesPerDeliveryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 12 MB")
	}
	if per := retainedBytesPerDelivery(t, 1<<17); per > 96 {
		t.Fatalf("%.1f bytes retained per delivery, want at most 96", per)
	} else {
		t.Logf("%.1f bytes retained per delivery", per)
	}
}

// A full default store refuses a new delivery loudly and keeps every
// processed one.
func TestFullStoreRefusesNewDeliveryAndKeepsProcessedOnes(t *testing.T) {
	clk := newStepClock()
	store := &replay.MemoryStore{Max: 3, Now: clk.Now}
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: store, Namespace: "endpoint", Now: clk.Now}
	next := &recordingHandler{}
	mw := newVerifier(t, cfg).Middleware(next)
	signer := newSigner(t, cfg)
	var hs []http.Header
	for i := range 3 {
		hs = append(hs, signed(t, signer, "msg_"+strconv.Itoa(i), "x"))
		deliver(mw, hs[i], "x")
	}
	if rec := deliver(mw, signed(t, signer, "msg_new", "x"), "x"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("new delivery into a full store: status %d, want 503", rec.Code)
	}
	for i, h := range hs {
		if rec := deliver(mw, h, "x"); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
			t.Fatalf("retry of processed delivery %d on a full store: %d %q, want an empty 200", i, rec.Code, rec.Body)
		}
	}
	if n := next.calls.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}
