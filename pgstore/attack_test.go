package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctoken/ctoken/replay"
)

// TestWorkAttacks: a handler's SQL, sent through the Tx, that tries to
// break what Commit guarantees (see docs/pgstore-reference.md,
// "Transactional mode").
func TestWorkAttacks(t *testing.T) {
	subtests(t, []subtest{
		{"a cursor WITH HOLD runs no code after the fence", workHoldableCursorRunsNothingAfterTheFence},
		{"a statement_timeout does not cut the standby's wait", workStatementTimeoutDoesNotCutTheStandbysWait},
		{"the session's state and objects", workSessionAttacks},
	})
}

// workHoldableCursorRunsNothingAfterTheFence: a cursor WITH HOLD left
// open runs its query at COMMIT, after the fence, where a function setting
// synchronous_commit off would make the acknowledged commit one a crash
// forgets; so when Commit returns nil the WAL must be flushed past every
// position the function recorded.
func workHoldableCursorRunsNothingAfterTheFence(t *testing.T) {
	p := ownServer(t, "-c", "wal_writer_delay=10s", "-c", "wal_writer_flush_after=1GB")
	pool := p.pool(t)
	for k, way := range workWays {
		t.Run(way.name, func(t *testing.T) {
			name := migratedTable(t, pool)
			s := storeOn(t, pool, func(o *Options) { o.Table = name })
			table := chargeTable(t, pool)
			seen := newTable(t, pool, "seen_", "k bytea NOT NULL, setting text NOT NULL, state text NOT NULL, lsn pg_lsn NOT NULL")
			mustExec(t, pool, `CREATE FUNCTION `+seen+`_late(k bytea) RETURNS int LANGUAGE plpgsql AS $$ BEGIN
				PERFORM set_config('synchronous_commit', 'off', true);
				INSERT INTO `+seen+` VALUES (k, current_setting('synchronous_commit'),
					coalesce((SELECT state FROM `+s.table+` WHERE key = k), ''), pg_current_wal_insert_lsn());
				RETURN 1; END $$`)
			t.Cleanup(func() { pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+seen+`_late(bytea)`) })
			for i, declare := range []string{
				`DECLARE ctoken_hold CURSOR WITH HOLD FOR SELECT ` + seen + `_late(%s)`,
				// Declared by a function, which the Tx does not see.
				`DO $do$ BEGIN EXECUTE $x$DECLARE ctoken_hold CURSOR WITH HOLD FOR SELECT ` + seen + `_late(%s)$x$; END $do$`,
			} {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					id := fmt.Sprintf("hold-%d-%d", k, i)
					w := way.begin(t, s, id)
					ctx := w.Context(bg())
					must(t, charge(ctx, table, id, "work"))
					tx, _ := TxFrom(ctx)
					key := fmt.Sprintf(`decode('%x', 'hex')`, s.key(id))
					mustExec(t, tx, fmt.Sprintf(declare, key))
					err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
					var n int
					var flushed bool
					must(t, pool.QueryRow(bg(), `SELECT count(*), coalesce(bool_and(pg_current_wal_flush_lsn() >= lsn), true) FROM `+seen+` WHERE k = $1 AND state = 'd'`,
						s.key(id)).Scan(&n, &flushed))
					if err == nil && !flushed {
						t.Errorf("Commit = nil, but the cursor's function ran %d times after the fence and the WAL was not flushed past it: COMMIT ran with synchronous_commit off, not %q", n, s.commitSetting())
					}
					row, _ := rowOf(t, s, id)
					charges := chargesOf(t, pool, table, id)
					switch {
					case err == nil && (row.state != "d" || len(charges) != 1):
						t.Fatalf("Commit = nil, row = %+v, charges = %q; want the work committed with the done row", row, charges)
					case err != nil && !errors.Is(err, replay.ErrRolledBack):
						t.Fatalf("Commit = %v; want nil, or the work rolled back", err)
					case err != nil && (row.state == "d" || len(charges) != 0):
						t.Fatalf("Commit = %v, row = %+v, charges = %q; want nothing kept", err, row, charges)
					}
				})
			}
		})
	}
}

