package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// TestRelease pins [Store.Release] and the background releases of acquires
// whose outcome is unknown.
func TestRelease(t *testing.T) {
	subtests(t, []subtest{
		{"fails when redis is down or odd", releaseFailsWhenRedisDownOrOdd},
		{"timed out acquire released later", timedOutAcquireIsReleasedOnceRedisAnswers},
		{"before the late acquire leaves a note", releaseBeforeTheLateAcquireLeavesANote},
		{"background releases are bounded", backgroundReleasesAreBounded},
	})
}

// An acquire that times out but reaches Redis later would hold the ID for
// the whole lease; the store releases it once Redis answers again, so the
// next acquire (the sender's retry) gets it long before the lease ends.
// Both steps that take a lease: AcquireLease and AcquireRecord.
func timedOutAcquireIsReleasedOnceRedisAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		acquire func(ctx context.Context, s *Store, id string, lease time.Duration) (replay.LeaseState, error)
	}{
		{"lease", func(ctx context.Context, s *Store, id string, lease time.Duration) (replay.LeaseState, error) {
			l, err := s.AcquireLease(ctx, id, lease)
			return l.State, err
		}},
		{"record", func(ctx context.Context, s *Store, id string, lease time.Duration) (replay.LeaseState, error) {
			r, err := s.AcquireRecord(ctx, id, lease, []byte("fp"))
			return r.State, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			released := make(chan replay.Event, 4)
			// Provisioned with the default timeout (its 128 round trips can
			// take longer than 200 ms on a loaded machine).
			prefix := provisioned(t, c, Options{Prefix: uniquePrefix(t, c)}).Prefix()
			s := closing(t, mustNew(t, c, Options{Prefix: prefix, Timeout: 200 * time.Millisecond,
				Observer: func(e replay.Event) {
					if e.Kind == replay.EventLeaseReleased {
						released <- e
					}
				}}))
			ctx := context.Background()
			if _, err := tc.acquire(ctx, s, "warm-up", time.Second); err != nil { // load the script
				t.Fatal(err)
			}
			const lease = 30 * time.Second
			var id string
			var start time.Time
			for try := 0; ; try++ {
				id = fmt.Sprint("d", try)
				// Long enough to outlast a descheduled caller; when this one
				// was descheduled longer (the busy spell ended before its
				// acquire was answered), again with a spell twice as long
				// and another ID.
				busy := busyRedis(t, (2*time.Second)<<try)
				start = time.Now()
				state, err := tc.acquire(ctx, s, id, lease)
				<-busy
				if err == nil && try < 3 {
					continue // answered after the spell: Redis was not busy for it
				}
				if !errors.Is(err, ErrUnavailable) || state != 0 {
					t.Fatalf("acquire while Redis is busy = %v, %v; want ErrUnavailable", state, err)
				}
				break
			}
			select {
			case <-released:
			case <-time.After(5 * time.Second):
				t.Fatal("the timed-out acquire was not released")
			}
			if state, err := tc.acquire(ctx, s, id, lease); err != nil || state != replay.LeaseAcquired {
				t.Fatalf("acquire after the release = %v, %v; want acquired", state, err)
			}
			if el := time.Since(start); el >= lease {
				t.Fatalf("retry acquired after %v, not before the lease ended", el)
			}
		})
	}
}

// The release of an acquire whose outcome is unknown may reach Redis first:
// it leaves a note that makes that acquire take nothing when it lands, and
// that every other call treats as free.
func releaseBeforeTheLateAcquireLeavesANote(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	token := "0123456789abcdef0123456789abcdef"
	done := make(chan struct{}, 1)
	s.opts.Observer = func(e replay.Event) {
		if e.Kind == replay.EventLeaseReleased {
			done <- struct{}{}
		}
	}
	s.releaseLater("n", token, time.Now().Add(10*time.Second))
	<-done
	if v, err := c.Get(ctx, s.key("n")).Result(); err != nil || v != "X"+token {
		t.Fatalf("entry after the early release = %q, %v; want the cancel note", v, err)
	}
	// The late acquire lands: it takes nothing.
	code, _, err := s.run(ctx, &acquireLua, "n", 10000, token, 0)
	if err != nil || code != 4 {
		t.Fatalf("late acquire = %d, %v; want 4 (cancelled)", code, err)
	}
	// Nor does a late acquire with a record.
	if code, _, _, _, err := s.acquireRecord(ctx, "n", 10000, token, []byte("fp")); err != nil || code != 4 {
		t.Fatalf("late acquire with a record = %d, %v; want 4 (cancelled)", code, err)
	}
	if v, err := c.Get(ctx, s.key("n")).Result(); err != nil || v != "X"+token {
		t.Fatalf("entry after the late acquires = %q, %v; want the cancel note", v, err)
	}
	// Anyone else finds the ID free.
	acquireLease(t, s, "n", time.Minute, replay.LeaseAcquired)
	s.releaseLater("m", token, time.Now().Add(10*time.Second))
	<-done
	wantClaim(t, s, "m", time.Now().Add(time.Minute), true)
	l2, err := s.AcquireLease(ctx, "o", time.Minute)
	must(t, err)
	s.releaseLater("o", token, time.Now().Add(10*time.Second)) // someone else's lease: untouched
	<-done
	if v, err := c.Get(ctx, s.key("o")).Result(); err != nil || v != "L"+l2.Token {
		t.Fatalf("another holder's lease after a release = %q, %v", v, err)
	}
}

