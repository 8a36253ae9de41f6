package powerloss_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgBin finds the PostgreSQL binaries: CTOKEN_PG_BIN, else the newest
// /usr/lib/postgresql/<version>/bin, else postgres on PATH.
func pgBin() (string, error) {
	if d := os.Getenv("CTOKEN_PG_BIN"); d != "" {
		return d, nil
	}
	if ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(ds) > 0 {
		version := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
		sort.Slice(ds, func(i, j int) bool { return version(ds[i]) > version(ds[j]) })
		return ds[0], nil
	}
	p, err := exec.LookPath("postgres")
	if err != nil {
		return "", errors.New("no PostgreSQL binaries: apt-get install postgresql, or set CTOKEN_PG_BIN")
	}
	return filepath.Dir(p), nil
}

var (
	templateOnce sync.Once
	templateDir  string              // an initdb'd data directory, copied for each machine
	templateErr  error               // why there is none
	pgCred       *syscall.Credential // the postgres user, when the tests run as root
)

// pgTemplate runs initdb once, outside any mount.
func pgTemplate(t *testing.T) (bin, dir string) {
	t.Helper()
	bin, err := pgBin()
	if err != nil {
		needs(t, "%v", err)
	}
	templateOnce.Do(func() {
		if os.Geteuid() == 0 {
			u, err := user.Lookup("postgres")
			if err != nil {
				templateErr = errors.New("running as root and there is no postgres user to run the server as")
				return
			}
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			pgCred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		}
		root, err := os.MkdirTemp("", "powerloss-pg-template-")
		if err != nil {
			templateErr = err
			return
		}
		os.Chmod(root, 0o755)
		templateDir = filepath.Join(root, "pgdata")
		if err := os.Mkdir(templateDir, 0o700); err != nil {
			templateErr = err
			return
		}
		if pgCred != nil {
			os.Chown(templateDir, int(pgCred.Uid), int(pgCred.Gid))
		}
		cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", templateDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgCred}
		if out, err := cmd.CombinedOutput(); err != nil {
			templateErr = fmt.Errorf("initdb: %v\n%s", err, out)
		}
	})
	if templateErr != nil {
		needs(t, "no PostgreSQL data directory: %v", templateErr)
	}
	return bin, templateDir
}

// pgServer is a postmaster on a machine's mount.
type pgServer struct {
	t      *testing.T
	bin    string
	dir    string
	extra  []string
	port   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func (p *pgServer) url() string {
	return "postgres://postgres@127.0.0.1:" + p.port + "/postgres?sslmode=disable&connect_timeout=5"
}

// start runs postgres (crash recovery, after a cut) and waits until it
// answers.
func (p *pgServer) start() {
	p.t.Helper()
	var err error
	for range 5 {
		p.port = freePort(p.t)
		if err = p.try(); err == nil {
			return
		}
		p.kill()
	}
	b, _ := os.ReadFile(p.log)
	p.t.Fatalf("postgres did not start: %v\n%s", err, b)
}

func (p *pgServer) try() error {
	args := append([]string{"-D", p.dir, "-p", p.port,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "fsync=on", "-c", "full_page_writes=on",
		"-c", "max_connections=50", "-c", "shared_buffers=32MB", "-c", "logging_collector=off",
	}, p.extra...)
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), args...)
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: pgCred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			return errors.New("postgres exited at start")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, p.url())
		if err == nil {
			c.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("postgres did not answer within 90 s")
}

// kill SIGKILLs the postmaster and every one of its children (each
// backend, by PID, as a power cut stops them all): the postmaster is
// stopped first, so that it forks nothing new. It does not wait.
func (p *pgServer) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pid := p.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	for _, c := range children(pid) {
		syscall.Kill(c, syscall.SIGKILL)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// wait waits for the postmaster to exit and its children to be gone.
func (p *pgServer) wait() {
	if p.exited == nil {
		return
	}
	<-p.exited
	for range 100 { // the children are reaped by init
		if len(children(p.cmd.Process.Pid)) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // its shared memory released
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	var kids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')') // comm may hold spaces
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if c, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			kids = append(kids, c)
		}
	}
	return kids
}

func pgPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestPostgresPowerLoss claims, leases, records and works IDs (see load;
// a work writes its effect row into the app table effects in the postgres
// database) on a
// PostgreSQL whose data directory is on a dropfs mount, kills every server
// process and cuts the power at a random moment (once also tearing writes:
// a random half of the unsynced sectors that overwrite synced ones land),
// restarts the server (crash recovery), and tries every acknowledged step
// again (see again), and judges every work tried by its effect row and
// its record (see checkEffects). With synchronous_commit on (what the
// store accepts without an opt-in) none may be accepted again and no work
// be half kept; with it off and AllowAsyncCommit the loss is measured and
// printed.
func TestPostgresPowerLoss(t *testing.T) {
	tests := []struct {
		name        string
		syncCommit  string
		tear        bool // half the unsynced sectors inside the synced sizes land (torn pages)
		opts        pgstore.Options
		mustKeepAll bool
	}{
		{"synchronous_commit on accepts nothing twice", "on", false, pgstore.Options{}, true},
		{"synchronous_commit on accepts nothing twice through torn writes", "on", true, pgstore.Options{}, true},
		{"synchronous_commit off with AllowAsyncCommit, measured", "off", false, pgstore.Options{AllowAsyncCommit: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := pgPowerLoss(t, tt.syncCommit, tt.tear, tt.opts)
			c.check(t, "postgres "+tt.name, tt.mustKeepAll, true)
		})
	}
}

func pgPowerLoss(t *testing.T, syncCommit string, tear bool, opts pgstore.Options) tallies {
	bin, template := pgTemplate(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 65))
	m := newMachine(t, func(backing string) error {
		// cp -a keeps the owner (the postgres user) and the 0700 mode.
		if out, err := exec.Command("cp", "-a", template, filepath.Join(backing, "pgdata")).CombinedOutput(); err != nil {
			return fmt.Errorf("copying the data directory: %v\n%s", err, out)
		}
		return nil
	})
	srv := &pgServer{t: t, bin: bin, dir: filepath.Join(m.mnt, "pgdata"), log: filepath.Join(filepath.Dir(m.mnt), "postgres.log"),
		extra: []string{"-c", "synchronous_commit=" + syncCommit}}
	t.Cleanup(func() { srv.kill(); srv.wait() }) // before the machine's unmount
	srv.start()
	ctx := context.Background()
	pool := pgPool(t, srv.url())
	if err := pgstore.Migrate(ctx, pool, ""); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	// The app's table, and a checkpoint: the store's table and this one
	// are on the disk before the load, whatever synchronous_commit is.
	if _, err := pool.Exec(ctx, effectsTable); err != nil {
		t.Fatalf("creating effects: %v", err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatalf("CHECKPOINT: %v", err)
	}
	opts.Prefix = fmt.Sprintf("powerloss:%d:", seed)
	opts.Timeout = 15 * time.Second // a loaded machine can stall a commit's fsync for seconds
	opts.SweepInterval = -1
	opts.Logger = slog.New(slog.DiscardHandler)
	newStore := func() *pgstore.Store {
		s, err := pgstore.New(ctx, pool, opts)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	}
	store := newStore()
	isLoss := func(err error) bool { return errors.Is(err, pgstore.ErrForgotten) }
	var total tallies
	for round := range cuts(t) {
		step := func(k kind, id string) (bool, error) { return do(ctx, store, pgEffect, k, id) }
		done, tried := load(t, rng, round, true, step, func() {
			srv.kill()
			if tear {
				m.tear(rng)
			} else {
				m.cut()
			}
		})
		srv.wait()
		store.Close()
		pool.Close()
		m.boot()
		srv.start()
		pool = pgPool(t, srv.url())
		store = newStore()
		effects := pgEffects(t, pool, round)
		c, firstErr := decideAll(done, func(k kind, id string) (bool, error) { return again(ctx, store, k, id) }, isLoss)
		unpaired, effErr := checkEffects(ctx, store, tried, effects, isLoss)
		c[kindWork].unpaired += unpaired
		c.log(t, fmt.Sprintf("cut %d", round+1), true)
		if firstErr != nil {
			t.Logf("cut %d: first refusal or error: %v", round+1, firstErr)
		}
		if effErr != nil {
			t.Logf("cut %d: first half-kept work or error: %v", round+1, effErr)
		}
		total.add(c)
	}
	store.Close()
	pool.Close()
	return total
}

// pgEffect inserts id's effect row in the work's transaction.
func pgEffect(ctx context.Context, id string) error {
	tx, err := pgstore.TxFrom(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO effects (id) VALUES ($1)", id)
	return err
}

// pgEffects counts the effect rows of round's IDs, read outside any Work
// (retried while the restarted server settles).
func pgEffects(t *testing.T, pool *pgxpool.Pool, round int) map[string]int {
	t.Helper()
	var err error
	for range 40 {
		effects := map[string]int{}
		var rows pgx.Rows
		rows, err = pool.Query(context.Background(), "SELECT id, count(*) FROM effects WHERE id LIKE $1 GROUP BY id", "r"+strconv.Itoa(round)+"-%")
		if err == nil {
			var (
				id string
				n  int
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
				effects[id] = n
				return nil
			})
		}
		if err == nil {
			return effects
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("reading effects: %v", err)
	return nil
}
