package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestWorkFunctions pins the table's functions (functions.go).
func TestWorkFunctions(t *testing.T) {
	subtests(t, []subtest{
		{"New refuses functions missing or differing", newRefusesFunctionsMissingOrDiffering},
		{"New refuses a role that may not execute them", newRefusesARoleThatMayNotExecuteTheFunctions},
		{"a recheck refuses a function replaced", recheckRefusesAFunctionReplaced},
		{"migrating again leaves them alone", migratingAgainLeavesTheFunctionsAlone},
		{"Schema's SQL makes them in the table's schema", schemaMakesTheFunctionsInTheTablesSchema},
	})
}

// wantFunctionsRefused checks that New on the table refuses with ErrConfig
// naming the functions, and accepts it again once Migrate ran.
func wantFunctionsRefused(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	newRefused(t, pool, Options{Table: name, Prefix: "fn:"}, "before Migrate", "functions")
	must(t, Migrate(bg(), pool, name))
	s := storeOn(t, pool, func(o *Options) { o.Table = name })
	commitWork(t, s, "after-migrate")
}

// commitWork runs a work of AcquireWork and one of BeginWork for id on s
// and wants both committed with their done rows.
func commitWork(t *testing.T, s *Store, id string) {
	t.Helper()
	for _, way := range workWays {
		id := id + "-" + way.name
		w := way.begin(t, s, id)
		tx, err := TxFrom(w.Context(bg()))
		must(t, err)
		mustExec(t, tx, "select 1")
		wantIs(t, w.Commit(bg(), time.Now().Add(time.Hour), []byte("fp"), []byte("r")), nil, "%s: Commit = %v", way.name)
		if row, _ := rowOf(t, s, id); row.state != "d" || string(row.result) != "r" {
			t.Fatalf("%s: row = %+v; want done with its record", way.name, row)
		}
	}
}

func newRefusesFunctionsMissingOrDiffering(t *testing.T) {
	pool := needServer(t).pool(t)
	for _, change := range []struct {
		name, sql string
		fn        int // the function changed: its index in fnSigs
	}{
		{"function 0 dropped", `DROP FUNCTION %s`, 0},
		{"function 1 dropped", `DROP FUNCTION %s`, 1},
		{"function 2 dropped", `DROP FUNCTION %s`, 2},
		{"another body", `CREATE OR REPLACE FUNCTION %s RETURNS int LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN 0; END $$`, 0},
		{"no search_path", `ALTER FUNCTION %s RESET search_path`, 0},
		{"another search_path", `ALTER FUNCTION %s SET search_path = public, pg_catalog`, 0},
		{"another language", `CREATE OR REPLACE FUNCTION %s RETURNS int LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$ SELECT 0 $$`, 0},
		// Neither changes the source or the setting. A STRICT fence
		// returns NULL without running when an argument is NULL (a work
		// without a record): Commit would be nil without the done row.
		{"strict", `ALTER FUNCTION %s STRICT`, 0},
		{"security definer", `ALTER FUNCTION %s SECURITY DEFINER`, 0},
	} {
		t.Run(change.name, func(t *testing.T) {
			name := migratedTable(t, pool)
			s := storeOn(t, pool, func(o *Options) { o.Table = name })
			mustExec(t, pool, fmt.Sprintf(change.sql, s.fnSigs[change.fn]))
			wantFunctionsRefused(t, pool, name)
		})
	}
}

// recheckRefusesAFunctionReplaced: a fence replaced while a store runs
// (CREATE OR REPLACE FUNCTION by a role that owns it) makes the next
// recheck refuse every call, until Migrate puts this version's back.
func recheckRefusesAFunctionReplaced(t *testing.T) {
	pool := needServer(t).pool(t)
	name := migratedTable(t, pool)
	s := storeOn(t, pool, func(o *Options) { o.Table = name; o.RecheckInterval = 50 * time.Millisecond })
	mustExec(t, pool, `CREATE OR REPLACE FUNCTION `+s.fnSigs[1]+` RETURNS int LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN 0; END $$`)
	waitForClaim(t, s, "replaced", ErrConfig)
	if _, w, err := s.AcquireWork(bg(), "refused", time.Minute, []byte("fp")); w != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("AcquireWork while refused = %v, %v; want ErrConfig", w, err)
	}
	must(t, Migrate(bg(), pool, name))
	waitForClaim(t, s, "restored", nil)
	commitWork(t, s, "restored")
}