// Background releases are bounded per Store and end with Close; beyond the
// bound, or when Redis does not answer within the lease, the lease is left
// to end by itself and an event says so.
func backgroundReleasesAreBounded(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: silentServer(t), ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	var ev events
	s := mustNew(t, c, Options{Timeout: 50 * time.Millisecond, Observer: ev.observe})
	for range maxPendingReleases + 5 {
		s.releaseLater("id", "0123456789abcdef0123456789abcdef", time.Now().Add(time.Minute))
	}
	if n := ev.count(replay.EventLeaseAbandoned); n != 5 {
		t.Fatalf("%d abandoned beyond the bound, want 5", n)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the background releases")
	}
	if n := ev.count(replay.EventLeaseAbandoned); n != maxPendingReleases+5 {
		t.Fatalf("%d abandoned after Close, want %d", n, maxPendingReleases+5)
	}
	s.releaseLater("id", "0123456789abcdef0123456789abcdef", time.Now().Add(time.Minute))
	if n := ev.count(replay.EventLeaseAbandoned); n != maxPendingReleases+5 {
		t.Fatal("a release started after Close")
	}
}

func releaseFailsWhenRedisDownOrOdd(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	s := mustNew(t, c, Options{})
	wantErr(t, s.Release(context.Background(), "id"), ErrUnavailable, "Release with Redis down")
	odd := mustNew(t, answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetVal("OK")
		return cmd
	}), Options{})
	wantErr(t, odd.Release(context.Background(), "id"), ErrUnavailable, "Release with a non-integer reply")
}

// busyRedis keeps the test Redis busy in a Lua loop for d (under Redis's
// busy-reply threshold, so other clients' commands wait rather than fail)
// and returns a channel closed when it is done. It returns once the loop
// runs.
func busyRedis(t *testing.T, d time.Duration) <-chan struct{} {
	t.Helper()
	// No read deadline: the loop ends by itself, and a spell of CPU time
	// (os.clock, on Valkey) takes several times as long on a loaded
	// machine.
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ReadTimeout: -1, MaxRetries: -1})
	// Valkey (8.0) freezes TIME for the length of a script, so a loop on
	// TIME would spin until the busy-reply threshold there; it has
	// os.clock (CPU time, which a spinning script spends at least as fast
	// as wall time), which Redis 7.0 lacks.
	const spin = `local ok, c0 = pcall(function() return os.clock() end)
if ok then
  repeat until os.clock() - c0 >= tonumber(ARGV[1]) / 1000000
  return 1
end
local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + tonumber(ARGV[1])
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
return 1`
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		close(started)
		if err := c.Eval(context.Background(), spin, nil, d.Microseconds()).Err(); err != nil {
			t.Errorf("busy loop: %v", err)
		}
	}()
	<-started
	// Let the script reach the server and start spinning.
	probe := redis.NewClient(&redis.Options{Addr: redisAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer probe.Close()
	// Three pings in a row that wait behind the script: one alone can be
	// late on a loaded machine before the script reached the server.
	for waited, deadline := 0, time.Now().Add(5*time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := probe.Ping(ctx).Err()
		cancel()
		if err == nil {
			waited = 0
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if waited++; waited == 3 { // the script is running
			return done
		}
	}
	t.Fatal("the busy loop never started")
	return nil
}
