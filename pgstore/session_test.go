package pgstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
			w, ctx, tx := acquireTx(t, s, id)
			mustExec(t, tx, "select set_config('synchronous_commit', 'off', false)")
			mustExec(t, tx, "select set_config('statement_timeout', '1234', false)")
			mustExec(t, tx, "select set_config('application_name', 'changed', false)")
			mustExec(t, tx, "create temp table ctoken_leak (x int)")
			mustExec(t, tx, "declare ctoken_cursor cursor with hold for select 1")
			mustExec(t, tx, "select pg_advisory_lock(55)")
			// A prepared statement of SQL, through a function.
			mustExec(t, tx, "do $$ begin execute 'prepare ctoken_sql_prepared as select 1'; end $$")
			must(t, errOf(tx.Prepare(ctx, "ctoken_prepared", "select 1")))
			if err := end.end(w); (err != nil) != (i == 2) {
				t.Fatalf("%s: %v", end.name, err)
			}

			c, err := pool.Acquire(bg())
			must(t, err)
			defer c.Release()
			if pid != 0 && c.Conn().PgConn().PID() != pid {
				t.Logf("the pool opened a new connection (the previous one was closed)")
			}
			pid = c.Conn().PgConn().PID()
			// Temporary tables of this session only: pg_class also lists
			// those of a closed session whose backend has not exited yet.
			var commit, timeout, app string
			var temp, cursors, locks, prepared int
			must(t, c.QueryRow(bg(), `SELECT current_setting('synchronous_commit'), current_setting('statement_timeout'),
				current_setting('application_name'),
				(SELECT count(*) FROM pg_class WHERE relname = 'ctoken_leak' AND relpersistence = 't' AND relnamespace = pg_my_temp_schema()),
				(SELECT count(*) FROM pg_cursors WHERE name = 'ctoken_cursor'), (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
				(SELECT count(*) FROM pg_prepared_statements WHERE name IN ('ctoken_prepared', 'ctoken_sql_prepared'))`).Scan(
				&commit, &timeout, &app, &temp, &cursors, &locks, &prepared))
			if commit != "on" || timeout != "0" || app != "ctoken-reset-test" || temp != 0 || cursors != 0 || locks != 0 || prepared != 0 {
				t.Fatalf("the next user of the connection sees synchronous_commit %s, statement_timeout %s, application_name %q, %d temp tables, %d cursors, %d advisory locks, %d prepared statements",
					commit, timeout, app, temp, cursors, locks, prepared)
			}
		})
	}
}
