package replay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// A Recorder keeps the fingerprint of the request that holds an ID and,
// once confirmed, its result: a retry of the same request gets the result
// again, and a different request under the same ID can be told apart.
func ExampleMemoryStore_AcquireRecord() {
	store := replay.NewMemoryStore(0)
	ctx := context.Background()
	fingerprint := []byte("POST /payments sha256:…")

	first, _ := store.AcquireRecord(ctx, "key-1", time.Minute, fingerprint)
	fmt.Println(first.State)
	busy, _ := store.AcquireRecord(ctx, "key-1", time.Minute, fingerprint)
	fmt.Println(busy.State, string(busy.Fingerprint))

	// The work is done: record its result in the step that ends the lease.
	err := store.ConfirmRecord(ctx, "key-1", first.Token, time.Now().Add(24*time.Hour), fingerprint, []byte(`{"id":"pay_1"}`))
	fmt.Println(err)

	retry, _ := store.AcquireRecord(ctx, "key-1", time.Minute, fingerprint)
	fmt.Println(retry.State, string(retry.Result))
	// Output:
	// acquired
	// busy POST /payments sha256:…
	// <nil>
	// done {"id":"pay_1"}
}
