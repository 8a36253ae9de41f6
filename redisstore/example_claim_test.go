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
	// The prefix was provisioned once when it was deployed:
	//   ctoken-store provision -addr "$REDIS_ADDR" -prefix myapp:webhooks: -new
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
