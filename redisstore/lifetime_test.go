package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// lifetimeOpts are the Options of the lifetime tests: the default Horizon
// (25 h), a small MaxSkew so that a fence of seconds is seconds, and no
// background check unless recheck is set.
func lifetimeOpts(prefix string, recheck time.Duration) Options {
	return Options{Prefix: prefix, MaxSkew: 200 * time.Millisecond, RecheckInterval: recheck, Logger: quietLogger()}
}

// claim is s.Claim, asked again while the store refuses it for a clock
// behind Redis's (ErrClockSkew, a refusal that consumes nothing): these
// stores' MaxSkew is 200 ms, which a call can take to reach Redis on a
// loaded machine.
func claim(ctx context.Context, s *Store, id string, until time.Time) (bool, error) {
	for try := 0; ; try++ {
		first, err := s.Claim(ctx, id, until)
		if !errors.Is(err, ErrClockSkew) || try == 20 {
			return first, err
		}
	}
}

// fenceEnd claims a fresh ID on s and returns when the fence that
// refuses it ends; it fails the test when the claim is not fenced.
// A refusal of the checks while they fence (ErrFenced without a RetryAt)
// is retried for up to 3 s.
func fenceEnd(t *testing.T, s *Store, id string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		first, err := claim(context.Background(), s, id, time.Now().Add(time.Second))
		if first || !errors.Is(err, ErrFenced) {
			t.Fatalf("claim after the loss: first = %v, err = %v; want ErrFenced", first, err)
		}
		if until, ok := replay.RetryAt(err); ok {
			return until
		}
		if time.Now().After(deadline) {
			t.Fatalf("fenced without a RetryAt: %v", err)
		}
	}
}

// waitUntil sleeps until t has passed (the tests' fences last seconds).
func waitUntil(t time.Time) { time.Sleep(time.Until(t) + 50*time.Millisecond) }

// claimedBefore is what was accepted before a loss: each ID's until.
type claimedBefore map[string]time.Time

// claimMany claims n fresh IDs (prefix-0, prefix-1, ...) on s, each until
// life from now, and returns them as claimedBefore.
func claimMany(t *testing.T, s *Store, prefix string, n int, life time.Duration) claimedBefore {
	t.Helper()
	before := claimedBefore{}
	for i := range n {
		id, until := fmt.Sprint(prefix, i), time.Now().Add(life)
		if first, err := claim(context.Background(), s, id, until); !first || err != nil {
			t.Fatalf("claim %s: %v, %v", id, first, err)
		}
		before[id] = until
	}
	return before
}

// meetEveryShard claims one fresh ID on each shard of s, so that s meets
// a loss on every shard.
func meetEveryShard(s *Store) {
	var met [Shards]bool
	for i, n := 0, 0; n < Shards; i++ {
		if id := fmt.Sprintf("after-%d", i); !met[shardOf(id)] {
			met[shardOf(id)] = true
			n++
			claim(context.Background(), s, id, time.Now().Add(time.Second))
		}
	}
}

// latest is the last until of c.
func (c claimedBefore) latest() time.Time {
	var l time.Time
	for _, u := range c {
		if u.After(l) {
			l = u
		}
	}
	return l
}

