package pgstore

// A primary with a standby: a failover to a synchronous standby keeps every
// acknowledged claim, and New refuses a primary whose standbys are all
// asynchronous. (A synchronous standby that stops answering:
// TestDurability/stopped synchronous standby fails closed.)

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// syncPair starts a primary (migrated) and a streaming standby made from
// it with pg_basebackup, then makes the standby synchronous
// (synchronous_standby_names = '*') and waits until the primary reports it
// so.
func syncPair(t *testing.T) (primary, standby *pgServer) {
	t.Helper()
	primary = ownServer(t)
	return primary, addStandby(t, primary, true, "", freePort())
}

// addStandby makes a streaming standby of primary with pg_basebackup
// (see startStandby: slot and port), synchronous or not, and waits until
// the primary reports it so.
func addStandby(t *testing.T, primary *pgServer, sync bool, slot, port string) (standby *pgServer) {
	t.Helper()
	standby = startStandby(t, primary, slot, port)
	admin := primary.pool(t)
	want := "async"
	if sync {
		want = "sync"
		mustExec(t, admin, `ALTER SYSTEM SET synchronous_standby_names = '*'`)
		mustExec(t, admin, `SELECT pg_reload_conf()`)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		var state string
		admin.QueryRow(bg(), `SELECT sync_state FROM pg_stat_replication LIMIT 1`).Scan(&state)
		return state == want, fmt.Sprintf("the standby's sync_state is %q, want %q", state, want)
	})
	return standby
}

// startStandby makes a streaming standby of primary with pg_basebackup
// (streaming from a new physical slot of that name unless slot is empty),
// listening on port, started with the extra settings ("-c", "name=value"),
// and killed when t ends.
func startStandby(t *testing.T, primary *pgServer, slot, port string, extra ...string) (standby *pgServer) {
	t.Helper()
	args := []string{"-R"}
	if slot != "" {
		args = append(args, "-C", "-S", slot)
	}
	standby = &pgServer{dir: baseBackup(t, primary, "standby-", args...), port: port, extra: extra}
	must(t, standby.start())
	t.Cleanup(standby.kill)
	return standby
}

