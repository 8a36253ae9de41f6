package pgstore

// Fault runs of the one-commit transactional design (the lease is the
// work's transaction: Store.AcquireWork), for the idempotency middleware
// and webhook deliveries side by side: every key's effect is a row
// written in the work's transaction, and after the load the rows are
// counted per key — exactly one for a key whose client saw success, at
// most one for any other.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/idempotency"
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
	mux.Handle("POST /hook", whVerifier(t, s, lease, true).Middleware(h))
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

// sendEffectProblem sends one attempt of key to the app at base: a charge
// for an idempotency key, a signed delivery for a message ID (msg_…). It
// reports whether the client saw success: 201, or for a delivery a 200
// (already processed); 409, 503 and no answer are retried; any other
// status fails t. It also returns the problem type of a 503 answer (""
// for any other answer).
func sendEffectProblem(t testing.TB, client *http.Client, signer *webhook.Signer, base, key string) (ok bool, problem string) {
	const body = `{"amount": 1999, "currency": "eur"}`
	path := "/charges"
	if strings.HasPrefix(key, "msg_") {
		path = "/hook"
	}
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return false, ""
	}
	req.Header.Set("Content-Type", "application/json")
	if path == "/hook" {
		if err := signer.Sign(req.Header, key, []byte(body)); err != nil {
			t.Error(err)
			return false, ""
		}
	} else {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, ""
	}
	var doc struct{ Type string }
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Content-Type") == "application/problem+json" {
		json.NewDecoder(resp.Body).Decode(&doc)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusCreated, path == "/hook" && resp.StatusCode == http.StatusOK:
		return true, ""
	case resp.StatusCode == http.StatusConflict, resp.StatusCode == http.StatusServiceUnavailable:
		return false, doc.Type
	}
	t.Errorf("%s: status %d", key, resp.StatusCode)
	return false, ""
}

// effectLoad sends every key, the first attempts spread evenly over
// spread, each retried every 50 ms until its client sees success or d has
// passed, base() giving the app's current URL; it returns when the client
// of each key saw success (keys that did not are absent), and the number
// of attempts that did not succeed. succeeded, when not nil, is called at
// each success.
func effectLoad(t testing.TB, base func() string, keys []string, spread, d time.Duration, succeeded func()) (map[string]time.Time, int) {
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
				ok, _ := sendEffectProblem(t, client, signer, base(), key)
				mu.Lock()
				if ok {
					seen[key] = time.Now()
				} else {
					failed++
				}
				mu.Unlock()
				if ok {
					if succeeded != nil {
						succeeded()
					}
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
// whatever is still connected resumes. While drop is set, the server's
// replies are swallowed: a statement is executed and committed, and its
// client never hears of it.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	drop   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{target: target}
	p.ln = listenLoopback(t, p.serve, func() {
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

// listenLoopback listens on 127.0.0.1 and serves each connection with
// serve, on a goroutine of its own, until t ends: then it stops
// listening, runs closeAll (which ends what serve still holds), and waits
// for every serve to return.
func listenLoopback(t testing.TB, serve func(net.Conn), closeAll func()) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		closeAll()
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
				serve(c)
			}()
		}
	}()
	return ln
}

