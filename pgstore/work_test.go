package pgstore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The work of these tests is a charge: one row per run of a handler in a
// table of its own beside the store's, written through the Work's
// transaction.

// newTable creates a table named prefix and random hex, with columns, on
// pool, dropped when t ends, and returns its name.
func newTable(t testing.TB, pool *pgxpool.Pool, prefix, columns string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	if _, err := pool.Exec(bg(), `CREATE TABLE `+name+` (`+columns+`)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+name) })
	return name
}

// chargeTable creates a table of charges on pool, dropped when t ends.
func chargeTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	return newTable(t, pool, "charges_", "key text NOT NULL, holder text NOT NULL")
}

// charge inserts a charge of key by holder in the transaction ctx carries.
func charge(ctx context.Context, table, key, holder string) error {
	tx, err := TxFrom(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+table+` (key, holder) VALUES ($1, $2)`, key, holder)
	return err
}

// chargesOf returns the holders of key's charges, as committed.
func chargesOf(t testing.TB, pool *pgxpool.Pool, table, key string) []string {
	t.Helper()
	rows, err := pool.Query(bg(), `SELECT holder FROM `+table+` WHERE key = $1 ORDER BY holder`, key)
	if err != nil {
		t.Fatal(err)
	}
	holders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return holders
}

// acquire takes id's lease with a record and begins its work.
func acquire(t testing.TB, s *Store, id string, lease time.Duration) (replay.Work, string) {
	t.Helper()
	r, err := s.AcquireRecord(bg(), id, lease, []byte("fp-"+id))
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord(%q) = %v, %v; want acquired", id, r.State, err)
	}
	w, err := s.BeginWork(bg(), id, r.Token)
	if err != nil {
		t.Fatalf("BeginWork(%q) = %v", id, err)
	}
	t.Cleanup(func() { w.Rollback(bg()) })
	return w, r.Token
}

// TestWork pins the transactional work (a replay.Work) a Store begins:
// Commit keeps the work and the record together or nothing, at most once
// among racing holders, the first end wins, and a killed process or server
// keeps one charge per key.
func TestWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"commit keeps the work and the record together", workCommitKeepsTheWorkAndTheRecordTogether},
		{"commit after the lease ended rolls back", workCommitAfterTheLeaseEndedRollsBack},
		{"racing holders commit at most once", workRacingHoldersCommitAtMostOnce},
		{"refusals", workRefusals},
		{"commit refused only when nothing committed", commitRefusedOnlyWhenNothingWasCommitted},
		{"ends with a done context", workEndsWithADoneContext},
		{"first end wins", workFirstEndWins},
		{"rollback leaves the lease", workRollbackLeavesTheLease},
		{"process killed before commit keeps nothing", workProcessKilledBeforeCommitKeepsNothing},
		{"one charge per key through a server kill", workKeepsOneChargePerKeyThroughAPostgresKill},
		{"temp table of the store's name takes nothing", workTempTableOfTheStoresNameTakesNothing},
		{"session state does not outlive the work", workSessionStateDoesNotOutliveTheWork},
		{"commit runs with the accepted level", workCommitRunsWithTheAcceptedSynchronousCommit},
	} {
		t.Run(tc.name, tc.test)
	}
}

// workCommitKeepsTheWorkAndTheRecordTogether: Commit writes the
// work's row and the done row (with its record, or none when both are
// nil) in one commit.
func workCommitKeepsTheWorkAndTheRecordTogether(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	result := benchResult(4 << 10)
	tests := []struct {
		name        string
		fingerprint []byte
		result      []byte
		wantFP      []byte
	}{
		{"with a record", []byte("fp-record"), result, []byte("fp-record")},
		{"without a record", nil, nil, nil},
		{"a record without a fingerprint", nil, []byte("r"), []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.name
			w, _ := acquire(t, s, id, time.Minute)
			ctx := w.Context(bg())
			if err := charge(ctx, table, id, "first"); err != nil {
				t.Fatal(err)
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 0 {
				t.Fatalf("charges before Commit = %q, want none visible", got)
			}
			if err := w.Commit(bg(), time.Now().Add(time.Hour), tt.fingerprint, tt.result); err != nil {
				t.Fatal(err)
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 1 {
				t.Fatalf("charges after Commit = %q, want one", got)
			}
			row, ok := rowOf(t, s, id)
			if !ok || row.state != "d" || !bytes.Equal(row.fingerprint, tt.wantFP) || !bytes.Equal(row.result, tt.result) {
				t.Fatalf("row = %+v, %v; want done with the record", row, ok)
			}
			if (tt.result == nil) != (row.result == nil) || (tt.wantFP == nil) != (row.fingerprint == nil) {
				t.Fatalf("row = %+v: NULL columns differ from the record given", row)
			}
		})
	}
}

// workCommitAfterTheLeaseEndedRollsBack: a lease that ran out
// (whether or not another holder took the ID over) makes Commit roll the
// work back with ErrLeaseLost; a second holder's work commits.
func workCommitAfterTheLeaseEndedRollsBack(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)

	t.Run("taken over by a second holder", func(t *testing.T) {
		w1, _ := acquire(t, s, "k1", time.Minute)
		if err := charge(w1.Context(bg()), table, "k1", "first"); err != nil {
			t.Fatal(err)
		}
		expire(t, s, "k1")
		w2, _ := acquire(t, s, "k1", time.Minute)
		if err := charge(w2.Context(bg()), table, "k1", "second"); err != nil {
			t.Fatal(err)
		}
		if err := w2.Commit(bg(), until, []byte("fp"), []byte("second")); err != nil {
			t.Fatal(err)
		}
		if err := w1.Commit(bg(), until, []byte("fp"), []byte("first")); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("first holder's Commit = %v, want ErrLeaseLost", err)
		}
		if got := chargesOf(t, s.pool, table, "k1"); len(got) != 1 || got[0] != "second" {
			t.Fatalf("charges = %q, want only the second holder's", got)
		}
		wantRecord(t, s, "k1", replay.LeaseDone, []byte("fp"), []byte("second"))
	})

	t.Run("a handler that outlives its lease", func(t *testing.T) {
		w, _ := acquire(t, s, "k2", 200*time.Millisecond)
		ctx := w.Context(bg())
		if err := charge(ctx, table, "k2", "slow"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond) // the handler is slower than its lease
		if err := w.Commit(bg(), until, []byte("fp"), []byte("slow")); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("Commit after the lease ran out = %v, want ErrLeaseLost", err)
		}
		if got := chargesOf(t, s.pool, table, "k2"); len(got) != 0 {
			t.Fatalf("charges = %q, want none", got)
		}
		if row, _ := rowOf(t, s, "k2"); row.state != "l" {
			t.Fatalf("row state = %q, want the expired lease left as it was", row.state)
		}
		wantRecord(t, s, "k2", replay.LeaseAcquired, nil, nil) // free again
	})
}

// workRacingHoldersCommitAtMostOnce: a first holder commits as its
// lease runs out while a second holder keeps trying to take the ID over
// and commit its own work: in every round at most one Commit returns
// nil, and the charges committed are exactly those of the Commits that
// returned nil, with the record of the same holder.
func workRacingHoldersCommitAtMostOnce(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)
	const rounds = 20
	const lease = 60 * time.Millisecond
	var firstWon, secondWon int
	for i := range rounds {
		id := fmt.Sprintf("race-%d", i)
		w1, _ := acquire(t, s, id, lease)
		if err := charge(w1.Context(bg()), table, id, "first"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var err1, err2 error
		second := false
		wg.Add(2)
		go func() {
			defer wg.Done()
			time.Sleep(lease - 5*time.Millisecond + time.Duration(i%10)*time.Millisecond)
			err1 = w1.Commit(bg(), until, []byte("fp"), []byte("first"))
		}()
		go func() {
			defer wg.Done()
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
				r, err := s.AcquireRecord(bg(), id, time.Minute, []byte("fp"))
				if err != nil {
					err2 = err
					return
				}
				if r.State == replay.LeaseDone {
					return
				}
				if r.State == replay.LeaseBusy {
					time.Sleep(time.Millisecond)
					continue
				}
				w2, err := s.BeginWork(bg(), id, r.Token)
				if err != nil {
					err2 = err
					return
				}
				if err := charge(w2.Context(bg()), table, id, "second"); err != nil {
					err2 = err
					w2.Rollback(bg())
					return
				}
				second = true
				err2 = w2.Commit(bg(), until, []byte("fp"), []byte("second"))
				return
			}
		}()
		wg.Wait()
		if err1 != nil && !errors.Is(err1, replay.ErrLeaseLost) {
			t.Fatalf("round %d: first Commit = %v", i, err1)
		}
		if err2 != nil {
			t.Fatalf("round %d: second holder: %v", i, err2)
		}
		var want []string
		if err1 == nil {
			want = append(want, "first")
			firstWon++
		}
		if second {
			want = append(want, "second")
			secondWon++
		}
		got := chargesOf(t, s.pool, table, id)
		if len(got) != 1 || len(want) != 1 || got[0] != want[0] {
			t.Fatalf("round %d: charges %q, Commits that returned nil %q; want one, the same", i, got, want)
		}
		wantRecord(t, s, id, replay.LeaseDone, []byte("fp"), []byte(want[0]))
	}
	t.Logf("%d rounds: the first holder committed %d, the second %d", rounds, firstWon, secondWon)
}

// TestWorkTx pins the handler's transaction in a work ([TxFrom] of its
// context): its own commit and rollback, statements after the end, while
// rows are open or while Commit runs, and statements that escape the
// transaction are refused; an escape never ends as a success.
func TestWorkTx(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"refuses the handler's commit and rollback", workTxRefusesTheHandlersCommitAndRollback},
		{"refuses statements after the end", workTxRefusesStatementsAfterTheEnd},
		{"refuses a statement while rows are open", workTxRefusesAStatementWhileRowsAreOpen},
		{"used while Commit runs", workTxUsedWhileCommitRuns},
		{"large objects", workTxLargeObjects},
		{"refuses statements that escape", workTxRefusesStatementsThatEscapeTheTransaction},
		{"allows statements that end with it", workTxAllowsStatementsThatEndWithIt},
		{"commit after an escape is never a success", workCommitAfterAnEscapeIsNeverASuccess},
		{"escape with the lease lost keeps one charge", workEscapeWithTheLeaseLostKeepsOneCharge},
		{"rollback after an escape keeps the key", workRollbackAfterAnEscapeKeepsTheKey},
	} {
		t.Run(tc.name, tc.test)
	}
}

// workTxRefusesTheHandlersCommitAndRollback: the handler's transaction
// refuses Commit and Rollback (the Work ends it), allows savepoints, and
// the work still commits afterwards.
func workTxRefusesTheHandlersCommitAndRollback(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	w, _ := acquire(t, s, "h", time.Minute)
	ctx := w.Context(bg())
	tx, err := TxFrom(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, end := range map[string]func(context.Context) error{"Commit": tx.Commit, "Rollback": tx.Rollback} {
		if err := end(ctx); !errors.Is(err, errTxOwned) {
			t.Fatalf("handler's %s = %v, want a refusal", name, err)
		}
	}
	if tx.Conn() != nil {
		t.Fatal("Conn() is not nil: statements on it would escape the lock")
	}
	// A savepoint rolled back discards its charge; one committed keeps it;
	// pgx.BeginFunc runs on savepoints too.
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Exec(ctx, `INSERT INTO `+table+` (key, holder) VALUES ('h', 'discarded')`); err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("statement on a rolled-back savepoint = %v, want ErrTxClosed", err)
	}
	if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		_, err := sp.Exec(ctx, `INSERT INTO `+table+` (key, holder) VALUES ('h', 'kept')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := chargesOf(t, s.pool, table, "h"); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("charges = %q, want only the savepoint committed", got)
	}
}

