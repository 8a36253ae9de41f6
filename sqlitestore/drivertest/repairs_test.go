package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// repairs follows a Store's repair after an I/O error through its
// Observer: the repair starts with replay.EventRefusing (its reason says the
// store rewrites the database) and ends with the next replay.EventServing.
type repairs struct {
	mu             sync.Mutex
	started, ended int
	changed        chan struct{}
}

func newRepairs() *repairs { return &repairs{changed: make(chan struct{}, 1)} }

func (r *repairs) observe(e replay.Event) {
	r.mu.Lock()
	switch {
	case e.Kind == replay.EventRefusing && e.Reason != nil && strings.Contains(e.Reason.Error(), "rewritten the database"):
		r.started++
	case e.Kind == replay.EventServing && r.ended < r.started:
		r.ended++
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// over reports whether every repair started has ended.
func (r *repairs) over() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended == r.started
}

// count is how many repairs started.
func (r *repairs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// wait returns once every repair started has ended: the store serves
// again. The bound is a safety net for a repair that never ends.
func (r *repairs) wait(t testing.TB) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for !r.over() {
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatal("the store's repair after an I/O error did not end within 2 minutes")
		}
	}
}

// TestRepairUnfinishedAtTheStop: a repair after an I/O error that had not
// ended when the last store stopped (the sidecar's repair mark, as a
// crash leaves it) is run by the next New before the store serves, when
// the machine did not restart; after a restart (another boot id in the
// mark) New refuses with ErrForgotten, since the page cache that held the
// only good copy is gone, until Rearm. The claims made before are refused
// after the repair, and nothing is accepted while it runs.
func TestRepairUnfinishedAtTheStop(t *testing.T) {
	boot := repairBoot(t)
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range []struct {
			name, mark string
			refused    bool
		}{
			{"the same boot: repaired, then served", boot, false},
			{"another boot: refused until Rearm", "boot-before-the-crash", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db, path := openMigrated(t, d)
				ids, until := claimThenMark(t, db, path, 300, tc.mark)

				rep := newRepairs()
				s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe})
				if tc.refused {
					if !errors.Is(err, sqlitestore.ErrForgotten) {
						t.Fatalf("New after a restart with a repair unfinished = %v; want ErrForgotten", err)
					}
					must(t, sqlitestore.Rearm(ctx, db, "", 0))
					s = mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				} else {
					if err != nil {
						t.Fatalf("New with a repair unfinished in this boot = %v; want a store that repairs", err)
					}
					defer s.Close()
					if rep.count() != 1 {
						t.Fatalf("%d repairs started by New; want 1", rep.count())
					}
					rep.wait(t)
				}
				claimedAll(t, s, ids, until, "after the repair")
				claimAll(t, s, []string{"after"}, until)
				if got := sidecarMap(t, path)["repair"]; got != nil {
					t.Fatalf("the sidecar's repair mark after the repair = %v; want none", got)
				}
			})
		}
	})
}

// sidecarMap reads the default table's sidecar beside path.
func sidecarMap(t *testing.T, path string) map[string]any {
	t.Helper()
	b := readFile(t, sidecarOf(path))
	var m map[string]any
	must(t, json.Unmarshal(b, &m))
	return m
}

// setSidecarField sets a field of the default table's sidecar beside
// path, as a store would have written it.
func setSidecarField(t *testing.T, path, field string, v any) {
	t.Helper()
	m := sidecarMap(t, path)
	m[field] = v
	b, err := json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(sidecarOf(path), b, 0o600))
}

// repairBoot returns this boot's id, which the sidecar names (a NORMAL
// store's, a repair mark's); it skips where there is none (not Linux).
func repairBoot(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip("no kernel boot id here (not Linux): the store cannot tell a restart of the machine")
	}
	return strings.TrimSpace(string(b))
}

// markRepair leaves the database at path as a store closed in the middle
// of its repair after an I/O error leaves it: the next New repairs before
// it serves.
func markRepair(t *testing.T, db *sql.DB, path string) {
	t.Helper()
	mustStore(t, db, sqlitestore.Options{SweepInterval: -1}).Close()
	setSidecarField(t, path, "repair", repairBoot(t))
}

// claimThenMark claims n IDs (before-0...) until an hour from now in a
// store on db, closes it, and sets the repair mark of the sidecar beside
// path to mark. It returns the IDs and their until.
func claimThenMark(t *testing.T, db *sql.DB, path string, n int, mark string) ([]string, time.Time) {
	t.Helper()
	ids, until := idList("before-", n), time.Now().Add(time.Hour)
	s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
	claimAll(t, s, ids, until)
	s.Close()
	setSidecarField(t, path, "repair", mark)
	return ids, until
}

