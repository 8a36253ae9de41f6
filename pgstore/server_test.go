package pgstore

// The tests run against real PostgreSQL servers that they start themselves
// on 127.0.0.1 (a free port, a temporary data directory, no Unix socket) and
// stop by PID: one shared server started by TestMain for most tests, and
// servers of their own for the tests that kill, pause or restart one. The
// binaries are found in CTOKEN_PG_BIN, else /usr/lib/postgresql/<newest>/bin,
// else on PATH. PostgreSQL refuses to run as root, so under root the servers
// run as the "postgres" user (Debian's package creates it). Without a
// server the tests skip, except under CI=true, where they fail.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	mathrand "math/rand/v2"
	"net"
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

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	shared    *pgServer // the server of most tests, started by TestMain
	sharedErr error     // why it could not be started
	template  string    // an initdb'd data directory, copied for each server
	tmpRoot   string    // every server's directory lives under it
	cred      *syscall.Credential
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Listing tests and fuzzing (FuzzQuoteTable, in every fuzz worker)
	// need no server.
	for _, name := range []string{"test.list", "test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			sharedErr = errors.New("no server while listing or fuzzing")
			os.Exit(m.Run())
		}
	}
	code := func() int {
		var err error
		tmpRoot, err = os.MkdirTemp("", "pgstore-test-")
		if err != nil {
			sharedErr = err
			return m.Run()
		}
		defer os.RemoveAll(tmpRoot)
		if sharedErr = initTemplate(); sharedErr == nil {
			shared, sharedErr = startServer()
		}
		if shared != nil {
			defer shared.kill()
			if err := Migrate(context.Background(), shared.pool(nil), ""); err != nil {
				sharedErr = err
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// pgBin finds the directory of the PostgreSQL binaries.
func pgBin() (string, error) {
	if d := os.Getenv("CTOKEN_PG_BIN"); d != "" {
		return d, nil
	}
	if ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(ds) > 0 {
		sort.Slice(ds, func(i, j int) bool { return version(ds[i]) > version(ds[j]) })
		return ds[0], nil
	}
	p, err := exec.LookPath("postgres")
	if err != nil {
		return "", errors.New("no PostgreSQL binaries: install Debian's postgresql package or set CTOKEN_PG_BIN")
	}
	return filepath.Dir(p), nil
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// runAs makes cmd run as the postgres user when the tests run as root (see
// procAttr).
func runAs(cmd *exec.Cmd) {
	cmd.SysProcAttr = procAttr()
}

// initTemplate runs initdb once into template.
func initTemplate() error {
	bin, err := pgBin()
	if err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return errors.New("running as root and there is no postgres user to run the server as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(tmpRoot, 0o755); err != nil {
			return err
		}
	}
	template = filepath.Join(tmpRoot, "template")
	if err := mkdirOwned(template); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", template, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	runAs(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return nil
}

// mkdirOwned creates dir for the server's user.
func mkdirOwned(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if cred != nil {
		return os.Chown(dir, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

// pgServer is one postgres process group on a loopback port.
type pgServer struct {
	dir    string // data directory
	port   string
	extra  []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// startServer copies the template data directory and starts a server on
// it, on a free port.
func startServer(extra ...string) (*pgServer, error) {
	if template == "" {
		return nil, errors.New("no template data directory")
	}
	b := make([]byte, 6)
	rand.Read(b)
	dir := filepath.Join(tmpRoot, "data-"+hex.EncodeToString(b))
	// cp -a keeps the owner (the postgres user) and the 0700 mode.
	if out, err := exec.Command("cp", "-a", template, dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copying the data directory: %v\n%s", err, out)
	}
	var lastErr error
	for range 5 {
		p := &pgServer{dir: dir, port: freePort(), extra: extra}
		if lastErr = p.start(); lastErr == nil {
			return p, nil
		}
	}
	return nil, lastErr
}

// freePort returns a loopback port that was free a moment ago, below the
// ephemeral range so that a server restarted on it does not find it taken
// by a client's connection (belowEphemeral); "0" (a start that fails, and
// is retried) when none is found.
func freePort() string {
	p, err := belowEphemeral()
	if err != nil {
		return "0"
	}
	return p
}

// downPort returns a loopback port where every connection is dropped at
// once, like a server that is down; the port stays held until the test ends,
// so no server another test starts can take it.
func downPort(t *testing.T) string {
	t.Helper()
	ln := listenLoopback(t, func(c net.Conn) { c.Close() }, func() {})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// start runs postgres on p's directory and port and waits until it answers.
func (p *pgServer) start() error {
	bin, err := pgBin()
	if err != nil {
		return err
	}
	args := append([]string{"-D", p.dir, "-p", p.port,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		// fsync, full_page_writes and synchronous_commit: the defaults, on
		// (New refuses fsync or full_page_writes off). None is set here,
		// so that a test can turn one off with ALTER SYSTEM.
		"-c", "max_connections=300",
		"-c", "shared_buffers=32MB", "-c", "logging_collector=off",
	}, p.extra...)
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	log, err := os.OpenFile(filepath.Join(filepath.Dir(p.dir), filepath.Base(p.dir)+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	runAs(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("postgres exited at start (see %s.log)", p.dir)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, p.url())
		if err == nil {
			// Another test's server may hold the port (this one then
			// fails to bind): only this data directory's answer counts.
			var dir string
			err = c.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
			c.Close(ctx)
			cancel()
			if err != nil || dir != p.dir {
				p.kill()
				return fmt.Errorf("port %s is another server's (data directory %q, %v)", p.port, dir, err)
			}
			return nil
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	p.kill()
	return errors.New("postgres did not answer within 30 s")
}

func (p *pgServer) url() string {
	return "postgres://postgres@127.0.0.1:" + p.port + "/postgres?sslmode=disable&connect_timeout=5"
}

// signal sends sig to the postmaster and to every one of its children
// (each backend is a session of its own, so a process group does not reach
// them), as a crash or a frozen machine would hit them all. The postmaster
// is stopped first, so that it forks nothing new and its children keep it
// as their parent while they are listed.
func (p *pgServer) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pid := p.cmd.Process.Pid
	if sig != syscall.SIGCONT {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	for _, c := range children(pid) {
		syscall.Kill(c, sig)
	}
	syscall.Kill(pid, sig)
}

// kill SIGKILLs the process group and waits for the postmaster to exit.
func (p *pgServer) kill() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited != nil {
		<-exited
	}
	// The children are reaped by init; give the kernel a moment before a
	// restart reuses the data directory and its shared memory key.
	time.Sleep(100 * time.Millisecond)
}

// restart kills the server (a crash: no shutdown, no checkpoint) and starts
// it again on the same data directory and port, which runs crash recovery.
func (p *pgServer) restart() error {
	p.kill()
	var err error
	for range 20 {
		if err = p.start(); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// pool returns a pool on the server, closed when t ends (or never, for a
// nil t). params are session settings (RuntimeParams).
func (p *pgServer) pool(t testing.TB, params ...string) *pgxpool.Pool {
	return p.poolWith(t, func(cfg *pgxpool.Config) {
		for i := 0; i+1 < len(params); i += 2 {
			cfg.ConnConfig.RuntimeParams[params[i]] = params[i+1]
		}
	})
}

// poolWith is pool with its configuration changed by edit first.
func (p *pgServer) poolWith(t testing.TB, edit func(*pgxpool.Config)) *pgxpool.Pool {
	return poolAt(t, p.url(), edit)
}

// poolAt is a pool of at most 16 connections on the server(s) of url,
// with its configuration changed by edit first, closed when t ends (or
// never, for a nil t).
func poolAt(t testing.TB, url string, edit func(*pgxpool.Config)) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	cfg.MaxConns = 16
	edit(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		panic(err)
	}
	if t != nil {
		t.Cleanup(pool.Close)
	}
	return pool
}

// loginRole makes a login role of its own on p, runs grants as admin
// (each with {role} standing for its name), and returns a pool connecting
// as it, closed when t ends; the role and its privileges are dropped then.
func (p *pgServer) loginRole(t testing.TB, admin *pgxpool.Pool, grants ...string) *pgxpool.Pool {
	t.Helper()
	role := "r_" + strings.Trim(strings.TrimPrefix(uniquePrefix(), "test:"), ":")
	for _, q := range append([]string{`CREATE ROLE {role} LOGIN`}, grants...) {
		mustExec(t, admin, strings.ReplaceAll(q, "{role}", role))
	}
	t.Cleanup(func() {
		admin.Exec(bg(), `DROP OWNED BY `+role)
		admin.Exec(bg(), `DROP ROLE `+role)
	})
	return p.poolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.User = role })
}

// needServer returns the shared server, skipping the test without one
// (failing it under CI=true).
func needServer(t testing.TB) *pgServer {
	t.Helper()
	if sharedErr != nil || shared == nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no PostgreSQL server but CI=true: the pgstore tests must run in CI: %v", sharedErr)
		}
		t.Skipf("no PostgreSQL server to test against (%v); install Debian's postgresql package or set CTOKEN_PG_BIN", sharedErr)
	}
	return shared
}

// ownServer starts a server of the test's own, killed when the test ends.
func ownServer(t testing.TB, extra ...string) *pgServer {
	t.Helper()
	needServer(t)
	p, err := startServer(extra...)
	must(t, err)
	t.Cleanup(p.kill)
	must(t, Migrate(context.Background(), p.pool(t), ""))
	return p
}

// uniquePrefix is a key prefix no other test uses.
func uniquePrefix() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "test:" + hex.EncodeToString(b) + ":"
}

// uniqueTable is a table name no other test uses, dropped when t ends.
func uniqueTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := "t_" + strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(uniquePrefix(), "test:"), ":"), "-", "")
	t.Cleanup(func() {
		pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+name+`"`)
		for _, fn := range workFns(name, "") { // the functions Migrate made
			pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS "`+fn.name+`"(`+fn.params+`)`)
		}
	})
	return name
}

// migratedTable is uniqueTable made by Migrate.
func migratedTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := uniqueTable(t, pool)
	must(t, Migrate(bg(), pool, name))
	return name
}

func bg() context.Context { return context.Background() }

// must fails t on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantIs fails t unless err matches target (nil: unless err is nil);
// format and args, then err, say what was called and what was wanted.
func wantIs(t testing.TB, err, target error, format string, args ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf(format, append(args, err)...)
	}
}

// errOf is the error of a call that returns a value and an error.
func errOf[V any](_ V, err error) error { return err }

// mustClaim fails t unless id's claim on s until until is first.
func mustClaim(t testing.TB, s *Store, id string, until time.Time) {
	t.Helper()
	if first, err := s.Claim(bg(), id, until); !first || err != nil {
		t.Fatalf("Claim(%q) = %v, %v; want first", id, first, err)
	}
}

// mustLease takes id's lease on s, failing t unless it is acquired.
func mustLease(t testing.TB, s *Store, id string, lease time.Duration) replay.Lease {
	t.Helper()
	l, err := s.AcquireLease(bg(), id, lease)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatalf("AcquireLease(%q) = %+v, %v; want acquired", id, l, err)
	}
	return l
}

// mustRecord takes id's lease with a record on s, failing t unless it is
// acquired.
func mustRecord(t testing.TB, s *Store, id string, lease time.Duration, fp []byte) replay.Record {
	t.Helper()
	r, err := s.AcquireRecord(bg(), id, lease, fp)
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord(%q) = %+v, %v; want acquired", id, r, err)
	}
	return r
}

// mustBegin begins a transaction on pool, failing t on an error; it is
// rolled back when t ends unless it has ended by then.
func mustBegin(t testing.TB, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(bg())
	must(t, err)
	t.Cleanup(func() { tx.Rollback(bg()) })
	return tx
}

// execer runs a statement: a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// mustExec runs sql on q, failing t on an error.
func mustExec(t testing.TB, q execer, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(bg(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// setSystem sets a server setting with ALTER SYSTEM, reloads the
// configuration and waits until admin's sessions see value (the reload
// reaches them asynchronously), failing t after 10 s.
func setSystem(t *testing.T, admin *pgxpool.Pool, setting, value string) {
	t.Helper()
	mustExec(t, admin, `ALTER SYSTEM SET `+setting+` = `+value)
	mustExec(t, admin, `SELECT pg_reload_conf()`)
	waitFor(t, 10*time.Second, func() (bool, string) {
		var got string
		err := admin.QueryRow(bg(), `SELECT current_setting($1)`, setting).Scan(&got)
		return err == nil && got == value,
			fmt.Sprintf("%s is %q (%v) after the reload; want %s", setting, got, err, value)
	})
}

// waitFor polls cond every 20 ms until it holds, failing t with what cond
// said of the last poll once within has passed.
func waitFor(t testing.TB, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, last)
		}
	}
}

// waitForClaim claims fresh IDs on s until a claim's error matches want
// and ErrUnavailable (nil: until one is first), failing t after 10 s.
func waitForClaim(t *testing.T, s *Store, what string, want error) {
	t.Helper()
	waitFor(t, 10*time.Second, func() (bool, string) {
		first, err := s.Claim(bg(), uniquePrefix(), time.Now().Add(time.Hour))
		refused := want != nil && !first && errors.Is(err, want) && errors.Is(err, ErrUnavailable)
		return want == nil && first && err == nil || refused, fmt.Sprintf("%s: Claim = %v, %v", what, first, err)
	})
}

// subtest is a named test of a group run by [subtests].
type subtest struct {
	name string
	test func(*testing.T)
}

// subtests runs each of tests as a subtest of t.
func subtests(t *testing.T, tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, tc.test)
	}
}

// newTestStore is a store on the shared server's default table with a
// prefix of its own and no sweeper.
func newTestStore(t testing.TB, opts ...func(*Options)) *Store {
	t.Helper()
	p := needServer(t)
	return storeOn(t, p.pool(t), opts...)
}

func storeOn(t testing.TB, pool *pgxpool.Pool, opts ...func(*Options)) *Store {
	t.Helper()
	// A generous timeout: a loaded CI machine can stall a commit's fsync
	// for seconds, and these tests are not about timeouts.
	o := Options{Prefix: uniquePrefix(), SweepInterval: -1, Timeout: 15 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(context.Background(), pool, o)
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// belowEphemeral returns a loopback TCP port nothing listened on a moment
// ago, below the kernel's ephemeral range by more than 10000, so that the
// port and a Redis Cluster bus at port+10000 both lie outside it: a server
// restarted on its port cannot find it taken by the ephemeral port of an
// outgoing connection (the tests' clients open hundreds). Another process
// may still take the port before the server binds it; the caller retries a
// start that fails. (pgstore's and redisstore's tests each keep a copy:
// nested modules import no internal package of the root module.)
// CTOKEN_PORT_CLASS narrows the ports to one class ([portClass]).
func belowEphemeral() (string, error) {
	top := ephemeralLow() - 10000 // a Cluster bus listens at port+10000
	const bottom = 10000
	if top-bottom < 1000 {
		return "", errors.New("the ephemeral port range leaves no room below it")
	}
	class, of, err := portClass()
	if err != nil {
		return "", err
	}
	for range 100 {
		n := bottom + mathrand.IntN(top-bottom-of)
		n += class - n%of
		p := strconv.Itoa(n)
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return "", errors.New("no free port found in 100 tries")
}

// portClass reads CTOKEN_PORT_CLASS, "k/n": the ports belowEphemeral
// returns are then those whose remainder by n is k, so that suites run
// side by side (.ci/run: redisstore's on Redis and on Valkey beside
// pgstore's; .ci/fleet.sh's failures on Redis and on Valkey) never pick,
// or restart a server on, a port of another's. n divides 10000, so that
// a Cluster bus at port+10000 is of its port's class. Unset: 0/1, every
// port.
func portClass() (class, of int, err error) {
	v := os.Getenv("CTOKEN_PORT_CLASS")
	if v == "" {
		return 0, 1, nil
	}
	k, n, ok := strings.Cut(v, "/")
	class, err1 := strconv.Atoi(k)
	of, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || of < 1 || 10000%of != 0 || class < 0 || class >= of {
		return 0, 0, fmt.Errorf("CTOKEN_PORT_CLASS=%q: want k/n, n dividing 10000 and 0 <= k < n", v)
	}
	return class, of, nil
}

// ephemeralLow is the first port of Linux's ephemeral range, or its
// default where the range cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
