package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// DefaultRecheckInterval is how often a Store runs the server checks again
// when Options.RecheckInterval is zero.
const DefaultRecheckInterval = time.Second

// ready runs the server checks once (Open runs them at construction; a
// Store from New before its first call), and again every
// Options.RecheckInterval: in the background of the first call after
// each interval, and while no call comes, from the store's watch (see
// [watch]). It returns the refusal the last check left: a server that
// does not fit the Options ([ErrConfig]) is refused for as long as it
// does not, re-checked every interval; evidence of loss ([ErrFenced])
// until the key space is fenced, after which the fences refuse. A first
// check that fails otherwise (Redis unreachable, clock skew) is tried
// again next call.
func (s *Store) ready(ctx context.Context) error {
	if s.checked.Load() {
		s.recheckIfDue()
		return s.refusal()
	}
	select {
	case s.check <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	defer func() { <-s.check }()
	if s.checked.Load() {
		return s.refusal()
	}
	err := s.checkServer(ctx)
	// A check that failed (a right refused mid-check included, which is
	// ErrConfig too: see wrapErr) is tried again; one that found the
	// server unfit left its refusal.
	if err == nil || s.refusal() != nil {
		s.lastCheck.Store(time.Now().UnixMilli())
		s.checked.Store(true)
	}
	if err != nil {
		return err
	}
	return s.refusal()
}

// recheckIfDue starts a background round of checks when the last one
// started at least RecheckInterval ago, and returns how long until the
// next is due.
func (s *Store) recheckIfDue() time.Duration {
	now := time.Now().UnixMilli()
	last := s.lastCheck.Load()
	if wait := last + s.recheckEvery.Milliseconds() - now; wait > 0 {
		return time.Duration(wait) * time.Millisecond
	}
	if s.lastCheck.CompareAndSwap(last, now) {
		s.recheck()
	}
	return s.recheckEvery
}

// watch runs the server checks of the Store w points to every
// RecheckInterval while no call does (see [Store.recheckIfDue]), from the
// Store's first passed check until stop closes ([Store.Close]) or the
// Store is no longer referenced: w is weak, so a Store the application
// drops without Close is collected, and its watch ends at the next tick.
// Checks that ran only on calls left a key space unwatched while idle: a
// baseline from before a burst (a young server's), compared after an
// idle spell in which the loss counters were reset, could be outgrown by
// the commands that followed the reset (issue 66), and a loss while idle
// was found only once claims came again, racing them. It closes done
// when it ends.
func watch(w weak.Pointer[Store], every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		next, ok := watchTick(w, every)
		if !ok {
			return
		}
		t.Reset(next)
	}
}

// watchTick is one tick of [watch]: it reports false when the Store is
// gone, else how long until the next tick. The Store is referenced only
// during the tick.
func watchTick(w weak.Pointer[Store], every time.Duration) (time.Duration, bool) {
	s := w.Value()
	if s == nil {
		return 0, false
	}
	if !s.checked.Load() {
		return every, true // the first check runs on the first call
	}
	return s.recheckIfDue(), true
}

// recheck runs the server checks in the background, one round at a
// time: asked while a round runs, it runs one more after it.
func (s *Store) recheck() {
	if !s.srv.running.CompareAndSwap(false, true) {
		s.srv.again.Store(true)
		return
	}
	if !s.cancels.start() {
		s.srv.running.Store(false)
		return
	}
	go func() {
		defer s.cancels.wg.Done()
		defer s.srv.running.Store(false)
		timeout := s.timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*timeout)
			s.checkServer(ctx)
			cancel()
			if !s.srv.again.Swap(false) {
				return
			}
		}
	}()
}

// checkSoon has the next call run the server checks at once: a claim
// found its shard's marker missing, so Redis lost data, and its counters
// may say more (a flush, eviction) than that one shard: the whole key
// space is then fenced without waiting for RecheckInterval.
func (s *Store) checkSoon() { s.lastCheck.Store(0) }

