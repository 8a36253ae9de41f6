package mcptokentest_test

import (
	"testing"

	"github.com/ctoken/ctoken/mcptoken/mcptokentest"
	"github.com/ctoken/ctoken/replay"
)

// A store author's test runs the contract with two store values on one
// backend; here, the memory store, which one process shares. (The call
// needs a *testing.T, so the example shows the test function it belongs
// in; go test compiles it.)
func ExampleRunContract() {
	_ = func(t *testing.T) { // func TestStoreUnderIdempotentToolCalls(t *testing.T)
		mcptokentest.RunContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) {
			s := replay.NewMemoryStore(10_000)
			return s, s
		})
	}
}