// workTxRefusesStatementsAfterTheEnd: once the Work has ended (by
// Commit or Rollback), every statement of its transaction, of a savepoint
// in it and of its large-object API fails with pgx.ErrTxClosed, and Rows
// left open are closed.
func workTxRefusesStatementsAfterTheEnd(t *testing.T) {
	s := newTestStore(t)
	ops := []struct {
		name string
		run  func(ctx context.Context, tx, sp pgx.Tx) error
	}{
		{"Exec", func(ctx context.Context, tx, _ pgx.Tx) error { _, err := tx.Exec(ctx, `SELECT 1`); return err }},
		{"Query", func(ctx context.Context, tx, _ pgx.Tx) error { _, err := tx.Query(ctx, `SELECT 1`); return err }},
		{"QueryRow", func(ctx context.Context, tx, _ pgx.Tx) error { var n int; return tx.QueryRow(ctx, `SELECT 1`).Scan(&n) }},
		{"SendBatch", func(ctx context.Context, tx, _ pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(`SELECT 1`)
			_, err := tx.SendBatch(ctx, b).Exec()
			return err
		}},
		{"CopyFrom", func(ctx context.Context, tx, _ pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"nowhere"}, []string{"a"}, pgx.CopyFromRows(nil))
			return err
		}},
		{"Prepare", func(ctx context.Context, tx, _ pgx.Tx) error { _, err := tx.Prepare(ctx, "p", `SELECT 1`); return err }},
		{"Begin", func(ctx context.Context, tx, _ pgx.Tx) error { _, err := tx.Begin(ctx); return err }},
		{"LargeObjects", func(ctx context.Context, tx, _ pgx.Tx) error {
			lo := tx.LargeObjects()
			_, err := lo.Create(ctx, 0)
			return err
		}},
		{"savepoint Exec", func(ctx context.Context, _, sp pgx.Tx) error { _, err := sp.Exec(ctx, `SELECT 1`); return err }},
		{"savepoint Commit", func(ctx context.Context, _, sp pgx.Tx) error { return sp.Commit(ctx) }},
	}
	ends := map[string]func(w replay.Work) error{
		"Commit":   func(w replay.Work) error { return w.Commit(bg(), time.Now().Add(time.Hour), nil, nil) },
		"Rollback": func(w replay.Work) error { return w.Rollback(bg()) },
	}
	for endName, end := range ends {
		t.Run("after "+endName, func(t *testing.T) {
			w, _ := acquire(t, s, "end-"+endName, time.Minute)
			ctx := w.Context(bg())
			tx, _ := TxFrom(ctx)
			sp, err := tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := sp.Query(ctx, `SELECT generate_series(1, 10000)`)
			if err != nil || !rows.Next() {
				t.Fatal(err)
			}
			if err := end(w); err != nil {
				t.Fatal(err)
			}
			if rows.Next() || !errors.Is(rows.Err(), pgx.ErrTxClosed) {
				t.Fatalf("open Rows after the end: Err = %v, want closed with ErrTxClosed", rows.Err())
			}
			for _, op := range ops {
				if err := op.run(ctx, tx, sp); !errors.Is(err, pgx.ErrTxClosed) {
					t.Errorf("%s after %s = %v, want ErrTxClosed", op.name, endName, err)
				}
			}
		})
	}
}

