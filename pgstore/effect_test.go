package pgstore

// The property of issue 45, end to end: the idempotency middleware in its
// transactional mode on a real PostgreSQL, in front of a handler that
// charges by inserting one row per execution through the middleware's
// transaction (TxFrom). Whatever goes wrong on the engine's side — the
// app process is SIGKILLed between the insert and the commit, PostgreSQL
// is SIGKILLed mid-load, the backend is terminated — every key ends with
// exactly one charge row, and every client's final response is the one
// recorded with that charge, byte for byte.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/jackc/pgx/v5/pgxpool"
)

// newChargeTable creates a table of charges of its own and returns its
// name. A key has no unique constraint: a second charge would be a
// second row, never a refused insert.
func newChargeTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	return newTable(t, pool, "charges_", "key text NOT NULL, body bytea NOT NULL")
}

// charges returns the bodies of the committed charges of every key.
func charges(t testing.TB, pool *pgxpool.Pool, table string) map[string][][]byte {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key, body FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][][]byte{}
	for rows.Next() {
		var k string
		var b []byte
		must(t, rows.Scan(&k, &b))
		out[k] = append(out[k], b)
	}
	must(t, rows.Err())
	return out
}

// chargeHandler charges: it inserts one row through the request's
// transaction, with a body unique to this execution, then runs after (if
// set) and answers 201 with the body.
type chargeHandler struct {
	table string
	runs  atomic.Int64 // executions started
	after func(w http.ResponseWriter, r *http.Request) bool
}

