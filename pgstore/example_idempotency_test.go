package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"os"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The idempotency middleware keeps its keys, request fingerprints and
// responses in the store (Store implements replay.Recorder), so every
// instance of a fleet answers a retried request with the first response.
// Migrate adds the columns the records need to a table made by an earlier
// version.
func ExampleStore_AcquireRecord() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool, ""); err != nil {
		panic(err)
	}
	store, err := pgstore.New(ctx, pool, pgstore.Options{Prefix: "myapp:idempotency:"})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	keys, err := ctoken.KeyringFromEnv("CTOKEN_KEYS") // seals the stored responses; one ring for the fleet
	if err != nil {
		panic(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store:  store,
		Caller: accountOf, // keys are scoped to the authenticated caller
		Keys:   keys,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated) // runs once per key; retries get this response
	})))
	_ = http.ListenAndServe(":8080", mux)
}

// accountOf returns the account your authentication established for r.
func accountOf(r *http.Request) (string, error) {
	if account, ok := r.Context().Value(accountKey{}).(string); ok && account != "" {
		return account, nil
	}
	return "", errors.New("unauthenticated")
}

type accountKey struct{}
