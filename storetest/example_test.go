package storetest_test

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/storetest"
)

// A store's whole contract suite is one call in one test; here the
// MemoryStore, whose two instances are one store. A store on a server
// makes each store on a key space of its own (a prefix, a table) and the
// two instances on one. (The call needs a *testing.T, so the example shows
// the test function it belongs in; go test compiles it.)
func ExampleExercise() {
	_ = func(t *testing.T) { // func TestStore(t *testing.T)
		storetest.Exercise(t, storetest.Harness{
			NewStore: func(t *testing.T) replay.Store { return replay.NewMemoryStore(10_000) },
			NewInstances: func(t *testing.T) (a, b replay.Store) {
				s := replay.NewMemoryStore(10_000)
				return s, s
			},
		})
	}
}