// acceptedTwice claims every ID of c again on s and counts those accepted
// while their first claim had not expired: IDs accepted twice. A claim
// accepted after its first until is harmless (the token had expired). A
// shard fenced when the loss is first met there (its own fence, which
// also ends within lifetime, the key space's) is claimed again once its
// fence has ended; every ID is tried once first, so the shards' fences
// run side by side and the test waits one lifetime, not one per shard.
func (c claimedBefore) acceptedTwice(t *testing.T, s *Store, life, lifetime time.Duration) int {
	t.Helper()
	twice := 0
	// again claims id, waiting out the store-wide refusal (ErrFenced with
	// no RetryAt) that holds every call while a check that met the loss
	// fences the shards.
	again := func(id string) (bool, error) {
		deadline := time.Now().Add(lifetime + 5*time.Second)
		for {
			first, err := claim(context.Background(), s, id, time.Now().Add(life))
			if _, ok := replay.RetryAt(err); ok || !errors.Is(err, ErrFenced) || time.Now().After(deadline) {
				return first, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	count := func(id string, first bool) {
		if first && time.Now().Before(c[id]) {
			twice++
		}
	}
	var fenced []string
	var last time.Time
	for id := range c {
		first, err := again(id)
		if retry, ok := replay.RetryAt(err); ok && errors.Is(err, ErrFenced) {
			if limit := time.Now().Add(lifetime + time.Second); retry.After(limit) {
				t.Fatalf("a shard fenced until %v; want within the key space's lifetime %v", retry, lifetime)
			}
			fenced = append(fenced, id)
			if retry.After(last) {
				last = retry
			}
			continue
		}
		wantErr(t, err, nil, "claim after the fence")
		count(id, first)
	}
	waitUntil(last)
	for _, id := range fenced {
		first, err := again(id)
		wantErr(t, err, nil, "claim after the fence")
		count(id, first)
	}
	return twice
}

// TestLifetime pins the key space's recorded lifetime: the fence it ends,
// the longer lifetime winning, and steps past it refused by Redis's clock.
func TestLifetime(t *testing.T) {
	subtests(t, []subtest{
		{"fence ends after the longest claim", fenceEndsWhenTheKeySpaceLongestClaimHasExpired},
		{"longer lifetime of two applications wins", twoApplicationsOnOneKeySpaceTheLongerLifetimeWins},
		{"record outlasting a shorter horizon fences", recordOutlastingAShorterHorizonStillFences},
		{"loss before the short one read the record fences for the longer", lossBeforeTheShortOneReadTheRecordFencesForTheLonger},
		{"recorded only when it grows", lifetimeIsRecordedOnlyWhenItGrows},
		{"step past it by redis clock refused", stepPastTheKeySpaceLifetimeByRedisClockIsRefused},
		{"unexpected recorded value refused", recordedLifetimeHoldingAnUnexpectedValueIsRefused},
		{"status shows when reopening is safe", statusShowsWhenReopeningAcceptsNothingTwice},
		{"1-minute work fenced for minutes", oneMinuteWorkIsFencedForMinutes},
		{"idempotency keys fenced for window and lease", idempotencyKeysAreFencedForTheirWindowAndLease},
	})
}

func fenceEndsWhenTheKeySpaceLongestClaimHasExpired(t *testing.T) {
	for _, tc := range []struct {
		name string
		// life is the work's lifetime: a token's TTL, or an idempotency
		// key's window (its lease is shorter).
		life time.Duration
		// record claims through AcquireRecord and ConfirmRecord
		// (idempotency keys) instead of Claim (tokens).
		record bool
		loss   func(t *testing.T, srv *server, c *redis.Client)
	}{
		{"tokens, a restart without persistence", 2 * time.Second, false, func(t *testing.T, srv *server, c *redis.Client) { srv.restart(syscall.SIGKILL) }},
		{"tokens, FLUSHALL", 2 * time.Second, false, func(t *testing.T, srv *server, c *redis.Client) {
			must(t, c.FlushAll(context.Background()).Err())
		}},
		{"idempotency keys, a restart without persistence", 3 * time.Second, true, func(t *testing.T, srv *server, c *redis.Client) { srv.restart(syscall.SIGKILL) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			c := srv.client()
			opts := lifetimeOpts("life:", 0)
			s := provisioned(t, c, opts)
			if s.Horizon() != DefaultHorizon {
				t.Fatalf("Horizon %v; the test is of the default %v", s.Horizon(), DefaultHorizon)
			}
			ctx := context.Background()
			before := claimedBefore{}
			for i := range 50 {
				id := fmt.Sprintf("id-%d", i)
				until := time.Now().Add(tc.life)
				if tc.record {
					rec, err := s.AcquireRecord(ctx, id, time.Second, []byte("fingerprint-of-the-request-0123"))
					if err != nil || rec.State != replay.LeaseAcquired {
						t.Fatalf("AcquireRecord: %+v, %v", rec, err)
					}
					must(t, s.ConfirmRecord(ctx, id, rec.Token, until, []byte("fingerprint-of-the-request-0123"), []byte("response")))
				} else if first, err := claim(ctx, s, id, until); !first || err != nil {
					t.Fatalf("Claim: %v, %v", first, err)
				}
				before[id] = until
			}
			if got, want := s.Lifetime(), s.lifetimeOf(tc.life); got != want {
				t.Fatalf("Lifetime() = %v; want %v (the work's %v with its headroom)", got, want, tc.life)
			}
			lost := time.Now()
			tc.loss(t, srv, c)
			until := fenceEnd(t, s, "fresh")
			if until.Before(before.latest()) {
				t.Fatalf("fence ends at %v, before the last claim made before the loss expires (%v)", until, before.latest())
			}
			if limit := lost.Add(s.Lifetime() + time.Second); until.After(limit) {
				t.Fatalf("fence ends %v after the loss; want at most the key space's lifetime %v (not the Horizon %v)", until.Sub(lost), s.Lifetime(), s.Horizon())
			}
			// Claimed again at once, during the fence and (unattended:
			// nobody reopens) after it.
			if n := before.acceptedTwice(t, s, tc.life, s.Lifetime()); n != 0 {
				t.Fatalf("%d of %d IDs accepted twice", n, len(before))
			}
			t.Logf("fence lasted %v after the loss for work of %v (Horizon %v)", until.Sub(lost).Round(time.Millisecond), tc.life, s.Horizon())
		})
	}
}

func twoApplicationsOnOneKeySpaceTheLongerLifetimeWins(t *testing.T) {
	for _, tc := range []struct {
		name string
		// recheck is the short-lived application's RecheckInterval: 1 s
		// reads the long one's record before the loss; an hour never does,
		// so its fence is lengthened by the long one's next claim.
		recheck time.Duration
	}{
		{"the short application read the record", 100 * time.Millisecond},
		{"the long application lengthens the short fence", time.Hour},
	} {
		// The long claims last 8 s: the second case needs the short
		// fence, begun after the restart (seconds on a loaded machine),
		// to end before they do.
		t.Run(tc.name, func(t *testing.T) { twoApplications(t, tc.recheck, 0, 8*time.Second) })
	}
}

// recordOutlastingAShorterHorizonStillFences: two applications on one
// key space, the short one's Horizon sized to its own work (3 s), the
// long one's claims recorded for longer (8 s); the short one has read the
// record when Redis restarts without persistence, and meets the loss on
// every shard while the long one is idle: its fence lasts the record's
// lifetime, not its own Horizon, and none of the long one's claims is
// accepted again.
func recordOutlastingAShorterHorizonStillFences(t *testing.T) {
	twoApplications(t, 50*time.Millisecond, 3*time.Second, 8*time.Second)
}

// twoApplications runs a short application (RecheckInterval recheck,
// Horizon horizon, 0 for the default) and a long one claiming for life
// on one key space through a restart without persistence: no fence ends
// before the long one's claims expire, the short one's too once it read
// the record, and none of them is accepted again.
func twoApplications(t *testing.T, recheck, horizon, life time.Duration) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	ctx := context.Background()
	shortOpts := lifetimeOpts("two:", recheck)
	shortOpts.Horizon = horizon
	short := provisioned(t, c, shortOpts)
	long := closing(t, mustNew(t, c, lifetimeOpts("two:", time.Hour)))
	if first, err := claim(ctx, short, "short-0", time.Now().Add(time.Second)); !first || err != nil {
		t.Fatalf("short claim: %v, %v", first, err)
	}
	before := claimMany(t, long, "long-", 20, life)
	if recheck < time.Second {
		waitFor(t, 5*time.Second, "the short application to read the long one's record", func() bool {
			claim(ctx, short, "short-poll", time.Now().Add(time.Second)) // a call runs the due check
			return short.Lifetime() >= long.Lifetime()
		})
		if short.Lifetime() != long.Lifetime() {
			t.Fatalf("short application (Horizon %v) knows %v; want the record's %v", short.Horizon(), short.Lifetime(), long.Lifetime())
		}
	} else if short.Lifetime() >= long.Lifetime() {
		t.Fatalf("short application knows %v before the loss; the case needs it shorter than %v", short.Lifetime(), long.Lifetime())
	}
	srv.restart(syscall.SIGKILL)
	// The short application meets the loss first on every shard.
	meetEveryShard(short)
	// Every shard's loss was found by now: a restart's own length
	// (seconds on a loaded machine) is not the fence's.
	found := time.Now()
	shortEnd := fenceEnd(t, short, "long-0")
	if recheck >= time.Second && !shortEnd.Before(before.latest()) {
		t.Fatalf("the short application's fence ends at %v; the case needs it before %v", shortEnd, before.latest())
	}
	if recheck < time.Second && shortEnd.Before(before.latest()) {
		t.Fatalf("the short application's fence ends at %v, before the long application's claims expire (%v)", shortEnd, before.latest())
	}
	until := fenceEnd(t, long, "long-0")
	if until.Before(before.latest()) {
		t.Fatalf("fence ends at %v, before the long application's claims expire (%v)", until, before.latest())
	}
	// Each store's check lengthens a running fence to its raise time plus
	// the lifetime it knows, so the short application may read the fence
	// after a check lengthened it by the milliseconds between two raises:
	// never shorter than the long one's, never past the longer lifetime.
	again := fenceEnd(t, short, "long-0")
	if again.Before(until) {
		t.Fatalf("the short application sees the fence end at %v; want at least the longer %v", again, until)
	}
	if limit := found.Add(long.Lifetime() + time.Second); again.After(limit) {
		t.Fatalf("fence ends %v after the loss was found; want at most the longer lifetime %v", again.Sub(found), long.Lifetime())
	}
	if n := before.acceptedTwice(t, short, time.Second, long.Lifetime()); n != 0 {
		t.Fatalf("%d of %d IDs accepted twice", n, len(before))
	}
}

// lossBeforeTheShortOneReadTheRecordFencesForTheLonger: two applications
// on one key space, a short one (claims of 1 s, lifetime 2 s; no periodic
// check, so it has not read the record before the loss) and a long one
// (claims of 8 or 20 s, then idle), and a loss right after both opened
// (FLUSHALL, or a restart without persistence: the record is lost with
// the data), which the short one meets first on every shard and fences
// for its own lifetime, its check's baseline then consuming the evidence
// for the long one: the long one's next check lengthens every fence to
// its lifetime (lengthenFences), so the short one refuses the long one's
// IDs after its own fence would have ended, accepts none of them twice,
// and serves again once the longer fence ends (issue 105: 300 of 300
// accepted twice after FLUSHALL, 5 of 300 after a restart).
func lossBeforeTheShortOneReadTheRecordFencesForTheLonger(t *testing.T) {
	for _, tc := range []struct {
		name string
		loss func(t *testing.T, srv *server, c *redis.Client)
		// life is the long application's claims': past the loss, its
		// meeting and the short fence (a restart takes seconds on a
		// loaded machine).
		life time.Duration
	}{
		{"FLUSHALL", func(t *testing.T, srv *server, c *redis.Client) { must(t, c.FlushAll(context.Background()).Err()) }, 8 * time.Second},
		{"restart without persistence", func(t *testing.T, srv *server, c *redis.Client) { srv.restart(syscall.SIGKILL) }, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			c := srv.client()
			ctx := context.Background()
			short := provisioned(t, c, lifetimeOpts("mix:", time.Hour))
			if first, err := claim(ctx, short, "short-0", time.Now().Add(time.Second)); !first || err != nil {
				t.Fatalf("short claim: %v, %v", first, err)
			}
			long := closing(t, mustNew(t, c, lifetimeOpts("mix:", time.Hour)))
			before := claimMany(t, long, "long-", 20, tc.life)
			if short.Lifetime() >= long.Lifetime() {
				t.Fatalf("the short application knows %v before the loss; the case needs it shorter than %v", short.Lifetime(), long.Lifetime())
			}
			tc.loss(t, srv, c)
			meetEveryShard(short)
			found := time.Now()
			shortEnd := found.Add(short.Lifetime())
			// The short application's check, which its first claim after
			// the loss asked for, fenced and took the server's counters as
			// the key space's baseline; then the long application's next
			// check (due within its RecheckInterval) finds that baseline,
			// so the loss is no evidence to it, and lengthens every
			// shard's fence past its claims.
			waitChecks(t, short)
			if err := long.checkServer(ctx); err != nil {
				t.Fatalf("the long application's check: %v", err)
			}
			waitFor(t, 10*time.Second, "every fence to outlast the long application's claims", func() bool {
				for _, m := range short.tags {
					v, err := c.Get(ctx, m).Result()
					end, perr := strconv.ParseInt(strings.TrimPrefix(v, "F"), 10, 64)
					if err != nil || !strings.HasPrefix(v, "F") || perr != nil || time.UnixMilli(end).Before(before.latest()) {
						return false
					}
				}
				return true
			})
			// Inside the longer fence, after the short one's own would
			// have ended: refused.
			waitUntil(shortEnd)
			if !time.Now().Before(before.latest().Add(-time.Second)) {
				t.Fatalf("past the short fence only %v before the long claims expire; the machine was too slow for the case", time.Until(before.latest()))
			}
			for id := range before {
				first, err := claim(ctx, short, id, time.Now().Add(time.Second))
				if first || !errors.Is(err, ErrFenced) {
					t.Fatalf("claim of %s %v after the loss (the short lifetime %v) = %v, %v; want ErrFenced until the long one's %v", id, time.Since(found).Round(time.Millisecond), short.Lifetime(), first, err, long.Lifetime())
				}
			}
			if n := before.acceptedTwice(t, short, time.Second, long.Lifetime()); n != 0 {
				t.Fatalf("%d of %d IDs accepted twice", n, len(before))
			}
			// Served again once the longer fence ended (acceptedTwice
			// waited it out): a fresh ID on every shard.
			for i := range Shards {
				var id string
				for j := 0; ; j++ {
					if id = fmt.Sprintf("fresh-%d", j); shardOf(id) == i {
						break
					}
				}
				if first, err := claim(ctx, short, id, time.Now().Add(time.Second)); !first || err != nil {
					t.Fatalf("fresh claim on shard %d after the longer fence = %v, %v; want served", i, first, err)
				}
			}
			t.Logf("the short application refused for %v after the loss (its own lifetime %v, the long one's %v)", time.Since(found).Round(time.Millisecond), short.Lifetime(), long.Lifetime())
		})
	}
}

func lifetimeIsRecordedOnlyWhenItGrows(t *testing.T) {
	t.Parallel()
	c := newTestClient(t)
	var evals atomic.Int64
	counting := clientFunc(func(ctx context.Context, args ...any) *redis.Cmd {
		if len(args) > 1 && args[0] == "EVAL" && args[1] == lifetimeScript {
			evals.Add(1)
		}
		return c.Do(ctx, args...)
	})
	prefix := uniquePrefix(t, c)
	s := provisioned(t, counting, lifetimeOpts(prefix, 0))
	ctx := context.Background()
	if s.Lifetime() != s.Horizon() {
		t.Fatalf("Lifetime() before any claim = %v; want the Horizon", s.Lifetime())
	}
	steps := []struct {
		name  string
		step  func() error
		evals int64
		life  time.Duration
	}{
		{"first one-minute claim records", func() error {
			_, err := claim(ctx, s, "a", time.Now().Add(time.Minute))
			return err
		}, 1, s.lifetimeOf(time.Minute)},
		{"more one-minute claims record nothing", func() error {
			for i := range 100 {
				if _, err := claim(ctx, s, fmt.Sprint("b", i), time.Now().Add(time.Minute)); err != nil {
					return err
				}
			}
			return nil
		}, 1, s.lifetimeOf(time.Minute)},
		{"a shorter lease records nothing", func() error {
			_, err := s.AcquireLease(ctx, "c", 10*time.Second)
			return err
		}, 1, s.lifetimeOf(time.Minute)},
		{"a ten-minute claim records again", func() error {
			_, err := claim(ctx, s, "d", time.Now().Add(10*time.Minute))
			return err
		}, 2, s.lifetimeOf(10 * time.Minute)},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			must(t, st.step())
			if n := evals.Load(); n != st.evals {
				t.Fatalf("%d lifetime records; want %d", n, st.evals)
			}
			if s.Lifetime() != st.life {
				t.Fatalf("Lifetime() = %v; want %v", s.Lifetime(), st.life)
			}
			if got, err := s.readLifetime(ctx); err != nil || got != st.life {
				t.Fatalf("recorded %v, %v; want %v", got, err, st.life)
			}
		})
	}
}

