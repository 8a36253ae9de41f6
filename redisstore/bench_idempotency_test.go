package redisstore

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
)

// BenchmarkIdempotencyFirstRequestCost measures first requests (a new
// Idempotency-Key each) through the idempotency middleware with this
// store, on a redis-server of its own, one request at a time, beside their
// floor in the same run:
//
//	floor   a handler that reads the body, sends one SET NX PXAT of the
//	        key under the request's context and answers 201: the least
//	        a request that records its key can cost
//	first   the middleware: read and fingerprint, acquire the key's
//	        lease (one guarded script), the handler answering 201, seal
//	        and record the response (one guarded script)
//
// Each request carries a context that can be cancelled, as a net/http
// server's request does. The two alternate in slices of 256 requests so
// that both see the same load on a shared machine; b.N counts requests of
// each, and ns/op and allocs/op count one of each and the bookkeeping
// between slices. Each kind reports per request its time (floor-ns/op,
// first-ns/op), its allocations in this process (allocs, all of its
// goroutines, the client pool's included), this process's CPU time (cpu-us,
// every thread: unlike the time, it does not count waiting for a CPU on a
// busy machine; not reported where the clock is unavailable) and the
// redis-server process's (redis-cpu-us, user + system from INFO cpu), and
// the middleware's ratio to the floor in time (x-floor).
func BenchmarkIdempotencyFirstRequestCost(b *testing.B) {
	const slice = 256
	srv := newServer(b)
	c := srv.client()
	s := provisioned(b, c, Options{Prefix: "bench-idem:"})
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(b, err)
	mw, err := idempotency.New(idempotency.Config{
		Store: s, Keys: keys,
		Caller: func(*http.Request) (string, error) { return "merchant-1", nil },
		Route:  func(*http.Request) string { return "POST /payments" },
	})
	must(b, err)
	const body, answer = `{"amount":100,"currency":"eur"}`, `{"id":"pay_1"}`
	handler := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, answer)
	}
	window := idempotency.DefaultWindow
	floor := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body", http.StatusBadRequest)
			return
		}
		until := time.Now().Add(window).UnixMilli()
		if err := c.Do(r.Context(), "SET", "bench-floor:"+r.Header.Get("Idempotency-Key"), "1", "NX", "PXAT", until).Err(); err != nil {
			http.Error(w, "store", http.StatusServiceUnavailable)
			return
		}
		handler(w)
	})
	first := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w) }))

	next := 0
	// requests makes n requests with fresh keys, each with a context of
	// its own that can be cancelled, and the cancel of them all.
	requests := func(n int) ([]*http.Request, func()) {
		reqs := make([]*http.Request, n)
		cancels := make([]context.CancelFunc, n)
		for i := range reqs {
			next++
			ctx, cancel := context.WithCancel(context.Background())
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/payments", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", `"order-`+strconv.Itoa(next)+`"`)
			reqs[i], cancels[i] = r, cancel
		}
		return reqs, func() {
			for _, cancel := range cancels {
				cancel()
			}
		}
	}
	var ms runtime.MemStats
	mallocs := func() uint64 {
		runtime.ReadMemStats(&ms)
		return ms.Mallocs
	}
	var wall, cpu [2]time.Duration // floor, first
	var allocs [2]uint64
	var self [2]time.Duration // this process's CPU time, if selfOK
	selfOK := true
	for done := 0; done < b.N; {
		n := min(slice, b.N-done)
		b.StopTimer()
		fr, cancelFloor := requests(n)
		mr, cancelFirst := requests(n)
		b.StartTimer()
		for k := range 2 {
			kind := (done/slice + k) % 2 // alternate which kind goes first
			h, reqs := http.Handler(floor), fr
			if kind == 1 {
				h, reqs = first, mr
			}
			cpu0, m0, self0 := serverCPU(b, c), mallocs(), processCPU()
			start := time.Now()
			for _, r := range reqs {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusCreated || rec.Body.String() != answer {
					b.Fatalf("status %d, body %q", rec.Code, rec.Body)
				}
			}
			wall[kind] += time.Since(start)
			self1 := processCPU()
			selfOK = selfOK && self0 >= 0 && self1 >= 0
			self[kind] += time.Duration(self1 - self0)
			allocs[kind] += mallocs() - m0
			cpu[kind] += serverCPU(b, c) - cpu0
		}
		b.StopTimer()
		cancelFloor()
		cancelFirst()
		b.StartTimer()
		done += n
	}
	perOp := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(perOp(wall[0]), "floor-ns/op")
	b.ReportMetric(perOp(wall[1]), "first-ns/op")
	b.ReportMetric(perOp(wall[1])/perOp(wall[0]), "x-floor")
	b.ReportMetric(float64(allocs[0])/float64(b.N), "floor-allocs/op")
	b.ReportMetric(float64(allocs[1])/float64(b.N), "first-allocs/op")
	if selfOK {
		b.ReportMetric(perOp(self[0])/1e3, "floor-cpu-us/op")
		b.ReportMetric(perOp(self[1])/1e3, "first-cpu-us/op")
	}
	b.ReportMetric(perOp(cpu[0])/1e3, "floor-redis-cpu-us/op")
	b.ReportMetric(perOp(cpu[1])/1e3, "first-redis-cpu-us/op")
}
