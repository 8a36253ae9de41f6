package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestNew pins [New]'s refusals: bad options, and every server setting,
// role, table or clock under which an acknowledged claim could be lost; a
// zero Store refuses every method.
func TestNew(t *testing.T) {
	subtests(t, []subtest{
		{"refuses bad configuration", newRefusesBadConfiguration},
		{"refuses async commit unless allowed", newRefusesAsyncCommitUnlessAllowed},
		{"refuses settings that lose crash commits", newRefusesSettingsThatLoseCommitsInACrash},
		{"refuses async standby unless allowed", newRefusesAsyncStandbyUnlessAllowed},
		{"refuses an instance clock behind", newRefusesAnInstanceClockBehindTheDatabase},
		{"refuses a clock behind on a slow server", newRefusesAClockBehindEvenWhenTheServerIsSlow},
		{"refuses a role that cannot write the table", newRefusesARoleThatCannotWriteTheTable},
		{"refuses an unlogged or temporary table", newRefusesAnUnloggedOrTemporaryTable},
		{"refuses a table in a system schema", tableInASystemSchemaIsRefused},
		{"zero Store refuses", zeroStoreRefuses},
	})
}

func zeroStoreRefuses(t *testing.T) {
	var s Store
	wantClaim(t, &s, "a", time.Now().Add(time.Minute), false, ErrConfig)
	_, leaseErr := s.AcquireLease(bg(), "a", time.Minute)
	_, sweepErr := s.Sweep(bg())
	for name, err := range map[string]error{
		"AcquireLease": leaseErr,
		"ConfirmLease": s.ConfirmLease(bg(), "a", strings.Repeat("a", tokenLen), time.Now().Add(time.Minute)),
		"Release":      s.Release(bg(), "a"),
		"ReleaseLease": s.ReleaseLease(bg(), "a", strings.Repeat("a", tokenLen)),
		"Sweep":        sweepErr,
	} {
		wantIs(t, err, ErrConfig, "zero Store %s: %v; want ErrConfig", name)
	}
	if d, p := s.Durability(), s.Prefix(); d != (Durability{}) || p != "" {
		t.Fatalf("zero Store Durability, Prefix = %+v, %q; want zero", d, p)
	}
	s.Close()
}

// newRefused fails t unless New on pool with opts is refused with
// ErrConfig, in an error naming each of names, and no store; what says of
// what it is refused.
func newRefused(t *testing.T, pool *pgxpool.Pool, opts Options, what string, names ...string) {
	t.Helper()
	s, err := New(bg(), pool, opts)
	if s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New %s = %v, %v; want ErrConfig", what, s, err)
	}
	for _, name := range names {
		if !strings.Contains(err.Error(), name) {
			t.Fatalf("New %s = %v; want an error naming %q", what, err, name)
		}
	}
}