func stepPastTheKeySpaceLifetimeByRedisClockIsRefused(t *testing.T) {
	t.Parallel()
	c := newTestClient(t)
	prefix := uniquePrefix(t, c)
	ahead := 10 * time.Second
	opts := lifetimeOpts(prefix, 0)
	opts.Now = func() time.Time { return time.Now().Add(ahead) }
	s := provisioned(t, c, opts)
	ctx := context.Background()
	// By this instance's clock the claim lives 1 s; by Redis's 11 s, past
	// the 2 s recorded: the fence would end before it expires.
	first, err := claim(ctx, s, "ahead", opts.Now().Add(time.Second))
	if first || !errors.Is(err, ErrInvalidClaim) {
		t.Fatalf("first = %v, err = %v; want ErrInvalidClaim", first, err)
	}
	wantNoKeys(t, c, "the refused claim left an entry", s.key("ahead"))
}

func recordedLifetimeHoldingAnUnexpectedValueIsRefused(t *testing.T) {
	t.Parallel()
	c := newTestClient(t)
	for _, v := range []string{"x", "-5", "0", "", "99999999999999999999", "31536000001"} {
		t.Run(fmt.Sprintf("%q", v), func(t *testing.T) {
			prefix := uniquePrefix(t, c)
			s := provisioned(t, c, lifetimeOpts(prefix, 0))
			must(t, c.Set(context.Background(), s.lifetimeKey(), v, 0).Err())
			_, err := s.readLifetime(context.Background())
			wantErr(t, err, ErrUnavailable, "readLifetime")
			s.learnRecordedLifetime(context.Background())
			if s.Lifetime() != s.Horizon() {
				t.Fatalf("learned %v from a bad record; want nothing (the Horizon)", s.Lifetime())
			}
			if st, err := s.Status(context.Background()); err != nil || st.Lifetime != 0 {
				t.Fatalf("Status: Lifetime %v, %v; want 0 (unknown) and the rest of the status", st.Lifetime, err)
			}
		})
	}
}

