package redisstore

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9/logging"
)

// TestMain silences go-redis's logger: the tests point clients at closed
// ports and kill Redis on purpose, and it logs every failed dial.
func TestMain(m *testing.M) {
	logging.Disable()
	os.Exit(m.Run())
}
