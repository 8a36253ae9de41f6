package drivertest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// acquire takes id with AcquireWork (fingerprint fp) and returns the
// Work with its Tx; the Work is rolled back when the test ends.
func acquire(t *testing.T, s *sqlitestore.Store, id string, lease time.Duration, fp []byte) (replay.Work, *sqlitestore.Tx, context.Context) {
	t.Helper()
	ctx := context.Background()
	r, w, err := s.AcquireWork(ctx, id, lease, fp)
	if err != nil || r.State != replay.LeaseAcquired || r.Token == "" || w == nil {
		t.Fatalf("AcquireWork(%s) = %+v, %v, %v; want acquired with a Work", id, r, w, err)
	}
	t.Cleanup(func() { w.Rollback(ctx) })
	wctx := w.Context(ctx)
	tx, err := sqlitestore.TxFrom(wctx)
	if err != nil {
		t.Fatalf("TxFrom(the work's context) = %v", err)
	}
	return w, tx, wctx
}

// wantWork asks AcquireWork for id and fails t unless it answers state,
// with no Work and no error.
func wantWork(t *testing.T, s *sqlitestore.Store, id string, fp []byte, want replay.LeaseState) replay.Record {
	t.Helper()
	r, w, err := s.AcquireWork(context.Background(), id, time.Minute, fp)
	if w != nil {
		w.Rollback(context.Background())
	}
	if err != nil || r.State != want || w != nil {
		t.Fatalf("AcquireWork(%s) = %+v, Work %v, %v; want %v and no Work", id, r, w, err, want)
	}
	return r
}

var (
	workFP    = []byte("fingerprint-of-the-request")
	workOther = []byte("fingerprint-of-another-one")
)

// TestAcquireWork: the one-commit transactional mode
// (replay.WorkAcquirer): the lease is the Work's own transaction.
func TestAcquireWork(t *testing.T) {
	runOnEveryDriver(t, []driverCase{
		{"a held ID is busy at once for every call", acquireWorkHeldIsBusy},
		{"agrees with AcquireRecord's lease", acquireWorkAfterLease},
		{"lease running out rolls the work back", func(t *testing.T, d Driver) { acquireWorkLeaseEnds(t, d, time.Second) }},
		{"lease over before AcquireWork returns", func(t *testing.T, d Driver) { acquireWorkLeaseEnds(t, d, time.Nanosecond) }},
		{"handler's ROLLBACK: nothing kept, or the ID refused", acquireWorkEscapedRollback},
		{"refusals take nothing", acquireWorkRefusals},
		{"a refused Commit keeps nothing", acquireWorkCommitRefused},
		{"handler's temp trigger never deletes the store's rows", func(t *testing.T, d Driver) { workTempTrigger(t, d, true) }},
		{"handler's Rows left open never hang the store", acquireWorkRowsLeftOpen},
		{"handler's journal_mode never reaches a later Work", acquireWorkJournalChanged},
		{"a store of another table in the file joins the work", acquireWorkJoinedByAnotherTable},
	})
}

