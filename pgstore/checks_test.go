package pgstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// TestChecks pins the checks New runs and the recheck repeats every second.
func TestChecks(t *testing.T) {
	subtests(t, []subtest{
		{"forgotten table refuses every claim", forgottenTableRefusesEveryClaim},
		{"standby fails closed", standbyFailsClosed},
		{"standby refusal names how to cover it", judgeStandbyRefusalNamesHowToCoverIt},
		{"recheck runs every second, not every sweep", recheckRunsEverySecondNotEverySweep},
		{"write freeze refuses until lifted", writeFreezeRefusesUntilLifted},
	})
}

// writeFreezeRefusesUntilLifted: a write freeze (ALTER DATABASE ... SET
// default_transaction_read_only = on, the sessions replaced) makes New
// refuse and a running store refuse with a reason naming it; once lifted,
// the pool's sessions opened during it are still read-only (they keep the
// setting for their lifetime), and the recheck closes them: 20 of 20
// claims are served again without a reconnect by hand.
func writeFreezeRefusesUntilLifted(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	admin := p.pool(t, "default_transaction_read_only", "off") // may lift the freeze
	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.RecheckInterval = 50 * time.Millisecond })
	until := time.Now().Add(time.Hour)
	mustClaim(t, s, "before the freeze", until)
	mustExec(t, admin, `ALTER DATABASE postgres SET default_transaction_read_only = on`)
	t.Cleanup(func() { admin.Exec(bg(), `ALTER DATABASE postgres RESET default_transaction_read_only`) })
	pool.Reset() // the freeze's sessions: every connection from now on is read-only
	waitFor(t, 10*time.Second, func() (bool, string) {
		first, err := s.Claim(bg(), uniquePrefix(), until)
		return !first && errors.Is(err, ErrUnavailable) && strings.Contains(fmt.Sprint(err), "default_transaction_read_only"),
			fmt.Sprintf("Claim during the freeze = %v, %v; want refused naming default_transaction_read_only", first, err)
	})
	if n, err := New(bg(), p.pool(t), Options{SweepInterval: -1}); n != nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "read-only") {
		t.Fatalf("New during the freeze = %v, %v; want ErrUnavailable naming the read-only session", n, err)
	}
	mustExec(t, admin, `ALTER DATABASE postgres RESET default_transaction_read_only`)
	waitForClaim(t, s, "after the freeze was lifted", nil)
	for i := range 20 {
		mustClaim(t, s, fmt.Sprint("after-", i), until)
	}
}

// forgottenTableRefusesEveryClaim: a table that lost its rows (TRUNCATE,
// DELETE, or dropped) no longer knows which IDs were claimed, so every
// claim and lease step refuses — including of IDs it never saw — until an
// operator rearms it. Migrate refuses to rearm it silently.
func forgottenTableRefusesEveryClaim(t *testing.T) {
	for _, forget := range []string{"TRUNCATE %s", "DELETE FROM %s", "DROP TABLE %s"} {
		t.Run(strings.Fields(forget)[0], func(t *testing.T) {
			pool := needServer(t).pool(t)
			name := migratedTable(t, pool)
			s := storeOn(t, pool, func(o *Options) { o.Table = name })
			until := time.Now().Add(time.Hour)
			mustClaim(t, s, "claimed", until)
			l := mustLease(t, s, "leased", time.Minute)
			mustExec(t, pool, strings.Replace(forget, "%s", `"`+name+`"`, 1))
			for _, id := range []string{"claimed", "never-seen"} {
				wantClaim(t, s, id, until, false, ErrUnavailable)
				wantLease(t, s, id, 0, ErrUnavailable)
			}
			wantIs(t, s.ConfirmLease(bg(), "leased", l.Token, until), ErrUnavailable, "ConfirmLease after %s: %v; want ErrUnavailable", forget)
			if strings.HasPrefix(forget, "DROP") {
				return // a dropped table is a missing one: New refuses with ErrConfig
			}
			wantIs(t, errOf(s.Claim(bg(), "claimed", until)), ErrForgotten, "Claim after %s: %v; want ErrForgotten", forget)
			// Every refusal names the one way out, Rearm, and that a
			// restore from a dump needs it too: the recheck's, New's and
			// Migrate's.
			namesRearm := func(what string, err error) {
				t.Helper()
				for _, want := range []string{"pgstore.Rearm(ctx, pool, ", name, "restore", "dump", "delete its marker row"} {
					if !errors.Is(err, ErrForgotten) || !strings.Contains(fmt.Sprint(err), want) {
						t.Fatalf("%s after %s = %v; want ErrForgotten naming %q", what, forget, err, want)
					}
				}
			}
			waitFor(t, 10*time.Second, func() (bool, string) {
				_, err := s.Claim(bg(), "claimed", until)
				return strings.Contains(fmt.Sprint(err), "pgstore.Rearm"), fmt.Sprintf("Claim after %s: %v; want the recheck's refusal naming pgstore.Rearm", forget, err)
			})
			namesRearm("Claim", errOf(s.Claim(bg(), "never-seen", until)))
			namesRearm("New", errOf(New(bg(), pool, Options{Table: name})))
			namesRearm("Migrate", Migrate(bg(), pool, name))
			wantIs(t, Rearm(bg(), pool, name, -time.Second), ErrConfig, "Rearm with a negative fence: %v; want ErrConfig")
			// Rearmed with a fence: refused until it passes, then served.
			// A claim that returned before rearmed+fence ran within the
			// fence (which Rearm started after rearmed): it must be
			// refused, however long the machine made it take.
			const fence = 3 * time.Second
			rearmed := time.Now()
			must(t, Rearm(bg(), pool, name, fence))
			wantIs(t, errOf(New(bg(), pool, Options{Table: name, SweepInterval: -1})), nil, "New on a rearmed, fenced table: %v")
			within := 0
			for {
				first, err := s.Claim(bg(), "claimed", until)
				if time.Since(rearmed) >= fence {
					break
				}
				if first || !errors.Is(err, ErrForgotten) {
					t.Fatalf("Claim within the fence = %v, %v; want ErrForgotten", first, err)
				}
				within++
				time.Sleep(50 * time.Millisecond)
			}
			if within == 0 {
				t.Fatalf("no claim returned within the %v fence", fence)
			}
			time.Sleep(time.Until(rearmed.Add(fence + 100*time.Millisecond)))
			mustClaim(t, s, "never-seen", until)
			must(t, Rearm(bg(), pool, name, time.Hour))
			mustClaim(t, s, "also-never-seen", until)
		})
	}
}

