package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgxpool"
)

// layout1Table creates a table as pgstore before v2 did (key layout 1: the
// key is the prefix then the ID, the marker's key is empty), with its
// marker's until at fence (by the database's clock), and rows written as a
// store of that version wrote them.
func layout1Table(t *testing.T, pool *pgxpool.Pool, fence string, rows ...[3]string) string {
	t.Helper()
	name := uniqueTable(t, pool)
	mustExec(t, pool, `CREATE TABLE "`+name+`" (key bytea PRIMARY KEY, state text NOT NULL CHECK (state IN ('m', 'c', 'l', 'd')),
		token text NOT NULL, until timestamptz NOT NULL)`)
	mustExec(t, pool, `CREATE INDEX "`+name+`_until" ON "`+name+`" (until)`)
	mustExec(t, pool, `INSERT INTO "`+name+`" (key, state, token, until) VALUES (''::bytea, 'm', '', `+fence+`)`)
	for _, r := range rows { // key, state, until
		mustExec(t, pool, `INSERT INTO "`+name+`" (key, state, token, until) VALUES ($1::bytea, $2, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', `+r[2]+`)`, []byte(r[0]), r[1])
	}
	return name
}

// TestMigrate pins [Migrate], [Schema] and [Rearm].
func TestMigrate(t *testing.T) {
	subtests(t, []subtest{
		{"schema is what migrate runs", schemaIsWhatMigrateRuns},
		{"creates once, never on first use", migrateCreatesOnceAndNeverOnFirstUse},
		{"upgrades layout 1 keeping its claims", migrateUpgradesLayout1KeepingItsClaims},
		{"adds the record columns", migrateAddsTheRecordColumns},
		{"errors match ErrUnavailable", migrateAndRearmErrorsMatchErrUnavailable},
	})
}

// migrateUpgradesLayout1KeepingItsClaims: a table of the key layout
// before v2 is refused by New until Migrate upgrades it; after the upgrade
// every claim made before it is still refused (by a Claim, an AcquireLease,
// and after a Release of the same ID by any store), including the
// nested-prefix case that accepted an ID twice; an expired one is free; a
// Rearm fence stays; Migrate again changes nothing; a store of the earlier
// version finds no marker (fails closed); a table whose keys could read as
// layout 2 is refused and left as it is.
func migrateUpgradesLayout1KeepingItsClaims(t *testing.T) {
	pool := needServer(t).pool(t)
	const outer = "app:"
	const inner = outer + "webhooks:"
	until := time.Now().Add(time.Hour)

	t.Run("claims kept", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`,
			[3]string{inner + "evt_1", "c", `now() + interval '1 hour'`},
			[3]string{outer + "tok_1", "d", `now() + interval '1 hour'`},
			[3]string{outer + "lease_1", "l", `now() + interval '1 hour'`},
			[3]string{outer + "old_1", "c", `now() - interval '1 second'`},
		)
		newRefused(t, pool, Options{Table: name, SweepInterval: -1}, "on a layout-1 table (run Migrate)")
		for range 2 { // idempotent
			must(t, Migrate(bg(), pool, name))
		}
		o := storeOn(t, pool, func(o *Options) { o.Table = name; o.Prefix = outer })
		i := storeOn(t, pool, func(o *Options) { o.Table = name; o.Prefix = inner })
		must(t, o.Release(bg(), "webhooks:evt_1"))
		must(t, i.Release(bg(), "evt_1"))
		for _, c := range []struct {
			s     *Store
			id    string
			first bool
			lease replay.LeaseState
		}{
			{i, "evt_1", false, replay.LeaseDone},
			{o, "tok_1", false, replay.LeaseDone},
			{o, "lease_1", false, replay.LeaseBusy},
			{o, "old_1", true, replay.LeaseDone}, // expired before: free (the claim below makes it done)
			{o, "new_1", true, replay.LeaseDone},
		} {
			wantClaim(t, c.s, c.id, until, c.first, nil)
			wantLease(t, c.s, c.id, c.lease, nil)
		}
		// A claim of the earlier version's statement finds no marker.
		var inserted bool
		if err := pool.QueryRow(bg(), `WITH m AS (SELECT 1 FROM "`+name+`" WHERE key = ''::bytea AND state = 'm' AND until <= now()),
			ins AS (INSERT INTO "`+name+`" (key, state, token, until) SELECT $1::bytea, 'c', '', now() + interval '1 hour' FROM m
			ON CONFLICT (key) DO NOTHING RETURNING 1) SELECT EXISTS (SELECT 1 FROM ins)`, []byte(inner+"evt_9")).Scan(&inserted); err != nil || inserted {
			t.Fatalf("a claim of the layout-1 statement after Migrate = %v, %v; want nothing inserted", inserted, err)
		}
	})
	t.Run("fence kept", func(t *testing.T) {
		name := layout1Table(t, pool, `now() + interval '1 hour'`)
		must(t, Migrate(bg(), pool, name))
		s := storeOn(t, pool, func(o *Options) { o.Table = name })
		wantClaim(t, s, "x", until, false, ErrForgotten)
	})
	t.Run("forgotten", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`)
		mustExec(t, pool, `DELETE FROM "`+name+`"`)
		wantIs(t, Migrate(bg(), pool, name), ErrForgotten, "Migrate of an emptied layout-1 table: %v; want ErrForgotten")
	})
	t.Run("ambiguous keys refused", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`, [3]string{"\x00\x04app:x", "c", `now() + interval '1 hour'`})
		wantIs(t, Migrate(bg(), pool, name), ErrConfig, "Migrate of a layout-1 table with a key starting with 0x00: %v; want ErrConfig")
		newRefused(t, pool, Options{Table: name, SweepInterval: -1}, "after the refused Migrate (still layout 1)")
	})
	t.Run("rearm leaves it to Migrate", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`)
		must(t, Rearm(bg(), pool, name, time.Hour))
		must(t, Migrate(bg(), pool, name))
		s := storeOn(t, pool, func(o *Options) { o.Table = name })
		mustClaim(t, s, "x", until)
	})
}

