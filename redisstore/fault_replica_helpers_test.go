//go:build fault

package redisstore

// Helpers for the failover fault tests: a primary with an asynchronous
// replica, both redis-server processes of the test's own on loopback, the
// replication link cut on purpose, a replica promoted by hand, by a real
// redis-sentinel, or inside a Redis Cluster with one replica per master.
//
// The link is cut by revoking the replication user on the primary: every
// node has an ACL user "repl" that replicas authenticate as (masteruser),
// and cutReplication turns it off and kills its connections, so the replica
// is disconnected and cannot sync again, while the primary goes on
// acknowledging writes (no min-replicas-to-write) — what a partition
// between the two, or a replication credential rotated on one side only,
// does. Nothing in the cut touches the clients' connections.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replArgs are every node's replication settings: a replica syncs at once
// (no diskless-sync delay) and authenticates as the ACL user "repl".
var replArgs = []string{
	"--repl-diskless-sync-delay", "0",
	"--user", "repl", "on", ">repl-fault-test", "+psync", "+replconf", "+ping",
	"--masteruser", "repl", "--masterauth", "repl-fault-test",
}

// adminDo runs one command on the node at addr with its own short-lived
// connection.
func adminDo(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// mustDo is adminDo failing the test on error.
func mustDo(t *testing.T, addr string, args ...any) any {
	t.Helper()
	v, err := adminDo(addr, args...)
	wantErr(t, err, nil, fmt.Sprintf("%s %v", addr, args))
	return v
}

// infoField returns field of INFO section on the node at addr; section
// "cluster" reads CLUSTER INFO.
func infoField(addr, section, field string) string {
	cmd := []any{"INFO", section}
	if section == "cluster" {
		cmd = []any{"CLUSTER", "INFO"}
	}
	v, _ := adminDo(addr, cmd...)
	return infoValue(v, field)
}

// startPrimaryReplica starts a primary and one asynchronous replica of it,
// without persistence unless their extra arguments say otherwise, and
// waits until the replica is in sync.
func startPrimaryReplica(t *testing.T, primaryArgs, replicaArgs []string) (primary, replica *server) {
	t.Helper()
	primary = newServer(t, append(slices.Clone(replArgs), primaryArgs...)...)
	replica = newServer(t, append(append(slices.Clone(replArgs), replicaArgs...), "--replicaof", "127.0.0.1", primary.port)...)
	waitInSync(t, primary.addr(), 1)
	return primary, replica
}

// waitInSync waits until n replicas of the primary at addr have
// acknowledged a write made now (on a cluster master whose slots do not
// hold the probe key: until n replicas are online).
func waitInSync(t *testing.T, addr string, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%d replicas of %s in sync", n, addr), func() bool {
		// A cluster master answers MOVED for a key outside its slots: its
		// WAIT then counts the replicas online.
		if _, err := adminDo(addr, "SET", "fault:sync-probe", "1"); err != nil && !strings.HasPrefix(err.Error(), "MOVED") {
			return false
		}
		v, err := adminDo(addr, "WAIT", n, 200)
		return err == nil && v.(int64) >= int64(n)
	})
}

// cutReplication disconnects every replica of the primary at addr and
// keeps them out (ACL user "repl" off), and waits until replica reports its
// link down.
func cutReplication(t *testing.T, primary, replica string) {
	t.Helper()
	mustDo(t, primary, "ACL", "SETUSER", "repl", "off")
	mustDo(t, primary, "CLIENT", "KILL", "USER", "repl")
	waitFor(t, 5*time.Second, "replica "+replica+" to report its link down after the cut",
		func() bool { return infoField(replica, "replication", "master_link_status") == "down" })
}

// rejoinAsReplica starts the stopped p again, empty (no persistence), as a
// replica of primary — what Sentinel or an operator does with a failed
// primary that comes back — with extra appended to its command line, and
// waits until it is in sync.
func rejoinAsReplica(t *testing.T, p *server, primary string, extra ...string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary)
	p.args = append(append(append([]string{"--save", "", "--appendonly", "no"}, replArgs...), "--replicaof", host, port), extra...)
	wantErr(t, p.start(), nil, "restarting the old primary as a replica")
	waitInSync(t, primary, 1)
}