func (h *chargeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	tx, err := TxFrom(r.Context())
	if err != nil {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	var id [12]byte
	rand.Read(id[:])
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	body := []byte(`{"key":"` + key + `","charge":"ch_` + hex.EncodeToString(id[:]) + `"}`)
	if _, err := tx.Exec(r.Context(), `INSERT INTO `+h.table+` (key, body) VALUES ($1, $2)`, key, body); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if h.after != nil && !h.after(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// effectKey is the key of every middleware of these tests, the app
// process's included (passed in its environment), so that each opens the
// records the others sealed.
var effectKey = ctoken.EncodeKey(ctoken.RandomKey())

func effectKeys() *ctoken.Keyring {
	keys, err := ctoken.ParseKeyring(effectKey)
	if err != nil {
		panic(err) // a key from EncodeKey always parses
	}
	return keys
}

// txMiddleware is the idempotency middleware in its transactional mode on
// s, with lease.
func txMiddleware(t testing.TB, s *Store, lease time.Duration) *idempotency.Middleware {
	t.Helper()
	mw, err := idempotency.New(idempotency.Config{
		Store:         s,
		Keys:          effectKeys(),
		Caller:        func(*http.Request) (string, error) { return "tenant-1", nil },
		Required:      true,
		Lease:         lease,
		Transactional: true,
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// postCharge sends one attempt with key to url.
func postCharge(client *http.Client, url, key string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount": 1999, "currency": "eur"}`))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// chargeUntilCreated retries key at url until it gets 201 (after 409, 503
// or no answer), for at most d, and returns the 201's body.
func chargeUntilCreated(t testing.TB, client *http.Client, url, key string, d time.Duration) []byte {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		status, body, err := postCharge(client, url, key)
		switch {
		case err != nil, status == http.StatusConflict, status == http.StatusServiceUnavailable:
			continue
		case status != http.StatusCreated:
			t.Fatalf("%s: status %d, body %q; want 201", key, status, body)
		}
		return body
	}
	t.Fatalf("%s: no 201 within %v", key, d)
	return nil
}

// exactlyOneCharge checks that key has one committed charge and that
// every final body is that charge's response.
func exactlyOneCharge(t testing.TB, got map[string][][]byte, key string, finals ...[]byte) {
	t.Helper()
	rows := got[key]
	if len(rows) != 1 {
		t.Fatalf("%s: %d committed charges, want exactly 1", key, len(rows))
	}
	for i, f := range finals {
		if !bytes.Equal(f, rows[0]) {
			t.Errorf("%s: final response %d is %q, not the committed charge's %q", key, i, f, rows[0])
		}
	}
}

// serve runs h on a loopback server closed when t ends.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /charges", h)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/charges"
}

// TestTransactional pins the transactional idempotency mode end to end (a
// charge as the handler's effect) through PostgreSQL's own faults: one
// charge per key through a killed app process, terminated backends,
// failed statements and escapes, one commit per first request;
// single-use tokens consumed only with their work. (Leases outlived,
// clients leaving, two instances and timeouts: idempotencytest's
// transactional contract, in TestStore; a killed server:
// TestEffectsOnce/server kill.)
func TestTransactional(t *testing.T) {
	subtests(t, []subtest{
		{"app killed before commit", transactionalAppKilledBeforeCommitChargesOnce},
		{"handler escape", transactionalHandlerEscapeChargesOnce},
		{"backend terminated mid-handler", transactionalTerminatedBackendMidHandlerChargesOnce},
		{"failed statement releases the key", transactionalFailedStatementReleasesTheKey},
		{"single use consumed only on commit", singleUseTokensConsumedOnlyIfTheirWorkCommits},
		{"one durable commit per first request", transactionalFirstRequestCommitsOnce},
	})
}

// transactionalFirstRequestCommitsOnce counts the transactions committed
// on the server while first requests run through the transactional
// middleware: exactly one per request (the lease is the work's own
// transaction: its locks, the handler's charge, the fence and the record
// commit together), and none for the retries answered from the record.
func transactionalFirstRequestCommitsOnce(t *testing.T) {
	const n = 20
	p := ownServer(t) // a server of its own: the count reads every commit on it
	pool := p.pool(t)
	// No sweep and no recheck in the count: a recheck writes the
	// table's history record once the first lease lengthens it.
	s := storeOn(t, pool, func(o *Options) { o.SweepInterval = -1; o.RecheckInterval = time.Hour })
	h := &chargeHandler{table: newChargeTable(t, pool)}
	url := serve(t, txMiddleware(t, s, time.Minute).Wrap(h))
	client := &http.Client{Timeout: 10 * time.Second}
	count := commitCounter(t, pool)
	for i := range n {
		if status, body, err := postCharge(client, url, fmt.Sprintf("first-%d", i)); err != nil || status != http.StatusCreated {
			t.Fatalf("request %d: %d %q %v; want 201", i, status, body, err)
		}
	}
	if got := count(); got != n {
		t.Fatalf("%d durable commits for %d first requests, want %d", got, n, n)
	}
	count = commitCounter(t, pool)
	for i := range n {
		if status, body, err := postCharge(client, url, fmt.Sprintf("first-%d", i)); err != nil || status != http.StatusCreated {
			t.Fatalf("retry %d: %d %q %v; want the recorded 201", i, status, body, err)
		}
	}
	if got := count(); got != 0 {
		t.Fatalf("%d durable commits for %d retries answered from the record, want 0", got, n)
	}
	if runs := h.runs.Load(); runs != n {
		t.Fatalf("the handler ran %d times for %d keys", runs, n)
	}
	for k, bodies := range charges(t, pool, h.table) {
		if len(bodies) != 1 {
			t.Fatalf("%s: %d charges, want 1", k, len(bodies))
		}
	}
}

// effectChild is the environment variable that makes the test binary the
// app process of TestTransactional/app killed before commit: its
// value is "<database URL> <prefix> <charge table> <key>".
const effectChild = "CTOKEN_PGSTORE_EFFECT_CHILD"

// runEffectChild serves the transactional middleware in front of a
// handler that charges, says "charged" on stdout, and waits to be killed.
// It prints the server's URL first.
func runEffectChild(spec string) {
	s, table := childStore(effectChild, spec, 15*time.Second)
	mw, err := idempotency.New(idempotency.Config{
		Store: s, Keys: effectKeys(), Caller: func(*http.Request) (string, error) { return "tenant-1", nil },
		Required: true, Lease: effectChildLease, Transactional: true, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	h := &chargeHandler{table: table, after: func(http.ResponseWriter, *http.Request) bool {
		fmt.Println("charged")
		select {} // killed here, between the insert and the commit
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("http://" + ln.Addr().String() + "/charges")
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw.Wrap(h))
	log.Fatal(http.Serve(ln, mux))
}

// effectChildLease is the app process's lease: the retry waits it out.
const effectChildLease = 2 * time.Second

func transactionalAppKilledBeforeCommitChargesOnce(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	prefix := uniquePrefix()
	table := newChargeTable(t, pool)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), effectChild+"="+p.url()+" "+prefix+" "+table+" "+effectKey)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("the app process printed no URL: %v", lines.Err())
	}
	url := lines.Text()
	go postCharge(&http.Client{Timeout: 30 * time.Second}, url, "k1")
	if !lines.Scan() || lines.Text() != "charged" {
		t.Fatalf("the app process did not charge: %q %v", lines.Text(), lines.Err())
	}
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	// The killed process's transaction is rolled back by PostgreSQL when
	// its connection drops; its lease ends by itself.
	if got := charges(t, pool, table); len(got["k1"]) != 0 {
		t.Fatalf("%d charges committed by a process killed before its commit", len(got["k1"]))
	}
	s := storeOn(t, p.pool(t), func(o *Options) { o.Prefix = prefix })
	url2 := serve(t, txMiddleware(t, s, effectChildLease).Wrap(&chargeHandler{table: table}))
	body := chargeUntilCreated(t, &http.Client{Timeout: 10 * time.Second}, url2, "k1", effectChildLease+10*time.Second)
	exactlyOneCharge(t, charges(t, pool, table), "k1", body)
}

func init() {
	if spec := os.Getenv(effectChild); spec != "" {
		runEffectChild(spec)
		os.Exit(0)
	}
}

// workTable creates a table of the work single-use tokens authorise, and
// returns its name.
func workTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	return newTable(t, pool, "work_", "who int NOT NULL")
}

// redeemInTx begins a transaction on pool, redeems with its context
// (WithTx), inserts the work row of who, and commits when commit is set
// (else rolls back). It returns the redeem's error.
func redeemInTx(t testing.TB, pool *pgxpool.Pool, table string, who int, commit bool, redeem func(ctx context.Context) error) error {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Error(err)
		return err
	}
	defer tx.Rollback(ctx)
	if err := redeem(WithTx(ctx, tx)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (who) VALUES ($1)`, who); err != nil {
		t.Error(err)
		return err
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
			return err
		}
	}
	return nil
}

func committedWork(t testing.TB, pool *pgxpool.Pool, table string) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT who FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var who int
		must(t, rows.Scan(&who))
		out = append(out, who)
	}
	return out
}

// singleUseTokensConsumedOnlyIfTheirWorkCommits: a one-time token
// and a single-use request state redeemed with WithTx are consumed by the
// transaction: a rolled-back one leaves the token redeemable, a committed
// one consumes it, and of 16 concurrent redeems, half of which roll back,
// exactly one commits its work.
func singleUseTokensConsumedOnlyIfTheirWorkCommits(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool)
	keys := fleetKeys(t)
	onetime, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "effect", TTL: time.Minute, Replay: s})
	if err != nil {
		t.Fatal(err)
	}
	states, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Binding: ctoken.BindSubjectAndTool, TTL: time.Minute, Replay: s})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name     string
		mint     func(t *testing.T) string
		redeem   func(ctx context.Context, tok string) error
		redeemed error
	}{
		{"one-time token", func(t *testing.T) string {
			tok, err := onetime.Mint(map[string]string{"caller": "alice"})
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, func(ctx context.Context, tok string) error {
			_, err := onetime.Redeem(ctx, tok, map[string]string{"caller": "alice"})
			return err
		}, ctoken.ErrOneTimeRedeemed},
		{"request state", func(t *testing.T) string {
			// A payload of its own: a state's single-use ID is a function
			// of what it holds and when it was made.
			flow := make([]byte, 8)
			rand.Read(flow)
			tok, err := states.Encode("flow "+hex.EncodeToString(flow), "alice", stateTool)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, func(ctx context.Context, tok string) error {
			_, err := states.DecodeContext(ctx, tok, "alice", stateTool)
			return err
		}, ctoken.ErrStateReplayed},
	}
	for _, k := range kinds {
		t.Run(k.name+"/rolled back, then committed", func(t *testing.T) {
			table := workTable(t, pool)
			tok := k.mint(t)
			redeem := func(ctx context.Context) error { return k.redeem(ctx, tok) }
			if err := redeemInTx(t, pool, table, 1, false, redeem); err != nil {
				t.Fatalf("first redeem: %v", err)
			}
			if err := redeemInTx(t, pool, table, 2, true, redeem); err != nil {
				t.Fatalf("redeem after a rolled-back one: %v; want it redeemable", err)
			}
			if err := redeemInTx(t, pool, table, 3, true, redeem); !errors.Is(err, k.redeemed) {
				t.Fatalf("redeem after a committed one: %v; want %v", err, k.redeemed)
			}
			if err := k.redeem(context.Background(), tok); !errors.Is(err, k.redeemed) {
				t.Fatalf("redeem outside a transaction after a committed one: %v; want %v", err, k.redeemed)
			}
			if got := committedWork(t, pool, table); len(got) != 1 || got[0] != 2 {
				t.Fatalf("work rows %v, want [2]", got)
			}
		})
		t.Run(k.name+"/concurrent", func(t *testing.T) {
			table := workTable(t, pool)
			tok := k.mint(t)
			var wg sync.WaitGroup
			var committed atomic.Int64
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					commit := i%2 == 1
					err := redeemInTx(t, pool, table, i, commit, func(ctx context.Context) error { return k.redeem(ctx, tok) })
					switch {
					case err == nil && commit:
						committed.Add(1)
					case err != nil && !errors.Is(err, k.redeemed):
						t.Errorf("redeem %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if got := committedWork(t, pool, table); len(got) != 1 || committed.Load() != 1 {
				t.Fatalf("work rows %v, %d redeems committed; want exactly one", got, committed.Load())
			}
		})
	}
}

// transactionalFailedStatementReleasesTheKey: a handler that ignores
// a failed statement of its transaction and answers 201 has its work
// rolled back by the store (replay.ErrRolledBack): the client gets 503,
// never the 201, and the key is released at once, so the retry runs the
// handler again within seconds, not after the one-minute lease; one
// charge in the end.
func transactionalFailedStatementReleasesTheKey(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool)
	h := &chargeHandler{table: newChargeTable(t, pool)}
	h.after = func(w http.ResponseWriter, r *http.Request) bool {
		if h.runs.Load() == 1 {
			tx, _ := TxFrom(r.Context())
			tx.Exec(r.Context(), `SELECT 1/0`) // fails, and the handler carries on
		}
		return true
	}
	url := serve(t, txMiddleware(t, s, time.Minute).Wrap(h))
	client := &http.Client{Timeout: 10 * time.Second}
	if status, body, err := postCharge(client, url, "k1"); err != nil || status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: %d %q %v; want 503", status, body, err)
	}
	if got := charges(t, pool, h.table); len(got["k1"]) != 0 {
		t.Fatalf("%d charges committed by the rolled-back attempt", len(got["k1"]))
	}
	body := chargeUntilCreated(t, client, url, "k1", 5*time.Second)
	exactlyOneCharge(t, charges(t, pool, h.table), "k1", body)
	if n := h.runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}

// transactionalHandlerEscapeChargesOnce: through the idempotency
// middleware over HTTP, a handler that tries to leave its transaction
// after its charge ("COMMIT; BEGIN", "ROLLBACK; BEGIN", COMMIT AND CHAIN,
// a SET of the session) and answers 201 all the same: the statement is
// refused, the client gets 503, never that 201, nothing is committed, and
// the key is released, so the retry charges exactly once and every later
// retry gets its response.
func transactionalHandlerEscapeChargesOnce(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool)
	client := &http.Client{Timeout: 10 * time.Second}
	for i, sql := range []string{"COMMIT; BEGIN", "ROLLBACK; BEGIN", "commit and chain", "SET synchronous_commit = off"} {
		t.Run(sql, func(t *testing.T) {
			h := &chargeHandler{table: newChargeTable(t, pool)}
			h.after = func(w http.ResponseWriter, r *http.Request) bool {
				if h.runs.Load() == 1 {
					tx, _ := TxFrom(r.Context())
					tx.Exec(r.Context(), sql) // refused, and the handler carries on
				}
				return true
			}
			url := serve(t, txMiddleware(t, s, time.Minute).Wrap(h))
			key := fmt.Sprintf("escape-%d", i)
			if status, body, err := postCharge(client, url, key); err != nil || status != http.StatusServiceUnavailable {
				t.Fatalf("first attempt: %d %q %v; want 503", status, body, err)
			}
			if got := charges(t, pool, h.table); len(got[key]) != 0 {
				t.Fatalf("%d charges committed by the refused attempt", len(got[key]))
			}
			body := chargeUntilCreated(t, client, url, key, 5*time.Second)
			status, replayed, err := postCharge(client, url, key)
			if err != nil || status != http.StatusCreated {
				t.Fatalf("replay: %d %v", status, err)
			}
			exactlyOneCharge(t, charges(t, pool, h.table), key, body, replayed)
			if n := h.runs.Load(); n != 2 {
				t.Errorf("the handler ran %d times, want 2", n)
			}
		})
	}
}

// transactionalTerminatedBackendMidHandlerChargesOnce: the backend of
// a first request's transaction is terminated (pg_terminate_backend)
// while its handler runs, after its charge: the client gets 503, nothing
// of that run is kept, and the retries charge exactly once, each final
// answer being the committed charge's response.
func transactionalTerminatedBackendMidHandlerChargesOnce(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	admin := p.pool(t)
	s := storeOn(t, p.pool(t))
	charged, resume := make(chan struct{}, 1), make(chan struct{}, 1)
	h := &chargeHandler{table: newChargeTable(t, pool), after: func(http.ResponseWriter, *http.Request) bool {
		select {
		case charged <- struct{}{}:
			<-resume // the first run only
		default:
		}
		return true
	}}
	url := serve(t, txMiddleware(t, s, 10*time.Second).Wrap(h))
	client := &http.Client{Timeout: 10 * time.Second}
	first := make(chan int, 1)
	go func() {
		status, _, _ := postCharge(client, url, "k1")
		first <- status
	}()
	<-charged
	// The only ID lock held on the server is the work's.
	tag, err := admin.Exec(bg(), `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid <> pg_backend_pid()`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("terminating the work's backend: %v, %d rows", err, tag.RowsAffected())
	}
	charged <- struct{}{} // no other run waits
	resume <- struct{}{}
	if status := <-first; status != http.StatusServiceUnavailable {
		t.Fatalf("the terminated run answered %d; want 503", status)
	}
	if got := charges(t, pool, h.table)["k1"]; len(got) != 0 {
		t.Fatalf("%d charges kept from the terminated run; want none", len(got))
	}
	retry := chargeUntilCreated(t, client, url, "k1", 10*time.Second)
	final := chargeUntilCreated(t, client, url, "k1", 5*time.Second)
	exactlyOneCharge(t, charges(t, pool, h.table), "k1", retry, final)
}
