package pgstore

// Webhook deliveries whose lease is the work's transaction
// (webhook.Config.Transactional on a replay.WorkAcquirer: Store.AcquireWork)
// on a real PostgreSQL: one durable commit per first delivery, agreement
// with instances that take committed leases, and single-use tokens
// redeemed in the work.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/webhook"
	"github.com/jackc/pgx/v5/pgxpool"
)

// commitCounter returns a func that reports the durable commits on the
// server since the call: the transactions given an id (those that wrote)
// that committed, by txid_status, the reads' own left out. Transactions
// given an id and rolled back (an acquire that found the ID busy) are not
// counted. The server must have no other writer meanwhile.
func commitCounter(t testing.TB, pool *pgxpool.Pool) func() int64 {
	t.Helper()
	x0 := xidNow(t, pool)
	return func() int64 {
		x1 := xidNow(t, pool)
		var n int64
		must(t, pool.QueryRow(bg(), `SELECT count(*) FROM generate_series($1::bigint + 1, $2::bigint - 1) x
  WHERE txid_status(x) = 'committed'`, x0, x1).Scan(&n))
		return n
	}
}

// xidNow gives the server's next transaction an id and returns it.
func xidNow(t testing.TB, pool *pgxpool.Pool) int64 {
	t.Helper()
	var x int64
	must(t, pool.QueryRow(bg(), `SELECT txid_current()`).Scan(&x))
	return x
}

// whVerifier is a Verifier of StandardWebhooks deliveries on s, namespace
// "work", with lease and transactional as given.
func whVerifier(t testing.TB, s *Store, lease time.Duration, transactional bool) *webhook.Verifier {
	t.Helper()
	v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret},
		Replay: s, Namespace: "work", Lease: lease, Transactional: transactional})
	must(t, err)
	return v
}

// whSigner signs StandardWebhooks deliveries for whVerifier.
func whSigner(t testing.TB) *webhook.Signer {
	t.Helper()
	s, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{whSecret}})
	must(t, err)
	return s
}

// deliverTo serves delivery id with body, signed by s and with the extra
// headers (name, then value), to h in process and returns the response.
func deliverTo(t testing.TB, h http.Handler, s *webhook.Signer, id, body string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	must(t, s.Sign(req.Header, id, []byte(body)))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// insertRun is a handler that inserts the delivery's row in the work's
// transaction and answers 201.
func insertRun(t testing.TB, table string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := TxFrom(r.Context())
		if err != nil {
			t.Error(err)
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		if _, err := tx.Exec(r.Context(), "insert into "+table+" values ($1, 1)", r.Header.Get("webhook-id")); err != nil {
			http.Error(w, "insert failed", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
}

// TestWebhookWork pins webhook deliveries whose lease is the work's
// transaction: one durable commit per first delivery, single-use tokens
// redeemed in the work's commit, and a copy refused busy while the work
// runs, by instances with and without Transactional. (Agreement with
// instances that take committed leases, store calls alike:
// TestAcquireWork/agrees with every acquire, and the kits'
// PlainInstanceAgreesWhileARunIsInProgress and
// AcquireWorkRollbackFreesTheID, in TestStore.)
func TestWebhookWork(t *testing.T) {
	subtests(t, []subtest{
		{"commits once per first delivery", webhookWorkCommitsOncePerFirstDelivery},
		{"redeems tokens in its commit", webhookWorkRedeemsSingleUseTokensInItsCommit},
		{"copy while it runs refused busy", webhookWorkCopyWhileItRunsIsRefusedBusy},
	})
}

// webhookWorkCommitsOncePerFirstDelivery counts the transactions
// given an id on the server while first deliveries run through the
// transactional middleware: exactly one durable commit per delivery (the work, with its
// record), against two for the same handler and Lease.Begin on a
// Verifier without Transactional (the lease, then the work) — the
// control that shows the count sees a committed lease. (Duplicates
// afterwards answered 200 without running the handler: the webhook kit's
// CopiesOnTwoInstancesCommitOnce, in TestStore.)
func webhookWorkCommitsOncePerFirstDelivery(t *testing.T) {
	const n = 20
	// A server of its own: the count reads every commit on the server,
	// and another test's store still working on the shared one (its
	// recheck, a late handler) would be counted too.
	p := ownServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.SweepInterval = -1 })
	table := runsTable(t, pool)
	signer := whSigner(t)
	begin := func(v *webhook.Verifier) http.Handler {
		// Lease.Begin by hand, as a consumer without Transactional does.
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, err := v.Verify(r.Header, []byte("{}"))
			if err != nil {
				t.Error(err)
				return
			}
			l, err := v.Acquire(r.Context(), d)
			if err != nil {
				t.Error(err)
				return
			}
			defer l.Release(context.Background())
			ctx, err := l.Begin(r.Context())
			if err != nil {
				t.Error(err)
				return
			}
			insertRun(t, table).ServeHTTP(w, r.WithContext(ctx))
			if err := l.Confirm(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	tests := []struct {
		name    string
		handler func() http.Handler
		commits int64 // per delivery
	}{
		{"transactional middleware", func() http.Handler {
			return whVerifier(t, s, time.Minute, true).Middleware(insertRun(t, table))
		}, 1},
		{"Lease.Begin without Transactional", func() http.Handler { return begin(whVerifier(t, s, time.Minute, false)) }, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.handler()
			prefix := strings.NewReplacer(" ", "_", ".", "_").Replace(tc.name)
			count := commitCounter(t, pool)
			for i := range n {
				if code := deliverTo(t, h, signer, fmt.Sprintf("msg_%s_%d", prefix, i), "{}").Code; code != http.StatusCreated {
					t.Fatalf("delivery %d: status %d, want 201", i, code)
				}
			}
			if got := count(); got != tc.commits*n {
				t.Fatalf("%d durable commits for %d first deliveries, want %d", got, n, tc.commits*n)
			}
			rows := rowsPerDelivery(t, pool, table)
			for i := range n {
				if id := fmt.Sprintf("msg_%s_%d", prefix, i); rows[id] != 1 {
					t.Fatalf("%s: %d rows, want 1", id, rows[id])
				}
			}
		})
	}
}

// webhookWorkRedeemsSingleUseTokensInItsCommit: a one-time token
// redeemed by the handler inside the delivery's work (its context carries
// the transaction) is consumed by the work's one commit: a delivery costs
// one transaction with an id, redeem included; a handler that answers a
// retry status leaves the token redeemable and keeps nothing; a second
// delivery carrying a redeemed token is refused by the redeem.
func webhookWorkRedeemsSingleUseTokensInItsCommit(t *testing.T) {
	p := ownServer(t) // a server of its own: the count reads every commit on it

	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.SweepInterval = -1 })
	table := runsTable(t, pool)
	onetime, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: testKeys(t), Purpose: "webhook", TTL: time.Minute, Replay: s})
	must(t, err)
	signer := whSigner(t)
	claims := map[string]string{"caller": "alice"}
	h := whVerifier(t, s, time.Minute, true).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := webhook.DeliveryFrom(r.Context())
		tok := r.Header.Get("X-Token")
		if _, err := onetime.Redeem(r.Context(), tok, claims); errors.Is(err, ctoken.ErrOneTimeRedeemed) {
			w.WriteHeader(http.StatusConflict) // not a retry status: the delivery is done
			return
		} else if err != nil {
			t.Error(err)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		tx, err := TxFrom(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := tx.Exec(r.Context(), "insert into "+table+" values ($1, 1)", d.ID); err != nil {
			t.Error(err)
			return
		}
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	deliver := func(id, tok string, fail bool) int {
		headers := []string{"X-Token", tok}
		if fail {
			headers = append(headers, "X-Fail", "1")
		}
		return deliverTo(t, h, signer, id, "{}", headers...).Code
	}
	tok, err := onetime.Mint(claims)
	must(t, err)
	steps := []struct {
		name    string
		id      string
		fail    bool
		status  int
		commits int64
		rows    int // of id, after the step
	}{
		{"a failed delivery keeps nothing", "msg_token_1", true, http.StatusServiceUnavailable, 0, 0},
		{"its retry redeems in one commit", "msg_token_1", false, http.StatusCreated, 1, 1},
		{"another delivery finds the token redeemed", "msg_token_2", false, http.StatusConflict, 1, 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			count := commitCounter(t, pool)
			if code := deliver(st.id, tok, st.fail); code != st.status {
				t.Fatalf("status %d, want %d", code, st.status)
			}
			if got := count(); got != st.commits {
				t.Fatalf("%d durable commits, want %d", got, st.commits)
			}
			if n := rowsPerDelivery(t, pool, table)[st.id]; n != st.rows {
				t.Fatalf("%d rows of %s, want %d", n, st.id, st.rows)
			}
		})
	}
}

