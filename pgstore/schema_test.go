package pgstore

import (
	"errors"
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
	for _, q := range []string{
		`CREATE TABLE "` + name + `" (key bytea PRIMARY KEY, state text NOT NULL CHECK (state IN ('m', 'c', 'l', 'd')),
			token text NOT NULL, until timestamptz NOT NULL)`,
		`CREATE INDEX "` + name + `_until" ON "` + name + `" (until)`,
		`INSERT INTO "` + name + `" (key, state, token, until) VALUES (''::bytea, 'm', '', ` + fence + `)`,
	} {
		if _, err := pool.Exec(bg(), q); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows { // key, state, until
		if _, err := pool.Exec(bg(), `INSERT INTO "`+name+`" (key, state, token, until) VALUES ($1::bytea, $2, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', `+r[2]+`)`, []byte(r[0]), r[1]); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// TestMigrateUpgradesLayout1KeepingItsClaims: a table of the key layout
// before v2 is refused by New until Migrate upgrades it; after the upgrade
// every claim made before it is still refused (by a Claim, an AcquireLease,
// and after a Release of the same ID by any store), including the
// nested-prefix case that accepted an ID twice; an expired one is free; a
// Rearm fence stays; Migrate again changes nothing; a store of the earlier
// version finds no marker (fails closed); a table whose keys could read as
// layout 2 is refused and left as it is.
func TestMigrateUpgradesLayout1KeepingItsClaims(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
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
		if s, err := New(bg(), pool, Options{Table: name, SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) {
			t.Fatalf("New on a layout-1 table = %v, %v; want ErrConfig (run Migrate)", s, err)
		}
		for range 2 { // idempotent
			if err := Migrate(bg(), pool, name); err != nil {
				t.Fatal(err)
			}
		}
		o := storeOn(t, pool, func(o *Options) { o.Table = name; o.Prefix = outer })
		i := storeOn(t, pool, func(o *Options) { o.Table = name; o.Prefix = inner })
		if err := o.Release(bg(), "webhooks:evt_1"); err != nil {
			t.Fatal(err)
		}
		if err := i.Release(bg(), "evt_1"); err != nil {
			t.Fatal(err)
		}
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
			if first, err := c.s.Claim(bg(), c.id, until); first != c.first || err != nil {
				t.Fatalf("Claim(%q) on prefix %q after Migrate = %v, %v; want %v", c.id, c.s.Prefix(), first, err, c.first)
			}
			if l, err := c.s.AcquireLease(bg(), c.id, time.Minute); l.State != c.lease || err != nil {
				t.Fatalf("AcquireLease(%q) after Migrate = %+v, %v; want state %v", c.id, l, err, c.lease)
			}
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
		if err := Migrate(bg(), pool, name); err != nil {
			t.Fatal(err)
		}
		s := storeOn(t, pool, func(o *Options) { o.Table = name })
		if first, err := s.Claim(bg(), "x", until); first || !errors.Is(err, ErrForgotten) {
			t.Fatalf("Claim on an upgraded table fenced by Rearm = %v, %v; want ErrForgotten", first, err)
		}
	})
	t.Run("forgotten", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`)
		if _, err := pool.Exec(bg(), `DELETE FROM "`+name+`"`); err != nil {
			t.Fatal(err)
		}
		if err := Migrate(bg(), pool, name); !errors.Is(err, ErrForgotten) {
			t.Fatalf("Migrate of an emptied layout-1 table: %v; want ErrForgotten", err)
		}
	})
	t.Run("ambiguous keys refused", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`, [3]string{"\x00\x04app:x", "c", `now() + interval '1 hour'`})
		if err := Migrate(bg(), pool, name); !errors.Is(err, ErrConfig) {
			t.Fatalf("Migrate of a layout-1 table with a key starting with 0x00: %v; want ErrConfig", err)
		}
		if s, err := New(bg(), pool, Options{Table: name, SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) {
			t.Fatalf("New after the refused Migrate = %v, %v; want ErrConfig (still layout 1)", s, err)
		}
	})
	t.Run("rearm leaves it to Migrate", func(t *testing.T) {
		name := layout1Table(t, pool, `'-infinity'`)
		if err := Rearm(bg(), pool, name, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := Migrate(bg(), pool, name); err != nil {
			t.Fatal(err)
		}
		s := storeOn(t, pool, func(o *Options) { o.Table = name })
		if first, err := s.Claim(bg(), "x", until); !first || err != nil {
			t.Fatalf("Claim after Rearm (no change: it had its marker) and Migrate = %v, %v; want first", first, err)
		}
	})
}
