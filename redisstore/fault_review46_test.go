//go:build fault

package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// Eviction while the app is idle (no call runs the recheck), then the
// revert and an app restart: the evicted claims' IDs must not be
// accepted again. Under allkeys-lru the coldest key of the prefix is
// <prefix>servers (read only when a Store starts), so eviction takes it
// first; a Store opened afterwards then finds no baseline for the run_id
// and no history, takes evicted_keys as it is, and serves, although the
// ledger says the key space was provisioned and its markers are there.
func TestEvictionWhileIdleThenRestartAcceptsNothingTwice(t *testing.T) {
	srv := newServer(t)
	c := srv.client()
	ctx := context.Background()
	prefix := "idle:"
	s := provisioned(t, c, Options{Prefix: prefix, Logger: quietLogger()})
	old := claimOld(t, s, evictOld)
	// The app is idle from here: no call, so no recheck.
	used, _ := strconv.ParseInt(infoValue(mustInfo(t, c, "memory"), "used_memory"), 10, 64)
	data, _ := strconv.ParseInt(infoValue(mustInfo(t, c, "memory"), "used_memory_dataset"), 10, 64)
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-data/2, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 { // another application's writes, which make Redis evict
		c.Set(ctx, "other:"+strconv.Itoa(i), strings.Repeat("x", 64), 0)
	}
	evicted, _ := strconv.ParseInt(infoValue(mustInfo(t, c, "stats"), "evicted_keys"), 10, 64)
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	s.Close() // the app restarts
	hash := c.Exists(ctx, prefix+"servers").Val()
	ledger := c.LLen(ctx, prefix+"ledger").Val()
	t.Logf("%d keys evicted; %sservers exists: %d; ledger entries: %d", evicted, prefix, hash, ledger)
	if evicted == 0 {
		t.Fatal("nothing was evicted: the test did not test eviction")
	}
	twice, refused, openErr := replayAfter(t, c, prefix, old)
	t.Logf("after the restart Open = %v; %d of %d refused, %d accepted twice", openErr, refused, len(old), twice)
	if twice != 0 {
		t.Fatalf("%d IDs accepted twice after eviction while the app was idle and a restart", twice)
	}
}
