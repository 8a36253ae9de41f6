package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// snapshot writes a consistent copy of db's database to dst (VACUUM
// INTO: one read transaction, whatever the WAL holds).
func snapshot(t *testing.T, db *sql.DB, dst string) {
	t.Helper()
	mustExec(t, context.Background(), db, `VACUUM INTO '`+strings.ReplaceAll(dst, "'", "''")+`'`)
}

// sidecarOf is the sidecar of the default table of the database file at
// path: hidden, beside it.
func sidecarOf(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"-ctoken")
}

// removeDatabase deletes the database file at path with its WAL and
// shared-memory files, and keeps the sidecar.
func removeDatabase(t *testing.T, path string) {
	t.Helper()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(sidecarOf(path)); err != nil {
		t.Fatalf("the sidecar is gone: %v", err)
	}
}

// restoreCopy puts copy in place of the database at path (its WAL and
// shared-memory files removed), as an operator restoring a backup does.
func restoreCopy(t *testing.T, path, copy string) {
	t.Helper()
	removeDatabase(t, path)
	must(t, os.Rename(copy, path))
}

func claimAll(t *testing.T, s *sqlitestore.Store, ids []string, until time.Time) {
	t.Helper()
	for _, id := range ids {
		if first, err := s.Claim(context.Background(), id, until); !first || err != nil {
			t.Fatalf("Claim(%s) = %v, %v; want first", id, first, err)
		}
	}
}

// claimedAll fails t unless s answers Claim of every ID of ids not first,
// without error; when says at what point, for the message.
func claimedAll(t *testing.T, s *sqlitestore.Store, ids []string, until time.Time, when string) {
	t.Helper()
	for _, id := range ids {
		if first, err := s.Claim(context.Background(), id, until); first || err != nil {
			t.Fatalf("Claim(%s) %s = %v, %v; want not first", id, when, first, err)
		}
	}
}

// wantForgotten fails t, saying what was called, unless New on db with
// opts refuses with ErrForgotten naming each of names; a store New
// returns is closed, once refused has checked tally's claims on it (when
// tally is set). It returns New's error.
func wantForgotten(t *testing.T, db *sql.DB, opts sqlitestore.Options, tally *faultTally, what string, names ...string) error {
	t.Helper()
	s, err := sqlitestore.New(context.Background(), db, opts)
	if err == nil {
		if tally != nil {
			refused(t, s, tally)
		}
		s.Close()
	}
	bad := !errors.Is(err, sqlitestore.ErrForgotten)
	for _, n := range names {
		bad = bad || !strings.Contains(err.Error(), n)
	}
	if bad {
		t.Fatalf("%s = %v; want ErrForgotten naming %q", what, err, names)
	}
	return err
}

func idList(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// TestLoss pins what the store does when its database file is lost,
// replaced by an older copy or cannot be written: while no store runs,
// after a crash, and while one runs.
func TestLoss(t *testing.T) {
	subtests(t, []subtest{
		{"older copy restored while stopped", olderCopyRestoredWhileStopped},
		{"older copy restored after a crash", olderCopyRestoredAfterACrash},
		{"deleted while stopped", deletedWhileStopped},
		{"moved, copied or renamed without its sidecar", withoutItsSidecar},
		{"the file alone, a new deployment killed before its first checkpoint", firstCheckpointInterval},
		{"WAL links after a crash", walLinksAfterACrash},
		{"lost while running", lostWhileRunning},
		{"an older copy renamed over the running database, then a clean stop", renamedOverThenStopped},
		{"the application's VACUUM, drops and deletes while running", appVacuumWhileRunning},
		{"read-only file", readOnlyFile},
		{"the restore procedure accepts nothing twice", restoreProcedure},
	})
}

// restoreProcedure follows docs/sqlitestore.md's procedure literally
// (stop; put the copy in place, delete -wal and -shm; Rearm with the
// Horizon; start) for each way an operator replaces the file: an older
// copy with the sidecar kept, an older copy with the sidecar restored
// from the same moment (the case New cannot find), a copy taken just
// before the stop, and both files deleted. Afterwards no ID acknowledged
// before the stop is accepted, nor any other until the fence has passed.
func restoreProcedure(t *testing.T) {
	ways := []struct {
		name    string
		replace func(t *testing.T, path, copy, side string)
	}{
		{"older copy, sidecar kept", func(t *testing.T, path, copy, _ string) { restoreCopy(t, path, copy) }},
		{"older copy and its sidecar", func(t *testing.T, path, copy, side string) {
			restoreCopy(t, path, copy)
			must(t, os.Rename(side, sidecarOf(path)))
		}},
		{"copy taken just before the stop", func(t *testing.T, path, _, _ string) {
			latest := path + ".latest"
			db := driver.Open(t, path)
			snapshot(t, db, latest)
			db.Close()
			restoreCopy(t, path, latest)
		}},
		{"both files deleted", func(t *testing.T, path, _, _ string) {
			removeDatabase(t, path)
			must(t, os.Remove(sidecarOf(path)))
		}},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, w := range ways {
			t.Run(w.name, func(t *testing.T) {
				ctx := context.Background()
				db, path := openMigrated(t, d)
				dir := filepath.Dir(path)
				copy, side := filepath.Join(dir, "copy.db"), filepath.Join(dir, ".copy.db-ctoken")
				until := time.Now().Add(time.Hour)
				s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				before := idList("before-", 8)
				claimAll(t, s, before, until)
				s.Close()
				snapshot(t, db, copy)
				writeFile(t, side, readFile(t, sidecarOf(path)))
				s = mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				after := idList("after-", 8)
				claimAll(t, s, after, until)
				// 1. Stop.
				s.Close()
				db.Close()
				// 2. The copy in place, -wal and -shm deleted.
				w.replace(t, path, copy, side)
				// 3. Rearm with the Horizon, before any New.
				db = d.Open(t, path)
				must(t, sqlitestore.Rearm(ctx, db, "", sqlitestore.DefaultHorizon))
				// 4. Start.
				s = mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				for _, id := range append(append(before, after...), "fresh") {
					first, err := s.Claim(ctx, id, until)
					if _, fenced := replay.RetryAt(err); first || !errors.Is(err, sqlitestore.ErrUnavailable) || !fenced {
						t.Fatalf("Claim(%s) after the procedure = %v, %v; want refused until the fence ends", id, first, err)
					}
				}
			})
		}
	})
}