// poolVia is a pool on p's database through the proxy listening at addr,
// with at most maxConns connections, closed when t ends.
func poolVia(t testing.TB, p *pgServer, addr string, maxConns int32) *pgxpool.Pool {
	return poolAt(t, strings.Replace(p.url(), "127.0.0.1:"+p.port, addr, 1), func(cfg *pgxpool.Config) { cfg.MaxConns = maxConns })
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
	pipe := func(dst, src net.Conn, drop *atomic.Bool) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !drop.Load() {
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
	go pipe(srv, c, new(atomic.Bool))
	pipe(c, srv, &p.drop)
}

// TestEffectsOnce pins the one-commit transactional design through faults,
// one subtest each: every key's effect, idempotency key or webhook
// delivery, is committed exactly once when its client saw success, at most
// once otherwise.
func TestEffectsOnce(t *testing.T) {
	subtests(t, []subtest{
		{"network cut", effectsOnceThroughANetworkCut},
		{"failed first runs", effectsOnceThroughFailedFirstRuns},
		{"standby promotion", effectsOnceThroughAStandbyPromotion},
		{"server kill", effectsOnceThroughAServerKill},
		{"app kills", effectsOnceThroughAppKills},
	})
}

// effectsOnceThroughANetworkCut: the app reaches PostgreSQL through a
// proxy whose link is cut for 3 s mid-load, longer than the 2 s lease, so
// works are cut before, during and after their handler and their COMMIT
// (sessions idle in their transaction past the lease are ended by the
// server, replies to a COMMIT are held past the client's patience); the
// clients retry until they see success. Every key, idempotency key or
// webhook delivery, has exactly one committed effect.
func effectsOnceThroughANetworkCut(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	proxy := newCutProxy(t, "127.0.0.1:"+p.port)
	pool := poolVia(t, p, proxy.ln.Addr().String(), 8)
	s := storeOn(t, pool, func(o *Options) { o.Timeout = 2 * time.Second })
	effectsOnceAroundAFault(t, s, admin, "the cut", func() {
		proxy.cut.Store(true)
		time.Sleep(3 * time.Second)
		proxy.cut.Store(false)
	})
}

// busyApp is an effectApp on table whose handler works for d after its
// effect (outside the database), so that a fault lands inside some.
func busyApp(table string, d time.Duration) *effectApp {
	return &effectApp{table: table, fault: func(context.Context, pgx.Tx, string) bool {
		time.Sleep(d)
		return true
	}}
}

// effectsOnceAroundAFault serves a busyApp on s to 40 keys of each kind
// and runs fault once a quarter of the keys have seen success, while the
// first attempts of the others are still spread over two seconds; every
// key must end with exactly one committed effect and see success. The
// scenario runs up to three times until some attempts fail.
func effectsOnceAroundAFault(t *testing.T, s *Store, admin *pgxpool.Pool, what string, fault func()) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		app := busyApp(newChargeTable(t, admin), 50*time.Millisecond)
		base := serveApp(t, app.handler(t, s, 2*time.Second))
		keys := effectKeyNames(40)
		var from, to time.Time
		first, done := make(chan struct{}), make(chan struct{})
		var once sync.Once
		var succeeded atomic.Int32
		go func() {
			defer close(done)
			<-first
			from = time.Now()
			fault()
			to = time.Now()
		}()
		seen, failed := effectLoad(t, func() string { return base }, keys, 2*time.Second, 30*time.Second, func() {
			if succeeded.Add(1) == int32(len(keys)/4) {
				once.Do(func() { close(first) })
			}
		})
		once.Do(func() { close(first) }) // the load ended first (under a quarter saw success): effectsOncePerKey fails
		<-done
		before := seenBetween(seen, time.Time{}, from)
		t.Logf("attempt %d: %d keys saw success before %s (%v long); %d attempts failed",
			attempt, before, what, to.Sub(from).Round(time.Millisecond), failed)
		effectsOncePerKey(t, admin, app.table, keys, seen)
		if before > 0 && failed > 0 {
			return
		}
		if attempt == 3 {
			t.Fatalf("%s did not land mid-load in %d attempts", what, attempt)
		}
	}
}

