package redisstore

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
	"github.com/redis/go-redis/v9"
)

// BenchmarkWebhookDeliveryCost measures new webhook deliveries through
// Verifier.Middleware with this store as the dedupe, on a redis-server of
// its own, beside their floor in the same run:
//
//	floor      a handler that reads the body, verifies it (HMAC-SHA256,
//	           Standard Webhooks) and sends one SET NX PX of the delivery's
//	           key: the least a deduplicated delivery can cost
//	delivery   the middleware: read, verify, acquire the lease (one
//	           guarded script), a handler answering 204, confirm (one
//	           guarded script)
//
// at 1, 8 and 64 concurrent senders on one client pool of 64 connections.
// Requests are signed before they are timed, and each carries a context
// that can be cancelled, as a net/http server's request does. The two
// alternate in slices of 256 requests (all senders on one kind at a time)
// so that both see the same load on a shared machine; b.N counts
// deliveries of each. Each case reports, for both, deliveries/s and
// redis-cpu-us/op (the CPU time, user + system from INFO cpu, the
// redis-server process spent per delivery, which counts what a command
// costs the server beyond its own run time: reading, parsing, replying),
// and the delivery's ratios to the floor (x-floor-rate, x-floor-cpu).
func BenchmarkWebhookDeliveryCost(b *testing.B) {
	const pool, slice = 64, 256
	srv := newServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialerRetries: 1, PoolSize: pool, MinIdleConns: pool})
	b.Cleanup(func() { c.Close() })
	s := provisioned(b, c, Options{Prefix: "bench-webhook:"})
	cfg := webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}, Namespace: "endpoint"}
	signer, err := webhook.NewSigner(webhook.Config{Scheme: cfg.Scheme, Secrets: cfg.Secrets})
	must(b, err)
	plain, err := webhook.NewVerifier(cfg) // verifies only; the floor dedupes by hand
	must(b, err)
	cfg.Replay = s
	v, err := webhook.NewVerifier(cfg)
	must(b, err)
	body := `{"type":"statusChange","id":"bc-123456","status":"FINISHED","at":"2026-01-02T03:04:05Z"}`
	const window = 24 * time.Hour
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
		err = c.Do(r.Context(), "SET", "bench-floor:"+d.ID, "1", "NX", "PX", window.Milliseconds()).Err()
		if err != nil {
			http.Error(w, "store", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	delivery := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))

	var next atomic.Int64
	// requests signs n deliveries of fresh IDs, each with a context of
	// its own that can be cancelled (cancelled when the benchmark ends).
	requests := func(b *testing.B, n int) []*http.Request {
		reqs := make([]*http.Request, n)
		for i := range reqs {
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/hook", strings.NewReader(body))
			must(b, signer.Sign(r.Header, "msg_"+strconv.FormatInt(next.Add(1), 10), []byte(body)))
			reqs[i] = r
		}
		return reqs
	}
	// serve sends reqs through h from senders goroutines and returns the
	// wall time and the server's CPU time it took.
	serve := func(b *testing.B, h http.Handler, reqs []*http.Request, senders int) (wall, cpu time.Duration) {
		var i atomic.Int64
		var wg sync.WaitGroup
		cpu0 := serverCPU(b, c)
		start := time.Now()
		for range senders {
			spawn(&wg, func() {
				for {
					n := i.Add(1) - 1
					if n >= int64(len(reqs)) {
						return
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, reqs[n])
					if rec.Code != http.StatusNoContent {
						b.Errorf("status %d", rec.Code)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start), serverCPU(b, c) - cpu0
	}
	for _, senders := range []int{1, 8, 64} {
		b.Run("senders="+strconv.Itoa(senders), func(b *testing.B) {
			var wall, cpu [2]time.Duration // floor, delivery
			for done := 0; done < b.N; {
				n := min(slice, b.N-done)
				b.StopTimer()
				fr, dr := requests(b, n), requests(b, n)
				b.StartTimer()
				first := done / slice % 2 // alternate which kind goes first
				for k := range 2 {
					kind := (first + k) % 2
					h, reqs := http.Handler(floor), fr
					if kind == 1 {
						h, reqs = delivery, dr
					}
					w, u := serve(b, h, reqs, senders)
					wall[kind] += w
					cpu[kind] += u
				}
				done += n
			}
			rate := func(k int) float64 { return float64(b.N) / wall[k].Seconds() }
			perOp := func(k int) float64 { return cpu[k].Seconds() * 1e6 / float64(b.N) }
			b.ReportMetric(rate(0), "floor-deliveries/s")
			b.ReportMetric(rate(1), "deliveries/s")
			b.ReportMetric(rate(1)/rate(0), "x-floor-rate")
			b.ReportMetric(perOp(0), "floor-redis-cpu-us/op")
			b.ReportMetric(perOp(1), "redis-cpu-us/op")
			b.ReportMetric(perOp(1)/perOp(0), "x-floor-cpu")
		})
	}
}

// BenchmarkLeaseServerCPU measures what the two steps of a webhook
// delivery (AcquireLease, then ConfirmLease) cost the Redis server, beside
// what a bare dedupe and the least two such steps cost it, in one run,
// one call at a time, on a redis-server of its own:
//
//	floor   SET NX PX of a fresh key: one round trip, the dedupe of
//	        BenchmarkWebhookDeliveryCost's floor
//	empty   two round trips, each an EVALSHA of "return 1" with the
//	        guarded steps' keys and arguments, as each step sends: the
//	        least the two steps can cost with nothing in their scripts
//	lease   AcquireLease + ConfirmLease of a fresh ID
//
// The three alternate in slices of 256 operations so that they see the
// same load; b.N counts operations of each. Each reports its server CPU
// time per operation (user + system from INFO cpu: what a command costs
// the server beyond its own run time, reading, parsing, replying, counted
// too), the lease's and the empty steps' ratios to the floor, and the
// time Redis ran the lease's and the empty steps' commands (INFO
// commandstats, see BenchmarkClaimCost).
func BenchmarkLeaseServerCPU(b *testing.B) {
	const slice = 256
	ctx := context.Background()
	srv := newServer(b)
	c := srv.client()
	s := provisioned(b, c, Options{Prefix: "bench-lease:"})
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	must(b, err)
	var n atomic.Int64
	id := func() string { return strconv.FormatInt(n.Add(1), 10) }
	token := newToken()
	until := time.Now().Add(time.Hour)
	kinds := [...]func() error{
		func() error {
			return c.Do(ctx, "SET", "bench-floor:"+id(), "1", "NX", "PX", time.Hour.Milliseconds()).Err()
		},
		func() error {
			marker, entry, _ := s.keys(id())
			for _, arg := range [...]int64{time.Minute.Milliseconds(), until.UnixMilli()} {
				if err := c.Do(ctx, "EVALSHA", sha, 2, marker, entry, time.Now().UnixMilli(), s.skewArg, s.horizonArg, arg, token).Err(); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			k := id()
			l, err := s.AcquireLease(ctx, k, time.Minute)
			if err != nil || l.State != replay.LeaseAcquired {
				return fmt.Errorf("acquire: %+v, %v", l.State, err)
			}
			return s.ConfirmLease(ctx, k, l.Token, until)
		},
	}
	nested := []string{"time", "get", "mget", "set"}
	var cpu [len(kinds)]time.Duration
	var us [len(kinds)]float64
	for done := 0; done < b.N; {
		m := min(slice, b.N-done)
		for k := range kinds {
			kind := (done/slice + k) % len(kinds) // rotate which kind goes first
			cpu0, us0 := serverCPU(b, c), redisMicros(b, c, nested...)
			for range m {
				must(b, kinds[kind]())
			}
			cpu[kind] += serverCPU(b, c) - cpu0
			us[kind] += redisMicros(b, c, nested...) - us0
		}
		done += m
	}
	perOp := func(k int) float64 { return cpu[k].Seconds() * 1e6 / float64(b.N) }
	b.ReportMetric(perOp(0), "floor-redis-cpu-us/op")
	b.ReportMetric(perOp(1), "empty-redis-cpu-us/op")
	b.ReportMetric(perOp(2), "redis-cpu-us/op")
	b.ReportMetric(perOp(1)/perOp(0), "x-floor-empty")
	b.ReportMetric(perOp(2)/perOp(0), "x-floor-cpu")
	b.ReportMetric(us[1]/float64(b.N), "empty-redis-us/op")
	b.ReportMetric(us[2]/float64(b.N), "redis-us/op")
}
