package redisstore_test

import (
	"context"
	"os"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// A primary with a replica (Sentinel, or a managed service): every write
// waits for the replica, so a failover cannot lose a claim that was
// reported first. Durability.Replicas must cover every replica the primary
// has (Open refuses fewer, unless AllowFewerReplicas). The prefix is
// provisioned once, as a deployment step before the applications start
// (ctoken-store provision -new -sentinel "$SENTINEL_ADDR" -master mymaster
// -prefix myapp:replay: -replicas 1); Open refuses it until then.
func ExampleOpen() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{os.Getenv("SENTINEL_ADDR")},
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	defer client.Close()
	ctx := context.Background()
	store, err := redisstore.Open(ctx, client, redisstore.Options{
		Prefix:     "myapp:replay:",
		Horizon:    25 * time.Hour, // the webhook DedupWindow (24 h) plus room
		Durability: redisstore.Durability{Replicas: 1, Timeout: 250 * time.Millisecond},
		Observer: func(e replay.Event) {
			// count e.Kind in a metric: fence_raised, fenced, clock_skew, not_durable, ...
		},
	})
	if err != nil {
		panic(err) // Reason(err) names the next step (docs/fleet.md, "When the store refuses")
	}
	defer store.Close()
}
