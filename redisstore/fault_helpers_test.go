//go:build fault

package redisstore

// Helpers for the fault tests (fault_*_test.go, build tag "fault", run by
// .ci/fleet.sh): stores on the test's own redis-server (newServer in
// server_test.go, which starts, kills, pauses and restarts it on a fixed
// loopback port); fleet instances whose handlers record every acceptance;
// and latency statistics.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// faultStore is a Redis store for one test: a fresh prefix and the given
// timeout, on a client that never retries a command (a retried SET NX
// whose reply was lost would report the claim as taken).
func faultStore(t *testing.T, c Client, timeout time.Duration) *Store {
	t.Helper()
	return faultStoreWith(t, c, Options{Timeout: timeout})
}

// faultStoreWith is faultStore with more Options (Logger is set here, and
// Prefix unless given).
func faultStoreWith(t *testing.T, c Client, opts Options) *Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = randomPrefix()
	}
	opts.Logger = quietLogger()
	s := closing(t, mustNew(t, c, opts))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.ProvisionNew(ctx); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	return s
}

// acceptLog records every single-use acceptance an instance acted on: the
// "work" a redeem stands for. nothing done twice means no token in it twice.
type acceptLog struct {
	mu   sync.Mutex
	seen map[string]int // token digest → acceptances
}

func (a *acceptLog) add(tok string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string]int{}
	}
	a.seen[tokenDigest(tok)]++
}

func (a *acceptLog) count(tok string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[tokenDigest(tok)]
}

// tokenDigest names a token in logs and maps without printing it.
func tokenDigest(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:12])
}

// recordAccepts wraps an instance's handler: when a redeem endpoint is about
// to answer 200 (its claim was first), it waits delay (the work the token
// pays for) and then calls accepted with the token, before the reply is
// written. An instance killed in between has claimed the token without
// acting on it.
func recordAccepts(inner http.Handler, delay time.Duration, accepted func(tok string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/redeem") {
			inner.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		inner.ServeHTTP(&acceptWriter{ResponseWriter: w, onOK: func() {
			if delay > 0 {
				time.Sleep(delay)
			}
			accepted(string(body))
		}}, r)
	})
}

type acceptWriter struct {
	http.ResponseWriter
	onOK  func()
	wrote bool
}

func (w *acceptWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if code == http.StatusOK {
			w.onOK()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *acceptWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// startInstance starts one fleet instance on loopback whose configuration
// comes from the environment (CTOKEN_KEYS, CTOKEN_SESSION) with store as
// its replay store; wrap, if not nil, wraps its handler.
func startInstance(t testing.TB, name string, store replay.Store, wrap func(http.Handler) http.Handler) *instance {
	t.Helper()
	in := &instance{name: name, replay: store}
	reloadInstance(t, in)
	h := in.handler()
	if wrap != nil {
		h = wrap(h)
	}
	in.srv = httptest.NewServer(h)
	t.Cleanup(in.srv.Close)
	return in
}

// reloadInstance rebuilds in's configuration from the environment.
func reloadInstance(t testing.TB, in *instance) {
	t.Helper()
	cfg, err := configFromEnv(in.replay)
	must(t, err)
	in.cfg.Store(cfg)
}

// faultClient is an HTTP client for many concurrent requests on loopback.
func faultClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// mint issues a single-use token of kind ("onetime" or "state") on the
// instance at base.
func mint(c *http.Client, base, kind, caller string) (string, error) {
	r, err := call(c, http.MethodPost, base+"/"+kind+"/issue", caller, nil)
	if err != nil {
		return "", err
	}
	if r.Status != http.StatusOK || r.Token == "" {
		return "", fmt.Errorf("issue %s: status %d", kind, r.Status)
	}
	return r.Token, nil
}

// mintMany mints n tokens of each kind, spread over the instances.
func mintMany(t *testing.T, c *http.Client, ins []*instance, n int) []single {
	t.Helper()
	var out []single
	for i := range n {
		for _, kind := range singleUseKinds {
			tok, err := mint(c, ins[i%len(ins)].srv.URL, kind, "alice")
			must(t, err)
			out = append(out, single{kind, tok})
		}
	}
	return out
}

// outcomes counts, per token, the replies its redeems got.
type outcomes struct {
	mu sync.Mutex
	m  map[string]map[int]int // token digest → status → count
}

func (o *outcomes) add(tok string, status int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]map[int]int{}
	}
	d := tokenDigest(tok)
	if o.m[d] == nil {
		o.m[d] = map[int]int{}
	}
	o.m[d][status]++
}

func (o *outcomes) get(tok string, status int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[tokenDigest(tok)][status]
}