// migratingAgainLeavesTheFunctionsAlone: a second Migrate writes no new
// version of a function (their rows' xmin stay).
func migratingAgainLeavesTheFunctionsAlone(t *testing.T) {
	pool := needServer(t).pool(t)
	name := migratedTable(t, pool)
	s := storeOn(t, pool, func(o *Options) { o.Table = name })
	xmins := func() string {
		var x string
		must(t, pool.QueryRow(bg(), `SELECT string_agg(xmin::text, ',' ORDER BY oid) FROM pg_proc WHERE oid = ANY (SELECT to_regprocedure(unnest($1::text[])))`, s.fnSigs).Scan(&x))
		return x
	}
	before := xmins()
	if strings.Count(before, ",") != 2 {
		t.Fatalf("functions' xmin = %q; want three", before)
	}
	must(t, Migrate(bg(), pool, name))
	if after := xmins(); after != before {
		t.Fatalf("functions' xmin %q after a second Migrate, %q before: rewritten", after, before)
	}
}

// schemaMakesTheFunctionsInTheTablesSchema: Schema's SQL for an
// unqualified name, run by a session whose search_path names a schema of
// its own first, makes the table and its functions there; a store on that
// schema's table runs works.
func schemaMakesTheFunctionsInTheTablesSchema(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	schema := fmt.Sprintf("fn_schema_%d", time.Now().UnixNano())
	mustExec(t, admin, `CREATE SCHEMA `+schema)
	t.Cleanup(func() { admin.Exec(bg(), `DROP SCHEMA `+schema+` CASCADE`) })
	pool := p.poolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["search_path"] = schema + ", public" })
	name := uniqueTable(t, admin)
	sql, err := Schema(name)
	must(t, err)
	mustExec(t, pool, "BEGIN;\n"+sql+"COMMIT;")
	s := storeOn(t, pool, func(o *Options) { o.Table = name })
	if !strings.HasPrefix(s.table, `"`+schema+`".`) {
		t.Fatalf("table %s; want it in %s", s.table, schema)
	}
	var n int
	if err := admin.QueryRow(bg(), `SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace AND proname LIKE $2`, schema, name+`\_%`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d functions of %s in %s (%v); want 3", n, name, schema, err)
	}
	commitWork(t, s, "schema")
}

// newRefusesARoleThatMayNotExecuteTheFunctions: with EXECUTE on one of
// the functions revoked from PUBLIC, a role granted the table's four
// privileges is refused by New (ErrConfig naming EXECUTE) instead of a
// store whose every Commit fails; granted EXECUTE, it runs works.
func newRefusesARoleThatMayNotExecuteTheFunctions(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	name := migratedTable(t, admin)
	owner := storeOn(t, admin, func(o *Options) { o.Table = name })
	pool := p.loginRole(t, admin, `GRANT SELECT, INSERT, UPDATE, DELETE ON "`+name+`" TO {role}`,
		`REVOKE EXECUTE ON FUNCTION `+owner.fnSigs[2]+` FROM PUBLIC`)
	newRefused(t, pool, Options{Table: name, SweepInterval: -1}, "as a role that may not execute the reset", "EXECUTE")
	mustExec(t, admin, `GRANT EXECUTE ON FUNCTION `+owner.fnSigs[2]+` TO `+pool.Config().ConnConfig.User)
	commitWork(t, storeOn(t, pool, func(o *Options) { o.Table = name }), "granted")
}