// workStatementTimeoutDoesNotCutTheStandbysWait: a statement_timeout (the
// handler's SET LOCAL, or the pool's) cancels COMMIT's wait for the
// synchronous standby, and PostgreSQL then answers COMMIT as committed;
// with the standby stopped, Commit must not return nil.
func workStatementTimeoutDoesNotCutTheStandbysWait(t *testing.T) {
	primary, standby := syncPair(t)
	for k, tt := range []struct {
		name    string
		handler string // run in the work, the last statement before Commit
		pool    bool   // the pool's RuntimeParams set it
	}{
		{name: "the handler's SET LOCAL", handler: "set local statement_timeout = '300ms'"},
		// The connections begin with no timeout (AfterConnect's SET), so
		// that at load the store's setup and the work's first statements
		// do not outlast the 300 ms; the handler's SET LOCAL … TO DEFAULT
		// brings back the session's default, the pool's, for Commit alone.
		{name: "the pool's RuntimeParams", handler: "set local statement_timeout to default", pool: true},
	} {
		for i, way := range workWays {
			t.Run(tt.name+"/"+way.name, func(t *testing.T) {
				// The standby may still be replaying what the last case
				// committed while it was stopped: a commit that waits for
				// it returns once it has, before the 300 ms apply.
				mustExec(t, primary.pool(t), `SELECT pg_catalog.txid_current()`)
				pool := primary.poolWith(t, func(cfg *pgxpool.Config) {
					if tt.pool {
						cfg.ConnConfig.RuntimeParams["statement_timeout"] = "300ms"
						cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
							_, err := c.Exec(ctx, "set statement_timeout = 0")
							return err
						}
					}
				})
				s := storeOn(t, pool, func(o *Options) { o.Timeout = time.Second; o.RequireSynchronousStandby = true })
				table := chargeTable(t, pool)
				id := fmt.Sprintf("timeout-%d-%d", k, i)
				w := way.begin(t, s, id)
				ctx := w.Context(bg())
				must(t, charge(ctx, table, id, "work"))
				tx, _ := TxFrom(ctx)
				mustExec(t, tx, tt.handler)
				var timeout string
				must(t, tx.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&timeout))
				if timeout != "300ms" {
					t.Fatalf("statement_timeout = %s before Commit; want 300ms", timeout)
				}
				resume := stopStandby(t, standby)
				err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
				resume()
				if err == nil {
					t.Fatalf("Commit = nil with the synchronous standby stopped: the statement_timeout ended COMMIT's wait for it")
				}
				wantIs(t, err, ErrUnavailable, "Commit = %v; want ErrUnavailable")
			})
		}
	}
}

