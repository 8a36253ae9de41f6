package pgstore

// The property of issue 45, end to end: the idempotency middleware in its
// transactional mode on a real PostgreSQL, in front of a handler that
// charges by inserting one row per execution through the middleware's
// transaction (TxFrom). A handler's SQL that would leave its transaction
// is refused: every key ends with exactly one charge row, and every
// client's final response is the one recorded with that charge, byte for
// byte. (Faults on the engine's side — the app process or PostgreSQL
// SIGKILLed mid-load, a backend terminated, a failed statement the
// handler ignores — run in TestEffectsOnce.)

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
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
	must(t, err)
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
	must(t, err)
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
	return serveApp(t, mux) + "/charges"
}

// TestTransactional pins the transactional idempotency mode end to end (a
// charge as the handler's effect): a handler's escape from its
// transaction refused, one commit per first request. (Leases outlived,
// clients leaving, two instances and timeouts: idempotencytest's
// transactional contract, in TestStore; a killed server, a killed app
// process, a backend terminated mid-handler, a failed statement the
// handler ignores: TestEffectsOnce; single-use tokens consumed only with
// their work: TestTx/claim in a transaction, TestWebhookWork/redeems
// tokens in its commit.)
func TestTransactional(t *testing.T) {
	subtests(t, []subtest{
		{"handler escape", transactionalHandlerEscapeChargesOnce},
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
	got := charges(t, pool, h.table)
	for k := range got {
		exactlyOneCharge(t, got, k)
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
	pool := needServer(t).pool(t)
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
