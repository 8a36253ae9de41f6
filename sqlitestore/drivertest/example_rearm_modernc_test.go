//go:build !ncruces && !mattn

package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// The operator's path after a loss: the database file was deleted and made
// again, so it has forgotten the IDs it acknowledged. Migrate and New
// refuse with ErrForgotten, never serving as if nothing happened; Rearm,
// the operator's decision, opens it again behind a fence as long as the
// longest claim the lost file could have held (here zero, to show the
// store serving again; in production, the stores' Horizon).
func Example_rearm() {
	dir, err := os.MkdirTemp("", "replay")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "replay.db")
	ctx := context.Background()
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
		if err != nil {
			log.Fatal(err)
		}
		return db
	}

	db := open()
	if err := sqlitestore.Migrate(ctx, db, ""); err != nil { // the deployment step
		log.Fatal(err)
	}
	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store.Close()
	db.Close()

	for _, f := range []string{path, path + "-wal", path + "-shm"} { // the loss
		os.Remove(f)
	}
	db = open()
	defer db.Close()
	err = sqlitestore.Migrate(ctx, db, "")
	fmt.Println("migrate:", errors.Is(err, sqlitestore.ErrForgotten))

	if err := sqlitestore.Rearm(ctx, db, "", 0); err != nil {
		log.Fatal(err)
	}
	store, err = sqlitestore.New(ctx, db, sqlitestore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	first, err := store.Claim(ctx, "request-state-7f3a", time.Now().Add(time.Hour))
	fmt.Println("after rearm:", first, err)
	// Output:
	// migrate: true
	// after rearm: true <nil>
}