// olderCopyRestoredWhileStopped: the database file replaced by an
// older copy while no store runs makes Migrate and New refuse with
// ErrForgotten, so no ID claimed after the copy is accepted again. After
// the operator's Rearm with a fence, claims are refused until the fence
// has passed (the refusal says when, replay.RetryAt); then the IDs the
// copy holds are still claimed, and those it lost are accepted: the
// operator chose that when re-arming.
func olderCopyRestoredWhileStopped(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, path := openMigrated(t, d)
		copy := filepath.Join(filepath.Dir(path), "copy.db")
		until := time.Now().Add(time.Hour)
		a, b := idList("a-", 8), idList("b-", 8)
		s := mustStore(t, db, sqlitestore.Options{})
		claimAll(t, s, a, until)
		s.Close()
		snapshot(t, db, copy)
		s = mustStore(t, db, sqlitestore.Options{})
		claimAll(t, s, b, until)
		s.Close()
		db.Close()

		restoreCopy(t, path, copy)
		db = d.Open(t, path)
		if err := sqlitestore.Migrate(ctx, db, ""); !errors.Is(err, sqlitestore.ErrForgotten) {
			t.Fatalf("Migrate on the older copy = %v; want ErrForgotten", err)
		}
		wantForgotten(t, db, sqlitestore.Options{}, nil, "New on the older copy")

		const fence = time.Second
		must(t, sqlitestore.Rearm(ctx, db, "", fence))
		rearmed := time.Now()
		s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1})
		if err != nil {
			// The fence refuses claims, not the store: a server
			// restarted during it must come up (as pgstore's does).
			at, ok := replay.RetryAt(err)
			t.Errorf("New during the fence = %v (RetryAt %v, %v); want a store whose calls refuse until the fence passes", err, at, ok)
			if !ok {
				t.FailNow()
			}
			time.Sleep(time.Until(at) + 10*time.Millisecond)
			s = mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
		} else {
			for _, id := range append(append([]string{}, a...), b...) {
				first, err := s.Claim(ctx, id, until)
				if first || err == nil {
					t.Fatalf("Claim(%s) during the fence = %v, %v; want refused", id, first, err)
				}
				at, ok := replay.RetryAt(err)
				if !ok || at.Before(rearmed) || at.After(time.Now().Add(fence)) {
					t.Fatalf("Claim(%s) during the fence: RetryAt = %v, %v; want the fence's end, about %v after Rearm", id, at, ok, fence)
				}
				if l, err := s.AcquireLease(ctx, id, time.Minute); err == nil || l.State == replay.LeaseAcquired {
					t.Fatalf("AcquireLease(%s) during the fence = %+v, %v; want refused", id, l, err)
				}
			}
			time.Sleep(time.Until(rearmed.Add(fence)) + 10*time.Millisecond)
		}
		defer s.Close()
		claimedAll(t, s, a, until, "held in the copy, after the fence")
		claimAll(t, s, b, until) // the operator's decision: Rearm accepts what the copy lost
	})
}

// olderCopyRestoredAfterACrash: a copy taken before a claim, restored
// after the process died without Close (the sidecar holds the sequence
// the last recheck recorded, past the copy's), makes New refuse with
// ErrForgotten.
func olderCopyRestoredAfterACrash(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		db, path := openMigrated(t, d)
		copy := filepath.Join(filepath.Dir(path), "copy.db")
		until := time.Now().Add(time.Hour)
		const recheck = 20 * time.Millisecond
		s := mustStore(t, db, sqlitestore.Options{RecheckInterval: recheck, SweepInterval: -1})
		claimAll(t, s, idList("a-", 8), until)
		snapshot(t, db, copy)
		// A claim advances the sequence past the copy's, and a recheck
		// records it in the sidecar.
		claimAll(t, s, []string{"b"}, until)
		waitRecheck(t, db, path)
		// The process dies: no Close, so the sidecar keeps what the
		// last recheck recorded. Closing db stops every later check.
		db.Close()
		restoreCopy(t, path, copy)
		db = d.Open(t, path)
		wantForgotten(t, db, sqlitestore.Options{}, nil, "New on the older copy after a crash")
	})
}

// deletedWhileStopped: the database file deleted (with its WAL and
// shared memory, the sidecar kept) while no store runs makes Migrate and
// New refuse with ErrForgotten: a new empty file is not taken for the
// store's database.
func deletedWhileStopped(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		db, path := openMigrated(t, d)
		s := mustStore(t, db, sqlitestore.Options{})
		claimAll(t, s, idList("a-", 4), time.Now().Add(time.Hour))
		s.Close()
		db.Close()
		removeDatabase(t, path)

		db = d.Open(t, path)
		if err := sqlitestore.Migrate(ctx, db, ""); !errors.Is(err, sqlitestore.ErrForgotten) {
			t.Fatalf("Migrate on a new file at the path = %v; want ErrForgotten", err)
		}
		wantForgotten(t, db, sqlitestore.Options{}, nil, "New on a new file at the path")
	})
}

// mvGlob moves (cp: copies) the files path* into dir, as mv or cp
// replay.db* other/ does, and returns the database's path there.
func mvGlob(t *testing.T, path, dir string, cp bool) string {
	t.Helper()
	files, err := filepath.Glob(path + "*")
	if err != nil || len(files) == 0 {
		t.Fatalf("%s*: nothing matches (%v)", path, err)
	}
	for _, f := range files {
		to := filepath.Join(dir, filepath.Base(f))
		if cp {
			writeFile(t, to, readFile(t, f))
		} else if err := os.Rename(f, to); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, filepath.Base(path))
}

