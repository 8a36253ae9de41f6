package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
	"github.com/redis/go-redis/v9"
)

const whSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// BenchmarkWebhookMiddleware measures new deliveries through the webhook
// middleware with this store against the Redis at CTOKEN_REDIS_ADDR: read,
// verify, acquire the lease (one EVALSHA), a handler answering 204, confirm
// (one EVALSHA). "serial" excludes signing; "parallel+sign" includes it.
func BenchmarkWebhookMiddleware(b *testing.B) {
	s, _ := newTestStore(b)
	v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}, Replay: s, Namespace: "endpoint"})
	must(b, err)
	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	must(b, err)
	mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	body := []byte(`{"type":"statusChange","id":"bc-123456","status":"FINISHED","at":"2026-01-02T03:04:05Z"}`)
	request := func(id int64) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
		must(b, signer.Sign(r.Header, "msg_"+strconv.FormatInt(id, 10), body))
		return r
	}
	var next atomic.Int64
	b.Run("serial", func(b *testing.B) {
		const batch = 1024
		reqs := make([]*http.Request, batch)
		for i := range b.N {
			if i%batch == 0 {
				b.StopTimer()
				for j := range reqs {
					reqs[j] = request(next.Add(1))
				}
				b.StartTimer()
			}
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, reqs[i%batch])
			if rec.Code != http.StatusNoContent {
				b.Fatalf("status %d", rec.Code)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
	})
	b.Run("parallel+sign", func(b *testing.B) {
		b.SetParallelism(8) // goroutines per core: the store waits on the network
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rec := httptest.NewRecorder()
				mw.ServeHTTP(rec, request(next.Add(1)))
				if rec.Code != http.StatusNoContent {
					b.Errorf("status %d", rec.Code)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
	})
}

// BenchmarkClaimCost measures what a first claim costs on a redis-server of
// its own, each beside its floor (the same server call without ctoken),
// all in one run:
//
//	set-nx-pxat          SET NX PXAT: the claim before fences (the floor)
//	script-set-nx        a Lua script holding only that SET NX PXAT
//	                     (EVALSHA): what any script costs beyond the
//	                     command, before the guard
//	claim                Claim: one script reading Redis's clock, the
//	                     shard's fence marker and the entry
//	set-nx-pxat+wait1    SET NX PXAT and WAIT 1 on one connection, with a
//	                     replica attached (the floor with a replica)
//	claim+wait1          Claim with Durability{Replicas: 1}
//
// "serial" is one claim at a time (latency); "64clients" runs 64
// goroutines on one client pool of 64 connections (throughput, claims/s).
// Every case also reports redis-us/op: the microseconds per claim Redis
// spent running its commands (INFO commandstats, summed over every command
// the case sent, reset before it), its CPU cost per claim.
//
// The "paired" cases alternate a floor call and a claim in one loop and
// report both (floor-ns/op, claim-ns/op) and their ratio (x-floor): on a
// shared machine they compare the two under the same load. The claims run
// under context.Background, as in the other cases, except in the
// "cancellable-ctx" pairs, whose context can be cancelled (as an HTTP
// request's): such a call keeps its own goroutine (see Store.direct).
func BenchmarkClaimCost(b *testing.B) {
	const clients = 64
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	var n atomic.Int64
	id := func() string { return strconv.FormatInt(n.Add(1), 10) }

	pooled := func(s *server) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
			DialerRetries: 1, PoolSize: clients, MinIdleConns: clients})
		b.Cleanup(func() { c.Close() })
		return c
	}
	single := newServer(b)
	sc := pooled(single)
	primary := newServer(b)
	newReplica(b, primary)
	pc := pooled(primary)

	raw := func(c *redis.Client, wait bool) func() error {
		return func() error {
			key := "bench:" + id()
			if !wait {
				return c.Do(ctx, "SET", key, "1", "NX", "PXAT", until.UnixMilli()).Err()
			}
			p := c.Pipeline()
			set := p.Do(ctx, "SET", key, "1", "NX", "PXAT", until.UnixMilli())
			w := p.Do(ctx, "WAIT", 1, 250)
			p.Exec(ctx)
			if err := set.Err(); err != nil {
				return err
			}
			if got, err := w.Int64(); err != nil || got != 1 {
				return fmt.Errorf("WAIT: %d, %v", got, err)
			}
			return nil
		}
	}
	const setLua = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2])"
	setSHA, err := sc.ScriptLoad(ctx, setLua).Result()
	must(b, err)
	script := func() error {
		return sc.Do(ctx, "EVALSHA", setSHA, 1, "bench:"+id(), "1", until.UnixMilli()).Err()
	}
	// A context that can be cancelled (as a request's can) keeps the
	// goroutine that returns a call at once when it ends; context.Background
	// lets a ContextTimeoutEnabled client's socket deadline bound the call.
	cancellable, cancel := context.WithCancel(ctx)
	b.Cleanup(cancel)
	claimUnder := func(ctx context.Context, s *Store) func() error {
		return func() error {
			first, err := s.Claim(ctx, id(), until)
			if err == nil && !first {
				err = errors.New("not first")
			}
			return err
		}
	}
	// Commands that the cases' scripts call: INFO commandstats counts them
	// both in their own line and inside the EVALSHA's time, so they are
	// left out of redis-us/op.
	inScripts := []string{"time", "get", "set"}
	plainStore := provisioned(b, sc, Options{Prefix: "bench-claim:"})
	durableStore := provisioned(b, pc, Options{Prefix: "bench-wait:", Durability: Durability{Replicas: 1}})
	plain, durable := claimUnder(ctx, plainStore), claimUnder(ctx, durableStore)
	cases := []struct {
		name   string
		c      *redis.Client
		call   func() error
		nested []string
	}{
		{"set-nx-pxat", sc, raw(sc, false), nil},
		{"script-set-nx", sc, script, []string{"set"}},
		{"claim", sc, plain, inScripts},
		{"set-nx-pxat+wait1", pc, raw(pc, true), nil},
		{"claim+wait1", pc, durable, inScripts},
	}
	// paired: each iteration makes one floor call and one claim, in
	// alternating order, timing each, so that both see the same load (on a
	// shared machine the load changes faster than one case runs). x-floor
	// is the claims' total time over the floor's.
	pairs := []struct {
		name         string
		floor, claim func() error
	}{
		{"claim-vs-set-nx-pxat", raw(sc, false), plain},
		{"claim+wait1-vs-set-nx-pxat+wait1", raw(pc, true), durable},
		{"claim-cancellable-ctx-vs-set-nx-pxat", raw(sc, false), claimUnder(cancellable, plainStore)},
		{"claim+wait1-cancellable-ctx-vs-set-nx-pxat+wait1", raw(pc, true), claimUnder(cancellable, durableStore)},
	}
	for _, p := range pairs {
		b.Run(p.name+"/paired", func(b *testing.B) {
			var floor, claim time.Duration
			// timed runs f and adds its time to sum.
			timed := func(f func() error, sum *time.Duration) {
				start := time.Now()
				must(b, f())
				*sum += time.Since(start)
			}
			odd := false
			for b.Loop() {
				odd = !odd
				if odd {
					timed(p.floor, &floor)
					timed(p.claim, &claim)
				} else {
					timed(p.claim, &claim)
					timed(p.floor, &floor)
				}
			}
			b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N), "floor-ns/op")
			b.ReportMetric(float64(claim.Nanoseconds())/float64(b.N), "claim-ns/op")
			b.ReportMetric(claim.Seconds()/floor.Seconds(), "x-floor")
		})
	}
	for _, tc := range cases {
		b.Run(tc.name+"/serial", func(b *testing.B) {
			since := redisMicros(b, tc.c, tc.nested...)
			for b.Loop() {
				must(b, tc.call())
			}
			b.ReportMetric((redisMicros(b, tc.c, tc.nested...)-since)/float64(b.N), "redis-us/op")
		})
		b.Run(tc.name+"/64clients", func(b *testing.B) {
			since := redisMicros(b, tc.c, tc.nested...)
			b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := tc.call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
			b.ReportMetric((redisMicros(b, tc.c, tc.nested...)-since)/float64(b.N), "redis-us/op")
		})
	}

}

