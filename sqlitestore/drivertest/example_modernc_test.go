//go:build !ncruces && !mattn

package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// Example_modernc shows the store on modernc.org/sqlite: the settings on every
// connection in the DSN, Migrate once, New at every start. The second
// store, opened on the same file as a restarted process would, still
// refuses the ID the first one claimed.
func Example_modernc() {
	dir, err := os.MkdirTemp("", "replay")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "replay.db")
	ctx := context.Background()
	until := time.Now().Add(time.Hour)

	for start := 1; start <= 2; start++ { // two starts of the same process
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
		if err != nil {
			log.Fatal(err)
		}
		if err := sqlitestore.Migrate(ctx, db, ""); err != nil {
			log.Fatal(err)
		}
		store, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
		if err != nil {
			log.Fatal(err)
		}
		first, err := store.Claim(ctx, "request-state-7f3a", until)
		fmt.Printf("start %d: first=%v err=%v\n", start, first, err)
		store.Close()
		db.Close()
	}
	// Output:
	// start 1: first=true err=<nil>
	// start 2: first=false err=<nil>
}

// exampleStore is the setup of the examples that follow Example_modernc:
// a database file in a temporary directory opened with its DSN, Migrate,
// the application's table (schema) in the same file, and a Store; done
// closes them and removes the directory.
func exampleStore(schema string) (db *sql.DB, store *sqlitestore.Store, done func()) {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		log.Fatal(err)
	}
	if err := sqlitestore.Migrate(ctx, db, ""); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		log.Fatal(err)
	}
	if store, err = sqlitestore.New(ctx, db, sqlitestore.Options{}); err != nil {
		log.Fatal(err)
	}
	return db, store, func() { store.Close(); db.Close(); os.RemoveAll(dir) }
}