// doer is one master to check.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// checkServer checks every master: its identity (run_id), role and
// replicas against the Durability setting, WAITAOF when asked for,
// maxmemory-policy, the loss counters, the persistence settings, and the
// clock. Evidence of loss is acted on ([Store.settle]) before it returns;
// a server that does not fit the Options is remembered as the refusal of
// every call (see [Store.refusal]) until a check finds it fits.
func (s *Store) checkServer(ctx context.Context) error {
	// A finding of moved counters made after this check began may be newer
	// than what it reads: the check that finding asked for lifts it.
	hold := s.srv.hold.Load()
	masters, err := s.mastersErr(ctx)
	if err != nil {
		s.settleLoss(ctx)
		return err
	}
	var found riskSet
	var obs []observation
	var cond, fail error
	for _, m := range masters {
		o, c, err := s.checkMaster(ctx, m, &found)
		if o != nil {
			obs = append(obs, *o)
		}
		if cond == nil {
			cond = c
		}
		if err != nil {
			fail = err
			break
		}
	}
	if fail != nil {
		// Evidence found on the masters checked is acted on; the rest is
		// judged by the next check.
		if hasEvidence(obs) {
			s.settle(ctx, obs)
		} else {
			s.settleLoss(ctx)
		}
		return fail
	}
	s.learnRecordedLifetime(ctx) // lifetime.go: another application's longer lifetime
	s.settle(ctx, obs)
	s.srv.hold.CompareAndSwap(hold, nil) // the counters are judged (see holdForCheck)
	var old *error
	if cond != nil {
		old = s.srv.cond.Swap(&cond)
	} else {
		old = s.srv.cond.Swap(nil)
	}
	switch {
	case !s.checked.Load(): // the first check: its caller gets the error
	case cond != nil && old == nil:
		s.log.Error("redisstore: the server does not fit the store's Options; every call refuses until it does", "prefix", s.prefix, "reason", Reason(cond))
	case cond == nil && old != nil:
		s.log.Info("redisstore: the server fits the store's Options again; calls are served", "prefix", s.prefix)
	}
	if cond != nil {
		return cond
	}
	s.noteRisks(found)
	s.decideLocalAOF(ctx, masters, obs) // durability.go: the implied WAITAOF (issue 46)
	return nil
}

// hasEvidence reports whether an observation shows a loss.
func hasEvidence(obs []observation) bool {
	for _, o := range obs {
		if len(o.evidence) > 0 {
			return true
		}
	}
	return false
}

// settleLoss tries again to fence evidence an earlier check found, when
// this check cannot judge.
func (s *Store) settleLoss(ctx context.Context) {
	if s.srv.loss.Load() != nil {
		s.settle(ctx, nil)
	}
}

// mastersErr lists the masters to check: the Cluster's, or the client.
func (s *Store) mastersErr(ctx context.Context) ([]doer, error) {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return []doer{s.client}, nil
	}
	var masters []doer
	var mu sync.Mutex
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		masters = append(masters, m)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, s.wrapErr(ctx, err)
	}
	if len(masters) == 0 {
		return nil, fmt.Errorf("%w: the cluster reports no master", ErrUnavailable)
	}
	return masters, nil
}

// masters lists the masters, or none when the Cluster cannot say.
func (s *Store) masters(ctx context.Context) []doer {
	m, _ := s.mastersErr(ctx)
	return m
}

// riskSet is the set of risks a server check found that an Allow* option
// accepts.
type riskSet uint32

const (
	riskRollback riskSet = 1 << iota
	riskEviction
	riskAsyncReplicas
	riskFewerReplicas
	numRisks = iota
)

// risks names each risk's option and describes it, by bit.
var risks = [numRisks]struct{ option, risk string }{
	{"AllowRollback", "a restart can bring back older data (RDB snapshots, or AOF without appendfsync always): the newest claims are lost while the fence markers stay"},
	{"AllowEviction", "maxmemory-policy is not noeviction: eviction can drop claims while the fence markers stay"},
	{"AllowAsyncReplicas", "the primary has (or had) replicas and Durability waits for none: a failover can lose acknowledged claims"},
	{"AllowFewerReplicas", "the primary has (or had) more replicas than Durability waits for: promoting one that missed writes loses acknowledged claims"},
}