func statusShowsWhenReopeningAcceptsNothingTwice(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	ctx := context.Background()
	s := provisioned(t, c, lifetimeOpts("status-life:", 100*time.Millisecond))
	before := claimMany(t, s, "id-", 20, 3*time.Second)
	lost := time.Now()
	srv.restart(syscall.SIGKILL)
	fenceEnd(t, s, "fresh")
	cases := []struct {
		name  string
		check func(st Status) error
	}{
		{"the lifetime, recorded again after the restart lost it", func(st Status) error {
			if st.Lifetime != s.Lifetime() {
				return fmt.Errorf("Lifetime %v; want the store's %v", st.Lifetime, s.Lifetime())
			}
			return nil
		}},
		{"reopening is safe once every claim before the loss has expired", func(st Status) error {
			if st.ReopenSafeAt.Before(before.latest()) || st.ReopenSafeAt.Before(st.FencedUntil) {
				return fmt.Errorf("ReopenSafeAt %v; want after the last claim's expiry %v and the fence's end %v", st.ReopenSafeAt, before.latest(), st.FencedUntil)
			}
			if limit := lost.Add(s.Lifetime() + time.Second); st.ReopenSafeAt.After(limit) {
				return fmt.Errorf("ReopenSafeAt %v after the loss; want within the lifetime %v", st.ReopenSafeAt.Sub(lost), s.Lifetime())
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				claim(ctx, s, "poll", time.Now().Add(time.Second)) // a call runs the due check
				var st Status
				if st, err = s.Status(ctx); err == nil {
					if err = tc.check(st); err == nil {
						return
					}
				}
			}
			t.Fatal(err)
		})
	}
}

