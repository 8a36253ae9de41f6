//go:build fault

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testCluster is the 3-master Redis Cluster started by .ci/redis-cluster.sh.
type testCluster struct {
	addrs []string // every node, host:port
	dir   string   // node-<port>/redis.conf and redis.pid per node
	bin   string   // redis-server
}

// clusterFromEnv returns the cluster named by CTOKEN_REDIS_CLUSTER. Without
// it the test is skipped, except under CI=true, where it fails.
func clusterFromEnv(t *testing.T) *testCluster {
	t.Helper()
	v := os.Getenv("CTOKEN_REDIS_CLUSTER")
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CTOKEN_REDIS_CLUSTER is not set but CI=true: the cluster tests must run in CI (use .ci/fleet.sh or .ci/redis-cluster.sh)")
		}
		t.Skip("CTOKEN_REDIS_CLUSTER not set; run under .ci/redis-cluster.sh")
	}
	tc := &testCluster{addrs: strings.Split(v, ","), dir: os.Getenv("CTOKEN_REDIS_CLUSTER_DIR")}
	tc.bin = redisBinary(t, "CTOKEN_REDIS_SERVER", "redis-server")
	if tc.dir == "" {
		t.Fatal("CTOKEN_REDIS_CLUSTER_DIR is not set (.ci/redis-cluster.sh sets it)")
	}
	waitClusterOK(t, tc.addrs...)
	return tc
}

// client returns the ClusterClient the fault tests put behind the store.
func (tc *testCluster) client(t *testing.T) *redis.ClusterClient {
	return clusterClient(t, tc.addrs, 0)
}

// clusterClient is a ClusterClient over addrs, closed when the test ends:
// request deadlines reach the socket, and one dial attempt per command;
// poolSize 0 is go-redis's default.
func clusterClient(t *testing.T, addrs []string, poolSize int) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: poolSize,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// node is one master as CLUSTER NODES describes it.
type node struct {
	id, addr string
	slots    int
}

// masters returns the masters and how many slots each serves, as addr
// (one of tc.addrs) sees the cluster.
func (tc *testCluster) masters(t *testing.T) []node {
	t.Helper()
	out := fmt.Sprint(mustDo(t, tc.addrs[0], "CLUSTER", "NODES"))
	var ms []node
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") {
			continue
		}
		n := node{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			n.slots += b - a + 1
		}
		ms = append(ms, n)
	}
	if len(ms) != 3 {
		t.Fatalf("cluster has %d masters, want 3:\n%s", len(ms), out)
	}
	return ms
}

// waitClusterOK waits until every node of addrs reports cluster_state:ok,
// at most 30 s in all.
func waitClusterOK(t *testing.T, addrs ...string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("cluster_state:ok on every node of %v", addrs), func() bool {
		return !slices.ContainsFunc(addrs, func(a string) bool { return infoField(a, "cluster", "cluster_state") != "ok" })
	})
}

// nodeDir is the directory of the node at addr.
func (tc *testCluster) nodeDir(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return filepath.Join(tc.dir, "node-"+port)
}

// restartEmpty SIGKILLs every node of addrs, then starts each again
// without persistence (its config with appendonly no) and without its AOF,
// which it deletes: a restart of a Redis without persistence, which comes
// back empty. The node's cluster config (nodes.conf) survives, so it comes
// back with its slots. It waits for the cluster to be ok, and at the end
// of the test turns AOF on again on each (CONFIG SET appendonly yes,
// which rewrites the AOF from what the node holds then; appendfsync
// always stays from the config), so the tests after it find the nodes as
// .ci/redis-cluster.sh started them.
func (tc *testCluster) restartEmpty(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		tc.kill(t, a)
	}
	t.Cleanup(func() {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := c.ConfigSet(ctx, "appendonly", "yes").Err()
			for err == nil {
				info, ierr := c.Info(ctx, "persistence").Result()
				if ierr != nil {
					err = ierr
				} else if strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") && strings.Contains(info, "aof_enabled:1") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			c.Close()
			if err != nil {
				t.Errorf("node %s: turning AOF on again: %v", a, err)
			}
		}
	})
	for _, a := range addrs {
		must(t, os.RemoveAll(filepath.Join(tc.nodeDir(a), "appendonlydir")))
		tc.start(t, a, "--appendonly", "no")
	}
	waitClusterOK(t, tc.addrs...)
}

