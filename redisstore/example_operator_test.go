package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ctoken/ctoken/redisstore"
	"github.com/redis/go-redis/v9"
)

// The operator's path, which the ctoken-store command runs
// (ctoken-store provision, status, reopen), never the application at
// start-up: ProvisionNew opens a brand-new prefix once, on the operator's
// statement that it never held claims (a first deploy; Provision instead
// fences a key space of unknown history for one lifetime), and both
// refuse, writing nothing, when any evidence shows the prefix or the
// server had a previous life; Status shows the key space's shards, fences and ledger. Reopening
// a key space that lost data (Store.Reopen) accepts a risk, so it takes
// who accepted it and why. Needs a Redis server (REDIS_ADDR), so it is
// compiled, not run.
func ExampleStore_ProvisionNew() {
	client := redis.NewClient(&redis.Options{
		Addr:                  os.Getenv("REDIS_ADDR"),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	defer client.Close()
	ctx := context.Background()
	// New, not Open: Open refuses a prefix that is not provisioned yet.
	store, err := redisstore.New(client, redisstore.Options{Prefix: "myapp:replay:", Horizon: 25 * time.Hour})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	opened, err := store.ProvisionNew(ctx)
	if err != nil {
		panic(redisstore.Reason(err)) // names the way on: wait out a fence, a new prefix, or a reopen
	}
	st, err := store.Status(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("opened %d shards; open %d, fenced %d, missing %d\n", opened, st.Open, st.Fenced, st.Missing)
}
