package pgstore

// Webhook deliveries processed inside the consumer's transaction
// (webhook.Config.Transactional, webhook.Lease.Begin) on a real
// PostgreSQL: the consumer's rows live in a table with no unique key, so a
// delivery whose writes were kept twice shows as two rows.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// runsTable creates the consumer's table, one row per processed delivery
// and no unique key, dropped when t ends.
func runsTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	return newTable(t, pool, "webhook_runs_", "delivery text not null, attempt int not null")
}

// rowsPerDelivery counts the consumer's rows of each delivery.
func rowsPerDelivery(t *testing.T, pool *pgxpool.Pool, table string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "select delivery, count(*) from "+table+" group by delivery")
	must(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		must(t, rows.Scan(&id, &n))
		got[id] = n
	}
	must(t, rows.Err())
	return got
}

// BenchmarkWebhookTransactional is a new delivery through the webhook
// middleware in its transactional mode (verify, the lease, the handler's
// insert in the delivery's transaction, the fence and the commit), served
// in process, beside its floor in the same run: the same insert in the
// handler's own transaction (BEGIN, INSERT, COMMIT) without the
// middleware ("floor"). Signing each delivery is inside the loop of both.
// Each reports the durable commits, the WAL bytes and the client's and
// the server's CPU per delivery (walPerOp, cpuPerOp): the loop must be
// the server's only writer.
func BenchmarkWebhookTransactional(b *testing.B) {
	pool := needServer(b).pool(b)
	store := storeOn(b, pool)
	table := runsTable(b, pool)
	signer := whSigner(b)
	const body = `{"run":"bench"}`
	var n atomic.Int64 // every delivery is new
	serve := func(b *testing.B, h http.Handler) {
		cpu, wal := cpuPerOp(b, pool), walPerOp(b, pool)
		for b.Loop() {
			req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
			must(b, signer.Sign(req.Header, "msg_bench_"+strconv.FormatInt(n.Add(1), 10), []byte(body)))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				b.Fatalf("status %d", rec.Code)
			}
		}
		cpu()
		wal()
	}
	// own is the handler in its own transaction.
	own := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Error(err)
			return
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "insert into "+table+" values ($1, 1)", r.Header.Get("webhook-id")); err != nil {
			b.Error(err)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			b.Error(err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	b.Run("floor", func(b *testing.B) { serve(b, own) })
	b.Run("middleware", func(b *testing.B) {
		serve(b, whVerifier(b, store, time.Minute, true).Middleware(insertRun(b, table)))
	})
}
