package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// Evidence of loss, on a run_id seen before (by this Store or, through
// <prefix>servers, by another):
//
//   - evicted_keys grew (INFO stats), unless AllowEviction;
//   - eviction became possible (maxmemory-policy not noeviction, with
//     maxmemory > 0), unless AllowEviction;
//   - SWAPDB, FLUSHALL or FLUSHDB ran (their calls in INFO commandstats
//     grew);
//   - CONFIG RESETSTAT ran: it zeroes the loss counters, so the evictions
//     and flushes between the last check and the reset are hidden, and
//     nothing proves there were none. Every witness of a reset is
//     evidence (see [resetWitnesses]): a loss counter or
//     total_commands_processed (INFO stats) went down; the reset's own
//     entry in INFO commandstats appeared (cmdstat_config|resetstat,
//     which counts the reset itself: calls=1 after any reset, absent
//     before the first) or changed (its usec: another reset); or ROLE's
//     calls are fewer than the last check read plus the one this check
//     ran. See docs/fleet-reference.md for what stays unseen;
//   - AOF switched off, or appendfsync no longer always, on the same server
//     (the next start may load the old AOF, or a machine crash lose the
//     last second, with the fence markers and without the later claims).
//
// And behind one client (not a Cluster): a new run_id with fewer fence
// markers than the previous run had (a restart without persistence).
//
// A run_id never seen before (a restart, a failover, a first Open) is
// checked as Open checks a server; its counters are taken as they are,
// except that keys it evicted count as loss when the key space lived
// before (<prefix>servers knows another server, or a shard marker or a
// ledger entry is there while no baseline is): a restarted server
// evicted after it loaded our data, a promoted replica does not evict by
// itself (replica-ignore-maxmemory), so either evicted claims, and an
// eviction under an allkeys policy can take <prefix>servers with the
// claims. For the same reason a CONFIG RESETSTAT it counts
// (cmdstat_config|resetstat) is loss there: it zeroed evicted_keys, and
// no baseline from before it proves there was nothing to count. Its
// FLUSHALL, FLUSHDB and SWAPDB calls are not: a promoted replica counts
// the ones it replicated, which the store watching the old primary saw, and
// a flush since a restart leaves markers missing, which fences. A key
// space that knows no server (first deploy, or an upgrade) takes every
// counter as it is: a Redis that evicted other applications' keys long ago
// must not fence a new prefix; a Warn line says it.
//
// On evidence the store refuses every call at once (ErrFenced), then
// fences every shard ([Store.fenceAll]: one ledger entry, one
// replay.EventFenceRaised per shard) and takes what it saw as the new baseline;
// the fences then refuse, until they open or an operator reopens the key
// space. When the fence cannot be written, every call keeps refusing and
// the next check tries again; the baseline is not updated until it is, so
// a new Store compares with the old one and finds the evidence again (lost
// only when the server restarts too before any fence was written).

// refusal is what every call returns while evidence of loss waits for its
// fence, or while the server does not fit the Options; nil otherwise.
func (s *Store) refusal() error {
	if p := s.srv.loss.Load(); p != nil {
		return refuse(ErrFenced, whyLossSeen, errors.New(*p))
	}
	if p := s.srv.cond.Load(); p != nil {
		return *p
	}
	return nil
}

// held is the refusal of a step that can take a free ID while a script's
// finding that the loss counters moved waits for a check (see
// [Store.holdForCheck]); nil otherwise.
func (s *Store) held() error {
	if p := s.srv.hold.Load(); p != nil {
		return *p
	}
	return nil
}

// whyLossSeen is the refusal of a store that found evidence of loss and
// has not yet fenced the key space.
const whyLossSeen = "the server reported a loss of data (eviction, a flush, SWAPDB, persistence weakened, or a restart without persistence): the key space is being fenced until every claim made before the loss has expired"

// observation is what one check of one master read and judged.
type observation struct {
	master   string // master key (see servers.current)
	run      string // run_id, or "addr:<address>"
	persist  bool   // a real run_id: kept in <prefix>servers
	next     baseline
	evidence []string // what shows a loss, for the log and the ledger
	// aofAlways: the check read appendonly yes and appendfsync always
	// (see [Store.decideLocalAOF]).
	aofAlways bool
	// consumed: the evidence this check found was fenced by another Store
	// (or an operator's ctoken-store), whose baseline in <prefix>servers
	// covers it.
	consumed bool
	// counted: the check read the loss counters (next.counters).
	counted bool
}

