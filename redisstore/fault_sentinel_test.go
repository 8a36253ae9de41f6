//go:build fault

package redisstore

import (
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSentinelFailoverAcceptsNothingTwice is
// TestFailoverToLaggingReplicaAcceptsNothingTwice with the failover driven
// by a real redis-sentinel (quorum 1, down-after 1 s) and each instance's
// client a go-redis failover client asking the sentinel for the primary:
// the replication link is cut, the primary acknowledges for 400 ms more and
// is SIGKILLed, the sentinel promotes the replica, the clients follow, and
// the old primary comes back empty as the new one's replica. Without a
// durability setting the doubles are logged; with WAIT for one replica no
// token is accepted twice and no delivery processed twice.
func TestSentinelFailoverAcceptsNothingTwice(t *testing.T) {
	for _, d := range protections {
		t.Run(d.name, func(t *testing.T) {
			primary, replica := startPrimaryReplica(t)
			sp := startSentinel(t, primary.addr(), 1)
			prefix := randomPrefix()
			var stores []wlStore
			for range 2 {
				c := redis.NewFailoverClient(&redis.FailoverOptions{
					MasterName: sentinelMaster, SentinelAddrs: []string{sp.addr},
					ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 64,
				})
				t.Cleanup(func() { c.Close() })
				stores = append(stores, replicatedStore(t, c, prefix, d.replicas))
			}
			wl := newWorkload(t, failoverCfg, stores, nil)
			wl.start()
			time.Sleep(200 * time.Millisecond)
			m0 := wl.mark()
			time.Sleep(800 * time.Millisecond)
			m1 := wl.mark()
			cutReplication(t, primary.addr(), replica.addr())
			time.Sleep(400 * time.Millisecond)
			m2 := wl.mark()
			killed := time.Now()
			primary.stop(syscall.SIGKILL)
			newAddr := sp.waitFailover(t, primary.addr(), 15*time.Second)
			if newAddr != replica.addr() {
				t.Fatalf("sentinel promoted %s, want the replica %s", newAddr, replica.addr())
			}
			failedOver := time.Since(killed)
			rejoinAsReplica(t, primary, newAddr)
			time.Sleep(300 * time.Millisecond)
			wl.stop()
			r := wl.recheck(15 * time.Second)
			t.Logf("%s: %.0f tokens+deliveries/s before the cut; %d tokens accepted and %d deliveries acknowledged during the 400 ms cut; sentinel failover took %v",
				d.name, rate(m0, m1), m2.accepts-m1.accepts, m2.acks-m1.acks, failedOver.Round(time.Millisecond))
			t.Logf("%s: %v", d.name, r)
			logReasons(t, r)
			checkRecheck(t, r)
			checkDurable(t, d, r)
		})
	}
}