func newRefusesBadConfiguration(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	tests := []struct {
		name string
		pool *pgxpool.Pool
		opts Options
	}{
		{"nil pool", nil, Options{}},
		{"missing table", pool, Options{Table: "no_such_table"}},
		{"upper case", pool, Options{Table: "Replay"}},
		{"quote", pool, Options{Table: `r"; DROP TABLE x; --`}},
		{"space", pool, Options{Table: "a b"}},
		{"leading digit", pool, Options{Table: "1replay"}},
		{"two dots", pool, Options{Table: "a.b.c"}},
		{"empty part", pool, Options{Table: "public."}},
		{"too long", pool, Options{Table: strings.Repeat("a", maxIdentBytes+1)}},
		{"negative batch", pool, Options{SweepBatch: -1}},
		{"negative recheck interval", pool, Options{RecheckInterval: -time.Second}},
		{"negative horizon", pool, Options{Horizon: -time.Second}},
		{"prefix too long", pool, Options{Prefix: strings.Repeat("p", MaxPrefixBytes+1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(bg(), tc.pool, tc.opts)
			if s != nil || !errors.Is(err, ErrConfig) || !errors.Is(err, replay.ErrConfig) {
				t.Fatalf("New = %v, %v; want ErrConfig, which matches replay.ErrConfig", s, err)
			}
		})
	}
}

func newRefusesAsyncCommitUnlessAllowed(t *testing.T) {
	p := needServer(t)
	for _, setting := range []string{"on", "local", "remote_write", "remote_apply"} {
		s := storeOn(t, p.pool(t, "synchronous_commit", setting))
		if d := s.Durability(); d.SynchronousCommit != setting || d.SynchronousStandbyNames != "" || d.WaitsForStandby() {
			t.Fatalf("Durability() = %+v, WaitsForStandby %v; want %q, no standbys", d, d.WaitsForStandby(), setting)
		}
	}
	pool := p.pool(t, "synchronous_commit", "off")
	newRefused(t, pool, Options{SweepInterval: -1}, "with synchronous_commit off")
	s := storeOn(t, pool, func(o *Options) { o.AllowAsyncCommit = true })
	if d := s.Durability(); d.SynchronousCommit != "off" {
		t.Fatalf("Durability() = %+v, want off", d)
	}
	// Without a synchronous standby, a store that requires one is refused.
	newRefused(t, p.pool(t), Options{SweepInterval: -1, RequireSynchronousStandby: true}, "requiring a synchronous standby on a lone server")
}

// newRefusesSettingsThatLoseCommitsInACrash: a server with fsync off
// (commits never flushed) or full_page_writes off (torn pages recovery
// cannot repair) can come back from a crash of its machine without claims
// it acknowledged and with its marker row, so the loss is not seen: New
// refuses it (ErrConfig) unless AllowRollback, and a running store's
// recheck refuses calls while the setting is off and serves once it is on
// again.
func newRefusesSettingsThatLoseCommitsInACrash(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	admin := p.pool(t)
	running := storeOn(t, p.pool(t), func(o *Options) { o.RecheckInterval = 50 * time.Millisecond })
	for _, setting := range []string{"fsync", "full_page_writes"} {
		t.Run(setting, func(t *testing.T) {
			set := func(value string) { setSystem(t, admin, setting, value) }
			set("off")
			defer set("on")
			newRefused(t, p.pool(t), Options{SweepInterval: -1}, "with "+setting+" off", setting)
			s := storeOn(t, p.pool(t), func(o *Options) { o.AllowRollback = true })
			mustClaim(t, s, "allowed", time.Now().Add(time.Hour))
			waitForClaim(t, running, setting+" turned off", ErrConfig)
			set("on")
			waitForClaim(t, running, setting+" on again", nil)
		})
	}
}

// newRefusesAsyncStandbyUnlessAllowed: a primary streaming to a
// standby that commits do not wait for could lose acknowledged claims in a
// failover; New refuses it unless the caller says so.
func newRefusesAsyncStandbyUnlessAllowed(t *testing.T) {
	t.Parallel() // servers of its own
	primary := ownServer(t)
	addStandby(t, primary, false, "", freePort())
	pool := primary.pool(t)
	newRefused(t, pool, Options{SweepInterval: -1}, "with an asynchronous standby")
	s := storeOn(t, pool, func(o *Options) { o.AllowAsyncStandby = true })
	if d := s.Durability(); d.Standbys != 1 || d.WaitsForStandby() {
		t.Fatalf("Durability() = %+v; want one standby, not waited for", d)
	}
	newRefused(t, pool, Options{SweepInterval: -1, AllowAsyncStandby: true, RequireSynchronousStandby: true},
		"requiring a synchronous standby with only an asynchronous one")
}

func newRefusesAnInstanceClockBehindTheDatabase(t *testing.T) {
	pool := needServer(t).pool(t)
	behind := func() time.Time { return time.Now().Add(-2 * time.Minute) }
	if s, err := newStore(bg(), pool, Options{SweepInterval: -1}, behind); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New with the clock 2 min behind = %v, %v; want ErrConfig", s, err)
	}
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) }
	for _, tc := range []struct {
		name    string
		maxSkew time.Duration
		now     func() time.Time
	}{
		{"within a wider MaxSkew", 3 * time.Minute, behind},
		{"with the check off", -1, behind},
		{"with the clock ahead (claims are then held longer, never shorter)", 0, ahead},
	} {
		s, err := newStore(bg(), pool, Options{SweepInterval: -1, MaxSkew: tc.maxSkew}, tc.now)
		wantIs(t, err, nil, "New %s: %v", tc.name)
		s.Close()
	}
}