// firstCheckpointInterval: a new deployment's store is killed before a
// checkpoint of its own (every 500 commits) or a Close put its commits in
// the database file, and the file is then taken alone: copied (cp
// replay.db other/), or moved with the glob and its WAL deleted. New put
// its marker's advance in the file before it answered a call, so New on
// the file alone refuses with ErrForgotten naming ctoken-sqlite rearm,
// and accepts none of the IDs acknowledged before the kill. A reader
// older than New's commit makes the store refuse (ErrUnavailable) until
// a check's checkpoint copies it; once one did, the sidecar says so and
// a restart beside a reader serves at once.
func firstCheckpointInterval(t *testing.T) {
	ways := []struct {
		name string
		act  func(t *testing.T, path string) string // the path opened after
	}{
		{"cp replay.db other/", func(t *testing.T, path string) string {
			to := filepath.Join(plainTempDir(t), filepath.Base(path))
			writeFile(t, to, readFile(t, path))
			return to
		}},
		{"mv replay.db* other/, then rm other/replay.db-wal", func(t *testing.T, path string) string {
			to := mvGlob(t, path, plainTempDir(t), false)
			removeFiles(t, to+"-wal")
			return to
		}},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, w := range ways {
			t.Run(w.name, func(t *testing.T) {
				path := faultDB(t, d)
				tally := killJobAfter(t, faultJob{Mode: "claim", DB: path, New: "c-"}, 50)
				to := w.act(t, path)
				db := d.Open(t, to)
				wantForgotten(t, db, sqlitestore.Options{SweepInterval: -1}, tally, "New on "+to, "ctoken-sqlite rearm -db "+to)
			})
		}
		t.Run("a reader holds the checkpoint back", func(t *testing.T) {
			// A read transaction older than New's commit: New's
			// checkpoint cannot copy it, so the store refuses, and
			// serves once the reader ended and a check's checkpoint did.
			ctx := context.Background()
			db, path := openMigrated(t, d)
			reader := heldConn(t, db)
			mustExec(t, ctx, reader, `BEGIN`)
			var n int
			must(t, reader.QueryRowContext(ctx, `SELECT count(*) FROM ctoken_replay`).Scan(&n))
			s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1, RecheckInterval: 20 * time.Millisecond})
			until := time.Now().Add(time.Hour)
			first, err := s.Claim(ctx, "a-0", until)
			if first || !errors.Is(err, sqlitestore.ErrUnavailable) || errors.Is(err, sqlitestore.ErrForgotten) || !strings.Contains(err.Error(), "does not record yet that a store ran on it") {
				t.Fatalf("Claim while a reader holds New's checkpoint back = %v, %v; want ErrUnavailable naming the file's record", first, err)
			}
			mustExec(t, ctx, reader, `ROLLBACK`)
			for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
				if first, err = s.Claim(ctx, "a-0", until); err == nil || time.Now().After(end) {
					break
				}
			}
			if !first || err != nil {
				t.Fatalf("Claim a minute after the reader ended = %v, %v; want first", first, err)
			}
			to := filepath.Join(plainTempDir(t), "replay.db")
			writeFile(t, to, readFile(t, path))
			wantForgotten(t, d.Open(t, to), sqlitestore.Options{SweepInterval: -1}, nil, "New on the file copied alone", "ctoken-sqlite rearm")
			// The sidecar records that the file holds it: a restart
			// beside a reader serves at once.
			s.Close()
			mustExec(t, ctx, reader, `BEGIN`)
			must(t, reader.QueryRowContext(ctx, `SELECT count(*) FROM ctoken_replay`).Scan(&n))
			s = mustStore(t, db, sqlitestore.Options{SweepInterval: -1, RecheckInterval: time.Hour})
			if first, err := s.Claim(ctx, "a-1", until); !first || err != nil {
				t.Fatalf("Claim after a restart beside a reader = %v, %v; want first", first, err)
			}
			mustExec(t, ctx, reader, `ROLLBACK`)
		})
	})
}

// withoutItsSidecar: a database a store ran on (its marker's sequence
// advanced) found without its sidecar, or beside the sidecar of another
// database, has a history no one can judge: moved, copied or renamed
// with the usual globs (replay.db*, which leave the hidden sidecar and
// WAL links behind), or its sidecar deleted. Migrate and New refuse it
// with ErrForgotten naming ctoken-sqlite rearm, which lifts it. A table
// no store ran on yet (Migrate's, or Schema's SQL run by the team's own
// migration) is served without one, and a store that restarts is served.
func withoutItsSidecar(t *testing.T) {
	ctx := context.Background()
	ways := []struct {
		name string
		act  func(t *testing.T, d Driver, path string) string // the path opened after
	}{
		{"mv replay.db* other/", func(t *testing.T, _ Driver, path string) string { return mvGlob(t, path, plainTempDir(t), false) }},
		{"cp replay.db* backup/", func(t *testing.T, _ Driver, path string) string { return mvGlob(t, path, plainTempDir(t), true) }},
		{"renamed with its -wal and -shm", func(t *testing.T, _ Driver, path string) string {
			to := filepath.Join(filepath.Dir(path), "renamed.db")
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Rename(path+suffix, to+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
			return to
		}},
		{"its sidecar deleted", func(t *testing.T, _ Driver, path string) string { removeFiles(t, sidecarOf(path)); return path }},
		{"cp replay.db* beside another database's sidecar", func(t *testing.T, d Driver, path string) string {
			dir := plainTempDir(t)
			other := filepath.Join(dir, filepath.Base(path))
			db := d.Open(t, other)
			must(t, sqlitestore.Migrate(ctx, db, ""))
			db.Close()
			removeFiles(t, other)
			return mvGlob(t, path, dir, true)
		}},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, w := range ways {
			t.Run(w.name, func(t *testing.T) {
				db, path := openMigrated(t, d)
				s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				claimAll(t, s, idList("a-", 3), time.Now().Add(time.Hour))
				s.Close()
				db.Close()
				path = w.act(t, d, path)
				db = d.Open(t, path)
				names := []string{"ctoken-sqlite rearm -db ", filepath.Base(path) + " -table ctoken_replay"}
				if err := sqlitestore.Migrate(ctx, db, ""); !errors.Is(err, sqlitestore.ErrForgotten) || !strings.Contains(err.Error(), names[0]) || !strings.Contains(err.Error(), names[1]) {
					t.Fatalf("Migrate = %v; want ErrForgotten naming ctoken-sqlite rearm on %s", err, path)
				}
				t.Logf("New: %v", wantForgotten(t, db, sqlitestore.Options{SweepInterval: -1}, nil, "New on "+path, names...))
				must(t, sqlitestore.Rearm(ctx, db, "", time.Hour))
				s = mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				everyCallRefuses(t, s, "a-0", sqlitestore.ErrUnavailable)
			})
		}
		t.Run("a table no store ran on yet, and a restart, are served", func(t *testing.T) {
			for _, how := range []string{"Migrate", "Schema"} {
				path := filepath.Join(t.TempDir(), "replay.db")
				db := d.Open(t, path)
				if how == "Migrate" {
					must(t, sqlitestore.Migrate(ctx, db, ""))
				} else {
					schema, err := sqlitestore.Schema("")
					must(t, err)
					mustExec(t, ctx, db, "BEGIN IMMEDIATE;\n"+schema+"COMMIT;\n")
				}
				s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				claimAll(t, s, idList(how+"-", 3), time.Now().Add(time.Hour))
				s.Close()
				s = mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
				claimedAll(t, s, idList(how+"-", 3), time.Now().Add(time.Hour), "after a restart ("+how+")")
				s.Close()
			}
		})
		t.Run("first News at once on a new file are served", func(t *testing.T) {
			// Four programs start on a file no store ran on, each with
			// its own *sql.DB, half of them running Migrate first, as a
			// restart with a migration step does; a round each, as
			// they read and write the sidecar and the marker in any
			// order.
			schema, err := sqlitestore.Schema("")
			must(t, err)
			for round := range 50 {
				path := filepath.Join(t.TempDir(), "replay.db")
				db := d.Open(t, path)
				mustExec(t, ctx, db, schema)
				db.Close()
				errs := make([]error, 4)
				var wg sync.WaitGroup
				for i := range errs {
					db := d.Open(t, path)
					wg.Go(func() {
						if i%2 == 1 {
							if errs[i] = sqlitestore.Migrate(ctx, db, ""); errs[i] != nil {
								return
							}
						}
						s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1})
						if err == nil {
							s.Close()
						}
						errs[i] = err
					})
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("round %d: %v; want every Migrate and New served", round, err)
				}
			}
		})
	})
}

