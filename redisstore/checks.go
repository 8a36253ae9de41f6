package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRecheckInterval is how often a Store runs the server checks again
// when Options.RecheckInterval is zero.
const DefaultRecheckInterval = time.Second

// ready runs the server checks once (Open runs them at construction; a
// Store from New before its first call), and again in the background of
// the first call after each Options.RecheckInterval. A failed check that is a misconfiguration is
// remembered and returned by every later call; one that is not (Redis
// unreachable, clock skew) is tried again next call.
func (s *Store) ready(ctx context.Context) error {
	if p := s.checkErr.Load(); p != nil {
		return *p
	}
	if s.checked.Load() {
		if last := s.lastCheck.Load(); time.Now().UnixMilli()-last >= s.recheckEvery.Milliseconds() &&
			s.lastCheck.CompareAndSwap(last, time.Now().UnixMilli()) {
			s.recheck()
		}
		return nil
	}
	select {
	case s.check <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	defer func() { <-s.check }()
	if s.checked.Load() {
		return nil
	}
	if p := s.checkErr.Load(); p != nil {
		return *p
	}
	err := s.checkServer(ctx)
	switch {
	case err == nil:
		s.lastCheck.Store(time.Now().UnixMilli())
		s.checked.Store(true)
	case errors.Is(err, ErrConfig):
		s.checkErr.Store(&err)
	}
	return err
}

// recheck runs the server checks in the background; a misconfiguration it
// finds makes every later call refuse.
func (s *Store) recheck() {
	if !s.cancels.start() {
		return
	}
	go func() {
		defer s.cancels.wg.Done()
		timeout := s.timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*timeout)
		defer cancel()
		if err := s.checkServer(ctx); errors.Is(err, ErrConfig) {
			s.checkErr.Store(&err)
			s.log.Error("redisstore: the server no longer fits the store's Options; every call refuses", "prefix", s.prefix, "reason", Reason(err))
			if errors.Is(err, errDrift) {
				s.fenceAll(ctx, s.anySawAOF())
			}
		}
	}()
}

