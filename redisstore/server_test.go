package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	return newServerBin(t, redisBinary(t, "CTOKEN_REDIS_SERVER", "redis-server"), extraArgs...)
}

// newServerBin is newServer with the binary bin.
func newServerBin(t testing.TB, bin string, extraArgs ...string) *server {
	t.Helper()
	s := &server{t: t, bin: bin, dir: t.TempDir()}
	s.args = append([]string{"--save", "", "--appendonly", "no"}, extraArgs...)
	t.Cleanup(func() {
		s.signal(syscall.SIGCONT)
		s.kill()
	})
	for range 5 {
		s.port = freePort(t)
		if err := s.start(); err == nil {
			return s
		} else {
			t.Logf("%s on port %s: %v", bin, s.port, err)
		}
	}
	t.Fatalf("could not start %s", bin)
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
	// The PING may have been answered by another test's server that took
	// the port first (this one then fails to bind): only this process's
	// answer counts.
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil || !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
		s.kill()
		return fmt.Errorf("port %s is another server's (%v)\n%s", s.port, err, out.String())
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

// mustInfo returns one INFO section of c.
func mustInfo(t testing.TB, c *redis.Client, section string) string {
	t.Helper()
	v, err := c.Info(context.Background(), section).Result()
	must(t, err)
	return v
}

// infoInt returns one integer field of an INFO section of c (0 when absent).
func infoInt(t testing.TB, c *redis.Client, section, field string) int64 {
	t.Helper()
	n, _ := strconv.ParseInt(infoValue(mustInfo(t, c, section), field), 10, 64)
	return n
}

// newReplica starts a replica of primary and waits until the primary
// reports it connected and in sync.
func newReplica(t testing.TB, primary *server) *server {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary.addr())
	// Sync at once instead of after the default 5 s of waiting for more
	// replicas.
	must(t, primary.client().ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err())
	r := newServer(t, "--replicaof", host, port)
	waitReplicas(t, primary, 1)
	return r
}

// waitReplicas waits until a write on the primary is acknowledged by n
// replicas (their link is up and in sync).
func waitReplicas(t testing.TB, primary *server, n int) {
	t.Helper()
	c := primary.client()
	waitFor(t, 15*time.Second, fmt.Sprint(n, " replicas in sync"), func() bool {
		// A write and WAIT on one connection: acknowledged once the
		// replicas have synced and received it.
		p := c.Pipeline()
		p.Set(context.Background(), "ctoken-test:replication-probe", "1", time.Minute)
		wait := p.Do(context.Background(), "WAIT", n, 100)
		p.Exec(context.Background())
		got, err := wait.Int64()
		return err == nil && got >= int64(n)
	})
}

// fakeServer is a scripted Redis for the decisions of the server checks:
// its identity, counters and settings are fields the test changes, and it
// records the fences and ledger entries the store asks for.
type fakeServer struct {
	mu                                 sync.Mutex
	runID                              string // "": INFO server gives none
	evicted, swapdb, flushall, flushdb int64
	commands                           int64  // total_commands_processed: every Do counts
	roles                              int64  // ROLE's calls: every ROLE counts
	resets, resetUsec                  int64  // cmdstat_config|resetstat
	errs                               int64  // the reset witness's count (errorstat_<code>): every bump counts
	code                               string // the reset witness's code, as the last bump named it
	policy, maxmemory                  string
	appendonly, appendfsync, save      string
	markers                            int64
	servers                            map[string]string // <prefix>servers
	fences                             int
	ledger                             []string
	fenceErr                           error // the fence script's answer, when set
}

// replyError is an error reply of the fake server (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func newFake() *fakeServer {
	return &fakeServer{runID: "run-a", policy: "noeviction", maxmemory: "0", appendonly: "no", appendfsync: "everysec",
		markers: Shards, servers: map[string]string{}}
}

// resetStat is CONFIG RESETSTAT, which took usec µs: every counter
// zeroed, then the reset counted.
func (f *fakeServer) resetStat(usec int64) {
	f.evicted, f.swapdb, f.flushall, f.flushdb, f.commands, f.roles, f.errs = 0, 0, 0, 0, 1, 0, 0
	f.resets, f.resetUsec = 1, usec
}

