package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/redis/go-redis/v9"
)

// A webhook handler accepts each delivery ID once across the whole fleet and
// refuses the request whenever the store cannot decide.
func ExampleStore_Claim() {
	client := redis.NewClient(&redis.Options{
		Addr:                  os.Getenv("REDIS_ADDR"),
		ContextTimeoutEnabled: true, // let deadlines reach the socket
		MaxRetries:            -1,   // a retried SET whose reply was lost would report "duplicate"
	})
	defer client.Close()
	// A stock redis-server (Debian's package, the Docker image) takes RDB
	// snapshots and is refused with ErrConfig ("RDB snapshots without
	// AOF"): a restart would bring back markers without the latest claims.
	// Run it with no persistence (a restart then fences the key space):
	//   redis-server --save "" --appendonly no
	// or with every write fsynced:
	//   redis-server --appendonly yes --appendfsync always
	store, err := redisstore.Open(context.Background(), client, redisstore.Options{Prefix: "myapp:webhooks:"})
	if err != nil {
		panic(err) // ErrConfig: the server does not fit the options; ErrUnavailable: Redis down
	}
	defer store.Close()
	// Once per new prefix, before its first claim (later calls return 0,
	// nil). Without it every shard is fenced for one Horizon (25 h).
	if _, err := store.Provision(context.Background()); err != nil {
		panic(err)
	}

	deliveryID := "evt_123"
	// Remember the ID for as long as the delivery's signature is accepted.
	first, err := store.Claim(context.Background(), deliveryID, time.Now().Add(10*time.Minute))
	switch {
	case errors.Is(err, redisstore.ErrUnavailable):
		// fail closed; Reason says why (fenced, clock skew, not durable, ...)
		fmt.Println("503: try again later:", redisstore.Reason(err))
	case err != nil:
		fmt.Println("400:", err)
	case !first:
		fmt.Println("200: duplicate delivery, already processed")
	default:
		fmt.Println("200: processing")
	}
}

// A primary with a replica (Sentinel, or a managed service): every write
// waits for the replica, so a failover cannot lose a claim that was
// reported first. Durability.Replicas must cover every replica the primary
// has (Open refuses fewer, unless AllowFewerReplicas). A new prefix is provisioned once, when it is deployed.
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
		Observer: func(e redisstore.Event) {
			// count e.Kind in a metric: fence_raised, fenced, clock_skew, not_durable, ...
		},
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	// Only for a prefix that has never held claims, never after a loss.
	if _, err := store.Provision(ctx); err != nil {
		panic(err)
	}
}