// BenchmarkRecordCost measures what one idempotent operation costs the
// store on a redis-server of its own, one at a time, each beside its
// floors, all in one run:
//
//	set-nx-pxat      SET NX PXAT: a bare claim, one command (the floor)
//	lease            AcquireLease + ConfirmLease: two guarded scripts
//	record           AcquireRecord + ConfirmRecord with a 32-byte
//	                 fingerprint and a 256-byte result
//	set-nx-pxat-64KiB  SET NX PXAT of a 64 KiB value: the floor of
//	                 record-64KiB
//	record-64KiB     the same with a 64 KiB result
//	replay           AcquireRecord of a done ID: the retry that gets the
//	                 256-byte result back
//	replay-64KiB     the same for the 64 KiB result
//
// Every case also reports redis-us/op (see BenchmarkClaimCost).
func BenchmarkRecordCost(b *testing.B) {
	ctx := context.Background()
	srv := newServer(b)
	c := srv.client()
	s := provisioned(b, c, Options{Prefix: "bench-record:"})
	var n atomic.Int64
	id := func() string { return strconv.FormatInt(n.Add(1), 10) }
	until := time.Now().Add(time.Hour)
	fp := bytes.Repeat([]byte{0xab}, 32)
	small, large := bytes.Repeat([]byte("r"), 256), bytes.Repeat([]byte("R"), 64<<10)
	record := func(result []byte) func() error {
		return func() error {
			k := id()
			r, err := s.AcquireRecord(ctx, k, time.Minute, fp)
			if err != nil || r.State != replay.LeaseAcquired {
				return fmt.Errorf("acquire: %+v, %v", r.State, err)
			}
			return s.ConfirmRecord(ctx, k, r.Token, until, fp, result)
		}
	}
	must(b, record(small)())
	done := strconv.FormatInt(n.Load(), 10) // the ID record just confirmed
	must(b, record(large)())
	doneLarge := strconv.FormatInt(n.Load(), 10)
	replayOf := func(id string, size int) func() error {
		return func() error {
			r, err := s.AcquireRecord(ctx, id, time.Minute, fp)
			if err != nil || r.State != replay.LeaseDone || len(r.Result) != size {
				return fmt.Errorf("replay: %v, %v", r.State, err)
			}
			return nil
		}
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"set-nx-pxat", func() error {
			return c.Do(ctx, "SET", "bench:"+id(), "1", "NX", "PXAT", until.UnixMilli()).Err()
		}},
		{"set-nx-pxat-64KiB", func() error {
			return c.Do(ctx, "SET", "bench:"+id(), large, "NX", "PXAT", until.UnixMilli()).Err()
		}},
		{"lease", func() error {
			k := id()
			l, err := s.AcquireLease(ctx, k, time.Minute)
			if err != nil || l.State != replay.LeaseAcquired {
				return fmt.Errorf("acquire: %+v, %v", l, err)
			}
			return s.ConfirmLease(ctx, k, l.Token, until)
		}},
		{"record", record(small)},
		{"record-64KiB", record(large)},
		{"replay", replayOf(done, len(small))},
		{"replay-64KiB", replayOf(doneLarge, len(large))},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			since := redisMicros(b, c)
			for b.Loop() {
				must(b, tc.call())
			}
			b.ReportMetric((redisMicros(b, c)-since)/float64(b.N), "redis-us/op")
		})
	}
}

