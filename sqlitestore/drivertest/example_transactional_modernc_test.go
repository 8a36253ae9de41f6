//go:build !ncruces && !mattn

package drivertest

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/ctoken/ctoken/webhook"
)

// The transactional mode on one SQLite file: the handler writes its row
// through sqlitestore.TxFrom, and the row, the end of the lease and the
// stored response (or the delivery's "processed" mark) commit together.
// A retry of the same Idempotency-Key is answered from the record, and a
// second copy of a webhook delivery is acknowledged without running the
// handler: each row is written once.
func Example_transactional() {
	ctx := context.Background()
	// The app's own table, in the same file as the store's.
	db, store, done := exampleStore(`CREATE TABLE charges (source TEXT NOT NULL, ref TEXT NOT NULL)`)
	defer done()

	// charge inserts one row in the request's transaction.
	charge := func(source string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, err := sqlitestore.TxFrom(r.Context()) // ErrNoTx without Transactional
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			ref := r.Header.Get("Charge-Ref")
			if _, err := tx.ExecContext(r.Context(), `INSERT INTO charges (source, ref) VALUES (?, ?)`, source, ref); err != nil {
				http.Error(w, "try again", http.StatusServiceUnavailable) // rolled back; the retry runs again
				return
			}
			w.WriteHeader(http.StatusCreated) // sent after the commit
			io.WriteString(w, "charged "+ref)
		})
	}

	// The idempotency middleware: the same key sent twice.
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store:         store,
		Keys:          keys,
		Caller:        func(*http.Request) (string, error) { return "account-1", nil }, // stands in for authentication
		Transactional: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	api := mw.Wrap(charge("api"))
	for try := 1; try <= 2; try++ {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":1999}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-1042")
		req.Header.Set("Charge-Ref", "order-1042")
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		fmt.Printf("request %d: %d %q replayed=%q\n", try, rec.Code, rec.Body.String(), rec.Header().Get(idempotency.ReplayedHeader))
	}

	// The webhook verifier: the same delivery sent twice.
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme: webhook.StandardWebhooks(), Secrets: secrets,
		Replay: store, Namespace: "payments-hooks", Transactional: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	signer, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: secrets})
	if err != nil {
		log.Fatal(err)
	}
	hook := v.Middleware(charge("webhook"))
	body := []byte(`{"type":"charge.requested","charge":"order-2077"}`)
	for n := 1; n <= 2; n++ {
		req := httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Charge-Ref", "order-2077")
		if err := signer.Sign(req.Header, "msg_2077", body); err != nil {
			log.Fatal(err)
		}
		rec := httptest.NewRecorder()
		hook.ServeHTTP(rec, req)
		fmt.Printf("delivery %d: %d %q\n", n, rec.Code, rec.Body.String())
	}

	rows, err := db.QueryContext(ctx, `SELECT source, ref, count(*) FROM charges GROUP BY source, ref ORDER BY source`)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var source, ref string
		var n int
		if err := rows.Scan(&source, &ref, &n); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("rows: %s %s x%d\n", source, ref, n)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// request 1: 201 "charged order-1042" replayed=""
	// request 2: 201 "charged order-1042" replayed="true"
	// delivery 1: 201 "charged order-2077"
	// delivery 2: 200 ""
	// rows: api order-1042 x1
	// rows: webhook order-2077 x1
}
