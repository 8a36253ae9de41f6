package storetest_test

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/storetest"
)

// TestExercise runs the suite on the root module's store, the MemoryStore
// (both instances on one store, as in one process).
func TestExercise(t *testing.T) {
	storetest.Exercise(t, storetest.Harness{
		NewStore: func(*testing.T) replay.Store { return replay.NewMemoryStore(1000) },
		NewInstances: func(*testing.T) (replay.Store, replay.Store) {
			s := replay.NewMemoryStore(1000)
			return s, s
		},
	})
}