func (f *fakeServer) set(change func(f *fakeServer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// counts reads the fences and ledger entries f holds.
func (f *fakeServer) counts() (fences, ledger int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fences, len(f.ledger)
}

// ledgerEntry returns f's i-th ledger entry.
func (f *fakeServer) ledgerEntry(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ledger[i]
}

// wantFencedOnce fails the test unless f holds one fence per shard and
// one ledger entry; when says at which point.
func (f *fakeServer) wantFencedOnce(t *testing.T, when string) {
	t.Helper()
	if fences, ledger := f.counts(); fences != Shards || ledger != 1 {
		t.Fatalf("%s: %d fences, %d ledger entries; want %d and 1", when, fences, ledger, Shards)
	}
}

func (f *fakeServer) Do(ctx context.Context, args ...any) *redis.Cmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	cmd := redis.NewCmd(ctx, args...)
	f.commands++
	arg := func(i int) string { s, _ := args[i].(string); return s }
	switch arg(0) {
	case "ROLE":
		f.roles++
		cmd.SetVal([]any{"master", int64(0), []any{}})
	case "INFO":
		switch arg(1) {
		case "server":
			if f.runID != "" {
				cmd.SetVal("# Server\r\nredis_version:7.0.15\r\nrun_id:" + f.runID + "\r\n")
			} else {
				cmd.SetVal("# Server\r\nredis_version:7.0.15\r\n")
			}
		case "replication":
			cmd.SetVal("role:master\r\nconnected_slaves:0\r\nrepl_backlog_active:0\r\n")
		case "stats":
			total := fmt.Sprintf("total_commands_processed:%d\r\n", f.commands)
			if f.commands < 0 { // a server that does not report it
				total = ""
			}
			cmd.SetVal(fmt.Sprintf("# Stats\r\n%sexpired_keys:3\r\nevicted_keys:%d\r\n", total, f.evicted))
		case "commandstats":
			var b strings.Builder
			b.WriteString("# Commandstats\r\ncmdstat_get:calls=9,usec=1\r\n")
			for name, n := range map[string]int64{"swapdb": f.swapdb, "flushall": f.flushall, "flushdb": f.flushdb, "role": f.roles} {
				if n > 0 {
					fmt.Fprintf(&b, "cmdstat_%s:calls=%d,usec=3,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n", name, n)
				}
			}
			if f.resets > 0 {
				fmt.Fprintf(&b, "cmdstat_config|resetstat:calls=%d,usec=%d,usec_per_call=%d.00,rejected_calls=0,failed_calls=0\r\n", f.resets, f.resetUsec, f.resetUsec)
			}
			cmd.SetVal(b.String())
		case "errorstats":
			var b strings.Builder
			b.WriteString("# Errorstats\r\n")
			if f.errs > 0 {
				fmt.Fprintf(&b, "errorstat_%s:count=%d\r\n", f.code, f.errs)
			}
			cmd.SetVal(b.String())
		}
	case "CONFIG":
		v := map[string]string{"maxmemory-policy": f.policy, "maxmemory": f.maxmemory, "appendonly": f.appendonly, "appendfsync": f.appendfsync, "save": f.save}[arg(2)]
		cmd.SetVal([]any{arg(2), v})
	case "TIME":
		now := time.Now()
		cmd.SetVal([]any{strconv.FormatInt(now.Unix(), 10), strconv.Itoa(now.Nanosecond() / 1000)})
	case "EXISTS":
		cmd.SetVal(f.markers)
	case "GET": // Open's key-space check: every shard open
		if key, _ := args[1].(string); !isMarkerKey(key) {
			cmd.SetErr(fmt.Errorf("ERR unexpected GET"))
			break
		}
		cmd.SetVal("O")
	case "HGET":
		if v, ok := f.servers[arg(2)]; ok {
			cmd.SetVal(v)
		} else {
			cmd.SetErr(redis.Nil)
		}
	case "HSET":
		f.servers[arg(2)] = arg(3)
		cmd.SetVal(int64(1))
	case "HLEN":
		cmd.SetVal(int64(len(f.servers)))
	case "EVAL":
		if arg(1) == rightsScript { // every right there
			cmd.SetVal([]any{})
			break
		}
		if arg(1) == witnessScript {
			f.errs++
			f.code = strings.Fields(arg(3))[0]
			cmd.SetErr(replyError(arg(3)))
			break
		}
		if f.fenceErr != nil {
			cmd.SetErr(f.fenceErr)
			break
		}
		f.fences++
		cmd.SetVal(time.Now().Add(time.Hour).UnixMilli())
	case "RPUSH":
		f.ledger = append(f.ledger, arg(2))
		cmd.SetVal(int64(len(f.ledger)))
	case "LTRIM", "BGREWRITEAOF":
		cmd.SetVal("OK")
	case "EVALSHA":
		cmd.SetVal(int64(1)) // a claim: first
	default:
		cmd.SetErr(fmt.Errorf("ERR unexpected %v", args[0]))
	}
	return cmd
}

// resetBefore is a server reset once before the store opened (a
// dashboard that resets), by a reset that took 28 µs, and the key space
// provisioned on it after the reset: <prefix>servers holds what the
// provisioning's check read (the fake's markers are always there, so a key
// space without a baseline is one that lost it).
func resetBefore(f *fakeServer) {
	f.resetStat(28)
	f.servers[f.runID] = baseline{counters: counters{commands: f.commands, resets: f.resets, resetUsec: f.resetUsec, role: f.roles, witness: true}, markers: -1}.encode(time.Now())
}

// TestLoss pins evidence of loss on the server: told from conditions,
// refused until the fence is written, and consumed once, by one store.
func TestLoss(t *testing.T) {
	subtests(t, []subtest{
		{"told from conditions", serverChecksTellLossFromConditions},
		{"refused until the fence is written", lossRefusesUntilTheFenceIsWritten},
		{"fenced by another store is consumed", lossFencedByAnotherStoreIsConsumed},
		{"pending loss not fenced again", pendingLossFencedByAnotherStoreIsNotFencedAgain},
		{"allow eviction keeps others' evidence", allowEvictionDoesNotConsumeAnotherStoresEvidence},
		{"allow eviction hides no new evictions", allowEvictionStoreDoesNotHideANewServersEvictions},
		{"an entry without reset witnesses consumes no reset", entryWithoutWitnessesConsumesNoReset},
	})
}

// The decisions of the server checks, on a scripted server: what is
// evidence of loss (fence every shard once, one ledger entry), what is a
// condition (refused while it lasts, no fence), and what is neither.
func serverChecksTellLossFromConditions(t *testing.T) {
	aofAlways := func(f *fakeServer) { f.appendonly, f.appendfsync = "yes", "always" }
	tests := []struct {
		name   string
		before func(f *fakeServer) // before Open
		opts   Options
		change func(f *fakeServer) // then one recheck (or, with reopen, a new Store's Open)
		reopen bool
		fenced bool // every shard fenced, once, with one ledger entry
		cond   bool // the check refuses with ErrConfig
		undo   func(f *fakeServer)
	}{
		{"nothing changed", nil, Options{}, func(f *fakeServer) {}, false, false, false, nil},
		{"evicted_keys grew", nil, Options{}, func(f *fakeServer) { f.evicted += 3 }, false, true, false, nil},
		{"evicted_keys grew, AllowEviction", nil, Options{AllowEviction: true}, func(f *fakeServer) { f.evicted += 3 }, false, false, false, nil},
		{"eviction became possible", nil, Options{}, func(f *fakeServer) { f.policy, f.maxmemory = "volatile-ttl", "1000000" }, false, true, true, func(f *fakeServer) { f.policy, f.maxmemory = "noeviction", "0" }},
		{"evicting policy without maxmemory", nil, Options{}, func(f *fakeServer) { f.policy = "allkeys-lru" }, false, false, true, func(f *fakeServer) { f.policy = "noeviction" }},
		{"SWAPDB ran", nil, Options{}, func(f *fakeServer) { f.swapdb++ }, false, true, false, nil},
		{"FLUSHALL ran", func(f *fakeServer) { f.flushall = 2 }, Options{}, func(f *fakeServer) { f.flushall++ }, false, true, false, nil},
		{"FLUSHDB ran", nil, Options{}, func(f *fakeServer) { f.flushdb++ }, false, true, false, nil},
		{"CONFIG RESETSTAT hid a window", func(f *fakeServer) { f.flushdb = 2 }, Options{}, func(f *fakeServer) { f.flushdb = 0 }, false, true, false, nil},
		{"CONFIG RESETSTAT with every loss counter at zero", nil, Options{}, func(f *fakeServer) { f.commands = 0 }, false, true, false, nil},
		{"app restart, then CONFIG RESETSTAT with every loss counter at zero", nil, Options{}, func(f *fakeServer) { f.commands = 0 }, true, true, false, nil},
		{"a server that does not report total_commands_processed", nil, Options{}, func(f *fakeServer) { f.commands = math.MinInt64 / 2 }, false, false, false, nil},
		// Issue 66: a reset followed by more commands than the server had
		// run before (a young server after a burst, or others' traffic).
		{"CONFIG RESETSTAT, then more commands than before", nil, Options{}, func(f *fakeServer) { f.resetStat(28); f.commands = 1 << 20 }, false, true, false, nil},
		{"app restart, then CONFIG RESETSTAT and more commands than before", nil, Options{}, func(f *fakeServer) { f.resetStat(28); f.commands = 1 << 20 }, true, true, false, nil},
		{"a second CONFIG RESETSTAT, then more commands than before", resetBefore, Options{}, func(f *fakeServer) { f.resetStat(31); f.commands = 1 << 20 }, false, true, false, nil},
		{"a second CONFIG RESETSTAT as long as the first, then more commands than before", resetBefore, Options{}, func(f *fakeServer) { f.resetStat(28); f.commands = 1 << 20 }, false, true, false, nil},
		{"app restart, then a second CONFIG RESETSTAT as long as the first, and more commands than before", resetBefore, Options{}, func(f *fakeServer) { f.resetStat(28); f.commands = 1 << 20 }, true, true, false, nil},
		// Issue 105: the key space's own witness (INFO errorstats) shows
		// it, whatever others ran.
		{"a second CONFIG RESETSTAT as long as the first, then more commands and ROLE calls than before", resetBefore, Options{}, func(f *fakeServer) { f.resetStat(28); f.commands, f.roles = 1<<20, 1<<10 }, false, true, false, nil},
		// Not seen: the reset took as long as the one before, and others
		// ran more commands and ROLE calls after it than the server had
		// run before, and other checks of the key space bumped its
		// witness as often (docs/fleet-reference.md).
		{"a second CONFIG RESETSTAT as long as the first, then more commands, ROLE calls and witness bumps than before", resetBefore, Options{}, func(f *fakeServer) {
			errs := f.errs
			f.resetStat(28)
			f.commands, f.roles, f.errs = 1<<20, 1<<10, errs+1
		}, false, false, false, nil},
		{"others' ROLE calls", nil, Options{}, func(f *fakeServer) { f.roles += 5 }, false, false, false, nil},
		{"app restart on a server reset before, its baseline from an older store", func(f *fakeServer) {
			// Version 2: no reset witness; the reset before it is not
			// evidence.
			f.resetStat(28)
			f.commands = 100
			f.servers["run-a"] = "2 0 0 0 0 0 0 0 1700000000123 64"
		}, Options{}, func(f *fakeServer) {}, true, false, false, nil},
		{"AOF switched off", aofAlways, Options{}, func(f *fakeServer) { f.appendonly = "no" }, false, true, false, nil},
		{"appendfsync weakened", aofAlways, Options{}, func(f *fakeServer) { f.appendfsync = "everysec" }, false, true, true, func(f *fakeServer) { f.appendfsync = "always" }},
		{"appendfsync weakened, AllowRollback", aofAlways, Options{AllowRollback: true}, func(f *fakeServer) { f.appendfsync = "everysec" }, false, true, false, nil},
		{"failover to a server without AOF", aofAlways, Options{}, func(f *fakeServer) { f.runID, f.appendonly = "run-b", "no" }, false, false, false, nil},
		{"failover to a server with everysec", aofAlways, Options{}, func(f *fakeServer) { f.runID, f.appendfsync = "run-b", "everysec" }, false, false, true, func(f *fakeServer) { f.appendfsync = "always" }},
		{"failover to a server that replicated flushes", nil, Options{}, func(f *fakeServer) { f.runID, f.flushall, f.swapdb = "run-b", 4, 1 }, false, false, false, nil},
		{"failover to a server that evicted", nil, Options{}, func(f *fakeServer) { f.runID, f.evicted = "run-b", 5 }, false, true, false, nil},
		{"restart without persistence (markers gone)", nil, Options{}, func(f *fakeServer) { f.runID, f.markers = "run-b", 2 }, false, true, false, nil},
		{"restart that loaded every marker", nil, Options{}, func(f *fakeServer) { f.runID = "run-b" }, false, false, false, nil},
		{"app restart, then evicted_keys grew", nil, Options{}, func(f *fakeServer) { f.evicted += 3 }, true, true, false, nil},
		{"app restart, then AOF switched off", aofAlways, Options{}, func(f *fakeServer) { f.appendonly = "no" }, true, true, false, nil},
		{"app restart, nothing changed", func(f *fakeServer) {
			// Counters from before the key space was provisioned, which the
			// check of its Provision kept.
			f.evicted, f.flushall = 7, 1
			f.servers["run-a"] = baseline{counters: counters{evicted: 7, flushall: 1}, markers: -1}.encode(time.Now())
		}, Options{}, func(f *fakeServer) {}, true, false, false, nil},
		{"baselines lost, markers kept, keys evicted", nil, Options{}, func(f *fakeServer) {
			// An LRU eviction took <prefix>servers (read only at start)
			// and claims: a new Store sees markers and no baseline.
			f.evicted, f.servers = 40, map[string]string{}
		}, true, true, false, nil},
		// Issue 81: the same, then CONFIG RESETSTAT while the app was
		// down; evicted_keys is back at 0, and only the reset's own entry
		// in INFO commandstats shows that it may hide evictions.
		{"baselines lost, markers kept, keys evicted, then CONFIG RESETSTAT", nil, Options{}, func(f *fakeServer) {
			f.evicted, f.servers = 40, map[string]string{}
			f.resetStat(28)
		}, true, true, false, nil},
		{"baselines lost, markers kept, on a server reset before", resetBefore, Options{}, func(f *fakeServer) { f.servers = map[string]string{} }, true, true, false, nil},
		{"baselines lost, markers kept, nothing evicted nor reset", nil, Options{}, func(f *fakeServer) { f.servers = map[string]string{} }, true, false, false, nil},
		{"failover to a server reset before", nil, Options{}, func(f *fakeServer) { f.runID = "run-b"; f.resetStat(28) }, false, true, false, nil},
		{"no run_id: by address, in memory", func(f *fakeServer) { f.runID = "" }, Options{}, func(f *fakeServer) { f.evicted++ }, false, true, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFake()
			if tt.before != nil {
				f.set(tt.before)
			}
			opts := tt.opts
			opts.Logger = quietLogger()
			s := mustOpen(t, f, opts)
			f.set(tt.change)
			var checkErr error
			if tt.reopen {
				s, checkErr = Open(ctx, f, opts)
				if s == nil {
					s, _ = New(f, opts)
				}
			} else {
				checkErr = s.checkServer(ctx)
			}
			fences, ledger := f.counts()
			switch {
			case tt.fenced && (fences != Shards || ledger != 1):
				t.Fatalf("%d fences, %d ledger entries; want %d and 1", fences, ledger, Shards)
			case tt.fenced && !strings.Contains(f.ledgerEntry(0), " loss "):
				t.Fatalf("ledger entry %q; want a loss", f.ledgerEntry(0))
			case !tt.fenced && (fences != 0 || ledger != 0):
				t.Fatalf("%d fences, %d ledger entries; want none", fences, ledger)
			case tt.cond != errors.Is(checkErr, ErrConfig):
				t.Fatalf("check = %v; want ErrConfig %v", checkErr, tt.cond)
			case !tt.cond && checkErr != nil:
				t.Fatalf("check = %v", checkErr)
			}
			if rf := s.refusal(); tt.cond != (rf != nil) {
				t.Fatalf("refusal after the check = %v; want one %v", rf, tt.cond)
			}
			// The evidence was consumed: another check fences nothing more.
			s.checkServer(ctx)
			if again, _ := f.counts(); again != fences {
				t.Fatalf("a second check fenced again (%d fences)", again-fences)
			}
			if tt.undo != nil {
				f.set(tt.undo)
				if err := s.checkServer(ctx); err != nil || s.refusal() != nil {
					t.Fatalf("check after the condition ended = %v, refusal %v; want served", err, s.refusal())
				}
				if again, _ := f.counts(); again != fences {
					t.Fatal("ending the condition fenced")
				}
			}
		})
	}
}

