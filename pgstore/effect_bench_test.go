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

// benchServe serves b.N requests, each with a key of its own, to h, and
// reports the client's and the server's CPU time per request.
func benchServe(b *testing.B, pool *pgxpool.Pool, h http.Handler) {
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"bench-%d-%d"`, time.Now().UnixNano(), i)
	}
	report := cpuPerOp(b, pool)
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
}
