package redisstore

import (
	"bytes"
	"context"
	"errors"
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

// redisBinary finds a Redis binary: the path in env, else name on PATH.
// Without it the test is skipped, except under CI=true, where it fails.
func redisBinary(t testing.TB, env, name string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found but CI=true: the Redis tests must run in CI (use .ci/redis.sh or .ci/fleet.sh)", name)
		}
		t.Skipf("%s not found; set %s or install it (.ci/redis.sh and .ci/fleet.sh do)", name, env)
	}
	return bin
}

// server is a redis-server of the test's own on a loopback port and
// directory it keeps across restarts, so a test can kill, pause (SIGSTOP),
// continue and start it again at the same address with the same files. It
// is killed when the test ends.
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

// newServer starts a redis-server on a free loopback port with a fresh
// directory and extraArgs appended to its command line (which by default
// has no persistence: --save "" --appendonly no). It needs the binary
// (CTOKEN_REDIS_SERVER, else redis-server on PATH): without it the test is
// skipped, except under CI=true, where it fails.
func newServer(t testing.TB, extraArgs ...string) *server {
	t.Helper()
	s := &server{t: t, bin: redisBinary(t, "CTOKEN_REDIS_SERVER", "redis-server"), dir: t.TempDir()}
	s.args = append([]string{"--save", "", "--appendonly", "no"}, extraArgs...)
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

// start runs the server and waits until it answers PING (after loading
// its AOF or RDB file, if any). On failure the error carries the server's
// output.
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
	if err := waitPing(s.addr(), exited, 15*time.Second); err != nil {
		s.kill()
		return fmt.Errorf("%w\n%s", err, out.String())
	}
	return nil
}

// waitPing waits until the Redis at addr answers PING, or exited closes.
func waitPing(addr string, exited <-chan struct{}, limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		select {
		case <-exited:
			return errors.New("redis-server exited")
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
	return fmt.Errorf("redis at %s did not answer PING within %v", addr, limit)
}

// signal sends sig to the running server, if any: SIGSTOP pauses it,
// SIGCONT resumes it.
func (s *server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// stop sends sig (SIGKILL: a crash; SIGTERM: a clean shutdown, which saves
// an RDB snapshot when save points are configured) and waits for the exit,
// at most 20 s before it sends SIGKILL.
func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// kill ends the server with SIGKILL and waits for it.
func (s *server) kill() { s.stop(syscall.SIGKILL) }

// restart stops the server with sig and starts it again on the same port
// and directory: without persistence it comes back empty; with AOF or RDB
// it reloads what its files hold.
func (s *server) restart(sig syscall.Signal) {
	s.t.Helper()
	s.stop(sig)
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server: %v", err)
	}
}

// client returns a client of the server that never retries, closed when
// the test ends.
func (s *server) client() *redis.Client { return standaloneClient(s.t, s.addr()) }

// standaloneClient is a client of the Redis at addr that never retries a
// command (a retried SET NX whose reply was lost would report the claim as
// taken), with request deadlines on the socket; it is closed when the test
// ends.
func standaloneClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
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
