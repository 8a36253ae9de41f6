package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"net/http"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/sqlitestore"
)

// A one-machine API keeps its idempotency keys through restarts: the
// store on a SQLite file replaces the memory store, which forgets every
// key when the process stops. The module imports no driver: the program
// imports one (here modernc.org/sqlite, registered as "sqlite", with its
// DSN's pragma syntax); the drivertest module's Example runs this set-up.
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:/var/lib/api/replay.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqlitestore.Migrate(ctx, db, ""); err != nil { // once, or at every start: it is idempotent
		log.Fatal(err)
	}
	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
	if err != nil {
		log.Fatal(err) // a misconfigured database is refused here, never at the first request
	}
	defer store.Close()

	keys, err := ctoken.KeyringFromEnv("CTOKEN_KEYS") // keys that survive the restart too
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store: store,
		Keys:  keys,
		Caller: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" { // stands in for real authentication
				return u, nil
			}
			return "", errors.New("not signed in")
		},
		Wait: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
}
