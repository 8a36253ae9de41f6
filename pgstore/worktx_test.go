package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestWorkTx pins the handler's transaction in a work ([TxFrom] of its
// context): what it refuses, and that an escape never ends as a success.
func TestWorkTx(t *testing.T) {
	subtests(t, []subtest{
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
		{"the fence is the store's whatever the handler defines", workFenceIsTheStoresWhateverTheHandlerDefines},
		{"a handler's operators never reach the fence", workHandlersOperatorsNeverReachTheFence},
	})
}

// workTxRefusesTheHandlersCommitAndRollback: the handler's transaction
// refuses Commit and Rollback (the Work ends it), allows savepoints, and
// the work still commits afterwards.
func workTxRefusesTheHandlersCommitAndRollback(t *testing.T) {
	s, table := storeWithCharges(t)
	w, ctx, tx := acquireTx(t, s, "h")
	for name, end := range map[string]func(context.Context) error{"Commit": tx.Commit, "Rollback": tx.Rollback} {
		wantIs(t, end(ctx), errTxOwned, "handler's %s = %v, want a refusal", name)
	}
	if tx.Conn() != nil {
		t.Fatal("Conn() is not nil: statements on it would escape the lock")
	}
	// A savepoint rolled back discards its charge; one committed keeps it;
	// pgx.BeginFunc runs on savepoints too.
	sp, err := tx.Begin(ctx)
	must(t, err)
	mustExec(t, sp, `INSERT INTO `+table+` (key, holder) VALUES ('h', 'discarded')`)
	must(t, sp.Rollback(ctx))
	wantIs(t, errOf(sp.Exec(ctx, `SELECT 1`)), pgx.ErrTxClosed, "statement on a rolled-back savepoint = %v, want ErrTxClosed")
	if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		_, err := sp.Exec(ctx, `INSERT INTO `+table+` (key, holder) VALUES ('h', 'kept')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	must(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil))
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
	for _, e := range workEnds(bg()) {
		endName, end := e.name, e.end
		t.Run("after "+endName, func(t *testing.T) {
			w, ctx, tx := acquireTx(t, s, "end-"+endName)
			sp, err := tx.Begin(ctx)
			must(t, err)
			rows, err := sp.Query(ctx, `SELECT generate_series(1, 10000)`)
			if err != nil || !rows.Next() {
				t.Fatal(err)
			}
			must(t, end(w))
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
	_, ctx, tx := acquireTx(t, s, "busy")
	rows, err := tx.Query(ctx, `SELECT generate_series(1, 3)`)
	must(t, err)
	wantIs(t, errOf(tx.Exec(ctx, `SELECT 1`)), errCursorOpen, "Exec with Rows open = %v, want refused")
	n, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(n) != 3 {
		t.Fatal(n, err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT 1`)
	b.Queue(`SELECT 2`)
	br := tx.SendBatch(ctx, b)
	wantIs(t, errOf(tx.Exec(ctx, `SELECT 1`)), errCursorOpen, "Exec with a batch open = %v, want refused")
	for want := 1; want <= 2; want++ {
		var got int
		if err := br.QueryRow().Scan(&got); err != nil || got != want {
			t.Fatal(got, err)
		}
	}
	must(t, br.Close())
	wantIs(t, errOf(tx.Exec(ctx, `SELECT 1`)), nil, "Exec after closing = %v")
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
	w, ctx, tx := acquireTx(t, s, "lo")
	lo := tx.LargeObjects()
	oid, err := lo.Create(ctx, 0)
	must(t, err)
	obj, err := lo.Open(ctx, oid, pgx.LargeObjectModeWrite|pgx.LargeObjectModeRead)
	must(t, err)
	must(t, errOf(obj.Write([]byte("receipt"))))
	must(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil))
	t.Cleanup(func() { s.pool.Exec(bg(), `SELECT lo_unlink($1)`, oid) })
	var got []byte
	if err := s.pool.QueryRow(bg(), `SELECT lo_get($1)`, oid).Scan(&got); err != nil || string(got) != "receipt" {
		t.Fatalf("large object = %q, %v", got, err)
	}
	wantIs(t, errOf(obj.Write([]byte("late"))), pgx.ErrTxClosed, "large object write after the end = %v, want ErrTxClosed")
}