// kill SIGKILLs the node at addr and waits until it is gone.
func (tc *testCluster) kill(t *testing.T, addr string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tc.nodeDir(addr), "redis.pid"))
	must(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(t, err)
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	// A killed process's main thread can show as a zombie while its other
	// threads still exit, holding the listening socket: a start then fails
	// with "Address already in use". Wait until the port refuses too.
	waitFor(t, 10*time.Second, fmt.Sprintf("node %s (pid %d) to die and stop listening after SIGKILL", addr, pid),
		func() bool { return !processAlive(pid) && !listening(addr) })
}

// listening reports whether something still accepts connections at addr:
// anything but a refused connection counts as yes.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		return true
	}
	return !errors.Is(err, syscall.ECONNREFUSED)
}

// start starts the node at addr from its config, with args after it
// (redis-server's command-line overrides), and waits until it answers.
func (tc *testCluster) start(t *testing.T, addr string, args ...string) {
	t.Helper()
	// The config daemonizes and writes redis.pid, so .ci/redis-cluster.sh
	// stops the new process at exit.
	args = append([]string{filepath.Join(tc.nodeDir(addr), "redis.conf")}, args...)
	if out, err := exec.Command(tc.bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("starting node %s: %v\n%s", addr, err, out)
	}
	if err := waitPing(addr, nil, 30*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(tc.nodeDir(addr), "redis.log"))
		if len(log) > 2000 {
			log = log[len(log)-2000:]
		}
		t.Fatalf("%v; the end of its log:\n%s", err, log)
	}
}

// processAlive reports whether pid runs (a zombie does not count).
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// migrateSlots moves slots, with their keys, from one master to another
// as redis-cli --cluster reshard does, in three phases so that traffic meets
// each: every slot is marked IMPORTING on the target and MIGRATING on the
// source (a claim of a key not on the source is then redirected with ASK to
// the target), the slots stay so for hold, then each slot's keys move with
// MIGRATE, and finally every node is told the target owns the slots
// (CLUSTER SETSLOT NODE). It returns how many keys moved.
func (tc *testCluster) migrateSlots(t *testing.T, slots []int, from, to node, hold time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := redis.NewClient(&redis.Options{Addr: from.addr})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to.addr})
	defer dst.Close()
	for _, sl := range slots {
		wantErr(t, dst.Do(ctx, "CLUSTER", "SETSLOT", sl, "IMPORTING", from.id).Err(), nil, fmt.Sprintf("SETSLOT %d IMPORTING", sl))
		wantErr(t, src.Do(ctx, "CLUSTER", "SETSLOT", sl, "MIGRATING", to.id).Err(), nil, fmt.Sprintf("SETSLOT %d MIGRATING", sl))
	}
	time.Sleep(hold)
	host, port, _ := strings.Cut(to.addr, ":")
	moved := 0
	for _, sl := range slots {
		for {
			keys, err := src.ClusterGetKeysInSlot(ctx, sl, 100).Result()
			if err != nil {
				t.Fatalf("GETKEYSINSLOT %d: %v", sl, err)
			}
			if len(keys) == 0 {
				break
			}
			args := append([]any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}, anySlice(keys)...)
			wantErr(t, src.Do(ctx, args...).Err(), nil, fmt.Sprintf("MIGRATE slot %d", sl))
			moved += len(keys)
		}
	}
	for _, sl := range slots {
		for _, nc := range []*redis.Client{dst, src} {
			wantErr(t, nc.Do(ctx, "CLUSTER", "SETSLOT", sl, "NODE", to.id).Err(), nil, fmt.Sprintf("SETSLOT %d NODE on %s", sl, nc.Options().Addr))
		}
	}
	waitClusterOK(t, tc.addrs...)
	return moved
}

// keyNodes returns, for every key under prefix, the address of the master
// holding it.
func keyNodes(t *testing.T, c *redis.ClusterClient, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := map[string]string{}
	var mu = make(chan struct{}, 1)
	err := c.ForEachMaster(ctx, func(ctx context.Context, nc *redis.Client) error {
		iter := nc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		mu <- struct{}{}
		for _, k := range keys {
			m[k] = nc.Options().Addr
		}
		<-mu
		return nil
	})
	must(t, err)
	return m
}