func schemaIsWhatMigrateRuns(t *testing.T) {
	sql, err := Schema("")
	must(t, err)
	for _, want := range []string{`CREATE TABLE "ctoken_replay"`, `CREATE INDEX "ctoken_replay_until"`, `'-infinity'`} {
		if !strings.Contains(sql, want) {
			t.Fatalf("Schema lacks %q:\n%s", want, sql)
		}
	}
	wantIs(t, errOf(Schema("bad name")), ErrConfig, "Schema of a bad name: %v")
	// A team running its own migrations runs the SQL as printed.
	pool := needServer(t).pool(t)
	name := uniqueTable(t, pool)
	sql, err = Schema("public." + name)
	must(t, err)
	mustExec(t, pool, "BEGIN;\n"+sql+"COMMIT;")
	s := storeOn(t, pool, func(o *Options) { o.Table = "public." + name })
	mustClaim(t, s, "a", time.Now().Add(time.Minute))
}

func migrateCreatesOnceAndNeverOnFirstUse(t *testing.T) {
	pool := needServer(t).pool(t)
	name := uniqueTable(t, pool)
	wantIs(t, errOf(New(bg(), pool, Options{Table: name})), ErrConfig, "New before Migrate: %v, want ErrConfig (no table is created on first use)")
	var exists bool
	if err := pool.QueryRow(bg(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil || exists {
		t.Fatalf("New created the table (%v, %v)", exists, err)
	}
	// Instances starting together all migrate.
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- Migrate(bg(), pool, name) }()
	}
	for range 4 {
		must(t, <-errs)
	}
	s := storeOn(t, pool, func(o *Options) { o.Table = name })
	mustClaim(t, s, "a", time.Now().Add(time.Minute))
	// Migrating again leaves the claims alone.
	must(t, Migrate(bg(), pool, name))
	wantClaim(t, s, "a", time.Now().Add(time.Minute), false, nil)
}

