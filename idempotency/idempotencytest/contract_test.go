package idempotencytest_test

import (
	"testing"

	"github.com/ctoken/ctoken/idempotency/idempotencytest"
	"github.com/ctoken/ctoken/replay"
)

// TestContractOnTheMemoryStore: one process, both instances on one
// MemoryStore.
func TestContractOnTheMemoryStore(t *testing.T) {
	idempotencytest.RunContract(t, func(*testing.T) (replay.Recorder, replay.Recorder) {
		s := replay.NewMemoryStore(1000)
		return s, s
	})
}
