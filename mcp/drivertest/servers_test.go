package drivertest

// The PostgreSQL server of the tests, started by TestMain on a free
// loopback port with a temporary data directory (as pgstore's tests start
// theirs; under root it runs as the "postgres" user, which Debian's
// package creates), the Redis of CTOKEN_REDIS_ADDR, and SQLite files
// (modernc.org/sqlite) in the test's temporary directory.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/pgstore"
	"github.com/ctoken/ctoken/redisstore"
	"github.com/ctoken/ctoken/sqlitestore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

var (
	pgURL string // the shared server's URL, empty without one
	pgErr error  // why there is none
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		stop, err := startPostgres()
		pgErr = err
		if stop != nil {
			defer stop()
		}
		return m.Run()
	}())
}

// pgBin finds the directory of the PostgreSQL binaries.
func pgBin() (string, error) {
	if d := os.Getenv("CTOKEN_PG_BIN"); d != "" {
		return d, nil
	}
	if ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(ds) > 0 {
		sort.Slice(ds, func(i, j int) bool {
			a, _ := strconv.Atoi(filepath.Base(filepath.Dir(ds[i])))
			b, _ := strconv.Atoi(filepath.Base(filepath.Dir(ds[j])))
			return a > b
		})
		return ds[0], nil
	}
	p, err := exec.LookPath("postgres")
	if err != nil {
		return "", errors.New("no PostgreSQL binaries: install Debian's postgresql package or set CTOKEN_PG_BIN")
	}
	return filepath.Dir(p), nil
}

// startPostgres runs initdb and postgres in a temporary directory and
// returns how to stop it.
func startPostgres() (func(), error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "mcp-drivertest-pg-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { os.RemoveAll(root) }
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			cleanup()
			return nil, errors.New("running as root and there is no postgres user to run the server as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		os.Chmod(root, 0o755)
	}
	dir := filepath.Join(root, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		cleanup()
		return nil, err
	}
	if cred != nil {
		os.Chown(dir, int(cred.Uid), int(cred.Gid))
	}
	attr := &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = attr
	if out, err := initdb.CombinedOutput(); err != nil {
		cleanup()
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, err
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", dir, "-p", port,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=100")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, err
	}
	stop := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		cleanup()
	}
	url := "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable&connect_timeout=5"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, url)
		if err == nil {
			// Another process's server may hold the port (this one
			// then fails to bind): only this data directory's answer
			// counts.
			var got string
			err = c.QueryRow(ctx, "SHOW data_directory").Scan(&got)
			c.Close(ctx)
			cancel()
			if err != nil || got != dir {
				stop()
				return nil, fmt.Errorf("port %s is another server's (data directory %q, %v)", port, got, err)
			}
			pool, err := pgxpool.New(context.Background(), url)
			if err == nil {
				err = pgstore.Migrate(context.Background(), pool, "")
				pool.Close()
			}
			if err != nil {
				stop()
				return nil, err
			}
			pgURL = url
			return stop, nil
		}
		cancel()
	}
	stop()
	return nil, errors.New("postgres did not answer within 30 s")
}

// skipOrFail skips a test that has no server, or fails it under CI=true.
func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, but CI=true: these tests must run in CI", why)
	}
	t.Skip(why)
}

// pgPool returns a pool on the shared PostgreSQL server, closed when t ends.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	if pgURL == "" {
		skipOrFail(t, fmt.Sprintf("no PostgreSQL server (%v)", pgErr))
	}
	pool, err := pgxpool.New(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// uniquePrefix is a key prefix no other test uses.
func uniquePrefix() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "mcptest:" + hex.EncodeToString(b) + ":"
}

// pgStore returns a pgstore.Store on pool with a prefix of its own.
func pgStore(t testing.TB, pool *pgxpool.Pool) *pgstore.Store {
	return pgStoreAt(t, pool, uniquePrefix())
}

// pgStoreAt returns a pgstore.Store on pool with the given prefix: Stores
// of one prefix are instances of one fleet.
func pgStoreAt(t testing.TB, pool *pgxpool.Pool, prefix string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(context.Background(), pool, pgstore.Options{Prefix: prefix, SweepInterval: -1, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// redisStore returns a redisstore.Store on the Redis of CTOKEN_REDIS_ADDR
// with a prefix of its own.
func redisStore(t testing.TB) *redisstore.Store {
	return redisFleet(t, 1)[0]
}

// redisFleet returns n Stores on the Redis of CTOKEN_REDIS_ADDR, each with
// a client of its own, sharing one new prefix (provisioned once): the
// instances of one fleet.
func redisFleet(t testing.TB, n int) []*redisstore.Store {
	t.Helper()
	addr := os.Getenv("CTOKEN_REDIS_ADDR")
	if addr == "" {
		skipOrFail(t, "CTOKEN_REDIS_ADDR not set (run under .ci/redis.sh)")
	}
	prefix := uniquePrefix()
	var fleet []*redisstore.Store
	for i := range n {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if i == 0 {
			if _, err := s.ProvisionNew(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		fleet = append(fleet, s)
	}
	return fleet
}

// sqliteDB returns a pool on a new migrated SQLite file with the settings
// sqlitestore requires (WAL, synchronous=FULL), closed when t ends.
func sqliteDB(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "replay.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := sqlitestore.Migrate(context.Background(), db, ""); err != nil {
		t.Fatal(err)
	}
	return db
}

// sqliteStore returns a sqlitestore.Store on db.
func sqliteStore(t testing.TB, db *sql.DB) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.New(context.Background(), db, sqlitestore.Options{SweepInterval: -1, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