// Evidence of loss refuses every call before the fence is written, and
// keeps refusing while the fence cannot be written; once it is, the store
// serves (the fences refuse, not the store).
func lossRefusesUntilTheFenceIsWritten(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	s := mustOpen(t, f, Options{Logger: quietLogger()})
	f.set(func(f *fakeServer) {
		f.evicted, f.fenceErr = 1, errors.New("OOM command not allowed when used memory > 'maxmemory'")
	})
	for range 2 {
		s.checkServer(ctx)
		if err := s.ready(ctx); !errors.Is(err, ErrFenced) || Reason(err) != whyLossSeen {
			t.Fatalf("call while the fence cannot be written = %v; want ErrFenced (%q)", err, whyLossSeen)
		}
		wantRefused(t, s, "x", time.Now().Add(time.Minute), ErrFenced)
	}
	f.set(func(f *fakeServer) { f.fenceErr = nil })
	s.checkServer(ctx)
	f.wantFencedOnce(t, "after the fence could be written")
	wantErr(t, s.refusal(), nil, "refusal once fenced (the fences refuse)")
}

// The baselines kept in <prefix>servers round-trip, and an unreadable one
// is refused.
func TestBaselineEncodingRoundTrips(t *testing.T) {
	tests := []struct {
		name string
		b    baseline
	}{
		{"zero", baseline{markers: -1}},
		{"counters and flags", baseline{counters: counters{evicted: 1, swapdb: 2, flushall: 3, flushdb: 4, commands: 5}, evictable: true, aof: true, fsyncAlways: true, markers: -1}},
		{"reset witnesses", baseline{counters: counters{evicted: 1, swapdb: 2, flushall: 3, flushdb: 4, commands: 5, resets: 1, resetUsec: 28, role: 64, witness: true}, markers: -1}},
		{"no reset yet", baseline{counters: counters{commands: 5, witness: true}, markers: -1}},
		{"the key space's witness", baseline{counters: counters{commands: 5, role: 8, witness: true, errs: 9}, markers: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := time.UnixMilli(1700000000123)
			got, ms, ok := decodeBaseline(tt.b.encode(at))
			if !ok || got != tt.b || ms != at.UnixMilli() {
				t.Fatalf("decode(encode(%+v)) = %+v, %d, %v", tt.b, got, ms, ok)
			}
		})
	}
	t.Run("version 1, without commands", func(t *testing.T) {
		want := baseline{counters: counters{evicted: 1, swapdb: 2, flushall: 3, flushdb: 4}, evictable: true, aof: true, markers: -1}
		if got, ms, ok := decodeBaseline("1 1 2 3 4 1 1 0 1700000000123"); !ok || got != want || ms != 1700000000123 {
			t.Fatalf("decode = %+v, %d, %v; want %+v", got, ms, ok, want)
		}
	})
	t.Run("version 3, without the key space's witness", func(t *testing.T) {
		want := baseline{counters: counters{commands: 64, resets: 1, resetUsec: 28, role: 8, witness: true}, markers: -1}
		if got, ms, ok := decodeBaseline("3 0 0 0 0 0 0 0 1700000000123 64 1 28 8"); !ok || got != want || ms != 1700000000123 {
			t.Fatalf("decode = %+v, %d, %v; want %+v", got, ms, ok, want)
		}
	})
	t.Run("version 2, without reset witnesses", func(t *testing.T) {
		want := baseline{counters: counters{evicted: 1, swapdb: 2, flushall: 3, flushdb: 4, commands: 64}, evictable: true, aof: true, markers: -1}
		if got, ms, ok := decodeBaseline("2 1 2 3 4 1 1 0 1700000000123 64"); !ok || got != want || ms != 1700000000123 {
			t.Fatalf("decode = %+v, %d, %v; want %+v", got, ms, ok, want)
		}
	})
	t.Run("kept rounds commands, ROLE calls and the witness down to a power of two", func(t *testing.T) {
		b := baseline{counters: counters{commands: 1000, role: 100, resets: 1, resetUsec: 28, witness: true, errs: 33, bumped: true}, replicas: 2, markers: 5}
		want := baseline{counters: counters{commands: 512, role: 64, resets: 1, resetUsec: 28, witness: true, errs: 32}, markers: -1}
		if got := b.kept(); got != want {
			t.Fatalf("kept = %+v; want %+v", got, want)
		}
	})
	for _, bad := range []string{"", "1 2 3", "2 0 0 0 0 0 0 0 5", "1 0 0 0 0 0 0 0 5 9", "2 0 0 0 0 0 0 0 5 -1", "3 0 0 0 0 0 0 0 5 9",
		"3 0 0 0 0 0 0 0 5 9 1 28", "3 0 0 0 0 0 0 0 5 9 1 28 -1", "4 0 0 0 0 0 0 0 5 9 1 28 64",
		"1 -1 0 0 0 0 0 0 5", "1 x 0 0 0 0 0 0 5"} {
		if _, _, ok := decodeBaseline(bad); ok {
			t.Fatalf("decodeBaseline(%q) accepted", bad)
		}
	}
}

