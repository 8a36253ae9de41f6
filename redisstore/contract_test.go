package redisstore

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/storetest"
	"github.com/redis/go-redis/v9"
)

// TestStore runs storetest's suite: every contract kit a Store's
// interfaces call for, on key spaces of the test Redis (two instances
// share a prefix).
func TestStore(t *testing.T) {
	c := newTestClient(t)
	storetest.Exercise(t, storetest.Harness{
		NewStore: func(t *testing.T) replay.Store {
			return provisioned(t, c, Options{Prefix: uniquePrefix(t, c)})
		},
		NewInstances: func(t *testing.T) (replay.Store, replay.Store) { return twoInstances(t, c) },
	})
}

// twoInstances returns two Stores on one provisioned key space, as two
// instances of a service have.
func twoInstances(t *testing.T, c *redis.Client) (*Store, *Store) {
	t.Helper()
	prefix := uniquePrefix(t, c)
	a := provisioned(t, c, Options{Prefix: prefix})
	b := closing(t, mustNew(t, c, Options{Prefix: prefix}))
	return a, b
}
