package pgstore

// Behind PgBouncer (installed by .ci/pg.sh): in transaction pooling, New
// refuses pgx's default exec mode, which prepares named statements on a
// session the pooler does not keep, and serves with QueryExecModeExec; in
// session pooling it serves the default mode.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestPooler pins New's probe of a pooler between the pool and
// PostgreSQL.
func TestPooler(t *testing.T) {
	p := needServer(t)
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin, err = exec.LookPath("/usr/sbin/pgbouncer")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no pgbouncer but CI=true: .ci/pg.sh installs it")
		}
		t.Skip("no pgbouncer (apt-get install pgbouncer)")
	}
	transaction := startPgBouncer(t, bin, p, "transaction")
	session := startPgBouncer(t, bin, p, "session")
	subtests(t, []subtest{
		{"transaction pooling refuses the default exec mode", func(t *testing.T) {
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
				pool := poolAt(t, transaction, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
				newRefused(t, pool, Options{SweepInterval: -1}, fmt.Sprint("behind PgBouncer in transaction pooling, exec mode ", mode),
					"pool_mode = session", "pgx.QueryExecModeExec", "do not keep their server session")
			}
		}},
		{"transaction pooling serves exec mode", func(t *testing.T) {
			pool := poolAt(t, transaction, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec })
			claimsOnceEach(t, storeOn(t, pool))
		}},
		{"session pooling serves the default exec mode", func(t *testing.T) {
			claimsOnceEach(t, storeOn(t, poolAt(t, session, func(*pgxpool.Config) {})))
		}},
	})
}

// claimsOnceEach claims 200 fresh IDs on s from 16 goroutines, each
// twice: every first claim is first, every second one refused, no error.
func claimsOnceEach(t *testing.T, s *Store) {
	t.Helper()
	until := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 200; i += 16 {
				for round, want := range []bool{true, false} {
					if first, err := s.Claim(bg(), fmt.Sprint("id-", i), until); first != want || err != nil {
						errs <- fmt.Errorf("claim %d of id-%d = %v, %v; want %v", round+1, i, first, err, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// startPgBouncer runs pgbouncer in pool_mode mode in front of server p,
// on a free port, stopped when t ends, and returns the URL of its
// database "postgres".
func startPgBouncer(t *testing.T, bin string, p *pgServer, mode string) string {
	t.Helper()
	dir := filepath.Join(tmpRoot, "pgbouncer-"+mode+"-"+strings.Trim(strings.TrimPrefix(uniquePrefix(), "test:"), ":"))
	must(t, mkdirOwned(dir))
	var lastErr error
	for range 5 {
		port := freePort()
		ini := filepath.Join(dir, "pgbouncer.ini")
		write := func(name, text string) {
			must(t, os.WriteFile(name, []byte(text), 0o644))
		}
		write(filepath.Join(dir, "userlist.txt"), `"postgres" ""`+"\n")
		write(ini, fmt.Sprintf(`[databases]
postgres = host=127.0.0.1 port=%s dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = 24
max_client_conn = 200
logfile = %s
`, p.port, port, filepath.Join(dir, "userlist.txt"), mode, filepath.Join(dir, "pgbouncer.log")))
		cmd := exec.Command(bin, ini)
		runAs(cmd)
		must(t, cmd.Start())
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		url := "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable&connect_timeout=5"
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			select {
			case <-exited:
				lastErr = errors.New("pgbouncer exited at start (see " + dir + "/pgbouncer.log)")
			default:
				ctx, cancel := context.WithTimeout(bg(), time.Second)
				c, err := pgx.Connect(ctx, url)
				if err == nil {
					c.Close(ctx)
					cancel()
					t.Cleanup(func() { cmd.Process.Kill(); <-exited })
					return url
				}
				cancel()
				lastErr = err
				continue
			}
			break
		}
		cmd.Process.Kill()
		<-exited
	}
	t.Fatalf("pgbouncer did not start: %v", lastErr)
	return ""
}