// Two Stores of a fleet watching one server: the first to see the loss
// fences it and keeps what it saw in <prefix>servers; the other finds the
// evidence consumed there and fences nothing more (one fence, one ledger
// entry), so an operator's reopen is not undone by a slower instance.
func lossFencedByAnotherStoreIsConsumed(t *testing.T) {
	f := newFake()
	var stores []*Store
	for range 2 {
		stores = append(stores, mustOpen(t, f, Options{Logger: quietLogger()}))
	}
	f.set(func(f *fakeServer) { f.evicted += 10 })
	for _, s := range stores {
		s.checkServer(context.Background())
		wantErr(t, s.refusal(), nil, "refusal after the check (the fences refuse)")
	}
	f.wantFencedOnce(t, "after both stores' checks")
}

// A CONFIG RESETSTAT that only the reset witnesses show (after it the
// server ran more commands than before) is not consumed by another
// Store's entry that lacks them (an older Store's, version 2, written
// after the reset): that entry cannot say the reset was fenced, and the
// store fences it.
func entryWithoutWitnessesConsumesNoReset(t *testing.T) {
	f := newFake()
	s := closing(t, mustOpen(t, f, Options{Logger: quietLogger()}))
	f.set(func(f *fakeServer) {
		f.resetStat(28)
		f.commands = 1 << 20
		f.servers["run-a"] = "2 0 0 0 0 0 0 0 1700000000123 1024" // an older Store's, after the reset
	})
	s.checkServer(context.Background())
	f.wantFencedOnce(t, "a reset only the witnesses show, beside a version-2 entry")
}

