//go:build fault

package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// clusterStore is a Store for one test on the cluster, with a fresh prefix.
func clusterStore(t *testing.T, tc *testCluster) (*Store, *redis.ClusterClient) {
	t.Helper()
	c := tc.client(t)
	return faultStore(t, c, 2*time.Second), c
}

// keysPerMaster counts, per master address, the keys under prefix whose
// name contains part.
func keysPerMaster(t *testing.T, c *redis.ClusterClient, prefix, part string) map[string]int {
	t.Helper()
	per := map[string]int{}
	for k, addr := range keyNodes(t, c, prefix) {
		if strings.Contains(k, part) {
			per[addr]++
		}
	}
	return per
}

// checkSpread fails unless the keys under prefix span several masters.
// Every shard's fence is checked by the caller; this only pins that the
// shards span masters. Not "all 3": the slot-migration test before it may
// leave one master without any of the 64 shard slots.
func checkSpread(t *testing.T, c *redis.ClusterClient, prefix string) map[string]int {
	t.Helper()
	per := keysPerMaster(t, c, prefix, "")
	if len(per) < 2 {
		t.Fatalf("keys on %d masters (%v), want the shards spread over several", len(per), per)
	}
	return per
}

// masterOf returns the address of the master that serves key's slot.
func masterOf(t *testing.T, c *redis.ClusterClient, key string) string {
	t.Helper()
	m, err := c.MasterForKey(context.Background(), key)
	must(t, err)
	return m.Options().Addr
}

// TestCluster pins the store on the Redis Cluster that .ci/redis-cluster.sh
// starts: single use on every instance, one slot per command, no loss
// through a slot migration or a master restart, durability and the lifetime
// on each key's master, records on every master, loss hidden by CONFIG
// RESETSTAT on one master or on every one, and the runbook after a restart
// without persistence of one master or of every one while no store ran.
func TestCluster(t *testing.T) {
	subtests(t, []subtest{
		{"single use on every other instance", clusterFleetSingleUseTokensAreRefusedOnEveryOtherInstance},
		{"claims once on every master", clusterClaimsExactlyOnceOnEveryMaster},
		{"every command in one slot", clusterEveryStoreCommandStaysInOneSlot},
		{"slot migration loses nothing", clusterSlotMigrationDuringRedeemsLosesNothing},
		{"master restart loses nothing", clusterMasterRestartDuringRedeemsLosesNothing},
		{"durability waits on the key's master", clusterDurabilityWaitsOnTheKeysMaster},
		{"longer lifetime on every master", clusterTheLongerLifetimeLengthensAFenceOnEveryMaster},
		{"records on every master", clusterRecordsOnEveryMaster},
		{"eviction while idle then CONFIG RESETSTAT", clusterEvictionWhileIdleThenResetStat},
		{"burst then idle then CONFIG RESETSTAT", clusterResetStatAfterABurst},
		{"restart, then the runbook", clusterRestartWithoutPersistenceThenTheRunbook},
	})
}

// clusterFleetSingleUseTokensAreRefusedOnEveryOtherInstance runs
// TestFleet/single use on every other instance with its store on the Cluster.
func clusterFleetSingleUseTokensAreRefusedOnEveryOtherInstance(t *testing.T) {
	tc := clusterFromEnv(t)
	testFleetSingleUse(t, func(t *testing.T) replay.Store {
		store, _ := clusterStore(t, tc)
		return store
	})
}