// readCounters reads the loss counters (INFO stats, INFO commandstats);
// ok is false when the server refuses INFO or answers unexpectedly.
func (s *Store) readCounters(ctx context.Context, do func(args ...any) (any, error)) (c counters, ok bool, err error) {
	stats, err := do("INFO", "stats")
	switch {
	case err != nil && isRefused(err):
		return c, false, nil
	case err != nil:
		return c, false, s.wrapErr(ctx, err)
	}
	ev := infoValue(stats, "evicted_keys")
	if ev == "" {
		return c, false, nil
	}
	if c.evicted, err = strconv.ParseInt(ev, 10, 64); err != nil {
		return c, false, nil
	}
	cmds, err := do("INFO", "commandstats")
	switch {
	case err != nil && isRefused(err):
		return c, false, nil
	case err != nil:
		return c, false, s.wrapErr(ctx, err)
	}
	text, isText := cmds.(string)
	if !isText {
		return c, false, nil
	}
	// total_commands_processed is not a loss counter: without it (a
	// server that does not report it) a reset is seen only by the others.
	c.commands, _ = strconv.ParseInt(infoValue(stats, "total_commands_processed"), 10, 64)
	c.commands = max(c.commands, 0)
	c.swapdb = cmdCalls(text, "swapdb")
	c.flushall = cmdCalls(text, "flushall")
	c.flushdb = cmdCalls(text, "flushdb")
	if _, ring := s.client.(*redis.Ring); !ring {
		// A Ring sends each keyless command to a shard of its choice: the
		// counts of one read may come from two servers.
		c.resets = cmdCalls(text, "config|resetstat")
		c.resetUsec = cmdStat(text, "config|resetstat", "usec")
		c.role = cmdCalls(text, "role")
		c.witness = true
		if c.errs, c.bumped, err = s.readWitness(ctx, do); err != nil {
			return c, false, err
		}
	}
	return c, true, nil
}

// witnessScript answers ARGV[1] as an error reply: a check's bump of the
// key space's reset witness (see [Store.readWitness]).
const witnessScript = `return redis.error_reply(ARGV[1])`

// witnessCode is the key space's own error code: the name under which
// INFO errorstats counts the bumps of its checks (errorstat_<code>). It
// is one word, the same for every Store of the prefix (a hash of it:
// two prefixes sharing one only share a count).
func (s *Store) witnessCode() string {
	h := fnv.New32a()
	h.Write([]byte(s.prefix))
	return fmt.Sprintf("CTOKEN-WITNESS-%08x", h.Sum32())
}

// readWitness bumps the key space's reset witness on the server do
// reaches, then reads it: one error reply with the key space's own code
// (witnessScript), whose count INFO errorstats keeps, and which CONFIG
// RESETSTAT zeroes with every other statistic. Only the checks of this
// key space's Stores answer that code, one per check and after judging
// the counters, so what follows a reset regrows it only by their bumps:
// the first check after a reset finds it below its baseline plus its
// own bump (resetWitnesses), whatever traffic ran since, and so does
// every script of this store that can take a free ID (countersLua),
// before any check has run. It is what lets the scripts see a reset
// that more commands than the server had run since have hidden from
// total_commands_processed (issue 105). n is 0 when the count is absent
// (a server that counts no error reply of a script, or errorstats full:
// 128 codes on Valkey 8 and Redis 7.2); bumped reports that the bump was
// answered.
func (s *Store) readWitness(ctx context.Context, do func(args ...any) (any, error)) (n int64, bumped bool, err error) {
	code := s.witnessCode()
	_, err = do("EVAL", witnessScript, 0, code+" the CONFIG RESETSTAT witness of a ctoken redisstore key space, answered on purpose")
	var re redis.Error
	switch {
	case err != nil && errors.As(err, &re):
		bumped = strings.HasPrefix(err.Error(), code+" ")
	case err != nil:
		return 0, false, s.wrapErr(ctx, err)
	}
	v, err := do("INFO", "errorstats")
	switch {
	case err != nil && isRefused(err):
		return 0, bumped, nil
	case err != nil:
		return 0, false, s.wrapErr(ctx, err)
	}
	text, _ := v.(string)
	n, _ = strconv.ParseInt(strings.TrimPrefix(infoValue(text, "errorstat_"+code), "count="), 10, 64)
	if n == 0 {
		s.warnOnce(warnWitness, "redisstore: INFO errorstats does not count the key space's reset witness (errorstat_"+code+"), so the scripts see a CONFIG RESETSTAT only until the commands after it outnumber those before it; on Valkey 8 and Redis 7.2 errorstats counts at most 128 error codes: CONFIG RESETSTAT clears them (the store fences once for it)")
	} else {
		s.warned.And(^uint32(warnWitness))
	}
	return max(n, 0), bumped, nil
}

