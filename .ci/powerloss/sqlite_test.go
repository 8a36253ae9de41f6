package powerloss_test

// SQLite under a power cut. The app is what dies: the test binary runs
// itself again as a child (its job in an environment variable), which
// builds a store on a database file on a dropfs mount and prints one line
// per acknowledged step, unbuffered; the parent SIGKILLs it at a random
// moment, cuts the power, and tries every acknowledged step again with a
// store of its own on the same file, in the backing directory.
//
// One test binary holds one driver, chosen by a build tag as in
// sqlitestore/drivertest: none for modernc.org/sqlite, -tags mattn
// (CGO_ENABLED=1) for mattn/go-sqlite3. ncruces/go-sqlite3 is not run: its
// VFS (one -shm file descriptor and mapping per connection, OFD locks)
// fails on a dropfs mount before the first claim — a second connection's
// journal_mode=WAL waits out busy_timeout and fails with SQLITE_PROTOCOL —
// and why (the FUSE mount or the VFS) is not known yet.

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
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// sqliteChildEnv holds a sqliteJob (JSON) and makes the test binary run it
// instead of its tests.
const sqliteChildEnv = "CTOKEN_POWERLOSS_SQLITE_CHILD"

// sqliteJob is what a child runs: steps on fresh IDs of round, on DB,
// until it is killed.
type sqliteJob struct {
	DB     string `json:"db"`
	Normal bool   `json:"normal"` // synchronous=NORMAL with AllowNormalSync, else FULL
	Round  int    `json:"round"`
}

func init() {
	if spec := os.Getenv(sqliteChildEnv); spec != "" {
		if err := sqliteChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "sqlite child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// sqlitePragma is one connection setting, as PRAGMA name = value.
type sqlitePragma struct{ name, value string }

// sqliteDriverInfo is the driver this binary holds (sqlite_*_test.go).
type sqliteDriverInfo struct {
	name    string // modernc, ncruces, mattn
	sqlName string // its database/sql name
	dsn     func(path string, pragmas []sqlitePragma) string
}

// openSQLite opens path with journal_mode=WAL, busy_timeout=5000 and
// synchronous FULL, or NORMAL, on every connection.
func openSQLite(path string, normal bool) (*sql.DB, error) {
	sync := "FULL"
	if normal {
		sync = "NORMAL"
	}
	pragmas := []sqlitePragma{{"journal_mode", "WAL"}, {"synchronous", sync}, {"busy_timeout", "5000"}}
	return sql.Open(sqliteDriver.sqlName, sqliteDriver.dsn(path, pragmas))
}

func sqliteOptions(normal bool, log *slog.Logger) sqlitestore.Options {
	return sqlitestore.Options{
		AllowNormalSync: normal,
		Timeout:         15 * time.Second, // a loaded machine can stall an fsync for seconds
		SweepInterval:   -1,
		Logger:          log,
	}
}

// sqliteChild is the child process: a store on the job's file and 8
// goroutines running steps (kinds by workerKind, with works), printing
// "<verb> <id>" once each is acknowledged, and "trying <id>" before each
// work, until it is killed (or 2 minutes pass).
func sqliteChild(spec string) error {
	var job sqliteJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	ctx := context.Background()
	db, err := openSQLite(job.DB, job.Normal)
	if err != nil {
		return err
	}
	s, err := sqlitestore.New(ctx, db, sqliteOptions(job.Normal, slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	var out sync.Mutex
	say := func(line string) {
		out.Lock()
		defer out.Unlock()
		os.Stdout.WriteString(line + "\n") // unbuffered: a line printed is a step acknowledged
	}
	deadline := time.Now().Add(2 * time.Minute)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			k := workerKind(w, true)
			for i := 0; time.Now().Before(deadline); i++ {
				id := "r" + strconv.Itoa(job.Round) + "-w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if k == kindWork {
					say("trying " + id)
				}
				ok, err := do(ctx, s, sqliteEffect, k, id)
				if err == nil && ok {
					say(verbs[k] + " " + id)
				} else if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	return errors.New("not killed within 2 minutes")
}

// TestSQLitePowerLoss runs claims, leases, records and works (see load;
// a work writes its effect row into the app table effects in the same
// file) in a child process on an SQLite file on a dropfs mount, SIGKILLs
// it and cuts the power at a random moment, tries every acknowledged step
// again with a store of the parent's on what the disk kept, and judges
// every work tried by its effect row and its record (see checkEffects).
// With synchronous=FULL (what the store accepts without an opt-in) none
// may be accepted again and no work be half kept; with
// synchronous=NORMAL and AllowNormalSync the loss is measured and printed.
// The store records the kernel's boot id for NORMAL and refuses after a
// crash of the machine; this cut leaves the boot id as it was, so what it
// measures is a power cut that the boot id does not reveal.
func TestSQLitePowerLoss(t *testing.T) {
	tests := []struct {
		name        string
		normal      bool
		mustKeepAll bool
	}{
		{"synchronous FULL accepts nothing twice", false, true},
		{"synchronous NORMAL with AllowNormalSync, measured", true, false},
	}
	for _, tt := range tests {
		name := sqliteDriver.name + " " + tt.name
		t.Run(name, func(t *testing.T) {
			c := sqlitePowerLoss(t, tt.normal)
			c.check(t, "sqlite "+name, tt.mustKeepAll, true)
		})
	}
}

// sqliteProc is a running child.
type sqliteProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer // written by exec's copier until exited
	mu     sync.Mutex
	done   []acked
	tried  []string      // every work's ID, printed before the work began
	first  chan struct{} // closed at the first acknowledged step
	exited chan struct{} // closed once stdout reached EOF and the child was reaped
}

func startSQLiteChild(t *testing.T, job sqliteJob) *sqliteProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	p := &sqliteProc{first: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), sqliteChildEnv+"="+string(spec))
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill) // before the machine's unmount
	kinds := map[string]kind{}
	for k, v := range verbs {
		kinds[v] = kind(k)
	}
	go func() {
		defer close(p.exited)
		r := bufio.NewReader(stdout)
		var once sync.Once
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break // a line without its newline was never printed whole
			}
			verb, id, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
			if verb == "trying" {
				p.mu.Lock()
				p.tried = append(p.tried, id)
				p.mu.Unlock()
			} else if k, ok := kinds[verb]; ok {
				p.mu.Lock()
				p.done = append(p.done, acked{id, k})
				p.mu.Unlock()
				once.Do(func() { close(p.first) })
			}
		}
		io.Copy(io.Discard, stdout)
		p.cmd.Wait()
	}()
	return p
}