// acquireWorkHeldIsBusy: while a Work holds the ID (and the store's
// writer), every call of the store for that ID answers without waiting
// for the writer: each would otherwise fail with ErrUnavailable when
// Options.Timeout passes, the Work being still open. ReadRecord reads
// the uncommitted row busy, as AcquireRecord finds it, and once the Work
// commits, done with its record.
func acquireWorkHeldIsBusy(t *testing.T, d Driver) {
	ctx := context.Background()
	// A call that waited for the writer would fail when Timeout passes,
	// however long: the Work stays open until every call has answered.
	s, _ := workStore(t, d, sqlitestore.Options{Timeout: 10 * time.Second})
	w, tx, _ := acquire(t, s, "job", time.Minute, workFP)
	insertApp(t, tx, "job")
	t.Run("AcquireWork of the same request", func(t *testing.T) {
		r := wantWork(t, s, "job", workFP, replay.LeaseBusy)
		if !bytes.Equal(r.Fingerprint, workFP) || r.Wait <= 0 {
			t.Errorf("busy answer = %+v; want the holder's fingerprint and a positive Wait", r)
		}
	})
	t.Run("AcquireWork of another request", func(t *testing.T) {
		if r := wantWork(t, s, "job", workOther, replay.LeaseBusy); bytes.Equal(r.Fingerprint, workOther) || len(r.Fingerprint) == 0 {
			t.Errorf("busy answer's fingerprint = %q; want one that differs from the caller's", r.Fingerprint)
		}
	})
	t.Run("AcquireRecord", func(t *testing.T) {
		r, err := s.AcquireRecord(ctx, "job", time.Minute, workOther)
		if err != nil || r.State != replay.LeaseBusy || !bytes.Equal(r.Fingerprint, workFP) {
			t.Errorf("AcquireRecord = %+v, %v; want busy with the holder's fingerprint", r, err)
		}
	})
	t.Run("AcquireLease", func(t *testing.T) { wantLease(t, s, "job", replay.LeaseBusy) })
	t.Run("ReadRecord", func(t *testing.T) {
		if r, err := s.ReadRecord(ctx, "job"); err != nil || r.State != replay.LeaseBusy || !bytes.Equal(r.Fingerprint, workFP) {
			t.Errorf("ReadRecord = %v %q, %v; want busy with the holder's fingerprint", r.State, r.Fingerprint, err)
		}
	})
	t.Run("Claim", func(t *testing.T) {
		if first, err := s.Claim(ctx, "job", time.Now().Add(time.Hour)); first || err != nil {
			t.Errorf("Claim = %v, %v; want not first", first, err)
		}
	})
	t.Run("RenewLease", func(t *testing.T) {
		// Only the Work's transaction writes its lease: no token renews it.
		if err := s.RenewLease(ctx, "job", "any-token", time.Minute); !errors.Is(err, replay.ErrLeaseLost) {
			t.Errorf("RenewLease = %v; want ErrLeaseLost", err)
		}
	})
	must(t, w.Commit(ctx, time.Now().Add(time.Hour), workFP, []byte("r")))
	if r, err := s.ReadRecord(ctx, "job"); err != nil || r.State != replay.LeaseDone || string(r.Result) != "r" {
		t.Fatalf("ReadRecord after the Work's commit = %v %q, %v; want done with its result", r.State, r.Result, err)
	}
	wantWork(t, s, "job", workFP, replay.LeaseDone)
}

func acquireWorkAfterLease(t *testing.T, d Driver) {
	ctx := context.Background()
	s, _ := workStore(t, d, sqlitestore.Options{})
	r, err := s.AcquireRecord(ctx, "job", time.Minute, workFP)
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord = %+v, %v", r, err)
	}
	if got := wantWork(t, s, "job", workOther, replay.LeaseBusy); !bytes.Equal(got.Fingerprint, workFP) {
		t.Errorf("AcquireWork beside a live lease = %+v; want busy with the lease's fingerprint", got)
	}
	must(t, s.ConfirmRecord(ctx, "job", r.Token, time.Now().Add(time.Hour), workFP, []byte("r")))
	if got := wantWork(t, s, "job", workFP, replay.LeaseDone); string(got.Result) != "r" {
		t.Errorf("AcquireWork after ConfirmRecord = %+v; want done with the result", got)
	}
}