// effectsOnceThroughFailedFirstRuns: the first run of every key's
// handler, after its effect, is ended inside the work (a server timeout,
// pg_terminate_backend while the handler or its Commit runs, the COMMIT's
// reply lost); its client never sees success, nothing of that run is kept
// but a lost reply's commit, and the retries commit each key's effect
// exactly once. A fault happens at an event, never at a time, so no case
// races the clock.
func effectsOnceThroughFailedFirstRuns(t *testing.T) {
	const lease = time.Second
	p := needServer(t)
	admin := p.pool(t)
	dropper := newCommitReplyDropper(t, "127.0.0.1:"+p.port)
	var terminations sync.WaitGroup // of terminateInCommit
	defer terminations.Wait()
	var cancelled atomic.Int32 // statement_timeout's cancelled sleeps
	tests := []struct {
		name    string
		fault   func(ctx context.Context, tx pgx.Tx, key string) bool
		kept    bool          // the first run's effect is committed
		unknown bool          // the charge's first attempt is told 503 outcome unknown
		lease   time.Duration // the work's lease, when not lease
		slow    bool          // COMMITs of a run that set effect.slow_commit wait
		pool    func(t *testing.T) *pgxpool.Pool
		// fired counts the first runs the fault ended, when it may not
		// happen (at least one must).
		fired *atomic.Int32
		// timeout is the store's Timeout where it is the mechanism (a
		// COMMIT's reply waited for); elsewhere a bound no loaded
		// machine reaches, so that no outcome is unknown by the clock.
		timeout time.Duration
	}{
		{name: "statement_timeout", fault: func(ctx context.Context, tx pgx.Tx, key string) bool {
			if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 50`); err != nil {
				return false
			}
			// Cancelled at 50 ms, and the handler ignores the error. A
			// sleep a starved server let finish ended nothing: the run
			// answers 503 itself, as a fault it could not cause.
			if _, err := tx.Exec(ctx, `SELECT pg_sleep(1)`); err != nil {
				cancelled.Add(1)
				return true
			}
			return false
		}, fired: &cancelled},
		{name: "idle_in_transaction_session_timeout", fault: func(ctx context.Context, tx pgx.Tx, key string) bool {
			// Stalls, ignoring its context, until the server has ended its
			// session for idling in its transaction past the lease.
			var pid int32
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return false
			}
			waitSessionEnded(t, admin, pid, 30*time.Second)
			return true
		}},
		{name: "pg_terminate_backend mid-handler", fault: func(ctx context.Context, tx pgx.Tx, key string) bool {
			var pid int32
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return false
			}
			if _, err := admin.Exec(bg(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Error(err)
			}
			// pg_terminate_backend only signals: the backend ends at its
			// next interrupt check, which a loaded machine can put after
			// the COMMIT was sent (an outcome truly unknown). Mid-handler
			// means gone before the handler returns.
			waitSessionEnded(t, admin, pid, 30*time.Second)
			return true // and answers 201 as if nothing happened
		}},
		{name: "pg_terminate_backend mid-commit", slow: true, fault: func(ctx context.Context, tx pgx.Tx, key string) bool {
			var pid int32
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), set_config('effect.slow_commit', 'on', true)`).Scan(&pid, nil); err != nil {
				return false
			}
			terminations.Add(1)
			go func() {
				defer terminations.Done()
				terminateInCommit(t, admin, pid)
			}()
			return true
		}},
		{name: "lost COMMIT reply", kept: true, unknown: true, lease: time.Minute, timeout: 2 * time.Second, fault: func(ctx context.Context, tx pgx.Tx, key string) bool {
			var pid int32
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return false
			}
			dropper.doom(pid)
			return true
		}, pool: func(t *testing.T) *pgxpool.Pool {
			return poolVia(t, p, dropper.ln.Addr().String(), 32) // every first run holds a connection at once
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var pool *pgxpool.Pool
			if tc.pool != nil {
				pool = tc.pool(t)
			} else { // connections for every first run at once: each is faulted
				pool = p.poolWith(t, func(c *pgxpool.Config) { c.MaxConns = 32 })
			}
			s := storeOn(t, pool, func(o *Options) { o.Timeout = cmp.Or(tc.timeout, 30*time.Second) })
			app := &effectApp{table: newChargeTable(t, admin), fault: tc.fault, first: true}
			if tc.slow {
				slowCommits(t, admin, app.table)
			}
			base := serveApp(t, app.handler(t, s, cmp.Or(tc.lease, lease)))
			keys := effectKeyNames(8)
			signer := whSigner(t)
			client := &http.Client{Timeout: 10 * time.Second}
			t.Cleanup(client.CloseIdleConnections)
			// Every key's first attempt runs the fault, and fails; a
			// charge whose COMMIT reply was lost is told that its outcome
			// is unknown, and no other is.
			var wg sync.WaitGroup
			for _, key := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, problem := sendEffectProblem(t, client, signer, base, key)
					if ok {
						t.Errorf("%s: the client saw success from a run its fault ended", key)
					}
					if unknown := problem == idempotency.ProblemOutcomeUnknown; !strings.HasPrefix(key, "msg_") && unknown != tc.unknown {
						t.Errorf("%s: answered a problem of type %q; the commit's outcome was unknown: %v", key, problem, tc.unknown)
					}
				}()
			}
			wg.Wait()
			if tc.fired != nil {
				t.Logf("the fault ended %d of %d first runs", tc.fired.Load(), len(keys))
				if tc.fired.Load() == 0 {
					t.Fatal("the fault ended no first run")
				}
			}
			got := charges(t, admin, app.table)
			switch {
			case !tc.kept && len(got) != 0:
				t.Fatalf("effects kept from runs their fault ended: %v", got)
			case tc.kept && len(got) != len(keys):
				t.Fatalf("%d keys' effects committed by runs whose COMMIT reply was lost (%d replies dropped), want %d", len(got), dropper.dropped.Load(), len(keys))
			}
			seen, _ := effectLoad(t, func() string { return base }, keys, 0, 20*time.Second, nil)
			effectsOncePerKey(t, admin, app.table, keys, seen)
			// The faulted run, then one more unless it committed. A run
			// that kept nothing may repeat on a loaded machine (a retry
			// whose own commit timed out, rolled back): the effects are
			// counted once above, so only a committed key's count is exact.
			for _, key := range keys {
				n, _ := app.runs.Load(key)
				runs := n.(*atomic.Int32).Load()
				if tc.kept && runs != 1 || !tc.kept && runs < 2 {
					t.Errorf("%s: the handler ran %d times, want %s", key, runs, map[bool]string{true: "1", false: "at least 2"}[tc.kept])
				}
			}
		})
	}
}