// walLinksAfterACrash pins the WAL links (each Store's own, judged by
// New) through what a crash can be followed by. A loss is found when
// another Store on the table closed meanwhile (its Close removes its own
// link, never another's). Nothing is taken for a loss after a VACUUM that
// shrinks the file, after the directory is copied without its hard links
// (SQLite reads the copied WAL), after another program's writes or a
// store of another table that change the pages the WAL held (New looks
// for the store's rows, not for the pages), or after a change to a
// rollback journal with two restarts (a link judged to lose nothing is
// removed).
func walLinksAfterACrash(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, d Driver) {
		t.Run("another store closed meanwhile, the WAL deleted", func(t *testing.T) {
			path := faultDB(t, d)
			p := startFault(t, faultJob{Mode: "claim", DB: path, New: "c-", HoldInWAL: true})
			atLeast := func(n int) func([]string) bool { return func(lines []string) bool { return len(lines) >= n } }
			if !p.waitFor(t, "20 lines", atLeast(20)) {
				t.Fatalf("child exited; stderr:\n%s", p.stderr.String())
			}
			// The child's claims hold the write lock back to back: New's
			// one write waits for it as long as busy_timeout allows,
			// here a minute (a loaded machine starves the waiter).
			db := d.OpenWith(t, path, With("busy_timeout", "60000"))
			other := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
			other.Close() // its link goes; the child's stays
			db.Close()
			if !p.waitFor(t, "40 more lines", atLeast(len(p.lines())+40)) {
				t.Fatalf("child exited; stderr:\n%s", p.stderr.String())
			}
			p.kill()
			tally := newFaultTally()
			tally.add(p.lines(), "c-")
			removeFiles(t, path+"-wal", path+"-shm")
			wantForgotten(t, d.Open(t, path), sqlitestore.Options{SweepInterval: -1}, tally, fmt.Sprintf("New after the WAL of %d acknowledged claims was deleted", len(tally.acked)))
		})
		// A checkpoint killed before its first page past the file's
		// end: the pages it copied point at pages the file lacks.
		// Put back, the kept WAL completes the checkpoint.
		t.Run("a checkpoint cut short, the WAL deleted", func(t *testing.T) {
			path := faultDB(t, d)
			tally := killAfter(t, path, 300)
			info, err := os.Stat(path)
			must(t, err)
			_, size, _ := walPages(t, path+"-wal")
			pastEnd := func(pgno uint32) bool { return int64(pgno-1)*int64(size) >= info.Size() }
			if writeWALPages(t, path, path+"-wal", pastEnd) == 0 {
				t.Fatal("the claims did not grow the file")
			}
			links, err := filepath.Glob(sidecarOf(path) + ".wal-*")
			if err != nil || len(links) != 1 {
				t.Fatalf("WAL links %v, %v; want one", links, err)
			}
			removeFiles(t, path+"-wal", path+"-shm")
			db := d.Open(t, path)
			if err := db.QueryRow(`SELECT count(*) FROM ctoken_replay`).Scan(new(int)); err == nil || !strings.Contains(err.Error(), "malformed") {
				t.Fatalf("reading the table = %v; want SQLite to find the file malformed", err)
			}
			wantForgotten(t, db, sqlitestore.Options{SweepInterval: -1}, nil, "New")
			must(t, db.Close())
			must(t, os.Rename(links[0], path+"-wal"))
			if err := os.Remove(path + "-shm"); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			s := mustStore(t, d.Open(t, path), sqlitestore.Options{SweepInterval: -1})
			refused(t, s, tally)
		})
		t.Run("VACUUM shrinks the file", func(t *testing.T) {
			path := faultDB(t, d)
			walSession(t, path, `CREATE TABLE junk (v BLOB)`,
				`INSERT INTO junk SELECT randomblob(1000) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400) SELECT i FROM n)`)
			tally := killAfter(t, path, 200)
			walSession(t, path, `DROP TABLE junk`, `VACUUM`)
			s := mustStore(t, d.Open(t, path), sqlitestore.Options{SweepInterval: -1})
			refused(t, s, tally)
		})
		// What an operator does after a crash, maybe then Migrate: an act
		// that keeps the WAL's commits costs nothing (New serves), one that
		// deletes them ends in ErrForgotten, never in service; either way
		// no acknowledged ID is accepted, after Rearm's fence too.
		shell := func(t *testing.T, path string, stmts ...string) {
			t.Helper()
			if _, err := exec.LookPath("sqlite3"); err != nil {
				t.Skip("the sqlite3 shell is not installed (.ci/sqlite.sh installs it)")
			}
			for _, q := range stmts {
				if out, err := exec.Command("sqlite3", path, q).CombinedOutput(); err != nil {
					t.Fatalf("sqlite3 %s: %v: %s", q, err, out)
				}
			}
		}
		moved := func(t *testing.T, path string, cp bool) string {
			t.Helper()
			dir := filepath.Join(plainTempDir(t), "moved")
			cmd := exec.Command("mv", filepath.Dir(path), dir)
			if cp {
				cmd = exec.Command("cp", "-a", filepath.Dir(path), dir)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", cmd.Args, err, out)
			}
			return filepath.Join(dir, filepath.Base(path))
		}
		for _, act := range []struct {
			name    string
			sqlite3 []string                               // statements the sqlite3 shell runs on the file
			do      func(t *testing.T, path string) string // then this, if set: the path New opens
			rm      []string                               // then the files deleted, by suffix
			refused bool
			migrate bool // Migrate before New, on its handle
		}{
			{name: "sqlite3 PRAGMA integrity_check", sqlite3: []string{`PRAGMA integrity_check`}},
			{name: "sqlite3 VACUUM", sqlite3: []string{`VACUUM`}},
			{name: "sqlite3 integrity_check then VACUUM", sqlite3: []string{`PRAGMA integrity_check`, `VACUUM`}},
			{name: "sqlite3 REINDEX", sqlite3: []string{`REINDEX`}},
			{name: "sqlite3 .backup, restored over the file", do: func(t *testing.T, path string) string {
				backup := filepath.Join(plainTempDir(t), "backup.db")
				shell(t, path, `.backup `+backup)
				restoreCopy(t, path, backup)
				return path
			}},
			{name: "VACUUM INTO, restored over the file", do: func(t *testing.T, path string) string {
				backup := filepath.Join(plainTempDir(t), "into.db")
				walSession(t, path, `VACUUM INTO '`+backup+`'`)
				restoreCopy(t, path, backup)
				return path
			}},
			{name: "mv of the directory", do: func(t *testing.T, path string) string { return moved(t, path, false) }},
			{name: "cp -a of the directory", do: func(t *testing.T, path string) string { return moved(t, path, true) }},
			// rm replay.db-* deletes these two files, no other.
			{name: "rm -wal -shm", rm: []string{"-wal", "-shm"}, refused: true},
			{name: "rm -wal, then Migrate", rm: []string{"-wal"}, refused: true, migrate: true},
			{name: "rm -wal -shm, then Migrate", rm: []string{"-wal", "-shm"}, refused: true, migrate: true},
			{name: "another program opens and closes the file, then Migrate", do: func(t *testing.T, path string) string {
				walSession(t, path, `SELECT count(*) FROM sqlite_master`)
				if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the WAL is still there after the last connection closed (%v): the case did not happen", err)
				}
				return path
			}, migrate: true},
			{name: "rm -wal -shm then VACUUM", do: func(t *testing.T, path string) string {
				removeFiles(t, path+"-wal", path+"-shm")
				walSession(t, path, `VACUUM`)
				return path
			}, refused: true},
			{name: "mv replay.db* other/ then rm -wal -shm", do: func(t *testing.T, path string) string {
				to := filepath.Join(plainTempDir(t), filepath.Base(path))
				for _, suffix := range []string{"", "-wal", "-shm"} {
					must(t, os.Rename(path+suffix, to+suffix))
				}
				return to
			}, rm: []string{"-wal", "-shm"}, refused: true},
			{name: "the directory copied without hard links", do: func(t *testing.T, path string) string {
				dir := plainTempDir(t)
				ents, err := os.ReadDir(filepath.Dir(path))
				must(t, err)
				for _, e := range ents {
					writeFile(t, filepath.Join(dir, e.Name()), readFile(t, filepath.Join(filepath.Dir(path), e.Name())))
				}
				return filepath.Join(dir, filepath.Base(path))
			}},
			{name: "another program writes in two sessions", do: func(t *testing.T, path string) string {
				// The first session's close copies the WAL into the file
				// and deletes it; the second grows the file (page 1 and
				// the app's pages change): no store row is lost.
				walSession(t, path, `INSERT INTO effects VALUES ('one')`)
				walSession(t, path, `INSERT INTO effects (id) SELECT 'app-' || i || '-' || hex(randomblob(200)) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) SELECT i FROM n)`)
				return path
			}},
			{name: "a store of another table in the file restarts first", do: func(t *testing.T, path string) string {
				db := d.Open(t, path)
				must(t, sqlitestore.Migrate(ctx, db, "other_table"))
				other := mustStore(t, db, sqlitestore.Options{Table: "other_table", SweepInterval: -1})
				claimAll(t, other, idList("other-", 300), time.Now().Add(time.Hour))
				other.Close()
				db.Close()
				return path
			}},
		} {
			t.Run("after a crash, "+act.name, func(t *testing.T) {
				path := faultDB(t, d)
				tally := killAfter(t, path, 50)
				if len(act.sqlite3) > 0 {
					shell(t, path, act.sqlite3...)
				}
				if act.do != nil {
					path = act.do(t, path)
				}
				for _, suffix := range act.rm {
					removeFiles(t, path+suffix)
				}
				db := d.Open(t, path)
				if act.migrate {
					must(t, sqlitestore.Migrate(ctx, db, ""))
				}
				if act.refused {
					t.Logf("New: %v", wantForgotten(t, db, sqlitestore.Options{SweepInterval: -1}, tally, fmt.Sprintf("New after %s (%d claims acknowledged)", act.name, len(tally.acked))))
					// The operator's decision, with a fence: no
					// acknowledged ID is accepted either.
					must(t, sqlitestore.Rearm(ctx, db, "", time.Hour))
				}
				refused(t, mustStore(t, db, sqlitestore.Options{SweepInterval: -1}), tally)
			})
		}
		t.Run("New and Close keep the process's SQLite locks on the file", func(t *testing.T) {
			// New reads the database file past SQLite to judge a link.
			// Closing any descriptor of the file would release every
			// POSIX lock the process holds on it, its connections' too
			// (fcntl(2)): another process would no longer see them.
			path := faultDB(t, d)
			tally := killAfter(t, path, 50)
			walSession(t, path, `INSERT INTO effects VALUES ('one')`)
			links, err := filepath.Glob(sidecarOf(path) + ".wal-*")
			if err != nil || len(links) == 0 {
				t.Fatalf("no WAL link after the crash (%v): nothing for New to judge", err)
			}
			db := d.Open(t, path)
			mustExec(t, context.Background(), db, `SELECT count(*) FROM effects`)
			if !othersSeeSQLiteLock(t, path) {
				t.Fatal("another process sees no SQLite lock of this one's open connection: the probe does not work here")
			}
			s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
			for _, link := range links {
				if _, err := os.Stat(link); err == nil {
					t.Fatalf("%s still there after New: it was not judged", link)
				}
			}
			if !othersSeeSQLiteLock(t, path) {
				t.Error("after New judged a WAL link, another process sees no SQLite lock of this one on the file")
			}
			refused(t, s, tally)
			// The store's own descriptor of the file, for its checks'
			// fsync, closes with it.
			s.Close()
			if !othersSeeSQLiteLock(t, path) {
				t.Error("after the store's Close, with the pool open, another process sees no SQLite lock of this one on the file")
			}
		})
		t.Run("a rollback journal after the crash, two restarts", func(t *testing.T) {
			path := faultDB(t, d)
			tally := killAfter(t, path, 50)
			// busy_timeout first: the switch from WAL waits for the other connections.
			del := []Pragma{{"busy_timeout", "5000"}, {"journal_mode", "DELETE"}, {"synchronous", "EXTRA"}}
			for round := range 2 {
				db := d.OpenWith(t, path, del)
				// A minute a call: synchronous=EXTRA's fsyncs on a loaded
				// machine outlast the default 2 s.
				s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1, Timeout: time.Minute})
				if err != nil {
					db.Close()
					t.Fatalf("restart %d: New = %v; want a store (nothing was lost)", round, err)
				}
				refused(t, s, tally)
				claimAll(t, s, idList(fmt.Sprint("del-", round, "-"), 100), time.Now().Add(time.Hour))
				s.Close()
				db.Close()
			}
		})
	})
}