func (r *riskSet) add(x riskSet) { *r |= x }

// noteRisks reports each risk of found that the previous check did not
// find: one Warn line and one replay.EventRiskAccepted per appearance.
func (s *Store) noteRisks(found riskSet) {
	old := riskSet(s.risks.Swap(uint32(found)))
	for i, r := range risks {
		bit := riskSet(1) << i
		switch {
		case found&bit != 0 && old&bit == 0:
			s.emit(replay.Event{Kind: replay.EventRiskAccepted, Shard: -1, Option: r.option, Risk: r.risk})
		case found&bit == 0 && old&bit != 0:
			s.log.Info("redisstore: a risk an Allow* option accepted is no longer present", "prefix", s.prefix, "option", r.option)
		}
	}
}

// checkMaster checks one master. It returns what it observed (nil when
// it could not tell: not a primary, or an error), the first condition
// that makes the server unfit for the Options (cond, ErrConfig), and an
// error when the checks could not run (ErrUnavailable) or the clock is
// behind (ErrClockSkew).
func (s *Store) checkMaster(ctx context.Context, m doer, found *riskSet) (o *observation, cond, err error) {
	do := func(args ...any) (any, error) {
		type result struct {
			v   any
			err error
		}
		done := make(chan result, 1)
		go func() {
			v, err := m.Do(ctx, args...).Result()
			done <- result{v, err}
		}()
		select {
		case r := <-done:
			return r.v, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	setCond := func(err error) {
		if cond == nil {
			cond = err
		}
	}
	// Rights: every command this store runs, before any of them (see
	// rights.go). A user that lacks one leaves the server unchecked.
	if c, err := s.checkRights(ctx, do); err != nil || c != nil {
		return nil, c, err
	}
	// Identity: the run_id, and what was seen of it before.
	run, persist, old, known, history, err := s.identify(ctx, do, m)
	if err != nil {
		return nil, nil, err
	}
	next := baseline{markers: -1}
	if known {
		next = old
	}
	// ownRole counts the ROLE calls this master answered since old was
	// read (before this check began, or by identify from <prefix>servers):
	// the one below (see resetWitnesses).
	var ownRole int64
	// Role and replicas: those connected now (ROLE), the most this run
	// had while this store watched it, and one when the replication
	// backlog shows a replica was attached and none is connected now (its
	// link is down, or it is paused: it can still be promoted).
	v, err := do("ROLE")
	switch {
	case err != nil:
		return nil, nil, s.wrapErr(ctx, err)
	default:
		role, replicas, ok := parseRole(v)
		if !ok {
			return nil, nil, fmt.Errorf("%w: unexpected reply to ROLE", ErrUnavailable)
		}
		ownRole = 1
		if role != "master" {
			return nil, refuse(ErrConfig, "client points at a Redis that is not a primary", fmt.Errorf("ROLE %s", role)), nil
		}
		away := false
		if replicas == 0 {
			info, err := do("INFO", "replication")
			switch {
			case err != nil:
				return nil, nil, s.wrapErr(ctx, err)
			default:
				away = replicaAway(info)
			}
		}
		next.replicas = max(next.replicas, replicas)
		n := next.replicas
		if away && n == 0 {
			n = 1
		}
		covered := max(s.dur.Replicas, s.dur.ReplicaAOF)
		switch {
		case n == 0:
		case covered == 0 && s.opts.AllowAsyncReplicas:
			found.add(riskAsyncReplicas)
		case covered == 0:
			setCond(refuse(ErrConfig, "Redis has (or had) replicas but Durability waits for none (Replicas or ReplicaAOF): a failover could accept IDs twice; set Durability.Replicas or AllowAsyncReplicas",
				fmt.Errorf("%d replicas connected, %d seen, away %v", replicas, next.replicas, away)))
		case covered < n && s.opts.AllowFewerReplicas:
			found.add(riskFewerReplicas)
		case covered < n:
			setCond(refuse(ErrConfig, "Redis has (or had) more replicas than Durability waits for: promoting one that missed writes accepts IDs twice; set Durability.Replicas to every replica, or AllowFewerReplicas",
				fmt.Errorf("%d replicas connected, %d seen, Durability covers %d", replicas, next.replicas, covered)))
		}
	}
	// WAITAOF exists (Redis 7.2) and can do what is asked.
	if s.dur.waitAOF != nil {
		local := s.dur.waitAOF[1]
		if _, err := do("WAITAOF", local, "0", "0"); err != nil {
			msg := strings.ToLower(err.Error())
			switch {
			case strings.Contains(msg, "unknown command"):
				setCond(refuse(ErrConfig, "Durability asks for WAITAOF, which needs Redis 7.2 or newer", err))
			case strings.HasPrefix(msg, "err"):
				setCond(refuse(ErrConfig, "Durability asks for WAITAOF, which the server refuses", err))
			default:
				return nil, nil, s.wrapErr(ctx, err)
			}
		}
	}
	// Eviction: the policy, and whether it can act (maxmemory set). No
	// other read shows the policy: unread, it is the risk AllowEviction
	// accepts.
	policy, read, err := s.configGet(ctx, do, "maxmemory-policy")
	switch {
	case err != nil:
		return nil, nil, err
	case !read && s.opts.AllowEviction:
		found.add(riskEviction)
	case !read:
		setCond(refuse(ErrConfig, whyPolicyUnread, nil))
	default:
		next.evictable = false
		if policy != "noeviction" {
			v, err := do("CONFIG", "GET", "maxmemory")
			switch {
			case err != nil && !isRefused(err):
				return nil, nil, s.wrapErr(ctx, err)
			case err != nil:
				next.evictable = true // cannot tell: assume it can act
			default:
				mm, ok := configValue(v, "maxmemory")
				next.evictable = !ok || (mm != "0" && mm != "")
			}
			if s.opts.AllowEviction {
				found.add(riskEviction)
			} else {
				setCond(refuse(ErrConfig, "maxmemory-policy is not noeviction: eviction could drop claims unnoticed; set it, or AllowEviction", fmt.Errorf("maxmemory-policy %s", policy)))
			}
		}
	}
	// Loss counters.
	now, countersOK, err := s.readCounters(ctx, do)
	if err != nil {
		return nil, nil, err
	}
	if !countersOK {
		setCond(refuse(ErrConfig, whyCountersUnread, nil))
	} else {
		next.counters = now
		if now.witness && now.resets > 0 {
			s.warnOnce(warnResetStat, "redisstore: CONFIG RESETSTAT has run on this server (INFO commandstats): it zeroes the counters that show evictions and flushes; the store fences for each reset it sees, but a reset made while no store of this key space runs, on a server reset before, is seen only by its duration, or when the commands or ROLE calls after it are fewer than before (docs/fleet-reference.md); forbid it where the store runs (ACL -config|resetstat)")
		}
	}
	// Persistence.
	p, c, err := s.checkPersistence(ctx, do)
	if err != nil {
		return nil, nil, err
	}
	if c != nil {
		if s.opts.AllowRollback {
			found.add(riskRollback)
		} else {
			setCond(c)
		}
	}
	if p.aofRead {
		next.aof = p.aof
	}
	if p.fsyncRead {
		next.fsyncAlways = p.fsyncAlways
	}
	// Fence markers (the client's one server).
	master := masterKey(m)
	if next.markers, err = s.countMarkers(ctx, do); err != nil {
		return nil, nil, err
	}
	if !known && !history {
		// <prefix>servers knows no server, yet the key space may have
		// lived: its markers (or ledger) say so. An LRU eviction takes the
		// coldest keys first, and the baselines are read only when a Store
		// starts: a key space that lost them is not a new one.
		if history, err = s.livedBefore(ctx, next.markers); err != nil {
			return nil, nil, err
		}
	}
	if countersOK && !known && !history && now.evicted > 0 && !s.opts.AllowEviction {
		s.warnOnce(warnEvictedBefore, "redisstore: the server evicted keys before this key space knew it (INFO stats evicted_keys); if they were claims of this prefix, they may be accepted again")
	}
	var was *baseline
	if known {
		was = &old
	}
	ob := &observation{master: master, run: run, persist: persist, next: next,
		aofAlways: p.fsyncRead && p.aof && p.fsyncAlways, counted: countersOK}
	prev := s.previous(master, run)
	ob.evidence = judge(was, next, countersOK, prev, history, s.opts.AllowEviction, ownRole)
	if len(ob.evidence) > 0 && known && persist {
		// Another Store of the fleet may have fenced this evidence
		// already and kept what it saw: then it is consumed (an operator
		// may have reopened the key space since). Only another Store's
		// entry can say so: this Store's own is the baseline it judged by
		// (or older), and it counts no ROLE call owed to it (the entry
		// may have been read after this check's ROLE).
		// An entry without the reset witnesses (an older Store's, or
		// one on a Ring) cannot judge what only they show: it does not
		// consume evidence this check read with them.
		b, _, readable, mine, err := s.loadBaseline(ctx, run)
		if err != nil {
			return nil, nil, err
		}
		if readable && !mine && (b.witness || !next.witness) &&
			len(judge(&b, next, countersOK, prev, history, s.opts.AllowEviction, 0)) == 0 {
			ob.evidence, ob.consumed = nil, true
		}
	}
	if !countersOK && known {
		ob.next.counters = old.counters
	}
	// Clock.
	v, err = do("TIME")
	if err != nil {
		return ob, cond, s.wrapErr(ctx, err)
	}
	redisNow, ok := parseTime(v)
	if !ok {
		return ob, cond, fmt.Errorf("%w: unexpected reply to TIME", ErrUnavailable)
	}
	if behind := redisNow.Sub(s.now()); behind > s.maxSkew {
		return ob, cond, refuse(ErrClockSkew, whySkew, fmt.Errorf("%w: behind by %v", ErrUnavailable, behind.Round(time.Millisecond)))
	}
	return ob, cond, nil
}

// checkPersistence reads the persistence settings and refuses (cond) a
// master whose restart can bring back older data: the fence markers
// survive such a rollback while the newest claims do not, so the loss is
// not seen. A restart must bring back everything acknowledged (AOF with
// appendfsync always, with or without Durability.LocalAOF: WAITAOF does
// not prove the fsync under everysec, see below) or nothing (no AOF and no RDB snapshots: the markers are gone
// too, and the shard is fenced). Where CONFIG GET cannot read them
// (refused, renamed away: managed services) they are judged from INFO
// persistence ([persistenceFromInfo]). Persistence weakened on a server
// that had it is judged as evidence of loss (see judge), not here.
func (s *Store) checkPersistence(ctx context.Context, do func(args ...any) (any, error)) (p persistence, cond, err error) {
	var aof, fsyncAlways bool
	// errUnread: CONFIG GET refused (managed services) or answered
	// unexpectedly.
	errUnread := errors.New("unread")
	get := func(name string) (string, error) {
		value, read, err := s.configGet(ctx, do, name)
		if err == nil && !read {
			err = errUnread
		}
		return value, err
	}
	err = func() error {
		ao, err := get("appendonly")
		if err != nil {
			return err
		}
		switch ao {
		case "yes":
			aof = true
			fsync, err := get("appendfsync")
			switch {
			case err != nil:
				return err
			case fsync == "always":
				fsyncAlways = true
			case s.dur.LocalAOF:
				// WAITAOF's local count is not a proof of the fsync under
				// everysec: Valkey 8 and Redis 7.4 until February 2025
				// report it when less than a second has passed since the
				// last one, before the data written since is synced
				// (redis/redis#13793).
				cond = refuse(ErrConfig, "Durability.LocalAOF with appendfsync not always: WAITAOF can acknowledge the local fsync before it ran (Valkey 8, Redis 7.4 until redis/redis#13793, February 2025), so a machine crash can lose acknowledged claims while the fence markers survive; set appendfsync always, or AllowRollback",
					fmt.Errorf("appendfsync %s", fsync))
			default:
				cond = refuse(ErrConfig, "AOF with appendfsync not always: a machine crash restarts Redis without the last claims and with the fence markers, so those IDs are accepted again; set appendfsync always, or AllowRollback",
					fmt.Errorf("appendfsync %s", fsync))
			}
			return nil
		case "no":
			save, err := get("save")
			if err != nil {
				return err
			}
			if strings.TrimSpace(save) != "" {
				cond = refuse(ErrConfig, "RDB snapshots without AOF: a restart loads a snapshot with the fence markers and without the later claims, so those IDs are accepted again; turn snapshots off (save \"\"), use AOF with appendfsync always, or AllowRollback",
					fmt.Errorf("save %q", save))
			}
			return nil
		}
		return errUnread
	}()
	if err == errUnread {
		v, err := do("INFO", "persistence")
		if err != nil {
			return persistence{}, nil, s.wrapErr(ctx, err)
		}
		p, cond := persistenceFromInfo(v)
		return p, cond, nil
	}
	if err != nil {
		return persistence{}, nil, err
	}
	return persistence{aof: aof, fsyncAlways: fsyncAlways, aofRead: true, fsyncRead: true}, cond, nil
}

// persistence is what a check read of a master's persistence: AOF on,
// appendfsync always, and whether each was read.
type persistence struct {
	aof, fsyncAlways   bool
	aofRead, fsyncRead bool
}

// persistenceFromInfo judges the persistence of a master whose settings
// CONFIG GET cannot read, from INFO persistence: aof_enabled tells AOF,
// which the baseline keeps (AOF switched off later is evidence of loss);
// appendfsync and the save points show nowhere else. So the restart's
// rollback is always refused (cond), unless AllowRollback: AOF whose
// appendfsync cannot be read; RDB snapshots taken (rdb_saves, or one in
// progress: a restart loads the newest); or neither yet, which a save
// point not yet reached does not rule out. Redis 7 and Valkey 8 report
// each field.
func persistenceFromInfo(info any) (persistence, error) {
	switch aof := infoValue(info, "aof_enabled"); aof {
	case "1":
		return persistence{aof: true, aofRead: true}, refuse(ErrConfig, "appendfsync cannot be read (CONFIG GET refused or renamed away; INFO persistence shows AOF on): unless it is always, a machine crash restarts Redis without the last claims and with the fence markers, so those IDs are accepted again; add +config|get to the user's ACL, or set AllowRollback", nil)
	case "0":
	default:
		return persistence{}, refuse(ErrConfig, "the persistence settings cannot be read (CONFIG GET refused or renamed away, INFO persistence without aof_enabled): a restart could bring back older data unnoticed; add +config|get to the user's ACL, or set AllowRollback", nil)
	}
	p := persistence{aofRead: true, fsyncRead: true}
	saves, _ := strconv.ParseInt(infoValue(info, "rdb_saves"), 10, 64)
	if saves > 0 || infoValue(info, "rdb_bgsave_in_progress") == "1" {
		return p, refuse(ErrConfig, "RDB snapshots without AOF (INFO persistence: rdb_saves): a restart loads a snapshot with the fence markers and without the later claims, so those IDs are accepted again; turn snapshots off (save \"\") and delete the dump, use AOF with appendfsync always, or AllowRollback",
			fmt.Errorf("rdb_saves %d", saves))
	}
	return p, refuse(ErrConfig, "whether RDB snapshots are on cannot be read (CONFIG GET refused or renamed away; INFO persistence shows AOF off and no snapshot yet, which a save point not yet reached does not rule out): a restart could load a snapshot without the later claims; add +config|get to the user's ACL, or set AllowRollback", nil)
}

// masterKey names a master behind the client: its address when known
// (a Cluster's masters), else "" (the one server of the client). It is
// not the server's identity (see identify): a Sentinel failover client
// keeps its address across a failover.
func masterKey(m doer) string {
	if c, ok := m.(*redis.Client); ok && c.Options() != nil {
		return c.Options().Addr
	}
	return ""
}

// Refusals of a fact the checks cannot read.
const (
	whyPolicyUnread   = "maxmemory-policy cannot be read (CONFIG GET refused or renamed away, or answered unexpectedly), and nothing else shows it: an evicting policy would drop claims unnoticed; add +config|get to the user's ACL, or set AllowEviction"
	whyCountersUnread = "the loss counters cannot be read (INFO stats evicted_keys and INFO commandstats answered unexpectedly): evictions, flushes and resets would go unseen"
)

// What warnOnce has warned about.
const (
	warnRunID = 1 << iota
	warnEvictedBefore
	warnResetStat // never cleared: once per Store
)

// warnOnce logs msg once until the condition is cleared from s.warned.
func (s *Store) warnOnce(bit uint32, msg string) {
	if s.warned.Or(bit)&bit == 0 {
		s.log.Warn(msg, "prefix", s.prefix)
	}
}

// replicaAway reports whether INFO replication shows that a replica was
// attached although none is connected now: a replication backlog, which a
// primary keeps from a replica's first sync until repl-backlog-ttl (3600 s
// by default) after the last one left. (master_repl_offset is no
// evidence: with AOF, Redis 7.2 and Valkey advance it without replicas.)
func replicaAway(info any) bool {
	text, ok := info.(string)
	if !ok {
		return false
	}
	for _, line := range strings.Split(text, "\n") {
		if k, v, _ := strings.Cut(strings.TrimSpace(line), ":"); k == "repl_backlog_active" && v == "1" {
			return true
		}
	}
	return false
}

// isRefused reports a server error reply that refuses the command itself
// (unknown, renamed or forbidden), as opposed to a transport failure.
func isRefused(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "noperm") || strings.Contains(msg, "no permissions")
}

// parseRole reads ROLE: {"master", offset, {{ip, port, offset}, ...}}.
func parseRole(v any) (role string, replicas int, ok bool) {
	r, isSlice := v.([]any)
	if !isSlice || len(r) == 0 {
		return "", 0, false
	}
	role, ok = r[0].(string)
	if !ok {
		return "", 0, false
	}
	if role != "master" {
		return role, 0, true
	}
	if len(r) < 3 {
		return "", 0, false
	}
	reps, isSlice := r[2].([]any)
	if !isSlice {
		return "", 0, false
	}
	return role, len(reps), true
}

// configGet reads one setting with CONFIG GET through do: read is false
// when the server refuses the command or answers unexpectedly (managed
// services, ACLs); err is a transport failure (ErrUnavailable).
func (s *Store) configGet(ctx context.Context, do func(args ...any) (any, error), name string) (value string, read bool, err error) {
	v, err := do("CONFIG", "GET", name)
	switch {
	case err != nil && isRefused(err):
		return "", false, nil
	case err != nil:
		return "", false, s.wrapErr(ctx, err)
	}
	value, read = configValue(v, name)
	return value, read, nil
}

// doOn is m's Do as the checks call it.
func doOn(ctx context.Context, m doer) func(args ...any) (any, error) {
	return func(args ...any) (any, error) { return m.Do(ctx, args...).Result() }
}

// configValue reads CONFIG GET's reply (a map in RESP3, a flat list in RESP2).
func configValue(v any, name string) (string, bool) {
	switch r := v.(type) {
	case map[any]any:
		s, ok := r[name].(string)
		return s, ok
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if k, _ := r[i].(string); k == name {
				s, ok := r[i+1].(string)
				return s, ok
			}
		}
	}
	return "", false
}

// parseTime reads TIME: {seconds, microseconds} as strings.
func parseTime(v any) (time.Time, bool) {
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return time.Time{}, false
	}
	var sec, usec int64
	for i, p := range []*int64{&sec, &usec} {
		s, ok := r[i].(string)
		if !ok {
			return time.Time{}, false
		}
		if _, err := fmt.Sscan(s, p); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(sec, usec*1000), true
}
