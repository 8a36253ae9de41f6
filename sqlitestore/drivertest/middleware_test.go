package drivertest

// The idempotency middleware and the webhook middleware on a store over a
// real file, in their transactional mode (the handler writes through
// sqlitestore.TxFrom(r.Context())). The handler charges: it inserts one
// row in a charges table with no unique key, so a second execution whose
// writes were kept shows as a second row.

import (
	"crypto/rand"
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

// refHeader names the charge a request makes.
const refHeader = "Charge-Ref"

// chargeApp is the handler: it inserts one charge through the request's
// transaction, and answers 201 with a body unique to this execution.
type chargeApp struct {
	runs atomic.Int32
}

func (a *chargeApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.runs.Add(1)
	ctx := r.Context()
	ref := r.Header.Get(refHeader)
	var id [8]byte
	rand.Read(id[:])
	body := fmt.Sprintf(`{"charge":%q,"id":"ch_%x"}`, ref, id)
	tx, err := sqlitestore.TxFrom(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO charges (ref, body) VALUES (?, ?)`, ref, body); err != nil {
		http.Error(w, "insert: "+err.Error(), http.StatusServiceUnavailable)
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
// webhook delivery ID).
type front struct {
	name string
	wrap func(t *testing.T, s *sqlitestore.Store, h http.Handler) (send func(ref string) answer)
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

// loopback serves h on 127.0.0.1 until t ends.
func loopback(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// attempt POSTs body to path on srv as the operation ref (its
// Content-Type and refHeader set, the rest by header) and returns the
// response.
func attempt(t *testing.T, srv *httptest.Server, path, body, ref string, header func(http.Header)) answer {
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(refHeader, ref)
	header(req.Header)
	resp, err := srv.Client().Do(req)
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
func idempotencyFront(t *testing.T, s *sqlitestore.Store, h http.Handler) func(string) answer {
	mw, err := idempotency.New(idempotency.Config{
		Store:         s,
		Keys:          middlewareKeys,
		Caller:        func(*http.Request) (string, error) { return "tenant-1", nil },
		Required:      true,
		Lease:         20 * time.Second,
		Transactional: true,
		Logger:        slog.New(slog.DiscardHandler),
	})
	must(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw.Wrap(h))
	srv := loopback(t, mux)
	return func(ref string) answer {
		return attempt(t, srv, "/charges", `{"amount":1999,"currency":"eur"}`, ref, func(h http.Header) { h.Set("Idempotency-Key", ref) })
	}
}

const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// webhookFront: POST /hook behind a Standard Webhooks verifier; ref is
// the delivery's ID.
func webhookFront(t *testing.T, s *sqlitestore.Store, h http.Handler) func(string) answer {
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme: webhook.StandardWebhooks(), Secrets: []string{webhookSecret},
		Replay: s, Namespace: "charges", Lease: 20 * time.Second, Transactional: true,
		OnLeaseError: func(_ *http.Request, _ webhook.Delivery, err error) { t.Errorf("OnLeaseError: %v", err) },
	})
	must(t, err)
	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{webhookSecret}})
	must(t, err)
	srv := loopback(t, v.Middleware(h))
	return func(ref string) answer {
		body := `{"type":"charge.requested","charge":"` + ref + `"}`
		return attempt(t, srv, "/hook", body, ref, func(h http.Header) { must(t, signer.Sign(h, ref, []byte(body))) })
	}
}

// TestMiddlewares pins the commits of a request through the idempotency
// middleware and the webhook verifier in their transactional mode. (Their
// retries, failed attempts and a failed run's writes, rolled back: the
// idempotencytest and webhooktest kits, in TestStore; a claim with a
// Work's context, as a one-time token redeemed in the handler makes:
// TestWork; TxFrom without a Work: TestWork too.)
func TestMiddlewares(t *testing.T) {
	t.Run("transactional request commits once", transactionalRequestCommitsOnce)
}