// acquireWorkLeaseEnds: a Work still open when its lease has passed is
// rolled back by the store, which frees its writer; Commit then reports
// ErrLeaseLost and nothing of the work is kept. A lease over before
// AcquireWork sets its timer is rolled back at once (under -race: with no
// unlocked state between the two).
func acquireWorkLeaseEnds(t *testing.T, d Driver, lease time.Duration) {
	ctx := context.Background()
	s, db := workStore(t, d, sqlitestore.Options{Timeout: 10 * time.Second})
	w, tx, _ := acquire(t, s, "job", lease, workFP)
	if lease >= time.Second { // a lease that outlasts one statement
		insertApp(t, tx, "job")
	}
	// Waits for the writer, which the timer frees.
	claimAll(t, s, []string{"other"}, time.Now().Add(time.Hour))
	if _, err := tx.ExecContext(ctx, `INSERT INTO app (id) VALUES ('late')`); !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("a statement after the lease ran out = %v; want sql.ErrTxDone", err)
	}
	if err := w.Commit(ctx, time.Now().Add(time.Hour), workFP, []byte("r")); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("Commit after the lease ran out = %v; want ErrLeaseLost", err)
	}
	for _, id := range []string{"job", "late"} {
		if n := appRows(t, db, id); n != 0 {
			t.Fatalf("app row %q kept after ErrLeaseLost (%d)", id, n)
		}
	}
	w2, _, _ := acquire(t, s, "job", time.Minute, workFP)
	if err := w2.Commit(ctx, time.Now().Add(time.Hour), workFP, []byte("r")); err != nil {
		t.Fatalf("the retry's Commit = %v", err)
	}
}

// acquireWorkEscapedRollback: a handler's ROLLBACK ends the Work's
// transaction. With no row changed on the connection since AcquireWork,
// nothing was kept: Commit is ErrRolledBack, Rollback succeeds, and the
// ID is free. Otherwise a statement after the ROLLBACK may have committed
// on its own (here it did): the outcome is unknown, Commit and Rollback
// say so (ErrUnavailable, never ErrRolledBack), and the ID is never run
// again until an operator releases it.
func acquireWorkEscapedRollback(t *testing.T, d Driver) {
	for _, tc := range []struct {
		name     string
		expired  bool   // the ID held an expired lease's row
		before   bool   // an app row written before the handler's statement
		stmt     string // the handler's escape
		rollback bool   // the Work ends with Rollback, not Commit
		escaped  bool
	}{
		{"no write", false, false, `ROLLBACK; BEGIN`, false, false},
		{"no write, over an expired lease's row", true, false, `ROLLBACK; BEGIN`, false, false},
		{"no write, then Rollback", false, false, `ROLLBACK`, true, false},
		{"no write, BEGIN, then Rollback", false, false, `ROLLBACK; BEGIN`, true, false},
		{"writes around an autocommit INSERT", false, true, `ROLLBACK; INSERT INTO app (id) VALUES ('after')`, false, true},
		{"writes around BEGIN and an INSERT", false, true, `ROLLBACK; BEGIN; INSERT INTO app (id) VALUES ('after')`, false, true},
		// The escape's record commits at the Work's synchronous level,
		// not the handler's.
		{"writes around synchronous OFF and an INSERT", false, true, `ROLLBACK; PRAGMA synchronous = OFF; INSERT INTO app (id) VALUES ('after')`, false, true},
		{"an autocommit INSERT, then Rollback", false, false, `ROLLBACK; INSERT INTO app (id) VALUES ('after')`, true, true},
		{"BEGIN and an INSERT, then Rollback", false, false, `ROLLBACK; BEGIN; INSERT INTO app (id) VALUES ('after')`, true, true},
		// A conflict resolved by ROLLBACK ends the transaction too; the
		// handler then records the failure, in autocommit.
		{"INSERT OR ROLLBACK, then Rollback", false, false, `INSERT INTO app (id) VALUES ('dup'); INSERT OR ROLLBACK INTO app (id) VALUES ('dup')`, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, db := workStore(t, d, sqlitestore.Options{})
			if tc.expired {
				mustLease(t, s, "job", time.Millisecond)
				time.Sleep(5 * time.Millisecond)
			}
			w, tx, _ := acquire(t, s, "job", time.Minute, workFP)
			if tc.before {
				insertApp(t, tx, "before")
			}
			if _, err := tx.ExecContext(ctx, tc.stmt); err != nil {
				if !strings.Contains(tc.stmt, "OR ROLLBACK") {
					t.Fatalf("%s: %v", tc.stmt, err)
				}
				insertApp(t, tx, "failure")
				if n := appRows(t, db, "failure"); n != 1 {
					t.Fatalf("the handler's write after the conflict's ROLLBACK was not committed on its own (%d rows)", n)
				}
			}
			endEscapedWork(t, w, db, tc.rollback, workFP, []byte("r"), tc.stmt, tc.escaped)
			if !tc.escaped {
				if n := countRows(t, db, `SELECT count(*) FROM app`); n != 0 {
					t.Fatalf("app rows = %d; want 0", n)
				}
				acquire(t, s, "job", time.Minute, workFP) // the ID is free
				return
			}
			// The writer's connection runs at its level again: the next
			// write is not refused for a lowered synchronous.
			claimAll(t, s, []string{"next"}, time.Now().Add(time.Hour))
			wantRefused(t, s, "job")
			must(t, s.Release(ctx, "job"))
			acquire(t, s, "job", time.Minute, workFP) // an operator's Release frees it
		})
	}
}

