//go:build fault

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// AOF switched off at run time (CONFIG SET appendonly no) under load, then
// a crash (kill -9) shortly after, and a start that loads the AOF of the
// command line: the claims reported first after the switch are not in it.
// Each run claims with 4 goroutines, switches AOF off at a random instant
// of the recheck interval (the default, 1 s), kills the server
// CTOKEN_AOF_CRASH_AFTER (default 300 ms) later, restarts it and claims
// every ID reported first again. On a server with WAITAOF (Valkey 8,
// Redis 7.2+) the implied wait refuses every write after the switch,
// also when a check read the persistence just before it (the race of
// decideLocalAOF): 0 IDs accepted twice in every run. On Redis 7.0 (no
// WAITAOF) the window of one RecheckInterval stays: the test measures it
// (runs with IDs accepted twice, and how many) and does not fail on it.
// CTOKEN_AOF_RUNS runs per server with WAITAOF (default 30) and
// CTOKEN_AOF_WINDOW_RUNS without (default 5: they only measure);
// redis-server and, when installed, valkey-server.
func TestAOFSwitchedOffThenCrashAcceptsNothingTwice(t *testing.T) {
	// 30 runs where the window is closed (about 2.5 s each); 5 where it
	// is measured (Redis 7.0: about 17 s each, reloading a large AOF).
	closedRuns := envInt(t, "CTOKEN_AOF_RUNS", 30)
	windowRuns := envInt(t, "CTOKEN_AOF_WINDOW_RUNS", 5)
	crashAfter := envDuration(t, "CTOKEN_AOF_CRASH_AFTER", 300*time.Millisecond)
	flavors := []struct{ name, bin string }{{"redis", redisBinary(t, "CTOKEN_REDIS_SERVER", "redis-server")}}
	if bin := valkeyBinary(); bin != "" {
		flavors = append(flavors, struct{ name, bin string }{"valkey", bin})
	}
	for _, fl := range flavors {
		t.Run(fl.name, func(t *testing.T) {
			srv := newServerBin(t, fl.bin, "--appendonly", "yes", "--appendfsync", "always")
			info, err := srv.client().Info(context.Background(), "server").Result()
			if err != nil {
				t.Fatal(err)
			}
			closed := versionAtLeast(info, 7, 2)
			version := serverVersion(info)
			if v := infoValue(info, "valkey_version"); v != "" {
				version = v
			}
			srv.kill()
			runs := windowRuns
			if closed {
				runs = closedRuns
			}
			var doubled []int
			total, reported := 0, 0
			for run := range runs {
				twice, after := aofSwitchCrashRun(t, fl.bin, crashAfter)
				total += twice
				reported += after
				if twice > 0 {
					doubled = append(doubled, twice)
				}
				if closed && twice != 0 {
					t.Fatalf("run %d on %s: %d IDs accepted twice (%d claims answered first after the switch was sent); want 0", run, version, twice, after)
				}
			}
			t.Logf("%s %s: %d runs (switch, crash %v later): %d runs with IDs accepted twice %v, %d IDs twice in all; %d claims answered first after the switch was sent (some ran before it)",
				fl.name, version, runs, crashAfter, len(doubled), doubled, total, reported)
		})
	}
}

// aofSwitchCrashRun is one run of TestAOFSwitchedOffThenCrashAcceptsNothingTwice
// on a fresh server of bin: it returns the IDs accepted twice and the
// claims answered first after the switch was sent.
func aofSwitchCrashRun(t *testing.T, bin string, crashAfter time.Duration) (twice, after int) {
	t.Helper()
	srv := newServerBin(t, bin, "--appendonly", "yes", "--appendfsync", "always")
	defer srv.kill()
	ctx := context.Background()
	s := faultStoreWith(t, srv.client(), Options{Timeout: 2 * time.Second})
	prefix := s.Prefix()
	var mu sync.Mutex
	var accepted []string
	var switched time.Time
	afterSwitch := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("g%d-%d", g, i)
				ok, err := s.Claim(ctx, id, time.Now().Add(10*time.Minute))
				if ok && err == nil {
					mu.Lock()
					accepted = append(accepted, id)
					if !switched.IsZero() {
						afterSwitch++
					}
					mu.Unlock()
				}
				if err != nil {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(1500*time.Millisecond + time.Duration(rand.Int64N(int64(time.Second))))
	mu.Lock()
	switched = time.Now() // claims answered from here count as after the switch (some were sent before)
	mu.Unlock()
	if err := srv.client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(crashAfter)
	srv.kill()
	close(stop)
	wg.Wait()
	s.Close()
	if err := srv.start(); err != nil { // loads the AOF of its command line
		t.Fatal(err)
	}
	s2, err := New(srv.client(), Options{Prefix: prefix, Logger: quietLogger(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, id := range accepted {
		ok, err := s2.Claim(ctx, id, time.Now().Add(10*time.Minute))
		if ok {
			twice++
		}
		if err != nil && !errors.Is(err, ErrFenced) {
			t.Fatalf("claim after the restart: %v", err)
		}
	}
	return twice, afterSwitch
}
