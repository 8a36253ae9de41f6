//go:build fault

package redisstore

// Helpers for the fault tests (fault_*_test.go, build tag "fault", run by
// .ci/fleet.sh): redis-server processes the test starts, kills, pauses and
// restarts on a fixed loopback port; the Redis Cluster started by
// .ci/redis-cluster.sh; fleet instances whose handlers record every
// acceptance; and latency statistics.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// faultBinary finds a Redis binary: the path in env, else name on PATH.
// Without it the test is skipped, except under CI=true, where it fails.
func faultBinary(t *testing.T, env, name string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found but CI=true: the fault tests must run in CI (use .ci/fleet.sh)", name)
		}
		t.Skipf("%s not found; set %s or install it (.ci/fleet.sh does)", name, env)
	}
	return bin
}

// redisProc is a redis-server of the test's own on a fixed loopback port
// and directory, so it can be killed, paused and started again at the same
// address with the same files.
type redisProc struct {
	t      *testing.T
	bin    string
	port   string
	dir    string
	args   []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *bytes.Buffer
}

// startRedisProc starts a redis-server on a free loopback port with a fresh
// directory and extraArgs appended to its command line (which by default
// has no persistence: --save "" --appendonly no). It is killed when the
// test ends.
func startRedisProc(t *testing.T, extraArgs ...string) *redisProc {
	t.Helper()
	p := &redisProc{t: t, bin: faultBinary(t, "CTOKEN_REDIS_SERVER", "redis-server"), dir: t.TempDir()}
	p.args = append([]string{"--save", "", "--appendonly", "no"}, extraArgs...)
	t.Cleanup(func() {
		p.signal(syscall.SIGCONT)
		p.stop(syscall.SIGKILL)
	})
	for range 5 {
		_, p.port, _ = net.SplitHostPort(closedAddr(t))
		if err := p.start(); err == nil {
			return p
		} else {
			t.Logf("redis-server on port %s: %v", p.port, err)
		}
	}
	t.Fatal("could not start redis-server")
	return nil
}

func (p *redisProc) addr() string { return "127.0.0.1:" + p.port }

// start runs the server and waits until it answers PING (after loading
// its AOF or RDB file, if any).
func (p *redisProc) start() error {
	args := append([]string{"--bind", "127.0.0.1", "--port", p.port, "--dir", p.dir, "--protected-mode", "yes"}, p.args...)
	cmd := exec.Command(p.bin, args...)
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited, p.out = cmd, exited, out
	p.mu.Unlock()
	if err := waitPing(p.addr(), exited, 15*time.Second); err != nil {
		p.stop(syscall.SIGKILL)
		return fmt.Errorf("%w\n%s", err, out.String())
	}
	return nil
}

// waitPing waits until the Redis at addr answers PING, or exited closes.
func waitPing(addr string, exited <-chan struct{}, limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		select {
		case <-exited:
			return errors.New("redis-server exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis at %s did not answer PING within %v", addr, limit)
}

// signal sends sig to the running server, if any.
func (p *redisProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.cmd.Process.Signal(sig)
	}
}

// stop sends sig (SIGKILL: a crash; SIGTERM: a clean shutdown, which saves
// an RDB snapshot when save points are configured) and waits for the exit.
func (p *redisProc) stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// restart stops the server with sig and starts it again on the same port
// and directory.
func (p *redisProc) restart(sig syscall.Signal) {
	p.t.Helper()
	p.stop(sig)
	if err := p.start(); err != nil {
		p.t.Fatalf("restarting redis-server: %v", err)
	}
}

// faultStore is a Redis store for one test: a fresh prefix and the given
// timeout, on a client that never retries a command (a retried SET NX
// whose reply was lost would report the claim as taken).
func faultStore(t *testing.T, c Client, timeout time.Duration) *Store {
	t.Helper()
	return faultStoreWith(t, c, Options{Timeout: timeout})
}

// faultStoreWith is faultStore with more Options (Prefix and Logger are
// set here).
func faultStoreWith(t *testing.T, c Client, opts Options) *Store {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	opts.Prefix, opts.Logger = "ctoken-fault:"+hex.EncodeToString(b)+":", quietLogger()
	s, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Provision(ctx); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	return s
}

// standaloneClient is the client the fault tests give a standalone Redis.
func standaloneClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return c
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
	cfg, err := configFromEnv(store)
	if err != nil {
		t.Fatal(err)
	}
	in.cfg.Store(cfg)
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
	if err != nil {
		t.Fatal(err)
	}
	in.cfg.Store(cfg)
}

// faultClient is an HTTP client for many concurrent requests on loopback.
func faultClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// call sends one request and returns the status and the decoded reply. A
// transport error (instance down) is returned, never fatal, so goroutines
// can use it.
func call(c *http.Client, method, url, caller string, body []byte) (fleetResp, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return fleetResp{}, err
	}
	req.Header.Set("X-Caller", caller)
	res, err := c.Do(req)
	if err != nil {
		return fleetResp{}, err
	}
	defer res.Body.Close()
	var r fleetResp
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return fleetResp{}, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fleetResp{}, fmt.Errorf("status %d, undecodable reply: %w", res.StatusCode, err)
	}
	r.Status = res.StatusCode
	return r, nil
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

// single is a single-use token of one kind.
type single struct {
	kind, tok string
}

// mintMany mints n tokens of each kind, spread over the instances.
func mintMany(t *testing.T, c *http.Client, ins []*instance, n int) []single {
	t.Helper()
	var out []single
	for i := range n {
		for _, kind := range singleUseKinds {
			tok, err := mint(c, ins[i%len(ins)].srv.URL, kind, "alice")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, single{kind, tok})
		}
	}
	return out
}

// redeem sends one redeem of s to the instance at base; status is 0 when
// the instance could not be reached.
func redeem(c *http.Client, base string, s single) int {
	r, err := call(c, http.MethodPost, base+"/"+s.kind+"/redeem", "alice", []byte(s.tok))
	if err != nil {
		return 0
	}
	return r.Status
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