// newRefusesAClockBehindEvenWhenTheServerIsSlow: the skew is measured
// against the instance's clock read before the query, so a slow answer
// (here: the query waits 2 s for a table lock after its transaction
// started) cannot hide a clock that is behind by more than MaxSkew.
func newRefusesAClockBehindEvenWhenTheServerIsSlow(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	name := migratedTable(t, admin)
	pool := p.poolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	behind := func() time.Time { return time.Now().Add(-4 * time.Second) }
	opts := Options{Table: name, SweepInterval: -1, MaxSkew: 3 * time.Second, Timeout: 10 * time.Second}
	// A first New prepares the query on the pool's one connection, so that
	// the second one takes its locks after its transaction started.
	if s, err := newStore(bg(), pool, opts, behind); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New with the clock 4 s behind (limit 3 s): %v; want ErrConfig", err)
	}
	tx := mustBegin(t, admin)
	mustExec(t, tx, `LOCK TABLE "`+name+`" IN ACCESS EXCLUSIVE MODE`)
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(2 * time.Second)
		tx.Rollback(bg())
	}()
	start := time.Now()
	s, err := newStore(bg(), pool, opts, behind)
	took := time.Since(start)
	<-released
	if took < 1500*time.Millisecond {
		t.Fatalf("New took %v; the query did not wait for the lock", took)
	}
	if s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New with the clock 4 s behind (limit 3 s) and a 2 s answer: %v; want ErrConfig", err)
	}
}

// newRefusesARoleThatCannotWriteTheTable: a role that may not read
// the table, or may read but not write it, is a misconfiguration New
// refuses (ErrConfig), instead of a store whose every claim fails.
func newRefusesARoleThatCannotWriteTheTable(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	for _, grant := range []string{"", "SELECT", "SELECT, INSERT, UPDATE"} {
		t.Run("grant "+grant, func(t *testing.T) {
			var grants []string
			if grant != "" {
				grants = append(grants, `GRANT `+grant+` ON ctoken_replay TO {role}`)
			}
			newRefused(t, p.loginRole(t, admin, grants...), Options{SweepInterval: -1}, "as a role granted "+grant)
		})
	}
	// Granted all four, the role runs a store.
	pool := p.loginRole(t, admin, `GRANT SELECT, INSERT, UPDATE, DELETE ON ctoken_replay TO {role}`)
	s := storeOn(t, pool)
	mustClaim(t, s, "a", time.Now().Add(time.Minute))
}

