package exchangetest_test

import (
	"testing"

	"github.com/ctoken/ctoken/exchange/exchangetest"
	"github.com/ctoken/ctoken/replay"
)

// A store author's test runs the contract with two store values on one
// backend; here, the memory store, which one process shares. (The call
// needs a *testing.T, so the example shows the test function it belongs
// in; go test compiles it.)
func ExampleRunContract() {
	_ = func(t *testing.T) { // func TestStoreUnderTheExchange(t *testing.T)
		exchangetest.RunContract(t, func(t *testing.T) (replay.Store, replay.Store) {
			s := replay.NewMemoryStore(10_000)
			return s, s
		})
	}
}