// A store that found a loss and could not fence it yet (the fence script
// failed) does not fence again once another store fenced the same loss
// and kept what it saw: an operator's Reopen made in between would be
// undone by that second fence.
func pendingLossFencedByAnotherStoreIsNotFencedAgain(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	a := mustOpen(t, f, Options{Logger: quietLogger()})
	b := mustOpen(t, f, Options{Logger: quietLogger()})
	f.set(func(f *fakeServer) { f.evicted += 10; f.fenceErr = errors.New("OOM command not allowed") })
	a.checkServer(ctx)
	wantErr(t, a.refusal(), ErrFenced, "refusal of the store whose fence failed")
	f.set(func(f *fakeServer) { f.fenceErr = nil })
	b.checkServer(ctx)
	f.wantFencedOnce(t, "after the other store's check")
	// An operator reopens here; then the first store checks again.
	a.checkServer(ctx)
	wantErr(t, a.refusal(), nil, "refusal after the other store fenced")
	f.wantFencedOnce(t, "after the first store checked again")
}

// A store with AllowEviction does not consume the evidence of evictions
// for a store of the same key space without it: the baseline it shares
// keeps the evicted count it had.
func allowEvictionDoesNotConsumeAnotherStoresEvidence(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	strict := mustOpen(t, f, Options{Logger: quietLogger()})
	lax := mustOpen(t, f, Options{Logger: quietLogger(), AllowEviction: true})
	f.set(func(f *fakeServer) { f.evicted += 5 })
	lax.checkServer(ctx)
	if fences, _ := f.counts(); fences != 0 {
		t.Fatalf("%d fences after the AllowEviction store's check; want none (its accepted risk)", fences)
	}
	// A new strict store (an app restart) compares with the shared
	// baseline, as does the running one.
	restarted := mustNew(t, f, Options{Logger: quietLogger()})
	restarted.checkServer(ctx)
	strict.checkServer(ctx)
	f.wantFencedOnce(t, "the evictions after both strict stores' checks")
}