// clusterClaimsExactlyOnceOnEveryMaster races 16 claims of each of 60
// IDs, whose keys land on all three masters: exactly one claim of each is
// first. The expiry is the absolute until on whichever master holds the
// key, and Release makes the next claim first.
func clusterClaimsExactlyOnceOnEveryMaster(t *testing.T) {
	tc := clusterFromEnv(t)
	s, c := clusterStore(t, tc)
	ctx := context.Background()
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	const ids, racers = 60, 16
	for i := range ids {
		id := fmt.Sprint("race-", i)
		var wins, fails atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range racers {
			spawn(&wg, func() {
				<-start
				first, err := s.Claim(ctx, id, until)
				if err != nil {
					fails.Add(1)
				} else if first {
					wins.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if fails.Load() != 0 || wins.Load() != 1 {
			t.Fatalf("id %s: %d first, %d errors of %d concurrent claims; want exactly 1 first, no error", id, wins.Load(), fails.Load(), racers)
		}
	}
	t.Logf("%d keys per master: %v", ids, checkSpread(t, c, s.Prefix()))
	for i := range ids {
		got, err := c.Do(ctx, "PEXPIRETIME", s.key(fmt.Sprint("race-", i))).Int64()
		if err != nil || got != until.UnixMilli() {
			t.Fatalf("PEXPIRETIME = %d, %v; want %d", got, err, until.UnixMilli())
		}
	}
	must(t, s.Release(ctx, "race-0"))
	wantClaim(t, s, "race-0", until, true)
}

// recordingClient records every command the store sends.
type recordingClient struct {
	Client
	mu   sync.Mutex
	cmds [][]any
}

func (r *recordingClient) Do(ctx context.Context, args ...any) *redis.Cmd {
	r.mu.Lock()
	r.cmds = append(r.cmds, args)
	r.mu.Unlock()
	return r.Client.Do(ctx, args...)
}

// clusterEveryStoreCommandStaysInOneSlot runs Claim, Release and the lease
// steps on the cluster and asks it (COMMAND GETKEYS) which keys each command
// names: the ID's entry and at most its shard's marker, under the prefix, in
// one slot, so no command can fail with CROSSSLOT. It also pins the
// constraint the layout meets: two slots in one script are refused with
// CROSSSLOT, two keys sharing a hash tag are not.
func clusterEveryStoreCommandStaysInOneSlot(t *testing.T) {
	tc := clusterFromEnv(t)
	c := tc.client(t)
	rec := &recordingClient{Client: c}
	// No periodic server check within the test: those commands (ROLE,
	// INFO, CONFIG, TIME) name no key.
	s := faultStoreWith(t, rec, Options{Timeout: 2 * time.Second, RecheckInterval: time.Hour})
	rec.mu.Lock()
	rec.cmds = nil // the server checks and Provision
	rec.mu.Unlock()
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	for i := range 30 {
		id := fmt.Sprint("one-key-", i)
		wantClaim(t, s, id, until, true)
		wantClaim(t, s, id, until, false)
		must(t, s.Release(ctx, id))
	}
	if len(rec.cmds) < 90 {
		t.Fatalf("%d commands sent for 90 store calls, want one each (and EVAL after NOSCRIPT)", len(rec.cmds))
	}
	// The webhook lease steps: one script each (EVALSHA, and EVAL when the
	// master does not know the script yet).
	leaseFrom := len(rec.cmds)
	for i := range 30 {
		id := fmt.Sprint("lease-", i)
		l := acquireLease(t, s, id, time.Minute, replay.LeaseAcquired)
		acquireLease(t, s, id, time.Minute, replay.LeaseBusy)
		must(t, s.RenewLease(ctx, id, l.Token, 2*time.Minute))
		if i%2 == 0 {
			must(t, s.ReleaseLease(ctx, id, l.Token))
			continue
		}
		must(t, s.ConfirmLease(ctx, id, l.Token, until))
		acquireLease(t, s, id, time.Minute, replay.LeaseDone)
	}
	for _, args := range rec.cmds[leaseFrom:] {
		if name := fmt.Sprint(args[0]); name != "EVALSHA" && name != "EVAL" {
			t.Fatalf("lease step sent %s, want EVALSHA or EVAL", name)
		}
	}
	if scripts := len(rec.cmds) - leaseFrom; scripts < 30*4+15 {
		t.Fatalf("%d script commands for %d lease steps", scripts, 30*4+15)
	}
	for _, args := range rec.cmds {
		keys, err := c.CommandGetKeys(ctx, args...).Result()
		if err != nil {
			t.Fatalf("COMMAND GETKEYS %v: %v", args[0], err)
		}
		if len(keys) == 0 || len(keys) > 2 {
			t.Fatalf("%v names keys %q, want the entry and at most its marker", args[0], keys)
		}
		slot := c.ClusterKeySlot(ctx, keys[0]).Val()
		for _, k := range keys {
			if len(k) <= len(s.Prefix()) || k[:len(s.Prefix())] != s.Prefix() {
				t.Fatalf("%v names key %q, not under the store's prefix", args[0], k)
			}
			if c.ClusterKeySlot(ctx, k).Val() != slot {
				t.Fatalf("%v names keys %q in two slots", args[0], keys)
			}
		}
	}

	const script = "redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000); return redis.call('SET', KEYS[2], ARGV[1], 'PX', 60000)"
	apart := []string{s.Prefix() + "lease:a", s.Prefix() + "lease:b"}
	if c.ClusterKeySlot(ctx, apart[0]).Val() == c.ClusterKeySlot(ctx, apart[1]).Val() {
		t.Fatal("test keys share a slot; pick others")
	}
	if err := c.Eval(ctx, script, apart, "1").Err(); !errors.Is(err, redis.ErrCrossSlot) && (err == nil || !bytes.Contains([]byte(err.Error()), []byte("CROSSSLOT"))) {
		t.Fatalf("two-slot script: err = %v, want CROSSSLOT", err)
	}
	tagged := []string{s.Prefix() + "{delivery-1}:lease", s.Prefix() + "{delivery-1}:done"}
	wantErr(t, c.Eval(ctx, script, tagged, "1").Err(), nil, "script on two keys with one hash tag")
}

// churnResult is what churnDuring measured.
type churnResult struct {
	tokens, burned, refusals int
	deliveries, hookRetries  int
}

// churnLease is the webhook lease of churnDuring's receivers: it must
// outlast a restarted master's outage, or a retry after the lease is
// processed again (the documented lease limit, docs/fleet-reference.md).
const churnLease = 5 * time.Second

// churnDuring runs a fleet of three instances on store while disrupt runs:
// 16 clients mint fresh single-use tokens and redeem each with two
// concurrent copies on different instances, replay earlier tokens, and
// send a webhook delivery with two concurrent copies (then retries until
// acknowledged), until disrupt returns. Then every token is redeemed again on every
// instance until decided. It asserts that no token was accepted twice (by
// the replies or by the handlers' work), that every token accepted before
// the disruption is refused after it, and that a token refused as redeemed
// without ever being accepted ("burned") had a redeem the store could not
// decide (503): nothing is lost silently. Every webhook delivery was
// acknowledged, is sent once more after the disruption, and was processed
// exactly once.
func churnDuring(t *testing.T, store *Store, disrupt func()) churnResult {
	t.Helper()
	t.Setenv(envFleetKeys, fleetKey())
	t.Setenv(envFleetSession, "fleet-session-1")
	var work, hooks acceptLog
	var ins []*instance
	for i := range 3 {
		hook := hookEndpoint(t, store, churnLease, 0, nil, hooks.add)
		ins = append(ins, startInstance(t, fmt.Sprint("i", i), store, func(h http.Handler) http.Handler {
			return withHook(hook)(recordAccepts(h, 0, work.add))
		}))
	}
	c := faultClient(t)
	sender := newHookSender(t, c)
	var outs outcomes
	before := mintMany(t, c, ins, 50)
	for i, s := range before {
		st := redeem(c, ins[i%3].srv.URL, s)
		if st != http.StatusOK {
			t.Fatalf("redeem before the disruption: status %d", st)
		}
		outs.add(s.tok, st)
	}

	var (
		mu      sync.Mutex
		all     = append([]single(nil), before...)
		stop    atomic.Bool
		hookIDs []string
		retries atomic.Int32
		wg      sync.WaitGroup
		errs    = make(chan error, 16)
		kindIdx atomic.Uint64
	)
	for w := range 16 {
		spawn(&wg, func() {
			for n := 0; !stop.Load(); {
				kind := singleUseKinds[kindIdx.Add(1)%2]
				a := rand.IntN(3)
				tok, err := mint(c, ins[a].srv.URL, kind, "alice")
				if err != nil {
					errs <- err
					return
				}
				s := single{kind, tok}
				var pair sync.WaitGroup
				for _, i := range []int{a, (a + 1 + w%2) % 3} {
					spawn(&pair, func() {
						outs.add(s.tok, redeem(c, ins[i].srv.URL, s))
					})
				}
				pair.Wait()
				mu.Lock()
				all = append(all, s)
				old := all[rand.IntN(len(all))]
				mu.Unlock()
				outs.add(old.tok, redeem(c, ins[rand.IntN(3)].srv.URL, old))

				// A webhook delivery: two copies at once, then retries
				// until acknowledged.
				id := fmt.Sprintf("msg_churn_%d_%d", w, n)
				n++
				codes := make([]int, 2)
				var copies sync.WaitGroup
				for j, i := range []int{a, (a + 2) % 3} {
					spawn(&copies, func() {
						codes[j] = sender.send(ins[i].srv.URL, id)
					})
				}
				copies.Wait()
				if codes[0]/100 != 2 && codes[1]/100 != 2 {
					retries.Add(1)
					if _, err := sender.deliver(func() string { return ins[rand.IntN(3)].srv.URL }, id, 50*time.Millisecond, churnLease+15*time.Second); err != nil {
						errs <- err
						return
					}
				}
				mu.Lock()
				hookIDs = append(hookIDs, id)
				mu.Unlock()
			}
		})
	}
	disrupt()
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for i, s := range all {
		for j := range ins {
			outs.add(s.tok, redeemDecided(t, c, ins[(i+j)%3].srv.URL, s, nil))
		}
	}
	res := churnResult{tokens: len(all)}
	for i, s := range all {
		ok, undecided := outs.get(s.tok, http.StatusOK), outs.get(s.tok, http.StatusServiceUnavailable)
		switch {
		case ok > 1:
			t.Fatalf("%s token %d accepted %d times", s.kind, i, ok)
		case work.count(s.tok) != ok:
			t.Fatalf("%s token %d: %d acceptances but the handler acted %d times", s.kind, i, ok, work.count(s.tok))
		case i < len(before) && ok != 1:
			t.Fatalf("%s token %d accepted before the disruption, then %d times", s.kind, i, ok-1)
		case ok == 0 && undecided == 0:
			t.Fatalf("%s token %d refused as redeemed though never accepted and never undecided", s.kind, i)
		case ok == 0:
			res.burned++
		}
		if n := outs.get(s.tok, 0); n != 0 {
			t.Fatalf("%s token %d: %d redeems got no reply from a live instance", s.kind, i, n)
		}
	}
	res.refusals = outs.totals()[http.StatusServiceUnavailable]
	// Every acknowledged delivery once more, as a sender whose
	// acknowledgement got lost would send it: acknowledged, not processed.
	for _, id := range hookIDs {
		if _, err := sender.deliver(func() string { return ins[rand.IntN(3)].srv.URL }, id, 20*time.Millisecond, churnLease+15*time.Second); err != nil {
			t.Fatalf("re-sending an acknowledged delivery after the disruption: %v", err)
		}
	}
	for _, id := range hookIDs {
		if n := hooks.count(id); n != 1 {
			t.Fatalf("webhook delivery %s acknowledged and processed %d times, want exactly once", id, n)
		}
	}
	res.deliveries, res.hookRetries = len(hookIDs), int(retries.Load())
	return res
}

// clusterSlotMigrationDuringRedeemsLosesNothing migrates every slot
// that holds one of the test's claims on the master holding the most of
// them (up to 100 slots) to another master while the fleet redeems: the
// slots stay half-migrated (MIGRATING/IMPORTING, claims redirected with
// ASK) for a second, then their keys move with MIGRATE and the target takes
// the slots. No token is accepted twice or lost (churnDuring's assertions),
// and after the migration the other master holds the moved claims.
func clusterSlotMigrationDuringRedeemsLosesNothing(t *testing.T) {
	tc := clusterFromEnv(t)
	store, c := clusterStore(t, tc)
	ctx := context.Background()
	var moved, slotCount int
	var took time.Duration
	res := churnDuring(t, store, func() {
		time.Sleep(500 * time.Millisecond) // let claims accumulate
		keys := keyNodes(t, c, store.Prefix())
		per := keysPerMaster(t, c, store.Prefix(), "")
		var from, to node
		for _, m := range tc.masters(t) {
			if from.id == "" || per[m.addr] > per[from.addr] {
				from = m
			}
		}
		for _, m := range tc.masters(t) {
			if m.id != from.id {
				to = m
				break
			}
		}
		inUse := map[int]bool{}
		for k, a := range keys {
			if a == from.addr && len(inUse) < 100 {
				inUse[int(c.ClusterKeySlot(ctx, k).Val())] = true
			}
		}
		slots := slices.Collect(maps.Keys(inUse))
		slotCount = len(slots)
		start := time.Now()
		moved = tc.migrateSlots(t, slots, from, to, time.Second)
		took = time.Since(start)
		after := keyNodes(t, c, store.Prefix())
		for k, a := range keys {
			if a == from.addr && inUse[int(c.ClusterKeySlot(ctx, k).Val())] && after[k] != to.addr {
				t.Errorf("claim in a migrated slot is on %s after the migration, want %s", after[k], to.addr)
			}
		}
		if moved == 0 {
			t.Error("no claim moved")
		}
		time.Sleep(300 * time.Millisecond)
	})
	t.Logf("migrated %d slots holding claims (%d keys moved) in %v; %d tokens, %d redeems refused with 503, %d tokens burned; %d webhook deliveries each processed once, %d needed a retry",
		slotCount, moved, took.Round(time.Millisecond), res.tokens, res.refusals, res.burned, res.deliveries, res.hookRetries)
}

// clusterMasterRestartDuringRedeemsLosesNothing SIGKILLs the master
// holding the most of the test's claims while the fleet redeems, keeps it
// down for a second (below cluster-node-timeout, so the cluster does not
// fail over), and starts it again from its AOF (appendfsync always): no
// claim it acknowledged is lost, and no token is accepted twice. The
// restarted master has an empty script cache: EVALSHA of a script loaded
// before answers NOSCRIPT, so a Lua-based store step must fall back to
// EVAL (go-redis's Script.Run does).
func clusterMasterRestartDuringRedeemsLosesNothing(t *testing.T) {
	tc := clusterFromEnv(t)
	store, c := clusterStore(t, tc)
	var victim, sha string
	res := churnDuring(t, store, func() {
		time.Sleep(300 * time.Millisecond)
		victim = maxKey(keysPerMaster(t, c, store.Prefix(), ""))
		v, err := adminDo(victim, "SCRIPT", "LOAD", "return 1")
		if err != nil {
			t.Error(err)
		}
		sha, _ = v.(string)
		// Down for a second, then started again from its config (same port,
		// same AOF and nodes.conf).
		tc.kill(t, victim)
		time.Sleep(time.Second)
		tc.start(t, victim)
		waitClusterOK(t, tc.addrs...)
		time.Sleep(300 * time.Millisecond)
	})
	t.Logf("restarted master %s: %d tokens, %d redeems refused with 503, %d tokens burned; %d webhook deliveries each processed once, %d needed a retry",
		victim, res.tokens, res.refusals, res.burned, res.deliveries, res.hookRetries)
	if _, err := adminDo(victim, "EVALSHA", sha, 0); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatalf("EVALSHA after the restart: err = %v, want NOSCRIPT", err)
	}
}

// clusterDurabilityWaitsOnTheKeysMaster runs a store with a Durability
// setting on the cluster (whose masters have no replica): every claim is
// pipelined with WAIT on the master that holds its key (MasterForKey), so
// each one, on every master holding a shard, is applied there and reported
// ErrNotDurable, never first, and a resend is refused. WAITAOF is refused at Open on Redis 7.0.
func clusterDurabilityWaitsOnTheKeysMaster(t *testing.T) {
	tc := clusterFromEnv(t)
	c := tc.client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("ctoken-fault:durable-%d:", time.Now().UnixNano())
	s := provisioned(t, c, Options{Prefix: prefix, Durability: Durability{Replicas: 1, Timeout: 20 * time.Millisecond}})
	// Two IDs on each master that holds a shard (the slot migration test
	// may have moved shards' slots between masters).
	perMaster := map[string]int{}
	for _, tag := range s.tags {
		perMaster[masterOf(t, c, tag)] = 0
	}
	for i := 0; slices.Min(slices.Collect(maps.Values(perMaster))) < 2; i++ {
		if i == 1000 {
			t.Fatalf("1000 IDs cover only %v", perMaster)
		}
		id := fmt.Sprint("durable-", i)
		m := masterOf(t, c, s.key(id))
		if perMaster[m] >= 2 {
			continue
		}
		perMaster[m]++
		wantRefused(t, s, id, time.Now().Add(time.Minute), ErrNotDurable)
		wantClaim(t, s, id, time.Now().Add(time.Minute), false)
	}
	// Redis 7.0 has no WAITAOF: refused; 7.2 (the nodes run with AOF): runs.
	if _, err := Open(ctx, c, Options{Prefix: prefix, Durability: Durability{LocalAOF: true}}); err != nil && !errors.Is(err, ErrConfig) {
		t.Fatalf("Open with LocalAOF on the cluster = %v; want nil or ErrConfig", err)
	} else {
		t.Logf("Open with LocalAOF on the cluster: %v", err)
	}
}

// clusterTheLongerLifetimeLengthensAFenceOnEveryMaster: a store of 1 s
// claims meets the loss of every marker and of the lifetime record first
// and fences each shard for its own lifetime; a store of 8 s claims, whose
// lifetime the first never read, then lengthens each fence from its raise
// time (kept in the shard's slot): on every master, no fence ends before
// the longer claims expire.
func clusterTheLongerLifetimeLengthensAFenceOnEveryMaster(t *testing.T) {
	tc := clusterFromEnv(t)
	c := tc.client(t)
	ctx := context.Background()
	opts := lifetimeOpts(fmt.Sprintf("cl-life-%d:", time.Now().UnixNano()), time.Hour)
	// A call that reaches Redis more than MaxSkew after it left is refused
	// as a lagging clock: on a loaded machine the 200 ms of the lifetime
	// tests is not enough. The short store's fence is then 3 s, the long
	// one's 11 s.
	opts.MaxSkew, opts.Timeout = time.Second, idleTimeout
	provisionFirst(t, c, opts)
	short := closing(t, mustNew(t, c, opts))
	long := closing(t, mustNew(t, c, opts))
	wantClaim(t, short, "short-0", time.Now().Add(time.Second), true)
	// One ID per shard for the long store, claimed before the loss.
	var ids [Shards]string
	latest := time.Now().Add(8 * time.Second)
	for i, n := 0, 0; n < Shards; i++ {
		id := fmt.Sprint("long-", i)
		if ids[shardOf(id)] != "" {
			continue
		}
		ids[shardOf(id)] = id
		n++
		wantClaim(t, long, id, latest, true)
	}
	// The loss takes every marker and the lifetime record, as a restart
	// without persistence does.
	for _, k := range append(short.tags[:], short.lifetimeKey()) {
		must(t, c.Del(ctx, k).Err())
	}
	for shard, id := range ids {
		_, err := short.Claim(ctx, id, time.Now().Add(time.Second))
		if at, ok := replay.RetryAt(err); !ok || !at.Before(latest) {
			t.Fatalf("shard %d: short store's claim after the loss = %v; want fenced for its own lifetime, before %v", shard, err, latest)
		}
	}
	for shard, id := range ids {
		_, err := long.Claim(ctx, id, latest)
		at, ok := replay.RetryAt(err)
		if !ok || at.Before(latest) {
			t.Fatalf("shard %d: long store's claim = %v; want a fence lengthened past %v", shard, err, latest)
		}
	}
	checkSpread(t, c, opts.Prefix)
}

// clusterRecordsOnEveryMaster takes, renews, confirms and replays a
// record for each of 60 IDs on a 3-master Redis Cluster behind
// redis.NewClusterClient (every third released and taken again first; the
// renewed lease keeps its fingerprint):
// every step is one script on the marker and the entry of one slot (no
// CROSSSLOT), and the entries land on every master.
func clusterRecordsOnEveryMaster(t *testing.T) {
	tc := clusterFromEnv(t)
	s, c := clusterStore(t, tc)
	ctx := context.Background()
	for i := range 60 {
		id := fmt.Sprint("idem-", i)
		fp, result := []byte(fmt.Sprint("fp-", i)), []byte(fmt.Sprint(`{"payment":`, i, `}`))
		r, err := s.AcquireRecord(ctx, id, time.Minute, fp)
		if err == nil && i%3 == 0 {
			wantErr(t, s.ReleaseLease(ctx, id, r.Token), nil, "ReleaseLease("+id+")")
			r, err = s.AcquireRecord(ctx, id, time.Minute, fp)
		}
		if err != nil || r.State != replay.LeaseAcquired {
			t.Fatalf("AcquireRecord(%s) = %+v, %v", id, r, err)
		}
		wantErr(t, s.RenewLease(ctx, id, r.Token, 2*time.Minute), nil, "RenewLease("+id+")")
		if b, err := s.AcquireRecord(ctx, id, time.Minute, nil); err != nil || b.State != replay.LeaseBusy || !bytes.Equal(b.Fingerprint, fp) ||
			b.Wait <= time.Minute {
			t.Fatalf("second AcquireRecord(%s) = %+v, %v; want busy with the fingerprint, for the renewed lease", id, b, err)
		}
		wantErr(t, s.ConfirmRecord(ctx, id, r.Token, time.Now().Add(time.Hour), fp, result), nil, "ConfirmRecord("+id+")")
		if d, err := s.AcquireRecord(ctx, id, time.Minute, nil); err != nil || d.State != replay.LeaseDone || !bytes.Equal(d.Result, result) {
			t.Fatalf("replay of %s = %+v, %v; want done with the result", id, d, err)
		}
	}
	// Each record is on the master that serves its slot, and the records
	// span every master that serves one of their slots: all three on a
	// fresh cluster (an earlier test of the suite may have migrated slots).
	want := map[string]bool{}
	for i := range 60 {
		want[masterOf(t, c, s.key(fmt.Sprint("idem-", i)))] = true
	}
	masters := keysPerMaster(t, c, s.Prefix(), ":idem-")
	if len(masters) != len(want) || len(want) < 2 {
		t.Fatalf("records on %d masters (%v); their slots are served by %v", len(masters), masters, want)
	}
	for addr := range masters {
		if !want[addr] {
			t.Fatalf("a record on %s, which serves none of their slots (%v)", addr, want)
		}
	}
}

// clusterEvictionWhileIdleThenResetStat runs TestEvictionWhileIdleThenResetStat
// (eviction_fault_test.go) on the Cluster (issue 56: thousands of IDs were
// accepted twice there): eviction and CONFIG RESETSTAT on the master
// holding the most claims, or on every master holding some, while the
// store is idle or the app down. The reset on one master fences the whole
// key space (Store.fenceAll): no ID is accepted twice, and every ID, on
// every master, is refused with ErrFenced.
func clusterEvictionWhileIdleThenResetStat(t *testing.T) {
	tc := clusterFromEnv(t)
	for _, tt := range []struct {
		name           string
		every, appDown bool
		// baselines: <prefix>servers and the ledger are evicted too (see
		// TestEvictionWhileIdleThenResetStat), on the master holding
		// them, which is then the one master evicted (issue 81).
		baselines bool
	}{
		{"one master, the store idle, then its recheck", false, false, false},
		{"one master, the app down, then a new Open", false, true, false},
		{"every master, the store idle, then its recheck", true, false, false},
		{"every master, the app down, then a new Open", true, true, false},
		{"the baselines' master, the baselines evicted too, the app down, then a new Open", false, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tc.client(t)
			prefix := fmt.Sprintf("ctoken-fault:reset-%d:", time.Now().UnixNano())
			if tt.baselines {
				prefix = prefixWithBaselinesOnTheMostShards(t, c, prefix)
			}
			s := provisioned(t, c, Options{Prefix: prefix, Logger: quietLogger(), Timeout: idleTimeout})
			old, expiry := claimOld(t, s, evictOld)
			recheckAll(t, s) // the baselines hold every claim's commands
			if tt.appDown {
				s.Close()
			}
			// Claims per master: a master may hold no shard after the slot
			// migration test.
			per := keysPerMaster(t, c, prefix, ":old-")
			victims := slices.Collect(maps.Keys(per))
			switch {
			case tt.baselines:
				victims = []string{masterOf(t, c, s.serversKey())}
				evictableBaselines(t, c, prefix)
			case !tt.every:
				victims = []string{maxKey(per)}
			}
			for _, addr := range victims {
				mc := redis.NewClient(&redis.Options{Addr: addr})
				defer mc.Close()
				t.Logf("%s: %d keys evicted", addr, evictWhileIdleThenResetStat(t, mc))
			}
			resetAt := time.Now()
			// Counted with SCAN: a command per claim would refill
			// total_commands_processed.
			lost := len(old)
			for _, n := range keysPerMaster(t, c, prefix, ":old-") {
				lost -= n
			}
			t.Logf("%d of %d claims evicted, on %d of the %d masters holding claims (%v)", lost, len(old), len(victims), len(per), per)
			if lost == 0 {
				t.Fatal("no claim was evicted: the test did not test their loss")
			}
			resetStatFenced(t, s, c, old, tt.appDown, expiry, resetAt)
		})
	}
}

// prefixWithBaselinesOnTheMostShards returns base with a suffix that puts
// <prefix>servers and <prefix>ledger on the master holding the most shard
// markers, so that evicting that master's keys takes claims and both.
func prefixWithBaselinesOnTheMostShards(t *testing.T, c *redis.ClusterClient, base string) string {
	t.Helper()
	shards := map[string]int{}
	for _, tag := range shardTags("x:") { // {NN} is the hash tag, whatever the prefix
		shards[masterOf(t, c, tag)]++
	}
	most := maxKey(shards)
	for i := range 1000 {
		p := fmt.Sprintf("%s%d:", base, i)
		if masterOf(t, c, p+"servers") == most && masterOf(t, c, p+"ledger") == most {
			return p
		}
	}
	t.Fatalf("no prefix of 1000 puts the baselines and the ledger on %s", most)
	return ""
}

// clusterResetStatAfterABurst runs TestResetStatAfterABurst
// (server_fault_test.go) on the Cluster: each run a fresh key space, its
// burst on every master holding a shard, the eviction, CONFIG RESETSTAT
// and the traffic on every master holding claims. The masters are not
// young, and every run resets servers that were reset before: the
// subtest before this one resets them, and so does each run after its
// replay (a control's evictions would make the next ProvisionNew refuse).
// CTOKEN_RESETSTAT_RUNS passes (default 1).
func clusterResetStatAfterABurst(t *testing.T) {
	tc := clusterFromEnv(t)
	runs := envInt(t, "CTOKEN_RESETSTAT_RUNS", 1)
	var all []*redis.Client
	for _, m := range tc.masters(t) {
		mc := redis.NewClient(&redis.Options{Addr: m.addr})
		t.Cleanup(func() { mc.Close() })
		all = append(all, mc)
	}
	resetAll := func() {
		for _, m := range all {
			if err := m.ConfigResetStat(context.Background()).Err(); err != nil {
				t.Error(err)
			}
		}
	}
	for _, sh := range resetShapes {
		t.Run(sh.name, func(t *testing.T) {
			// A run that fails leaves keys evicted: the next shape's and
			// subtest's ProvisionNew would refuse the masters.
			t.Cleanup(resetAll)
			var got []resetRun
			for run := range runs {
				for _, running := range []bool{true, false} {
					for _, reset := range sh.variants() {
						c := tc.client(t)
						holding := func(prefix string) []*redis.Client {
							on := keysPerMaster(t, c, prefix, ":id-")
							return slices.DeleteFunc(slices.Clone(all), func(m *redis.Client) bool { return on[m.Options().Addr] == 0 })
						}
						got = append(got, burstIdleThenChange(t, c, all, holding, sh, running, reset, run%2 == 1))
						resetAll()
					}
				}
			}
			checkResetRuns(t, sh, got)
		})
	}
}

// maxKey returns the key of m with the largest value.
func maxKey(m map[string]int) string {
	best, n := "", -1
	for k, v := range m {
		if v > n {
			best, n = k, v
		}
	}
	return best
}

// clusterRestartWithoutPersistenceThenTheRunbook runs
// TestUnknownHistory/restart, then the runbook (provision_unknown_test.go)
// on the Cluster: one master or every master restarted empty while no
// application ran, then the runbook through the Store API and an
// application claiming every earlier ID again. Every master lost:
// Provision fences every shard for one lifetime. One master lost: Provision
// refuses (partly provisioned) and each lost shard fences at its first
// claim. One master lost with the baselines: the survivors' earlier CONFIG
// RESETSTAT could hide evictions (issue 81), so Provision fences every
// shard. In each, no earlier ID is accepted again and a fresh ID is served
// within a lifetime.
func clusterRestartWithoutPersistenceThenTheRunbook(t *testing.T) {
	tc := clusterFromEnv(t)
	for _, tt := range []struct {
		name  string
		every bool
		// baselinesLost: <prefix>servers lives on the one restarted
		// master, so the surviving masters' baselines go with it.
		baselinesLost bool
	}{
		{"one master", false, false},
		{"one master, the baselines with it", false, true},
		{"every master", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The Horizon: every claim's lifetime rounds up to it. Long
			// enough that the earlier claims are still live after a
			// restart, status, Provision and New on a loaded machine
			// (every master: 3.6 s to restart at load ~10).
			const lifetime = 10 * time.Second
			const n = 500
			ctx := context.Background()
			c := tc.client(t)
			// Shard markers per master ({NN} is the hash tag, whatever
			// the prefix): a master may hold none after the slot
			// migration test.
			shardsOn := map[string][]int{}
			for i, tag := range shardTags("x:") {
				a := masterOf(t, c, tag)
				shardsOn[a] = append(shardsOn[a], i)
			}
			victims := []string{}
			for _, m := range tc.masters(t) {
				victims = append(victims, m.addr)
			}
			if !tt.every {
				victims = victims[:1]
				for a, shards := range shardsOn {
					if len(shards) > len(shardsOn[victims[0]]) {
						victims[0] = a
					}
				}
			}
			lost := map[int]bool{}
			for _, a := range victims {
				for _, i := range shardsOn[a] {
					lost[i] = true
				}
			}
			// One master: a prefix whose ledger and lifetime record live on
			// it, so its restart takes them too, and whose baselines
			// (<prefix>servers) live on it when baselinesLost, on another
			// master otherwise.
			var prefix string
			for i := 0; prefix == ""; i++ {
				if i == 1000 {
					t.Fatalf("no prefix of 1000 puts the ledger and the lifetime record on %s (the baselines there: %v)", victims[0], tt.baselinesLost)
				}
				p := fmt.Sprintf("ctoken-fault:runbook-%d-%d:", time.Now().UnixNano(), i)
				if tt.every || masterOf(t, c, p+"ledger") == victims[0] && masterOf(t, c, p+"lifetime") == victims[0] &&
					(masterOf(t, c, p+"servers") == victims[0]) == tt.baselinesLost {
					prefix = p
				}
			}
			fencedAll := tt.every || tt.baselinesLost
			if !tt.every {
				// Every surviving master counts a CONFIG RESETSTAT from
				// before the key space lived, whichever tests ran before.
				for _, m := range tc.masters(t) {
					if m.addr == victims[0] {
						continue
					}
					mustDo(t, m.addr, "CONFIG", "RESETSTAT")
				}
			}
			// Timeout and MaxSkew wide enough that a loaded machine's
			// slow call is neither a timeout nor a clock behind Redis's.
			opts := Options{Prefix: prefix, Logger: quietLogger(), Horizon: lifetime, MaxSkew: time.Second, Timeout: 10 * time.Second}
			provisionFirst(t, c, opts)
			app := mustOpen(t, c, opts)
			untils := make(map[string]time.Time, n)
			onLost := 0
			for i := range n {
				id, until := fmt.Sprint("tok-", i), time.Now().Add(lifetime-100*time.Millisecond)
				wantClaim(t, app, id, until, true)
				untils[id] = until
				if lost[shardOf(id)] {
					onLost++
				}
			}
			if app.Lifetime() != lifetime {
				t.Fatalf("the key space's lifetime = %v; want %v", app.Lifetime(), lifetime)
			}
			app.Close() // no application runs at the restart
			restarted := time.Now()
			tc.restartEmpty(t, victims...)
			t.Logf("%d of %d claims on the %d shards of %d restarted master(s) %v; restarted in %v",
				onLost, n, len(lost), len(victims), victims, time.Since(restarted).Round(time.Millisecond))
			if onLost == 0 {
				t.Fatal("no claim on a restarted master: the test did not test their loss")
			}

			// The runbook: status, then provision, as ctoken-store runs
			// them (a new process: a new client).
			op := closing(t, mustNew(t, tc.client(t), Options{Prefix: prefix, Logger: quietLogger(), Horizon: lifetime}))
			st := mustStatus(t, op)
			empty := 0
			for _, ss := range st.Servers {
				if ss.AppendOnly == "no" && !ss.StartedAt.IsZero() && time.Since(ss.StartedAt) < 10*time.Second {
					empty++
				}
			}
			t.Logf("status after the restart: %d open, %d fenced, %d missing; ledger %d entries; lifetime %v; %d of %d masters without persistence, started seconds ago",
				st.Open, st.Fenced, st.Missing, len(st.Ledger), st.Lifetime, empty, len(st.Servers))
			if st.Missing != len(lost) || st.Open != Shards-len(lost) || st.Fenced != 0 || len(st.Ledger) != 0 || st.Lifetime != 0 ||
				!st.ReopenSafeAt.IsZero() || len(st.Servers) != 3 || empty != len(victims) {
				t.Fatalf("status after the restart = %+v; want %d markers missing, the others open, no ledger, no lifetime, and %d masters without persistence started seconds ago",
					st, len(lost), len(victims))
			}
			before, err := op.getMarkers(ctx)
			must(t, err)
			t0 := time.Now()
			opened, perr := op.Provision(ctx)
			// The fences the waiting application raises itself (each lost
			// shard at its first claim, one master): the last one's end,
			// and any longer than one lifetime from when it was raised.
			var (
				mu       sync.Mutex
				fenceEnd time.Time
				tooLong  []time.Duration
			)
			waitOpts := opts
			waitOpts.Observer = func(e replay.Event) {
				if e.Kind != replay.EventFenceRaised {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if e.Until.After(fenceEnd) {
					fenceEnd = e.Until
				}
				if d := time.Until(e.Until); d > lifetime {
					tooLong = append(tooLong, d)
				}
			}
			var waiting *Store
			if fencedAll {
				// every: Provision's fence for unknown history; the
				// baselines lost: the fence of its server checks, which
				// Provision then finds.
				why, kind, detail := whyProvisionedFenced, ledgerProvisioned, "history unknown"
				if !tt.every {
					why, kind, detail = whyProvisionFenced, ledgerLoss, "CONFIG RESETSTAT"
				}
				end, ok := replay.RetryAt(perr)
				if opened != 0 || !errors.Is(perr, ErrFenced) || Reason(perr) != why || !ok {
					t.Fatalf("Provision after the restart = %d, %v; want 0, ErrFenced (%q) with its end", opened, perr, why)
				}
				if end.Before(t0.Add(lifetime-time.Second)) || end.After(time.Now().Add(lifetime+time.Second)) {
					t.Fatalf("fenced until %v, %v after Provision; want one lifetime, %v", end, end.Sub(t0), lifetime)
				}
				if st, err = op.Status(ctx); err != nil || st.Fenced != Shards || st.ReopenSafeAt.Before(end) ||
					len(st.Ledger) != 1 || st.Ledger[0].Kind != kind || !strings.Contains(st.Ledger[0].Detail, detail) {
					t.Fatalf("status after Provision = %+v, %v; want every shard fenced, safe to reopen from %v, the fence in the ledger (%s: %q)", st, err, end, kind, detail)
				}
				if _, err := Open(ctx, tc.client(t), opts); !errors.Is(err, ErrFenced) {
					t.Fatalf("Open before the fence's end = %v; want ErrFenced", err)
				}
				t.Logf("Provision: %v; fenced until %v after Provision", perr, end.Sub(t0).Round(time.Millisecond))
				fenceEnd = end
				waiting = mustNew(t, tc.client(t), waitOpts)
			} else {
				if opened != 0 || !errors.Is(perr, ErrConfig) || Reason(perr) != whyPartlyProvisioned {
					t.Fatalf("Provision after the restart = %d, %v; want 0, ErrConfig (%q)", opened, perr, whyPartlyProvisioned)
				}
				after, aerr := op.getMarkers(ctx)
				ledger, lerr := op.readLedger(ctx)
				if aerr != nil || lerr != nil || fmt.Sprint(derefAll(after)) != fmt.Sprint(derefAll(before)) || len(ledger) != 0 {
					t.Fatalf("a refused Provision wrote: markers %v, then %v (%v); ledger %+v (%v)", derefAll(before), derefAll(after), aerr, ledger, lerr)
				}
				t.Logf("Provision: %v", perr)
				if waiting, err = Open(ctx, tc.client(t), waitOpts); err != nil {
					t.Fatalf("Open with %d shards open = %v; want the open shards served", Shards-len(lost), err)
				}
				// A surviving shard serves at once.
				id := ""
				for i := 0; id == "" || lost[shardOf(id)]; i++ {
					id = fmt.Sprint("kept-", i)
				}
				wantClaim(t, waiting, id, time.Now().Add(time.Second), true)
			}
			defer waiting.Close()
			fresh := 0
			twice, refused, served, lastFenced := replayUntilServed(t, waiting, untils, func() string {
				for {
					fresh++
					if id := fmt.Sprint("fresh-", fresh); lost[shardOf(id)] {
						return id // on a shard the restart emptied
					}
				}
			}, t0, lifetime+10*time.Second)
			t.Logf("%d earlier IDs accepted twice %v (%d refusals of them while fenced); a fresh ID on a lost shard served %v after Provision; the key space's lifetime %v, the application's %v",
				len(twice), twice[:min(len(twice), 10)], refused, served.Round(time.Millisecond), lifetime, waiting.Lifetime())
			if len(twice) != 0 {
				t.Fatalf("%d of %d earlier IDs accepted twice; want 0", len(twice), n)
			}
			if refused == 0 {
				t.Fatal("no earlier ID was refused as fenced: the test did not test the fence")
			}
			// Never early; then no fresh claim begun after the last
			// fence's end refused (Redis's clock is this host's; a Store
			// from New keeps its key space's refusal keySpaceRetry), and
			// no fence longer than one lifetime: served within a lifetime
			// of each fence, however slow a loaded machine is.
			if fencedAll && served < lifetime-100*time.Millisecond {
				t.Fatalf("served %v after Provision; want the key space's lifetime, %v", served, lifetime)
			}
			mu.Lock()
			defer mu.Unlock()
			last := fenceEnd
			if fencedAll {
				last = last.Add(keySpaceRetry)
			}
			if fenceEnd.IsZero() || !lastFenced.Before(last) || len(tooLong) != 0 {
				t.Fatalf("the last fence ends %v; the last fresh claim refused began %v after it; fences longer than the lifetime %v: %v; want a fence, no refusal after %v, none longer",
					fenceEnd, lastFenced.Sub(fenceEnd), lifetime, tooLong, last.Sub(fenceEnd))
			}
		})
	}
}

// derefAll returns the values of markers, "" for a missing one.
func derefAll(markers [Shards]*string) []string {
	out := make([]string, len(markers))
	for i, m := range markers {
		if m != nil {
			out[i] = *m
		}
	}
	return out
}