// switchingClient is a standalone client whose every new connection dials
// the address currently in target: a failover is followed by storing the
// new primary's address (pooled connections to the old one fail and are
// dropped). Each instance of a fleet has its own, sharing target.
func switchingClient(t *testing.T, target *atomic.Pointer[string]) *redis.Client {
	t.Helper()
	var d net.Dialer
	c := redis.NewClient(&redis.Options{
		Addr: *target.Load(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 64,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, *target.Load())
		},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// sentinelProc is a redis-sentinel of the test's own.
type sentinelProc struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	dir    string
}

// sentinelMaster is the name the sentinel monitors the primary under.
const sentinelMaster = "fault"

// startSentinel starts one redis-sentinel monitoring the primary at
// primary with quorum 1, a 1 s down-after (less flaps between the two nodes on a
// loaded machine) and a 3 s failover timeout,
// and waits until it has discovered replicas replicas. It is killed when
// the test ends.
func startSentinel(t *testing.T, primary string, replicas int) *sentinelProc {
	t.Helper()
	bin := redisBinary(t, "CTOKEN_REDIS_SENTINEL", "redis-sentinel")
	host, pport, _ := net.SplitHostPort(primary)
	dir := t.TempDir()
	for range 5 {
		port := freePort(t)
		conf := filepath.Join(dir, "sentinel.conf")
		err := os.WriteFile(conf, []byte(fmt.Sprintf(`bind 127.0.0.1
port %s
dir %s
protected-mode yes
sentinel monitor %s %s %s 1
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 3000
sentinel parallel-syncs %[3]s 1
`, port, dir, sentinelMaster, host, pport)), 0o600)
		must(t, err)
		cmd := exec.Command(bin, conf)
		logf, err := os.Create(filepath.Join(dir, "sentinel.log"))
		must(t, err)
		cmd.Stdout, cmd.Stderr = logf, logf
		must(t, cmd.Start())
		sp := &sentinelProc{addr: "127.0.0.1:" + port, cmd: cmd, exited: make(chan struct{}), dir: dir}
		go func() { cmd.Wait(); logf.Close(); close(sp.exited) }()
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGKILL)
			<-sp.exited
		})
		if err := waitPing(sp.addr, sp.exited, 10*time.Second); err != nil {
			cmd.Process.Signal(syscall.SIGKILL)
			<-sp.exited
			t.Logf("redis-sentinel on port %s: %v", port, err)
			continue
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := adminDo(sp.addr, "SENTINEL", "REPLICAS", sentinelMaster)
			if l, ok := v.([]any); err == nil && ok && len(l) >= replicas {
				return sp
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel found no %d replicas after 20 s: %v %v\n%s", replicas, v, err, sp.log())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Fatal("could not start redis-sentinel")
	return nil
}

// client returns a go-redis failover client that asks the sentinel for the
// primary, closed when the test ends.
func (sp *sentinelProc) client(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: sentinelMaster, SentinelAddrs: []string{sp.addr},
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 64,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func (sp *sentinelProc) log() string {
	b, _ := os.ReadFile(filepath.Join(sp.dir, "sentinel.log"))
	return string(b)
}

// masterAddr asks the sentinel which node is the primary now.
func (sp *sentinelProc) masterAddr() (string, error) {
	v, err := adminDo(sp.addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster)
	if err != nil {
		return "", err
	}
	l, ok := v.([]any)
	if !ok || len(l) != 2 {
		return "", fmt.Errorf("unexpected reply %v", v)
	}
	return fmt.Sprintf("%v:%v", l[0], l[1]), nil
}

// waitFailover waits until the sentinel names a primary other than old,
// and that node reports itself a primary; it returns its address.
func (sp *sentinelProc) waitFailover(t *testing.T, old string, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		a, err := sp.masterAddr()
		if err == nil && a != old && infoField(a, "replication", "role") == "master" {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel did not fail over within %v (master %q, %v)\n%s", limit, a, err, sp.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNoCandidate waits until the sentinel has read replica's
// slave-priority 0 (it then never promotes it), and checks that a forced
// failover (SENTINEL FAILOVER) finds no replica to promote, within 15 s.
func (sp *sentinelProc) waitNoCandidate(t *testing.T, replica string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(replica)
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := adminDo(sp.addr, "SENTINEL", "REPLICAS", sentinelMaster)
		l, _ := v.([]any)
		known := false
		for _, r := range l {
			ip, _ := configValue(r, "ip")
			p, _ := configValue(r, "port")
			prio, _ := configValue(r, "slave-priority")
			known = known || ip == host && p == port && prio == "0"
		}
		if err == nil && known {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel did not read replica-priority 0 of %s within 15 s: %v %v", replica, v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// INPROG: the sentinel names the promoted replica before its failover
	// ends, and a loaded machine can start another one, which finds no
	// replica to promote either and aborts.
	for {
		_, err := adminDo(sp.addr, "SENTINEL", "FAILOVER", sentinelMaster)
		if err != nil && strings.Contains(err.Error(), "NOGOODSLAVE") {
			return
		}
		if err == nil || !strings.Contains(err.Error(), "INPROG") || time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER with the only replica at replica-priority 0 = %v; want NOGOODSLAVE\n%s", err, sp.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaCluster is a Redis Cluster of the test's own: three masters, each
// with one asynchronous replica, no persistence.
type replicaCluster struct {
	masters, replicas []*server
	ids               map[*server]string
}

// startReplicaCluster starts six cluster nodes on loopback, gives the three
// masters a third of the slots each, makes each of the others a replica of
// one master, and waits until the cluster is ok and every replica in sync.
func startReplicaCluster(t *testing.T, nodeTimeout time.Duration) *replicaCluster {
	t.Helper()
	args := append([]string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout.Milliseconds())),
		"--cluster-replica-no-failover", "yes", // the test promotes by hand
	}, replArgs...)
	rc := &replicaCluster{ids: map[*server]string{}}
	for i := range 6 {
		p := startClusterNode(t, args)
		id, err := adminDo(p.addr(), "CLUSTER", "MYID")
		must(t, err)
		rc.ids[p] = id.(string)
		if i < 3 {
			rc.masters = append(rc.masters, p)
		} else {
			rc.replicas = append(rc.replicas, p)
		}
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, m := range rc.masters {
		mustDo(t, m.addr(), "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1])
	}
	all := rc.nodes()
	for _, p := range all[1:] {
		mustDo(t, all[0].addr(), "CLUSTER", "MEET", "127.0.0.1", p.port)
	}
	// Every node must know every other before a replica can follow its master.
	waitFor(t, 20*time.Second, "the cluster nodes to meet", func() bool {
		return !slices.ContainsFunc(all, func(p *server) bool { return infoField(p.addr(), "cluster", "cluster_known_nodes") != "6" })
	})
	for i, r := range rc.replicas {
		mustDo(t, r.addr(), "CLUSTER", "REPLICATE", rc.ids[rc.masters[i]])
	}
	waitClusterOK(t, rc.addrs()...)
	for _, m := range rc.masters {
		waitInSync(t, m.addr(), 1)
	}
	return rc
}

// startClusterNode starts one cluster node on a port whose bus port
// (port + 10000) is free too.
func startClusterNode(t *testing.T, args []string) *server {
	t.Helper()
	for range 20 {
		p := newServer(t, args...)
		port, _ := strconv.Atoi(p.port)
		if port+10000 <= 65535 {
			if v, _ := adminDo(p.addr(), "INFO", "cluster"); strings.Contains(fmt.Sprint(v), "cluster_enabled:1") {
				return p
			}
		}
		p.stop(syscall.SIGKILL)
	}
	t.Fatal("could not start a cluster node")
	return nil
}

// nodes returns every node, masters first.
func (rc *replicaCluster) nodes() []*server {
	return append(slices.Clone(rc.masters), rc.replicas...)
}

// addrs returns every node's address.
func (rc *replicaCluster) addrs() []string {
	var a []string
	for _, p := range rc.nodes() {
		a = append(a, p.addr())
	}
	return a
}

// client returns a ClusterClient over every node (clusterClient).
func (rc *replicaCluster) client(t *testing.T) *redis.ClusterClient {
	return clusterClient(t, rc.addrs(), 32)
}

// takeover SIGKILLs master i and promotes its replica with CLUSTER FAILOVER
// TAKEOVER, waits until the replica serves the slots, then restarts the old
// master (empty, same nodes.conf), which rejoins as the new master's
// replica, and waits until it is in sync.
func (rc *replicaCluster) takeover(t *testing.T, i int, rejoin bool) {
	t.Helper()
	m, r := rc.masters[i], rc.replicas[i]
	m.stop(syscall.SIGKILL)
	mustDo(t, r.addr(), "CLUSTER", "FAILOVER", "TAKEOVER")
	waitFor(t, 20*time.Second, "replica "+r.addr()+" to be a master after TAKEOVER",
		func() bool { return infoField(r.addr(), "replication", "role") == "master" })
	rc.masters[i], rc.replicas[i] = r, m
	waitClusterOK(t, slices.DeleteFunc(rc.addrs(), func(a string) bool { return a == m.addr() })...)
	if !rejoin {
		return
	}
	wantErr(t, m.start(), nil, "restarting the old master")
	waitFor(t, 20*time.Second, "old master "+m.addr()+" to rejoin as a replica",
		func() bool { return infoField(m.addr(), "replication", "role") == "slave" })
	waitClusterOK(t, rc.addrs()...)
	waitInSync(t, r.addr(), 1)
}
