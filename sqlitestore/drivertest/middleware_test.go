package drivertest

// The idempotency middleware and the webhook middleware on a store over a
// real file, in their plain mode and in their transactional mode (the
// handler writes through sqlitestore.TxFrom(r.Context())). The handler
// charges: it inserts one row in a charges table with no unique key, so a
// second execution whose writes were kept shows as a second row.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/ctoken/ctoken/webhook"
)

// chargesSchema is the app's table: one row per kept execution.
const chargesSchema = `CREATE TABLE IF NOT EXISTS charges (ref TEXT NOT NULL, body TEXT NOT NULL)`

// chargeStore opens a migrated database with the charges table and a
// store on it.
func chargeStore(t *testing.T, d Driver) (*sqlitestore.Store, *sql.DB) {
	t.Helper()
	db, _ := openMigrated(t, d)
	if _, err := db.ExecContext(context.Background(), chargesSchema); err != nil {
		t.Fatal(err)
	}
	return mustStore(t, db, sqlitestore.Options{SweepInterval: -1}), db
}

// charges returns the committed charges' bodies by reference.
func charges(t testing.TB, db *sql.DB) map[string][]string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT ref, body FROM charges`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var ref, body string
		if err := rows.Scan(&ref, &body); err != nil {
			t.Fatal(err)
		}
		out[ref] = append(out[ref], body)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// refHeader names the charge a request makes; approvalHeader carries a
// one-time token the handler redeems before it charges.
const (
	refHeader      = "Charge-Ref"
	approvalHeader = "Approval"
)

// approvalClaims are the claims of every approval token.
var approvalClaims = map[string]string{"tenant": "tenant-1"}

// chargeApp is the handler: it redeems the request's approval (if
// approvals is set), inserts one charge (through the request's
// transaction when tx, else through the pool), and answers 201 with a
// body unique to this execution. failNext makes the next execution fail:
// with 500 after its insert when tx (the rollback must undo it), with 503
// before it otherwise (a plain handler's 500 is recorded, as Stripe
// records it; 503 says it did not process the request).
type chargeApp struct {
	db        *sql.DB
	tx        bool
	approvals *ctoken.OneTimeIssuer
	runs      atomic.Int32
	failNext  atomic.Bool
}

func (a *chargeApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.runs.Add(1)
	ctx := r.Context()
	ref := r.Header.Get(refHeader)
	if a.approvals != nil {
		if _, err := a.approvals.Redeem(ctx, r.Header.Get(approvalHeader), approvalClaims); errors.Is(err, ctoken.ErrOneTimeRedeemed) {
			http.Error(w, "approval already used", http.StatusConflict)
			return
		} else if err != nil {
			http.Error(w, "approval: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	fail := a.failNext.CompareAndSwap(true, false)
	if fail && !a.tx {
		http.Error(w, "charge failed", http.StatusServiceUnavailable)
		return
	}
	var id [8]byte
	rand.Read(id[:])
	body := fmt.Sprintf(`{"charge":%q,"id":"ch_%x"}`, ref, id)
	insert := a.db.ExecContext
	if a.tx {
		tx, err := sqlitestore.TxFrom(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		insert = tx.ExecContext
	}
	if _, err := insert(ctx, `INSERT INTO charges (ref, body) VALUES (?, ?)`, ref, body); err != nil {
		http.Error(w, "insert: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if fail {
		http.Error(w, "charge failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, body)
}

// answer is one attempt's response.
type answer struct {
	status   int
	body     string
	replayed bool // Idempotent-Replayed: true
}

// front is one middleware in front of a chargeApp, served on 127.0.0.1:
// send makes one attempt of the operation ref (an idempotency key, a
// webhook delivery ID) with the extra header h. arrived, if set, is
// called by the server with every request, before the middleware sees it.
type front struct {
	name string
	wrap func(t *testing.T, s *sqlitestore.Store, tx bool, h http.Handler, arrived func()) (send func(ref string, h http.Header) answer)
}

var fronts = []front{
	{"idempotency", idempotencyFront},
	{"webhook", webhookFront},
}

var middlewareKeys = func() *ctoken.Keyring {
	k, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		panic(err)
	}
	return k
}()

// loopback serves h on 127.0.0.1 until t ends, calling arrived (if set)
// with every request first.
func loopback(t *testing.T, h http.Handler, arrived func()) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived != nil {
			arrived()
		}
		h.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func attempt(t *testing.T, client *http.Client, req *http.Request) answer {
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("reading the response: %v", err)
	}
	return answer{resp.StatusCode, string(b), resp.Header.Get(idempotency.ReplayedHeader) == "true"}
}

// idempotencyFront: POST /charges behind the idempotency middleware.
func idempotencyFront(t *testing.T, s *sqlitestore.Store, tx bool, h http.Handler, arrived func()) func(string, http.Header) answer {
	mw, err := idempotency.New(idempotency.Config{
		Store:         s,
		Keys:          middlewareKeys,
		Caller:        func(*http.Request) (string, error) { return "tenant-1", nil },
		Required:      true,
		Lease:         20 * time.Second,
		Transactional: tx,
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw.Wrap(h))
	srv := loopback(t, mux, arrived)
	return func(ref string, extra http.Header) answer {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":1999,"currency":"eur"}`))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range extra {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", ref)
		req.Header.Set(refHeader, ref)
		return attempt(t, srv.Client(), req)
	}
}