// waitSessionEnded waits until the backend pid is gone from the server,
// within limit (a generous bound: reaching it fails t).
func waitSessionEnded(t testing.TB, admin *pgxpool.Pool, pid int32, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var live bool
		if err := admin.QueryRow(bg(), `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&live); err != nil {
			t.Error(err)
			return
		}
		if !live {
			return
		}
	}
	t.Errorf("backend %d still runs after %v", pid, limit)
}

// slowCommits makes the Commit of a work that wrote into table and set
// effect.slow_commit wait 10 s (a deferred trigger, which the work's
// Commit fires at its SET CONSTRAINTS ALL IMMEDIATE, before the fence),
// for terminateInCommit to find it there.
func slowCommits(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	mustExec(t, pool, `CREATE FUNCTION `+table+`_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('effect.slow_commit', true) = 'on' THEN PERFORM pg_sleep(10); END IF;
  RETURN NULL;
END $$`)
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+table+`_slow() CASCADE`) })
	mustExec(t, pool, `CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON `+table+`
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+table+`_slow()`)
}

// terminateInCommit terminates backend pid once it waits in the deferred
// trigger of slowCommits inside its Commit's pipeline (in the SET
// CONSTRAINTS before the fence and COMMIT), and fails t if it does not get
// there within 10 s.
func terminateInCommit(t *testing.T, pool *pgxpool.Pool, pid int32) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var done bool
		err := pool.QueryRow(bg(), `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity
			WHERE pid = $1 AND wait_event = 'PgSleep' AND lower(query) LIKE 'set constraints%'`, pid).Scan(&done)
		if err != nil {
			t.Error(err)
			return
		}
		if done {
			return
		}
	}
	t.Errorf("backend %d did not reach its Commit within 10 s", pid)
}

// commitReplyDropper is a TCP proxy to a server that loses the reply to
// the COMMIT of a doomed backend: from the moment the client sends it
// (with the statements pipelined before it, such as a work's fence),
// everything the server sends on that connection is dropped; the server
// executes the COMMIT, and the client waits until it gives up.
type commitReplyDropper struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	doomed map[int32]bool
	// dropped counts the COMMITs whose reply was dropped.
	dropped atomic.Int32
}

func newCommitReplyDropper(t testing.TB, target string) *commitReplyDropper {
	t.Helper()
	d := &commitReplyDropper{target: target, doomed: map[int32]bool{}}
	d.ln = listenLoopback(t, d.serve, func() {})
	return d
}

// doom makes the reply to the next COMMIT of backend pid lost.
func (d *commitReplyDropper) doom(pid int32) {
	d.mu.Lock()
	d.doomed[pid] = true
	d.mu.Unlock()
}

// pgMessage reads one message of the PostgreSQL protocol from r: its type
// byte (none for the first message a client sends) and its body.
func pgMessage(r io.Reader, typed bool) (raw []byte, typ byte, body []byte, err error) {
	head := 4
	if typed {
		head = 5
	}
	raw = make([]byte, head)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(raw[head-4:]))
	if n < 4 || n > 1<<30 {
		return nil, 0, nil, fmt.Errorf("message length %d", n)
	}
	raw = append(raw, make([]byte, n-4)...)
	if _, err := io.ReadFull(r, raw[head:]); err != nil {
		return nil, 0, nil, err
	}
	if typed {
		typ = raw[0]
	}
	return raw, typ, raw[head:], nil
}

