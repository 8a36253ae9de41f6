package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server of the test's own on a loopback port it keeps
// across restarts, so a test can kill, stop (SIGSTOP), continue and start it
// again at the same address. It is killed when the test ends.
type server struct {
	t    testing.TB
	bin  string
	port string
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *bytes.Buffer
}

// newServer starts a redis-server without persistence plus extraArgs. It
// needs the binary (CTOKEN_REDIS_SERVER, else redis-server on PATH):
// without it the test is skipped, except under CI=true, where it fails.
func newServer(t testing.TB, extraArgs ...string) *server {
	t.Helper()
	bin := os.Getenv("CTOKEN_REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("redis-server not found but CI=true: the Redis tests must run in CI (use .ci/redis.sh)")
			}
			t.Skip("redis-server not found; set CTOKEN_REDIS_SERVER or install it")
		}
	}
	s := &server{t: t, bin: bin, dir: t.TempDir(), args: append([]string{"--save", "", "--appendonly", "no"}, extraArgs...)}
	t.Cleanup(func() {
		s.signal(syscall.SIGCONT)
		s.kill()
	})
	for range 5 {
		_, s.port, _ = net.SplitHostPort(closedAddr(t))
		if err := s.start(); err == nil {
			return s
		} else {
			t.Logf("redis-server on port %s: %v", s.port, err)
		}
	}
	t.Fatal("could not start redis-server")
	return nil
}

func (s *server) addr() string { return "127.0.0.1:" + s.port }

func (s *server) start() error {
	args := append([]string{"--bind", "127.0.0.1", "--port", s.port, "--dir", s.dir, "--protected-mode", "yes"}, s.args...)
	cmd := exec.Command(s.bin, args...)
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.out = cmd, exited, out
	s.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited:\n%s", out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("no PONG within 10s:\n%s", out.String())
}

func (s *server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// kill ends the server with SIGKILL and waits for it.
func (s *server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}

// restart kills the server and starts it again at the same address: with
// no persistence it comes back empty.
func (s *server) restart() {
	s.t.Helper()
	s.kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server: %v", err)
	}
}

// client returns a client of the server that never retries, closed when
// the test ends.
func (s *server) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// newReplica starts a replica of primary and waits until the primary
// reports it connected and in sync.
func newReplica(t testing.TB, primary *server) *server {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary.addr())
	// Sync at once instead of after the default 5 s of waiting for more
	// replicas.
	if err := primary.client().ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	r := newServer(t, "--replicaof", host, port)
	waitReplicas(t, primary, 1)
	return r
}

// waitReplicas waits until a write on the primary is acknowledged by n
// replicas (their link is up and in sync).
func waitReplicas(t testing.TB, primary *server, n int) {
	t.Helper()
	c := primary.client()
	for deadline := time.Now().Add(15 * time.Second); ; {
		// A write and WAIT on one connection: acknowledged once the
		// replicas have synced and received it.
		p := c.Pipeline()
		p.Set(context.Background(), "ctoken-test:replication-probe", "1", time.Minute)
		wait := p.Do(context.Background(), "WAIT", n, 100)
		p.Exec(context.Background())
		got, err := wait.Int64()
		if err == nil && got >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas not in sync within 15s (WAIT: %d, %v)", n, got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