// killAfter runs a claim child holding its claims in the WAL
// (faultJob.HoldInWAL) on path until it printed n lines, SIGKILLs it and
// returns what it acknowledged, one claim at least.
func killAfter(t *testing.T, path string, n int) *faultTally {
	t.Helper()
	return killJobAfter(t, faultJob{Mode: "claim", DB: path, New: "c-", HoldInWAL: true}, n)
}

// killJobAfter runs a claim child on job until it printed n lines,
// SIGKILLs it and returns what it acknowledged, one claim at least.
func killJobAfter(t *testing.T, job faultJob, n int) *faultTally {
	t.Helper()
	p := startFault(t, job)
	if !p.waitFor(t, fmt.Sprint(n, " lines"), func(lines []string) bool { return len(lines) >= n }) {
		t.Fatalf("child exited; stderr:\n%s", p.stderr.String())
	}
	p.kill()
	tally := newFaultTally()
	tally.add(p.lines(), "c-")
	if len(tally.acked) == 0 {
		t.Fatal("no claim acknowledged before the kill")
	}
	return tally
}

// refused checks that s refuses every claim the tally acknowledged.
func refused(t *testing.T, s *sqlitestore.Store, tally *faultTally) {
	t.Helper()
	faultReport(t, "Claim of an ID acknowledged before the kill", faultEach(faultKeys(tally.acked), func(id string) error {
		if first, _ := s.Claim(context.Background(), id, time.Now().Add(time.Hour)); first {
			return errors.New("first again")
		}
		return nil
	}))
}

