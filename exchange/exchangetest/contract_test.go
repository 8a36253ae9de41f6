package exchangetest_test

import (
	"testing"

	"github.com/ctoken/ctoken/exchange/exchangetest"
	"github.com/ctoken/ctoken/replay"
)

// TestContractOnTheMemoryStore: one process, both instances on one
// MemoryStore.
func TestContractOnTheMemoryStore(t *testing.T) {
	exchangetest.RunContract(t, func(*testing.T) (replay.Store, replay.Store) {
		s := replay.NewMemoryStore(1000)
		return s, s
	})
}
