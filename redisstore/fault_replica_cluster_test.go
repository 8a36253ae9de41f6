//go:build fault

package redisstore

import (
	"testing"
	"time"
)

// TestReplicaClusterTakeoverAcceptsNothingTwice runs issue 26's workload on
// a Redis Cluster of three masters with one asynchronous replica each
// (started by the test, no persistence), behind go-redis's ClusterClient.
// After 1 s the first master's replication link is cut, the master
// acknowledges for 400 ms more, then it is SIGKILLed and its replica
// promoted with CLUSTER FAILOVER TAKEOVER; the old master comes back empty
// and rejoins as the new master's replica, and every token is redeemed
// again and every delivery sent again. Without a durability setting the
// doubles (claims on that master's third of the slots) are logged; with
// WAIT for one replica, sent to the master that holds the key, none. It
// logs the throughput cost of the setting on the healthy cluster.
func TestReplicaClusterTakeoverAcceptsNothingTwice(t *testing.T) {
	t.Run("throughput", func(t *testing.T) {
		rc := startReplicaCluster(t, 2*time.Second)
		var async, durable []wlStore
		pa, pd := randomPrefix(), randomPrefix()+"wait:"
		for range 2 {
			async = append(async, replicatedStore(t, rc.client(t), pa, 0))
			durable = append(durable, replicatedStore(t, rc.client(t), pd, 1))
		}
		throughputRatio(t, async, durable)
	})
	for _, d := range protections {
		t.Run(d.name, func(t *testing.T) {
			rc := startReplicaCluster(t, 2*time.Second)
			prefix := randomPrefix()
			var stores []wlStore
			for range 2 {
				stores = append(stores, replicatedStore(t, rc.client(t), prefix, d.replicas))
			}
			wl := newWorkload(t, failoverCfg, stores, nil)
			wl.start()
			time.Sleep(200 * time.Millisecond)
			m0 := wl.mark()
			time.Sleep(800 * time.Millisecond)
			m1 := wl.mark()
			cutReplication(t, rc.masters[0].addr(), rc.replicas[0].addr())
			time.Sleep(400 * time.Millisecond)
			m2 := wl.mark()
			start := time.Now()
			rc.takeover(t, 0, true)
			took := time.Since(start)
			time.Sleep(300 * time.Millisecond)
			wl.stop()
			r := wl.recheck(15 * time.Second)
			t.Logf("%s: %.0f tokens+deliveries/s before the cut; %d tokens accepted and %d deliveries acknowledged during the 400 ms cut; takeover and rejoin took %v",
				d.name, rate(m0, m1), m2.accepts-m1.accepts, m2.acks-m1.acks, took.Round(time.Millisecond))
			t.Logf("%s: %v", d.name, r)
			logReasons(t, r)
			checkRecheck(t, r)
			checkDurable(t, d, r)
		})
	}
}