// warnWitness: warnOnce has warned that the reset witness is not counted.
const warnWitness = warnResetStat << 1

// cmdCalls reads calls=N of cmdstat_<name> in INFO commandstats; 0 when
// the command never ran.
func cmdCalls(text, name string) int64 { return cmdStat(text, name, "calls") }

// cmdStat reads the field of cmdstat_<name> in INFO commandstats (calls,
// usec); 0 when the command never ran.
func cmdStat(text, name, field string) int64 {
	v := infoValue(text, "cmdstat_"+name)
	for _, kv := range strings.Split(v, ",") {
		if k, n, _ := strings.Cut(kv, "="); k == field {
			c, _ := strconv.ParseInt(n, 10, 64)
			return max(c, 0)
		}
	}
	return 0
}

// infoValue reads one field of an INFO reply; "" when absent.
func infoValue(info any, field string) string {
	text, ok := info.(string)
	if !ok {
		return ""
	}
	for _, line := range strings.Split(text, "\n") {
		if k, v, _ := strings.Cut(strings.TrimSpace(line), ":"); k == field {
			return v
		}
	}
	return ""
}

// countMarkers counts the fence markers present, with one EXISTS on the
// client's one server (standalone or Sentinel); -1 for a Cluster or a
// Ring (each server holds only some shards, and the scripts fence each
// shard whose marker is missing).
func (s *Store) countMarkers(ctx context.Context, do func(args ...any) (any, error)) (int, error) {
	switch s.client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return -1, nil
	}
	args := make([]any, 0, Shards+1)
	args = append(args, "EXISTS")
	for _, t := range s.tags {
		args = append(args, t)
	}
	v, err := do(args...)
	switch {
	case err != nil && strings.Contains(err.Error(), "CROSSSLOT"):
		return -1, nil // a Cluster behind a client of another type
	case err != nil:
		return -1, s.wrapErr(ctx, err)
	}
	n, ok := v.(int64)
	if !ok {
		return -1, nil
	}
	return int(n), nil
}

// livedBefore reports whether the key space shows a life before this
// check although <prefix>servers knows no server: a shard marker present
// (markers, as countMarkers counted them; read from every shard when it
// could not count), or an entry in the ledger. A Provision writes both
// and the first check a baseline, so a key space with markers and no
// baseline lost its baselines (evicted, deleted) and is not new.
func (s *Store) livedBefore(ctx context.Context, markers int) (bool, error) {
	if markers > 0 {
		return true, nil
	}
	if markers < 0 {
		ks, err := s.readKeySpace(ctx)
		if err != nil {
			return false, err
		}
		if ks.open+ks.fenced > 0 {
			return true, nil
		}
	}
	v, err := s.call(ctx, "LLEN", s.ledgerKey())
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n > 0, nil
}

// judge compares what a check read of a server (now) with what was seen
// of it before (old, when known) and returns the evidence of loss it
// shows. prev is the baseline of the run that was behind the same client
// before, when it was another run (nil otherwise); history that the key
// space knows another server; ownRole how many ROLE calls the server
// answered to this store after old was read and before now was (see
// [resetWitnesses]).
func judge(old *baseline, now baseline, countersOK bool, prev *baseline, history, allowEviction bool, ownRole int64) []string {
	var ev []string
	if old == nil {
		if countersOK && history && now.evicted > 0 && !allowEviction {
			ev = append(ev, fmt.Sprintf("a server new to the key space had evicted %d keys", now.evicted))
		}
		// A server the key space has no baseline of, although the key
		// space lived (its baselines evicted with the claims, under an
		// allkeys policy, or a new run), whose statistics were reset: no
		// baseline from before the reset proves that it evicted or
		// flushed nothing before it (issue 81).
		if countersOK && history && now.witness && now.resets > 0 {
			ev = append(ev, fmt.Sprintf("a server the key space has no baseline of counts a CONFIG RESETSTAT (cmdstat_config|resetstat calls=%d): %s", now.resets, hidByReset))
		}
		if prev != nil && prev.markers > 0 && now.markers >= 0 && now.markers < prev.markers {
			ev = append(ev, fmt.Sprintf("a new server run holds %d of the %d fence markers the previous run held (a restart without persistence)", now.markers, prev.markers))
		}
		return ev
	}
	if countersOK {
		for _, c := range []struct {
			name     string
			was, now int64
			allowed  bool
		}{
			{"evicted_keys", old.evicted, now.evicted, allowEviction},
			{"SWAPDB calls", old.swapdb, now.swapdb, false},
			{"FLUSHALL calls", old.flushall, now.flushall, false},
			{"FLUSHDB calls", old.flushdb, now.flushdb, false},
		} {
			switch {
			case c.now < c.was:
				ev = append(ev, fmt.Sprintf("%s went down from %d to %d (CONFIG RESETSTAT hides what ran before it)", c.name, c.was, c.now))
			case c.now > c.was && !c.allowed:
				ev = append(ev, fmt.Sprintf("%s grew from %d to %d", c.name, c.was, c.now))
			}
		}
		ev = append(ev, resetWitnesses(old.counters, now.counters, ownRole)...)
	}
	if now.evictable && !old.evictable && !allowEviction {
		ev = append(ev, "eviction became possible (maxmemory-policy not noeviction, maxmemory set)")
	}
	if old.aof && !now.aof {
		ev = append(ev, "AOF switched off (the next start may load the old AOF)")
	} else if old.fsyncAlways && now.aof && !now.fsyncAlways {
		ev = append(ev, "appendfsync no longer always (a machine crash loses the last claims)")
	}
	return ev
}

