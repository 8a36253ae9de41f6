package replay_test

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// TestMemoryStoreRequestStateContract: no refusal consumes a single-use
// request state held in a MemoryStore (replaytest.RunRequestStateContract;
// redisstore and pgstore run it against real servers).
func TestMemoryStoreRequestStateContract(t *testing.T) {
	replaytest.RunRequestStateContract(t, func(*testing.T) replay.Store { return replay.NewMemoryStore(0) })
}