// removeFiles deletes each file, which must exist.
func removeFiles(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		must(t, os.Remove(f))
	}
}

// everyCallRefuses checks that each method of s refuses with want.
func everyCallRefuses(t *testing.T, s *sqlitestore.Store, id string, want error) {
	t.Helper()
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	first, err := s.Claim(ctx, id, until)
	if first {
		t.Fatalf("Claim(%s) was first", id)
	}
	l, lerr := s.AcquireLease(ctx, id, time.Minute)
	if l.State == replay.LeaseAcquired {
		t.Fatalf("AcquireLease(%s) acquired", id)
	}
	r, rerr := s.AcquireRecord(ctx, id, time.Minute, []byte("fp"))
	if r.State == replay.LeaseAcquired {
		t.Fatalf("AcquireRecord(%s) acquired", id)
	}
	w, werr := s.BeginWork(ctx, id, "token")
	if w != nil {
		w.Rollback(ctx)
		t.Fatalf("BeginWork(%s) opened a Work", id)
	}
	_, serr := s.Sweep(ctx)
	for name, err := range map[string]error{
		"Claim":         err,
		"Release":       s.Release(ctx, id),
		"AcquireLease":  lerr,
		"AcquireRecord": rerr,
		"ConfirmLease":  s.ConfirmLease(ctx, id, "token", until),
		"ConfirmRecord": s.ConfirmRecord(ctx, id, "token", until, []byte("fp"), []byte("result")),
		"ReleaseLease":  s.ReleaseLease(ctx, id, "token"),
		"BeginWork":     werr,
		"Sweep":         serr,
	} {
		if !errors.Is(err, want) {
			t.Errorf("%s = %v; want %v", name, err, want)
		}
	}
}

// lostWhileRunning: the database file deleted, or replaced by an
// older copy, or its WAL file deleted, while a store runs on it: no ID claimed before is accepted
// again, and within two RecheckIntervals and a margin every call refuses
// with ErrForgotten (which also matches ErrUnavailable, as its
// documentation states). Both with a pool that keeps its connections
// (they still reach the old file) and one that opens a new connection
// for every call (which reaches the new file).
func lostWhileRunning(t *testing.T) {
	ways := []struct {
		name string
		lose func(t *testing.T, path, copy string)
	}{
		{"file deleted", func(t *testing.T, path, _ string) { removeDatabase(t, path) }},
		{"file replaced by an older copy", restoreCopy},
		{"WAL deleted", func(t *testing.T, path, _ string) { must(t, os.Remove(path+"-wal")) }},
	}
	pools := []struct {
		name    string
		maxIdle int
	}{{"connections kept", 2}, {"new connection each call", 0}}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, w := range ways {
			for _, p := range pools {
				t.Run(w.name+"/"+p.name, func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					db, path := openMigrated(t, d)
					db.SetMaxIdleConns(p.maxIdle)
					copy := filepath.Join(filepath.Dir(path), "copy.db")
					s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
					snapshot(t, db, copy)
					until := time.Now().Add(time.Hour)
					before := idList("before-", 8)
					claimAll(t, s, before, until)

					w.lose(t, path, copy)
					lost := time.Now()
					// A generous bound: the loop ends at the first refusal
					// (two RecheckIntervals on a quiet machine).
					deadline := lost.Add(30 * time.Second)
					var refusedAt time.Time
					fresh := 0
					for i := 0; ; i++ {
						for _, id := range before {
							first, err := s.Claim(ctx, id, until)
							if first {
								t.Fatalf("Claim(%s), claimed before the loss, was first %v after it", id, time.Since(lost))
							}
							if errors.Is(err, sqlitestore.ErrForgotten) && refusedAt.IsZero() {
								refusedAt = time.Now()
							}
						}
						if first, _ := s.Claim(ctx, fmt.Sprint("fresh-", i), until); first {
							fresh++
						}
						if !refusedAt.IsZero() || time.Now().After(deadline) {
							break
						}
						time.Sleep(20 * time.Millisecond)
					}
					if refusedAt.IsZero() {
						t.Fatalf("no call refused with ErrForgotten %v after the loss", time.Since(lost))
					}
					t.Logf("ErrForgotten %v after the loss; %d fresh IDs accepted before", refusedAt.Sub(lost).Round(time.Millisecond), fresh)
					for _, id := range append(before, "fresh-after") {
						everyCallRefuses(t, s, id, sqlitestore.ErrForgotten)
					}
					// ErrForgotten's documentation: "Every call then
					// refuses (the error also matches ErrUnavailable)".
					if _, err := s.Claim(ctx, "fresh-after", until); !errors.Is(err, sqlitestore.ErrUnavailable) {
						t.Errorf("Claim after the loss = %v; want an error that also matches ErrUnavailable", err)
					}
				})
			}
		}
	})
}