const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// webhookFront: POST /hook behind a Standard Webhooks verifier; ref is
// the delivery's ID.
func webhookFront(t *testing.T, s *sqlitestore.Store, tx bool, h http.Handler, arrived func()) func(string, http.Header) answer {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme: webhook.StandardWebhooks(), Secrets: []string{webhookSecret},
		Replay: s, Namespace: "charges", Lease: 20 * time.Second, Transactional: tx,
		OnLeaseError: func(_ *http.Request, _ webhook.Delivery, err error) { t.Errorf("OnLeaseError: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{webhookSecret}})
	if err != nil {
		t.Fatal(err)
	}
	srv := loopback(t, v.Middleware(h), arrived)
	return func(ref string, extra http.Header) answer {
		body := `{"type":"charge.requested","charge":"` + ref + `"}`
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/hook", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range extra {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(refHeader, ref)
		if err := signer.Sign(req.Header, ref, []byte(body)); err != nil {
			t.Fatal(err)
		}
		return attempt(t, srv.Client(), req)
	}
}

var middlewareModes = []struct {
	name string
	tx   bool
}{{"plain", false}, {"transactional", true}}

// TestMiddlewares pins the idempotency middleware and the webhook
// verifier on the store: a one-time token redeemed in the handler in both
// modes, TxFrom in the plain mode, and the commits of a request in the
// transactional mode.
func TestMiddlewares(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"a one-time token in the handler", middlewaresOnSQLite},
		{"TxFrom in plain mode is ErrNoTx", txFromInPlainModeIsErrNoTx},
		{"transactional request commits once", transactionalRequestCommitsOnce},
	} {
		t.Run(tc.name, tc.test)
	}
}

// middlewaresOnSQLite runs oneTimeTokenInHandler for both middlewares in
// both modes, on the test binary's driver (their retries and failed
// attempts: the idempotencytest and webhooktest kits, in TestStore).
func middlewaresOnSQLite(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, f := range fronts {
			for _, m := range middlewareModes {
				t.Run(f.name+"/"+m.name, func(t *testing.T) {
					t.Parallel()
					oneTimeTokenInHandler(t, d, f, m.tx)
				})
			}
		}
	})
}

// failStatus is the status of chargeApp's failed execution.
func failStatus(tx bool) int {
	if tx {
		return http.StatusInternalServerError
	}
	return http.StatusServiceUnavailable
}

// oneTimeTokenInHandler: the handler redeems a one-time token, with the
// request's context, before it charges, and its first execution fails
// (500). In the transactional mode the redemption is rolled back with the
// charge: the retry redeems the same token and charges, and that
// redemption commits with it, so the token is refused afterwards, to
// another operation and to a direct Redeem. In the plain mode the failed
// execution's redemption stays: the retry is refused (409), nothing is
// charged.
func oneTimeTokenInHandler(t *testing.T, d Driver, f front, tx bool) {
	s, db := chargeStore(t, d)
	issuer, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: middlewareKeys, Purpose: "charge-approval", Replay: s})
	if err != nil {
		t.Fatal(err)
	}
	app := &chargeApp{db: db, tx: tx, approvals: issuer}
	app.failNext.Store(true)
	send := f.wrap(t, s, tx, app, nil)
	tok, err := issuer.Mint(approvalClaims)
	if err != nil {
		t.Fatal(err)
	}
	approval := http.Header{approvalHeader: {tok}}
	if a := send("ref_approved", approval); a.status != failStatus(tx) {
		t.Fatalf("the failing attempt: %d %q; want %d", a.status, a.body, failStatus(tx))
	}
	retry := send("ref_approved", approval)
	got := charges(t, db)["ref_approved"]
	if !tx {
		if retry.status != http.StatusConflict || len(got) != 0 {
			t.Fatalf("the retry: %d %q, %d charges; want 409 (the failed execution's redemption stayed) and none", retry.status, retry.body, len(got))
		}
		return
	}
	if retry.status != http.StatusCreated || len(got) != 1 || retry.body != got[0] {
		t.Fatalf("the retry: %d %q, charges %q; want 201 with the one charge (the failed execution's redemption rolled back)", retry.status, retry.body, got)
	}
	// The same token for another operation: the handler runs, and its
	// redemption is refused.
	if a := send("ref_approved_again", approval); a.status != http.StatusConflict {
		t.Fatalf("the token for another operation: %d %q; want 409 (already used)", a.status, a.body)
	}
	if _, err := issuer.Redeem(context.Background(), tok, approvalClaims); !errors.Is(err, ctoken.ErrOneTimeRedeemed) {
		t.Fatalf("Redeem after the committed execution = %v; want ErrOneTimeRedeemed", err)
	}
	if n := len(charges(t, db)); n != 1 || app.runs.Load() != 3 {
		t.Fatalf("charges for %d refs, %d executions; want 1 and 3", n, app.runs.Load())
	}
}

// txFromInPlainModeIsErrNoTx: a handler behind a middleware in the
// plain mode finds no transaction (ErrNoTx), rather than a connection of
// its own, so a handler written for the transactional mode does not
// silently write outside it.
func txFromInPlainModeIsErrNoTx(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, f := range fronts {
			t.Run(f.name, func(t *testing.T) {
				t.Parallel()
				s, _ := chargeStore(t, d)
				var got error
				send := f.wrap(t, s, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, got = sqlitestore.TxFrom(r.Context())
					w.WriteHeader(http.StatusNoContent)
				}), nil)
				if a := send("ref_plain", nil); a.status != http.StatusNoContent {
					t.Fatalf("status %d %q; want 204", a.status, a.body)
				}
				if !errors.Is(got, sqlitestore.ErrNoTx) {
					t.Fatalf("TxFrom in the plain mode = %v; want ErrNoTx", got)
				}
			})
		}
	})
}