func FuzzParseLifetime(f *testing.F) {
	for _, v := range []string{"76000", "0", "-1", "x", "", "31536000000", "31536000001", "9223372036854775807"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		l, ok := parseLifetime(v)
		if ok && (l <= 0 || l > time.Duration(maxLifetimeMs)*time.Millisecond) {
			t.Fatalf("parseLifetime(%q) = %v, true; want a positive lifetime of at most a year", v, l)
		}
		if !ok && l != 0 {
			t.Fatalf("parseLifetime(%q) refused with %v; want 0", v, l)
		}
		if _, ok := parseLifetime([]byte(v)); ok {
			t.Fatalf("parseLifetime of a non-string accepted")
		}
	})
}

// lossFence is what a loss cost a key space: when its last entry made
// before the loss would have expired (by Redis's PTTL), when the loss
// happened, when the store met it (the fence is raised in between), the
// refusal's end (RetryAt) and Status.ReopenSafeAt.
type lossFence struct {
	latest, lost, met, until, safe time.Time
}

// flushAndMeet reads the latest expiry of s's entries, loses them with
// FLUSHALL and returns what the fence that follows costs, without waiting
// for it to end.
func flushAndMeet(t *testing.T, s *Store, c *redis.Client) lossFence {
	t.Helper()
	ctx := context.Background()
	var f lossFence
	keys, err := c.Keys(ctx, s.Prefix()+"*").Result()
	must(t, err)
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		must(t, err)
		if at := time.Now().Add(ttl); ttl > 0 && at.After(f.latest) {
			f.latest = at
		}
	}
	if f.latest.IsZero() {
		t.Fatal("no entry with an expiry before the loss")
	}
	f.lost = time.Now()
	must(t, c.FlushAll(ctx).Err())
	f.until = fenceEnd(t, s, "fresh")
	f.met = time.Now()
	st := mustStatus(t, s)
	f.safe = st.ReopenSafeAt
	if f.safe.IsZero() {
		t.Fatalf("Status of the fenced key space has no ReopenSafeAt: %+v", st)
	}
	return f
}

