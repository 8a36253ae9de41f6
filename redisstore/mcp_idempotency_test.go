package redisstore

import (
	"testing"

	"github.com/ctoken/ctoken/mcptoken/mcptokentest"
	"github.com/ctoken/ctoken/replay"
)

// TestMCPIdempotencyContract: idempotent MCP tool calls
// (mcptoken.Idempotency, the engine under ctokenmcp's and ctokenmcpgo's
// Idempotency.Wrap) from two server instances, each with its own Store on
// the test Redis (one prefix).
func TestMCPIdempotencyContract(t *testing.T) {
	c := newTestClient(t)
	mcptokentest.RunContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, c) })
}

// TestMCPTasksContract: durable MCP tasks from two server instances, each
// with its own Store on the test Redis (one prefix).
func TestMCPTasksContract(t *testing.T) {
	c := newTestClient(t)
	mcptokentest.RunTasksContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, c) })
}
