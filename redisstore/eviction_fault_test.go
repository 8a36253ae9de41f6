//go:build fault

package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// evictPolicies are every maxmemory-policy that evicts.
var evictPolicies = []string{"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}

// evictOld is how many IDs each eviction run claims before the change.
const evictOld = 3000

// windowReport is what claims saw between a change on the server and the
// store's refusal.
type windowReport struct {
	mu          sync.Mutex
	acceptedNew []string      // new IDs reported first (checked again afterwards)
	doubles     int           // old IDs reported first again: accepted twice inside the window
	lateFirst   int           // claims reported first after the worker saw the store refuse
	refusedAt   time.Duration // first refusal after the change (0: none), by the store or a shard's fence
	storeAt     time.Duration // first refusal by the store's check (evidence of loss, or ErrConfig)
	countersAt  time.Duration // first refusal by the loss counters (a script found evicted_keys moved)
	lossAt      time.Duration // when the ledger's loss entry was written
	refusals    int
	otherErrs   map[string]int
	changedAt   time.Time
}

// claimThroughChange runs workers that claim new IDs and claim old ones
// again, from before the change until limit after it; change runs the
// change and returns when it is done.
func claimThroughChange(t *testing.T, s *Store, old []string, change func(), limit time.Duration) *windowReport {
	t.Helper()
	r := &windowReport{otherErrs: map[string]int{}}
	var changedAt atomic.Int64
	// note sets *d, unless set, to the time since the change (once made).
	note := func(d *time.Duration) {
		if at := changedAt.Load(); at != 0 && *d == 0 {
			*d = time.Duration(time.Now().UnixNano() - at)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	until := time.Now().Add(10 * time.Minute)
	for w := range 4 {
		spawn(&wg, func() {
			ctx := context.Background()
			refused := false
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, id := range []string{fmt.Sprintf("new-%d-%d", w, i), old[rand.IntN(len(old))]} {
					first, err := s.Claim(ctx, id, until)
					isNew := strings.HasPrefix(id, "new-")
					r.mu.Lock()
					switch {
					case Reason(err) == whyCountersMoved:
						// The script found the loss counters moved since
						// the last check: the answer is refused.
						note(&r.refusedAt)
						note(&r.countersAt)
						refused = true
						r.refusals++
					case errors.Is(err, ErrFenced) || errors.Is(err, ErrConfig):
						note(&r.refusedAt)
						if errors.Is(err, ErrConfig) || Reason(err) == whyLossSeen {
							note(&r.storeAt)
							refused = true
						}
						r.refusals++
					case err != nil:
						r.otherErrs[Reason(err)+" "+strings.SplitN(err.Error(), ":", 3)[len(strings.SplitN(err.Error(), ":", 3))-1]]++
					case first && refused:
						r.lateFirst++
						if isNew {
							r.acceptedNew = append(r.acceptedNew, id)
						}
					case first && isNew:
						r.acceptedNew = append(r.acceptedNew, id)
					case first:
						r.doubles++
					}
					r.mu.Unlock()
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	r.changedAt = time.Now()
	changedAt.Store(r.changedAt.UnixNano())
	change()
	time.Sleep(limit)
	close(stop)
	wg.Wait()
	return r
}

// noteLossAt sets r.lossAt from the ledger's first loss entry.
func (r *windowReport) noteLossAt(t *testing.T, s *Store) {
	t.Helper()
	l := mustLedger(t, s)
	for _, e := range l {
		if e.Kind == ledgerLoss {
			r.lossAt = e.At.Sub(r.changedAt)
			return
		}
	}
}

// claimOld claims n fresh IDs, every one of which must be first, and
// returns them and their until: when the last of them expires.
func claimOld(t *testing.T, s *Store, n int) ([]string, time.Time) {
	t.Helper()
	ids := make([]string, n)
	until := time.Now().Add(10 * time.Minute)
	for i := range ids {
		ids[i] = "old-" + strconv.Itoa(i)
		wantClaim(t, s, ids[i], until, true)
	}
	return ids, until
}

// replayAfter claims every ID again through a new Store on c (Open, or New
// when Open refuses), and returns how many were accepted twice and how
// many refused; a new ID must be refused too (the key space is fenced).
func replayAfter(t *testing.T, c Client, prefix string, ids []string) (twice, refused int, openErr error) {
	t.Helper()
	ctx := context.Background()
	opts := Options{Prefix: prefix, Logger: quietLogger(), Timeout: idleTimeout}
	s, openErr := Open(ctx, c, opts)
	if openErr != nil {
		if !errors.Is(openErr, ErrFenced) && !errors.Is(openErr, ErrConfig) {
			t.Fatalf("Open after the revert = %v; want it to serve or refuse (ErrFenced, ErrConfig)", openErr)
		}
		s = mustNew(t, c, opts)
	}
	defer s.Close()
	until := time.Now().Add(10 * time.Minute)
	for _, id := range ids {
		first, err := s.Claim(ctx, id, until)
		switch {
		case first:
			twice++
		case errors.Is(err, ErrFenced) || errors.Is(err, ErrConfig):
			refused++
		case err != nil:
			t.Fatalf("claim after the revert: %v", err)
		}
	}
	if first, err := s.Claim(ctx, "brand-new-after-revert", until); first || (!errors.Is(err, ErrFenced) && !errors.Is(err, ErrConfig)) {
		t.Fatalf("claim of a new ID after the revert = %v, %v (Open = %v; %d of %d IDs accepted twice); want refused: the key space lost data", first, err, openErr, twice, len(ids))
	}
	return twice, refused, openErr
}

// Eviction switched on at run time (every evicting policy, maxmemory
// below the data) on a server the store opened with noeviction: the
// loss counters each script reads refuse the first claim answered after
// the first eviction (or the script finds its shard's marker evicted, or
// the store's check comes first), the store then checks the server and
// fences the key space; no ID is accepted twice, neither inside the window between the
// change and the check nor, after the revert, by a new Store; none is
// reported first after a worker saw the first refusal.
func TestEvictionAtRunTime(t *testing.T) {
	for _, policy := range evictPolicies {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			c := srv.client()
			var ev events
			prefix := "evict:"
			s := provisioned(t, c, Options{Prefix: prefix, Logger: quietLogger(), Observer: ev.observe})
			old, _ := claimOld(t, s, evictOld)
			r := claimThroughChange(t, s, old, func() { evictOn(t, c, policy, 2) }, 2500*time.Millisecond)
			evicted := evictOff(t, c)
			recheckAll(t, s) // a fence an OOM refused is written now
			r.noteLossAt(t, s)
			t.Logf("%s: %d keys evicted; first refusal %v after the change (the counters' %v; the store's check %v), the key space fenced %v after it; inside the window %d old IDs accepted twice, %d new accepted; %d refusals, other errors %v",
				policy, evicted, r.refusedAt.Round(time.Microsecond), r.countersAt.Round(time.Microsecond), r.storeAt.Round(time.Millisecond), r.lossAt.Round(time.Millisecond), r.doubles, len(r.acceptedNew), r.refusals, r.otherErrs)
			if evicted == 0 {
				t.Fatal("nothing was evicted: the test did not test eviction")
			}
			if r.doubles != 0 {
				t.Fatalf("%d old IDs accepted twice between the change and the store's check", r.doubles)
			}
			checkWindow(t, policy, s, c, r, &ev, old)
		})
	}
}

// checkWindow checks a claimThroughChange run through what: the store
// acted within about RecheckInterval (1 s), no claim was reported first
// after its worker saw a refusal, every shard was fenced, the ledger notes
// the loss, and a new Store (replayAfter) accepts none of old and the new
// IDs accepted inside the window twice.
func checkWindow(t *testing.T, what string, s *Store, c Client, r *windowReport, ev *events, old []string) {
	t.Helper()
	// The store's check acted when its first refusal was seen, else when
	// it wrote the fence's ledger entry.
	if d := cmp.Or(r.storeAt, r.lossAt); d <= 0 || d > 3*time.Second {
		t.Fatalf("the store acted %v after %s; want within about RecheckInterval (1 s)", d, what)
	}
	if r.lateFirst != 0 {
		t.Fatalf("%d claims reported first after their worker saw the store refuse", r.lateFirst)
	}
	if n := ev.count(replay.EventFenceRaised); n < Shards {
		t.Fatalf("%d replay.EventFenceRaised; want every shard (%d)", n, Shards)
	}
	if !lossNoted(t, s) {
		t.Fatal("no loss entry in the ledger")
	}
	twice, refused, openErr := replayAfter(t, c, s.Prefix(), append(old, r.acceptedNew...))
	t.Logf("%s: then Open = %v; %d of %d IDs refused, %d accepted twice", what, openErr, refused, len(old)+len(r.acceptedNew), twice)
	if twice != 0 {
		t.Fatalf("%d IDs accepted twice after %s", twice, what)
	}
}

// recheckAll runs the periodic recheck at once, whatever the claim that
// starts it answers, and waits until no check and no background release
// runs (waitChecks).
func recheckAll(t *testing.T, s *Store) {
	t.Helper()
	s.lastCheck.Store(0)
	s.Claim(context.Background(), fmt.Sprint("recheck-", time.Now().UnixNano()), time.Now().Add(time.Minute))
	waitChecks(t, s)
}

// evictOn switches eviction on at c's server: policy, with maxmemory the
// memory in use less the data set divided by part (1: all of it). It
// reports a refused setting with t.Error, so that it can run while
// workers claim (claimThroughChange).
func evictOn(t *testing.T, c *redis.Client, policy string, part int64) {
	t.Helper()
	used, data := infoInt(t, c, "memory", "used_memory"), infoInt(t, c, "memory", "used_memory_dataset")
	if err := c.ConfigSet(context.Background(), "maxmemory-policy", policy).Err(); err != nil {
		t.Error(err)
	}
	if err := c.ConfigSet(context.Background(), "maxmemory", strconv.FormatInt(used-data/part, 10)).Err(); err != nil {
		t.Error(err)
	}
}

// evictOff switches eviction off at c's server again (maxmemory 0,
// noeviction) and returns how many keys it had evicted (evicted_keys).
func evictOff(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	evicted := infoInt(t, c, "stats", "evicted_keys")
	must(t, c.ConfigSet(context.Background(), "maxmemory", "0").Err())
	must(t, c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err())
	return evicted
}

// SWAPDB, FLUSHALL from another client and CONFIG RESETSTAT (after a flush
// of another database the store's baseline counted) on a server the store
// watches are evidence of loss: the store refuses, fences every shard and
// notes the loss; none of the IDs claimed before is accepted twice by a
// new Store; and a key space an operator reopens afterwards (markers
// rewritten to "O") is served again by the same Store: the evidence was
// consumed by the fence.
func TestLossTheServerReportsIsFenced(t *testing.T) {
	tests := []struct {
		name   string
		before []any // run before Open
		change []any // run by another client while the store serves
	}{
		{"SWAPDB", nil, []any{"SWAPDB", "0", "1"}},
		{"FLUSHALL", nil, []any{"FLUSHALL"}},
		{"FLUSHDB", nil, []any{"FLUSHDB"}},
		{"CONFIG RESETSTAT", []any{"FLUSHDB"}, []any{"CONFIG", "RESETSTAT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			c := srv.client()
			ctx := context.Background()
			var ev events
			prefix := "lost:"
			opts := Options{Prefix: prefix, Logger: quietLogger(), Observer: ev.observe}
			s := provisioned(t, c, opts)
			if tt.before != nil {
				// Counters the store's baseline holds: a flush of another
				// database, before a Store that knows no baseline yet opens
				// (Provision refuses once a flush ran, and a Store that saw
				// the server before would call this flush a loss).
				other := redis.NewClient(&redis.Options{Addr: srv.addr(), DB: 1})
				defer other.Close()
				must(t, other.Do(ctx, tt.before...).Err())
				s.Close()
				must(t, c.Del(ctx, s.serversKey()).Err())
				s = closing(t, mustOpen(t, c, opts))
			}
			old, _ := claimOld(t, s, 500)
			r := claimThroughChange(t, s, old, func() {
				if err := srv.client().Do(ctx, tt.change...).Err(); err != nil {
					t.Error(err)
				}
			}, 1500*time.Millisecond)
			waitChecks(t, s)
			r.noteLossAt(t, s)
			t.Logf("%s: first refusal %v after it, the store's %v, the key space fenced %v after it; inside the window %d old IDs accepted twice, %d new accepted; other errors %v",
				tt.name, r.refusedAt.Round(time.Millisecond), r.storeAt.Round(time.Millisecond), r.lossAt.Round(time.Millisecond), r.doubles, len(r.acceptedNew), r.otherErrs)
			checkWindow(t, tt.name, s, c, r, &ev, old)
			// An operator reopens the key space (what Reopen writes): the
			// same Store serves again, and rechecks do not fence again.
			for _, m := range s.tags {
				must(t, c.Set(ctx, m, "O", 0).Err())
			}
			raised := ev.count(replay.EventFenceRaised)
			recheckAll(t, s)
			recheckAll(t, s)
			wantClaim(t, s, "after-reopen", time.Now().Add(time.Minute), true)
			if n := ev.count(replay.EventFenceRaised); n != raised {
				t.Fatalf("%d more fences after the reopen: the evidence was not consumed", n-raised)
			}
		})
	}
}

// evictWhileIdle makes c's server evict keys while no store calls it
// (evictOn with policy and part, another application's writes, evictOff),
// and returns how many keys were evicted. The usual policy is volatile-lru
// (claims expire, the markers, ledger and baselines do not) with maxmemory
// under the whole data set (part 1): every key with a lifetime is evicted,
// whatever its age: on a Cluster master older key spaces' keys would be
// evicted first, and half the data set could leave every claim of the
// test's (TestCluster once found none evicted).
func evictWhileIdle(t *testing.T, c *redis.Client, policy string, part int64) int64 {
	t.Helper()
	evictOn(t, c, policy, part)
	for i := range 2000 { // another application's writes, which make Redis evict
		c.Set(context.Background(), "other:"+strconv.Itoa(i), strings.Repeat("x", 64), 0)
	}
	evicted := evictOff(t, c)
	if evicted == 0 {
		t.Fatal("nothing was evicted: the test did not test eviction")
	}
	return evicted
}

// Eviction switched on while the store is idle or the app is down, then
// reverted, then CONFIG RESETSTAT: only the reset's witnesses show the
// loss (resetWitnesses), and the store's next recheck, or a new Open,
// fences the key space: none of the IDs claimed before is accepted twice
// (issue 56). TestCluster and TestResetStatAfterABurst run it on a Cluster
// and after bursts.
func TestEvictionWhileIdleThenResetStat(t *testing.T) {
	tests := []struct {
		name    string
		appDown bool // the app is down during the change: a new Open judges it
		// baselines: <prefix>servers and the ledger are evicted with the
		// claims, as an allkeys policy can (issue 81).
		baselines bool
	}{
		{"the store idle, then its recheck", false, false},
		{"the app down, then a new Open", true, false},
		{"the app down, the baselines evicted too, then a new Open", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t)
			c := srv.client()
			s := provisioned(t, c, Options{Prefix: "reset:", Logger: quietLogger(), Timeout: idleTimeout})
			old, expiry := claimOld(t, s, evictOld)
			recheckAll(t, s) // the baseline holds every claim's commands
			if tt.appDown {
				s.Close()
			}
			if tt.baselines {
				evictableBaselines(t, c, s.Prefix())
			}
			evicted := evictWhileIdleThenResetStat(t, c)
			if tt.baselines {
				if n := c.Exists(context.Background(), s.serversKey(), s.ledgerKey()).Val(); n != 0 {
					t.Fatalf("%d of the baselines and the ledger left; want both evicted", n)
				}
			}
			t.Logf("%d keys evicted", evicted)
			resetStatFenced(t, s, c, old, tt.appDown, expiry, time.Now())
		})
	}
}

// Eviction while the store is idle, then CONFIG RESETSTAT, then more
// commands than the server had run before the reset (another client's
// PINGs), on a young server and within one RecheckInterval (an hour
// here: no check runs unless a script asks for one): evicted_keys is back
// at its baseline and total_commands_processed above it, so only the key
// space's own witness (INFO errorstats, see readWitness) shows the reset.
// The first claim of an evicted ID is refused by its script
// (whyCountersMoved), the check that refusal starts fences, and no ID is
// accepted twice (issue 105: 4 732 of 15 000 and 6 000 of 6 000 before),
// on redis-server and valkey-server; with another application's store
// (another prefix) checking every 50 ms through the reset and the traffic,
// whose bumps and ROLE calls do not regrow this key space's witness.
func TestEvictionWhileIdleThenResetStatAndMoreCommandsIsRefused(t *testing.T) {
	flavors := []struct{ name, bin string }{{"redis", redisBinary(t, "CTOKEN_REDIS_SERVER", "redis-server")}}
	if bin := valkeyBinary(); bin != "" && bin != flavors[0].bin {
		flavors = append(flavors, struct{ name, bin string }{"valkey", bin})
	}
	for _, fl := range flavors {
		for _, neighbour := range []bool{false, true} {
			name := fl.name
			if neighbour {
				name += ", another application's store checking"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := newServerBin(t, fl.bin)
				c := srv.client()
				ctx := context.Background()
				if neighbour {
					n := provisioned(t, c, Options{Prefix: "neighbour:", Logger: quietLogger(), RecheckInterval: 50 * time.Millisecond})
					wantClaim(t, n, "a", time.Now().Add(time.Minute), true)
				}
				s := provisioned(t, c, Options{Prefix: "young:", Logger: quietLogger(), RecheckInterval: time.Hour, Timeout: idleTimeout})
				old, _ := claimOld(t, s, 500)
				before := infoInt(t, c, "stats", "total_commands_processed")
				evicted := evictWhileIdleThenResetStat(t, c)
				sendTraffic(t, c, 2*before+1000)
				if now := infoInt(t, c, "stats", "total_commands_processed"); now <= before {
					t.Fatalf("total_commands_processed %d after the traffic, %d before the reset; the case needs more", now, before)
				}
				lost := len(old) - countKeys(t, []*redis.Client{c}, s.Prefix()+"{*}:old-*")
				if lost == 0 {
					t.Fatal("no claim was evicted: the test did not test their loss")
				}
				twice, fenced := 0, 0
				var firstRefusal error
				until := time.Now().Add(10 * time.Minute)
				for _, id := range old {
					first, err := s.Claim(ctx, id, until)
					switch {
					case first:
						twice++
					case err != nil && firstRefusal == nil:
						firstRefusal = err
					}
					if errors.Is(err, ErrFenced) {
						fenced++
					}
				}
				t.Logf("%d keys evicted (%d of %d claims); the replay: %d accepted twice, %d fenced, the first refusal %v", evicted, lost, len(old), twice, fenced, firstRefusal)
				if twice != 0 {
					t.Fatalf("%d of %d IDs accepted twice after eviction, CONFIG RESETSTAT and more commands than before", twice, len(old))
				}
				if Reason(firstRefusal) != whyCountersMoved {
					t.Fatalf("the first claim after the reset = %v; want its script's refusal (%q)", firstRefusal, whyCountersMoved)
				}
				waitChecks(t, s)
				if !lossNoted(t, s) {
					t.Fatal("no loss entry in the ledger")
				}
				if first, err := s.Claim(ctx, "brand-new", until); first || !errors.Is(err, ErrFenced) {
					t.Fatalf("a new ID after the check = %v, %v; want ErrFenced (every shard fenced)", first, err)
				}
			})
		}
	}
}

// evictableBaselines gives the key space's baselines (<prefix>servers)
// and ledger a lifetime, so that evictWhileIdle's volatile-lru evicts
// them with the claims and keeps the fence markers: the keys an allkeys
// policy left in issue 81's runs (the markers every claim touches, and
// neither the baselines nor the ledger), every time instead of one run
// in two.
func evictableBaselines(t *testing.T, c redis.Cmdable, prefix string) {
	t.Helper()
	for _, k := range []string{prefix + "servers", prefix + "ledger"} {
		if ok, err := c.PExpire(context.Background(), k, time.Hour).Result(); err != nil || !ok {
			t.Fatalf("PEXPIRE %s = %v, %v; want the key there", k, ok, err)
		}
	}
}

// evictWhileIdleThenResetStat runs evictWhileIdle on c's server, then
// CONFIG RESETSTAT, after which evicted_keys is back at 0, its baseline.
// It returns how many keys were evicted.
func evictWhileIdleThenResetStat(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	evicted := evictWhileIdle(t, c, "volatile-lru", 1)
	must(t, c.ConfigResetStat(context.Background()).Err())
	if after := infoInt(t, c, "stats", "evicted_keys"); after != 0 {
		t.Fatalf("evicted_keys after CONFIG RESETSTAT = %d; want 0, its baseline", after)
	}
	return evicted
}

// resetStatFenced checks s's key space after eviction and CONFIG
// RESETSTAT that left every fence marker in place (only the counters show
// the loss): unless the app was down (s closed), s's next recheck fences
// it, and s refuses every ID of old with ErrFenced; then a new Store on c
// (Open, replayAfter) accepts none of them twice. Every shard is fenced
// afterwards, and the ledger names the loss by a witness of the reset
// (resetWitnesses).
// Each fence found ends (a refusal's RetryAt, Status ReopenSafeAt) within
// the key space's recorded lifetime of its detection, and not before
// expiry, when the claims of old expire (checkFenceEnd; issue 56); its
// length from resetAt, an instant after the reset, is logged too.
func resetStatFenced(t *testing.T, s *Store, c Client, old []string, appDown bool, expiry, resetAt time.Time) {
	t.Helper()
	ctx := context.Background()
	markers := func(fenced bool) int {
		n := 0
		for _, m := range s.tags {
			v, err := c.Do(ctx, "GET", m).Text()
			if err == nil && (!fenced || strings.HasPrefix(v, "F")) {
				n++
			}
		}
		return n
	}
	if n := markers(false); n != Shards {
		t.Fatalf("%d of %d markers left; want every one: only the counters may show this loss", n, Shards)
	}
	if !appDown {
		recheckAll(t, s)
		twice, fenced := 0, 0
		var refusal error
		until := time.Now().Add(10 * time.Minute)
		for _, id := range old {
			first, err := s.Claim(ctx, id, until)
			switch {
			case first:
				twice++
			case errors.Is(err, ErrFenced):
				fenced++
				if refusal == nil {
					refusal = err
				}
			case err != nil:
				t.Fatalf("claim after the reset: %v", err)
			}
		}
		// Every fence the recheck (or a check during the claims) raised
		// was raised before this instant.
		detected := time.Now()
		if twice != 0 || fenced != len(old) {
			t.Fatalf("the idle store after eviction and CONFIG RESETSTAT: %d of %d IDs accepted twice, %d refused with ErrFenced; want 0 and all", twice, len(old), fenced)
		}
		fenceEndsInLifetime(t, s, "the idle store's recheck", refusal, detected, expiry, resetAt)
	}
	twice, refused, openErr := replayAfter(t, c, s.Prefix(), old)
	// The fence a new Open raised (the app down) or kept, read through a
	// Store that runs no check before its first claim: every fence was
	// raised before detected.
	s2 := mustNew(t, c, Options{Prefix: s.Prefix(), Logger: quietLogger(), Timeout: idleTimeout})
	defer s2.Close()
	_, refusal := s2.Claim(ctx, old[0], time.Now().Add(10*time.Minute))
	detected := time.Now()
	if !errors.Is(refusal, ErrFenced) {
		t.Fatalf("claim of an old ID after the new Open = %v; want ErrFenced", refusal)
	}
	fenceEndsInLifetime(t, s2, "after a new Open", refusal, detected, expiry, resetAt)
	l := mustLedger(t, s)
	t.Logf("Open = %v; %d of %d refused, %d accepted twice; ledger %+v", openErr, refused, len(old), twice, l)
	if twice != 0 {
		t.Fatalf("%d of %d IDs accepted twice after eviction and CONFIG RESETSTAT", twice, len(old))
	}
	if n := markers(true); n != Shards {
		t.Fatalf("%d of %d shards fenced; want every one", n, Shards)
	}
	for _, e := range l {
		if e.Kind == ledgerLoss && (strings.Contains(e.Detail, "total_commands_processed went down") ||
			strings.Contains(e.Detail, "CONFIG RESETSTAT")) {
			return
		}
	}
	t.Fatalf("ledger %+v; want the loss named by a witness of the reset (resetWitnesses)", l)
}

// fenceEndsInLifetime checks, with checkFenceEnd, the end of the fence
// refusal (ErrFenced) names (replay.RetryAt) and s's Status ReopenSafeAt
// against detected, an instant after the fence was raised, the key
// space's recorded lifetime (Status.Lifetime) and expiry; and logs the
// fence's length from lossAt, an instant after the loss.
func fenceEndsInLifetime(t *testing.T, s *Store, what string, refusal error, detected, expiry, lossAt time.Time) {
	t.Helper()
	end, ok := replay.RetryAt(refusal)
	if !ok {
		t.Fatalf("%s: the refusal %v names no end (replay.RetryAt); want the fence's", what, refusal)
	}
	st := mustStatus(t, s)
	if st.Fenced != Shards {
		t.Fatalf("%s: Status shows %d of %d shards fenced; want every one", what, st.Fenced, Shards)
	}
	checkFenceEnd(t, what+", the refusal's RetryAt", end, detected, st.Lifetime, expiry)
	checkFenceEnd(t, what+", Status ReopenSafeAt", st.ReopenSafeAt, detected, st.Lifetime, expiry)
	t.Logf("%s: serving again (ReopenSafeAt) %v after the loss; the key space's lifetime %v", what, st.ReopenSafeAt.Sub(lossAt).Round(time.Millisecond), st.Lifetime)
}
