package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

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
	// program itself (New, then ProvisionNew); a deployed prefix is
	// provisioned by the deployment (ctoken-store provision -new), never at
	// start-up: after a loss, ProvisionNew would be asked to call the lost key
	// space new.
	store, err := redisstore.New(client, redisstore.Options{Prefix: "demo:idem:"})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := store.ProvisionNew(ctx); err != nil {
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
