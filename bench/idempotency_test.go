package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/redisstore"
	"github.com/gofiber/fiber/v3"
	fiberidem "github.com/gofiber/fiber/v3/middleware/idempotency"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// BenchmarkIdempotency compares ctoken's Idempotency-Key middleware on
// redisstore with Fiber v3's idempotency middleware on its Redis storage
// (gofiber/storage/redis over a go-redis client with the same options),
// one request at a time, against the redis-server at CTOKEN_REDIS_ADDR
// (run under .ci/redis.sh; skipped without it). The kinds:
//
//	ctoken-first   a new key: ctoken's middleware (net/http) around a
//	               handler answering 201
//	fiber-first    a new key: Fiber's middleware around the same handler
//	ctoken-replay  a key answered before: the recorded response
//	fiber-replay   the same for Fiber
//	floor          net/http: the handler and one SET NX PX of the key
//	fiber-floor    Fiber: the same
//
// "http" sends them over loopback HTTP, each framework serving its own
// port, to a keep-alive client; "handler" calls each framework's handler
// in the benchmark's goroutine (net/http's under a request context that
// can be cancelled, Fiber's on a fasthttp.RequestCtx), as the redisstore
// module's BenchmarkIdempotencyFirstRequestCost does. A first request must
// run its handler once and a replay never, or the run fails.
//
// What each guarantees differs (docs/benchmarks.md): Fiber keeps a key's
// lock in process memory, so a copy in flight on another instance runs
// the handler again, and it replays a response whatever the body or the
// caller. The kinds alternate in slices of 64 requests, the order rotating
// each round, so that each sees the same load on a shared machine. Each
// reports its median latency (-p50-us), this process's CPU time per request
// (-cpu-us: every thread, the client's too over HTTP; not reported where
// the clock is unavailable), the redis-server's (-redis-cpu-us, INFO cpu)
// and this process's allocations per request (-allocs); and ctoken's
// ratios to Fiber's medians (x-fiber-first, x-fiber-replay).
//
// CTOKEN_BENCH_RTT (a duration, such as 200us) puts that round trip
// between every Redis client and the server (see delayConn), as if
// redis-server ran on another host: -delay-us reports the mean delay a
// round trip paid.
func BenchmarkIdempotency(b *testing.B) {
	addr := os.Getenv("CTOKEN_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("CTOKEN_REDIS_ADDR is not set but CI=true: run under .ci/redis.sh")
		}
		b.Skip("CTOKEN_REDIS_ADDR not set; run under .ci/redis.sh")
	}
	ctx := context.Background()
	opts := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1}
	var d *delays
	if v := os.Getenv("CTOKEN_BENCH_RTT"); v != "" {
		rtt, err := time.ParseDuration(v)
		if err != nil || rtt <= 0 {
			b.Fatalf("CTOKEN_BENCH_RTT=%q: want a positive duration such as 200us", v)
		}
		d = &delays{sleep: calibrated(rtt)}
		if d.sleep == 0 {
			b.Fatalf("CTOKEN_BENCH_RTT=%v: a pause on this machine overshoots it", rtt)
		}
		var dialer net.Dialer
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &delayConn{Conn: c, d: d}, nil
		}
	}
	// reportDelay reports the mean delay a round trip paid during f.
	reportDelay := func(b *testing.B, f func()) {
		if d == nil {
			f()
			return
		}
		paid, slept := d.paid.Load(), d.slept.Load()
		f()
		if n := d.paid.Load() - paid; n > 0 {
			b.ReportMetric(float64(d.slept.Load()-slept)/1e3/float64(n), "delay-us")
		}
	}
	newClient := func() *redis.Client {
		c := redis.NewClient(opts)
		b.Cleanup(func() { c.Close() })
		return c
	}
	admin := newClient()
	const answer = `{"id":"pay_1"}`
	body := `{"amount":100,"currency":"eur"}`
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	// ctoken: a provisioned key space of its own.
	prefix := "bench-idem-" + run + ":"
	// Warnings and errors only: the provisioning's Info line would split
	// the benchmark's result line.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ropts := redisstore.Options{Prefix: prefix, Logger: quiet}
	rc := newClient()
	p, err := redisstore.New(rc, ropts)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.ProvisionNew(ctx); err != nil {
		b.Fatal(err)
	}
	p.Close()
	store, err := redisstore.Open(ctx, rc, ropts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	keys, err := ctoken.NewKeyring(key32)
	if err != nil {
		b.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store: store, Keys: keys,
		Caller: func(*http.Request) (string, error) { return "merchant-1", nil },
		Route:  func(*http.Request) string { return "POST /payments" },
	})
	if err != nil {
		b.Fatal(err)
	}
	var ctokenRuns, fiberRuns atomic.Int64 // the handlers' runs behind the middlewares
	handler := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, answer)
	}
	fc := newClient()
	mux := http.NewServeMux()
	mux.Handle("/payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctokenRuns.Add(1)
		handler(w)
	})))
	mux.HandleFunc("/floor", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body", http.StatusBadRequest)
			return
		}
		if err := fc.SetNX(r.Context(), "bench-floor-"+run+":"+r.Header.Get("Idempotency-Key"), "1", idempotency.DefaultWindow).Err(); err != nil {
			http.Error(w, "store", http.StatusServiceUnavailable)
			return
		}
		handler(w)
	})
	netURL := serveNetHTTP(b, mux)

	// Fiber: its middleware on its Redis storage, and its floor.
	app := fiber.New()
	ffc := newClient()
	app.Post("/floor", func(c fiber.Ctx) error {
		if err := ffc.SetNX(c, "bench-fiber-floor-"+run+":"+c.Get("Idempotency-Key"), "1", idempotency.DefaultWindow).Err(); err != nil {
			return c.SendStatus(http.StatusServiceUnavailable)
		}
		c.Set("Content-Type", "application/json")
		return c.Status(http.StatusCreated).SendString(answer)
	})
	app.Use("/payments", fiberidem.New(fiberidem.Config{
		Storage:   fiberredis.NewFromConnection(newClient()),
		Lifetime:  idempotency.DefaultWindow,
		KeyHeader: "Idempotency-Key",
	}))
	app.Post("/payments", func(c fiber.Ctx) error {
		fiberRuns.Add(1)
		c.Set("Content-Type", "application/json")
		return c.Status(http.StatusCreated).SendString(answer)
	})
	fiberURL := serveFiber(b, app)
	fiberHandler := app.Handler()

	next := 0
	newKey := func(fiberStyle bool) string {
		next++
		if fiberStyle { // Fiber's default validation: 36 characters
			return fmt.Sprintf("%08x-0000-4000-8000-%012x", next, time.Now().UnixNano()&0xffffffffffff)
		}
		return `"order-` + run + "-" + strconv.Itoa(next) + `"`
	}
	// overHTTP sends a request to url through a keep-alive client of its own.
	overHTTP := func(url string) func(key string) (int, string) {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
		b.Cleanup(c.CloseIdleConnections)
		return func(key string) (int, string) {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				b.Fatal(err)
			}
			return resp.StatusCode, string(got)
		}
	}
	// netHandler calls mux for path in this goroutine, under a request
	// context that can be cancelled, as a server's is. The request is
	// built, not parsed (http.NewRequestWithContext, not httptest's
	// NewRequest, which parses a request line), as fiberCall
	// builds Fiber's.
	netHandler := func(path string) func(key string) (int, string) {
		return func(key string) (int, string) {
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			req, err := http.NewRequestWithContext(rctx, http.MethodPost, path, strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			return rec.Code, rec.Body.String()
		}
	}
	// fiberCall calls Fiber's handler for path in this goroutine, on a
	// request context of its own.
	fiberCall := func(path string) func(key string) (int, string) {
		return func(key string) (int, string) {
			var fc fasthttp.RequestCtx
			fc.Request.Header.SetMethod(http.MethodPost)
			fc.Request.SetRequestURI(path)
			fc.Request.Header.Set("Content-Type", "application/json")
			fc.Request.Header.Set("Idempotency-Key", key)
			fc.Request.SetBodyString(body)
			fiberHandler(&fc)
			return fc.Response.StatusCode(), string(fc.Response.Body())
		}
	}
	b.Run("http", func(b *testing.B) {
		reportDelay(b, func() {
			compare(b, admin, answer, newKey, []*peerKind{
				{name: "ctoken-first", send: overHTTP(netURL + "/payments"), runs: &ctokenRuns},
				{name: "fiber-first", send: overHTTP(fiberURL + "/payments"), fiber: true, runs: &fiberRuns},
				{name: "ctoken-replay", send: overHTTP(netURL + "/payments"), replayOf: "ctoken-first", runs: &ctokenRuns},
				{name: "fiber-replay", send: overHTTP(fiberURL + "/payments"), replayOf: "fiber-first", fiber: true, runs: &fiberRuns},
				{name: "floor", send: overHTTP(netURL + "/floor")},
				{name: "fiber-floor", send: overHTTP(fiberURL + "/floor"), fiber: true},
			})
		})
	})
	b.Run("handler", func(b *testing.B) {
		reportDelay(b, func() {
			compare(b, admin, answer, newKey, []*peerKind{
				{name: "ctoken-first", send: netHandler("/payments"), runs: &ctokenRuns},
				{name: "fiber-first", send: fiberCall("/payments"), fiber: true, runs: &fiberRuns},
				{name: "ctoken-replay", send: netHandler("/payments"), replayOf: "ctoken-first", runs: &ctokenRuns},
				{name: "fiber-replay", send: fiberCall("/payments"), replayOf: "fiber-first", fiber: true, runs: &fiberRuns},
				{name: "floor", send: netHandler("/floor")},
				{name: "fiber-floor", send: fiberCall("/floor"), fiber: true},
			})
		})
	})
}