// requireDBPage skips a driver whose SQLite lacks sqlite_dbpage: there the
// repair is one VACUUM, which holds the write lock and grows the WAL by
// the whole file (docs/sqlitestore.md).
func requireDBPage(t *testing.T, db *sql.DB) {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_dbpage WHERE pgno = 1`).Scan(&n); err != nil {
		t.Skipf("no sqlite_dbpage in this driver's SQLite (%v): the repair is one VACUUM", err)
	}
}

// appPages adds about pages pages of the application's rows (table app)
// to db, then empties the WAL.
func appPages(t *testing.T, db *sql.DB, pages int) {
	t.Helper()
	mustExec(t, context.Background(), db, `CREATE TABLE IF NOT EXISTS app (id INTEGER PRIMARY KEY, v BLOB)`)
	mustExec(t, context.Background(), db, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?)
		INSERT INTO app (v) SELECT zeroblob(3900) FROM c`, pages)
	must(t, checkpointTruncate(db))
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	must(t, err)
	return info.Size()
}

// TestRepairClosedMidwayLeavesNoTransaction: a Close in the middle of a
// repair (at once, or after one of its transactions committed) hands no
// connection back to the pool inside a transaction, a cancelled COMMIT
// included: New on the same *sql.DB serves (and repairs again), and every
// insert the application made on that *sql.DB around each Close is in the
// file once it is opened again, where another *sql.DB's New serves.
// Nothing is timed: inserts and calls wait up to a minute for the lock.
func TestRepairClosedMidwayLeavesNoTransaction(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		opts := sqlitestore.Options{SweepInterval: -1, Timeout: time.Minute}
		path := filepath.Join(t.TempDir(), "replay.db")
		db := d.OpenWith(t, path, With("busy_timeout", "60000"))
		must(t, sqlitestore.Migrate(ctx, db, ""))
		appPages(t, db, 2000)
		markRepair(t, db, path)
		watch := heldConn(t, db)
		version := func() int64 {
			var v int64
			must(t, watch.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v))
			return v
		}
		inserts := 0
		insert := func(when string) {
			t.Helper()
			if _, err := db.ExecContext(ctx, `INSERT INTO app (v) VALUES ('inserted')`); err != nil {
				t.Fatalf("the application's insert %s: %v", when, err)
			}
			inserts++
		}
		midway := 0 // Closes that came before their repair's end
		for round := range 8 {
			if sidecarMap(t, path)["repair"] == nil { // the last round's repair ended before its Close
				setSidecarField(t, path, "repair", repairBoot(t))
			}
			rep := newRepairs()
			opts.Observer = rep.observe
			s, err := sqlitestore.New(ctx, db, opts)
			if err != nil {
				t.Fatalf("round %d: New on the *sql.DB of a store closed in its repair = %v; want a store that repairs", round, err)
			}
			if rep.count() != 1 {
				t.Fatalf("round %d: %d repairs started by New; want 1", round, rep.count())
			}
			if round%2 == 1 {
				// After one of the repair's commits, or its end should
				// the machine let it finish first.
				deadline := time.Now().Add(2 * time.Minute)
				for v := version(); version() == v && !rep.over(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the repair committed nothing in 2 minutes", round)
					}
				}
			}
			insert("during the repair")
			s.Close()
			if sidecarMap(t, path)["repair"] != nil { // Close kept the mark: the repair had not ended
				midway++
			}
			for range 4 {
				insert("after a Close in the repair")
			}
		}
		t.Logf("%d of 8 Closes came in the middle of their repair", midway)
		if midway == 0 {
			t.Fatal("every repair ended before its Close: no Close came in the middle of one")
		}
		rep := newRepairs()
		opts.Observer = rep.observe
		s := mustStore(t, db, opts)
		rep.wait(t)
		s.Close()
		watch.Close()
		db.Close()

		db2 := d.Open(t, path)
		if n := countRows(t, db2, `SELECT count(*) FROM app WHERE v = 'inserted'`); n != inserts {
			t.Fatalf("%d of the application's %d inserts in the file after reopening; want all", n, inserts)
		}
		opts.Observer = nil
		s2, err := sqlitestore.New(ctx, db2, opts)
		if err != nil {
			t.Fatalf("New on another *sql.DB after the repairs = %v", err)
		}
		s2.Close()
	})
}

