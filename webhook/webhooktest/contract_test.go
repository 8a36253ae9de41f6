package webhooktest_test

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook/webhooktest"
)

// TestContractOnTheMemoryStore: one process, both instances on one
// MemoryStore.
func TestContractOnTheMemoryStore(t *testing.T) {
	webhooktest.RunContract(t, func(*testing.T) (replay.Store, replay.Store) {
		s := replay.NewMemoryStore(1000)
		return s, s
	})
}