// wantRefused fails t if any call of s acquires or first-claims id.
func wantRefused(t *testing.T, s *sqlitestore.Store, id string) {
	t.Helper()
	ctx := context.Background()
	if r, w, err := s.AcquireWork(ctx, id, time.Minute, workFP); w != nil || err == nil && r.State == replay.LeaseAcquired {
		t.Fatalf("AcquireWork of an escaped work's ID = %+v, %v; want refused", r, err)
	}
	if r, err := s.AcquireRecord(ctx, id, time.Minute, workFP); err == nil && r.State == replay.LeaseAcquired {
		t.Fatalf("AcquireRecord of an escaped work's ID = %+v; want refused", r)
	}
	if first, err := s.Claim(ctx, id, time.Now().Add(time.Hour)); first {
		t.Fatalf("Claim of an escaped work's ID = first (%v)", err)
	}
}

func acquireWorkRefusals(t *testing.T, d Driver) {
	ctx := context.Background()
	s, _ := workStore(t, d, sqlitestore.Options{Horizon: time.Hour})
	w, _, wctx := acquire(t, s, "held", time.Minute, workFP)
	db := d.Open(t, t.TempDir()+"/other.db")
	otx, err := db.BeginTx(ctx, nil)
	must(t, err)
	defer otx.Rollback()
	closed, _ := workStore(t, d, sqlitestore.Options{})
	closed.Close()
	for _, tc := range []struct {
		name  string
		s     *sqlitestore.Store
		ctx   context.Context
		id    string
		lease time.Duration
		fp    []byte
		want  error
	}{
		{"empty id", s, ctx, "", time.Minute, workFP, sqlitestore.ErrInvalidClaim},
		{"oversize id", s, ctx, strings.Repeat("x", sqlitestore.MaxIDBytes+1), time.Minute, workFP, sqlitestore.ErrInvalidClaim},
		{"zero lease", s, ctx, "a", 0, workFP, replay.ErrExpired},
		{"lease over the horizon", s, ctx, "a", 2 * time.Hour, workFP, sqlitestore.ErrInvalidClaim},
		{"oversize fingerprint", s, ctx, "a", time.Minute, make([]byte, replay.MaxFingerprintBytes+1), replay.ErrTooLarge},
		{"in a Work's context", s, wctx, "a", time.Minute, workFP, sqlitestore.ErrConfig},
		{"in WithTx's context", s, sqlitestore.WithTx(ctx, otx), "a", time.Minute, workFP, sqlitestore.ErrConfig},
		{"zero Store", &sqlitestore.Store{}, ctx, "a", time.Minute, workFP, sqlitestore.ErrConfig},
		{"closed Store", closed, ctx, "a", time.Minute, workFP, sqlitestore.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, got, err := tc.s.AcquireWork(tc.ctx, tc.id, tc.lease, tc.fp)
			if got != nil || r.State != 0 || !errors.Is(err, tc.want) {
				t.Fatalf("AcquireWork = %+v, %v, %v; want no Work and an error matching %v", r, got, err, tc.want)
			}
		})
	}
	must(t, w.Rollback(ctx))
	// Nothing was taken by the refused calls.
	for _, id := range []string{"a", "held"} {
		w, _, _ := acquire(t, s, id, time.Minute, workFP)
		w.Rollback(ctx)
	}
}