// redisMicros is the time Redis spent running commands since it started
// (or a CONFIG RESETSTAT), in µs; a benchmark reports the difference of two
// readings (no CONFIG RESETSTAT: a store that sees total_commands_processed
// go down fences its key space): the usec of every cmdstat line of INFO commandstats except the
// benchmark's own CONFIG and INFO and the commands named in nested (those
// its scripts call, whose time the script's line already holds).
func redisMicros(b *testing.B, c *redis.Client, nested ...string) float64 {
	b.Helper()
	info := mustInfo(b, c, "commandstats")
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat || cmd == "config|resetstat" || cmd == "info" || slices.Contains(nested, cmd) {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("commandstats %q: %v", line, err)
				}
				total += u
			}
		}
	}
	return total
}

// BenchmarkRecordBytes measures what a record costs Redis as its size
// grows, at 256 B, 4 KiB, 64 KiB and 256 KiB, each beside its floor, all
// on one redis-server of its own in one run (issue 47):
//
//	warm-up the set case, not compared: the first case of a size makes
//	        the server take the memory the others reuse (page faults are
//	        system CPU)
//	set     SET key bytes NX PXAT until: a plain write of the same bytes
//	        (the floor of a record write)
//	record  ConfirmRecord of a free ID: the record write alone (the
//	        staging SET and the confirm script)
//	first   AcquireRecord + ConfirmRecord: a first request's two steps
//	get     GET of a key holding the same bytes (the floor of a replay)
//	replay  AcquireRecord of a recorded ID: the acquire script and the GET
//	        of the side key
//
// redis-cpu-us/op is the server process's CPU (user + system, INFO cpu,
// read before and after the case) per operation: everything Redis spent,
// reading the request, running the commands and scripts, writing the
// reply. redis-B/op, for the cases that write, is the growth of the
// server's used_memory (INFO memory) per operation: what Redis holds per
// record, keys and allocator rounding included. The keys a case wrote are
// deleted after it, outside what it measures.
func BenchmarkRecordBytes(b *testing.B) {
	ctx := context.Background()
	srv := newServer(b)
	c := srv.client()
	s := provisioned(b, c, Options{Prefix: "bench-bytes:"})
	var n atomic.Int64
	id := func() string { return strconv.FormatInt(n.Add(1), 10) }
	until := time.Now().Add(time.Hour)
	fp := bytes.Repeat([]byte{0xab}, 32)
	for _, size := range []int{256, 4 << 10, 64 << 10, 256 << 10} {
		value := bytes.Repeat([]byte("R"), size)
		var written []string // keys to delete after the case
		recorded := func(k string) {
			written = append(written, s.key(k), sideKey(s.tags[shardOf(k)], k))
		}
		getKey := "bench-get:" + strconv.Itoa(size)
		must(b, c.Set(ctx, getKey, value, 0).Err())
		done := id()
		must(b, s.ConfirmRecord(ctx, done, newToken(), until, fp, value))
		set := func() error {
			k := "bench-set:" + id()
			written = append(written, k)
			return c.Do(ctx, "SET", k, value, "NX", "PXAT", until.UnixMilli()).Err()
		}
		cases := []struct {
			name string
			call func() error
		}{
			{"warm-up", set},
			{"set", set},
			{"record", func() error {
				k := id()
				recorded(k)
				return s.ConfirmRecord(ctx, k, newToken(), until, fp, value)
			}},
			{"first", func() error {
				k := id()
				recorded(k)
				r, err := s.AcquireRecord(ctx, k, time.Minute, fp)
				if err != nil || r.State != replay.LeaseAcquired {
					return fmt.Errorf("acquire: %v, %v", r.State, err)
				}
				return s.ConfirmRecord(ctx, k, r.Token, until, fp, value)
			}},
			{"get", func() error {
				v, err := c.Get(ctx, getKey).Result()
				if err == nil && len(v) != size {
					err = fmt.Errorf("GET: %d bytes", len(v))
				}
				return err
			}},
			{"replay", func() error {
				r, err := s.AcquireRecord(ctx, done, time.Minute, fp)
				if err != nil || r.State != replay.LeaseDone || len(r.Result) != size {
					return fmt.Errorf("replay: %v, %d bytes, %v", r.State, len(r.Result), err)
				}
				return nil
			}},
		}
		for _, tc := range cases {
			b.Run(fmt.Sprintf("%s/%s", sizeName(size), tc.name), func(b *testing.B) {
				before, mem := serverCPU(b, c), usedMemory(b, c)
				for b.Loop() {
					must(b, tc.call())
				}
				b.ReportMetric(float64((serverCPU(b, c)-before).Microseconds())/float64(b.N), "redis-cpu-us/op")
				if len(written) > 0 {
					b.ReportMetric(float64(usedMemory(b, c)-mem)/float64(b.N), "redis-B/op")
				}
				b.StopTimer()
				for len(written) > 0 {
					batch := written[:min(len(written), 256)]
					written = written[len(batch):]
					must(b, c.Del(ctx, batch...).Err())
				}
			})
		}
	}
}

// usedMemory is the server's used_memory (INFO memory), in bytes.
func usedMemory(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	n, err := strconv.ParseInt(infoValue(mustInfo(b, c, "memory"), "used_memory"), 10, 64)
	if err != nil {
		b.Fatalf("INFO memory used_memory: %v", err)
	}
	return n
}

// sizeName is 256B, 4KiB, 64KiB or 256KiB.
func sizeName(n int) string {
	if n < 1<<10 {
		return strconv.Itoa(n) + "B"
	}
	return strconv.Itoa(n>>10) + "KiB"
}

// serverCPU is the CPU time (user + system) the server process has used,
// from INFO cpu (microsecond resolution).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	info := mustInfo(b, c, "cpu")
	var total float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		f, err := strconv.ParseFloat(infoValue(info, k), 64)
		if err != nil {
			b.Fatalf("INFO cpu %s: %v", k, err)
		}
		total += f
	}
	return time.Duration(total * float64(time.Second))
}