// standbyFailsClosed: the database the store was built on comes back
// as a read-only hot standby (a failover gone wrong): every claim is
// refused as unavailable, and New refuses it.
func standbyFailsClosed(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	pool := p.pool(t)
	s := storeOn(t, pool, func(o *Options) { o.Timeout = 5 * time.Second })
	until := time.Now().Add(time.Hour)
	mustClaim(t, s, "before", until)
	p.kill()
	signal := filepath.Join(p.dir, "standby.signal")
	must(t, os.WriteFile(signal, nil, 0o600))
	if cred != nil {
		os.Chown(signal, int(cred.Uid), int(cred.Gid))
	}
	must(t, p.start())
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
	wantIs(t, errOf(New(bg(), pool, Options{})), ErrUnavailable, "New on a standby: %v; want ErrUnavailable")
}

// New's refusal of a standby that commits do not wait for names how to
// cover it: what WaitsForStandby accepts (synchronous_standby_names with
// synchronous_commit on, remote_write or remote_apply), a physical
// replication slot for every standby (one without a slot that is away is
// invisible), and the option that accepts the risk.
func judgeStandbyRefusalNamesHowToCoverIt(t *testing.T) {
	base := serverState{writable: true, permanent: true, recordable: true, functions: true, fsync: true, fullPages: true, marker: true,
		durable: Durability{SynchronousCommit: "on"}}
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
			_, err := checks{}.judge(tt.st(base))
			wantIs(t, err, ErrConfig, "judge = %v; want ErrConfig")
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
		wantIs(t, errOf((checks{}).judge(st)), nil, "judge of a covered standby = %v")
	})
}

// recheckRunsEverySecondNotEverySweep: synchronous_commit turned off
// after New — by ALTER SYSTEM and a reload, or by ALTER ROLE, which only
// the sessions opened afterwards get — is refused within about one
// DefaultRecheckInterval, with the sweeper at an hour; the refusal and the
// return to service (once the pool's sessions opened while the role said
// off are closed) are each reported once.
func recheckRunsEverySecondNotEverySweep(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	admin := p.pool(t)
	run := func(qs []string) error {
		for _, q := range qs {
			if _, err := admin.Exec(bg(), q); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range []struct {
		name    string
		off, on []string
	}{
		{"ALTER SYSTEM", []string{`ALTER SYSTEM SET synchronous_commit = off`, `SELECT pg_reload_conf()`}, []string{`ALTER SYSTEM RESET synchronous_commit`, `SELECT pg_reload_conf()`}},
		{"ALTER ROLE", []string{`ALTER ROLE postgres SET synchronous_commit = off`}, []string{`ALTER ROLE postgres RESET synchronous_commit`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r recorder
			s := storeOn(t, p.pool(t), func(o *Options) { o.SweepInterval = time.Hour; o.RecheckInterval = 0 }, r.options)
			until := time.Now().Add(time.Hour)
			n := 0
			claim := func() (bool, error) { n++; return s.Claim(bg(), fmt.Sprint("id-", n), until) }
			mustClaim(t, s, "before", until)
			restored := false
			defer func() {
				if !restored {
					run(c.on)
				}
			}()
			// One interval, plus one for the reload and a loaded machine.
			const limit = 2*DefaultRecheckInterval + time.Second
			must(t, run(c.off))
			changed := time.Now()
			waitFor(t, limit, func() (bool, string) {
				first, err := claim()
				return errors.Is(err, ErrConfig) && errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "synchronous_commit"),
					fmt.Sprintf("%s: Claim = %v, %v after synchronous_commit was turned off; want refused", c.name, first, err)
			})
			t.Logf("%s: refused %v after the change", c.name, time.Since(changed).Round(time.Millisecond))
			must(t, run(c.on))
			restored = true
			// The pool's sessions opened while the role said off keep it
			// (and the store keeps refusing) until they are closed.
			s.pool.Reset()
			waitFor(t, limit, func() (bool, string) {
				first, err := claim()
				return first && err == nil,
					fmt.Sprintf("%s: Claim = %v, %v after synchronous_commit was on again", c.name, first, err)
			})
			refusing, lines := r.count(replay.EventRefusing, "", "WARN", "synchronous_commit")
			serving, _ := r.count(replay.EventServing, "", "", "")
			if refusing != 1 || lines != 1 || serving != 1 {
				t.Fatalf("%s: %d replay.EventRefusing (%d Warn lines), %d replay.EventServing; want 1, 1, 1", c.name, refusing, lines, serving)
			}
		})
	}
}