// check fails the test unless the fence outlasts every entry made before
// the loss and both its end and ReopenSafeAt come at most stated after the
// loss, plus the time the store took to meet it (the fence is raised when
// the loss is met, and lasts from then).
func (f lossFence) check(t *testing.T, stated time.Duration) {
	t.Helper()
	if f.until.Before(f.latest) {
		t.Fatalf("fence ends at %v, before the last entry made before the loss expires (%v)", f.until, f.latest)
	}
	limit := f.lost.Add(stated + f.met.Sub(f.lost))
	for _, end := range []struct {
		name string
		at   time.Time
	}{{"RetryAt", f.until}, {"Status.ReopenSafeAt", f.safe}} {
		if end.at.After(limit) {
			t.Fatalf("%s is %v after the loss; want at most the stated %v (+%v to meet the loss)", end.name, end.at.Sub(f.lost), stated, f.met.Sub(f.lost))
		}
	}
	t.Logf("fenced %v after the loss (ReopenSafeAt %v); stated at most %v; the last entry expired %v after it",
		f.until.Sub(f.lost).Round(time.Millisecond), f.safe.Sub(f.lost).Round(time.Millisecond), stated, f.latest.Sub(f.lost).Round(time.Millisecond))
}

// A key space of 1-minute work under the default Options (Horizon 25 h,
// MaxSkew replay.SkewMargin) ends its fence unattended within the figures
// docs/fleet-reference.md states ("What a fence costs"): at most 2 min 16 s
// for Claims with an until 1 minute ahead (1 min + a quarter + MaxSkew,
// rounded up to a whole second: the until is sent rounded up to the
// millisecond, so the claim may be 60 001 ms), at most 3 min 31 s for
// one-time tokens with a 1-minute TTL (their claim reaches 1 min past the
// expiry: 2 min + a quarter + MaxSkew, rounded up); not the Horizon. It does not wait for the fence to end (the lifetime tests of
// seconds do that).
func oneMinuteWorkIsFencedForMinutes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stated time.Duration
		work   func(t *testing.T, s *Store)
	}{
		{"claims of 1 minute", 2*time.Minute + 16*time.Second, func(t *testing.T, s *Store) {
			claimMany(t, s, "id-", 20, time.Minute)
		}},
		{"one-time tokens with a 1-minute TTL", 3*time.Minute + 31*time.Second, func(t *testing.T, s *Store) {
			kr, err := ctoken.NewKeyring(ctoken.RandomKey())
			must(t, err)
			issuer, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: kr, Purpose: "bootstrap", TTL: time.Minute, Replay: s})
			must(t, err)
			for i := range 20 {
				tok, err := issuer.Mint(map[string]string{"run": fmt.Sprint(i)})
				must(t, err)
				_, err = issuer.Redeem(context.Background(), tok, map[string]string{"run": fmt.Sprint(i)})
				wantErr(t, err, nil, "Redeem")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newServer(t).client()
			s := provisioned(t, c, Options{Prefix: "minute:", Logger: quietLogger()})
			if s.Horizon() != DefaultHorizon || s.maxSkew != replay.SkewMargin {
				t.Fatalf("Horizon %v, MaxSkew %v; the test is of the defaults", s.Horizon(), s.maxSkew)
			}
			tc.work(t, s)
			flushAndMeet(t, s, c).check(t, tc.stated)
		})
	}
}

// A key space of Idempotency-Key records, behind idempotency.New with a
// Window and a Lease, under the default Options: its fence ends no later
// than the loss + Window + Lease + the headroom docs/fleet-reference.md
// states (a quarter, plus MaxSkew, rounded up to a second), not the
// Horizon.
func idempotencyKeysAreFencedForTheirWindowAndLease(t *testing.T) {
	const window, lease = 2 * time.Minute, 10 * time.Second
	c := newServer(t).client()
	s := provisioned(t, c, Options{Prefix: "idem:", Logger: quietLogger()})
	kr, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	mw, err := idempotency.New(idempotency.Config{
		Store: s, Keys: kr, Window: window, Lease: lease,
		Caller: func(*http.Request) (string, error) { return "merchant-1", nil },
	})
	must(t, err)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	}))
	for i := range 10 {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", fmt.Sprintf(`"order-%d"`, i))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
		}
	}
	d := window + lease
	stated := d + d/4 + s.maxSkew
	if r := stated % time.Second; r != 0 {
		stated += time.Second - r
	}
	flushAndMeet(t, s, c).check(t, stated)
}
