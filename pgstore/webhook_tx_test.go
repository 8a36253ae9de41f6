package pgstore

// Webhook deliveries processed inside the consumer's transaction
// (webhook.Config.Transactional, webhook.Lease.Begin) on a real
// PostgreSQL: the consumer's rows live in a table with no unique key, so a
// delivery whose writes were kept twice shows as two rows.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/webhook"
	"github.com/jackc/pgx/v5/pgxpool"
)

// runsTable creates the consumer's table, one row per processed delivery
// and no unique key, dropped when t ends.
func runsTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "webhook_runs_" + hex.EncodeToString(b)
	mustExec(t, pool, "create table "+name+" (delivery text not null, attempt int not null)")
	t.Cleanup(func() { pool.Exec(context.Background(), "drop table "+name) })
	return name
}

// rowsPerDelivery counts the consumer's rows of each delivery.
func rowsPerDelivery(t *testing.T, pool *pgxpool.Pool, table string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "select delivery, count(*) from "+table+" group by delivery")
	if err != nil {
		t.Fatal(err)
	}
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

// TestWebhook pins webhook deliveries through the store: a receiver
// killed before its commit keeps nothing (one row per delivery in the
// transactional mode, and each outcome of Lease.Begin: webhooktest's
// transactional contract, in TestStore).
func TestWebhook(t *testing.T) {
	subtests(t, []subtest{
		{"receiver killed before commit keeps nothing", webhookTransactionalReceiverKilledBeforeCommitKeepsNothing},
	})
}

// webhookTransactionalReceiverKilledBeforeCommitKeepsNothing runs a
// transactional receiver as a subprocess (testdata/webhookchild), lets its
// handler insert the consumer's row, and SIGKILLs it before the commit.
// Nothing of it is kept: the dead attempt's lease is its transaction,
// which the server rolls back once it sees the connection end, so a copy
// is processed here within the lease (refused in progress until then),
// and the delivery ends with exactly the one row of that attempt.
func webhookTransactionalReceiverKilledBeforeCommitKeepsNothing(t *testing.T) {
	const lease = 2 * time.Second
	p := needServer(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the receiver: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "webhookchild")
	if out, err := exec.Command(goBin, "build", "-o", bin, "./testdata/webhookchild").CombinedOutput(); err != nil {
		t.Fatalf("building the receiver: %v\n%s", err, out)
	}
	prefix := uniquePrefix()
	store := storeOn(t, p.pool(t), func(o *Options) { o.Prefix = prefix })
	table := runsTable(t, store.pool)

	child := exec.Command(bin)
	child.Env = append(os.Environ(), "WH_PG_URL="+p.url(), "WH_PREFIX="+prefix, "WH_TABLE="+table,
		"WH_SECRET="+whSecret, "WH_LEASE="+lease.String())
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	must(t, child.Start())
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the receiver exited before %s", what)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("the receiver did not report %s within 30 s", what)
		}
		return ""
	}
	addr := next("its address")

	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	if err != nil {
		t.Fatal(err)
	}
	const id, body = "msg_killed", `{"run":"killed"}`
	send := func(h http.Handler, url string) int {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		if url != "" {
			req, err = http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
		}
		must(t, signer.Sign(req.Header, id, []byte(body)))
		if url != "" {
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				return 0 // the receiver was killed mid-request
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	killed := make(chan int, 1)
	go func() { killed <- send(nil, "http://"+addr+"/hook") }()
	if l := next("the insert"); l != "inserted" {
		t.Fatalf("the receiver said %q, want inserted", l)
	}
	start := time.Now()
	must(t, child.Process.Kill())
	child.Wait()
	if code := <-killed; code != 0 {
		t.Fatalf("the killed receiver answered %d", code)
	}

	v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret},
		Replay: store, Namespace: "runs", Lease: lease, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	mw := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := TxFrom(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.Exec(r.Context(), "insert into "+table+" values ($1, $2)", id, runs.Add(1)); err != nil {
			http.Error(w, "insert failed", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for code := send(mw, ""); code != http.StatusCreated; code = send(mw, "") {
		if code != http.StatusServiceUnavailable || time.Since(start) > lease {
			t.Fatalf("a copy %v after the kill: status %d, want 503 then 201 within the lease", time.Since(start), code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the first copy was processed %v after the kill", time.Since(start))
	if code := send(mw, ""); code != http.StatusOK {
		t.Fatalf("a later copy: status %d, want 200", code)
	}
	var attempts []int
	rows, err := store.pool.Query(context.Background(), "select attempt from "+table+" where delivery = $1", id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var a int
		must(t, rows.Scan(&a))
		attempts = append(attempts, a)
	}
	if len(attempts) != 1 || attempts[0] != 1 {
		t.Fatalf("rows of attempts %v, want only this process's first attempt (1): the killed receiver's (0) rolled back", attempts)
	}
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
	p := needServer(b)
	pool := p.pool(b)
	store := storeOn(b, pool)
	rnd := make([]byte, 6)
	rand.Read(rnd)
	table := "webhook_bench_" + hex.EncodeToString(rnd)
	if _, err := pool.Exec(context.Background(), "create table "+table+" (delivery text not null, attempt int not null)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(context.Background(), "drop table "+table) })
	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	if err != nil {
		b.Fatal(err)
	}
	const body = `{"run":"bench"}`
	var n atomic.Int64 // every delivery is new
	serve := func(b *testing.B, h http.Handler) {
		cpu, wal := cpuPerOp(b, pool), walPerOp(b, pool)
		for b.Loop() {
			req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
			if err := signer.Sign(req.Header, "msg_bench_"+strconv.FormatInt(n.Add(1), 10), []byte(body)); err != nil {
				b.Fatal(err)
			}
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
		v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret},
			Replay: store, Namespace: "bench", Lease: time.Minute, Transactional: true})
		if err != nil {
			b.Fatal(err)
		}
		serve(b, v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, err := TxFrom(r.Context())
			if err != nil {
				b.Error(err)
				return
			}
			d, _ := webhook.DeliveryFrom(r.Context())
			if _, err := tx.Exec(r.Context(), "insert into "+table+" values ($1, 1)", d.ID); err != nil {
				b.Error(err)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})))
	})
}