// walCommits counts the commits in the WAL file of the database at path:
// frames whose header carries the database's size (a commit's last
// frame) and the WAL header's salts (frames of the current generation).
// The WAL must not have been reset (checkpointed to its start) between
// two counts compared: salts reports the generation.
func walCommits(t *testing.T, path string) (commits int, salts uint64) {
	t.Helper()
	b, err := os.ReadFile(path + "-wal")
	if err != nil || len(b) < 32 {
		t.Fatalf("reading the WAL: %d bytes, %v", len(b), err)
	}
	page := int(binary.BigEndian.Uint32(b[8:]))
	salts = binary.BigEndian.Uint64(b[16:])
	for off := 32; off+24+page <= len(b); off += 24 + page {
		h := b[off : off+24]
		if binary.BigEndian.Uint64(h[8:]) != salts {
			break
		}
		if binary.BigEndian.Uint32(h[4:]) != 0 {
			commits++
		}
	}
	return commits, salts
}

// transactionalRequestCommitsOnce: a first request through the
// idempotency middleware or a first delivery through the webhook
// verifier, in the transactional mode, with a handler that
// redeems nothing and inserts one row through TxFrom, costs one write
// transaction (one commit in the WAL, one fsync): AcquireWork's, which
// carries the lease, the handler's row and the record. A retry of it is
// answered from the record and commits nothing.
func transactionalRequestCommitsOnce(t *testing.T) {
	// A retry is answered from the record (idempotency: the first
	// response again; webhook: 200, a duplicate), with no commit.
	retryStatus := map[string]int{"idempotency": http.StatusCreated, "webhook": http.StatusOK}
	for _, d := range Drivers() {
		for _, f := range fronts {
			t.Run(d.Name+"/"+f.name, func(t *testing.T) {
				db, path := openMigrated(t, d)
				mustExec(t, context.Background(), db, chargesSchema)
				s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				send := f.wrap(t, s, &chargeApp{})
				send("ref_warm") // the writer's connection opened, its statements prepared
				for _, tc := range []struct {
					name    string
					ref     string
					status  int
					commits int
				}{
					{"first request", "ref_once", http.StatusCreated, 1},
					{"retry", "ref_once", retryStatus[f.name], 0},
					{"another first request", "ref_twice", http.StatusCreated, 1},
				} {
					t.Run(tc.name, func(t *testing.T) {
						before, salts := walCommits(t, path)
						a := send(tc.ref)
						after, salts2 := walCommits(t, path)
						if a.status != tc.status {
							t.Fatalf("status %d %q; want %d", a.status, a.body, tc.status)
						}
						if salts2 != salts {
							t.Skip("the WAL was reset by a checkpoint between the counts")
						}
						if after-before != tc.commits {
							t.Errorf("%d commits in the WAL for the request; want %d", after-before, tc.commits)
						}
					})
				}
			})
		}
	}
}

