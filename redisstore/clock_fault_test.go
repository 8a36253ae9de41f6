//go:build fault

package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// skewCfg is the skew test's workload: ctoken one-time tokens of one
// minute, so a token minted by an instance two minutes behind has expired,
// and its claim (expiry + replay.SkewMargin) lies in Redis's past, while
// that instance still takes it for valid.
var skewCfg = wlConfig{workers: 24, ttl: time.Minute, lease: 5 * time.Second, timeout: 2 * time.Second}

// TestLaggingInstanceClock runs issue 26's workload on three instances
// sharing one Redis: one with the right clock, one 2 minutes behind, one 2
// minutes ahead. The lagging instance's store is refused at Open and, made
// with New, refuses every claim and lease step with ErrClockSkew: it
// accepts no token (before the clock bound it accepted tokens Redis had let
// expire) and processes no delivery. No token is accepted twice, no
// delivery processed twice, and the other two go on serving.
func TestLaggingInstanceClock(t *testing.T) {
	rp := newServer(t)
	prefix := randomPrefix()
	behind := func() time.Time { return time.Now().Add(-2 * time.Minute) }
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) }
	nows := []func() time.Time{time.Now, behind, ahead}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Open(ctx, rp.client(), Options{Prefix: prefix, Now: behind, Logger: quietLogger()}); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("Open with a clock 2 minutes behind Redis: err = %v, want ErrClockSkew", err)
	}
	opts := func(now func() time.Time) Options {
		return Options{Prefix: prefix, Timeout: 2 * time.Second, Now: now, Logger: quietLogger()}
	}
	// The right clock provisions the prefix; the lagging one cannot pass
	// Open's clock check.
	right := faultStoreWith(t, rp.client(), opts(time.Now))
	lagging := closing(t, mustNew(t, rp.client(), opts(behind)))
	leading, err := Open(ctx, rp.client(), opts(ahead))
	must(t, err)
	t.Cleanup(func() { leading.Close() })
	wl := newWorkload(t, skewCfg, []wlStore{right, lagging, leading}, nows)
	wl.start()
	time.Sleep(1500 * time.Millisecond)
	wl.stop()
	r := wl.recheck(0) // one pass: the lagging instance refuses for as long as it lags
	names := []string{"right clock", "2 min behind", "2 min ahead"}
	for i, n := range wl.nodes {
		t.Logf("%-13s accepted %5d tokens, processed %5d deliveries, refused %5d redeems for clock skew",
			names[i], n.accepted.Load(), n.processed.Load(), n.skewed.Load())
	}
	t.Logf("%v", r)
	logReasons(t, r)
	if r.acceptedTwice != 0 || r.processedTwice != 0 {
		t.Fatalf("%d tokens accepted twice, %d deliveries processed twice; want 0", r.acceptedTwice, r.processedTwice)
	}
	lag := wl.nodes[1]
	if lag.accepted.Load() != 0 || lag.processed.Load() != 0 {
		t.Fatalf("the instance 2 minutes behind accepted %d tokens and processed %d deliveries, want 0", lag.accepted.Load(), lag.processed.Load())
	}
	if lag.skewed.Load() == 0 {
		t.Fatal("the instance 2 minutes behind was never refused for clock skew")
	}
	if wl.nodes[0].accepted.Load() == 0 || wl.nodes[2].accepted.Load() == 0 {
		t.Fatal("an instance with a clock Redis accepts served nothing")
	}
}