// webhookWorkCopyWhileItRunsIsRefusedBusy: while a delivery's handler
// runs in its work (the lease is the work's transaction), a copy sent to
// the same transactional instance, to another one, or to an instance
// without Transactional is answered 503 with Retry-After: 1 and runs no
// handler; once the work committed, each answers a copy 200.
func webhookWorkCopyWhileItRunsIsRefusedBusy(t *testing.T) {
	p := needServer(t)
	stores := fleetStores(t, p, 10*time.Second)
	table := runsTable(t, stores[0].pool)
	signer := whSigner(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			started <- struct{}{}
			<-release
		}
		insertRun(t, table).ServeHTTP(w, r)
	})
	first := whVerifier(t, stores[0], time.Minute, true).Middleware(h)
	instances := []struct {
		name string
		h    http.Handler
	}{
		{"the same instance", first},
		{"another transactional instance", whVerifier(t, stores[1], time.Minute, true).Middleware(h)},
		{"an instance without Transactional", whVerifier(t, stores[2], time.Minute, false).Middleware(h)},
	}
	const id = "msg_busy"
	done := make(chan int, 1)
	go func() { done <- deliverTo(t, first, signer, id, "{}").Code }()
	<-started
	for _, in := range instances {
		t.Run(in.name+" while it runs", func(t *testing.T) {
			rec := deliverTo(t, in.h, signer, id, "{}")
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
				t.Fatalf("status %d, Retry-After %q; want 503, 1", rec.Code, rec.Header().Get("Retry-After"))
			}
		})
	}
	close(release)
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("the first delivery: status %d, want 201", code)
	}
	for _, in := range instances {
		t.Run(in.name+" after it committed", func(t *testing.T) {
			if rec := deliverTo(t, in.h, signer, id, "{}"); rec.Code != http.StatusOK {
				t.Fatalf("status %d, want 200", rec.Code)
			}
		})
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	if rows := rowsPerDelivery(t, stores[0].pool, table)[id]; rows != 1 {
		t.Fatalf("%d rows, want 1", rows)
	}
}