// hidByReset ends the evidence of a CONFIG RESETSTAT.
const hidByReset = "CONFIG RESETSTAT zeroed the loss counters, hiding any eviction or flush before it"

// resetWitnesses returns what shows that CONFIG RESETSTAT ran on a server
// between two reads of its counters, old and now, whose loss counters
// may all be back at their baseline. A reset zeroes every statistic;
// each witness below is one that what followed the reset cannot regrow
// past its baseline without the reset showing otherwise:
//
//   - total_commands_processed went down: missed when the server ran more
//     commands after the reset than in its life until old was read.
//   - cmdstat_config|resetstat appeared: the reset counts itself, so it
//     reads calls=1 after any reset and is absent before a server's
//     first. Nothing hides a first reset (Redis 7 and Valkey: Redis 6.2
//     does not count subcommands).
//   - cmdstat_config|resetstat's usec changed: another reset (its own
//     duration, in µs); missed when two resets took the same time.
//   - ROLE's calls are fewer than old's plus ownRole, the calls this store
//     saw answered in between: only other clients' ROLE calls since the
//     reset (another store's checks) can make up for it, so a reset is
//     missed only when they ran ROLE at least as often as the server had
//     until old was read.
//   - the key space's own error count (errs, see [Store.readWitness]) is
//     below old's plus this check's own bump (when ownRole is not 0: its
//     ROLE and its bump were answered after old was read): only the
//     bumps of this key space's checks regrow it, and the first of them
//     after a reset finds it so and fences.
//
// A witness is judged only where both reads have it (a baseline an older
// store wrote has none but total_commands_processed).
func resetWitnesses(old, now counters, ownRole int64) []string {
	const hid = hidByReset
	var ev []string
	if old.commands > 0 && now.commands > 0 && now.commands < old.commands {
		ev = append(ev, fmt.Sprintf("total_commands_processed went down from %d to %d: %s", old.commands, now.commands, hid))
	}
	if !old.witness || !now.witness {
		return ev
	}
	own := int64(0)
	if ownRole > 0 && now.bumped {
		own = 1
	}
	if old.errs > 0 && now.errs < old.errs+own {
		ev = append(ev, fmt.Sprintf("the key space's reset witness (INFO errorstats) went from %d to %d although this store bumped it %d times since: %s", old.errs, now.errs, own, hid))
	}
	switch {
	case old.resets == 0 && now.resets > 0:
		ev = append(ev, fmt.Sprintf("INFO commandstats counts a CONFIG RESETSTAT (cmdstat_config|resetstat calls=%d) where the last check saw none: %s", now.resets, hid))
	case old.resets > 0 && now.resets > 0 && now.resetUsec != old.resetUsec:
		ev = append(ev, fmt.Sprintf("cmdstat_config|resetstat changed (usec %d, was %d): another CONFIG RESETSTAT ran; %s", now.resetUsec, old.resetUsec, hid))
	case now.resets < old.resets:
		ev = append(ev, fmt.Sprintf("cmdstat_config|resetstat calls went down from %d to %d: %s", old.resets, now.resets, hid))
	}
	if old.role > 0 && now.role < old.role+ownRole {
		ev = append(ev, fmt.Sprintf("ROLE calls went from %d to %d although this store ran ROLE %d times since: %s", old.role, now.role, ownRole, hid))
	}
	return ev
}

