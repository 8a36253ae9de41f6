package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/ctoken/ctoken/replay"
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
	// The prefix was provisioned once when it was deployed:
	//   ctoken-store provision -addr "$REDIS_ADDR" -prefix myapp:webhooks:
	store, err := redisstore.Open(context.Background(), client, redisstore.Options{Prefix: "myapp:webhooks:"})
	if err != nil {
		// ErrConfig: the server does not fit the options, or the prefix is
		// not provisioned (or was lost); ErrFenced: fenced after a loss;
		// ErrUnavailable: Redis down. Reason names the next step.
		panic(err)
	}
	defer store.Close()

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
// has (Open refuses fewer, unless AllowFewerReplicas). The prefix is
// provisioned once, as a deployment step before the applications start
// (ctoken-store provision -sentinel "$SENTINEL_ADDR" -master mymaster
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
		Observer: func(e redisstore.Event) {
			// count e.Kind in a metric: fence_raised, fenced, clock_skew, not_durable, ...
		},
	})
	if err != nil {
		panic(err) // Reason(err) names the next step (docs/fleet.md, "When the store refuses")
	}
	defer store.Close()
}

// An idempotent operation (a payment) keyed by the client's Idempotency-Key:
// the first request runs it under a lease and records its response in the
// step that ends the lease; a retry gets that response back without running
// it again, and a different request under the same key is refused. The
// idempotency middleware of the root module does this for any HTTP API.
func ExampleStore_AcquireRecord() {
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	ctx := context.Background()
	// A throwaway prefix of a test or a demo may be provisioned by the
	// program itself (New, then Provision); a deployed prefix is
	// provisioned by the deployment (ctoken-store provision), never at
	// start-up: after a loss, Provision would be asked to call the lost key
	// space new.
	store, err := redisstore.New(client, redisstore.Options{Prefix: "demo:idem:"})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := store.Provision(ctx); err != nil {
		panic(err) // it refuses anything with a previous life; Reason says what
	}

	id := "idem:caller-route-key"              // derived from caller, route and key
	fingerprint := []byte("sha256-of-request") // at most replay.MaxFingerprintBytes
	r, err := store.AcquireRecord(ctx, id, time.Minute, fingerprint)
	switch {
	case err != nil:
		fmt.Println("503: try again later:", redisstore.Reason(err))
	case r.State == replay.LeaseAcquired:
		response := []byte(`{"payment":"pay_123"}`) // run the operation
		if err := store.ConfirmRecord(ctx, id, r.Token, time.Now().Add(24*time.Hour), fingerprint, response); err != nil {
			fmt.Println("not recorded: a retry runs it again after the lease:", err)
		}
		fmt.Println("201:", string(response))
	case !bytes.Equal(r.Fingerprint, fingerprint):
		fmt.Println("422: the key was used for another request")
	case r.State == replay.LeaseBusy:
		fmt.Println("409: in progress, retry after", r.Wait)
	default:
		fmt.Println("201 (replayed):", string(r.Result))
	}
}