// acquireWorkCommitRefused: a Commit the store refuses for a reason it
// knows rolls everything back and reports ErrRolledBack; the ID is free
// for the retry.
func acquireWorkCommitRefused(t *testing.T, d Driver) {
	for _, tc := range []struct {
		name    string
		handler string // a statement of the handler, after its insert
		until   time.Duration
		result  []byte
	}{
		{"oversize result", "", time.Hour, make([]byte, replay.MaxResultBytes+1)},
		{"until already passed", "", -time.Second, []byte("r")},
		{"handler deleted the store's row", `DELETE FROM ctoken_replay WHERE state = 'w'`, time.Hour, []byte("r")},
		{"handler changed the store's row", `UPDATE ctoken_replay SET token = 'x' WHERE state = 'w'`, time.Hour, []byte("r")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, db := workStore(t, d, sqlitestore.Options{})
			w, tx, _ := acquire(t, s, "job", time.Minute, workFP)
			insertApp(t, tx, "job")
			if tc.handler != "" {
				mustExec(t, ctx, tx, tc.handler)
			}
			if err := w.Commit(ctx, time.Now().Add(tc.until), workFP, tc.result); !errors.Is(err, replay.ErrRolledBack) {
				t.Fatalf("Commit = %v; want ErrRolledBack", err)
			}
			if n := appRows(t, db, "job"); n != 0 {
				t.Fatalf("app rows = %d; want 0", n)
			}
			acquire(t, s, "job", time.Minute, workFP)
		})
	}
}

// forgetTriggers are temporary triggers on the store's table that delete
// each row the store inserts or updates (the marker aside). SQLite lets a
// temporary trigger name a table of main, and it fires for every
// statement on that table on the connection that made it: made by a
// handler on the store's writer connection, it would fire for the
// store's own statements, during the Work and after it.
const forgetTriggers = `CREATE TEMP TRIGGER forget_new AFTER INSERT ON main.ctoken_replay BEGIN DELETE FROM main.ctoken_replay WHERE key = NEW.key; END; ` +
	`CREATE TEMP TRIGGER forget_done AFTER UPDATE ON main.ctoken_replay WHEN NEW.state <> 'm' BEGIN DELETE FROM main.ctoken_replay WHERE key = NEW.key; END`

// workTempTrigger: triggers a handler makes on the store's table, in its
// Work or after escaping it, never make Commit report success without
// the record, never free the ID of an escape, and never delete a later
// claim (accepting its token again): a temporary one never outlives the
// Work on the store's writer connection, and one left in main refuses
// the store's writes. acquired picks AcquireWork's Work, else
// BeginWork's.
func workTempTrigger(t *testing.T, d Driver, acquired bool) {
	for _, tc := range []struct {
		name, stmt string
		escaped    bool // the ID is refused after
		refusing   bool // the store refuses to write after
	}{
		{"made in the work", forgetTriggers, false, false},
		{"made after the handler's COMMIT", `COMMIT; ` + forgetTriggers + `; BEGIN`, true, false},
		{"made after the handler's ROLLBACK", `ROLLBACK; ` + forgetTriggers + `; INSERT INTO app (id) VALUES ('after')`, true, false},
		{"made in main after the handler's COMMIT", `COMMIT; ` + strings.NewReplacer("TEMP ", "", "main.", "").Replace(forgetTriggers) + `; BEGIN`, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, db := workStore(t, d, sqlitestore.Options{})
			other := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
			w, tx := workOf(t, s, "job", acquired, workFP)
			insertApp(t, tx, "job")
			mustExec(t, ctx, tx, tc.stmt)
			err := w.Commit(ctx, time.Now().Add(time.Hour), workFP, []byte("r"))
			switch {
			case !tc.escaped && !errors.Is(err, replay.ErrRolledBack):
				t.Fatalf("Commit with the handler's triggers = %v; want ErrRolledBack", err)
			case tc.escaped && (err == nil || errors.Is(err, replay.ErrRolledBack)):
				t.Fatalf("Commit after %q = %v; want an error that is not ErrRolledBack", tc.name, err)
			}
			if !tc.escaped {
				if n := appRows(t, db, "job"); n != 0 {
					t.Fatalf("app rows after ErrRolledBack = %d; want 0", n)
				}
			} else if acquired {
				wantRefused(t, s, "job")
				wantRefused(t, other, "job")
			} else if l, err := other.AcquireLease(ctx, "job", time.Minute); err == nil && l.State == replay.LeaseAcquired {
				t.Fatal("the ID of a work whose transaction escaped was acquired again")
			}
			// Claims after the Work are kept (the second is not first), or
			// refused while a trigger is in main.
			for i, st := range []*sqlitestore.Store{s, s, other} {
				first, err := st.Claim(ctx, "token", time.Now().Add(time.Hour))
				if tc.refusing {
					if first || !errors.Is(err, sqlitestore.ErrUnavailable) || !strings.Contains(err.Error(), "trigger") {
						t.Fatalf("Claim %d with a trigger on the store's table = %v, %v; want ErrUnavailable naming the trigger", i+1, first, err)
					}
				} else if err != nil || first != (i == 0) {
					t.Fatalf("Claim %d of a token after the Work = %v, %v; want first=%v", i+1, first, err, i == 0)
				}
			}
		})
	}
}

