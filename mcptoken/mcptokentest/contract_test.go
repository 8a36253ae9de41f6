package mcptokentest_test

import (
	"testing"

	"github.com/ctoken/ctoken/mcptoken/mcptokentest"
	"github.com/ctoken/ctoken/replay"
)

// TestContractOnTheMemoryStore: one process, both instances on one
// MemoryStore.
func TestContractOnTheMemoryStore(t *testing.T) {
	mcptokentest.RunContract(t, func(*testing.T) (replay.Recorder, replay.Recorder) {
		s := replay.NewMemoryStore(1000)
		return s, s
	})
}

// TestTasksContractOnTheMemoryStore: durable tasks, both instances on one
// MemoryStore.
func TestTasksContractOnTheMemoryStore(t *testing.T) {
	mcptokentest.RunTasksContract(t, func(*testing.T) (replay.Recorder, replay.Recorder) {
		s := replay.NewMemoryStore(1000)
		return s, s
	})
}
