//go:build ncruces

package drivertest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// TestEscapeRecordCommitsWithoutSQLitesCheckpoint: the commit that
// records an escaped Work (a handler's ROLLBACK after it changed rows)
// runs on the writer's connection after the handler's statements, which
// may have set wal_autocheckpoint. SQLite would then checkpoint after
// that commit and drop the checkpoint's error; the store sets 0 back
// first. Seen from the database file: no page of it is written by that
// commit. ncruces only: the test reads the file itself, and closing a
// descriptor of it releases a process's POSIX locks (ncruces takes OFD
// locks, which a close of another descriptor leaves).
func TestEscapeRecordCommitsWithoutSQLitesCheckpoint(t *testing.T) {
	ctx := context.Background()
	db, path := openMigrated(t, driver)
	mustExec(t, ctx, db, `CREATE TABLE app (id TEXT PRIMARY KEY)`)
	// A connection held open: no other connection's close is the last
	// one, which would checkpoint.
	heldConn(t, db)
	s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1, RecheckInterval: time.Hour})
	claimAll(t, s, idList("c-", 20), time.Now().Add(time.Hour))
	before := readFile(t, path)
	w, tx, _ := acquire(t, s, "escaped", time.Minute, nil)
	for _, q := range []string{`PRAGMA wal_autocheckpoint = 1`, `INSERT INTO app (id) VALUES ('x')`, `ROLLBACK`} {
		mustExec(t, ctx, tx, q)
	}
	if err := w.Commit(ctx, time.Now().Add(time.Hour), nil, nil); err == nil {
		t.Fatal("Commit after the handler's ROLLBACK = nil; want the escape refused")
	}
	if l, err := s.AcquireLease(ctx, "escaped", time.Minute); !errors.Is(err, replay.ErrLeaseLost) && l.State == replay.LeaseAcquired {
		t.Fatalf("AcquireLease of the escaped ID = %+v, %v; want it recorded as escaped, not acquired", l, err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("the database file changed with the record of the escape: SQLite checkpointed after its commit, with the handler's wal_autocheckpoint")
	}
}