// workSessionAttacks: a handler's SQL that changes what the fence or the
// reset runs with, or defines objects around them, in the work that runs
// first on a new connection (which compiles the functions, once per
// session). Its Commit is nil only with the work and the done row
// committed, ErrRolledBack only with nothing kept; two works after it on
// the same connection commit, and their sessions show none of it.
func workSessionAttacks(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	role := fmt.Sprintf("ctoken_attack_%d", time.Now().UnixNano())
	mustExec(t, admin, `CREATE ROLE `+role)
	t.Cleanup(func() {
		admin.Exec(context.Background(), `DROP OWNED BY `+role)
		admin.Exec(context.Background(), `DROP ROLE `+role)
	})
	for k, way := range workWays {
		t.Run(way.name, func(t *testing.T) {
			for i, attack := range []struct {
				name string
				sql  func(s *Store, name string) []string // name: the store's table, unquoted, in public
				// stuck: the attack outlives its work (it writes the
				// store's schema) and every reset fails after COMMIT:
				// COMMIT's outcome stands, and New refuses the table
				// until the attack's function is dropped.
				stuck bool
			}{
				{"objects in pg_temp named as the fence's, pg_temp first", func(s *Store, name string) []string {
					return []string{
						`CREATE TEMP TABLE x (same boolean)`, `INSERT INTO x VALUES (true)`,
						`CREATE TEMP TABLE m (x int)`, `INSERT INTO m VALUES (1)`,
						`CREATE TEMP TABLE up (x int)`, `INSERT INTO up VALUES (1)`,
						`CREATE TEMP TABLE "` + name + `" (LIKE public."` + name + `" INCLUDING ALL)`,
						`CREATE TYPE pg_temp.interval AS (x int)`,
						`CREATE FUNCTION pg_temp.statement_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$`,
						`SET LOCAL search_path = pg_temp, public`,
					}
				}, false},
				{"plpgsql settings as the fence is compiled", func(s *Store, name string) []string {
					return []string{
						`SET LOCAL plpgsql.variable_conflict = use_column`,
						`SET LOCAL plpgsql.extra_errors = 'all'`,
						`SET LOCAL plpgsql.extra_warnings = 'all'`,
						`SET LOCAL plpgsql.print_strict_params = on`,
					}
				}, false},
				{"settings that could stop the reset", func(s *Store, name string) []string {
					return []string{
						`SELECT set_config('default_transaction_read_only', 'on', false)`,
						`SELECT set_config('default_transaction_isolation', 'serializable', false)`,
						`SELECT set_config('search_path', 'pg_temp', false)`,
						`SELECT set_config('check_function_bodies', 'off', false)`,
					}
				}, false},
				{"a superuser's setting, then a role that may not set it", func(s *Store, name string) []string {
					return []string{
						`GRANT ALL ON public."` + name + `" TO ` + role,
						`SELECT set_config('session_replication_role', 'replica', false)`,
						`SELECT set_config('role', '` + role + `', false)`,
					}
				}, false},
				{"an overload of the fence with a default, in the store's schema", func(s *Store, name string) []string {
					params := "bytea, text, timestamptz, bytea, bytea, bigint, text, text"
					if way.name == "AcquireWork" {
						params = "bytea, text, timestamptz, bytea, bytea, bigint, bigint, text, text"
					}
					return []string{`CREATE FUNCTION public."` + name + `_fence` + map[bool]string{true: "_locked", false: ""}[way.name == "AcquireWork"] +
						`"(` + params + `, x int DEFAULT 0) RETURNS int LANGUAGE sql AS $$ SELECT 0 $$`}
				}, false},
				{"an overload of the reset with a default, in the store's schema", func(s *Store, name string) []string {
					return []string{`CREATE FUNCTION public."` + name + `_reset"(x int DEFAULT 0) RETURNS int LANGUAGE sql AS $$ SELECT 0 $$`}
				}, true},
			} {
				t.Run(attack.name, func(t *testing.T) {
					pool := p.poolWith(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
					name := migratedTable(t, pool)
					t.Cleanup(func() {
						admin.Exec(context.Background(), `DROP FUNCTION IF EXISTS public."`+name+`_reset"(int)`)
						admin.Exec(context.Background(), `DROP FUNCTION IF EXISTS public."`+name+`_fence"(bytea, text, timestamptz, bytea, bytea, bigint, text, text, int)`)
						admin.Exec(context.Background(), `DROP FUNCTION IF EXISTS public."`+name+`_fence_locked"(bytea, text, timestamptz, bytea, bytea, bigint, bigint, text, text, int)`)
					})
					var r recorder
					s := storeOn(t, pool, func(o *Options) { o.Table = name; r.options(o) })
					table := chargeTable(t, pool)
					mustExec(t, admin, `GRANT ALL ON `+table+` TO `+role)
					for j, attacked := range []bool{true, false, false} {
						id := fmt.Sprintf("session-%d-%d-%d", k, i, j)
						w := way.begin(t, s, id)
						ctx := w.Context(bg())
						tx, _ := TxFrom(ctx)
						if !attacked {
							var settings string
							must(t, tx.QueryRow(ctx, `SELECT concat_ws(' ', current_user, session_user, current_setting('session_replication_role'),
								current_setting('default_transaction_read_only'), current_setting('default_transaction_isolation'),
								current_setting('search_path'), current_setting('check_function_bodies'), coalesce(current_setting('plpgsql.variable_conflict', true), 'error'),
								coalesce(current_setting('plpgsql.extra_errors', true), 'none'), (SELECT count(*) FROM pg_class WHERE relpersistence = 't'),
								(SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.oid = pg_my_temp_schema()))`).Scan(&settings))
							if want := "postgres postgres origin off read committed \"$user\", public on error none 0 0"; settings != want {
								t.Errorf("work %d: the session shows %q, want %q", j, settings, want)
							}
						}
						must(t, charge(ctx, table, id, "work"))
						var pid int32
						must(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
						if attacked {
							for _, sql := range attack.sql(s, name) {
								mustExec(t, tx, sql)
							}
						}
						err := w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r"))
						row, _ := rowOf(t, s, id)
						charges := chargesOf(t, admin, table, id)
						committed := row.state == "d" && string(row.result) == "r" && len(charges) == 1
						switch {
						case err == nil && !committed:
							t.Fatalf("work %d: Commit = nil, row = %+v, charges = %q; want the work committed with the done row", j, row, charges)
						case errors.Is(err, replay.ErrRolledBack) && (row.state == "d" || len(charges) != 0):
							t.Fatalf("work %d: Commit = %v, row = %+v, charges = %q; want nothing kept", j, err, row, charges)
						case err != nil && !attacked:
							t.Fatalf("work %d, after the attack: Commit = %v", j, err)
						case err != nil:
							t.Logf("work %d: Commit = %v (committed: %v)", j, err, committed)
						}
						if attacked && attack.stuck {
							wantIs(t, err, nil, "work %d: Commit = %v; want COMMIT's outcome (committed) to stand", j)
							// The work's session ended: its connection closed.
							waitSessionEnded(t, admin, pid, 5*time.Second)
							if _, lines := r.count(0, "", "WARN", "reset after a committed work failed"); lines != 1 {
								t.Fatalf("%d warnings of the failed reset; want 1", lines)
							}
							newRefused(t, admin, Options{Table: name, Prefix: "stuck:"}, "with the overload in place", "ambiguous")
							mustExec(t, admin, `DROP FUNCTION public."`+name+`_reset"(int)`)
							waitForClaim(t, s, "the overload dropped", nil)
						}
					}
				})
			}
		})
	}
}
