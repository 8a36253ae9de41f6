package pgstore

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The work's functions. A Work ends in one round trip: SET CONSTRAINTS
// ALL IMMEDIATE ([immediateSQL]), its fence and COMMIT, then the
// session's reset. The fences and the reset are PL/pgSQL functions that
// [Migrate] (or the SQL of [Schema]) creates beside the table, in its
// schema, named after it:
//
//	<table>_fence(key, token, until, fingerprint, result, xid, nonce, sync)
//	          ends a work of [Store.BeginWork] (a lease row)
//	<table>_fence_locked(key, token, until, fingerprint, result, xid, lease, nonce, sync)
//	          ends a work of [Store.AcquireWork] (advisory locks, no row)
//	<table>_reset()
//	          ends what the handler changed of the session (see resetBody)
//
// A function's statements are parsed once per session, their plans kept
// (PostgreSQL may plan one with parameters again), and run with no
// message of the protocol each, where the same statements sent one by one
// were parsed and planned at every commit (or, prepared by name, had to be
// checked against the session's prepared statements, whose view
// PostgreSQL builds whole: some 0.2 µs a cached statement, see
// BenchmarkTransactionalPaired/sync-commit-300-cached). The
// handler cannot replace them: they are called by their schema, with
// arguments of fixed types, and the fences run under a search_path of
// pg_catalog then pg_temp (set on the function), so no operator, function,
// type or table of the handler's (a SET LOCAL search_path naming its own
// schema first, a temporary table of the store's name) reaches them. A
// handler that replaces the functions themselves (CREATE OR REPLACE
// FUNCTION) is writing the store's schema, as one that writes the store's
// table: see docs/pgstore-reference.md, "The work's functions".
//
// New and every recheck read the three functions (see
// functionsCheckSQL), and refuse a table whose functions are missing,
// differ from this version's (run Migrate) or share their name with
// another function of the schema.

// fencePlaceholder stands for the schema-qualified table in the text of
// the functions of [Schema]'s DO block, which learns the schema only when
// it runs.
const fencePlaceholder = "ctoken_qualified_table"

// immediateSQL is sent before the fence of a work whose handler ran
// statements: every deferred trigger of the transaction (a handler's
// constraint trigger or deferrable constraint, INITIALLY DEFERRED or made
// so by its SET CONSTRAINTS) fires now, those already pending during this
// statement and any later one at the end of its statement, instead of at
// COMMIT. So no handler code waits for COMMIT, after the fence, where it
// could set synchronous_commit off for the commit the store acknowledges
// (nor does a cursor WITH HOLD, which COMMIT would run: the fence closes
// them, see [fenceBody]).
// A deferred constraint that fails fails here, before the fence, as any
// failed statement of the work: the transaction is aborted and nothing is
// committed. It is a statement of its own, not one of the fence
// function's: the triggers it fires run under the handler's search_path,
// as they would at COMMIT, not the fence's.
const immediateSQL = "set constraints all immediate"

// fnConfig is the setting of the two fence functions.
const fnConfig = "search_path=pg_catalog, pg_temp"

// workFn is one of the table's functions: its name (without schema),
// parameter types, setting (proconfig, "" for none) and body (prosrc).
type workFn struct {
	name, params, config, body string
}

// workFns returns the table's functions, for the table named rel whose
// schema-qualified, quoted name is t.
func workFns(rel, t string) []workFn {
	return []workFn{
		{rel + "_fence", "bytea, text, timestamptz, bytea, bytea, bigint, text, text", fnConfig, fenceBody(fenceSQL(t), 8)},
		{rel + "_fence_locked", "bytea, text, timestamptz, bytea, bytea, bigint, bigint, text, text", fnConfig, fenceBody(lockedFenceSQL(t), 9)},
		{rel + "_reset", "", "", resetBody},
	}
}

// fenceBody is the body of a fence function whose statement is fence and
// whose last parameter ($sync) is the synchronous_commit of its COMMIT.
// The fence writes the done row (a trigger on the store's table fires at
// the end of that statement, as every deferred trigger does once
// [immediateSQL] has run), then closes every cursor of the session:
// COMMIT runs the query of a cursor WITH HOLD declared in the
// transaction to its end, before the commit record, so a function in it
// (the handler's, or one a trigger on the store's table declared) would
// run after the fence. synchronous_commit is set last, for the COMMIT
// that follows in the same round trip, so that a handler's SET LOCAL
// synchronous_commit = off (or a trigger's, or a cursor's) cannot make
// the acknowledged commit one a crash forgets. The handler's cursors end
// with its transaction anyway: the reset closes those COMMIT would keep.
func fenceBody(fence string, sync int) string {
	return "\nDECLARE ctoken_n int;\nBEGIN\n" + fence + " INTO ctoken_n;\nEXECUTE 'CLOSE ALL';\n" +
		"PERFORM pg_catalog.set_config('synchronous_commit', $" + strconv.Itoa(sync) + ", true);\nRETURN ctoken_n;\nEND\n"
}