// queryErr runs sql with Query on tx and returns the error of the whole
// read.
func queryErr(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	rows, err := tx.Query(ctx, sql, args...)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	return err
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
	s, table := storeWithCharges(t)
	sends := []struct {
		name string
		send func(ctx context.Context, tx pgx.Tx, sql string) error
	}{
		{"Exec", func(ctx context.Context, tx pgx.Tx, sql string) error { _, err := tx.Exec(ctx, sql); return err }},
		{"Exec in the simple protocol", func(ctx context.Context, tx pgx.Tx, sql string) error {
			_, err := tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
			return err
		}},
		{"Query", func(ctx context.Context, tx pgx.Tx, sql string) error { return queryErr(ctx, tx, sql) }},
		{"SendBatch", func(ctx context.Context, tx pgx.Tx, sql string) error {
			b := &pgx.Batch{}
			b.Queue("select 1")
			b.Queue(sql)
			return tx.SendBatch(ctx, b).Close()
		}},
		// pgx applies a QueryRewriter's SQL, and a QueryExecMode placed
		// after QueryResultFormats, in Query and in a batch.
		{"Query with a rewriter", func(ctx context.Context, tx pgx.Tx, sql string) error {
			return queryErr(ctx, tx, "select 1", rewriteTo(sql))
		}},
		{"SendBatch with a rewriter", func(ctx context.Context, tx pgx.Tx, sql string) error {
			b := &pgx.Batch{}
			b.Queue("select 1", rewriteTo(sql))
			return tx.SendBatch(ctx, b).Close()
		}},
		// A rewriter whose arguments begin with another rewriter: pgx
		// would take that as an argument; sent on, it would be applied
		// unchecked. Refused.
		{"Exec with a rewriter returning a rewriter", func(ctx context.Context, tx pgx.Tx, sql string) error {
			_, err := tx.Exec(ctx, "select 1", rewriteThen{rewriteTo(sql)})
			return err
		}},
		{"Query with a rewriter returning a rewriter", func(ctx context.Context, tx pgx.Tx, sql string) error {
			return queryErr(ctx, tx, "select 1", rewriteThen{rewriteTo(sql)})
		}},
		{"SendBatch with a rewriter returning a rewriter", func(ctx context.Context, tx pgx.Tx, sql string) error {
			b := &pgx.Batch{}
			b.Queue("select 1", rewriteThen{rewriteTo(sql)})
			return tx.SendBatch(ctx, b).Close()
		}},
		{"Query simple behind result formats", func(ctx context.Context, tx pgx.Tx, sql string) error {
			return queryErr(ctx, tx, "select 1; "+sql, pgx.QueryResultFormats{pgx.TextFormatCode}, pgx.QueryExecModeSimpleProtocol)
		}},
	}
	n := 0
	for _, send := range sends {
		for _, sql := range handlerStatements {
			t.Run(send.name+"/"+sql, func(t *testing.T) {
				n++
				id := "stmt-" + strconv.Itoa(n)
				w, ctx, tx := acquireTx(t, s, id)
				must(t, charge(ctx, table, id, "before"))
				if err := send.send(ctx, tx, sql); err == nil {
					t.Fatalf("%q was accepted", sql)
				}
				wantIs(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")), replay.ErrRolledBack, "Commit = %v, want ErrRolledBack")
				wantChargeCount(t, s.pool, table, id, 0)
				if row, _ := rowOf(t, s, id); row.state != "l" {
					t.Fatalf("lease row state = %q, want the lease left for the holder to release", row.state)
				}
			})
		}
	}
}

// rewriteTo is a pgx.QueryRewriter that replaces the statement with sql.
type rewriteTo string

func (r rewriteTo) RewriteQuery(_ context.Context, _ *pgx.Conn, _ string, _ []any) (string, []any, error) {
	return string(r), nil, nil
}

// rewriteThen is a pgx.QueryRewriter whose arguments begin with another.
type rewriteThen struct{ next pgx.QueryRewriter }

func (r rewriteThen) RewriteQuery(_ context.Context, _ *pgx.Conn, _ string, _ []any) (string, []any, error) {
	return "select 1", []any{r.next}, nil
}

// workTxAllowsStatementsThatEndWithIt: what ends with the
// transaction (SET LOCAL, SET TRANSACTION, SET CONSTRAINTS, a savepoint
// through Begin) is sent, and the work commits.
func workTxAllowsStatementsThatEndWithIt(t *testing.T) {
	s, table := storeWithCharges(t)
	for i, sql := range []string{"set local statement_timeout = 10000", "SET LOCAL synchronous_commit = on",
		"set constraints all deferred", "/* commit */ select 1", "select 'commit'", "-- rollback\nselect 1"} {
		t.Run(sql, func(t *testing.T) {
			id := "allowed-" + strconv.Itoa(i)
			w, ctx, tx := acquireTx(t, s, id)
			mustExec(t, tx, sql)
			must(t, charge(ctx, table, id, "after"))
			must(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil))
			wantChargeCount(t, s.pool, table, id, 1)
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
	must(t, wk.beginLocked(bg()))
	if _, err := wk.conn.PgConn().Exec(bg(), sql).ReadAll(); err != nil {
		t.Logf("%s: %v", sql, err)
	}
}

// spoofSchema creates the schema ctoken_spoof, whose txid_current
// returns the setting ctoken.xid (when set) and whose set_config does nothing: a
// search_path that names it before pg_catalog makes unqualified calls
// of the fence reach them.
func spoofSchema(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	for _, sql := range []string{
		`CREATE SCHEMA IF NOT EXISTS ctoken_spoof`,
		`CREATE OR REPLACE FUNCTION ctoken_spoof.txid_current() RETURNS bigint LANGUAGE sql AS $$
			SELECT coalesce(nullif(pg_catalog.current_setting('ctoken.xid', true), '')::bigint, pg_catalog.txid_current()) $$`,
		`CREATE OR REPLACE FUNCTION ctoken_spoof.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT $2 $$`,
	} {
		mustExec(t, pool, sql)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS ctoken_spoof CASCADE`) })
}

// spoofedChain ends the work's transaction (COMMIT AND CHAIN) and then
// makes txid_current, unqualified, return the id of the work's.
const spoofedChain = "select set_config('ctoken.xid', txid_current()::text, false); commit and chain; " +
	"set local search_path = ctoken_spoof, pg_catalog, public"

// workCommitAfterAnEscapeIsNeverASuccess: SQL that ended the work's
// transaction past the Tx's refusals (sent on its connection directly)
// is caught by the fence's transaction id, or by the session found idle:
// Commit fails with ErrUnavailable and errEscaped, never nil, never
// ErrRolledBack or ErrLeaseLost (the writes before the escape may be
// committed), and the key is recorded as done without a record, so the
// work never runs a second time: a retry's AcquireRecord finds it done.
// A one-time token claimed in the work is accepted at most once.
func workCommitAfterAnEscapeIsNeverASuccess(t *testing.T) {
	s, table := storeWithCharges(t)
	tests := []struct {
		sql        string
		maxCharges int // charges the escape may have committed
	}{
		{"commit; begin", 1},
		{"rollback; begin", 0},
		{"commit and chain", 1},
		{"commit", 1},
		{"rollback", 0},
		{"select 1; commit; begin; select 2", 1},
		{"commit; begin; select 1/0", 1},
		{"rollback; begin; select 1/0", 0},
		{spoofedChain, 1},
	}
	spoofSchema(t, s.pool)
	for k, way := range workWays {
		for i, tt := range tests {
			for j, prepare := range []struct {
				name string
				fn   func(s *Store)
				done bool // Commit's context is done: the session cannot say which transaction it is in
			}{
				{"", nil, false},
				{" with a recheck refusing", refuseAll, false},
				{" with a recheck refusing and the context done", refuseAll, true},
			} {
				t.Run(way.name+"/"+tt.sql+prepare.name, func(t *testing.T) {
					s := storeOn(t, s.pool)
					id := fmt.Sprintf("escape-%d-%d-%d", k, i, j)
					token := fmt.Sprintf("once-%d-%d-%d", k, i, j)
					w := way.begin(t, s, id)
					ctx := w.Context(bg())
					if first, err := s.Claim(ctx, token, time.Now().Add(time.Hour)); !first || err != nil {
						t.Fatalf("Claim = %v, %v", first, err)
					}
					must(t, charge(ctx, table, id, "before"))
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
					cctx, cancel := context.WithCancel(bg())
					if prepare.done {
						cancel()
					}
					err := w.Commit(cctx, time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
					cancel()
					if tt.maxCharges == 0 && (strings.HasSuffix(tt.sql, "1/0") || prepare.done) && errors.Is(err, replay.ErrRolledBack) {
						// The work's transaction was rolled back by the
						// escape (and the next one aborted, or the session
						// could not say which it was in): nothing was
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
}

// workWays are the two ways a work begins: BeginWork after a committed
// lease (AcquireRecord), and AcquireWork, the middlewares' one-commit
// path, whose lease is the work's own transaction.
var workWays = []struct {
	name  string
	begin func(t *testing.T, s *Store, id string) replay.Work
}{
	{"BeginWork", func(t *testing.T, s *Store, id string) replay.Work { w, _ := acquire(t, s, id, time.Minute); return w }},
	{"AcquireWork", func(t *testing.T, s *Store, id string) replay.Work { return acquireWork(t, s, id, []byte("fp-"+id)) }},
}

// stmtcacheName is the name pgx's statement cache prepares sql under:
// one a handler can compute from the SQL.
func stmtcacheName(sql string) string {
	digest := sha256.Sum256([]byte(sql))
	return "stmtcache_" + hex.EncodeToString(digest[:24])
}

// fenceOf is the fence's call for a work begun by way (a name of
// workWays), and the types of its parameters.
func fenceOf(s *Store, way string) (call, params string) {
	if way == "AcquireWork" {
		return s.lockedFenceCall, "bytea, text, timestamptz, bytea, bytea, bigint, bigint, text, text"
	}
	return s.fenceCall, "bytea, text, timestamptz, bytea, bytea, bigint, text, text"
}

// workFenceIsTheStoresWhateverTheHandlerDefines: a handler's function of
// the fence's name first on its search_path, or a statement it prepares
// under the call's text or a pgx cache name, never runs in the fence's
// place: Commit commits the work with the done row (or, refused, neither),
// the handler's mark is never written, and the next work on the
// connection commits. Nor does a statement a handler's SQL (a DO block,
// which the Tx cannot see into) prepares under the cache name of the
// fence, which the connection's statement cache holds from the work
// before (DEALLOCATE, then PREPARE ... AS SELECT 0): the store's
// statements after the handler's are sent unnamed, and the connection,
// holding a statement prepared by SQL, is closed rather than pooled.
func workFenceIsTheStoresWhateverTheHandlerDefines(t *testing.T) {
	p := needServer(t)
	for k, way := range workWays {
		t.Run(way.name, func(t *testing.T) {
			for i, attack := range []struct {
				name    string
				refused bool // the Tx refuses it: the work rolls back
				do      func(ctx context.Context, tx pgx.Tx, s *Store, marks string) error
			}{
				{"a function of the fence's name first on the search_path", false, func(ctx context.Context, tx pgx.Tx, s *Store, marks string) error {
					schema := fmt.Sprintf("attacker_%d", time.Now().UnixNano())
					call, params := fenceOf(s, way.name)
					name, _, _ := strings.Cut(strings.TrimPrefix(strings.SplitN(call, ".", 2)[1], `"`), `"(`)
					for _, sql := range []string{
						`CREATE SCHEMA ` + schema,
						`CREATE FUNCTION ` + schema + `.` + name + `(` + params + `) RETURNS int LANGUAGE sql AS $$ INSERT INTO ` + marks + ` VALUES ('fence', 'attack'); SELECT 0 $$`,
						`CREATE FUNCTION ` + schema + `.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ INSERT INTO ` + marks + ` VALUES ('set_config', 'attack'); SELECT '' $$`,
						`SET LOCAL search_path = ` + schema + `, pg_catalog, public`,
					} {
						if _, err := tx.Exec(ctx, sql); err != nil {
							return err
						}
					}
					return nil
				}},
				{"statements prepared by SQL", false, func(ctx context.Context, tx pgx.Tx, s *Store, marks string) error {
					_, err := tx.Exec(ctx, `DO $$ BEGIN EXECUTE 'PREPARE ctoken_attack AS INSERT INTO `+marks+` VALUES (''prepared'', ''attack'')'; END $$`)
					return err
				}},
				{"prepared under pgx's cache prefix", true, func(ctx context.Context, tx pgx.Tx, s *Store, marks string) error {
					if _, err := tx.Prepare(ctx, "stmtcache_0", "select 0"); err == nil {
						return errors.New("Prepare under pgx's cache prefix was not refused")
					}
					return nil
				}},
				{"the fence's cache name prepared by SQL", false, func(ctx context.Context, tx pgx.Tx, s *Store, marks string) error {
					call, params := fenceOf(s, way.name)
					name := stmtcacheName(call)
					_, err := tx.Exec(ctx, `DO $$ BEGIN
						BEGIN EXECUTE 'DEALLOCATE `+name+`'; EXCEPTION WHEN invalid_sql_statement_name THEN NULL; END;
						EXECUTE 'PREPARE `+name+`(`+params+`) AS SELECT 0'; END $$`)
					return err
				}},
			} {
				t.Run(attack.name, func(t *testing.T) {
					// One connection: each work runs on the one before's.
					pool := p.poolWith(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
					s := storeOn(t, pool)
					table := chargeTable(t, pool)
					marks := chargeTable(t, pool)
					for j, attacked := range []bool{false, true, false} {
						id := fmt.Sprintf("fence-fn-%d-%d-%d", k, i, j)
						w := way.begin(t, s, id)
						ctx := w.Context(bg())
						must(t, charge(ctx, table, id, "work"))
						if attacked {
							tx, _ := TxFrom(ctx)
							must(t, attack.do(ctx, tx, s, marks))
						}
						err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
						row, _ := rowOf(t, s, id)
						charges := chargesOf(t, pool, table, id)
						if attacked && attack.refused {
							wantIs(t, err, replay.ErrRolledBack, "work %d: Commit = %v; want ErrRolledBack", j)
							if row.state == "d" || len(charges) != 0 {
								t.Fatalf("work %d: row = %+v, charges = %q; want neither the done row nor the charge", j, row, charges)
							}
							continue
						}
						if err != nil || row.state != "d" || string(row.result) != "r" || len(charges) != 1 {
							t.Fatalf("work %d: Commit = %v, row = %+v, charges = %q; want the work committed with the done row", j, err, row, charges)
						}
					}
					var n int
					if err := pool.QueryRow(bg(), `SELECT count(*) FROM `+marks).Scan(&n); err != nil || n != 0 {
						t.Fatalf("the handler's functions or statements ran %d times in the store's place (%v)", n, err)
					}
				})
			}
		})
	}
}

// workRollbackAfterAnEscapeKeepsTheKey: a handler that escaped its
// transaction and then failed must not run again over the writes the
// escape kept, so Rollback reports the escape and records the key as done
// without a record (a token claimed before stays claimed), on both ways
// in; a work that did not escape still rolls back with nil.
func workRollbackAfterAnEscapeKeepsTheKey(t *testing.T) {
	s, table := storeWithCharges(t)
	escapes := []struct {
		name, sql  string
		maxCharges int  // charges the escape may have committed
		committed  bool // the work's own transaction committed (its token's claim kept)
	}{
		{"commit then begin", "commit; begin", 1, true},
		{"commit", "commit", 1, true},
		{"rollback then begin", "rollback; begin", 0, false},
		{"rollback, a write, begin", "rollback; insert into " + table + " values ('%s', 'autocommit'); begin", 1, false},
		{"commit and chain, txid_current spoofed", spoofedChain, 1, true},
	}
	spoofSchema(t, s.pool)
	for i, way := range workWays {
		for j, e := range escapes {
			t.Run(way.name+"/"+e.name, func(t *testing.T) {
				id := fmt.Sprintf("rollback-escape-%d-%d", i, j)
				token := "once-" + id
				w := way.begin(t, s, id)
				ctx := w.Context(bg())
				if first, err := s.Claim(ctx, token, time.Now().Add(time.Hour)); !first || err != nil {
					t.Fatalf("Claim = %v, %v", first, err)
				}
				must(t, charge(ctx, table, id, "before"))
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
			w := way.begin(t, s, id)
			must(t, charge(w.Context(bg()), table, id, "discarded"))
			must(t, w.Rollback(bg()))
			wantIs(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil), nil, "Commit after Rollback = %v, want Rollback's nil")
			wantChargeCount(t, s.pool, table, id, 0)
		})
	}
}

// workEscapeWithTheLeaseLostKeepsOneCharge: a handler that ends its
// transaction past the Tx and writes again while its lease runs out and a
// second holder runs the same key: the first holder's Commit reports the
// escape (neither ErrLeaseLost nor ErrRolledBack), and only the second
// holder's charge is committed. (An escape the Tx refuses rolls the work
// back: workTxRefusesStatementsThatEscapeTheTransaction.)
func workEscapeWithTheLeaseLostKeepsOneCharge(t *testing.T) {
	s, table := storeWithCharges(t)
	until := time.Now().Add(time.Hour)
	id := "lost-raw"
	w1, _ := acquire(t, s, id, time.Minute)
	ctx := w1.Context(bg())
	must(t, charge(ctx, table, id, "first"))
	sendRaw(t, w1, "rollback; begin")
	must(t, charge(ctx, table, id, "first-again"))
	expire(t, s, id)
	w2, _ := acquire(t, s, id, time.Minute)
	must(t, charge(w2.Context(bg()), table, id, "second"))
	must(t, w2.Commit(bg(), until, []byte("fp"), []byte("second")))
	err := w1.Commit(bg(), until, []byte("fp"), []byte("first"))
	if err == nil || errors.Is(err, replay.ErrLeaseLost) || errors.Is(err, replay.ErrRolledBack) || !errors.Is(err, errEscaped) {
		t.Fatalf("first holder's Commit = %v, want the escape reported", err)
	}
	if got := chargesOf(t, s.pool, table, id); len(got) != 1 || got[0] != "second" {
		t.Fatalf("charges = %q, want only the second holder's", got)
	}
	wantRecord(t, s, id, replay.LeaseDone, []byte("fp"), []byte("second"))
}

// workTxUsedWhileCommitRuns (run it with -race): goroutines keep
// writing and reading through the handler's transaction while Commit
// runs. Every statement either completes before the end, and is then
// committed, or fails with pgx.ErrTxClosed: the rows committed are
// exactly the inserts that returned nil.
func workTxUsedWhileCommitRuns(t *testing.T) {
	s, table := storeWithCharges(t)
	for round := range 5 {
		id := fmt.Sprintf("late-%d", round)
		w, ctx, tx := acquireTx(t, s, id)
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
		must(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil))
		wg.Wait()
		if got := len(chargesOf(t, s.pool, table, id)); int64(got) != inserted.Load() {
			t.Fatalf("round %d: %d rows committed, %d inserts returned nil", round, got, inserted.Load())
		}
	}
}

// workHandlersOperatorsNeverReachTheFence: a handler that creates, in a
// schema of its own, an "=" on bytea and on text that is always true, and
// names that schema before pg_catalog on its search_path (SET LOCAL, which
// the Tx allows), does not reach the fence: the fence runs under a
// search_path of pg_catalog alone, so it writes the done row of its own
// key only. Another key's live lease stays a lease (with the handler's
// operator, the fence's UPDATE matched it too and wrote this work's record
// into it), and the other key's work still commits.
func workHandlersOperatorsNeverReachTheFence(t *testing.T) {
	s, table := storeWithCharges(t)
	for _, sql := range []string{
		`CREATE SCHEMA IF NOT EXISTS ctoken_op`,
		`CREATE OR REPLACE FUNCTION ctoken_op.yes(bytea, bytea) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$`,
		`CREATE OR REPLACE FUNCTION ctoken_op.yes(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$`,
		`DO $$ BEGIN CREATE OPERATOR ctoken_op.= (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = ctoken_op.yes); EXCEPTION WHEN duplicate_function THEN NULL; END $$`,
		`DO $$ BEGIN CREATE OPERATOR ctoken_op.= (LEFTARG = text, RIGHTARG = text, FUNCTION = ctoken_op.yes); EXCEPTION WHEN duplicate_function THEN NULL; END $$`,
	} {
		mustExec(t, s.pool, sql)
	}
	t.Cleanup(func() { s.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS ctoken_op CASCADE`) })

	other, _ := acquire(t, s, "op-other", time.Minute)
	w, ctx, tx := acquireTx(t, s, "op-spoofer")
	must(t, charge(ctx, table, "op-spoofer", "spoofer"))
	mustExec(t, tx, "set local search_path = ctoken_op, pg_catalog, public")
	must(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp-op-spoofer"), []byte("spoofer's record")))
	var state string
	must(t, s.pool.QueryRow(bg(), `SELECT state FROM `+s.table+` WHERE key = $1`, s.key("op-other")).Scan(&state))
	if state != "l" {
		t.Fatalf("the other key's row is %q after the spoofer's commit; want its lease ('l')", state)
	}
	must(t, charge(other.Context(bg()), table, "op-other", "other"))
	wantIs(t, other.Commit(bg(), time.Now().Add(time.Hour), []byte("fp-op-other"), []byte("other's record")), nil, "the other key's Commit = %v; want nil")
	wantChargeCount(t, s.pool, table, "op-other", 1)
}