// settle acts on what one round of checks observed: with evidence of loss
// (or evidence an earlier round could not fence) it refuses every call at
// once, fences every shard and notes it in the ledger, and only then takes
// the observations as the new baselines; without, it takes them at once.
// It reports whether the store may serve (no loss waiting for a fence).
func (s *Store) settle(ctx context.Context, obs []observation) bool {
	var evidence []string
	for _, o := range obs {
		evidence = append(evidence, o.evidence...)
	}
	s.srv.mu.Lock()
	if len(evidence) == 0 && consumedElsewhere(obs) {
		// The loss this store could not fence yet was fenced by another,
		// which kept what it saw: fencing again now would undo an
		// operator's Reopen made since.
		s.srv.loss.Store(nil)
	}
	if len(evidence) > 0 {
		what := strings.Join(evidence, "; ")
		if old := s.srv.loss.Load(); old != nil && !strings.Contains(*old, what) {
			what = *old + "; " + what
		} else if old != nil {
			what = *old
		}
		s.srv.loss.Store(&what)
	}
	loss := s.srv.loss.Load()
	s.srv.mu.Unlock()
	if loss != nil {
		if !s.fenceAll(ctx, s.rewriteAfter(obs), *loss) {
			return false
		}
		s.srv.loss.CompareAndSwap(loss, nil)
	}
	s.commit(ctx, obs)
	return true
}

// fenceAll fences every shard of the key space for the key space's
// lifetime ([Store.Lifetime]; the Horizon when none is known) from
// Redis's clock (a later fence already there is kept), after evidence of
// loss (what, for the ledger and the log: no ID or key) and, when AOF was
// switched off, has each master rewrite its AOF (BGREWRITEAOF) so the
// file the next start may load holds the fences and every claim so far.
// It reports each shard to the Observer, writes one ledger entry and logs
// one Error line, and reports whether every shard was fenced.
func (s *Store) fenceAll(ctx context.Context, rewrite bool, what string) bool {
	fenced := 0
	var until time.Time
	for i, m := range s.tags {
		v, err := s.call(ctx, "EVAL", fenceScript, 1, m, *s.boundArg.Load())
		ms, ok := v.(int64)
		if err != nil || !ok {
			continue
		}
		fenced++
		until = time.UnixMilli(ms)
		if s.opts.Observer != nil {
			s.observe(replay.Event{Kind: replay.EventFenceRaised, Shard: i, Until: until})
		}
	}
	if fenced < Shards {
		s.log.Error("redisstore: the server reported a loss of data and the key space could not be fenced; every call of this store refuses until it is", "prefix", s.prefix, "evidence", what, "shards", fenced)
		return false
	}
	if rewrite {
		for _, m := range s.masters(ctx) {
			if err := m.Do(ctx, "BGREWRITEAOF").Err(); err != nil && !strings.Contains(strings.ToLower(err.Error()), "already in progress") {
				s.log.Error("redisstore: could not rewrite the AOF after it was switched off; the next start may load claims without their fences", "prefix", s.prefix, "error", err)
			}
		}
	}
	if err := s.note(ctx, ledgerLoss, what); err != nil {
		s.log.Error("redisstore: could not write the loss to the key space's ledger", "prefix", s.prefix, "error", err)
	}
	s.log.Error("redisstore: the server reported a loss of data: the key space is fenced until every claim that could have been lost has expired (or until an operator reopens it)", "prefix", s.prefix, "evidence", what, "shards", fenced, "until", until, "lifetime", s.Lifetime())
	return true
}

// fenceScript fences one shard: KEYS[1] the marker, ARGV[1] the key
// space's lifetime (ms, see lifetime.go), and records when (<marker>f),
// so that a store knowing a longer lifetime lengthens it. It returns when
// the fence opens (ms, Redis's clock).
const fenceScript = `local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local m = redis.call('GET', KEYS[1])
if m and string.sub(m, 1, 1) == 'F' and tonumber(string.sub(m, 2)) and tonumber(string.sub(m, 2)) >= f then
  return tonumber(string.sub(m, 2))
end
redis.call('SET', KEYS[1], string.format('F%.0f', f))
redis.call('SET', KEYS[1] .. 'f', string.format('%.0f', f - tonumber(ARGV[1])))
return f`

// consumedElsewhere reports whether an observation's evidence was fenced
// by another Store.
func consumedElsewhere(obs []observation) bool {
	for _, o := range obs {
		if o.consumed {
			return true
		}
	}
	return false
}

// rewriteAfter reports whether an observation saw AOF switched off: the
// fence then asks for an AOF rewrite.
func (s *Store) rewriteAfter(obs []observation) bool {
	for _, o := range obs {
		for _, e := range o.evidence {
			if strings.HasPrefix(e, "AOF switched off") {
				return true
			}
		}
	}
	loss := s.srv.loss.Load()
	return loss != nil && strings.Contains(*loss, "AOF switched off")
}
