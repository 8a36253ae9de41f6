package powerloss_test

// A failed write-back of the database file in a checkpoint the store does
// not run, then a power cut. Linux reports a failed write-back once to
// each descriptor open on the file (errseq), at its next fsync, and marks
// the failed pages clean; dropfs's FailSync does the same. The checkpoint
// is an application connection's own: SQLite returns its error to the
// application, which ignores it (SQLite itself drops the error of the
// automatic checkpoint after a commit).

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// writebackChildEnv holds a writebackJob (JSON) and makes the test binary
// run it instead of its tests.
const writebackChildEnv = "CTOKEN_POWERLOSS_WRITEBACK_CHILD"

// writebackJob is the child's scenario: the database on the mount and the
// store's RecheckInterval.
type writebackJob struct {
	DB      string        `json:"db"`
	Recheck time.Duration `json:"recheck"`
}

func init() {
	if spec := os.Getenv(writebackChildEnv); spec != "" {
		if err := writebackChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "writeback child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// seenLog is a slog handler that writes to stderr and records each
// message it has seen, the repairs that started and each repair's passes.
type seenLog struct {
	slog.Handler
	mu     *sync.Mutex
	seen   map[string]bool
	starts *int
	passes *[]int64
}

func (h seenLog) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.seen[r.Message] = true
	if strings.Contains(r.Message, "the store acknowledges nothing until it has rewritten") {
		*h.starts++
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "passes" {
			*h.passes = append(*h.passes, a.Value.Int64())
		}
		return true
	})
	h.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

// repairs returns how many repairs started and each ended one's passes.
func (h seenLog) repairs() (int, []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *h.starts, slices.Clone(*h.passes)
}

func (h seenLog) saw(substr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for m := range h.seen {
		if strings.Contains(m, substr) {
			return true
		}
	}
	return false
}

// writebackChild runs the scenario, printing "claimed <id>" for each
// acknowledged claim, "arm" when the next fsync of the database file is
// to fail (it then waits for a line on stdin), "failed <error>" for the
// application's checkpoint that met it, "repaired <starts> <passes>" once the store has
// rewritten the database after finding the failure, and "done"; then it
// waits to be killed.
//
//  1. 400 claims, then a reader holds their snapshot while 400 more are
//     made;
//  2. the application's checkpoint copies the first 400's pages into the
//     database file, which it does not sync (the reader holds the rest
//     back); the reader ends;
//  3. the application's next checkpoint copies the rest, and the fsync of
//     the database file fails: the pages of both checkpoints are marked
//     clean, never to reach the disk; its error is ignored;
//  4. the application's next checkpoint copies again only what step 3
//     copied (SQLite counts step 2's pages as copied), syncs, and the WAL
//     restarts at the store's next 100 claims: step 2's pages now exist
//     only in the page cache.
func writebackChild(spec string) error {
	var job writebackJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	ctx := context.Background()
	pragmas := []sqlitePragma{{"journal_mode", "WAL"}, {"synchronous", "FULL"}, {"busy_timeout", "5000"}, {"wal_autocheckpoint", "0"}}
	db, err := sql.Open(sqliteDriver.sqlName, sqliteDriver.dsn(job.DB, pragmas))
	if err != nil {
		return err
	}
	log := seenLog{slog.NewTextHandler(os.Stderr, nil), new(sync.Mutex), map[string]bool{}, new(int), new([]int64)}
	opts := sqliteOptions(false, slog.New(log))
	opts.RecheckInterval = job.Recheck
	s, err := sqlitestore.New(ctx, db, opts)
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	say := func(line string) { os.Stdout.WriteString(line + "\n") }
	claim := func(prefix string, n int) error {
		for i := range n {
			id := fmt.Sprintf("%s-%04d", prefix, i)
			first, err := s.Claim(ctx, id, time.Now().Add(time.Hour))
			if err != nil && !errors.Is(err, sqlitestore.ErrUnavailable) {
				return fmt.Errorf("Claim(%s): %w", id, err)
			}
			if first && err == nil {
				say("claimed " + id)
			}
		}
		return nil
	}
	conn := func() (*sql.Conn, error) {
		c, err := db.Conn(ctx)
		if err == nil {
			// mattn's DSN does not set it (an unknown parameter).
			_, err = c.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`)
		}
		return c, err
	}
	checkpoint := func(app *sql.Conn) (busy, frames, copied int, err error) {
		err = app.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
		return
	}

	if err := claim("a", 400); err != nil {
		return err
	}
	reader, err := conn()
	if err != nil {
		return err
	}
	var n int
	if _, err := reader.ExecContext(ctx, `BEGIN`); err != nil {
		return err
	}
	if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
		return err
	}
	if err := claim("b", 400); err != nil {
		return err
	}
	app, err := conn()
	if err != nil {
		return err
	}
	if _, frames, copied, err := checkpoint(app); err != nil || copied >= frames {
		return fmt.Errorf("the checkpoint behind the reader copied %d of %d frames (%v): want part", copied, frames, err)
	}
	if _, err := reader.ExecContext(ctx, `COMMIT`); err != nil {
		return err
	}
	reader.Close()
	// With the checks, a Work is open across the failure: its commit
	// comes after the store found the failure, before the rewrite (which
	// waits for the writer the Work holds), and must be refused.
	var work replay.Work
	if job.Recheck < time.Hour {
		var err error
		if _, work, err = s.AcquireWork(ctx, "work-0", time.Minute, nil); err != nil || work == nil {
			return fmt.Errorf("AcquireWork: %v, %v", work, err)
		}
		if err := sqliteEffect(work.Context(ctx), "work-0"); err != nil {
			return err
		}
	}
	say("arm")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	// The store's own fsync of the file (a check) may meet the failure
	// first: then the store saw it, and the application's checkpoint
	// succeeds.
	if _, _, _, err := checkpoint(app); err != nil {
		say("failed " + strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		say("failed-elsewhere")
	}
	// Until one copies the whole WAL. A checkpoint may fail once more:
	// each descriptor reports the failure at its first fsync after it,
	// and the store's rewrite may have given this one's checkpoint
	// nothing to sync before.
	for attempt := 0; ; attempt++ {
		busy, frames, copied, err := checkpoint(app)
		if err == nil && busy == 0 && copied == frames {
			break
		}
		if attempt == 1000 {
			return fmt.Errorf("the checkpoint after the failure: busy %d, %d of %d frames (%v): want all", busy, copied, frames, err)
		}
		time.Sleep(10 * time.Millisecond) // the store's own checkpoint holds the lock
	}
	app.Close()
	if work != nil {
		for range 12000 { // the store's next check, 2 minutes at most
			if log.saw("a write-back of the database file failed") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := work.Commit(ctx, time.Now().Add(time.Hour), nil, nil); err != nil {
			say("work-refused " + strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			say("work-acknowledged")
		}
	}
	if err := claim("c", 100); err != nil {
		return err
	}
	if job.Recheck < time.Hour {
		// Waits for the store's check, whenever it runs (2 minutes at
		// most; the parent then reports no repair).
		for range 12000 {
			if log.saw("a write-back of the database file failed") && log.saw("the database was rewritten") {
				// Ten more checks, which would start a second repair for
				// the same failure.
				time.Sleep(10 * job.Recheck)
				starts, passes := log.repairs()
				say(fmt.Sprintf("repaired %d %v", starts, passes))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	say("done")
	time.Sleep(time.Hour)
	return errors.New("not killed within an hour")
}

// TestSQLiteWritebackErrorThenPowerCut runs writebackChild on a dropfs
// mount, fails the fsync of the database file it asks for, cuts the
// power once it is done, and claims every acknowledged ID again on what
// the disk kept. With the store's checks (its own fsync of the database
// file finds the failure, and it rewrites the database) nothing may be
// accepted again; without them (a check only every hour), the same
// scenario must lose claims, or it does not test the store.
func TestSQLiteWritebackErrorThenPowerCut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recheck time.Duration
	}{
		{"the store's checks find the failure: nothing accepted again", 50 * time.Millisecond},
		{"no check before the cut: claims lost (the control)", 24 * time.Hour},
	} {
		t.Run(sqliteDriver.name+" "+tc.name, func(t *testing.T) {
			m := newMachine(t, func(backing string) error {
				sqliteMigrate(t, filepath.Join(backing, "replay.db"), false)
				return nil
			})
			spec, err := json.Marshal(writebackJob{DB: filepath.Join(m.mnt, "replay.db"), Recheck: tc.recheck})
			if err != nil {
				t.Fatal(err)
			}
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), writebackChildEnv+"="+string(spec))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			t.Cleanup(func() { cmd.Process.Kill(); <-exited })
			lines := make(chan string)
			go func() {
				defer close(exited)
				r := bufio.NewReader(stdout)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						break
					}
					lines <- strings.TrimSuffix(line, "\n")
				}
				close(lines)
				io.Copy(io.Discard, stdout)
				cmd.Wait()
			}()
			var acked []string
			repaired, done, workRefused := false, false, false
			for line := range lines {
				verb, rest, _ := strings.Cut(line, " ")
				switch verb {
				case "claimed":
					acked = append(acked, rest)
				case "arm":
					m.fs.FailSync("replay.db")
					io.WriteString(stdin, "go\n")
				case "failed":
					t.Logf("the application's checkpoint met the failure: %s", rest)
				case "failed-elsewhere":
					t.Log("the store's own fsync of the database file met the failure before the application's checkpoint")
				case "repaired":
					repaired = true
					// One failure, one repair: the store's held descriptor
					// and its writer's connection count it once; another
					// connection of the application that reports it later
					// costs a second pass (a full CI run saw 1 [2]).
					if rest != "1 [1]" && rest != "1 [2]" {
						t.Errorf("repairs started and their passes: %s; want 1 [1] or 1 [2]; child:\n%s", rest, stderr.String())
					}
				case "work-refused":
					workRefused = true
					t.Logf("the Work open across the failure: %s", rest)
				case "work-acknowledged":
					t.Error("a Work committed after the store found the failed write-back, before its rewrite, was acknowledged")
				case "done":
					done = true
				}
				if done {
					break
				}
			}
			if !done || m.fs.FailedSyncs() != 1 {
				t.Fatalf("the child did not finish (%v) or FailedSyncs = %d, want 1; child:\n%s", done, m.fs.FailedSyncs(), stderr.String())
			}
			cmd.Process.Kill()
			<-exited
			m.cut()
			m.down()

			ctx := context.Background()
			db, err := openSQLite(filepath.Join(m.backing, "replay.db"), false)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var again, broken int
			var firstErr error
			s, err := sqlitestore.New(ctx, db, sqliteOptions(false, slog.New(slog.DiscardHandler)))
			if err != nil {
				broken, firstErr = len(acked), fmt.Errorf("New: %w", err)
			} else {
				for _, id := range acked {
					first, err := s.Claim(ctx, id, time.Now().Add(time.Hour))
					switch {
					case err != nil:
						broken++
						firstErr = firstOf(firstErr, err)
					case first:
						again++
					}
				}
				s.Close()
			}
			t.Logf("%d claims acknowledged, %d accepted again after the cut, %d refused with an error (first: %v); the store repaired before the cut: %v",
				len(acked), again, broken, firstErr, repaired)
			if tc.recheck < time.Hour {
				if !workRefused {
					t.Error("the Work open across the failure was not refused")
				}
				if !repaired {
					t.Errorf("the store never reported the repair; child:\n%s", stderr.String())
				}
				if again+broken > 0 {
					t.Errorf("%d acknowledged claims accepted again and %d refused with an error after the cut; want none", again, broken)
				}
			} else if again+broken == 0 {
				t.Error("without the store's checks nothing was lost: the scenario does not reach the failure it is meant to show")
			}
		})
	}
}

// firstOf returns first, or err when first is nil.
func firstOf(first, err error) error {
	if first == nil {
		return err
	}
	return first
}
