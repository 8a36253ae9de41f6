package pgstore_test

import (
	"context"
	"io"
	"net/http"
	"os"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/pgstore"
	"github.com/ctoken/ctoken/webhook"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A payments endpoint whose charge and idempotency record commit in one
// transaction (idempotency.Config.Transactional): the handler writes
// through pgstore.TxFrom, and a handler that outlives its lease, or a
// process killed before the commit, keeps neither, so a retry charges
// exactly once. Needs a PostgreSQL server (DATABASE_URL), so it is
// compiled, not run.
func Example_idempotencyTransactional() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.Options{Prefix: "myapp:idempotency:"})
	if err != nil {
		panic(err) // the table is made by pgstore.Migrate at deployment (ExampleSchema)
	}
	defer store.Close()
	keys, err := ctoken.KeyringFromEnv("CTOKEN_KEYS")
	if err != nil {
		panic(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store:         store,
		Caller:        accountOf,
		Keys:          keys,
		Transactional: true,
	})
	if err != nil {
		panic(err)
	}
	http.Handle("POST /charges", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := pgstore.TxFrom(r.Context())
		if err != nil {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		account, _ := accountOf(r)
		if _, err := tx.Exec(r.Context(), "INSERT INTO charges (account, amount) VALUES ($1, 100)", account); err != nil {
			http.Error(w, "charge failed", http.StatusInternalServerError) // rolled back; the key is freed
			return
		}
		w.WriteHeader(http.StatusCreated) // sent once the charge and the record committed
	})))
}

// A webhook receiver whose writes and the delivery's "processed" mark
// commit in one transaction (webhook.Config.Transactional): each delivery
// is applied exactly once, even when the receiver dies mid-handler. Needs
// a PostgreSQL server (DATABASE_URL), so it is compiled, not run.
func Example_webhookTransactional() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.Options{Prefix: "myapp:webhooks:"})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	v, err := webhook.NewVerifier(webhook.Config{
		Scheme:        webhook.Stripe(),
		Secrets:       []string{os.Getenv("STRIPE_WEBHOOK_SECRET")},
		Replay:        store,
		Transactional: true,
	})
	if err != nil {
		panic(err)
	}
	http.Handle("POST /webhooks/stripe", v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read failed", http.StatusInternalServerError)
			return
		}
		tx, err := pgstore.TxFrom(r.Context())
		if err != nil {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		if _, err := tx.Exec(r.Context(), "INSERT INTO stripe_events (body) VALUES ($1)", body); err != nil {
			http.Error(w, "store failed", http.StatusInternalServerError) // Stripe retries
			return
		}
		w.WriteHeader(http.StatusOK)
	})))
}