// peerKind is one kind of request BenchmarkIdempotency measures.
type peerKind struct {
	name     string
	send     func(key string) (status int, body string)
	fiber    bool   // Fiber's keys: 36 characters
	replayOf string // replays the keys the named kind answered
	// runs counts the runs of the handler behind the middleware: a first
	// request runs it once, a replay never.
	runs   *atomic.Int64
	keys   []string
	lat    []time.Duration
	cpu    time.Duration
	rcpu   time.Duration
	allocs uint64
	n      int
}

// compare runs kinds in slices of 64 requests, the order rotating each
// round, and reports each kind's median latency, this process's CPU time,
// redis-server's CPU time and this process's allocations per request, and
// ctoken's ratios to Fiber's medians.
func compare(b *testing.B, admin *redis.Client, answer string, newKey func(fiber bool) string, kinds []*peerKind) {
	byName := map[string]*peerKind{}
	for _, k := range kinds {
		byName[k.name] = k
	}
	call := func(k *peerKind, key string) {
		var before int64
		if k.runs != nil {
			before = k.runs.Load()
		}
		start := time.Now()
		status, got := k.send(key)
		k.lat = append(k.lat, time.Since(start))
		if status != http.StatusCreated || got != answer {
			b.Fatalf("%s: status %d, body %q", k.name, status, got)
		}
		if k.runs != nil {
			want := before + 1
			if k.replayOf != "" {
				want = before
			}
			if n := k.runs.Load(); n != want {
				b.Fatalf("%s: the handler ran %d times; want %d", k.name, n-before, want-before)
			}
		}
	}
	for _, k := range kinds { // connections, scripts, first keys
		if k.replayOf == "" {
			for range 16 {
				call(k, newKey(k.fiber))
			}
			k.lat = k.lat[:0]
		}
	}
	const slice = 64
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(slice, b.N-done)
		for i := range kinds {
			k := kinds[(round+i)%len(kinds)]
			var keys []string
			if src := byName[k.replayOf]; src != nil {
				if len(src.keys) < n {
					continue // its source runs later in this round
				}
				keys, src.keys = src.keys[:n], src.keys[n:]
			} else {
				for range n {
					keys = append(keys, newKey(k.fiber))
				}
			}
			rcpu0, m0, cpu0 := redisCPU(b, admin), mallocs(), processCPU()
			for _, key := range keys {
				call(k, key)
			}
			cpu1 := processCPU()
			k.allocs += mallocs() - m0
			k.rcpu += redisCPU(b, admin) - rcpu0
			if cpu0 >= 0 && cpu1 >= 0 {
				k.cpu += time.Duration(cpu1 - cpu0)
			} else {
				k.cpu = -1 << 62
			}
			k.n += len(keys)
			if k.name == "ctoken-first" || k.name == "fiber-first" {
				k.keys = append(k.keys, keys...)
			}
		}
		done += n
	}
	b.StopTimer()
	p50 := map[string]float64{}
	for _, k := range kinds {
		if k.n == 0 {
			continue
		}
		slices.Sort(k.lat)
		p50[k.name] = float64(k.lat[len(k.lat)/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[k.name], k.name+"-p50-us")
		if k.cpu >= 0 {
			b.ReportMetric(float64(k.cpu.Nanoseconds())/1e3/float64(k.n), k.name+"-cpu-us")
		}
		b.ReportMetric(float64(k.rcpu.Nanoseconds())/1e3/float64(k.n), k.name+"-redis-cpu-us")
		b.ReportMetric(float64(k.allocs)/float64(k.n), k.name+"-allocs")
	}
	if p50["fiber-first"] > 0 {
		b.ReportMetric(p50["ctoken-first"]/p50["fiber-first"], "x-fiber-first")
	}
	if p50["fiber-replay"] > 0 {
		b.ReportMetric(p50["ctoken-replay"]/p50["fiber-replay"], "x-fiber-replay")
	}
}