// kill SIGKILLs the child and waits until it is reaped.
func (p *sqliteProc) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// sqliteMigrate creates the store's table and the app's effects table in
// a fresh file, as an installation would before the app starts. path is in the backing
// directory, while the file system is not mounted.
func sqliteMigrate(t *testing.T, path string, normal bool) {
	t.Helper()
	db, err := openSQLite(path, normal)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitestore.Migrate(context.Background(), db, ""); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := db.Exec(effectsTable); err != nil {
		t.Fatalf("creating effects: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// sqlitePowerLoss cuts the power under a child's store cuts(t) times.
// After each cut the machine stays down while this process re-tries the
// steps on the database in the backing directory (the synced state, what
// the disk holds after a reboot): the test process never opens a file on
// its own mount (see machine.down).
func sqlitePowerLoss(t *testing.T, normal bool) tallies {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 65))
	gen := 0
	name := func() string { return "replay-" + strconv.Itoa(gen) + ".db" }
	m := newMachine(t, func(backing string) error {
		sqliteMigrate(t, filepath.Join(backing, name()), normal)
		return nil
	})
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	isLoss := func(err error) bool { return errors.Is(err, sqlitestore.ErrForgotten) }
	var total tallies
	for round := range cuts(t) {
		if round > 0 {
			m.up()
		}
		p := startSQLiteChild(t, sqliteJob{DB: filepath.Join(m.mnt, name()), Normal: normal, Round: round})
		wait := cutDelay(rng)
		start := time.Now()
		select {
		case <-p.first:
		case <-p.exited:
			t.Fatalf("the child exited before acknowledging anything: %v\n%s", p.cmd.ProcessState, p.stderr.String())
		case <-time.After(2 * time.Minute):
			t.Fatalf("nothing acknowledged within 2 minutes\n%s", p.stderr.String())
		}
		time.Sleep(time.Until(start.Add(wait)))
		p.kill()
		m.cut()
		p.mu.Lock()
		done, tried := p.done, p.tried
		p.mu.Unlock()
		m.down()

		var c tallies
		var firstErr error
		file := filepath.Join(m.backing, name())
		db, err := openSQLite(file, normal)
		if err != nil {
			t.Fatal(err)
		}
		s, err := sqlitestore.New(ctx, db, sqliteOptions(normal, quiet))
		switch {
		case isLoss(err):
			// The store found the loss at New: every step is refused.
			for _, a := range done {
				c[a.k].add(tally{acknowledged: 1, refusedLoss: 1})
			}
			firstErr = fmt.Errorf("New: %w", err)
			t.Logf("cut %d: works not judged by their effects: the store refused at New", round+1)
		case err != nil:
			db.Close()
			t.Fatalf("New after the cut: %v", err)
		default:
			effects := sqliteEffects(t, db, round)
			c, firstErr = decideAll(done, func(k kind, id string) (bool, error) { return again(ctx, s, k, id) }, isLoss)
			unpaired, effErr := checkEffects(ctx, s, tried, effects, isLoss)
			c[kindWork].unpaired += unpaired
			if effErr != nil {
				t.Logf("cut %d: first half-kept work or error: %v", round+1, effErr)
			}
			s.Close()
		}
		if err := db.Close(); err != nil {
			t.Errorf("closing the database: %v", err)
		}
		c.log(t, fmt.Sprintf("cut %d", round+1), true)
		if firstErr != nil {
			t.Logf("cut %d: first refusal or error: %v", round+1, firstErr)
		}
		total.add(c)
		if c.sum().refusedLoss > 0 && round+1 < cuts(t) {
			// A database found to have forgotten refuses until an
			// operator rearms it: the next round starts on a fresh file.
			gen++
			sqliteMigrate(t, filepath.Join(m.backing, name()), normal)
		}
	}
	return total
}

// sqliteEffect inserts id's effect row in the work's transaction.
func sqliteEffect(ctx context.Context, id string) error {
	tx, err := sqlitestore.TxFrom(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO effects (id) VALUES (?)", id)
	return err
}

// sqliteEffects counts the effect rows of round's IDs, outside any Work.
func sqliteEffects(t *testing.T, db *sql.DB, round int) map[string]int {
	t.Helper()
	rows, err := db.Query("SELECT id, count(*) FROM effects WHERE id LIKE ? GROUP BY id", "r"+strconv.Itoa(round)+"-%")
	if err != nil {
		t.Fatalf("reading effects: %v", err)
	}
	defer rows.Close()
	effects := map[string]int{}
	for rows.Next() {
		var (
			id string
			n  int
		)
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatalf("reading effects: %v", err)
		}
		effects[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading effects: %v", err)
	}
	return effects
}