// resetBody ends, on a work's connection, whatever of the session the
// handler's statements may have changed (through what the Tx does not
// refuse, such as a function's set_config or a temporary table), so that
// nothing of it reaches the next user of the pooled connection: settings
// back to the session's defaults (those of the connection's startup, such
// as the pool's RuntimeParams; a SET sent by the pool's AfterConnect is
// undone too), role and session authorization, cursors WITH HOLD, LISTEN
// registrations, session advisory locks, temporary tables and sequence
// state. It runs after COMMIT (or ROLLBACK) in the same round trip.
//
// It fails last (with errSQLPrepared) when the session holds a statement
// prepared by SQL (PREPARE in a function's EXECUTE, which the Tx cannot
// see): DEALLOCATE ALL would also drop pgx's statement cache, unknown to
// pgx, so the connection is closed instead. Left pooled, such a statement
// could take the name of one pgx has cached (the store's own claim, say)
// and answer in its place.
const resetBody = `
BEGIN
RESET ALL;
SET SESSION AUTHORIZATION DEFAULT;
EXECUTE 'CLOSE ALL';
UNLISTEN *;
PERFORM pg_catalog.pg_advisory_unlock_all();
DISCARD TEMP;
DISCARD SEQUENCES;
RETURN (CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_prepared_statements WHERE from_sql) THEN '` + errSQLPrepared + `' ELSE '0' END)::pg_catalog.int4;
END
`

// functionsSQL is the DO block of [Schema] and [Migrate] that creates, or
// replaces where their source or setting differs, the functions of table
// (quoted as [quoteTable] does), in the table's schema: it resolves the
// table's schema as the session's search_path does, and writes its
// schema-qualified name into the functions' text.
func functionsSQL(table string) string {
	var b strings.Builder
	b.WriteString("DO $ctoken_migrate$\nDECLARE s text; r text; qt text; src text;\nBEGIN\n")
	b.WriteString("SELECT n.nspname, c.relname INTO STRICT s, r FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace\n")
	b.WriteString("  WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('" + table + "');\n")
	b.WriteString(`qt := pg_catalog.concat('"', pg_catalog.replace(s, '"', '""'), '"."', pg_catalog.replace(r, '"', '""'), '"');` + "\n")
	for _, fn := range workFns("ctoken_rel", fencePlaceholder) {
		suffix := strings.TrimPrefix(fn.name, "ctoken_rel")
		set := ""
		if fn.config != "" {
			set = " SET " + strings.Replace(fn.config, "=", " = ", 1)
		}
		b.WriteString("src := pg_catalog.replace($ctoken_fn$" + fn.body + "$ctoken_fn$, '" + fencePlaceholder + "', qt);\n")
		b.WriteString("IF NOT EXISTS (SELECT FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(pg_catalog.format('%I.%I(" + fn.params + ")', s, r || '" + suffix + "'))\n")
		b.WriteString("    AND p.prosrc OPERATOR(pg_catalog.=) src\n")
		b.WriteString("    AND coalesce(p.proconfig, '{}') OPERATOR(pg_catalog.=) '{" + quoteArrayElem(fn.config) + "}' AND NOT p.proisstrict AND NOT p.prosecdef) THEN\n")
		b.WriteString("  EXECUTE pg_catalog.format('CREATE OR REPLACE FUNCTION %I.%I(" + fn.params + ") RETURNS int LANGUAGE plpgsql" + set + " AS %L',\n")
		b.WriteString("    s, r || '" + suffix + "', src);\n")
		b.WriteString("END IF;\n")
	}
	b.WriteString("END $ctoken_migrate$")
	return b.String()
}

// quoteArrayElem returns s as an element of a text[] literal ("" for
// none).
func quoteArrayElem(s string) string {
	if s == "" {
		return ""
	}
	return `"` + s + `"`
}

// functionsCheckSQL counts, given the arrays of the functions' signatures
// ($2), sources ($3) and settings ($4), those of the table's that exist in
// PL/pgSQL with that source and setting (see [Store.setWorkFns]), neither
// STRICT (which returns NULL, without running the body, when an argument
// is NULL: a work that wrote nothing, or one without a record, would
// commit without its done row) nor SECURITY DEFINER (ALTER FUNCTION
// changes neither source nor setting), and alone of its name in its
// schema: an overload with defaults (<table>_reset(x int DEFAULT 0))
// makes the store's call ambiguous; and that the role may execute.
const functionsCheckSQL = `(SELECT count(*) FROM unnest($2::text[], $3::text[], $4::text[]) f(sig, src, cfg)
  JOIN pg_proc p ON p.oid = to_regprocedure(f.sig) AND p.prosrc = f.src AND coalesce(array_to_string(p.proconfig, E'\n'), '') = f.cfg
    AND NOT p.proisstrict AND NOT p.prosecdef
    AND (SELECT count(*) FROM pg_proc o WHERE o.pronamespace = p.pronamespace AND o.proname = p.proname) = 1
    AND has_function_privilege(p.oid, 'EXECUTE')
  JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql') = cardinality($2::text[])`

// setWorkFns sets, for the store's table (schema and name as resolved by
// New), the arguments of functionsCheckSQL and the calls of the fences
// and of the reset.
func (s *Store) setWorkFns(schema, rel string) {
	fns := workFns(rel, s.table)
	s.fnSigs, s.fnSrcs, s.fnCfgs = nil, nil, nil
	for _, fn := range fns {
		s.fnSigs = append(s.fnSigs, pgx.Identifier{schema, fn.name}.Sanitize()+"("+fn.params+")")
		s.fnSrcs = append(s.fnSrcs, fn.body)
		s.fnCfgs = append(s.fnCfgs, fn.config)
	}
	s.fenceCall = "select " + pgx.Identifier{schema, fns[0].name}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	s.lockedFenceCall = "select " + pgx.Identifier{schema, fns[1].name}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8, $9)"
	s.resetCall = "select " + pgx.Identifier{schema, fns[2].name}.Sanitize() + "()"
}