// totals sums the statuses over every token.
func (o *outcomes) totals() map[int]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := map[int]int{}
	for _, m := range o.m {
		for s, n := range m {
			t[s] += n
		}
	}
	return t
}

// inParallel calls do with every item of items, n calls at a time, and
// returns a function that waits until every call has returned.
func inParallel[T any](items []T, n int, do func(T)) (wait func()) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range n {
		spawn(&wg, func() {
			for it := range work {
				do(it)
			}
		})
	}
	go func() {
		for _, it := range items {
			work <- it
		}
		close(work)
	}()
	return wg.Wait
}

// latencies collects durations per operation.
type latencies struct {
	mu sync.Mutex
	m  map[string][]time.Duration
}

// merge adds every sample of o.
func (l *latencies) merge(o map[string][]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string][]time.Duration{}
	}
	for op, ds := range o {
		l.m[op] = append(l.m[op], ds...)
	}
}

// quantile returns the q-quantile (nearest rank) of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// report logs count, throughput, p50, p99 and max per operation.
func (l *latencies) report(t *testing.T, elapsed time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := make([]string, 0, len(l.m))
	for op := range l.m {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	t.Logf("%-16s %9s %9s %9s %9s %9s", "operation", "count", "per s", "p50", "p99", "max")
	for _, op := range ops {
		ds := l.m[op]
		slices.Sort(ds)
		t.Logf("%-16s %9d %9.0f %9s %9s %9s", op, len(ds), float64(len(ds))/elapsed.Seconds(),
			quantile(ds, 0.50).Round(10*time.Microsecond), quantile(ds, 0.99).Round(10*time.Microsecond),
			ds[len(ds)-1].Round(10*time.Microsecond))
	}
}

// envDuration reads a Go duration from env, or returns def.
func envDuration(t *testing.T, env string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration", env, v)
	}
	return d
}

// envInt reads a positive integer from env, or returns def.
func envInt(t *testing.T, env string, def int) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", env, v)
	}
	return n
}

// idleTimeout is Options.Timeout for the stores of the fault tests that
// test what a check, an Open or a fence finds, not how long a call may
// wait (a server changed while the store is idle or the app down, a
// fence's lifetime on a Cluster): under CI's load (about 10 on 2 cores, Clusters fsyncing
// every write) one claim of thousands can wait past DefaultTimeout.
const idleTimeout = 10 * time.Second

// fenceSlack is what checkFenceEnd allows a fence's end beyond the instant
// it was detected plus the key space's lifetime: 1 s, and the sum rounded
// up to a whole second. The bound holds by construction, not by timing: a
// fence ends at Redis's TIME when it was raised (truncated to the
// millisecond) plus the lifetime, and the test's detection instant is
// read, on the same machine's clock, after the raise returned.
const fenceSlack = time.Second

// checkFenceEnd checks when a fence ends (issue 56: the time until serving
// again measured against the key space's longest lifetime), as end shows
// it: a refusal's replay.RetryAt or Status.ReopenSafeAt. It must be no
// later than detected (an instant after the fence was raised) plus life
// (the key space's recorded lifetime, Status.Lifetime) plus fenceSlack,
// rounded up to a whole second, and no earlier than lastExpiry (the latest
// until of a claim accepted before the loss), so that the fence covers
// every claim that could have been lost. It logs the fence's length from
// detected beside life and returns it. The fence is never waited out.
func checkFenceEnd(t *testing.T, what string, end, detected time.Time, life time.Duration, lastExpiry time.Time) time.Duration {
	t.Helper()
	if end.IsZero() {
		t.Fatalf("%s: no fence end known; want one", what)
	}
	if life <= 0 {
		t.Fatalf("%s: the key space records no lifetime; want the longest lifetime of its claims", what)
	}
	length := end.Sub(detected)
	latest := detected.Add(life + fenceSlack)
	if r := latest.Sub(latest.Truncate(time.Second)); r != 0 {
		latest = latest.Add(time.Second - r)
	}
	t.Logf("%s: the fence ends %v after it was detected; the key space's lifetime %v (%.3f of it)", what, length.Round(time.Millisecond), life, float64(length)/float64(life))
	if end.After(latest) {
		t.Fatalf("%s: the fence ends at %v, %v after it was detected; want no later than detection + the key space's lifetime %v + %v, rounded up to a second (%v)", what, end, length, life, fenceSlack, latest)
	}
	if end.Before(lastExpiry) {
		t.Fatalf("%s: the fence ends at %v, before the last accepted claim expires (%v): a lost claim would be accepted again", what, end, lastExpiry)
	}
	return length
}