// renamedOverThenStopped: an older copy is renamed over the database
// while a store runs, and the application stops cleanly (Close, then the
// pool's close). Whether a check found it first or Close did, the store
// copies no WAL into the new file and records the loss in the sidecar:
// New refuses naming it and ctoken-sqlite rearm, and Inspect (status)
// returns that very refusal. The pool's close copies the old file's WAL
// into the copy; Rearm refuses the table SQLite then finds malformed,
// naming the good copy to put in place; with one in place and the -wal
// and -shm deleted, as the refusal says, Rearm works and no ID claimed
// before is accepted.
func renamedOverThenStopped(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, found := range []string{"by a check", "by Close"} {
			t.Run(found, func(t *testing.T) {
				ctx := context.Background()
				db, path := openMigrated(t, d)
				opts := sqlitestore.Options{SweepInterval: -1, RecheckInterval: time.Hour}
				if found == "by a check" {
					opts.RecheckInterval = 20 * time.Millisecond
				}
				s := mustStore(t, db, opts)
				dir := filepath.Dir(path)
				older, good := filepath.Join(dir, "older.db"), filepath.Join(dir, "good.db")
				snapshot(t, db, older)
				snapshot(t, db, good)
				until := time.Now().Add(time.Hour)
				// Past a checkpoint of the store's (every 500 commits):
				// the old file holds pages the copy lacks.
				before := idList("before-", 1200)
				claimAll(t, s, before, until)
				must(t, os.Rename(older, path))
				if found == "by a check" {
					for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
						if _, err := s.Claim(ctx, "x", until); errors.Is(err, sqlitestore.ErrForgotten) {
							break
						} else if time.Now().After(end) {
							t.Fatalf("Claim a minute after the file was replaced = %v; want ErrForgotten", err)
						}
					}
				}
				s.Close()
				must(t, db.Close())
				if _, err := os.Stat(path + "-wal"); err != nil {
					t.Fatalf("the old file's WAL is gone after the stop (%v): the test needs it beside the copy", err)
				}

				db = d.Open(t, path)
				names := []string{"found a loss, recorded in its sidecar", "was deleted or replaced while the store ran", "delete " + path + "-wal", "ctoken-sqlite rearm -db " + path}
				err := wantForgotten(t, db, opts, nil, "New after the stop", names...)
				st, ierr := sqlitestore.Inspect(ctx, db, opts)
				if ierr != nil || st.Refusal == nil || st.Refusal.Error() != err.Error() {
					t.Fatalf("Inspect = %v, %v; want New's refusal %q", st.Refusal, ierr, err)
				}
				must(t, db.Close()) // its last connection copies the old WAL into the copy
				db = d.Open(t, path)
				var ok string
				must(t, db.QueryRow(`PRAGMA quick_check`).Scan(&ok))
				if ok == "ok" {
					t.Fatal("the copy with the old file's WAL is not malformed: the test needs it to be")
				}
				wantForgotten(t, db, opts, nil, "New on the malformed file", names...)
				if err := sqlitestore.Rearm(ctx, db, "", time.Hour); !errors.Is(err, sqlitestore.ErrForgotten) || !strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), "put a good copy in its place") {
					t.Fatalf("Rearm on the malformed file = %v; want ErrForgotten naming a good copy", err)
				}
				must(t, db.Close())
				restoreCopy(t, path, good)
				db = d.Open(t, path)
				must(t, sqlitestore.Rearm(ctx, db, "", time.Hour))
				s = mustStore(t, db, opts)
				everyCallRefuses(t, s, "before-0", sqlitestore.ErrUnavailable)
				for _, id := range before {
					if first, _ := s.Claim(ctx, id, until); first {
						t.Fatalf("Claim(%s) after the rearm was first", id)
					}
				}
			})
		}
	})
}

// waitRecheck waits, a minute at most, until a recheck of the store on
// db (at path) has recorded the database's sequence in the sidecar.
func waitRecheck(t *testing.T, db *sql.DB, path string) {
	t.Helper()
	var seq float64
	must(t, db.QueryRow(`SELECT seq FROM ctoken_replay WHERE key = x'0000'`).Scan(&seq))
	for end := time.Now().Add(time.Minute); sidecarMap(t, path)["seq"].(float64) < seq; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no recheck recorded the sequence %v in a minute", seq)
		}
	}
}