// TestRepairYieldsToTheApplicationsWriter: during the repair of a file of
// 3000 pages, an application inserting a row every millisecond on the
// same *sql.DB (busy_timeout 5000) is never refused: the repair's
// transactions are short and it pauses after each. It logs the repair's
// time, the WAL's peak and the inserts' latency beside idle
// (docs/faults.md); CTOKEN_REPAIR_MIB sets the file's size.
func TestRepairYieldsToTheApplicationsWriter(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, path := openMigrated(t, d)
		requireDBPage(t, db)
		pages := 3000
		if mib, err := strconv.Atoi(os.Getenv("CTOKEN_REPAIR_MIB")); err == nil {
			pages = mib * 256
		}
		appPages(t, db, pages)
		markRepair(t, db, path)
		insert := func() (time.Duration, error) {
			start := time.Now()
			_, err := db.ExecContext(ctx, `INSERT INTO app (v) VALUES (randomblob(100))`)
			return time.Since(start), err
		}
		var idle []time.Duration
		for range 300 {
			took, err := insert()
			must(t, err)
			idle = append(idle, took)
			time.Sleep(time.Millisecond)
		}
		var during []time.Duration
		var failed []error
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for !isClosed(stop) {
				took, err := insert()
				if err != nil {
					failed = append(failed, err)
				} else {
					during = append(during, took)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		rep := newRepairs()
		start := time.Now()
		s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe})
		if err != nil {
			close(stop)
			<-stopped
			t.Fatal(err)
		}
		rep.wait(t)
		took := time.Since(start)
		close(stop)
		<-stopped
		s.Close()
		if len(failed) > 0 {
			t.Fatalf("%d of the application's inserts failed during the repair (%d answered); the first: %v", len(failed), len(during), failed[0])
		}
		if len(during) == 0 {
			t.Fatal("no insert of the application was answered during the repair")
		}
		t.Logf("the repair of %.0f MiB took %v; the WAL's peak %.1f MiB; the application's inserts (one every ms): idle p50 %v p99 %v max %v (%d), during the repair p50 %v p99 %v max %v (%d)",
			float64(fileSize(t, path))/(1<<20), took.Round(time.Millisecond), float64(fileSize(t, path+"-wal"))/(1<<20),
			quantile(idle, 0.5), quantile(idle, 0.99), quantile(idle, 1), len(idle),
			quantile(during, 0.5), quantile(during, 0.99), quantile(during, 1), len(during))
	})
}

// quantile returns the q-quantile of ds (1: the maximum), rounded.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)].Round(10 * time.Microsecond)
}

// TestRepairKeepsTheWALUnderItsBound: the repair of a file of 5000 pages
// (20 MiB) checkpoints every 16 MiB it rewrote, so the WAL, which SQLite
// never shrinks, stays under 16 MiB of pages and their frame headers.
func TestRepairKeepsTheWALUnderItsBound(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		db, path := openMigrated(t, d)
		requireDBPage(t, db)
		appPages(t, db, 5000)
		markRepair(t, db, path)
		rep := newRepairs()
		mustStore(t, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe})
		rep.wait(t)
		const bound = 16<<20 + 4096*(24+1) // 16 MiB of pages, their frame headers, one frame more
		size, wal := fileSize(t, path), fileSize(t, path+"-wal")
		if size < 19<<20 || wal > bound {
			t.Fatalf("after the repair of a file of %d bytes the WAL holds %d; want at most %d", size, wal, bound)
		}
		t.Logf("the WAL's peak in the repair of %.1f MiB: %.1f MiB", float64(size)/(1<<20), float64(wal)/(1<<20))
	})
}

// TestRepairWaitsForFreeSpace: the database on a small tmpfs with less
// free space than the repair needs (the WAL's growth by the file's pages,
// as the file is smaller than 16 MiB, and an eighth more): the repair does
// not start, the store refuses every claim with an error naming the
// space it needs and the space it found (ErrUnavailable), and logs both;
// once space is freed the repair runs and the store serves, every claim
// acknowledged before still refused.
func TestRepairWaitsForFreeSpace(t *testing.T) {
	boot := repairBoot(t)
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		mnt := smallDisk(t, "32m")
		path, filler := filepath.Join(mnt, "replay.db"), filepath.Join(mnt, "filler")
		db := d.Open(t, path)
		must(t, sqlitestore.Migrate(ctx, db, ""))
		appPages(t, db, 500) // 2 MiB, less what the WAL's file holds already
		ids, until := claimThenMark(t, db, path, 50, boot)
		fillDisk(t, filler, 1<<20)

		logs := &logRecords{}
		rep := newRepairs()
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe, Logger: slog.New(logs)})
		// The refusal names the figures once the repair measured the space.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, err := s.Claim(ctx, "fresh", until)
			if !errors.Is(err, sqlitestore.ErrUnavailable) {
				t.Fatalf("Claim while the repair waits for space = %v; want ErrUnavailable", err)
			}
			if msg := err.Error(); strings.Contains(msg, "MiB free in "+mnt) {
				var need, free float64
				if _, serr := fmt.Sscanf(msg[strings.Index(msg, "the repair needs"):], "the repair needs %f MiB free in "+mnt+" and finds %f MiB", &need, &free); serr != nil || need < 1 || free >= need {
					t.Fatalf("the refusal %q: needed %.1f MiB, free %.1f (%v); want more needed than free", msg, need, free, serr)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the refusal never named the free space the repair needs: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if logs.count(slog.LevelWarn, "waits for free space") == 0 {
			t.Fatal("no Warn logged for the free space the repair waits for")
		}
		must(t, os.Remove(filler))
		rep.wait(t)
		claimedAll(t, s, ids, until, "after the repair")
		claimAll(t, s, []string{"fresh"}, until)
	})
}

