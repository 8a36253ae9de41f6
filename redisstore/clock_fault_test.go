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

// TestLaggingInstanceClock runs issue 26's
// workload on three instances sharing one Redis: one with the right clock,
// one whose clock (ctoken's Now and the store's Options.Now) runs 2 minutes
// behind, one 2 minutes ahead. Each mints tokens by its own clock, and
// every token and delivery goes to two of them at once. Open refuses the
// lagging instance's store (ErrClockSkew); built with New, the store
// refuses every claim and lease step it is asked for with ErrClockSkew, so
// the lagging instance accepts no token and processes no delivery — before
// the clock bound it accepted a token Redis had already let expire every
// time it was presented (issue 26: 3 times with 62 s of skew). No token is
// accepted twice and no delivery processed twice; the other two instances
// go on serving.
func TestLaggingInstanceClock(t *testing.T) {
	rp := newServer(t)
	prefix := randomPrefix()
	behind := func() time.Time { return time.Now().Add(-2 * time.Minute) }
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) }
	nows := []func() time.Time{time.Now, behind, ahead}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Open(ctx, standaloneClient(t, rp.addr()), Options{Prefix: prefix, Now: behind, Logger: quietLogger()}); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("Open with a clock 2 minutes behind Redis: err = %v, want ErrClockSkew", err)
	}
	var stores []wlStore
	for i, now := range nows {
		opts := Options{Prefix: prefix, Timeout: 2 * time.Second, Now: now, Logger: quietLogger()}
		var s *Store
		var err error
		if i <= 1 { // store 0 provisions the prefix; store 1 cannot pass Open's clock check
			s, err = New(standaloneClient(t, rp.addr()), opts)
		} else {
			s, err = Open(ctx, standaloneClient(t, rp.addr()), opts)
		}
		if err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
		t.Cleanup(func() { s.Close() })
		if i == 0 {
			if _, err := s.ProvisionNew(ctx); err != nil {
				t.Fatal(err)
			}
		}
		stores = append(stores, s)
	}
	wl := newWorkload(t, skewCfg, stores, nows)
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