// acquireWorkRowsLeftOpen: a handler's Rows left open on the store's
// connection (closing a connection waits for its Rows) never hang the
// Work's end or the next write when the store closes that connection:
// after a temporary table, after an escape, after a lowered synchronous.
func acquireWorkRowsLeftOpen(t *testing.T, d Driver) {
	for _, tc := range []struct {
		name, stmt string
		claimErr   bool // the next write is refused
	}{
		{"temporary table made in the work", `CREATE TEMP TABLE scratch (x)`, false},
		{"ROLLBACK then a write", `ROLLBACK; INSERT INTO app (id) VALUES ('after')`, false},
		{"ROLLBACK then synchronous OFF", `ROLLBACK; PRAGMA synchronous = OFF; BEGIN`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			// The store waits up to a second for a connection to close.
			s, _ := workStore(t, d, sqlitestore.Options{Timeout: 3 * time.Second})
			w, tx, _ := acquire(t, s, "job", time.Minute, workFP)
			rows, err := tx.QueryContext(ctx, `SELECT 1 UNION ALL SELECT 2`)
			must(t, err)
			defer rows.Close()
			rows.Next()
			mustExec(t, ctx, tx, tc.stmt)
			done := make(chan error, 1)
			go func() { done <- w.Commit(ctx, time.Now().Add(time.Hour), workFP, []byte("r")) }()
			within(t, done, time.Minute, "Commit with the handler's Rows open hangs")
			go func() {
				first, err := s.Claim(ctx, "token", time.Now().Add(time.Hour))
				if err == nil && !first {
					err = errors.New("not first")
				}
				done <- err
			}()
			if err := within(t, done, time.Minute, "Claim after a Work whose handler left its Rows open hangs"); tc.claimErr != (err != nil) {
				t.Fatalf("Claim after the Work = %v; want an error: %v", err, tc.claimErr)
			}
		})
	}
}