// newRefusesAnUnloggedOrTemporaryTable: an unlogged table is emptied
// by every crash and never reaches a standby; a temporary one (found
// first by an unqualified name in the session that made it) lives and
// dies with one connection. New refuses both (ErrConfig), and a running
// store's recheck refuses calls once its table is made unlogged.
func newRefusesAnUnloggedOrTemporaryTable(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	name := migratedTable(t, admin)
	running := storeOn(t, p.pool(t), func(o *Options) { o.Table = name; o.RecheckInterval = 50 * time.Millisecond })
	mustExec(t, admin, `ALTER TABLE "`+name+`" SET UNLOGGED`)
	newRefused(t, p.pool(t), Options{Table: name, SweepInterval: -1}, "on an unlogged table")
	waitForClaim(t, running, "a table made unlogged", ErrConfig)
	mustExec(t, admin, `ALTER TABLE "`+name+`" SET LOGGED`)

	// A temporary table of the same name, on the pool's one connection.
	pool := p.poolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	mustExec(t, pool, `CREATE TEMP TABLE "`+name+`" (LIKE public."`+name+`" INCLUDING ALL)`)
	mustExec(t, pool, `INSERT INTO pg_temp."`+name+`" (key, state, token, until) VALUES (`+markerSQL+`, 'm', '', '-infinity')`)
	newRefused(t, pool, Options{Table: name, SweepInterval: -1}, "on a name that finds a temporary table")
	storeOn(t, pool, func(o *Options) { o.Table = "public." + name }) // the qualified permanent table
}

// tableInASystemSchemaIsRefused: a schema whose name starts with pg_
// is PostgreSQL's own (pg_catalog, pg_toast, and pg_temp: the session's
// temporary schema, where each pooled connection would hold a table of its
// own that forgets everything when the connection closes, so one ID could
// be first once per connection). Schema, Migrate, Rearm and New refuse it
// with ErrConfig and create nothing.
func tableInASystemSchemaIsRefused(t *testing.T) {
	pool := needServer(t).pool(t)
	for _, table := range []string{"pg_temp.ctoken_replay", "pg_catalog.ctoken_replay", "pg_toast.ctoken_replay", "pg_temp_1.ctoken_replay", "pg_.ctoken_replay"} {
		t.Run(table, func(t *testing.T) {
			if sql, err := Schema(table); sql != "" || !errors.Is(err, ErrConfig) {
				t.Fatalf("Schema(%q) = %q, %v; want ErrConfig", table, sql, err)
			}
			wantIs(t, Migrate(bg(), pool, table), ErrConfig, "Migrate(%q): %v; want ErrConfig", table)
			wantIs(t, Rearm(bg(), pool, table, time.Second), ErrConfig, "Rearm(%q): %v; want ErrConfig", table)
			newRefused(t, pool, Options{Table: table, SweepInterval: -1}, "on "+table)
		})
	}
	// A table (not a schema) may start with pg_.
	wantIs(t, errOf(quoteTable("public.pg_replay")), nil, "quoteTable(public.pg_replay): %v")
}

// TestErrorsMatchReplay: every sentinel, and the refusals built from one,
// match their counterpart in package replay (and still their own), so
// code written against replay's vocabulary holds on this store.
func TestErrorsMatchReplay(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		own, shared error
	}{
		{"ErrUnavailable", ErrUnavailable, ErrUnavailable, replay.ErrUnavailable},
		{"ErrInvalidClaim", ErrInvalidClaim, ErrInvalidClaim, replay.ErrInvalidClaim},
		{"ErrConfig", ErrConfig, ErrConfig, replay.ErrConfig},
		{"a forgotten table", fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten), ErrForgotten, replay.ErrUnavailable},
		{"a setting lowered", fmt.Errorf("%w: %w: synchronous_commit is off", ErrUnavailable, ErrConfig), ErrConfig, replay.ErrConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.own) || !errors.Is(tc.err, tc.shared) {
				t.Fatalf("%v: matches %v: %v, %v: %v; want both", tc.err, tc.own, errors.Is(tc.err, tc.own), tc.shared, errors.Is(tc.err, tc.shared))
			}
		})
	}
	if errors.Is(ErrInvalidClaim, replay.ErrUnavailable) || errors.Is(ErrConfig, replay.ErrUnavailable) {
		t.Fatal("a sentinel matches another's counterpart")
	}
	var s Store
	wantIs(t, errOf(s.Claim(bg(), "a", time.Now().Add(time.Minute))), replay.ErrConfig, "a zero Store's Claim = %v; want an error matching replay.ErrConfig")
}
