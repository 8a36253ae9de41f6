package drivertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// TestRearmFenceFitsTheLoss: the refusal of a table without its sidecar,
// and Inspect's (ctoken-sqlite status), say whether acknowledged claims
// can have been lost and name the rearm command with the fence that
// fits. Its sidecar deleted after a clean stop, the files prove nothing
// was lost (the clean stop's record matches the file): fence 0, and the
// re-armed store refuses every claim made before and takes new ones at
// once. Moved after a crash with its WAL, the hidden files left behind,
// the file cannot be told from an older copy: the stores' Horizon, and
// the hidden files put back make New serve with nothing lost. A real
// loss (a store ran after the clean stop, crashed, then its WAL, the WAL
// kept beside it and the sidecar were deleted: New removed the clean
// stop's record before its first write; or an older copy restored
// without the sidecar) is fenced for the Horizon.
func TestRearmFenceFitsTheLoss(t *testing.T) {
	ctx := context.Background()
	opts := sqlitestore.Options{SweepInterval: -1, Horizon: 3 * time.Hour}
	const horizon, zero = "-fence 3h0m0s", "-fence 0s"
	// refusal checks New's refusal and Inspect's on path, and returns New's.
	refusal := func(t *testing.T, d Driver, path, fence, says string) {
		t.Helper()
		db := d.Open(t, path)
		err := wantForgotten(t, db, opts, nil, "New", says, "run: ctoken-sqlite rearm -db "+path+" -table ctoken_replay "+fence)
		if !strings.HasSuffix(err.Error(), fence) {
			t.Fatalf("New = %v; want the rearm command to end with %s", err, fence)
		}
		st, ierr := sqlitestore.Inspect(ctx, db, opts)
		must(t, ierr)
		if st.Refusal == nil || st.Refusal.Error() != err.Error() {
			t.Fatalf("Inspect's refusal = %v; want New's: %v", st.Refusal, err)
		}
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		t.Run("its sidecar deleted after a clean stop: nothing lost, fence 0", func(t *testing.T) {
			db, path := openMigrated(t, d)
			ids, until := idList("a-", 20), time.Now().Add(time.Hour)
			s := mustStore(t, db, opts)
			claimAll(t, s, ids, until)
			s.Close()
			db.Close()
			removeFiles(t, sidecarOf(path))
			refusal(t, d, path, zero, "nothing was lost, so the fence is 0")
			db = d.Open(t, path)
			must(t, sqlitestore.Rearm(ctx, db, "", 0))
			s = mustStore(t, db, opts)
			defer s.Close()
			claimedAll(t, s, ids, until, "after the rearm")
			claimAll(t, s, []string{"fresh"}, until)
		})
		t.Run("moved after a crash with its WAL, the hidden files left: Horizon, or the hidden files put back", func(t *testing.T) {
			path := faultDB(t, d)
			tally := killAfter(t, path, 30)
			to := filepath.Join(plainTempDir(t), filepath.Base(path))
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Rename(path+suffix, to+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
			refusal(t, d, to, horizon, "acknowledged claims may be lost")
			hidden, err := filepath.Glob(sidecarOf(path) + "*")
			must(t, err)
			for _, f := range hidden {
				must(t, os.Rename(f, filepath.Join(filepath.Dir(to), filepath.Base(f))))
			}
			s := mustStore(t, d.Open(t, to), opts)
			defer s.Close()
			refused(t, s, tally)
		})
		t.Run("a store ran after the clean stop, crashed, its WAL, kept WAL and sidecar deleted: Horizon", func(t *testing.T) {
			path := faultDB(t, d)
			db := d.Open(t, path)
			mustStore(t, db, opts).Close()
			db.Close()
			// The child's claims stay in the WAL (no checkpoint in 30
			// commits), so the file keeps the clean stop's sequence.
			p := startFault(t, faultJob{Mode: "claim", DB: path, New: "c-"})
			if !p.waitFor(t, "30 lines", func(lines []string) bool { return len(lines) >= 30 }) {
				t.Fatalf("child exited; stderr:\n%s", p.stderr.String())
			}
			p.kill()
			links, err := filepath.Glob(sidecarOf(path) + ".wal-*")
			must(t, err)
			removeFiles(t, append(links, path+"-wal", sidecarOf(path))...)
			if err := os.Remove(path + "-shm"); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			refusal(t, d, path, horizon, "acknowledged claims may be lost")
			db = d.Open(t, path)
			must(t, sqlitestore.Rearm(ctx, db, "", time.Hour))
			s := mustStore(t, db, opts)
			defer s.Close()
			everyCallRefuses(t, s, "fresh", sqlitestore.ErrUnavailable)
		})
		t.Run("an older copy restored without its sidecar: Horizon", func(t *testing.T) {
			db, path := openMigrated(t, d)
			until := time.Now().Add(time.Hour)
			s := mustStore(t, db, opts)
			claimAll(t, s, idList("old-", 5), until)
			s.Close()
			db.Close()
			backup := filepath.Join(plainTempDir(t), "backup.db")
			writeFile(t, backup, readFile(t, path))
			db = d.Open(t, path)
			s = mustStore(t, db, opts)
			claimAll(t, s, idList("new-", 5), until)
			s.Close()
			db.Close()
			restoreCopy(t, path, backup)
			removeFiles(t, sidecarOf(path))
			refusal(t, d, path, horizon, "acknowledged claims may be lost")
		})
	})
}

// TestDirectoryBackupWithoutHiddenFilesIsRefused: the directory backed up
// with tar leaving the hidden files out (docs/sqlitestore.md, "Backing up
// the directory"), then restored after claims made since, is refused
// whether the directory was lost (no sidecar: the Horizon) or its hidden
// files stayed (an older copy); the claims made before the backup are
// refused after the printed rearm.
func TestDirectoryBackupWithoutHiddenFilesIsRefused(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("tar is not installed")
	}
	ctx := context.Background()
	opts := sqlitestore.Options{SweepInterval: -1}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, lost := range []bool{true, false} {
			t.Run(map[bool]string{true: "the directory lost", false: "its hidden files kept"}[lost], func(t *testing.T) {
				db, path := openMigrated(t, d)
				dir, until := filepath.Dir(path), time.Now().Add(time.Hour)
				s := mustStore(t, db, opts)
				claimAll(t, s, idList("before-", 5), until)
				s.Close()
				db.Close()
				backup := filepath.Join(plainTempDir(t), "backup.tar")
				tar := func(args ...string) {
					t.Helper()
					if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
						t.Fatalf("tar %v: %v: %s", args, err, out)
					}
				}
				tar("-C", dir, "--exclude=.replay.db-ctoken*", "-cf", backup, ".")
				db = d.Open(t, path)
				s = mustStore(t, db, opts)
				claimAll(t, s, idList("after-", 5), until)
				s.Close()
				db.Close()
				ents, err := os.ReadDir(dir)
				must(t, err)
				for _, e := range ents {
					if lost || !strings.HasPrefix(e.Name(), ".") {
						must(t, os.Remove(filepath.Join(dir, e.Name())))
					}
				}
				tar("-C", dir, "-xf", backup)
				db = d.Open(t, path)
				err = wantForgotten(t, db, opts, nil, "New after the backup was restored", "-fence 25h0m0s")
				t.Logf("New: %v", err)
				must(t, sqlitestore.Rearm(ctx, db, "", time.Hour))
				s = mustStore(t, db, opts)
				defer s.Close()
				everyCallRefuses(t, s, "after-0", sqlitestore.ErrUnavailable)
			})
		}
	})
}