// acquireWorkJournalChanged: a handler that ends its Work's transaction
// and turns the connection's journal off (ROLLBACK; PRAGMA journal_mode =
// OFF) never leaves the store's connection that way for a later Work: the
// next write is refused naming journal_mode and the connection replaced,
// and a later, well-behaved Work that is rolled back keeps none of its
// writes. In rollback-journal mode (the setting is the connection's) and
// in WAL mode (the file's: SQLite may refuse to leave it while other
// connections are open).
func acquireWorkJournalChanged(t *testing.T, d Driver) {
	for _, journal := range []string{"DELETE", "WAL"} {
		t.Run(journal, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "replay.db")
			pragmas := With("journal_mode", journal)
			if journal == "DELETE" {
				pragmas = []Pragma{{"busy_timeout", "5000"}, {"journal_mode", "DELETE"}, {"synchronous", "EXTRA"}} // busy_timeout first: the switch waits for other connections
			}
			db := d.OpenWith(t, path, pragmas)
			must(t, sqlitestore.Migrate(ctx, db, ""))
			mustExec(t, ctx, db, `CREATE TABLE app (id TEXT PRIMARY KEY)`)
			s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
			w, tx, _ := acquire(t, s, "bad", time.Minute, workFP)
			if _, err := tx.ExecContext(ctx, `ROLLBACK; PRAGMA journal_mode = OFF; BEGIN`); err != nil {
				t.Logf("the handler's PRAGMA journal_mode = OFF: %v", err)
			}
			w.Rollback(ctx)
			var refused error
			for attempt := 0; ; attempt++ {
				r, w, err := s.AcquireWork(ctx, fmt.Sprint("good", attempt), time.Minute, workFP)
				if err != nil {
					if attempt > 0 || !errors.Is(err, sqlitestore.ErrConfig) || !strings.Contains(err.Error(), "journal_mode") {
						t.Fatalf("AcquireWork %d after the handler's journal_mode = %v; want at most one refusal naming journal_mode", attempt, err)
					}
					refused = err
					continue
				}
				if r.State != replay.LeaseAcquired {
					t.Fatalf("AcquireWork = %+v", r)
				}
				tx, err := sqlitestore.TxFrom(w.Context(ctx))
				must(t, err)
				for i := range 50 {
					insertApp(t, tx, fmt.Sprint("good-", i))
				}
				must(t, w.Rollback(ctx))
				break
			}
			if kept := countRows(t, db, `SELECT count(*) FROM app`); kept != 0 {
				t.Fatalf("a rolled-back Work after the handler's journal_mode = OFF kept %d of its 50 rows", kept)
			}
			t.Logf("the next write after the handler's journal_mode = OFF: %v", refused)
		})
	}
}

// acquireWorkJoinedByAnotherTable: inside a Work of a store, a claim and
// a lease on a store of another table in the same file (a one-time token
// redeemed by the handler) are written in the Work's transaction, at
// once, rather than waiting for SQLite's write lock the Work holds: they
// hold when the Work commits and are gone when it rolls back. A store on
// another file is not joined.
func acquireWorkJoinedByAnotherTable(t *testing.T, d Driver) {
	ctx := context.Background()
	a, db := workStore(t, d, sqlitestore.Options{})
	must(t, sqlitestore.Migrate(ctx, db, "tokens"))
	b := mustStore(t, db, sqlitestore.Options{Table: "tokens", SweepInterval: -1})
	otherDB, _ := openMigrated(t, d)
	other := mustStore(t, otherDB, sqlitestore.Options{SweepInterval: -1})
	until := time.Now().Add(time.Hour)
	for _, commit := range []bool{false, true} {
		id := fmt.Sprint("token-", commit)
		w, _, wctx := acquire(t, a, fmt.Sprint("job-", commit), time.Minute, workFP)
		if first, err := b.Claim(wctx, id, until); !first || err != nil {
			t.Fatalf("Claim on the other table inside the Work = %v, %v; want first, at once", first, err)
		}
		if first, err := b.Claim(wctx, id, until); first || err != nil {
			t.Fatalf("a second Claim inside the Work = %v, %v; want not first", first, err)
		}
		if l, err := b.AcquireLease(wctx, id+"-lease", time.Minute); err != nil || l.State != replay.LeaseAcquired {
			t.Fatalf("AcquireLease on the other table inside the Work = %+v, %v", l, err)
		}
		if first, err := other.Claim(wctx, id, until); !first || err != nil {
			t.Fatalf("Claim on a store of another file inside the Work = %v, %v; want first", first, err)
		}
		endWork(t, w, commit, workFP, []byte("r"))
		if first, err := b.Claim(ctx, id, until); first == commit || err != nil {
			t.Fatalf("Claim after the Work (committed: %v) = %v, %v; want first only after a rollback", commit, first, err)
		}
	}
}