// serveNetHTTP serves h on a loopback port until the benchmark ends and
// returns its URL.
func serveNetHTTP(b *testing.B, h http.Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// serveFiber serves app on a loopback port until the benchmark ends and
// returns its URL.
func serveFiber(b *testing.B, app *fiber.App) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	b.Cleanup(func() { app.Shutdown() })
	return "http://" + ln.Addr().String()
}

// mallocs is this process's count of heap allocations so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// redisCPU is the redis-server process's CPU time (user + system, INFO cpu).
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %q: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// delays is what the delayConns paid: paid delays of slept nanoseconds in
// all, each a pause of sleep requested.
type delays struct {
	sleep       time.Duration
	paid, slept atomic.Int64
}

// calibrated returns the pause that takes rtt: rtt less what a pause
// overshoots by on this machine (the median of 50).
func calibrated(rtt time.Duration) time.Duration {
	var over []time.Duration
	for range 50 {
		start := time.Now()
		pause(rtt)
		over = append(over, time.Since(start)-rtt)
	}
	slices.Sort(over)
	return max(rtt-over[len(over)/2], 0)
}

// delayConn delays the first read that returns bytes after each write by
// its pause, after the bytes came: each round trip (go-redis writes a
// command or a pipeline at once) waits once more, as pgstore's benchmarks
// do. The network itself stays loopback: only the client waits.
type delayConn struct {
	net.Conn
	d   *delays
	due atomic.Bool // written since the last delayed read
}

func (c *delayConn) Write(p []byte) (int, error) {
	c.due.Store(true) // before: the answer cannot come before the write
	return c.Conn.Write(p)
}

func (c *delayConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.due.Swap(false) {
		start := time.Now()
		pause(c.d.sleep)
		c.d.slept.Add(int64(time.Since(start)))
		c.d.paid.Add(1)
	}
	return n, err
}