// commitSpotter tells, from a client's messages, which run COMMIT: a
// simple query, or the execution (Bind) of a statement parsed with the
// extended protocol, named or not.
type commitSpotter map[string]bool // statement name → its query is COMMIT

func (cs commitSpotter) isCommit(typ byte, body []byte) bool {
	isCommitSQL := func(q []byte) bool { return strings.EqualFold(strings.TrimSpace(string(q)), "commit") }
	name, rest, _ := bytes.Cut(body, []byte{0})
	switch typ {
	case 'Q':
		return isCommitSQL(name)
	case 'P': // statement name, then the query
		q, _, _ := bytes.Cut(rest, []byte{0})
		cs[string(name)] = isCommitSQL(q)
	case 'B': // portal name, then the statement's
		stmt, _, _ := bytes.Cut(rest, []byte{0})
		return cs[string(stmt)]
	}
	return false
}

func (d *commitReplyDropper) serve(c net.Conn) {
	defer c.Close()
	srv, err := net.Dial("tcp", d.target)
	if err != nil {
		return
	}
	defer srv.Close()
	var pid atomic.Int32
	var dropping atomic.Bool
	go func() {
		defer srv.Close()
		spotter := commitSpotter{}
		for typed := false; ; typed = true {
			raw, typ, body, err := pgMessage(c, typed)
			if err != nil {
				return
			}
			if spotter.isCommit(typ, body) {
				d.mu.Lock()
				if d.doomed[pid.Load()] {
					delete(d.doomed, pid.Load())
					dropping.Store(true)
					d.dropped.Add(1)
				}
				d.mu.Unlock()
			}
			if _, err := srv.Write(raw); err != nil {
				return
			}
		}
	}()
	for {
		raw, typ, body, err := pgMessage(srv, true)
		if err != nil {
			return
		}
		if typ == 'K' && len(body) >= 4 { // BackendKeyData: the backend's pid
			pid.Store(int32(binary.BigEndian.Uint32(body)))
		}
		if dropping.Load() {
			continue
		}
		if _, err := c.Write(raw); err != nil {
			return
		}
	}
}

// effectsOnceThroughAStandbyPromotion: the app runs on a primary with
// a synchronous standby; the primary is SIGKILLed mid-load, the standby
// promoted, and the app restarted on it (same table, same prefix) while
// the clients retry. Counted on the promoted standby: every key whose
// client saw success before the kill or after has exactly one committed
// effect — none acknowledged by the primary was lost, none ran twice.
func effectsOnceThroughAStandbyPromotion(t *testing.T) {
	t.Parallel() // servers of its own
	primary, standby := syncPair(t)
	prefix := uniquePrefix()
	ppool := primary.pool(t)
	s := storeOn(t, ppool, func(o *Options) {
		o.Prefix, o.Timeout, o.RequireSynchronousStandby = prefix, 2*time.Second, true
	})
	app := busyApp(newChargeTable(t, ppool), 50*time.Millisecond)
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
	done, first := make(chan result, 1), make(chan struct{})
	var succeeded atomic.Int32
	go func() {
		seen, failed := effectLoad(t, func() string { return base }, keys, 3*time.Second, 45*time.Second, func() {
			if succeeded.Add(1) == int32(len(keys)/4) {
				close(first)
			}
		})
		done <- result{seen, failed}
	}()
	select { // mid-load: a quarter of the keys have seen success, the first attempts of others are still to come
	case <-first:
	case r := <-done:
		t.Fatalf("the load ended before a quarter of the keys saw success (%d did, %d attempts failed)", len(r.seen), r.failed)
	}
	killedAt := time.Now()
	current.Store(nil)
	primary.kill() // mid-load: nothing more reaches the standby
	spool := standby.pool(t)
	mustExec(t, spool, `SELECT pg_promote(wait => true)`)
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

// effectsOnceThroughAServerKill: PostgreSQL is SIGKILLed mid-load
// (every process of it, as a crash hits them) and restarted on its data
// directory, which runs crash recovery; works are cut before, during and
// after their handler and their COMMIT, and the clients retry until they
// see success. Every key, idempotency key or webhook delivery, has
// exactly one committed effect.
func effectsOnceThroughAServerKill(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t, "-c", "recovery_init_sync_method=syncfs")
	admin := p.pool(t)
	s := storeOn(t, p.pool(t), func(o *Options) { o.Timeout = 2 * time.Second })
	effectsOnceAroundAFault(t, s, admin, "the kill", func() {
		if err := p.restart(); err != nil {
			t.Error(err)
		}
	})
}

