package pgstore

// Fault runs of the one-commit transactional design (the lease is the
// work's transaction: Store.AcquireWork), for the idempotency middleware
// and webhook deliveries side by side: every key's effect is a row
// written in the work's transaction, and after the load the rows are
// counted per key — exactly one for a key whose client saw success, at
// most one for any other.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// effectApp is an app on s with both middlewares in the transactional
// mode, with lease: the idempotency middleware at POST /charges and the
// webhook middleware at POST /hook. Both run one handler, which inserts
// the key's row (the Idempotency-Key, or the delivery's ID) in the work's
// transaction, then calls fault (when set, and only on a key's first run
// when first is set) and, unless fault reports false, answers 201.
type effectApp struct {
	table string
	fault func(ctx context.Context, tx pgx.Tx, key string) bool
	first bool
	runs  sync.Map // key → runs started
}

func (a *effectApp) handler(t testing.TB, s *Store, lease time.Duration) http.Handler {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
		if key == "" {
			key = r.Header.Get("webhook-id")
		}
		n, _ := a.runs.LoadOrStore(key, new(atomic.Int32))
		run := n.(*atomic.Int32).Add(1)
		tx, err := TxFrom(r.Context())
		if err != nil {
			t.Error(err)
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		var id [12]byte
		rand.Read(id[:])
		body := []byte(`{"key":"` + key + `","effect":"` + hex.EncodeToString(id[:]) + `"}`)
		if _, err := tx.Exec(r.Context(), `INSERT INTO `+a.table+` (key, body) VALUES ($1, $2)`, key, body); err != nil {
			http.Error(w, "effect failed", http.StatusServiceUnavailable)
			return
		}
		if a.fault != nil && (!a.first || run == 1) && !a.fault(r.Context(), tx, key) {
			http.Error(w, "fault", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /charges", txMiddleware(t, s, lease).Wrap(h))
	v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret},
		Replay: s, Namespace: "effects", Lease: lease, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("POST /hook", v.Middleware(h))
	return mux
}

// serveApp serves h on 127.0.0.1 until t ends, and returns its base URL.
func serveApp(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// effectKeyNames returns n idempotency keys and n webhook delivery IDs, unique
// to this run.
func effectKeyNames(n int) []string {
	b := make([]byte, 4)
	rand.Read(b)
	run := hex.EncodeToString(b)
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("key_%s_%d", run, i), fmt.Sprintf("msg_%s_%d", run, i))
	}
	return keys
}

// sendEffect sends one attempt of key to the app at base: a charge for an
// idempotency key, a signed delivery for a message ID (msg_…). It reports
// whether the client saw success: 201, or for a delivery a 200 (already
// processed); 409, 503 and no answer are retried; any other status fails t.
func sendEffect(t testing.TB, client *http.Client, signer *webhook.Signer, base, key string) bool {
	const body = `{"amount": 1999, "currency": "eur"}`
	path := "/charges"
	if strings.HasPrefix(key, "msg_") {
		path = "/hook"
	}
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	if path == "/hook" {
		if err := signer.Sign(req.Header, key, []byte(body)); err != nil {
			t.Error(err)
			return false
		}
	} else {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusCreated, path == "/hook" && resp.StatusCode == http.StatusOK:
		return true
	case resp.StatusCode == http.StatusConflict, resp.StatusCode == http.StatusServiceUnavailable:
		return false
	}
	t.Errorf("%s: status %d", key, resp.StatusCode)
	return false
}

// effectLoad sends every key, the first attempts spread evenly over
// spread, each retried every 50 ms until its client sees success or d has
// passed, base() giving the app's current URL; it returns when the client
// of each key saw success (keys that did not are absent), and the number
// of attempts that did not succeed.
func effectLoad(t testing.TB, base func() string, keys []string, spread, d time.Duration) (map[string]time.Time, int) {
	t.Helper()
	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	if err != nil {
		t.Error(err)
		return nil, 0
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	seen := map[string]time.Time{}
	failed := 0
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(spread * time.Duration(i) / time.Duration(len(keys)))
			for time.Now().Before(deadline) {
				ok := sendEffect(t, client, signer, base(), key)
				mu.Lock()
				if ok {
					seen[key] = time.Now()
				} else {
					failed++
				}
				mu.Unlock()
				if ok {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return seen, failed
}

// seenBetween counts the keys whose client saw success in [from, to).
func seenBetween(seen map[string]time.Time, from, to time.Time) int {
	n := 0
	for _, at := range seen {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// effectsOncePerKey counts the committed rows of every key: exactly one
// for a key in seen, at most one for any other; every key must be in seen
// (the load outlasts the fault).
func effectsOncePerKey(t testing.TB, pool *pgxpool.Pool, table string, keys []string, seen map[string]time.Time) {
	t.Helper()
	got := charges(t, pool, table)
	twice, lost, unseen := 0, 0, 0
	for _, key := range keys {
		n := len(got[key])
		switch {
		case n > 1:
			twice++
			t.Errorf("%s: %d committed effects, want at most 1", key, n)
		case !seen[key].IsZero() && n != 1:
			lost++
			t.Errorf("%s: the client saw success, %d committed effects, want exactly 1", key, n)
		case seen[key].IsZero():
			unseen++
		}
	}
	t.Logf("%d keys (idempotency and webhook): %d seen succeed, %d committed twice, %d lost", len(keys), len(seen), twice, lost)
	if unseen > 0 {
		t.Errorf("%d keys never saw success: the load did not outlast the fault", unseen)
	}
}

// cutProxy is a TCP proxy to a server whose link can be cut: while cut,
// nothing is forwarded either way (bytes wait, as packets a partition
// drops are retransmitted), new connections included; when healed,
// whatever is still connected resumes.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.serve(c)
			}()
		}
	}()
	return p
}

// wait blocks while the link is cut.
func (p *cutProxy) wait() {
	for p.cut.Load() {
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *cutProxy) serve(c net.Conn) {
	defer c.Close()
	p.wait()
	srv, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer srv.Close()
	p.mu.Lock()
	p.conns = append(p.conns, c, srv)
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.wait()
				if _, err := dst.Write(buf[:n]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(srv, c)
	pipe(c, srv)
}

// TestEffectsOnceThroughANetworkCut: the app reaches PostgreSQL through a
// proxy whose link is cut for 3 s mid-load, longer than the 2 s lease, so
// works are cut before, during and after their handler and their COMMIT
// (sessions idle in their transaction past the lease are ended by the
// server, replies to a COMMIT are held past the client's patience); the
// clients retry until they see success. Every key, idempotency key or
// webhook delivery, has exactly one committed effect.
func TestEffectsOnceThroughANetworkCut(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	proxy := newCutProxy(t, "127.0.0.1:"+p.port)
	cfg, err := pgxpool.ParseConfig(strings.Replace(p.url(), "127.0.0.1:"+p.port, proxy.ln.Addr().String(), 1))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(bg(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := storeOn(t, pool, func(o *Options) { o.Timeout = 2 * time.Second })
	app := &effectApp{table: newChargeTable(t, admin), fault: func(context.Context, pgx.Tx, string) bool {
		time.Sleep(50 * time.Millisecond) // a handler's own work: the cut lands inside some
		return true
	}}
	base := serveApp(t, app.handler(t, s, 2*time.Second))
	keys := effectKeyNames(40)
	var cutAt, healedAt time.Time
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		time.Sleep(time.Second)
		cutAt = time.Now()
		proxy.cut.Store(true)
		time.Sleep(3 * time.Second)
		proxy.cut.Store(false)
		healedAt = time.Now()
	}()
	seen, failed := effectLoad(t, func() string { return base }, keys, 2*time.Second, 30*time.Second)
	<-cut
	before, after := seenBetween(seen, time.Time{}, cutAt), seenBetween(seen, healedAt, time.Now())
	t.Logf("%d keys saw success before the cut, %d after it; %d attempts failed", before, after, failed)
	if before == 0 || after == 0 || failed == 0 {
		t.Errorf("the cut did not land mid-load")
	}
	effectsOncePerKey(t, admin, app.table, keys, seen)
}

// TestEffectsOnceThroughHandlerTimeouts: the first run of every key's
// handler, after its effect, is ended inside the work by a timeout of the
// server — a statement_timeout cancelling its slow statement (the handler
// ignores the error and answers 201), or the work's session idle in its
// transaction past the lease (the handler stalls outside the database) —
// and its client sees 503, never the 201; the retries commit each key's
// effect exactly once.
func TestEffectsOnceThroughHandlerTimeouts(t *testing.T) {
	const lease = time.Second
	tests := []struct {
		name  string
		fault func(ctx context.Context, tx pgx.Tx, key string) bool
	}{
		{"statement_timeout", func(ctx context.Context, tx pgx.Tx, key string) bool {
			if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 50`); err != nil {
				return false
			}
			tx.Exec(ctx, `SELECT pg_sleep(1)`) // cancelled at 50 ms; the error is ignored
			return true
		}},
		{"idle_in_transaction_session_timeout", func(ctx context.Context, tx pgx.Tx, key string) bool {
			time.Sleep(lease + 300*time.Millisecond) // ignores its context: stalls past the lease
			return true
		}},
	}
	p := needServer(t)
	pool := p.pool(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := storeOn(t, p.pool(t))
			app := &effectApp{table: newChargeTable(t, pool), fault: tc.fault, first: true}
			base := serveApp(t, app.handler(t, s, lease))
			keys := effectKeyNames(8)
			signer := whSigner(t)
			client := &http.Client{Timeout: 10 * time.Second}
			t.Cleanup(client.CloseIdleConnections)
			// Every key's first attempt runs the fault, and fails.
			var wg sync.WaitGroup
			for _, key := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if sendEffect(t, client, signer, base, key) {
						t.Errorf("%s: the client saw success from a run its fault ended", key)
					}
				}()
			}
			wg.Wait()
			if got := charges(t, pool, app.table); len(got) != 0 {
				t.Fatalf("effects kept from runs their timeout ended: %v", got)
			}
			seen, _ := effectLoad(t, func() string { return base }, keys, 0, 20*time.Second)
			effectsOncePerKey(t, pool, app.table, keys, seen)
		})
	}
}

// TestEffectsOnceThroughAStandbyPromotion: the app runs on a primary with
// a synchronous standby; the primary is SIGKILLed mid-load, the standby
// promoted, and the app restarted on it (same table, same prefix) while
// the clients retry. Counted on the promoted standby: every key whose
// client saw success before the kill or after has exactly one committed
// effect — none acknowledged by the primary was lost, none ran twice.
func TestEffectsOnceThroughAStandbyPromotion(t *testing.T) {
	t.Parallel() // servers of its own
	primary, standby := syncPair(t)
	prefix := uniquePrefix()
	ppool := primary.pool(t)
	s := storeOn(t, ppool, func(o *Options) {
		o.Prefix, o.Timeout, o.RequireSynchronousStandby = prefix, 2*time.Second, true
	})
	app := &effectApp{table: newChargeTable(t, ppool), fault: func(context.Context, pgx.Tx, string) bool {
		time.Sleep(50 * time.Millisecond) // a handler's own work: the kill lands inside some
		return true
	}}
	var current atomic.Pointer[http.Handler]
	h := app.handler(t, s, 2*time.Second)
	current.Store(&h)
	base := serveApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := current.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.Error(w, "restarting", http.StatusServiceUnavailable)
	}))
	keys := effectKeyNames(60)
	type result struct {
		seen   map[string]time.Time
		failed int
	}
	done := make(chan result)
	go func() {
		seen, failed := effectLoad(t, func() string { return base }, keys, 3*time.Second, 45*time.Second)
		done <- result{seen, failed}
	}()
	time.Sleep(time.Second)
	killedAt := time.Now()
	current.Store(nil)
	primary.kill() // mid-load: nothing more reaches the standby
	spool := standby.pool(t)
	if _, err := spool.Exec(bg(), `SELECT pg_promote(wait => true)`); err != nil {
		t.Fatal(err)
	}
	s2 := storeOn(t, spool, func(o *Options) { o.Prefix = prefix })
	h2 := app.handler(t, s2, 2*time.Second)
	current.Store(&h2)
	r := <-done
	before := seenBetween(r.seen, time.Time{}, killedAt)
	t.Logf("%d keys saw success on the primary before the kill, %d on the promoted standby; %d attempts failed", before, len(r.seen)-before, r.failed)
	if before == 0 || before == len(r.seen) {
		t.Errorf("the kill did not land mid-load")
	}
	effectsOncePerKey(t, spool, app.table, keys, r.seen)
}
