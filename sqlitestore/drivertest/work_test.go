package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// workStore opens a migrated database with an app table (app: id TEXT
// PRIMARY KEY) beside the store's, and a store on it.
func workStore(t *testing.T, d Driver, opts sqlitestore.Options) (*sqlitestore.Store, *sql.DB) {
	t.Helper()
	db, _ := openMigrated(t, d)
	mustExec(t, context.Background(), db, `CREATE TABLE app (id TEXT PRIMARY KEY)`)
	opts.SweepInterval = -1
	return mustStore(t, db, opts), db
}

// appRows counts the app table's rows for id, read outside any Work.
func appRows(t *testing.T, db *sql.DB, id string) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM app WHERE id = ?`, id)
}

func mustLease(t *testing.T, s *sqlitestore.Store, id string, lease time.Duration) replay.Lease {
	t.Helper()
	l, err := s.AcquireLease(context.Background(), id, lease)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatalf("AcquireLease(%s) = %+v, %v; want acquired", id, l, err)
	}
	return l
}

func wantLease(t *testing.T, s *sqlitestore.Store, id string, want replay.LeaseState) {
	t.Helper()
	l, err := s.AcquireLease(context.Background(), id, time.Minute)
	if err != nil || l.State != want {
		t.Fatalf("AcquireLease(%s) = %+v, %v; want state %v", id, l, err, want)
	}
}

// workOf opens a Work on id for a minute, through AcquireWork with fp
// (acquired) or through a lease and BeginWork, and returns it with its Tx.
func workOf(t *testing.T, s *sqlitestore.Store, id string, acquired bool, fp []byte) (replay.Work, *sqlitestore.Tx) {
	t.Helper()
	if acquired {
		w, tx, _ := acquire(t, s, id, time.Minute, fp)
		return w, tx
	}
	w, tx, _ := begin(t, s, id, mustLease(t, s, id, time.Minute).Token)
	return w, tx
}

// begin opens a Work on id's lease and returns it with its Tx.
func begin(t *testing.T, s *sqlitestore.Store, id, token string) (replay.Work, *sqlitestore.Tx, context.Context) {
	t.Helper()
	ctx := context.Background()
	w, err := s.BeginWork(ctx, id, token)
	if err != nil {
		t.Fatalf("BeginWork(%s) = %v", id, err)
	}
	t.Cleanup(func() { w.Rollback(ctx) })
	wctx := w.Context(ctx)
	tx, err := sqlitestore.TxFrom(wctx)
	if err != nil {
		t.Fatalf("TxFrom(the work's context) = %v", err)
	}
	return w, tx, wctx
}

// endWork commits w (until an hour from now, with fp and rec) or rolls
// it back, failing t on an error.
func endWork(t *testing.T, w replay.Work, commit bool, fp, rec []byte) {
	t.Helper()
	ctx := context.Background()
	if commit {
		must(t, w.Commit(ctx, time.Now().Add(time.Hour), fp, rec))
	} else {
		must(t, w.Rollback(ctx))
	}
}

func insertApp(t *testing.T, tx *sqlitestore.Tx, id string) {
	t.Helper()
	mustExec(t, context.Background(), tx, `INSERT INTO app (id) VALUES (?)`, id)
}

// TestWork: the transactional mode used directly, as the middlewares use
// it, beyond replaytest.RunWorkContract (TestStore): the single
// writer, claims in a Work or WithTx, the handler's escapes and settings.
func TestWork(t *testing.T) {
	runOnEveryDriver(t, []driverCase{
		{"lease ending during the work is not taken before its commit", workOutlivesLease},
		{"claim in the work commits and rolls back with it", workClaim},
		{"WithTx writes the claim in the caller's transaction", withTx},
		{"WithTx on another database is ErrConfig", withTxOtherDatabase},
		{"handler's ROLLBACK: nothing kept, or the ID refused", workEscapedRollback},
		{"handler's COMMIT is an error and the ID is never run again", workEscapedCommit},
		{"TxFrom without a work is ErrNoTx", txFromPlainContext},
		{"Tx refuses every statement after the work ends", txAfterEnd},
		{"handler's temp trigger never deletes the store's rows", func(t *testing.T, d Driver) { workTempTrigger(t, d, false) }},
		{"handler's wal_autocheckpoint does not outlive its work", workAutocheckpoint},
	})
}

// workAutocheckpoint: the store runs its writer's checkpoints itself
// (wal_autocheckpoint=0 on that connection; SQLite drops the error of the
// checkpoint it runs after a commit). A handler that sets another value
// on the writer's connection, inside a Work that commits or rolls back,
// or that commits of itself after AcquireWork, leaves 0 for the store's
// writes that follow: the next Work's handler reads 0. So with a pool
// whose DSN sets 0 (the application checkpoints itself), where mattn,
// which takes no such DSN parameter, runs its default.
func workAutocheckpoint(t *testing.T, d Driver) {
	t.Run("the pool's setting", func(t *testing.T) {
		s, _ := workStore(t, d, sqlitestore.Options{})
		handlerAutocheckpoint(t, s)
	})
	t.Run("a DSN that sets 0", func(t *testing.T) {
		db := d.OpenWith(t, filepath.Join(t.TempDir(), "replay.db"), With("wal_autocheckpoint", "0"))
		must(t, sqlitestore.Migrate(context.Background(), db, ""))
		mustExec(t, context.Background(), db, `CREATE TABLE app (id TEXT PRIMARY KEY)`)
		handlerAutocheckpoint(t, mustStore(t, db, sqlitestore.Options{SweepInterval: -1}))
	})
}

func handlerAutocheckpoint(t *testing.T, s *sqlitestore.Store) {
	ctx := context.Background()
	read := func(tx *sqlitestore.Tx) int {
		t.Helper()
		var n int
		must(t, tx.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&n))
		return n
	}
	for _, commit := range []bool{true, false} {
		for _, acquired := range []bool{false, true} {
			id := fmt.Sprintf("job-%v-%v", commit, acquired)
			w, tx := workOf(t, s, id, acquired, nil)
			if n := read(tx); n != 0 {
				t.Fatalf("%s: the handler reads wal_autocheckpoint = %d on the store's connection; want 0", id, n)
			}
			mustExec(t, ctx, tx, `PRAGMA wal_autocheckpoint = 1`)
			endWork(t, w, commit, nil, nil)
			claimAll(t, s, idList(id+"-claim-", 3), time.Now().Add(time.Hour))
			next, ntx := workOf(t, s, id+"-next", false, nil)
			if n := read(ntx); n != 0 {
				t.Errorf("after a handler set wal_autocheckpoint = 1 and its work ended (commit %v, AcquireWork %v), the store's connection has %d; want 0", commit, acquired, n)
			}
			next.Rollback(ctx)
		}
	}
}

// workOutlivesLease: a Work holds the store's writer, so a lease that
// ends while the work runs is not taken by another holder before the
// work commits; the other holder then finds the ID done.
func workOutlivesLease(t *testing.T, d Driver) {
	ctx := context.Background()
	s, db := workStore(t, d, sqlitestore.Options{Timeout: 10 * time.Second})
	const lease = 50 * time.Millisecond
	l := mustLease(t, s, "job", lease)
	w, tx, _ := begin(t, s, "job", l.Token)
	insertApp(t, tx, "job")
	time.Sleep(lease + 20*time.Millisecond)
	other := make(chan replay.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := s.AcquireLease(ctx, "job", time.Minute)
		other <- l
		errc <- err
	}()
	if err := w.Commit(ctx, time.Now().Add(time.Hour), nil, nil); err != nil {
		t.Fatalf("Commit after the lease's time, nobody having taken the ID = %v", err)
	}
	if l, err := <-other, <-errc; err != nil || l.State != replay.LeaseDone {
		t.Fatalf("AcquireLease racing the work = %+v, %v; want done", l, err)
	}
	if n := appRows(t, db, "job"); n != 1 {
		t.Fatalf("app rows = %d; want 1", n)
	}
}

// A workWay opens a Work on "job", with what its Commit takes.
type workWay struct {
	name    string
	fp, rec []byte // Commit's
	begin   func(t *testing.T, s *sqlitestore.Store) (replay.Work, *sqlitestore.Tx, context.Context)
}

// workWays are the two ways to open a Work on "job" for lease: BeginWork
// after AcquireLease, and AcquireWork.
func workWays(lease time.Duration) []workWay {
	return []workWay{
		{"BeginWork", nil, nil, func(t *testing.T, s *sqlitestore.Store) (replay.Work, *sqlitestore.Tx, context.Context) {
			return begin(t, s, "job", mustLease(t, s, "job", lease).Token)
		}},
		{"AcquireWork", workFP, []byte("r"), func(t *testing.T, s *sqlitestore.Store) (replay.Work, *sqlitestore.Tx, context.Context) {
			return acquire(t, s, "job", lease, workFP)
		}},
	}
}

// workClaim: a claim in a Work, of BeginWork or of AcquireWork, commits
// and rolls back with it.
func workClaim(t *testing.T, d Driver) {
	for _, way := range workWays(time.Minute) {
		for _, commit := range []bool{false, true} {
			t.Run(fmt.Sprint(way.name, "/commit=", commit), func(t *testing.T) {
				ctx := context.Background()
				s, _ := workStore(t, d, sqlitestore.Options{})
				until := time.Now().Add(time.Hour)
				w, _, wctx := way.begin(t, s)
				if first, err := s.Claim(wctx, "token-1", until); !first || err != nil {
					t.Fatalf("Claim in the work = %v, %v; want first", first, err)
				}
				if first, err := s.Claim(wctx, "token-1", until); first || err != nil {
					t.Fatalf("second Claim in the work = %v, %v; want not first", first, err)
				}
				endWork(t, w, commit, way.fp, way.rec)
				first, err := s.Claim(ctx, "token-1", until)
				if err != nil || first == commit {
					t.Fatalf("Claim after the work ended (committed: %v) = %v, %v; want first only if rolled back", commit, first, err)
				}
			})
		}
	}
}

func withTx(t *testing.T, d Driver) {
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprint("commit=", commit), func(t *testing.T) {
			ctx := context.Background()
			s, db := workStore(t, d, sqlitestore.Options{})
			until := time.Now().Add(time.Hour)
			tx, err := db.BeginTx(ctx, nil)
			must(t, err)
			defer tx.Rollback()
			mustExec(t, ctx, tx, `INSERT INTO app (id) VALUES ('job')`)
			if first, err := s.Claim(sqlitestore.WithTx(ctx, tx), "token-1", until); !first || err != nil {
				t.Fatalf("Claim in the caller's transaction = %v, %v; want first", first, err)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			must(t, err)
			first, err := s.Claim(ctx, "token-1", until)
			if err != nil || first == commit {
				t.Fatalf("Claim after the transaction (committed: %v) = %v, %v; want first only if rolled back", commit, first, err)
			}
			if n, want := appRows(t, db, "job"), map[bool]int{false: 0, true: 1}[commit]; n != want {
				t.Fatalf("app rows = %d; want %d", n, want)
			}
		})
	}
}

func withTxOtherDatabase(t *testing.T, d Driver) {
	ctx := context.Background()
	s, _ := workStore(t, d, sqlitestore.Options{})
	migratedOther, _ := openMigrated(t, d)
	bare := d.Open(t, filepath.Join(t.TempDir(), "bare.db"))
	for name, other := range map[string]*sql.DB{"migrated": migratedOther, "without the table": bare} {
		t.Run(name, func(t *testing.T) {
			tx, err := other.BeginTx(ctx, nil)
			must(t, err)
			defer tx.Rollback()
			first, err := s.Claim(sqlitestore.WithTx(ctx, tx), "token-1", time.Now().Add(time.Hour))
			if first || !errors.Is(err, sqlitestore.ErrConfig) {
				t.Fatalf("Claim with a transaction on another database = %v, %v; want ErrConfig", first, err)
			}
		})
	}
}

// workEscapedRollback: a handler's ROLLBACK ends the work's transaction.
// With no row changed on the connection since BeginWork, nothing was
// kept: ErrRolledBack, and the lease is as it was. Otherwise a statement
// after the ROLLBACK may have committed on its own (an autocommit
// INSERT): the outcome is unknown, Commit and Rollback say so (never
// ErrRolledBack), and the ID is refused, even once its holder releases
// the lease, so the request is never run again over its kept writes.
func workEscapedRollback(t *testing.T, d Driver) {
	for _, tc := range []struct {
		name     string
		before   bool   // an app row written before the handler's statement
		stmt     string // the handler's escape
		after    bool   // an app row written after it, through the Tx
		rollback bool   // the Work ends with Rollback, not Commit
		kept     int    // app rows 'after' kept
		escaped  bool
	}{
		{"ROLLBACK; BEGIN, no write", false, `ROLLBACK; BEGIN`, false, false, 0, false},
		{"ROLLBACK; BEGIN, no write, then Rollback", false, `ROLLBACK; BEGIN`, false, true, 0, false},
		{"writes around ROLLBACK; BEGIN", true, `ROLLBACK; BEGIN`, true, false, 0, true},
		{"ROLLBACK then an autocommit INSERT", false, `ROLLBACK; INSERT INTO app (id) VALUES ('after')`, false, false, 1, true},
		{"ROLLBACK then an autocommit INSERT, then Rollback", false, `ROLLBACK; INSERT INTO app (id) VALUES ('after')`, false, true, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, db := workStore(t, d, sqlitestore.Options{})
			l := mustLease(t, s, "job", time.Minute)
			w, tx, _ := begin(t, s, "job", l.Token)
			if tc.before {
				insertApp(t, tx, "before")
			}
			mustExec(t, ctx, tx, tc.stmt)
			if tc.after {
				insertApp(t, tx, "after")
			}
			endEscapedWork(t, w, db, tc.rollback, nil, nil, tc.stmt, tc.escaped)
			if n := appRows(t, db, "after"); n != tc.kept {
				t.Fatalf("app rows after the ROLLBACK = %d; want %d", n, tc.kept)
			}
			if !tc.escaped {
				// Nothing was kept: the lease is as it was, and its
				// holder may release it.
				wantLease(t, s, "job", replay.LeaseBusy)
				must(t, s.ReleaseLease(ctx, "job", l.Token))
				mustLease(t, s, "job", time.Minute)
				return
			}
			// The holder's release (the middlewares' after an error) does
			// not free it.
			s.ReleaseLease(ctx, "job", l.Token)
			wantRefused(t, s, "job")
		})
	}
}

// endEscapedWork ends w, whose handler ran stmt, with Rollback or Commit
// (of fp and rec) and checks the outcome: with nothing escaped, Rollback
// succeeds and Commit is ErrRolledBack; otherwise either is
// ErrUnavailable, never ErrRolledBack. The handler's app row "before" is
// never kept.
func endEscapedWork(t *testing.T, w replay.Work, db *sql.DB, rollback bool, fp, rec []byte, stmt string, escaped bool) {
	t.Helper()
	ctx := context.Background()
	var err error
	if rollback {
		err = w.Rollback(ctx)
	} else {
		err = w.Commit(ctx, time.Now().Add(time.Hour), fp, rec)
	}
	switch {
	case !escaped && rollback && err != nil:
		t.Fatalf("Rollback after %q = %v; want nil", stmt, err)
	case !escaped && !rollback && !errors.Is(err, replay.ErrRolledBack):
		t.Fatalf("Commit after %q = %v; want ErrRolledBack", stmt, err)
	case escaped && (errors.Is(err, replay.ErrRolledBack) || !errors.Is(err, sqlitestore.ErrUnavailable)):
		t.Fatalf("end of the work after %q = %v; want ErrUnavailable, not ErrRolledBack", stmt, err)
	}
	if n := appRows(t, db, "before"); n != 0 {
		t.Fatalf("app row before the ROLLBACK kept (%d)", n)
	}
}

// workEscapedCommit: a handler's COMMIT, in a Work of BeginWork or of
// AcquireWork, keeps what it wrote before; Commit is an error (not
// ErrRolledBack) and the ID is refused while the lease lasts and after,
// until an operator's Release frees it.
func workEscapedCommit(t *testing.T, d Driver) {
	const lease = 200 * time.Millisecond
	for _, way := range workWays(lease) {
		t.Run(way.name, func(t *testing.T) {
			ctx := context.Background()
			s, db := workStore(t, d, sqlitestore.Options{})
			w, tx, _ := way.begin(t, s)
			leaseEnd := time.Now().Add(lease) // not before the lease's end
			insertApp(t, tx, "before")
			mustExec(t, ctx, tx, `COMMIT; BEGIN`)
			insertApp(t, tx, "after")
			err := w.Commit(ctx, time.Now().Add(time.Hour), way.fp, way.rec)
			if err == nil || errors.Is(err, replay.ErrRolledBack) {
				t.Fatalf("Commit after the handler's COMMIT = %v; want an error that is not ErrRolledBack (part of the work was kept)", err)
			}
			if n := appRows(t, db, "before"); n != 1 {
				t.Fatalf("app row committed by the handler: %d rows; want 1", n)
			}
			if n := appRows(t, db, "after"); n != 0 {
				t.Fatalf("app row written after the handler's COMMIT: %d rows; want 0 (rolled back)", n)
			}
			// The work's outcome is unknown: the ID is never run again by
			// itself, not while the lease lasts, and not after.
			wantRefused(t, s, "job")
			time.Sleep(time.Until(leaseEnd.Add(50 * time.Millisecond)))
			wantRefused(t, s, "job")
			if _, err := s.AcquireLease(ctx, "job", time.Minute); err == nil {
				t.Fatal("AcquireLease after the lease's time = nil error; want the escaped work's refusal")
			}
			// An operator's Release frees it.
			must(t, s.Release(ctx, "job"))
			mustLease(t, s, "job", time.Minute)
		})
	}
}

func txFromPlainContext(t *testing.T, _ Driver) {
	for name, ctx := range map[string]context.Context{
		"background": context.Background(),
		"WithTx":     sqlitestore.WithTx(context.Background(), nil),
	} {
		if tx, err := sqlitestore.TxFrom(ctx); tx != nil || !errors.Is(err, sqlitestore.ErrNoTx) {
			t.Errorf("TxFrom(%s) = %v, %v; want ErrNoTx", name, tx, err)
		}
	}
}

func txAfterEnd(t *testing.T, d Driver) {
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprint("commit=", commit), func(t *testing.T) {
			ctx := context.Background()
			s, db := workStore(t, d, sqlitestore.Options{})
			w, tx, wctx := begin(t, s, "job", mustLease(t, s, "job", time.Minute).Token)
			endWork(t, w, commit, nil, nil)
			if _, err := tx.ExecContext(ctx, `INSERT INTO app (id) VALUES ('late')`); !errors.Is(err, sql.ErrTxDone) {
				t.Errorf("ExecContext after the work ended = %v; want sql.ErrTxDone", err)
			}
			rows, err := tx.QueryContext(ctx, `SELECT id FROM app`)
			if !errors.Is(err, sql.ErrTxDone) {
				t.Errorf("QueryContext after the work ended = %v; want sql.ErrTxDone", err)
			}
			if rows != nil {
				rows.Close()
			}
			var id string
			if err := tx.QueryRowContext(ctx, `SELECT 'x'`).Scan(&id); !errors.Is(err, sql.ErrConnDone) {
				t.Errorf("QueryRowContext(...).Scan after the work ended = %v; want sql.ErrConnDone", err)
			}
			if first, err := s.Claim(wctx, "token-late", time.Now().Add(time.Hour)); first || !errors.Is(err, sql.ErrTxDone) {
				t.Errorf("Claim with the ended work's context = %v, %v; want sql.ErrTxDone", first, err)
			}
			if n := appRows(t, db, "late"); n != 0 {
				t.Errorf("app rows written after the end = %d", n)
			}
			if first, err := s.Claim(ctx, "token-late", time.Now().Add(time.Hour)); !first || err != nil {
				t.Errorf("Claim after the refused one = %v, %v; want first (nothing was written)", first, err)
			}
		})
	}
}