// A server new to the key space (a failover, or a restart: a new run_id)
// that had evicted keys is evidence of loss for a store without
// AllowEviction. When a store of the same key space with AllowEviction
// checks the new server first, it writes the server's shared baseline
// with the evicted count it read (it had no baseline to keep the count
// from), and the store without AllowEviction then compares with it and
// finds nothing: the evictions are never fenced.
func allowEvictionStoreDoesNotHideANewServersEvictions(t *testing.T) {
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var mu sync.Mutex
	servers := map[string]string{"an-older-run": baseline{}.encode(time.Now())} // history
	fences := 0
	inner := answerChecksInfo(func(ctx context.Context, args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		switch strings.ToUpper(fmt.Sprint(args[0])) {
		case "INFO":
			if section, _ := args[len(args)-1].(string); section == "stats" {
				cmd.SetVal("# Stats\r\nevicted_keys:7\r\n")
			} else {
				cmd.SetVal("# Commandstats\r\ncmdstat_get:calls=1,usec=1\r\n")
			}
		case "EVALSHA":
			cmd.SetVal(int64(1))
		case "EVAL":
			mu.Lock()
			fences++
			mu.Unlock()
			cmd.SetVal(time.Now().Add(time.Hour).UnixMilli())
		case "RPUSH", "LTRIM", "LPUSH", "LLEN":
			cmd.SetVal(int64(1))
		default:
			cmd.SetErr(fmt.Errorf("ERR unscripted %v", args))
		}
		return cmd
	}, true)
	f := func(ctx context.Context, args ...any) *redis.Cmd {
		name := strings.ToUpper(fmt.Sprint(args[0]))
		if len(args) < 2 {
			return inner(ctx, args...)
		}
		if key, _ := args[1].(string); (name == "HGET" || name == "HSET" || name == "HLEN") && strings.HasSuffix(key, "servers") {
			cmd := redis.NewCmd(ctx, args...)
			mu.Lock()
			defer mu.Unlock()
			switch name {
			case "HGET":
				if v, ok := servers[args[2].(string)]; ok {
					cmd.SetVal(v)
				} else {
					cmd.SetErr(redis.Nil)
				}
			case "HSET":
				servers[args[2].(string)] = args[3].(string)
				cmd.SetVal(int64(1))
			case "HLEN":
				cmd.SetVal(int64(len(servers)))
			}
			return cmd
		}
		return inner(ctx, args...)
	}
	for _, tt := range []struct {
		name  string
		first bool // a store with AllowEviction checks the new server first
	}{{"alone", false}, {"after a store with AllowEviction", true}} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			for k := range servers {
				if k != "an-older-run" {
					delete(servers, k)
				}
			}
			fences = 0
			mu.Unlock()
			client := func() *redis.Client {
				c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
				c.AddHook(&scriptHook{f: f})
				t.Cleanup(func() { c.Close() })
				return c
			}
			if tt.first {
				ae := mustNew(t, client(), Options{Logger: quietLogger(), RecheckInterval: time.Hour, AllowEviction: true})
				ae.Claim(ctx, "x", until)
			}
			s := mustNew(t, client(), Options{Logger: quietLogger(), RecheckInterval: time.Hour})
			first, err := s.Claim(ctx, "y", until)
			s.cancels.wg.Wait()
			mu.Lock()
			n := fences
			mu.Unlock()
			if n == 0 {
				t.Errorf("store without AllowEviction: claim = %v, %v and no fence for the 7 keys the new server evicted", first, err)
			}
		})
	}
}
