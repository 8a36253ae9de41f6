package replaytest_test

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// The test of a store's author runs both contracts on a fresh store per
// case; here, the memory store. (The call needs a *testing.T, so the
// example shows the test function it belongs in; go test compiles it.)
func ExampleRunLeaseContract() {
	_ = func(t *testing.T) { // func TestStoreKeepsTheContracts(t *testing.T)
		replaytest.RunLeaseContract(t, func(t *testing.T) replaytest.Store {
			return replay.NewMemoryStore(10_000)
		})
		replaytest.RunRecordContract(t, func(t *testing.T) replaytest.RecordStore {
			return replay.NewMemoryStore(10_000)
		})
	}
}