// doer is one master to check.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// checkServer checks every master: its role and replicas against the
// Durability setting, WAITAOF when asked for, maxmemory-policy, the
// persistence settings, and the clock.
func (s *Store) checkServer(ctx context.Context) error {
	masters, err := s.mastersErr(ctx)
	if err != nil {
		return err
	}
	var found riskSet
	for _, m := range masters {
		if err := s.checkMaster(ctx, m, &found); err != nil {
			return err
		}
	}
	s.noteRisks(found)
	s.decideLocalAOF(ctx, masters) // durability.go: the implied WAITAOF (issue 46)
	return nil
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
// find: one Warn line and one EventRiskAccepted per appearance.
func (s *Store) noteRisks(found riskSet) {
	old := riskSet(s.risks.Swap(uint32(found)))
	for i, r := range risks {
		bit := riskSet(1) << i
		switch {
		case found&bit != 0 && old&bit == 0:
			s.emit(Event{Kind: EventRiskAccepted, Shard: -1, Option: r.option, Risk: r.risk})
		case found&bit == 0 && old&bit != 0:
			s.log.Info("redisstore: a risk an Allow* option accepted is no longer present", "prefix", s.prefix, "option", r.option)
		}
	}
}

func (s *Store) checkMaster(ctx context.Context, m doer, found *riskSet) error {
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
	// Role and replicas: those connected now (ROLE), the most this store
	// saw before, and one when the replication backlog shows a replica was
	// attached and none is connected now (its link is down, or it is
	// paused: it can still be promoted).
	v, err := do("ROLE")
	switch {
	case err != nil && isRefused(err):
		if !s.dur.on() && !s.opts.AllowAsyncReplicas {
			return refuse(ErrConfig, "cannot read ROLE to check for replicas; set Durability or AllowAsyncReplicas", fmt.Errorf("%w", err))
		}
	case err != nil:
		return s.wrapErr(ctx, err)
	default:
		role, replicas, ok := parseRole(v)
		if !ok {
			return fmt.Errorf("%w: unexpected reply to ROLE", ErrUnavailable)
		}
		if role != "master" {
			return refuse(ErrConfig, "client points at a Redis that is not a primary", fmt.Errorf("ROLE %s", role))
		}
		away := false
		if replicas == 0 {
			info, err := do("INFO", "replication")
			switch {
			case err != nil && isRefused(err):
			case err != nil:
				return s.wrapErr(ctx, err)
			default:
				away = replicaAway(info)
			}
		}
		for {
			seen := s.seenReplicas.Load()
			if int64(replicas) <= seen || s.seenReplicas.CompareAndSwap(seen, int64(replicas)) {
				break
			}
		}
		n := max(replicas, int(s.seenReplicas.Load()))
		if away && n == 0 {
			n = 1
		}
		covered := max(s.dur.Replicas, s.dur.ReplicaAOF)
		switch {
		case n == 0:
		case covered == 0 && s.opts.AllowAsyncReplicas:
			found.add(riskAsyncReplicas)
		case covered == 0:
			return refuse(ErrConfig, "Redis has (or had) replicas but Durability waits for none (Replicas or ReplicaAOF): a failover could accept IDs twice; set Durability.Replicas or AllowAsyncReplicas",
				fmt.Errorf("%d replicas connected, %d seen, away %v", replicas, s.seenReplicas.Load(), away))
		case covered < n && s.opts.AllowFewerReplicas:
			found.add(riskFewerReplicas)
		case covered < n:
			return refuse(ErrConfig, "Redis has (or had) more replicas than Durability waits for: promoting one that missed writes accepts IDs twice; set Durability.Replicas to every replica, or AllowFewerReplicas",
				fmt.Errorf("%d replicas connected, %d seen, Durability covers %d", replicas, s.seenReplicas.Load(), covered))
		}
	}
	// WAITAOF exists (Redis 7.2) and can do what is asked.
	if s.dur.waitAOF != nil {
		local := s.dur.waitAOF[1]
		if _, err := do("WAITAOF", local, "0", "0"); err != nil {
			msg := strings.ToLower(err.Error())
			switch {
			case strings.Contains(msg, "unknown command"):
				return refuse(ErrConfig, "Durability asks for WAITAOF, which needs Redis 7.2 or newer", err)
			case strings.HasPrefix(msg, "err"):
				return refuse(ErrConfig, "Durability asks for WAITAOF, which the server refuses", err)
			}
			return s.wrapErr(ctx, err)
		}
	}
	// Eviction.
	v, err = do("CONFIG", "GET", "maxmemory-policy")
	switch {
	case err != nil && isRefused(err):
		s.warnOnce(warnPolicy, "redisstore: cannot read maxmemory-policy (CONFIG GET refused); make sure it is noeviction")
	case err != nil:
		return s.wrapErr(ctx, err)
	default:
		policy, ok := configValue(v, "maxmemory-policy")
		if !ok {
			s.warnOnce(warnPolicy, "redisstore: cannot read maxmemory-policy (unexpected CONFIG GET reply); make sure it is noeviction")
		} else if s.warned.And(^uint32(warnPolicy)); policy != "noeviction" && s.opts.AllowEviction {
			found.add(riskEviction)
		} else if policy != "noeviction" {
			return refuse(ErrConfig, "maxmemory-policy is not noeviction: eviction could drop claims unnoticed; set it, or AllowEviction", fmt.Errorf("maxmemory-policy %s", policy))
		}
	}
	// Persistence.
	if err := s.checkPersistence(ctx, do, masterKey(m)); err != nil {
		if !errors.Is(err, ErrConfig) || !s.opts.AllowRollback || errors.Is(err, errDrift) {
			return err
		}
		found.add(riskRollback)
	}
	// Clock.
	v, err = do("TIME")
	if err != nil {
		return s.wrapErr(ctx, err)
	}
	redisNow, ok := parseTime(v)
	if !ok {
		return fmt.Errorf("%w: unexpected reply to TIME", ErrUnavailable)
	}
	if behind := redisNow.Sub(s.now()); behind > s.maxSkew {
		return refuse(ErrClockSkew, whySkew, fmt.Errorf("%w: behind by %v", ErrUnavailable, behind.Round(time.Millisecond)))
	}
	return nil
}

// checkPersistence refuses a master whose restart can bring back older
// data: the fence markers survive such a rollback while the newest claims
// do not, so the loss is not seen. A restart must bring back everything
// acknowledged (AOF with appendfsync always, or with Durability.LocalAOF,
// which waits for the fsync) or nothing (no AOF and no RDB snapshots: the
// markers are gone too, and the shard is fenced).
func (s *Store) checkPersistence(ctx context.Context, do func(args ...any) (any, error), master string) error {
	seen := s.persistenceSeen(master)
	// errUnread: CONFIG GET refused (managed services) or answered
	// unexpectedly; the store runs and says it could not check.
	errUnread := errors.New("unread")
	get := func(name string) (string, error) {
		v, err := do("CONFIG", "GET", name)
		switch {
		case err != nil && isRefused(err):
			return "", errUnread
		case err != nil:
			return "", s.wrapErr(ctx, err)
		}
		value, ok := configValue(v, name)
		if !ok {
			return "", errUnread
		}
		return value, nil
	}
	err := func() error {
		aof, err := get("appendonly")
		if err != nil {
			return err
		}
		switch aof {
		case "yes":
			seen.aof.Store(true)
			if s.dur.LocalAOF {
				return nil // every write waits for WAITAOF's local fsync
			}
			fsync, err := get("appendfsync")
			switch {
			case err == nil && fsync == "always":
				seen.fsyncAlways.Store(true)
			case err == nil && seen.fsyncAlways.Load():
				err = refuse(ErrConfig, "appendfsync weakened after Open: claims acknowledged since may be lost by a machine crash while the fence markers stay; the key space is fenced for one horizon",
					fmt.Errorf("%w: appendfsync %s", errDrift, fsync))
			case err == nil:
				err = refuse(ErrConfig, "AOF with appendfsync not always: a machine crash restarts Redis without the last claims and with the fence markers, so those IDs are accepted again; set appendfsync always, Durability.LocalAOF, or AllowRollback",
					fmt.Errorf("appendfsync %s", fsync))
			}
			return err
		case "no":
			if seen.aof.Load() {
				// CONFIG SET appendonly no leaves the old AOF on disk,
				// and a start with the configuration file loads it.
				return refuse(ErrConfig, "AOF switched off after Open: the next start may load the old AOF, with the fence markers and without the later claims; the key space is fenced for one horizon",
					fmt.Errorf("%w: appendonly no", errDrift))
			}
			save, err := get("save")
			if err == nil && strings.TrimSpace(save) != "" {
				err = refuse(ErrConfig, "RDB snapshots without AOF: a restart loads a snapshot with the fence markers and without the later claims, so those IDs are accepted again; turn snapshots off (save \"\"), use AOF with appendfsync always, or AllowRollback",
					fmt.Errorf("save %q", save))
			}
			return err
		}
		return errUnread
	}()
	if err == errUnread {
		s.warnOnce(warnPersistence, "redisstore: cannot read the persistence settings (CONFIG GET refused or unexpected); make sure a restart cannot bring back older data: AOF with appendfsync always, or no persistence")
		return nil
	}
	s.warned.And(^uint32(warnPersistence))
	return err
}

// persistence is what the checks saw of one master's persistence: a
// later check that sees less is a drift.
type persistence struct{ aof, fsyncAlways atomic.Bool }

// persistenceSeen returns what the checks saw of the master named key.
func (s *Store) persistenceSeen(key string) *persistence {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	if s.seen == nil {
		s.seen = map[string]*persistence{}
	}
	p, ok := s.seen[key]
	if !ok {
		p = new(persistence)
		s.seen[key] = p
	}
	return p
}

// anySawAOF reports whether a check saw AOF on any master.
func (s *Store) anySawAOF() bool {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	for _, p := range s.seen {
		if p.aof.Load() {
			return true
		}
	}
	return false
}

// masterKey names a master for persistenceSeen: its address when known
// (a Cluster's masters), else "" (the one server of the client).
func masterKey(m doer) string {
	if c, ok := m.(*redis.Client); ok && c.Options() != nil {
		return c.Options().Addr
	}
	return ""
}

// errDrift marks a refusal for a persistence setting weakened after the
// store first checked the server: the key space is fenced as well.
var errDrift = errors.New("persistence weakened after Open")

// What warnOnce has warned about.
const (
	warnPersistence = 1 << iota
	warnPolicy
)

// warnOnce logs msg once until the condition is cleared from s.warned.
func (s *Store) warnOnce(bit uint32, msg string) {
	if s.warned.Or(bit)&bit == 0 {
		s.log.Warn(msg, "prefix", s.prefix)
	}
}

// fenceAll fences every shard of the key space for one horizon from
// Redis's clock (a later fence already there is kept) and, when AOF was
// switched off, has each master rewrite its AOF (BGREWRITEAOF) so the
// file the next start may load holds the fences and every claim so far.
// It reports each shard to the Observer and logs one line.
func (s *Store) fenceAll(ctx context.Context, rewrite bool) {
	fenced := 0
	var until time.Time
	for i, m := range s.tags {
		v, err := s.call(ctx, "EVAL", fenceScript, 1, m, s.horizonArg)
		ms, ok := v.(int64)
		if err != nil || !ok {
			s.log.Error("redisstore: could not fence the key space after its persistence was weakened", "prefix", s.prefix, "shard", i)
			continue
		}
		fenced++
		until = time.UnixMilli(ms)
		if s.opts.Observer != nil {
			s.opts.Observer(Event{Kind: EventFenceRaised, Shard: i, Until: until})
		}
	}
	if rewrite {
		for _, m := range s.masters(ctx) {
			if err := m.Do(ctx, "BGREWRITEAOF").Err(); err != nil && !strings.Contains(strings.ToLower(err.Error()), "already in progress") {
				s.log.Error("redisstore: could not rewrite the AOF after it was switched off; the next start may load claims without their fences", "prefix", s.prefix, "error", err)
			}
		}
	}
	s.log.Error("redisstore: persistence weakened after Open: the key space is fenced for one horizon and every call of this store refuses", "prefix", s.prefix, "shards", fenced, "until", until)
}

// fenceScript fences one shard: KEYS[1] the marker, ARGV[1] the horizon
// (ms). It returns when the fence opens (ms, Redis's clock).
const fenceScript = `local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local m = redis.call('GET', KEYS[1])
if m and string.sub(m, 1, 1) == 'F' and tonumber(string.sub(m, 2)) and tonumber(string.sub(m, 2)) >= f then
  return tonumber(string.sub(m, 2))
end
redis.call('SET', KEYS[1], string.format('F%.0f', f))
return f`

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
