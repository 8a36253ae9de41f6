package pgstore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkTransactionalFirstRequest is the first request of a key through
// the idempotency middleware in its transactional mode (lease, the
// handler's insert through the middleware's transaction, the fence, the
// record and the commit), served in process (no HTTP connection), beside
// its floor BenchmarkTransactionalFloor: the same handler in its own
// transaction (BEGIN, the same insert, COMMIT) without the middleware.
// Issue 45's goal: at most 1.3× the floor, one round trip added at most.
func BenchmarkTransactionalFirstRequest(b *testing.B) {
	for _, size := range []int{128, 4 << 10} {
		b.Run(fmt.Sprintf("response=%dB", size), func(b *testing.B) {
			p := needServer(b)
			pool := p.pool(b)
			s := storeOn(b, pool)
			table := newChargeTable(b, pool)
			body := []byte(strings.Repeat("x", size))
			mw := txMiddleware(b, s, time.Minute)
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tx, err := TxFrom(r.Context())
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := tx.Exec(r.Context(), `INSERT INTO `+table+` (key, body) VALUES ($1, $2)`, r.Header.Get("Idempotency-Key"), body[:16]); err != nil {
					b.Error(err)
					return
				}
				w.WriteHeader(http.StatusCreated)
				w.Write(body)
			}))
			benchServe(b, pool, h)
		})
	}
}

// BenchmarkTransactionalFloor is the floor of
// BenchmarkTransactionalFirstRequest: the handler's own transaction.
func BenchmarkTransactionalFloor(b *testing.B) {
	for _, size := range []int{128, 4 << 10} {
		b.Run(fmt.Sprintf("response=%dB", size), func(b *testing.B) {
			p := needServer(b)
			pool := p.pool(b)
			table := newChargeTable(b, pool)
			body := []byte(strings.Repeat("x", size))
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				defer tx.Rollback(context.Background())
				if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (key, body) VALUES ($1, $2)`, r.Header.Get("Idempotency-Key"), body[:16]); err != nil {
					b.Error(err)
					return
				}
				if err := tx.Commit(ctx); err != nil {
					b.Error(err)
					return
				}
				w.WriteHeader(http.StatusCreated)
				w.Write(body)
			})
			benchServe(b, pool, h)
		})
	}
}

// BenchmarkTransactionalAutocommitFloor is the second floor of
// BenchmarkTransactionalFirstRequest: the same handler's insert as one
// autocommit statement, without a transaction of its own.
func BenchmarkTransactionalAutocommitFloor(b *testing.B) {
	for _, size := range []int{128, 4 << 10} {
		b.Run(fmt.Sprintf("response=%dB", size), func(b *testing.B) {
			p := needServer(b)
			pool := p.pool(b)
			table := newChargeTable(b, pool)
			body := []byte(strings.Repeat("x", size))
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := pool.Exec(r.Context(), `INSERT INTO `+table+` (key, body) VALUES ($1, $2)`, r.Header.Get("Idempotency-Key"), body[:16]); err != nil {
					b.Error(err)
					return
				}
				w.WriteHeader(http.StatusCreated)
				w.Write(body)
			})
			benchServe(b, pool, h)
		})
	}
}

// walPerOp reads the server's WAL position and transaction counter, and
// returns a func that reports, per op since, the WAL bytes written and
// the transactions that were given an id (those that wrote: each
// commits durably, one WAL flush with synchronous_commit on) — exact and
// immediate, unlike pg_stat_wal's counters, which a backend flushes up to
// ten seconds late. The benchmark's loop must be the server's only
// writer.
func walPerOp(b *testing.B, pool *pgxpool.Pool) func() {
	read := func() (lsn, xid int64) {
		if err := pool.QueryRow(bg(), `SELECT pg_current_wal_lsn() - '0/0', txid_current()`).Scan(&lsn, &xid); err != nil {
			b.Fatal(err)
		}
		return lsn, xid
	}
	lsn0, xid0 := read()
	return func() {
		lsn1, xid1 := read()
		b.ReportMetric(float64(lsn1-lsn0)/float64(b.N), "wal-B/op")
		b.ReportMetric(float64(xid1-xid0-1)/float64(b.N), "commits/op") // the read's own id left out
	}
}

// benchServe serves b.N requests, each with a key of its own, to h, and
// reports the client's and the server's CPU time per request.
func benchServe(b *testing.B, pool *pgxpool.Pool, h http.Handler) {
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"bench-%d-%d"`, time.Now().UnixNano(), i)
	}
	report := cpuPerOp(b, pool)
	wal := walPerOp(b, pool)
	b.ResetTimer()
	for i := range b.N {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":1999}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", keys[i])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	b.StopTimer()
	report()
	wal()
}