// TestRepairNamesAHeldReader: a read transaction held open (an unclosed
// *sql.Rows) on a disk with room for the repair's WAL bound (16 MiB and
// an eighth) but not for the whole file: the checkpoint the reader holds
// back would let the WAL grow by every page, so the repair waits, and the
// refusal names the reader as the cause, with the space needed once it
// ends; the repair looks again every second. Once the read ends the
// repair runs and the store serves, every claim acknowledged before still
// refused.
func TestRepairNamesAHeldReader(t *testing.T) {
	boot := repairBoot(t)
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		mnt := smallDisk(t, "64m")
		path, filler := filepath.Join(mnt, "replay.db"), filepath.Join(mnt, "filler")
		db := d.Open(t, path)
		requireDBPage(t, db)
		must(t, sqlitestore.Migrate(ctx, db, ""))
		appPages(t, db, 6000) // 24 MiB: more than the 16 MiB between two of the repair's checkpoints
		ids, until := claimThenMark(t, db, path, 50, boot)
		fillDisk(t, filler, 22<<20) // room for 16 MiB of the WAL and an eighth, not for 24 MiB
		rows, err := db.QueryContext(ctx, `SELECT id FROM app`)
		must(t, err)
		defer rows.Close()
		if !rows.Next() {
			t.Fatal(rows.Err())
		}

		logs := &logRecords{}
		rep := newRepairs()
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe, Logger: slog.New(logs)})
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, err := s.Claim(ctx, "fresh", until)
			if !errors.Is(err, sqlitestore.ErrUnavailable) {
				t.Fatalf("Claim while a reader holds the repair back = %v; want ErrUnavailable", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "MiB free in "+mnt) {
				if !strings.Contains(msg, "a read transaction holds the WAL") || !strings.Contains(msg, "once the read ends: end the read") {
					t.Fatalf("the refusal while a reader holds the WAL = %q; want it to name the reader as the cause", msg)
				}
				t.Logf("the refusal: %s", msg)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the refusal never named what holds the repair back: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := logs.count(slog.LevelWarn, "waits for a read transaction that holds the WAL"); n == 0 {
			t.Fatal("no Warn logged for the reader the repair waits for")
		}
		if w := logs.attr(slog.LevelWarn, "waits for a read transaction", "in"); w != time.Second.String() {
			t.Fatalf("the repair waiting for a reader looks again in %s; want 1s", w)
		}
		ended := time.Now()
		must(t, rows.Close())
		rep.wait(t)
		t.Logf("served %v after the read ended", time.Since(ended).Round(time.Millisecond))
		claimedAll(t, s, ids, until, "after the repair")
		claimAll(t, s, []string{"fresh"}, until)
	})
}

// TestRepairBesideAHeldRead: an application that holds a read open (an
// unclosed *sql.Rows) from before the repair does not keep the store
// refusing: the rewritten pages are synced in the WAL at each commit, so
// the repair ends without the checkpoint the reader holds back, says so,
// and the store serves.
func TestRepairBesideAHeldRead(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, path := openMigrated(t, d)
		appPages(t, db, 1000)
		ids, until := claimThenMark(t, db, path, 50, repairBoot(t))
		rows, err := db.QueryContext(ctx, `SELECT id FROM app`)
		must(t, err)
		defer rows.Close()
		if !rows.Next() {
			t.Fatal(rows.Err())
		}
		logs := &logRecords{}
		rep := newRepairs()
		s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe, Logger: slog.New(logs)})
		defer s.Close()
		rep.wait(t)
		if logs.count(slog.LevelInfo, "holds it back") == 0 {
			t.Error("no line logged for the checkpoint a reader holds back")
		}
		claimedAll(t, s, ids, until, "after the repair")
		claimAll(t, s, []string{"fresh"}, until)
	})
}
