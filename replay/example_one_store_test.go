package replay_test

import (
	"fmt"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
)

// One store, chosen at run time, serves every feature: a [replay.Recorder]
// (MemoryStore, redisstore, pgstore and sqlitestore all are one) is also
// the [replay.Store] that single-use tokens and the webhook verifier take.
func Example_oneStoreForEveryFeature() {
	var store replay.Recorder = replay.NewMemoryStore(0) // or redisstore.New, pgstore.New, sqlitestore.New

	onetime := ctoken.OneTimeConfig{Replay: store}       // takes a replay.Store
	requests := idempotency.Config{Store: store}         // takes a replay.Recorder
	states := ctoken.RequestStateSecurity{Replay: store} // takes a replay.Store
	fmt.Println(onetime.Replay != nil, requests.Store != nil, states.Replay != nil)
	// Output: true true true
}