// effectAppChild is the environment variable that makes the test binary
// the app process of TestEffectsOnce/app kills: its value is
// "<database URL> <prefix> <effect table> <idempotency key>".
const effectAppChild = "CTOKEN_PGSTORE_EFFECT_APP"

func init() {
	if spec := os.Getenv(effectAppChild); spec != "" {
		runEffectAppChild(spec)
		os.Exit(0)
	}
}

// childTB is the testing.TB of the app process, which runs no test: a
// failure ends the process, which its test reports.
type childTB struct{ testing.TB }

func (childTB) Helper()                        {}
func (childTB) Error(args ...any)              { log.Fatal(args...) }
func (childTB) Fatal(args ...any)              { log.Fatal(args...) }
func (childTB) Errorf(format string, a ...any) { log.Fatalf(format, a...) }
func (childTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }

// runEffectAppChild serves effectApp (both middlewares, transactional,
// a 2 s lease) on 127.0.0.1, prints its URL, and serves until killed.
// spec is "<database URL> <prefix> <effect table> <key>" (the key becomes
// effectKey); the store has a 5 s Timeout and no sweeper.
func runEffectAppChild(spec string) {
	parts := strings.Fields(spec)
	if len(parts) != 4 {
		log.Fatalf("%s: want 4 fields", effectAppChild)
	}
	effectKey = parts[3]
	pool, err := pgxpool.New(context.Background(), parts[0])
	if err != nil {
		log.Fatal(err)
	}
	s, err := New(context.Background(), pool, Options{Prefix: parts[1], SweepInterval: -1, Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	app := busyApp(parts[2], 20*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("http://" + ln.Addr().String())
	log.Fatal(http.Serve(ln, app.handler(childTB{}, s, 2*time.Second)))
}

// effectsOnceThroughAppKills: the app is a process of its own (the
// test binary re-run), SIGKILLed at random points of the load — 100 to
// 400 ms after it starts serving, eight times — and started again on the
// same table and prefix, while the clients (a charge's, a Standard
// Webhooks sender) retry at whichever process serves. A kill lands before
// a work, inside its handler, during its COMMIT or between the COMMIT and
// the response. Every key has exactly one committed effect.
func effectsOnceThroughAppKills(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	prefix := uniquePrefix()
	table := newChargeTable(t, admin)
	var current atomic.Pointer[string]
	// start starts the app process; stop SIGKILLs it and waits for it.
	start := func() (stop func(), exited <-chan struct{}, err error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), effectAppChild+"="+p.url()+" "+prefix+" "+table+" "+effectKey)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		done := make(chan struct{})
		lines := bufio.NewScanner(out)
		if !lines.Scan() {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, nil, fmt.Errorf("the app process printed no URL: %v", lines.Err())
		}
		go func() { cmd.Wait(); close(done) }()
		url := lines.Text()
		current.Store(&url)
		return func() { cmd.Process.Kill(); <-done }, done, nil
	}
	stop, exited, err := start()
	must(t, err)
	running := func() {
		select {
		case <-exited:
			t.Errorf("the app process exited before its kill")
		default:
		}
	}
	keys := effectKeyNames(40)
	const kills = 8
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range kills {
			time.Sleep(time.Duration(100+mathrand.IntN(300)) * time.Millisecond)
			running()
			stop()
			var err error
			if stop, exited, err = start(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	seen, failed := effectLoad(t, func() string {
		if u := current.Load(); u != nil {
			return *u
		}
		return ""
	}, keys, 3*time.Second, 40*time.Second, nil)
	wg.Wait()
	running()
	stop()
	t.Logf("%d kills of the app process; %d attempts failed", kills, failed)
	if failed == 0 {
		t.Errorf("no attempt failed: the kills did not land mid-load")
	}
	effectsOncePerKey(t, admin, table, keys, seen)
}