// appVacuumWhileRunning: the application drops a table made before the
// store's, deletes rows of its own and runs VACUUM (which moves the
// store's table to another root page) while a store runs, checks and
// checkpoints itself. None of it is a loss: every call is served, every
// claim made before is refused, and New after a restart (which judges the
// store's WAL link by the table's tree) serves.
func appVacuumWhileRunning(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), "replay.db")
		db := d.OpenWith(t, path, With("wal_autocheckpoint", "16"))
		for _, q := range []string{`CREATE TABLE early (v BLOB)`, `CREATE TABLE app (id INTEGER PRIMARY KEY, v BLOB)`} {
			mustExec(t, ctx, db, q)
		}
		must(t, sqlitestore.Migrate(ctx, db, ""))
		var rootBefore, rootAfter int
		root := `SELECT rootpage FROM sqlite_master WHERE name = 'ctoken_replay'`
		must(t, db.QueryRowContext(ctx, root).Scan(&rootBefore))
		opts := sqlitestore.Options{SweepInterval: -1, RecheckInterval: 20 * time.Millisecond}
		s := mustStore(t, db, opts)
		until := time.Now().Add(time.Hour)
		var claimed []string
		blob := make([]byte, 3000)
		for round := range 6 {
			ids := idList(fmt.Sprintf("r%d-", round), 150)
			claimAll(t, s, ids, until)
			claimed = append(claimed, ids...)
			early := round <= 3 // dropped in round 3
			for i := range 40 {
				if early {
					mustExec(t, ctx, db, `INSERT INTO early (v) VALUES (?)`, blob)
				}
				mustExec(t, ctx, db, `INSERT INTO app (id, v) VALUES (?, ?)`, round*100+i, blob)
			}
			app := []string{`DELETE FROM app WHERE id % 2 = 0`, `VACUUM`}
			switch {
			case round == 3:
				app = append(app, `DROP TABLE early`, `VACUUM`)
			case early:
				app = append(app, `DELETE FROM early`)
			}
			for _, q := range app {
				mustExec(t, ctx, db, q)
			}
			waitRecheck(t, db, path)
		}
		must(t, db.QueryRowContext(ctx, root).Scan(&rootAfter))
		if rootAfter == rootBefore {
			t.Fatalf("the store's table kept root page %d: the test moves it", rootBefore)
		}
		claimedAll(t, s, claimed, until, "after the application's VACUUMs")
		s.Close()
		mustStore(t, db, opts).Close()
	})
}

// readOnlyFile: a database New cannot write is refused by New (an
// error, never a store), and a store whose file becomes read-only while
// it runs refuses every claim with ErrUnavailable, never first.
func readOnlyFile(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		t.Run("New refuses", func(t *testing.T) {
			t.Parallel()
			tests := []struct {
				name string
				open func(t *testing.T, path string) *sql.DB
			}{
				{"mode=ro", func(t *testing.T, path string) *sql.DB {
					db, err := sql.Open(d.SQLName, d.DSN(path, Safe)+"&mode=ro")
					must(t, err)
					t.Cleanup(func() { db.Close() })
					return db
				}},
				{"query_only", func(t *testing.T, path string) *sql.DB { return d.OpenWith(t, path, With("query_only", "1")) }},
				{"read-only bind mount", func(t *testing.T, path string) *sql.DB {
					ro := bindMount(t, filepath.Dir(path))
					remountReadOnly(t, ro)
					return d.Open(t, filepath.Join(ro, filepath.Base(path)))
				}},
				{"chmod 0444", func(t *testing.T, path string) *sql.DB {
					chmodReadOnly(t, path)
					return d.Open(t, path)
				}},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					ctx := context.Background()
					safe, path := openMigrated(t, d)
					safe.Close()
					db := tc.open(t, path)
					s, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
					if err == nil {
						first, cerr := s.Claim(ctx, "a", time.Now().Add(time.Minute))
						s.Close()
						t.Fatalf("New on a read-only database returned a store (its Claim: %v, %v); want an error", first, cerr)
					}
					t.Logf("New: %v", err)
				})
			}
		})
		t.Run("store running", func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name string
				// open opens the migrated database in dir and returns
				// the pool and a function that makes it read-only.
				setup func(t *testing.T, dir string) (*sql.DB, func())
			}{
				{"read-only bind mount", func(t *testing.T, dir string) (*sql.DB, func()) {
					mnt := bindMount(t, dir)
					db := d.Open(t, filepath.Join(mnt, "replay.db"))
					return db, func() { remountReadOnly(t, mnt) }
				}},
				{"chmod 0444", func(t *testing.T, dir string) (*sql.DB, func()) {
					path := filepath.Join(dir, "replay.db")
					return d.Open(t, path), func() { chmodReadOnly(t, path) }
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx := context.Background()
					db, makeReadOnly := tc.setup(t, t.TempDir())
					// Every connection is closed when the store gives it
					// back, so the file can become read-only (Linux
					// refuses a read-only remount while a file is open
					// for writing) and the next connection finds it so.
					db.SetMaxIdleConns(0)
					must(t, sqlitestore.Migrate(ctx, db, ""))
					s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
					until := time.Now().Add(time.Hour)
					before := idList("before-", 4)
					claimAll(t, s, before, until)
					makeReadOnly()
					for i := range 20 {
						for _, id := range append([]string{fmt.Sprint("fresh-", i)}, before...) {
							first, err := s.Claim(ctx, id, until)
							if first || !errors.Is(err, sqlitestore.ErrUnavailable) {
								t.Fatalf("Claim(%s) on a read-only file = %v, %v; want ErrUnavailable", id, first, err)
							}
							if i == 0 && id == before[0] {
								t.Logf("Claim: %v", err)
							}
						}
						if l, err := s.AcquireLease(ctx, fmt.Sprint("lease-", i), time.Minute); l.State == replay.LeaseAcquired || !errors.Is(err, sqlitestore.ErrUnavailable) {
							t.Fatalf("AcquireLease on a read-only file = %+v, %v; want ErrUnavailable", l, err)
						}
					}
				})
			}
		})
	})
}

// chmodReadOnly makes path and its directory read-only (restored when
// the test ends, so TempDir can remove them). It skips as root, whom
// permissions do not stop.
func chmodReadOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() == 0 {
		t.Skip("chmod does not stop root's writes; the read-only bind mount case covers root")
	}
	dir := filepath.Dir(path)
	must(t, os.Chmod(path, 0o444))
	must(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() {
		os.Chmod(dir, 0o755)
		os.Chmod(path, 0o644)
	})
}

// bindMount bind-mounts dir on a new directory and returns it; the mount
// is removed when the test ends. It skips where mount is not permitted.
func bindMount(t *testing.T, dir string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a bind mount needs root; the chmod case covers other users")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "--bind", dir, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount --bind is not permitted here (%v: %s); the read-only case for root needs it", err, out)
	}
	t.Cleanup(func() {
		// Lazily: the store holds the database file open for the
		// process's life.
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount -l %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// remountReadOnly makes the bind mount mnt read-only. Linux refuses
// (EBUSY) while a file on it is open for writing, so it retries for a
// few seconds.
func remountReadOnly(t *testing.T, mnt string) {
	t.Helper()
	var out []byte
	var err error
	for range 100 {
		if out, err = exec.Command("mount", "-o", "remount,ro,bind", mnt).CombinedOutput(); err == nil {
			return
		}
		time.Sleep(30 * time.Millisecond)
	}
	t.Skipf("mount -o remount,ro,bind is not permitted here (%v: %s)", err, out)
}