// baseBackup takes a base backup of p with pg_basebackup (and the extra
// args) into a new directory named from prefix, and returns it.
func baseBackup(t *testing.T, p *pgServer, prefix string, args ...string) string {
	t.Helper()
	bin, err := pgBin()
	must(t, err)
	b := make([]byte, 6)
	rand.Read(b)
	dir := filepath.Join(tmpRoot, prefix+hex.EncodeToString(b))
	must(t, mkdirOwned(dir))
	args = append([]string{"-h", "127.0.0.1", "-p", p.port, "-U", "postgres",
		"-D", dir, "-X", "stream", "--no-sync", "-c", "fast"}, args...)
	cmd := exec.Command(filepath.Join(bin, "pg_basebackup"), args...)
	runAs(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	return dir
}

// TestDurability pins what synchronous replication gives the claims.
func TestDurability(t *testing.T) {
	subtests(t, []subtest{
		{"waits for standby", durabilityWaitsForStandby},
		{"standby that is away still counts", standbyThatIsAwayStillCounts},
		{"stopped synchronous standby fails closed", durabilityContractStoppedSynchronousStandby},
		{"failover to sync standby loses nothing", failoverToSynchronousStandbyLosesNothing},
		{"restore from an older backup needs a rearm", restoreFromAnOlderBackupNeedsARearm},
	})
}

// failoverToSynchronousStandbyLosesNothing: clients claim fresh IDs on
// the primary, which is SIGKILLed mid-load; the synchronous standby is
// promoted and a new store on it refuses every claim acknowledged before
// (0 lost, 0 twice).
func failoverToSynchronousStandbyLosesNothing(t *testing.T) {
	t.Parallel() // a server of its own
	primary, standby := syncPair(t)
	s := storeOn(t, primary.pool(t), func(o *Options) { o.Timeout = 2 * time.Second; o.RequireSynchronousStandby = true })
	if !s.Durability().WaitsForStandby() {
		t.Fatalf("Durability() = %+v; want a synchronous standby", s.Durability())
	}
	until := time.Now().Add(time.Hour)
	stopLoad := claimLoad(s, 8, until)
	time.Sleep(time.Second)
	primary.kill() // mid-load: no shutdown, nothing more reaches the standby
	acked := stopLoad()

	promoteStandby(t, standby)
	promoted := storeOn(t, standby.pool(t), func(o *Options) { o.Prefix = s.Prefix() })
	lost := 0
	for _, id := range acked {
		first, err := promoted.Claim(bg(), id, until)
		must(t, err)
		if first {
			lost++
		}
	}
	t.Logf("%d claims acknowledged by the primary before it was killed, %d lost in the failover", len(acked), lost)
	if lost != 0 || len(acked) == 0 {
		t.Fatalf("%d of %d acknowledged claims lost in a failover to the synchronous standby; want 0", lost, len(acked))
	}
}

// standbyThatIsAwayStillCounts: a base backup (pg_basebackup) is no
// standby and leaves nothing counted; an asynchronous standby attached
// after New, then stopped (its link cut), keeps the running store refusing
// — its slot stays, and so does the store's memory of it after the slot is
// dropped — until synchronous replication covers it; a New while the
// standby is away but has its slot is refused too, and with
// AllowAsyncStandby served with one Warn and one replay.EventRiskAccepted. A
// standby with neither a slot nor a connection is invisible to a new
// Store (the documented limit).
func standbyThatIsAwayStillCounts(t *testing.T) {
	t.Parallel() // servers of its own
	primary := ownServer(t)
	admin := primary.pool(t)
	fast := func(o *Options) { o.RecheckInterval = 50 * time.Millisecond }
	s := storeOn(t, primary.pool(t), fast)
	until := time.Now().Add(time.Hour)
	n := 0
	claim := func() (bool, error) { n++; return s.Claim(bg(), fmt.Sprint("id-", n), until) }
	refusedFor := func(what string, d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
			if first, err := claim(); first || !errors.Is(err, ErrConfig) {
				t.Fatalf("%s: Claim = %v, %v; want refused (ErrConfig)", what, first, err)
			}
		}
	}
	mustClaim(t, s, "no standby", until)

	// A base backup (pg_basebackup streams its WAL over a walsender of its
	// own, with a temporary slot) is no standby: it leaves nothing counted.
	baseBackup(t, primary, "backup-")
	time.Sleep(100 * time.Millisecond) // two rechecks
	mustClaim(t, s, "after a base backup", until)

	standby := addStandby(t, primary, false, "away", freePort())
	waitFor(t, 10*time.Second, func() (bool, string) {
		_, err := claim()
		return errors.Is(err, ErrConfig),
			fmt.Sprintf("Claim with a streaming asynchronous standby: %v; want ErrConfig", err)
	})
	standby.kill()
	waitFor(t, 10*time.Second, func() (bool, string) {
		var streaming int
		err := admin.QueryRow(bg(), `SELECT count(*) FROM pg_stat_replication`).Scan(&streaming)
		return err == nil && streaming == 0,
			fmt.Sprintf("the stopped standby still streams (%d, %v)", streaming, err)
	})
	refusedFor("the standby stopped, its slot kept", 500*time.Millisecond)
	if d := s.Durability(); d.Standbys != 0 || d.StandbySlots != 1 {
		t.Fatalf("Durability() with the standby stopped = %+v; want 0 streaming, 1 slot", d)
	}

	newRefused(t, primary.pool(t), Options{SweepInterval: -1}, "while the standby is away with its slot", "1 physical replication slot")
	var r recorder
	storeOn(t, primary.pool(t), func(o *Options) { o.AllowAsyncStandby = true }, r.options)
	if n, lines := r.count(replay.EventRiskAccepted, "AllowAsyncStandby", "WARN", "option=AllowAsyncStandby"); n != 1 || lines != 1 {
		t.Fatalf("New with AllowAsyncStandby and a standby away: %d events, %d Warn lines; want 1 and 1", n, lines)
	}

	mustExec(t, admin, `SELECT pg_drop_replication_slot('away')`)
	storeOn(t, primary.pool(t)) // the limit: nothing left for a new Store to see
	refusedFor("the standby stopped, its slot dropped", 500*time.Millisecond)

	// Synchronous replication covers any standby: the memory is cleared,
	// and once it is reset the store (with no standby anywhere) serves.
	mustExec(t, admin, `ALTER SYSTEM SET synchronous_standby_names = '*'`)
	mustExec(t, admin, `SELECT pg_reload_conf()`)
	waitFor(t, 10*time.Second, func() (bool, string) {
		d := s.Durability()
		return d.WaitsForStandby(), fmt.Sprintf("Durability() = %+v; want synchronous_standby_names read", d)
	})
	mustExec(t, admin, `ALTER SYSTEM RESET synchronous_standby_names`)
	mustExec(t, admin, `SELECT pg_reload_conf()`)
	waitFor(t, 10*time.Second, func() (bool, string) {
		first, err := claim()
		return first && err == nil,
			fmt.Sprintf("Claim after synchronous replication covered the standby and was reset = %v, %v", first, err)
	})
}