// migrateAddsTheRecordColumns: New refuses a table made by the Schema
// before replay.Recorder (ErrConfig, naming Migrate); Migrate adds the
// columns, and its rows then read as before, with an empty record: a done
// row is done, a lease busy, a claim done, an expired row free. The
// statements of the earlier version still work on the upgraded table.
// Migrating again takes no lock that waits for the table's traffic. A
// column of the same name and another type is refused, and a table of key
// layout 1 gets the columns too.
func migrateAddsTheRecordColumns(t *testing.T) {
	pool := needServer(t).pool(t)
	prefix := uniquePrefix()

	t.Run("rows of the earlier version", func(t *testing.T) {
		name := v2Table(t, pool, prefix,
			[3]string{"done", "d", `now() + interval '1 hour'`},
			[3]string{"leased", "l", `now() + interval '1 hour'`},
			[3]string{"claimed", "c", `now() + interval '1 hour'`},
			[3]string{"expired", "d", `now() - interval '1 second'`},
		)
		newRefused(t, pool, Options{Table: name, Prefix: prefix, SweepInterval: -1}, "on a table without the record columns", "pgstore.Migrate")
		for range 2 { // idempotent
			must(t, Migrate(bg(), pool, name))
		}
		s := storeOn(t, pool, func(o *Options) { o.Table = name; o.Prefix = prefix })
		wantRecord(t, s, "done", replay.LeaseDone, nil, nil)
		if r := wantRecord(t, s, "leased", replay.LeaseBusy, nil, nil); r.Wait <= 0 {
			t.Fatalf("the earlier version's lease reports Wait %v", r.Wait)
		}
		wantRecord(t, s, "claimed", replay.LeaseDone, nil, nil)
		l := wantRecord(t, s, "expired", replay.LeaseAcquired, nil, nil)
		until := time.Now().Add(time.Hour)
		must(t, s.ConfirmRecord(bg(), "expired", l.Token, until, []byte("fp"), []byte("result")))
		wantRecord(t, s, "expired", replay.LeaseDone, []byte("fp"), []byte("result"))

		// An instance of the earlier version confirms its lease on the
		// upgraded table.
		var marker, future, done bool
		if err := pool.QueryRow(bg(), fmt.Sprintf(confirmV2SQL, `"`+name+`"`), s.key("leased"), "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", pgTime(until)).Scan(&marker, &future, &done); err != nil || !done {
			t.Fatalf("ConfirmLease of the earlier version on the upgraded table = %v, %v", done, err)
		}
		wantRecord(t, s, "leased", replay.LeaseDone, nil, nil)
	})

	t.Run("migrating again waits for nothing", func(t *testing.T) {
		name := migratedTable(t, pool)
		s := storeOn(t, pool, func(o *Options) { o.Table = name })
		// An open transaction that wrote a row holds the table's ROW
		// EXCLUSIVE lock: an ALTER TABLE would wait for it.
		tx := mustBegin(t, pool)
		mustExec(t, tx, `INSERT INTO "`+name+`" (key, state, token, until) VALUES ($1, 'c', '', now() + interval '1 hour')`, s.key("open"))
		ctx, cancel := context.WithTimeout(bg(), 5*time.Second)
		defer cancel()
		wantIs(t, Migrate(ctx, pool, name), nil, "Migrate of an up-to-date table beside an open transaction: %v")
	})

	t.Run("a column of another type", func(t *testing.T) {
		name := v2Table(t, pool, prefix)
		mustExec(t, pool, `ALTER TABLE "`+name+`" ADD COLUMN result text`)
		wantIs(t, Migrate(bg(), pool, name), ErrConfig, "Migrate of a table whose result column is text: %v; want ErrConfig")
		newRefused(t, pool, Options{Table: name, SweepInterval: -1}, "on a table whose result column is text")
	})

	t.Run("key layout 1", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`, [3]string{prefix + "old", "d", `now() + interval '1 hour'`})
		must(t, Migrate(bg(), pool, name))
		s := storeOn(t, pool, func(o *Options) { o.Table = name; o.Prefix = prefix })
		wantRecord(t, s, "old", replay.LeaseDone, nil, nil) // the layout-1 row, still honoured
		l := wantRecord(t, s, "new", replay.LeaseAcquired, nil, nil)
		must(t, s.ConfirmRecord(bg(), "new", l.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("r")))
		wantRecord(t, s, "new", replay.LeaseDone, []byte("fp"), []byte("r"))
	})
}

// migrateAndRearmErrorsMatchErrUnavailable: a database that cannot be
// reached, or refuses the statements, makes Migrate and Rearm fail with
// ErrUnavailable, like every call of a Store.
func migrateAndRearmErrorsMatchErrUnavailable(t *testing.T) {
	p := needServer(t)
	down, err := pgxpool.New(bg(), strings.Replace(p.url(), "127.0.0.1:"+p.port, "127.0.0.1:"+downPort(t), 1))
	must(t, err)
	t.Cleanup(down.Close)
	admin := p.pool(t)
	readOnly := p.pool(t, "default_transaction_read_only", "on")
	for _, tc := range []struct {
		name string
		pool *pgxpool.Pool
	}{{"unreachable", down}, {"read-only", readOnly}} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueTable(t, admin)
			wantIs(t, Migrate(bg(), tc.pool, name), ErrUnavailable, "Migrate: %v; want ErrUnavailable")
			wantIs(t, Rearm(bg(), tc.pool, "", time.Hour), ErrUnavailable, "Rearm: %v; want ErrUnavailable")
		})
	}
}