// workTxRefusesAStatementWhileRowsAreOpen: as pgx on a busy
// connection, the transaction refuses a statement while a Rows or
// BatchResults of it is open, and serves it once they are closed.
func workTxRefusesAStatementWhileRowsAreOpen(t *testing.T) {
	s := newTestStore(t)
	w, _ := acquire(t, s, "busy", time.Minute)
	ctx := w.Context(bg())
	tx, _ := TxFrom(ctx)
	rows, err := tx.Query(ctx, `SELECT generate_series(1, 3)`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, errCursorOpen) {
		t.Fatalf("Exec with Rows open = %v, want refused", err)
	}
	n, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(n) != 3 {
		t.Fatal(n, err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT 1`)
	b.Queue(`SELECT 2`)
	br := tx.SendBatch(ctx, b)
	if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, errCursorOpen) {
		t.Fatalf("Exec with a batch open = %v, want refused", err)
	}
	var one, two int
	if err := br.QueryRow().Scan(&one); err != nil || one != 1 {
		t.Fatal(one, err)
	}
	if err := br.QueryRow().Scan(&two); err != nil || two != 2 {
		t.Fatal(two, err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("Exec after closing = %v", err)
	}
	own := &pgx.Batch{}
	own.BeginTx(pgx.TxOptions{})
	if _, err := tx.SendBatch(ctx, own).Exec(); err == nil || !strings.Contains(err.Error(), "BeginTx") {
		t.Fatalf("a batch with BeginTx = %v, want refused", err)
	}
}

// workTxLargeObjects: the large-object API of the handler's
// transaction works through its lock and is refused after the end.
func workTxLargeObjects(t *testing.T) {
	if !loLayoutOK() {
		t.Fatal("pgx.LargeObjects is no longer one Tx field: largeObjects returns the zero value")
	}
	s := newTestStore(t)
	w, _ := acquire(t, s, "lo", time.Minute)
	ctx := w.Context(bg())
	tx, _ := TxFrom(ctx)
	lo := tx.LargeObjects()
	oid, err := lo.Create(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := lo.Open(ctx, oid, pgx.LargeObjectModeWrite|pgx.LargeObjectModeRead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.Write([]byte("receipt")); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pool.Exec(bg(), `SELECT lo_unlink($1)`, oid) })
	var got []byte
	if err := s.pool.QueryRow(bg(), `SELECT lo_get($1)`, oid).Scan(&got); err != nil || string(got) != "receipt" {
		t.Fatalf("large object = %q, %v", got, err)
	}
	if _, err := obj.Write([]byte("late")); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("large object write after the end = %v, want ErrTxClosed", err)
	}
}

// TestTx pins claims in a caller's transaction ([WithTx], [TxFrom], a
// Work's context): they hold only if it commits, only on the store's own
// database and server, and a Store on another pool claims on its own.
func TestTx(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"claim in a transaction", claimInATransaction},
		{"claim ignores a Work on another pool", claimIgnoresTheWorkOfAStoreOnAnotherPool},
		{"only the store's database and server", withTxOnlyTheStoresDatabaseAndServer},
		{"TxFrom without a transaction fails", txFromWithoutATransactionFails},
	} {
		t.Run(tc.name, tc.test)
	}
}

// txFromWithoutATransactionFails: a context without a transaction
// yields ErrNoTx, never a connection; WithTx places one.
func txFromWithoutATransactionFails(t *testing.T) {
	var nilCtx context.Context
	for name, ctx := range map[string]context.Context{"background": bg(), "nil": nilCtx, "other value": context.WithValue(bg(), txKey{}, "not a tx")} {
		if tx, err := TxFrom(ctx); tx != nil || !errors.Is(err, ErrNoTx) {
			t.Errorf("TxFrom(%s) = %v, %v; want ErrNoTx", name, tx, err)
		}
	}
	s := newTestStore(t)
	tx, err := s.pool.Begin(bg())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg())
	if got, err := TxFrom(WithTx(nilCtx, tx)); got != tx || err != nil {
		t.Fatalf("TxFrom(WithTx(tx)) = %v, %v", got, err)
	}
	table := chargeTable(t, s.pool)
	if err := charge(bg(), table, "x", "nobody"); !errors.Is(err, ErrNoTx) {
		t.Fatalf("a handler wired without the transactional mode: %v, want ErrNoTx", err)
	}
}

// workRefusals: every rejection path of BeginWork and Commit, and
// what each leaves behind.
func workRefusals(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)

	t.Run("BeginWork", func(t *testing.T) {
		r, err := s.AcquireRecord(bg(), "b", time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		refusing := newTestStore(t)
		refusal := fmt.Errorf("%w: test refusal", ErrUnavailable)
		refusing.refusal.Store(&refusal)
		cancelled, cancel := context.WithCancel(bg())
		cancel()
		tests := []struct {
			name  string
			s     *Store
			ctx   context.Context
			id    string
			token string
			want  []error
		}{
			{"empty id", s, bg(), "", r.Token, []error{ErrInvalidClaim}},
			{"oversize id", s, bg(), strings.Repeat("x", MaxIDBytes+1), r.Token, []error{ErrInvalidClaim}},
			{"a token never minted", s, bg(), "b", "not-a-token", []error{replay.ErrLeaseLost}},
			{"a recheck refusing", refusing, bg(), "b", r.Token, []error{ErrUnavailable}},
			{"a zero Store", &Store{}, bg(), "b", r.Token, []error{ErrConfig}},
			{"a cancelled context", s, cancelled, "b", r.Token, []error{ErrUnavailable, context.Canceled}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				w, err := tt.s.BeginWork(tt.ctx, tt.id, tt.token)
				for _, want := range tt.want {
					if w != nil || !errors.Is(err, want) {
						t.Fatalf("BeginWork = %v, %v; want %v", w, err, want)
					}
				}
			})
		}
		if row, _ := rowOf(t, s, "b"); row.state != "l" {
			t.Fatalf("lease row = %+v, want left as it was", row)
		}
	})

	t.Run("Commit", func(t *testing.T) {
		tests := []struct {
			name        string
			handler     func(ctx context.Context) // runs in the work, after its charge
			until       time.Time
			fp, result  []byte
			prepare     func(s *Store, id string)
			want        []error
			wantLease   string // the lease row's state afterwards
			unavailable bool
		}{
			{name: "an empty result", until: until, fp: []byte("fp"), result: []byte{}, want: []error{ErrInvalidClaim, replay.ErrTooLarge, replay.ErrRolledBack}, wantLease: "l"},
			{name: "an oversize result", until: until, result: make([]byte, replay.MaxResultBytes+1), want: []error{ErrInvalidClaim, replay.ErrTooLarge, replay.ErrRolledBack}, wantLease: "l"},
			{name: "an oversize fingerprint", until: until, fp: make([]byte, replay.MaxFingerprintBytes+1), result: []byte("r"), want: []error{ErrInvalidClaim, replay.ErrTooLarge, replay.ErrRolledBack}, wantLease: "l"},
			{name: "an until already past", until: time.Now().Add(-time.Second), want: []error{ErrInvalidClaim, replay.ErrExpired, replay.ErrRolledBack}, wantLease: "l"},
			{name: "a statement of the work failed", until: until, handler: func(ctx context.Context) {
				tx, _ := TxFrom(ctx)
				if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
					t.Error("1/0 succeeded")
				}
			}, want: []error{ErrUnavailable, pgx.ErrTxCommitRollback, replay.ErrRolledBack}, wantLease: "l"},
			{name: "a recheck refusing", until: until, prepare: func(s *Store, _ string) {
				refusal := fmt.Errorf("%w: test refusal", ErrUnavailable)
				s.refusal.Store(&refusal)
			}, want: []error{ErrUnavailable, replay.ErrRolledBack}, wantLease: "l"},
			{name: "the lease released", until: until, prepare: func(s *Store, id string) {
				if _, err := s.pool.Exec(bg(), `DELETE FROM `+s.table+` WHERE key = $1`, s.key(id)); err != nil {
					t.Fatal(err)
				}
			}, want: []error{replay.ErrLeaseLost}, wantLease: ""},
			{name: "the lease's ID confirmed by another", until: until, prepare: func(s *Store, id string) {
				if _, err := s.pool.Exec(bg(), `UPDATE `+s.table+` SET state = 'd', token = $2 WHERE key = $1`, s.key(id), strings.Repeat("0", tokenLen)); err != nil {
					t.Fatal(err)
				}
			}, want: []error{replay.ErrLeaseLost}, wantLease: "d"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := storeOn(t, s.pool)
				w, _ := acquire(t, s, "c", time.Minute)
				ctx := w.Context(bg())
				if err := charge(ctx, table, s.prefix, "refused"); err != nil {
					t.Fatal(err)
				}
				if tt.handler != nil {
					tt.handler(ctx)
				}
				if tt.prepare != nil {
					tt.prepare(s, "c")
				}
				err := w.Commit(bg(), tt.until, tt.fp, tt.result)
				for _, want := range tt.want {
					if !errors.Is(err, want) {
						t.Fatalf("Commit = %v, want %v", err, want)
					}
				}
				if got := chargesOf(t, s.pool, table, s.prefix); len(got) != 0 {
					t.Fatalf("charges = %q, want the work rolled back", got)
				}
				if row, _ := rowOf(t, s, "c"); row.state != tt.wantLease {
					t.Fatalf("lease row state = %q, want %q", row.state, tt.wantLease)
				}
				if again := w.Rollback(bg()); again != err {
					t.Fatalf("Rollback after Commit = %v, want Commit's outcome %v", again, err)
				}
			})
		}
	})

	t.Run("a table that forgot its claims", func(t *testing.T) {
		name := uniqueTable(t, s.pool)
		if err := Migrate(bg(), s.pool, name); err != nil {
			t.Fatal(err)
		}
		f := storeOn(t, s.pool, func(o *Options) { o.Table = name })
		w, _ := acquire(t, f, "f", time.Minute)
		if err := charge(w.Context(bg()), table, "forgotten", "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(bg(), `DELETE FROM "`+name+`" WHERE state = 'm'`); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(bg(), until, nil, nil); !errors.Is(err, ErrForgotten) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Commit = %v, want ErrForgotten", err)
		}
		if got := chargesOf(t, s.pool, table, "forgotten"); len(got) != 0 {
			t.Fatalf("charges = %q, want none", got)
		}
	})
}

// handlerStatements are statements a handler can send in the work's
// transaction that would end, replace or outlive it: each is refused (by
// the Tx before sending, or by the server, which takes one statement per
// string of the extended protocol), and the work then rolls back.
var handlerStatements = []string{
	"commit", "rollback", "end", "abort", "COMMIT AND CHAIN", "rollback and chain",
	"ROLLBACK; BEGIN", "COMMIT; BEGIN", "commit;begin", "select 1; commit; begin", "select 1; rollback",
	"/* a comment */ commit", "-- a comment\ncommit", "  (commit", "begin", "start transaction",
	"savepoint a", "rollback to savepoint a", "release savepoint a",
	"prepare transaction 'ctoken'", "commit prepared 'ctoken'",
	"discard all", "discard temp", "reset all", "reset synchronous_commit",
	"set synchronous_commit = off", "SET SESSION synchronous_commit = off", "set session authorization default",
	"set role none", "set search_path = pg_temp, public", "set time zone 'UTC'",
	"set session characteristics as transaction isolation level serializable",
	"prepare p as select 1", "deallocate all", "listen ctoken", "load 'plpgsql'",
}

// workTxRefusesStatementsThatEscapeTheTransaction: every statement of
// handlerStatements, sent with Exec or Query (with and without
// arguments) after a charge, fails; Commit then rolls the work back
// (ErrRolledBack: nothing escaped), the charge is not committed, and the
// lease is left for the holder to release. Never Commit = nil.
func workTxRefusesStatementsThatEscapeTheTransaction(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	sends := []struct {
		name string
		send func(ctx context.Context, tx pgx.Tx, sql string) error
	}{
		{"Exec", func(ctx context.Context, tx pgx.Tx, sql string) error { _, err := tx.Exec(ctx, sql); return err }},
		{"Exec in the simple protocol", func(ctx context.Context, tx pgx.Tx, sql string) error {
			_, err := tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
			return err
		}},
		{"Query", func(ctx context.Context, tx pgx.Tx, sql string) error {
			rows, err := tx.Query(ctx, sql)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			return err
		}},
		{"SendBatch", func(ctx context.Context, tx pgx.Tx, sql string) error {
			b := &pgx.Batch{}
			b.Queue("select 1")
			b.Queue(sql)
			return tx.SendBatch(ctx, b).Close()
		}},
	}
	n := 0
	for _, send := range sends {
		for _, sql := range handlerStatements {
			t.Run(send.name+"/"+sql, func(t *testing.T) {
				n++
				id := "stmt-" + strconv.Itoa(n)
				w, _ := acquire(t, s, id, time.Minute)
				ctx := w.Context(bg())
				if err := charge(ctx, table, id, "before"); err != nil {
					t.Fatal(err)
				}
				tx, _ := TxFrom(ctx)
				if err := send.send(ctx, tx, sql); err == nil {
					t.Fatalf("%q was accepted", sql)
				}
				err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
				if err == nil || !errors.Is(err, replay.ErrRolledBack) {
					t.Fatalf("Commit = %v, want ErrRolledBack", err)
				}
				if got := chargesOf(t, s.pool, table, id); len(got) != 0 {
					t.Fatalf("charges = %q, want none", got)
				}
				if row, _ := rowOf(t, s, id); row.state != "l" {
					t.Fatalf("lease row state = %q, want the lease left for the holder to release", row.state)
				}
			})
		}
	}
}

// workTxAllowsStatementsThatEndWithIt: what ends with the
// transaction (SET LOCAL, SET TRANSACTION, SET CONSTRAINTS, a savepoint
// through Begin) is sent, and the work commits.
func workTxAllowsStatementsThatEndWithIt(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	for i, sql := range []string{"set local statement_timeout = 10000", "SET LOCAL synchronous_commit = on",
		"set constraints all deferred", "/* commit */ select 1", "select 'commit'", "-- rollback\nselect 1"} {
		t.Run(sql, func(t *testing.T) {
			id := "allowed-" + strconv.Itoa(i)
			w, _ := acquire(t, s, id, time.Minute)
			ctx := w.Context(bg())
			tx, _ := TxFrom(ctx)
			if _, err := tx.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
			if err := charge(ctx, table, id, "after"); err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil); err != nil {
				t.Fatal(err)
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 1 {
				t.Fatalf("charges = %q, want one", got)
			}
		})
	}
}

// sendRaw sends sql on the work's connection in the simple protocol,
// past the Tx's refusals: what a path this package does not know of
// could send. It begins the transaction first, as the Tx would.
func sendRaw(t *testing.T, w replay.Work, sql string) {
	t.Helper()
	wk := w.(*work)
	wk.mu.Lock()
	defer wk.mu.Unlock()
	if err := wk.beginLocked(bg()); err != nil {
		t.Fatal(err)
	}
	if _, err := wk.conn.PgConn().Exec(bg(), sql).ReadAll(); err != nil {
		t.Logf("%s: %v", sql, err)
	}
}

// escapeCase is SQL sent past the Tx's refusals and how many charges it
// may have committed.
type escapeCase struct {
	sql        string
	maxCharges int
}

// workCommitAfterAnEscapeIsNeverASuccess: SQL that ended the work's
// transaction past the Tx's refusals (sent on its connection directly)
// is caught by the fence's transaction id, or by the session found idle:
// Commit fails with ErrUnavailable and errEscaped, never nil, never
// ErrRolledBack or ErrLeaseLost (the writes before the escape may be
// committed), and the key is recorded as done without a record, so the
// work never runs a second time: a retry's AcquireRecord finds it done.
// A one-time token claimed in the work is accepted at most once.
func workCommitAfterAnEscapeIsNeverASuccess(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	tests := []escapeCase{
		{"commit; begin", 1},
		{"rollback; begin", 0},
		{"commit and chain", 1},
		{"commit", 1},
		{"rollback", 0},
		{"select 1; commit; begin; select 2", 1},
		{"commit; begin; select 1/0", 1},
		{"rollback; begin; select 1/0", 0},
	}
	ways := []struct {
		name    string
		acquire func(t *testing.T, s *Store, id string) replay.Work
	}{
		{"BeginWork", func(t *testing.T, s *Store, id string) replay.Work { w, _ := acquire(t, s, id, time.Minute); return w }},
		{"AcquireWork", func(t *testing.T, s *Store, id string) replay.Work { return acquireWork(t, s, id, []byte("fp-"+id)) }},
	}
	for k, way := range ways {
		t.Run(way.name, func(t *testing.T) { commitAfterAnEscape(t, s, table, k, tests, way.acquire) })
	}
}

// commitAfterAnEscape runs workCommitAfterAnEscapeIsNeverASuccess's
// escapes on one way of beginning the work (its k-th).
func commitAfterAnEscape(t *testing.T, s *Store, table string, k int, tests []escapeCase, acquireOne func(t *testing.T, s *Store, id string) replay.Work) {
	for i, tt := range tests {
		for j, prepare := range []struct {
			name string
			fn   func(s *Store)
		}{
			{"", nil},
			{" with a recheck refusing", func(s *Store) {
				refusal := fmt.Errorf("%w: test refusal", ErrUnavailable)
				s.refusal.Store(&refusal)
			}},
		} {
			t.Run(tt.sql+prepare.name, func(t *testing.T) {
				s := storeOn(t, s.pool)
				id := fmt.Sprintf("escape-%d-%d-%d", k, i, j)
				token := fmt.Sprintf("once-%d-%d-%d", k, i, j)
				w := acquireOne(t, s, id)
				ctx := w.Context(bg())
				if first, err := s.Claim(ctx, token, time.Now().Add(time.Hour)); !first || err != nil {
					t.Fatalf("Claim = %v, %v", first, err)
				}
				if err := charge(ctx, table, id, "before"); err != nil {
					t.Fatal(err)
				}
				sendRaw(t, w, tt.sql)
				accepted := 1
				if s.claimTx(ctx) != nil {
					if first, _ := s.Claim(ctx, token, time.Now().Add(time.Hour)); first {
						accepted++
					}
				}
				if prepare.fn != nil {
					prepare.fn(s)
				}
				err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
				if tt.maxCharges == 0 && strings.HasSuffix(tt.sql, "1/0") && errors.Is(err, replay.ErrRolledBack) {
					// The work's transaction was rolled back by the
					// escape and the next one aborted: nothing was
					// committed, which ErrRolledBack says truly.
					if got := chargesOf(t, s.pool, table, id); len(got) != 0 {
						t.Fatalf("Commit = %v but charges = %q", err, got)
					}
					return
				}
				if err == nil || errors.Is(err, replay.ErrRolledBack) || errors.Is(err, replay.ErrLeaseLost) ||
					!errors.Is(err, ErrUnavailable) || !errors.Is(err, errEscaped) {
					t.Fatalf("Commit = %v, want the escape reported, not success, ErrRolledBack or ErrLeaseLost", err)
				}
				if prepare.fn != nil {
					s.refusal.Store(nil)
				}
				if got := chargesOf(t, s.pool, table, id); len(got) > tt.maxCharges {
					t.Fatalf("charges = %q, want at most %d", got, tt.maxCharges)
				}
				r, err := s.AcquireRecord(bg(), id, time.Minute, []byte("fp-"+id))
				if err != nil || r.State != replay.LeaseDone || r.Result != nil {
					t.Fatalf("retry's AcquireRecord = %+v, %v; want done without a record", r, err)
				}
				if first, _ := s.Claim(bg(), token, time.Now().Add(time.Hour)); first {
					accepted++
				}
				// The escape kept the first claim (commit) or lost it
				// (rollback): either way the work never succeeded, so a
				// claim of the token after it is the token's only
				// acknowledged accept at most.
				if tt.maxCharges == 1 && accepted > 1 {
					t.Fatalf("the token was accepted %d times", accepted)
				}
			})
		}
	}
}

// workRollbackAfterAnEscapeKeepsTheKey: a handler whose SQL ended the
// work's transaction past the Tx's refusals and then failed (a 5xx, a
// panic: the middleware rolls back and releases the key) must not run
// again over the writes the escape kept. Rollback reports the escape
// (ErrUnavailable and errEscaped) and records the key as done without a
// record, on both ways in: BeginWork after a committed lease, and
// AcquireWork, whose lease (the ID's lock) the escape already ended. A
// one-time token claimed before the escape is not accepted again either.
// A work that did not escape still rolls back with nil.
func workRollbackAfterAnEscapeKeepsTheKey(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	ways := []struct {
		name    string
		acquire func(t *testing.T, id string) replay.Work
	}{
		{"BeginWork", func(t *testing.T, id string) replay.Work { w, _ := acquire(t, s, id, time.Minute); return w }},
		{"AcquireWork", func(t *testing.T, id string) replay.Work { return acquireWork(t, s, id, []byte("fp-"+id)) }},
	}
	escapes := []struct {
		name, sql  string
		maxCharges int  // charges the escape may have committed
		committed  bool // the work's own transaction committed (its token's claim kept)
	}{
		{"commit then begin", "commit; begin", 1, true},
		{"commit", "commit", 1, true},
		{"rollback then begin", "rollback; begin", 0, false},
		{"rollback, a write, begin", "rollback; insert into " + table + " values ('%s', 'autocommit'); begin", 1, false},
		{"commit then a failed statement", "commit; begin; select 1/0", 1, true},
	}
	for i, way := range ways {
		for j, e := range escapes {
			t.Run(way.name+"/"+e.name, func(t *testing.T) {
				id := fmt.Sprintf("rollback-escape-%d-%d", i, j)
				token := "once-" + id
				w := way.acquire(t, id)
				ctx := w.Context(bg())
				if first, err := s.Claim(ctx, token, time.Now().Add(time.Hour)); !first || err != nil {
					t.Fatalf("Claim = %v, %v", first, err)
				}
				if err := charge(ctx, table, id, "before"); err != nil {
					t.Fatal(err)
				}
				sql := e.sql
				if strings.Contains(sql, "%s") {
					sql = fmt.Sprintf(sql, id)
				}
				sendRaw(t, w, sql)
				err := w.Rollback(bg())
				if err == nil || errors.Is(err, replay.ErrRolledBack) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, errEscaped) {
					t.Fatalf("Rollback = %v, want the escape reported", err)
				}
				if got := chargesOf(t, s.pool, table, id); len(got) > e.maxCharges {
					t.Fatalf("charges = %q, want at most %d", got, e.maxCharges)
				}
				r, err := s.AcquireRecord(bg(), id, time.Minute, []byte("fp-"+id))
				if err != nil || r.State != replay.LeaseDone || r.Result != nil {
					t.Fatalf("retry's AcquireRecord = %+v, %v; want done without a record", r, err)
				}
				r, w2, err := s.AcquireWork(bg(), id, time.Minute, []byte("fp-"+id))
				if w2 != nil {
					w2.Rollback(bg())
				}
				if err != nil || r.State != replay.LeaseDone || w2 != nil {
					t.Fatalf("retry's AcquireWork = %+v, %v, %v; want done without a Work", r, w2, err)
				}
				if e.committed {
					if first, _ := s.Claim(bg(), token, time.Now().Add(time.Hour)); first {
						t.Fatal("the token claimed before the escape was accepted again")
					}
				}
			})
		}
		t.Run(way.name+"/no escape", func(t *testing.T) {
			id := fmt.Sprintf("rollback-plain-%d", i)
			w := way.acquire(t, id)
			if err := charge(w.Context(bg()), table, id, "discarded"); err != nil {
				t.Fatal(err)
			}
			if err := w.Rollback(bg()); err != nil {
				t.Fatalf("Rollback = %v", err)
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 0 {
				t.Fatalf("charges = %q after a rollback", got)
			}
		})
	}
}

// workEscapeWithTheLeaseLostKeepsOneCharge: a handler that tries
// to commit its charge with SQL while its lease runs out and a second
// holder runs the same key: the first holder's Commit is never nil, and
// only the second holder's charge is committed (one effect), whether the
// escape was refused by the Tx or, sent past it, caught by the fence
// (then reported as escaped, not as ErrLeaseLost, since the raw COMMIT
// kept the charge it wrote before).
func workEscapeWithTheLeaseLostKeepsOneCharge(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)
	for i, sql := range []string{"COMMIT; BEGIN", "ROLLBACK; BEGIN", "commit and chain", "savepoint a"} {
		t.Run(sql, func(t *testing.T) {
			id := "lost-" + strconv.Itoa(i)
			w1, _ := acquire(t, s, id, time.Minute)
			ctx := w1.Context(bg())
			tx, _ := TxFrom(ctx)
			if _, err := tx.Exec(ctx, sql); err == nil {
				t.Fatalf("%q accepted", sql)
			}
			charge(ctx, table, id, "first")
			expire(t, s, id)
			w2, _ := acquire(t, s, id, time.Minute)
			if err := charge(w2.Context(bg()), table, id, "second"); err != nil {
				t.Fatal(err)
			}
			if err := w2.Commit(bg(), until, []byte("fp"), []byte("second")); err != nil {
				t.Fatal(err)
			}
			if err := w1.Commit(bg(), until, []byte("fp"), []byte("first")); err == nil {
				t.Fatal("first holder's Commit = nil")
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 1 || got[0] != "second" {
				t.Fatalf("charges = %q, want only the second holder's", got)
			}
		})
	}
	t.Run("past the Tx", func(t *testing.T) {
		id := "lost-raw"
		w1, _ := acquire(t, s, id, time.Minute)
		ctx := w1.Context(bg())
		if err := charge(ctx, table, id, "first"); err != nil {
			t.Fatal(err)
		}
		sendRaw(t, w1, "rollback; begin")
		if err := charge(ctx, table, id, "first-again"); err != nil {
			t.Fatal(err)
		}
		expire(t, s, id)
		w2, _ := acquire(t, s, id, time.Minute)
		if err := charge(w2.Context(bg()), table, id, "second"); err != nil {
			t.Fatal(err)
		}
		if err := w2.Commit(bg(), until, []byte("fp"), []byte("second")); err != nil {
			t.Fatal(err)
		}
		err := w1.Commit(bg(), until, []byte("fp"), []byte("first"))
		if err == nil || errors.Is(err, replay.ErrLeaseLost) || errors.Is(err, replay.ErrRolledBack) || !errors.Is(err, errEscaped) {
			t.Fatalf("first holder's Commit = %v, want the escape reported", err)
		}
		if got := chargesOf(t, s.pool, table, id); len(got) != 1 || got[0] != "second" {
			t.Fatalf("charges = %q, want only the second holder's", got)
		}
		wantRecord(t, s, id, replay.LeaseDone, []byte("fp"), []byte("second"))
	})
}

// commitRefusedOnlyWhenNothingWasCommitted: the pipeline's errors
// that make Commit report replay.ErrRolledBack. A server error to the
// fence (or BEGIN) proves COMMIT never ran; of COMMIT's, only an ERROR
// proves it rolled back: a FATAL or PANIC may come after the commit was
// written, and an error without a server answer (the connection lost)
// leaves the outcome unknown.
func commitRefusedOnlyWhenNothingWasCommitted(t *testing.T) {
	pgErr := func(severity string) error {
		return fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: severity, SeverityUnlocalized: severity, Code: "57P01", Message: "m"})
	}
	lost := errors.New("unexpected EOF")
	tests := []struct {
		name                string
		fenceErr, commitErr error
		want                bool
	}{
		{"no error", nil, nil, false},
		{"the fence answered an ERROR", pgErr("ERROR"), nil, true},
		{"the fence answered a FATAL", pgErr("FATAL"), lost, true},
		{"COMMIT answered an ERROR", nil, pgErr("ERROR"), true},
		{"COMMIT answered a FATAL", nil, pgErr("FATAL"), false},
		{"COMMIT answered a PANIC", nil, pgErr("PANIC"), false},
		{"COMMIT answered an ERROR, localized severity only", nil, &pgconn.PgError{Severity: "ERROR"}, true},
		{"COMMIT answered a FATAL, localized severity only", nil, &pgconn.PgError{Severity: "FATAL"}, false},
		{"the connection lost during COMMIT", nil, lost, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := commitRefused(tt.fenceErr, tt.commitErr); got != tt.want {
				t.Fatalf("commitRefused(%v, %v) = %v, want %v", tt.fenceErr, tt.commitErr, got, tt.want)
			}
		})
	}
}

// workEndsWithADoneContext: Commit or Rollback called with a context
// already done still ends the transaction (the connection is closed, so
// nothing is committed) and gives the connection back to the pool.
func workEndsWithADoneContext(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	done, cancel := context.WithCancel(bg())
	cancel()
	ends := []struct {
		name string
		end  func(w replay.Work) error
	}{
		{"Commit", func(w replay.Work) error { return w.Commit(done, time.Now().Add(time.Hour), nil, nil) }},
		{"Rollback", func(w replay.Work) error { return w.Rollback(done) }},
	}
	for _, tt := range ends {
		t.Run(tt.name, func(t *testing.T) {
			id := "done-" + tt.name
			w, _ := acquire(t, s, id, time.Minute)
			if err := charge(w.Context(bg()), table, id, "x"); err != nil {
				t.Fatal(err)
			}
			if err := tt.end(w); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
				t.Fatalf("%s with a done context = %v, want ErrUnavailable and context.Canceled", tt.name, err)
			}
			if n := s.pool.Stat().AcquiredConns(); n != 0 {
				t.Fatalf("%d connections still acquired, want the work's given back", n)
			}
			if got := chargesOf(t, s.pool, table, id); len(got) != 0 {
				t.Fatalf("charges = %q, want none", got)
			}
			if row, _ := rowOf(t, s, id); row.state != "l" {
				t.Fatalf("lease row state = %q, want the lease left as it was", row.state)
			}
		})
	}
}

// workFirstEndWins: the first of Commit and Rollback decides; later
// calls return its outcome and change nothing.
func workFirstEndWins(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	until := time.Now().Add(time.Hour)

	t.Run("Rollback then Commit", func(t *testing.T) {
		w, _ := acquire(t, s, "rc", time.Minute)
		if err := charge(w.Context(bg()), table, "rc", "x"); err != nil {
			t.Fatal(err)
		}
		if err := w.Rollback(bg()); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(bg(), until, nil, nil); err != nil {
			t.Fatalf("Commit after Rollback = %v, want Rollback's nil", err)
		}
		if got := chargesOf(t, s.pool, table, "rc"); len(got) != 0 {
			t.Fatalf("charges = %q, want none", got)
		}
		// The lease is left as it was: busy, then released.
		r, err := s.AcquireRecord(bg(), "rc", time.Minute, nil)
		if err != nil || r.State != replay.LeaseBusy {
			t.Fatalf("AcquireRecord after Rollback = %v, %v; want busy", r.State, err)
		}
	})

	t.Run("concurrent Commits", func(t *testing.T) {
		w, _ := acquire(t, s, "cc", time.Minute)
		if err := charge(w.Context(bg()), table, "cc", "x"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					errs[i] = w.Commit(bg(), until, nil, nil)
				} else {
					errs[i] = w.Rollback(bg())
				}
			}()
		}
		wg.Wait()
		n := len(chargesOf(t, s.pool, table, "cc"))
		row, _ := rowOf(t, s, "cc")
		if n == 1 && row.state != "d" || n == 0 && row.state != "l" || n > 1 {
			t.Fatalf("%d charges with a row in state %q: the work and the lease's end disagree", n, row.state)
		}
		for _, err := range errs {
			if err != nil {
				t.Fatalf("concurrent ends: %v", err)
			}
		}
	})
}

// workRollbackLeavesTheLease: Rollback discards the work and leaves
// the lease live; ReleaseLease then frees the ID for the next holder.
func workRollbackLeavesTheLease(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	w, token := acquire(t, s, "rb", time.Minute)
	if err := charge(w.Context(bg()), table, "rb", "x"); err != nil {
		t.Fatal(err)
	}
	if err := w.Rollback(bg()); err != nil {
		t.Fatal(err)
	}
	if got := chargesOf(t, s.pool, table, "rb"); len(got) != 0 {
		t.Fatalf("charges = %q, want none", got)
	}
	if row, _ := rowOf(t, s, "rb"); row.state != "l" {
		t.Fatalf("row = %+v, want the lease live", row)
	}
	if err := s.ReleaseLease(bg(), "rb", token); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, s, "rb", replay.LeaseAcquired, nil, nil)
}

// workTxUsedWhileCommitRuns (run it with -race): goroutines keep
// writing and reading through the handler's transaction while Commit
// runs. Every statement either completes before the end, and is then
// committed, or fails with pgx.ErrTxClosed: the rows committed are
// exactly the inserts that returned nil.
func workTxUsedWhileCommitRuns(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	for round := range 5 {
		id := fmt.Sprintf("late-%d", round)
		w, _ := acquire(t, s, id, time.Minute)
		ctx := w.Context(bg())
		tx, _ := TxFrom(ctx)
		var inserted atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					var err error
					if g == 0 {
						var n int
						err = tx.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n)
					} else {
						_, err = tx.Exec(ctx, `INSERT INTO `+table+` (key, holder) VALUES ($1, 'late')`, id)
						if err == nil {
							inserted.Add(1)
						}
					}
					switch {
					case errors.Is(err, pgx.ErrTxClosed):
						return
					case err != nil && !errors.Is(err, errCursorOpen):
						t.Errorf("statement during Commit: %v", err)
						return
					}
				}
			}()
		}
		for inserted.Load() < 20 {
			time.Sleep(time.Millisecond)
		}
		if err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got := len(chargesOf(t, s.pool, table, id)); int64(got) != inserted.Load() {
			t.Fatalf("round %d: %d rows committed, %d inserts returned nil", round, got, inserted.Load())
		}
	}
}

// claimInATransaction: a Claim whose context carries a transaction
// (WithTx, or a Work's Context) holds only if the transaction commits,
// and a concurrent claim of the same ID waits for the transaction's end.
func claimInATransaction(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(time.Hour)
	tests := []struct {
		name   string
		commit bool
	}{
		{"committed", true},
		{"rolled back", false},
	}
	for _, tt := range tests {
		t.Run("WithTx "+tt.name, func(t *testing.T) {
			id := "tx-" + tt.name
			tx, err := s.pool.Begin(bg())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(bg())
			if first, err := s.Claim(WithTx(bg(), tx), id, until); !first || err != nil {
				t.Fatalf("Claim in the transaction = %v, %v", first, err)
			}
			// Another session's claim waits for the transaction.
			type result struct {
				first bool
				err   error
			}
			done := make(chan result, 1)
			go func() {
				first, err := s.Claim(bg(), id, until)
				done <- result{first, err}
			}()
			waitForLockWaiter(t, s.pool)
			select {
			case r := <-done:
				t.Fatalf("the concurrent claim returned %v, %v before the transaction ended", r.first, r.err)
			default:
			}
			if tt.commit {
				err = tx.Commit(bg())
			} else {
				err = tx.Rollback(bg())
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.first == tt.commit {
				t.Fatalf("concurrent claim after the transaction %s = %v, %v; want first = %v", tt.name, r.first, r.err, !tt.commit)
			}
		})
		t.Run("Work "+tt.name, func(t *testing.T) {
			id := "work-" + tt.name
			w, _ := acquire(t, s, "lease-"+tt.name, time.Minute)
			if first, err := s.Claim(w.Context(bg()), id, until); !first || err != nil {
				t.Fatalf("Claim in the work = %v, %v", first, err)
			}
			var err error
			if tt.commit {
				err = w.Commit(bg(), until, nil, nil)
			} else {
				err = w.Rollback(bg())
			}
			if err != nil {
				t.Fatal(err)
			}
			if first, err := s.Claim(bg(), id, until); err != nil || first == tt.commit {
				t.Fatalf("Claim after the work %s = %v, %v; want first = %v", tt.name, first, err, !tt.commit)
			}
		})
	}

	t.Run("a one-time token redeemed in a transaction", func(t *testing.T) {
		keys, err := ctoken.NewKeyring(ctoken.RandomKey())
		if err != nil {
			t.Fatal(err)
		}
		iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "pgtx", TTL: time.Minute, Replay: s})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := iss.Mint(map[string]string{"sub": "a"})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := s.pool.Begin(bg())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(bg())
		want := map[string]string{"sub": "a"}
		if _, err := iss.Redeem(WithTx(bg(), tx), tok, want); err != nil {
			t.Fatalf("Redeem in a transaction: %v", err)
		}
		tx.Rollback(bg())
		if _, err := iss.Redeem(bg(), tok, want); err != nil {
			t.Fatalf("Redeem after the rollback: %v, want the token still unused", err)
		}
		if _, err := iss.Redeem(bg(), tok, want); err == nil {
			t.Fatal("third Redeem succeeded: the token was not consumed")
		}
	})

	t.Run("a transaction that has ended", func(t *testing.T) {
		w, _ := acquire(t, s, "ended", time.Minute)
		ctx := w.Context(bg())
		if err := w.Rollback(bg()); err != nil {
			t.Fatal(err)
		}
		if first, err := s.Claim(ctx, "after-end", until); first || !errors.Is(err, ErrUnavailable) || !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("Claim in an ended work = %v, %v; want ErrUnavailable and ErrTxClosed", first, err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		tx, err := s.pool.Begin(bg())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(bg())
		cancelled, cancel := context.WithCancel(WithTx(bg(), tx))
		cancel()
		tests := []struct {
			name string
			s    *Store
			ctx  context.Context
			want []error
		}{
			{"a zero Store", &Store{}, WithTx(bg(), tx), []error{ErrConfig}},
			{"a cancelled context", s, cancelled, []error{ErrUnavailable, context.Canceled}},
		}
		for _, tt := range tests {
			first, err := tt.s.Claim(tt.ctx, "refused", until)
			for _, want := range tt.want {
				if first || !errors.Is(err, want) {
					t.Errorf("%s: Claim = %v, %v; want %v", tt.name, first, err, want)
				}
			}
		}
	})

	t.Run("expiry by the database's clock", func(t *testing.T) {
		tx, err := s.pool.Begin(bg())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(bg())
		// now() is the transaction's start; the claim reads the statement's
		// time, so an until between the two is refused as expired.
		time.Sleep(300 * time.Millisecond)
		var dbNow time.Time
		if err := tx.QueryRow(bg(), `SELECT statement_timestamp()`).Scan(&dbNow); err != nil {
			t.Fatal(err)
		}
		if first, err := s.Claim(WithTx(bg(), tx), "stale", dbNow.Add(-100*time.Millisecond)); first || !errors.Is(err, replay.ErrExpired) {
			t.Fatalf("Claim with an until past by the statement's clock = %v, %v; want ErrExpired", first, err)
		}
	})
}

// workChildEnv switches the test binary into the child of
// TestWork/process killed before commit keeps nothing (see TestMain): the
// database URL, the prefix, the charge table and the ID, separated by
// spaces.
const workChildEnv = "PGSTORE_WORK_CHILD"

// childLease is the child's lease.
const childLease = 2 * time.Second

// workChild takes spec's ID, inserts a charge in its work, says so on
// stdout and waits to be killed.
func workChild(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 4 {
		fmt.Fprintln(os.Stderr, "bad", workChildEnv)
		return 2
	}
	url, prefix, table, id := f[0], f[1], f[2], f[3]
	pool, err := pgxpool.New(bg(), url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := New(bg(), pool, Options{Prefix: prefix, SweepInterval: -1, Timeout: 15 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := s.AcquireRecord(bg(), id, childLease, []byte("child"))
	if err != nil || r.State != replay.LeaseAcquired {
		fmt.Fprintln(os.Stderr, "acquire:", r.State, err)
		return 1
	}
	w, err := s.BeginWork(bg(), id, r.Token)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := charge(w.Context(bg()), table, id, "killed"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("inserted")
	time.Sleep(time.Minute) // killed before it commits
	return 1
}

// workProcessKilledBeforeCommitKeepsNothing: a process SIGKILLed
// between its insert and its Commit keeps nothing of its work; the ID is
// busy until the lease ends, then free, and a retry commits exactly one
// charge.
func workProcessKilledBeforeCommitKeepsNothing(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workChildEnv+"="+strings.Join([]string{needServer(t).url(), s.prefix, table, "pay"}, " "))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != "inserted\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child said %q: %s", l, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not insert within 30 s: %s", stderr.String())
	}
	killedAt := time.Now()
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	if got := chargesOf(t, s.pool, table, "pay"); len(got) != 0 {
		t.Fatalf("charges after the kill = %q, want none", got)
	}
	r, err := s.AcquireRecord(bg(), "pay", time.Minute, []byte("retry"))
	if err != nil || r.State != replay.LeaseBusy {
		t.Fatalf("retry during the killed holder's lease = %v, %v; want busy", r.State, err)
	}
	for r.State == replay.LeaseBusy && time.Since(killedAt) < childLease+10*time.Second {
		time.Sleep(50 * time.Millisecond)
		if r, err = s.AcquireRecord(bg(), "pay", time.Minute, []byte("retry")); err != nil {
			t.Fatal(err)
		}
	}
	if r.State != replay.LeaseAcquired {
		t.Fatalf("retry after the lease = %v, want acquired", r.State)
	}
	w, err := s.BeginWork(bg(), "pay", r.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := charge(w.Context(bg()), table, "pay", "retry"); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("retry"), []byte("charged")); err != nil {
		t.Fatal(err)
	}
	if got := chargesOf(t, s.pool, table, "pay"); len(got) != 1 || got[0] != "retry" {
		t.Fatalf("charges = %q, want the retry's only", got)
	}
}

// workKeepsOneChargePerKeyThroughAPostgresKill: workers run keys
// through AcquireRecord, BeginWork, one charge and Commit, retrying every
// key until it is done, while the server is SIGKILLed and restarted
// mid-load (the keys keep coming until 50 more are taken after the
// restart, at most maxKeys). Afterwards every key is done, has exactly
// one charge and the record of the holder whose charge it is.
func workKeepsOneChargePerKeyThroughAPostgresKill(t *testing.T) {
	p := ownServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.Timeout = 2 * time.Second })
	table := chargeTable(t, pool)
	const maxKeys = 5000
	const workers = 8
	const lease = 500 * time.Millisecond
	until := time.Now().Add(time.Hour)
	var next, finished, unknown, lost, failed atomic.Int64
	var stopAt atomic.Int64
	stopAt.Store(maxKeys)
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= stopAt.Load() {
					return
				}
				id := fmt.Sprintf("k%04d", i)
				for attempt := 0; time.Now().Before(deadline); attempt++ {
					holder := fmt.Sprintf("w%d-a%d", w, attempt)
					r, err := s.AcquireRecord(bg(), id, lease, []byte("fp"))
					if err != nil {
						failed.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if r.State == replay.LeaseDone {
						finished.Add(1)
						break
					}
					if r.State == replay.LeaseBusy {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					work, err := s.BeginWork(bg(), id, r.Token)
					if err != nil {
						failed.Add(1)
						continue // the lease ends by itself
					}
					if err := charge(work.Context(bg()), table, id, holder); err != nil {
						failed.Add(1)
						work.Rollback(bg())
						continue
					}
					err = work.Commit(bg(), until, []byte("fp"), []byte(holder))
					if err == nil {
						finished.Add(1)
						break
					}
					if errors.Is(err, replay.ErrLeaseLost) {
						lost.Add(1)
					} else {
						unknown.Add(1)
					}
				}
			}
		}()
	}
	for next.Load() < 50 {
		time.Sleep(time.Millisecond)
	}
	if err := p.restart(); err != nil {
		t.Fatal(err)
	}
	stopAt.Store(min(next.Load()+50, maxKeys))
	wg.Wait()
	keys := min(next.Load(), stopAt.Load())
	t.Logf("%d of %d keys done; Commits with an unknown outcome: %d, with the lease lost: %d; other steps failed: %d",
		finished.Load(), keys, unknown.Load(), lost.Load(), failed.Load())
	if unknown.Load()+failed.Load() == 0 {
		t.Fatal("no step failed: the kill did not hit the load")
	}
	if finished.Load() != keys {
		t.Fatalf("%d of %d keys done within the deadline", finished.Load(), keys)
	}
	for i := range keys {
		id := fmt.Sprintf("k%04d", i)
		holders := chargesOf(t, pool, table, id)
		row, ok := rowOf(t, s, id)
		if len(holders) != 1 || !ok || row.state != "d" || string(row.result) != holders[0] {
			t.Fatalf("key %s: charges %q, row %+v (found %v); want exactly one charge and its holder's record", id, holders, row, ok)
		}
	}
}

// BenchmarkWorkFirstRequest measures the first request of the
// transactional mode against its floor, in alternation (see paired):
// "floor" is the handler's own transaction without the store (BEGIN, one
// INSERT of a charge, COMMIT: three round trips, one commit); "work" is
// AcquireRecord, BeginWork, the same INSERT through TxFrom and Commit with
// a 4 KiB result: three round trips too (the acquire; BEGIN pipelined
// with the INSERT; the fence pipelined with COMMIT), and two commits, the
// lease's and the work's. "floor+lease" is the least any design that
// commits the lease before the work can cost: a bare autocommit INSERT …
// ON CONFLICT DO NOTHING of a lease row into the store's table, then the
// floor (four round trips, two commits). "work-unpipelined" is "work"
// with the fence and COMMIT sent one after the other (the design not
// taken: four round trips). "separate" is the mode without the
// transaction, for reference: AcquireRecord, the handler's own
// transaction, ConfirmRecord (five round trips, three commits). x/floor
// is the ratio of the medians.
func BenchmarkWorkFirstRequest(b *testing.B) {
	b.Run("sync-commit", func(b *testing.B) { benchWork(b, newTestStore(b)) })
	// Without waiting for the WAL flush (synchronous_commit off for the
	// floor and the store alike), which shows the round trips without the
	// disk's noise.
	b.Run("async-commit", func(b *testing.B) {
		pool := needServer(b).pool(b, "synchronous_commit", "off")
		benchWork(b, storeOn(b, pool, func(o *Options) {
			o.AllowAsyncCommit = true
			o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		}))
	})
}

func benchWork(b *testing.B, s *Store) {
	table := chargeTable(b, s.pool)
	insert := `INSERT INTO ` + table + ` (key, holder) VALUES ($1, 'bench')`
	until := time.Now().Add(time.Hour)
	fp := make([]byte, 32)
	result := benchResult(4 << 10)
	id := func(p string, i int) string { return p + strconv.Itoa(1_000_000_000+i) }
	begin := func(key string) replay.Work {
		r, err := s.AcquireRecord(bg(), key, time.Minute, fp)
		if err != nil || r.State != replay.LeaseAcquired {
			b.Fatal(r.State, err)
		}
		w, err := s.BeginWork(bg(), key, r.Token)
		if err != nil {
			b.Fatal(err)
		}
		ctx := w.Context(bg())
		tx, err := TxFrom(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(ctx, insert, key); err != nil {
			b.Fatal(err)
		}
		return w
	}
	floor := func(key string) {
		tx, err := s.pool.Begin(bg())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(bg(), insert, key); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(bg()); err != nil {
			b.Fatal(err)
		}
	}
	lease := `INSERT INTO ` + s.table + ` (key, state, token, until, fingerprint) VALUES ($1, 'l', $2, now() + interval '1 minute', $3) ON CONFLICT (key) DO NOTHING`
	token := strings.Repeat("0", tokenLen)
	paired(b, []string{"floor", "work", "floor+lease", "work-unpipelined", "separate"},
		func(i int) { floor(id("f", i)) },
		func(i int) {
			if err := begin(id("w", i)).Commit(bg(), until, fp, result); err != nil {
				b.Fatal(err)
			}
		},
		func(i int) {
			if tag, err := s.pool.Exec(bg(), lease, s.key(id("l", i)), token, fp); err != nil || tag.RowsAffected() != 1 {
				b.Fatal(tag, err)
			}
			floor(id("l", i))
		},
		func(i int) {
			w := begin(id("u", i)).(*work)
			w.stop()
			defer w.pc.Release()
			var zero int
			if err := w.conn.QueryRow(bg(), s.fenceSQL, w.key, w.token, pgTime(until), fp, result).Scan(&zero); err != nil {
				b.Fatal(err)
			}
			if _, err := w.conn.Exec(bg(), "commit"); err != nil {
				b.Fatal(err)
			}
		},
		func(i int) {
			key := id("s", i)
			r, err := s.AcquireRecord(bg(), key, time.Minute, fp)
			if err != nil || r.State != replay.LeaseAcquired {
				b.Fatal(r.State, err)
			}
			tx, err := s.pool.Begin(bg())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(bg(), insert, key); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(bg()); err != nil {
				b.Fatal(err)
			}
			if err := s.ConfirmRecord(bg(), key, r.Token, until, fp, result); err != nil {
				b.Fatal(err)
			}
		})
}

// claimIgnoresTheWorkOfAStoreOnAnotherPool: a Work's context reaches
// every Store a handler uses, not only the one that began it. A Store on
// another pool (here another database, with a table of the same name)
// must not write its claim in that Work's transaction, where its own
// database would never see it: it claims on its own pool, as without the
// transactional mode, so the claim holds there and a second claim of the
// ID is refused. A Store on the Work's own pool still claims in the Work.
func claimIgnoresTheWorkOfAStoreOnAnotherPool(t *testing.T) {
	p := needServer(t)
	work := newTestStore(t)
	db := "other_" + strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(uniquePrefix(), "test:"), ":"), "-", "")
	if _, err := work.pool.Exec(bg(), `CREATE DATABASE "`+db+`"`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { work.pool.Exec(context.Background(), `DROP DATABASE IF EXISTS "`+db+`" WITH (FORCE)`) })
	otherPool := p.poolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Database = db })
	if err := Migrate(bg(), otherPool, DefaultTable); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	tests := []struct {
		name      string
		store     *Store
		commit    bool
		wantAfter bool // a claim of the ID after the work ended is first
	}{
		{"another pool, the work committed", storeOn(t, otherPool), true, false},
		{"another pool, the work rolled back", storeOn(t, otherPool), false, false},
		{"the work's pool, the work committed", storeOn(t, work.pool), true, false},
		{"the work's pool, the work rolled back", storeOn(t, work.pool), false, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := acquire(t, work, "pool-"+strconv.Itoa(i), time.Minute)
			id := "token-" + strconv.Itoa(i)
			if first, err := tt.store.Claim(w.Context(bg()), id, until); !first || err != nil {
				t.Fatalf("Claim in the work's context = %v, %v; want first", first, err)
			}
			if tt.commit {
				if err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil); err != nil {
					t.Fatal(err)
				}
			} else if err := w.Rollback(bg()); err != nil {
				t.Fatal(err)
			}
			if first, err := tt.store.Claim(bg(), id, until); first != tt.wantAfter || err != nil {
				t.Fatalf("Claim after the work = %v, %v; want %v", first, err, tt.wantAfter)
			}
		})
	}
}

// withTxOnlyTheStoresDatabaseAndServer: a Claim in a transaction of
// WithTx runs only on the store's database of the store's server
// (checked in the claim's statement): on another database, or on a copy
// of the server's data directory running beside it (same system
// identifier), it fails with ErrConfig and claims nothing. On the store's
// database, another pool, a search_path that finds another schema's table
// of the store's name first, or a temporary table of that name, change
// nothing: the claim is written in the store's table.
func withTxOnlyTheStoresDatabaseAndServer(t *testing.T) {
	p := needServer(t)
	s := newTestStore(t)
	db := "other_" + strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(uniquePrefix(), "test:"), ":"), "-", "")
	if _, err := s.pool.Exec(bg(), `CREATE DATABASE "`+db+`"`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pool.Exec(context.Background(), `DROP DATABASE IF EXISTS "`+db+`" WITH (FORCE)`) })
	otherDB := p.poolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Database = db })
	if err := Migrate(bg(), otherDB, DefaultTable); err != nil {
		t.Fatal(err)
	}
	copyOfServer := ownServer(t).pool(t) // a copy of the same template: the same system identifier
	schema := "other_schema_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := s.pool.Exec(bg(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	if err := Migrate(bg(), s.pool, schema+"."+DefaultTable); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	tests := []struct {
		name    string
		pool    *pgxpool.Pool
		prepare string // sent in the transaction before the claim
		foreign bool
	}{
		{"another database", otherDB, "", true},
		{"a copy of the server", copyOfServer, "", true},
		{"another pool on the store's database", p.pool(t), "", false},
		{"another schema first on the search_path", s.pool, "set local search_path = " + schema + ", public", false},
		{"a temporary table of the store's name", s.pool, `CREATE TEMP TABLE ` + DefaultTable + ` (LIKE public.` + DefaultTable + ` INCLUDING ALL) ON COMMIT DROP;
			INSERT INTO pg_temp.` + DefaultTable + ` (key, state, token, until) VALUES (decode('0000', 'hex'), 'm', '', '-infinity')`, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "withtx-" + strconv.Itoa(i)
			tx, err := tt.pool.Begin(bg())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(bg())
			if tt.prepare != "" {
				if _, err := tx.Exec(bg(), tt.prepare); err != nil {
					t.Fatal(err)
				}
			}
			first, err := s.Claim(WithTx(bg(), tx), id, until)
			if tt.foreign {
				if first || !errors.Is(err, ErrConfig) {
					t.Fatalf("Claim = %v, %v; want ErrConfig", first, err)
				}
				tx.Rollback(bg())
				if first, err := s.Claim(bg(), id, until); !first || err != nil {
					t.Fatalf("the store's Claim after the refusal = %v, %v; want first (nothing claimed)", first, err)
				}
				return
			}
			if !first || err != nil {
				t.Fatalf("Claim = %v, %v; want first", first, err)
			}
			if err := tx.Commit(bg()); err != nil {
				t.Fatal(err)
			}
			if first, err := s.Claim(bg(), id, until); first || err != nil {
				t.Fatalf("the store's Claim after the commit = %v, %v; want taken", first, err)
			}
		})
	}
}

// workTempTableOfTheStoresNameTakesNothing: a handler that creates a
// temporary table of the store's name (with a marker row) in the work
// receives neither the fence nor the record: Commit writes the done row
// in the store's table, and a retry finds the key done.
func workTempTableOfTheStoresNameTakesNothing(t *testing.T) {
	s := newTestStore(t)
	table := chargeTable(t, s.pool)
	for _, onCommit := range []string{" ON COMMIT DROP", ""} {
		t.Run("temp table"+onCommit, func(t *testing.T) {
			id := "temp" + strings.ReplaceAll(onCommit, " ", "-")
			w, _ := acquire(t, s, id, time.Minute)
			ctx := w.Context(bg())
			tx, _ := TxFrom(ctx)
			if _, err := tx.Exec(ctx, `CREATE TEMP TABLE `+DefaultTable+` (LIKE public.`+DefaultTable+` INCLUDING ALL)`+onCommit); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+DefaultTable+` (key, state, token, until) SELECT key, state, token, until FROM public.`+DefaultTable+` WHERE key = $1 OR key = decode('0000', 'hex')`, s.key(id)); err != nil {
				t.Fatal(err)
			}
			if err := charge(ctx, table, id, "first"); err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")); err != nil {
				t.Fatal(err)
			}
			wantRecord(t, s, id, replay.LeaseDone, []byte("fp"), []byte("r"))
			if got := chargesOf(t, s.pool, table, id); len(got) != 1 {
				t.Fatalf("charges = %q, want one", got)
			}
		})
	}
}

// workSessionStateDoesNotOutliveTheWork: what a handler changes in
// its session through statements the Tx lets through (a function's
// set_config, a temporary table, a cursor WITH HOLD, a session advisory
// lock, LISTEN through a function, a prepared statement) is gone for the
// next work on the same pooled connection, whether the work committed,
// rolled back, or was refused; the settings of the connection's startup
// (the pool's RuntimeParams) stay.
func workSessionStateDoesNotOutliveTheWork(t *testing.T) {
	p := needServer(t)
	pool := p.poolWith(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1 // every work on the same connection
		cfg.ConnConfig.RuntimeParams["application_name"] = "ctoken-reset-test"
	})
	s := storeOn(t, pool)
	var pid uint32
	ends := []struct {
		name string
		end  func(w replay.Work) error
	}{
		{"committed", func(w replay.Work) error { return w.Commit(bg(), time.Now().Add(time.Hour), nil, nil) }},
		{"rolled back", func(w replay.Work) error { return w.Rollback(bg()) }},
		{"refused (a statement failed)", func(w replay.Work) error {
			tx, _ := TxFrom(w.Context(bg()))
			tx.Exec(bg(), "select 1/0")
			return w.Commit(bg(), time.Now().Add(time.Hour), nil, nil)
		}},
	}
	for i, end := range ends {
		t.Run(end.name, func(t *testing.T) {
			id := "reset-" + strconv.Itoa(i)
			w, _ := acquire(t, s, id, time.Minute)
			ctx := w.Context(bg())
			tx, _ := TxFrom(ctx)
			for _, sql := range []string{
				"select set_config('synchronous_commit', 'off', false)",
				"select set_config('statement_timeout', '1234', false)",
				"select set_config('application_name', 'changed', false)",
				"create temp table ctoken_leak (x int)",
				"declare ctoken_cursor cursor with hold for select 1",
				"select pg_advisory_lock(55)",
			} {
				if _, err := tx.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			if _, err := tx.Prepare(ctx, "ctoken_prepared", "select 1"); err != nil {
				t.Fatal(err)
			}
			end.end(w)

			c, err := pool.Acquire(bg())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			if pid != 0 && c.Conn().PgConn().PID() != pid {
				t.Logf("the pool opened a new connection (the previous one was closed)")
			}
			pid = c.Conn().PgConn().PID()
			var commit, timeout, app string
			var temp, cursors, locks, prepared int
			if err := c.QueryRow(bg(), `SELECT current_setting('synchronous_commit'), current_setting('statement_timeout'),
				current_setting('application_name'),
				(SELECT count(*) FROM pg_class WHERE relname = 'ctoken_leak' AND relpersistence = 't'),
				(SELECT count(*) FROM pg_cursors WHERE name = 'ctoken_cursor'), (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
				(SELECT count(*) FROM pg_prepared_statements WHERE name = 'ctoken_prepared')`).Scan(
				&commit, &timeout, &app, &temp, &cursors, &locks, &prepared); err != nil {
				t.Fatal(err)
			}
			if commit != "on" || timeout != "0" || app != "ctoken-reset-test" || temp != 0 || cursors != 0 || locks != 0 || prepared != 0 {
				t.Fatalf("the next user of the connection sees synchronous_commit %s, statement_timeout %s, application_name %q, %d temp tables, %d cursors, %d advisory locks, %d prepared statements",
					commit, timeout, app, temp, cursors, locks, prepared)
			}
		})
	}
}

// workCommitRunsWithTheAcceptedSynchronousCommit: a handler's SET
// LOCAL synchronous_commit = off does not reach the work's COMMIT, which
// runs with the setting New accepted; a deferred trigger, which fires at
// COMMIT, reads it.
func workCommitRunsWithTheAcceptedSynchronousCommit(t *testing.T) {
	s := newTestStore(t)
	seen := newTable(t, s.pool, "seen_", "setting text NOT NULL")
	fn := seen + "_f"
	if _, err := s.pool.Exec(bg(), `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO `+seen+` VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+fn+`() CASCADE`) })
	table := chargeTable(t, s.pool)
	if _, err := s.pool.Exec(bg(), `CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON `+table+`
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+fn+`()`); err != nil {
		t.Fatal(err)
	}
	for i, sql := range []string{"set local synchronous_commit = off", "select set_config('synchronous_commit', 'off', true)"} {
		t.Run(sql, func(t *testing.T) {
			id := "sync-" + strconv.Itoa(i)
			w, _ := acquire(t, s, id, time.Minute)
			ctx := w.Context(bg())
			tx, _ := TxFrom(ctx)
			if _, err := tx.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
			if err := charge(ctx, table, id, "h"); err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(bg(), time.Now().Add(time.Hour), nil, nil); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := s.pool.QueryRow(bg(), `SELECT setting FROM `+seen+` ORDER BY ctid DESC LIMIT 1`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := s.Durability().SynchronousCommit; got != want {
				t.Fatalf("COMMIT ran with synchronous_commit %q, want %q", got, want)
			}
		})
	}
}
