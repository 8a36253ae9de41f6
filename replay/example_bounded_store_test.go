package replay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// A bounded replay store refuses new IDs when full instead of forgetting
// live ones.
func ExampleMemoryStore() {
	store := replay.NewMemoryStore(2)
	ctx, until := context.Background(), time.Now().Add(time.Minute)
	for _, id := range []string{"a", "a", "b", "c"} {
		first, err := store.Claim(ctx, id, until)
		fmt.Println(id, first, err)
	}
	// Output:
	// a true <nil>
	// a false <nil>
	// b true <nil>
	// c false replay: store full
}
