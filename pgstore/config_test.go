package pgstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// uniqueTable is a table name no other test uses, dropped when t ends.
func uniqueTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := "t_" + strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(uniquePrefix(), "test:"), ":"), "-", "")
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+name+`"`) })
	return name
}

func TestNewRefusesBadConfiguration(t *testing.T) {
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
		{"prefix too long", pool, Options{Prefix: strings.Repeat("p", MaxPrefixBytes+1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(bg(), tc.pool, tc.opts)
			if s != nil || !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, %v; want ErrConfig", s, err)
			}
		})
	}
}

func TestSchemaIsWhatMigrateRuns(t *testing.T) {
	sql, err := Schema("")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE TABLE "ctoken_replay"`, `CREATE INDEX "ctoken_replay_until"`, `'-infinity'`} {
		if !strings.Contains(sql, want) {
			t.Fatalf("Schema lacks %q:\n%s", want, sql)
		}
	}
	if _, err := Schema("bad name"); !errors.Is(err, ErrConfig) {
		t.Fatalf("Schema of a bad name: %v", err)
	}
	// A team running its own migrations runs the SQL as printed.
	p := needServer(t)
	pool := p.pool(t)
	name := uniqueTable(t, pool)
	sql, err = Schema("public." + name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg(), "BEGIN;\n"+sql+"COMMIT;"); err != nil {
		t.Fatal(err)
	}
	s := storeOn(t, pool, func(o *Options) { o.Table = "public." + name })
	if first, err := s.Claim(bg(), "a", time.Now().Add(time.Minute)); !first || err != nil {
		t.Fatalf("Claim on a table made from Schema = %v, %v", first, err)
	}
}

func TestMigrateCreatesOnceAndNeverOnFirstUse(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	name := uniqueTable(t, pool)
	if _, err := New(bg(), pool, Options{Table: name}); !errors.Is(err, ErrConfig) {
		t.Fatalf("New before Migrate: %v, want ErrConfig (no table is created on first use)", err)
	}
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
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s := storeOn(t, pool, func(o *Options) { o.Table = name })
	if first, err := s.Claim(bg(), "a", time.Now().Add(time.Minute)); !first || err != nil {
		t.Fatal(first, err)
	}
	// Migrating again leaves the claims alone.
	if err := Migrate(bg(), pool, name); err != nil {
		t.Fatal(err)
	}
	if first, err := s.Claim(bg(), "a", time.Now().Add(time.Minute)); first || err != nil {
		t.Fatalf("Claim after a second Migrate = %v, %v; want false", first, err)
	}
}

func TestNewRefusesAsyncCommitUnlessAllowed(t *testing.T) {
	p := needServer(t)
	for _, setting := range []string{"on", "local", "remote_write", "remote_apply"} {
		s := storeOn(t, p.pool(t, "synchronous_commit", setting))
		if d := s.Durability(); d.SynchronousCommit != setting || d.SynchronousStandbyNames != "" || d.WaitsForStandby() {
			t.Fatalf("Durability() = %+v, WaitsForStandby %v; want %q, no standbys", d, d.WaitsForStandby(), setting)
		}
	}
	pool := p.pool(t, "synchronous_commit", "off")
	if s, err := New(bg(), pool, Options{SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New with synchronous_commit off = %v, %v; want ErrConfig", s, err)
	}
	s := storeOn(t, pool, func(o *Options) { o.AllowAsyncCommit = true })
	if d := s.Durability(); d.SynchronousCommit != "off" {
		t.Fatalf("Durability() = %+v, want off", d)
	}
	// Without a synchronous standby, a store that requires one is refused.
	if s, err := New(bg(), p.pool(t), Options{SweepInterval: -1, RequireSynchronousStandby: true}); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New requiring a synchronous standby on a lone server = %v, %v; want ErrConfig", s, err)
	}
}

func TestNewRefusesAnInstanceClockBehindTheDatabase(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	behind := func() time.Time { return time.Now().Add(-2 * time.Minute) }
	if s, err := newStore(bg(), pool, Options{SweepInterval: -1}, behind); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New with the clock 2 min behind = %v, %v; want ErrConfig", s, err)
	}
	if s, err := newStore(bg(), pool, Options{SweepInterval: -1, MaxClockSkew: 3 * time.Minute}, behind); err != nil {
		t.Fatalf("New within a wider MaxClockSkew: %v", err)
	} else {
		s.Close()
	}
	if s, err := newStore(bg(), pool, Options{SweepInterval: -1, MaxClockSkew: -1}, behind); err != nil {
		t.Fatalf("New with the check off: %v", err)
	} else {
		s.Close()
	}
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) }
	if s, err := newStore(bg(), pool, Options{SweepInterval: -1}, ahead); err != nil {
		t.Fatalf("New with the clock ahead (claims are then held longer, never shorter): %v", err)
	} else {
		s.Close()
	}
}

// TestForgottenTableRefusesEveryClaim: a table that lost its rows (TRUNCATE,
// DELETE, or dropped) no longer knows which IDs were claimed, so every
// claim and lease step refuses — including of IDs it never saw — until an
// operator rearms it. Migrate refuses to rearm it silently.
func TestForgottenTableRefusesEveryClaim(t *testing.T) {
	for _, forget := range []string{"TRUNCATE %s", "DELETE FROM %s", "DROP TABLE %s"} {
		t.Run(strings.Fields(forget)[0], func(t *testing.T) {
			p := needServer(t)
			pool := p.pool(t)
			name := uniqueTable(t, pool)
			if err := Migrate(bg(), pool, name); err != nil {
				t.Fatal(err)
			}
			s := storeOn(t, pool, func(o *Options) { o.Table = name })
			until := time.Now().Add(time.Hour)
			if first, err := s.Claim(bg(), "claimed", until); !first || err != nil {
				t.Fatal(first, err)
			}
			l, err := s.AcquireLease(bg(), "leased", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(bg(), strings.Replace(forget, "%s", `"`+name+`"`, 1)); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"claimed", "never-seen"} {
				if first, err := s.Claim(bg(), id, until); first || !errors.Is(err, ErrUnavailable) {
					t.Fatalf("Claim(%s) after %s = %v, %v; want ErrUnavailable", id, forget, first, err)
				}
				if l, err := s.AcquireLease(bg(), id, time.Minute); l.State != 0 || !errors.Is(err, ErrUnavailable) {
					t.Fatalf("AcquireLease(%s) after %s = %+v, %v; want ErrUnavailable", id, forget, l, err)
				}
			}
			if err := s.ConfirmLease(bg(), "leased", l.Token, until); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("ConfirmLease after %s: %v; want ErrUnavailable", forget, err)
			}
			if strings.HasPrefix(forget, "DROP") {
				return // a dropped table is a missing one: New refuses with ErrConfig
			}
			if _, err := s.Claim(bg(), "claimed", until); !errors.Is(err, ErrForgotten) {
				t.Fatalf("Claim after %s: %v; want ErrForgotten", forget, err)
			}
			if _, err := New(bg(), pool, Options{Table: name}); !errors.Is(err, ErrForgotten) {
				t.Fatalf("New on a forgotten table: %v; want ErrForgotten", err)
			}
			if err := Migrate(bg(), pool, name); !errors.Is(err, ErrForgotten) {
				t.Fatalf("Migrate of a forgotten table: %v; want ErrForgotten", err)
			}
			if err := Rearm(bg(), pool, name, -time.Second); !errors.Is(err, ErrConfig) {
				t.Fatalf("Rearm with a negative fence: %v; want ErrConfig", err)
			}
			// Rearmed with a fence: refused until it passes, then served.
			const fence = 700 * time.Millisecond
			rearmed := time.Now()
			if err := Rearm(bg(), pool, name, fence); err != nil {
				t.Fatal(err)
			}
			if _, err := New(bg(), pool, Options{Table: name, SweepInterval: -1}); err != nil {
				t.Fatalf("New on a rearmed, fenced table: %v", err)
			}
			for time.Since(rearmed) < fence-200*time.Millisecond {
				if first, err := s.Claim(bg(), "claimed", until); first || !errors.Is(err, ErrForgotten) {
					t.Fatalf("Claim within the fence = %v, %v; want ErrForgotten", first, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(time.Until(rearmed.Add(fence + 100*time.Millisecond)))
			if first, err := s.Claim(bg(), "never-seen", until); !first || err != nil {
				t.Fatalf("Claim after the fence = %v, %v; want first", first, err)
			}
			if err := Rearm(bg(), pool, name, time.Hour); err != nil {
				t.Fatal(err)
			}
			if first, err := s.Claim(bg(), "also-never-seen", until); !first || err != nil {
				t.Fatalf("Claim after rearming an armed table = %v, %v; want first (nothing changed)", first, err)
			}
		})
	}
}

// TestStandbyFailsClosed: the database the store was built on comes back
// as a read-only hot standby (a failover gone wrong): every claim is
// refused as unavailable, and New refuses it.
func TestStandbyFailsClosed(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.Timeout = 5 * time.Second })
	until := time.Now().Add(time.Hour)
	if first, err := s.Claim(bg(), "before", until); !first || err != nil {
		t.Fatal(first, err)
	}
	p.kill()
	signal := filepath.Join(p.dir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		os.Chown(signal, int(cred.Uid), int(cred.Gid))
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"before", "after"} {
		var err error
		for range 50 { // the pool's connections died with the server
			if _, err = s.Claim(bg(), id, until); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "closed") {
				break
			}
		}
		// Refused either by the statement (SQLSTATE 25006) or, when the
		// background recheck saw the standby first, by the store itself.
		if first, err := s.Claim(bg(), id, until); first || !errors.Is(err, ErrUnavailable) ||
			!strings.Contains(err.Error(), "25006") && !strings.Contains(err.Error(), "read-only standby") {
			t.Fatalf("Claim(%s) on a standby = %v, %v; want ErrUnavailable (read-only: SQLSTATE 25006 or the recheck's refusal)", id, first, err)
		}
	}
	if _, err := New(bg(), pool, Options{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New on a standby: %v; want ErrUnavailable", err)
	}
}

// TestNewRefusesSettingsThatLoseCommitsInACrash: a server with fsync off
// (commits never flushed) or full_page_writes off (torn pages recovery
// cannot repair) can come back from a crash of its machine without claims
// it acknowledged and with its marker row, so the loss is not seen: New
// refuses it (ErrConfig) unless AllowRollback, and a running store's
// recheck refuses calls while the setting is off and serves once it is on
// again.
func TestNewRefusesSettingsThatLoseCommitsInACrash(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	admin := p.pool(t)
	running := storeOn(t, p.pool(t), func(o *Options) { o.RecheckInterval = 50 * time.Millisecond })
	until := time.Now().Add(time.Hour)
	n := 0
	// waitFor claims fresh IDs on the running store until a claim's error
	// matches want (nil: until one is first).
	waitFor := func(what string, want error) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			n++
			first, err := running.Claim(bg(), fmt.Sprint("id-", n), until)
			if want == nil && first && err == nil || want != nil && !first && errors.Is(err, want) && errors.Is(err, ErrUnavailable) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Claim = %v, %v after 10 s", what, first, err)
			}
		}
	}
	for _, setting := range []string{"fsync", "full_page_writes"} {
		t.Run(setting, func(t *testing.T) {
			set := func(value string) {
				t.Helper()
				for _, q := range []string{`ALTER SYSTEM SET ` + setting + ` = ` + value, `SELECT pg_reload_conf()`} {
					if _, err := admin.Exec(bg(), q); err != nil {
						t.Fatal(err)
					}
				}
				// The reload reaches the sessions asynchronously.
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					var got string
					if err := admin.QueryRow(bg(), `SELECT current_setting($1)`, setting).Scan(&got); err == nil && got == value {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s is not %s 10 s after the reload", setting, value)
					}
				}
			}
			set("off")
			defer set("on")
			if s, err := New(bg(), p.pool(t), Options{SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), setting) {
				t.Fatalf("New with %s off: store %v, %v; want ErrConfig naming it", setting, s != nil, err)
			}
			s := storeOn(t, p.pool(t), func(o *Options) { o.AllowRollback = true })
			if first, err := s.Claim(bg(), "allowed", until); !first || err != nil {
				t.Fatalf("Claim with %s off and AllowRollback = %v, %v; want first", setting, first, err)
			}
			waitFor(setting+" turned off", ErrConfig)
			set("on")
			waitFor(setting+" on again", nil)
		})
	}
}

// TestTableInASystemSchemaIsRefused: a schema whose name starts with pg_
// is PostgreSQL's own (pg_catalog, pg_toast, and pg_temp: the session's
// temporary schema, where each pooled connection would hold a table of its
// own that forgets everything when the connection closes, so one ID could
// be first once per connection). Schema, Migrate, Rearm and New refuse it
// with ErrConfig and create nothing.
func TestTableInASystemSchemaIsRefused(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	for _, table := range []string{"pg_temp.ctoken_replay", "pg_catalog.ctoken_replay", "pg_toast.ctoken_replay", "pg_temp_1.ctoken_replay", "pg_.ctoken_replay"} {
		t.Run(table, func(t *testing.T) {
			if sql, err := Schema(table); sql != "" || !errors.Is(err, ErrConfig) {
				t.Fatalf("Schema(%q) = %q, %v; want ErrConfig", table, sql, err)
			}
			if err := Migrate(bg(), pool, table); !errors.Is(err, ErrConfig) {
				t.Fatalf("Migrate(%q): %v; want ErrConfig", table, err)
			}
			if err := Rearm(bg(), pool, table, time.Second); !errors.Is(err, ErrConfig) {
				t.Fatalf("Rearm(%q): %v; want ErrConfig", table, err)
			}
			if s, err := New(bg(), pool, Options{Table: table, SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) {
				t.Fatalf("New(%q): %v; want ErrConfig", table, err)
			}
		})
	}
	// A table (not a schema) may start with pg_.
	if _, err := quoteTable("public.pg_replay"); err != nil {
		t.Fatalf("quoteTable(public.pg_replay): %v", err)
	}
}

// TestNewRefusesARoleThatCannotWriteTheTable: a role that may not read
// the table, or may read but not write it, is a misconfiguration New
// refuses (ErrConfig), instead of a store whose every claim fails.
func TestNewRefusesARoleThatCannotWriteTheTable(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	for _, grant := range []string{"", "SELECT", "SELECT, INSERT, UPDATE"} {
		t.Run("grant "+grant, func(t *testing.T) {
			role := "r_" + strings.Trim(strings.TrimPrefix(uniquePrefix(), "test:"), ":")
			qs := []string{`CREATE ROLE ` + role + ` LOGIN`}
			if grant != "" {
				qs = append(qs, `GRANT `+grant+` ON ctoken_replay TO `+role)
			}
			for _, q := range qs {
				if _, err := admin.Exec(bg(), q); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				admin.Exec(bg(), `REVOKE ALL ON ctoken_replay FROM `+role)
				admin.Exec(bg(), `DROP ROLE `+role)
			})
			cfg, err := pgxpool.ParseConfig(p.url())
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.User = role
			pool, err := pgxpool.NewWithConfig(bg(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if s, err := New(bg(), pool, Options{SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) {
				t.Fatalf("New as a role granted %q: %v; want ErrConfig", grant, err)
			}
		})
	}
	// Granted all four, the role runs a store.
	role := "r_" + strings.Trim(strings.TrimPrefix(uniquePrefix(), "test:"), ":")
	for _, q := range []string{`CREATE ROLE ` + role + ` LOGIN`, `GRANT SELECT, INSERT, UPDATE, DELETE ON ctoken_replay TO ` + role} {
		if _, err := admin.Exec(bg(), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		admin.Exec(bg(), `REVOKE ALL ON ctoken_replay FROM `+role)
		admin.Exec(bg(), `DROP ROLE `+role)
	})
	cfg, err := pgxpool.ParseConfig(p.url())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(bg(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := storeOn(t, pool)
	if first, err := s.Claim(bg(), "a", time.Now().Add(time.Minute)); !first || err != nil {
		t.Fatalf("Claim as a role granted all four = %v, %v; want first", first, err)
	}
}

// TestMigrateAndRearmErrorsMatchErrUnavailable: a database that cannot be
// reached, or refuses the statements, makes Migrate and Rearm fail with
// ErrUnavailable, like every call of a Store.
func TestMigrateAndRearmErrorsMatchErrUnavailable(t *testing.T) {
	p := needServer(t)
	cfg, err := pgxpool.ParseConfig(strings.Replace(p.url(), "127.0.0.1:"+p.port, "127.0.0.1:"+freePort(), 1))
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.NewWithConfig(bg(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	admin := p.pool(t)
	readOnly := p.pool(t, "default_transaction_read_only", "on")
	for _, tc := range []struct {
		name string
		pool *pgxpool.Pool
	}{{"unreachable", down}, {"read-only", readOnly}} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueTable(t, admin)
			if err := Migrate(bg(), tc.pool, name); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Migrate: %v; want ErrUnavailable", err)
			}
			if err := Rearm(bg(), tc.pool, "", time.Hour); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Rearm: %v; want ErrUnavailable", err)
			}
		})
	}
}

// TestNewRefusesAClockBehindEvenWhenTheServerIsSlow: the skew is measured
// against the instance's clock read before the query, so a slow answer
// (here: the query waits 2 s for a table lock after its transaction
// started) cannot hide a clock that is behind by more than MaxClockSkew.
func TestNewRefusesAClockBehindEvenWhenTheServerIsSlow(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	name := uniqueTable(t, admin)
	if err := Migrate(bg(), admin, name); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(p.url())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(bg(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	behind := func() time.Time { return time.Now().Add(-4 * time.Second) }
	opts := Options{Table: name, SweepInterval: -1, MaxClockSkew: 3 * time.Second, Timeout: 10 * time.Second}
	// A first New prepares the query on the pool's one connection, so that
	// the second one takes its locks after its transaction started.
	if s, err := newStore(bg(), pool, opts, behind); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New with the clock 4 s behind (limit 3 s): %v; want ErrConfig", err)
	}
	tx, err := admin.Begin(bg())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg(), `LOCK TABLE "`+name+`" IN ACCESS EXCLUSIVE MODE`); err != nil {
		tx.Rollback(bg())
		t.Fatal(err)
	}
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

// TestNewRefusesAnUnloggedOrTemporaryTable: an unlogged table is emptied
// by every crash and never reaches a standby; a temporary one (found
// first by an unqualified name in the session that made it) lives and
// dies with one connection. New refuses both (ErrConfig), and a running
// store's recheck refuses calls once its table is made unlogged.
func TestNewRefusesAnUnloggedOrTemporaryTable(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	name := uniqueTable(t, admin)
	if err := Migrate(bg(), admin, name); err != nil {
		t.Fatal(err)
	}
	running := storeOn(t, p.pool(t), func(o *Options) { o.Table = name; o.RecheckInterval = 50 * time.Millisecond })
	if _, err := admin.Exec(bg(), `ALTER TABLE "`+name+`" SET UNLOGGED`); err != nil {
		t.Fatal(err)
	}
	if s, err := New(bg(), p.pool(t), Options{Table: name, SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New on an unlogged table: %v; want ErrConfig", err)
	}
	for i, deadline := 0, time.Now().Add(10*time.Second); ; i++ {
		first, err := running.Claim(bg(), fmt.Sprint("id-", i), time.Now().Add(time.Hour))
		if !first && errors.Is(err, ErrConfig) && errors.Is(err, ErrUnavailable) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim on a table made unlogged = %v, %v after 10 s; want ErrUnavailable and ErrConfig", first, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := admin.Exec(bg(), `ALTER TABLE "`+name+`" SET LOGGED`); err != nil {
		t.Fatal(err)
	}

	// A temporary table of the same name, on the pool's one connection.
	cfg, err := pgxpool.ParseConfig(p.url())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(bg(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, q := range []string{
		`CREATE TEMP TABLE "` + name + `" (LIKE public."` + name + `" INCLUDING ALL)`,
		`INSERT INTO pg_temp."` + name + `" (key, state, token, until) VALUES (` + markerSQL + `, 'm', '', '-infinity')`,
	} {
		if _, err := pool.Exec(bg(), q); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := New(bg(), pool, Options{Table: name, SweepInterval: -1}); s != nil || !errors.Is(err, ErrConfig) {
		t.Fatalf("New on a name that finds a temporary table: %v; want ErrConfig", err)
	}
	if s, err := New(bg(), pool, Options{Table: "public." + name, SweepInterval: -1}); err != nil {
		t.Fatalf("New on the qualified permanent table: %v", err)
	} else {
		s.Close()
	}
}

// New's refusal of a standby that commits do not wait for names how to
// cover it: what WaitsForStandby accepts (synchronous_standby_names with
// synchronous_commit on, remote_write or remote_apply), a physical
// replication slot for every standby (one without a slot that is away is
// invisible), and the option that accepts the risk.
func TestJudgeStandbyRefusalNamesHowToCoverIt(t *testing.T) {
	base := serverState{writable: true, permanent: true, recordable: true, fsync: true, fullPages: true, marker: true}
	tests := []struct {
		name string
		st   func(serverState) serverState
	}{
		{"streaming", func(st serverState) serverState { st.durable.Standbys = 1; return st }},
		{"away with a slot", func(st serverState) serverState { st.durable.StandbySlots = 1; return st }},
		{"seen before", func(st serverState) serverState { st.sawStandby = true; return st }},
		{"names set, commit local", func(st serverState) serverState {
			st.durable.Standbys, st.durable.SynchronousStandbyNames, st.durable.SynchronousCommit = 1, "standby1", "local"
			return st
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := base
			st.durable.SynchronousCommit = "on"
			_, err := checks{}.judge(tt.st(st))
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("judge = %v; want ErrConfig", err)
			}
			for _, want := range []string{"synchronous_standby_names", "synchronous_commit on, remote_write or remote_apply", "physical replication slot", "primary_slot_name", "AllowAsyncStandby"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
	t.Run("covered", func(t *testing.T) {
		st := base
		st.durable = Durability{SynchronousCommit: "on", SynchronousStandbyNames: "FIRST 1 (standby1)", Standbys: 1, StandbySlots: 1}
		if _, err := (checks{}).judge(st); err != nil {
			t.Fatalf("judge of a covered standby = %v", err)
		}
	})
}