func durabilityWaitsForStandby(t *testing.T) {
	for _, tc := range []struct {
		commit, names string
		want          bool
	}{
		{"on", "", false}, {"on", "*", true}, {"remote_write", "s1", true}, {"remote_apply", "FIRST 1 (s1, s2)", true},
		{"local", "*", false}, {"off", "*", false}, {"", "*", false},
	} {
		d := Durability{SynchronousCommit: tc.commit, SynchronousStandbyNames: tc.names}
		if got := d.WaitsForStandby(); got != tc.want {
			t.Errorf("%+v.WaitsForStandby() = %v, want %v", d, got, tc.want)
		}
	}
}

// restoreFromAnOlderBackupNeedsARearm: a database restored from a
// backup taken before some claims (pg_basebackup, then the server lost and
// started again from the backup: what a point-in-time or snapshot restore
// does) still has its marker row, so the store cannot tell that it rolled
// back: the claims made after the backup are accepted a second time. This
// is the documented limit; the documented remedy — delete the marker row
// and Rearm with a fence — makes every claim refuse until the fence has
// passed.
func restoreFromAnOlderBackupNeedsARearm(t *testing.T) {
	t.Parallel() // servers of its own
	p := ownServer(t)
	s := storeOn(t, p.pool(t))
	until := time.Now().Add(time.Hour)
	claim := func(s *Store, prefix string, want bool) {
		t.Helper()
		for i := range 20 {
			wantClaim(t, s, fmt.Sprint(prefix, i), until, want, nil)
		}
	}
	claim(s, "before-", true)

	dir := baseBackup(t, p, "backup-")
	claim(s, "after-", true) // acknowledged, then lost with the server
	p.kill()

	restored := &pgServer{dir: dir, port: freePort()}
	must(t, restored.start())
	t.Cleanup(restored.kill)
	pool := restored.pool(t)
	r := storeOn(t, pool, func(o *Options) { o.Prefix = s.Prefix() })
	claim(r, "before-", false)
	claim(r, "after-", true) // the limit: accepted again, and nothing can tell

	// The remedy: forget the table on purpose, then rearm it fenced.
	mustExec(t, pool, `DELETE FROM `+r.table+` WHERE key = `+markerSQL)
	must(t, Rearm(bg(), pool, "", time.Hour))
	for _, id := range []string{"before-0", "after-0", "never-seen"} {
		wantClaim(t, r, id, until, false, ErrForgotten) // until the fence passes
	}
}

// durabilityContractStoppedSynchronousStandby: the synchronous standby
// stops answering (SIGSTOP), so no commit can be made as durable as the
// server requires: every step fails closed with ErrUnavailable at the
// store's timeout (the primary may have committed it locally), and resends
// after the standby resumes never accept an ID twice.
func durabilityContractStoppedSynchronousStandby(t *testing.T) {
	t.Parallel() // servers of its own
	primary, standby := syncPair(t)
	s := storeOn(t, primary.pool(t), func(o *Options) { o.Timeout = time.Second; o.RequireSynchronousStandby = true })
	var resume func()
	replaytest.RunDurabilityContract(t, unavailableOnly{t, s},
		func(t *testing.T) { resume = stopStandby(t, standby) },
		func(t *testing.T) { resume() })
}

// stopStandby stops standby (SIGSTOP) and returns the func that resumes
// it (SIGCONT); one left stopped is resumed when t ends.
func stopStandby(t *testing.T, standby *pgServer) (resume func()) {
	standby.signal(syscall.SIGSTOP)
	resume = sync.OnceFunc(func() { standby.signal(syscall.SIGCONT) })
	t.Cleanup(resume)
	return resume
}

// unavailableOnly fails the test when a step returns an error other than
// ErrUnavailable (or, for a confirmation, replay.ErrLeaseLost).
type unavailableOnly struct {
	t *testing.T
	*Store
}

func (u unavailableOnly) check(err error) error {
	if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, replay.ErrLeaseLost) {
		u.t.Errorf("error %v matches neither ErrUnavailable nor replay.ErrLeaseLost", err)
	}
	return err
}

func (u unavailableOnly) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	first, err := u.Store.Claim(ctx, id, until)
	return first, u.check(err)
}

func (u unavailableOnly) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	l, err := u.Store.AcquireLease(ctx, id, lease)
	return l, u.check(err)
}

func (u unavailableOnly) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	return u.check(u.Store.ConfirmLease(ctx, id, token, until))
}
