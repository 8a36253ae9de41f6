package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis server is recognised by its run_id (INFO server), which changes
// with every start and stays the same across a change of role, never by
// the client's address: a Sentinel failover client keeps its address
// across a failover. What the checks saw of a server (its persistence,
// whether eviction could act, and the counters that report loss) is kept
// per run_id, in memory and in the hash <prefix>servers (field: run_id;
// at most maxServers run_ids, the oldest dropped), so a Store opened after
// an app restart compares a server with what the previous Store saw of it.
// The most replicas a server had is kept in memory only, per run_id: a
// new primary is checked for the replicas it has, as Open checks it.

// counters are the loss counters of one server, and the witnesses of a
// CONFIG RESETSTAT that left every loss counter at its baseline (see
// [resetWitnesses]).
type counters struct {
	evicted, swapdb, flushall, flushdb int64
	// commands is total_commands_processed: it grows with every command
	// (the checks' own included) and only a reset brings it down. 0 when
	// not read.
	commands int64
	// resets and resetUsec are calls and usec of cmdstat_config|resetstat
	// (Redis 7 and Valkey count subcommands): 0 before the server's first
	// reset, calls=1 after any reset (it zeroes the statistics, then
	// counts itself), usec that reset's own duration. role is ROLE's calls
	// (cmdstat_role), which the checks run and little else does. witness
	// reports that these three were read; a baseline an older store wrote
	// lacks them.
	resets, resetUsec, role int64
	witness                 bool
	// errs is the count of the key space's own error code in INFO
	// errorstats (errorstat_<witnessCode>), which only this key space's
	// checks answer, one per check (see [Store.readWitness]), and which a
	// reset zeroes: 0 when not read or not counted. bumped reports that
	// this read's own bump was answered before it.
	errs   int64
	bumped bool
}

// baseline is what the checks saw of one server (one run_id).
type baseline struct {
	counters
	evictable        bool // eviction possible: policy not noeviction, maxmemory > 0
	aof, fsyncAlways bool // persistence seen
	replicas         int  // the most replicas it had
	markers          int  // fence markers present (-1: not counted)
}

// maxServers bounds <prefix>servers: older run_ids are dropped.
const maxServers = 32

// encode writes b for <prefix>servers, with the time it was written
// (version 4; version 3 had no errs, version 2 no reset witnesses,
// version 1 no commands). Version 2 is written for a baseline without
// witnesses.
func (b baseline) encode(now time.Time) string {
	bit := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	v2 := fmt.Sprintf("%d %d %d %d %d %d %d %d %d", b.evicted, b.swapdb, b.flushall, b.flushdb,
		bit(b.evictable), bit(b.aof), bit(b.fsyncAlways), now.UnixMilli(), b.commands)
	if !b.witness {
		return "2 " + v2
	}
	return fmt.Sprintf("4 %s %d %d %d %d", v2, b.resets, b.resetUsec, b.role, b.errs)
}

// kept is the part of b that <prefix>servers keeps, as commit compares
// it: the most replicas and the markers are this Store's own (another
// Store's count of replicas would outlive the replicas themselves), and
// commands, role and errs count only to their highest power of two, so the
// baseline is written again when one doubled, not at every check (a
// stored count lower than the server's is still a sound witness: only a
// reset brings the server's below it).
func (b baseline) kept() baseline {
	b.replicas, b.markers = 0, -1
	b.commands, b.role, b.errs = floorPow2(b.commands), floorPow2(b.role), floorPow2(b.errs)
	b.bumped = false
	return b
}

// floorPow2 is n's highest power of two; n when not positive.
func floorPow2(n int64) int64 {
	if n <= 0 {
		return n
	}
	return 1 << (bits.Len64(uint64(n)) - 1)
}

// decodeBaseline reads what encode wrote (version 4, version 3 without
// errs, version 2 without the reset witnesses, or version 1 without
// commands either), and when it was written.
func decodeBaseline(s string) (baseline, int64, bool) {
	f := strings.Fields(s)
	if len(f) == 0 || !(f[0] == "1" && len(f) == 9 || f[0] == "2" && len(f) == 10 || f[0] == "3" && len(f) == 13 || f[0] == "4" && len(f) == 14) {
		return baseline{}, 0, false
	}
	var n [13]int64
	for i := range f[1:] {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || v < 0 {
			return baseline{}, 0, false
		}
		n[i] = v
	}
	return baseline{counters: counters{evicted: n[0], swapdb: n[1], flushall: n[2], flushdb: n[3], commands: n[8],
		resets: n[9], resetUsec: n[10], role: n[11], witness: f[0] == "3" || f[0] == "4", errs: n[12]},
		evictable: n[4] == 1, aof: n[5] == 1, fsyncAlways: n[6] == 1, markers: -1}, n[7], true
}

// servers is what a Store knows of the servers behind its client.
type servers struct {
	mu sync.Mutex
	// runs is the baseline of each run_id seen (key "addr:<address>" for a
	// server whose INFO server does not give one).
	runs map[string]*baseline
	// current is the run_id last seen behind each master key (the Cluster
	// master's address, or "" for the client's one server).
	current map[string]string
	// unsaved are the run_ids whose baseline <prefix>servers lacks (a
	// write failed): the next check writes them again.
	unsaved map[string]bool
	// entries is, per run_id, the entry of <prefix>servers this Store
	// last read or wrote: an entry that differs was written by another.
	entries map[string]string
	// loss, when not nil, is evidence not yet fenced: every call refuses.
	// It is changed under mu and read without it.
	loss atomic.Pointer[string]
	// cond is the refusal of the last check for a condition (a server
	// Open would refuse); nil when the last check passed.
	cond atomic.Pointer[error]
	// hold, when not nil, is the refusal of the steps that can take a
	// free ID (claims, acquisitions) after a script found the loss
	// counters moved, until a check begun after it has judged the server
	// (see [Store.holdForCheck]).
	hold atomic.Pointer[error]
	// running is set while a background round of checks runs; again asks
	// it for one more round.
	running, again atomic.Bool
	// guard is, per master key, the loss counters of its last committed
	// baseline as the guarded scripts that can take a free ID compare
	// them, with the reset witness (see countersLua); replaced whole by
	// commit.
	guard atomic.Pointer[map[string]*string]
}

// noCounters is the counters argument of a script on a master the store
// has no baseline of: the script compares nothing.
var noCounters = "-"

// unreadCounters is the counters argument of a script on a Cluster master
// the checks have not read yet (a failover, a new node): it matches no
// counters, so the script answers -8 and the store refuses every call
// until a check has read that master.
var unreadCounters = "?"

// countersArg returns the loss counters argument (see countersLua) for a
// script on marker's shard: those of the last baseline of the master
// serving it, found as the checks name masters (see masterKey); "-" on a
// client whose master per key the store cannot name (a Ring), before the
// first check, or on a master whose counters the checks cannot read; "?"
// on a Cluster master no check has read yet.
func (s *Store) countersArg(ctx context.Context, marker string) *string {
	g := s.srv.guard.Load()
	if g == nil {
		return &noCounters
	}
	switch c := s.client.(type) {
	case *redis.Client:
		if a, ok := (*g)[masterKey(c)]; ok {
			return a
		}
	case *redis.ClusterClient:
		mc, err := c.MasterForKey(ctx, marker)
		if err != nil {
			return &noCounters
		}
		if a, ok := (*g)[masterKey(mc)]; ok {
			return a
		}
		return &unreadCounters
	}
	return &noCounters
}

// identify reads the server's run_id and its baseline: from memory, else
// from <prefix>servers. known reports a baseline found; history that
// <prefix>servers knows some server (only asked when not known).
func (s *Store) identify(ctx context.Context, do func(args ...any) (any, error), m doer) (run string, persist bool, b baseline, known, history bool, err error) {
	v, err := do("INFO", "server")
	switch {
	case err != nil && isRefused(err):
	case err != nil:
		return "", false, baseline{}, false, false, s.wrapErr(ctx, err)
	default:
		run = infoValue(v, "run_id")
	}
	if run == "" {
		s.warnOnce(warnRunID, "redisstore: cannot read the server's run_id (INFO server refused or unexpected); the store tells servers apart by address and keeps what it saw in memory only")
		run = "addr:" + masterKey(m)
	} else {
		s.warned.And(^uint32(warnRunID))
		persist = true
	}
	s.srv.mu.Lock()
	p, ok := s.srv.runs[run]
	if ok {
		b = *p
	}
	s.srv.mu.Unlock()
	if ok || !persist {
		return run, persist, b, ok, false, nil
	}
	b, found, readable, _, err := s.loadBaseline(ctx, run)
	switch {
	case err != nil:
		return "", false, baseline{}, false, false, err
	case readable:
		return run, true, b, true, false, nil
	case found:
		return run, true, baseline{markers: -1}, false, true, nil // unreadable: as unknown, with history
	}
	v, err = s.call(ctx, "HLEN", s.serversKey())
	switch {
	case err != nil:
		return "", false, baseline{}, false, false, err
	}
	n, _ := v.(int64)
	return run, true, baseline{markers: -1}, false, n > 0, nil
}

// loadBaseline reads the baseline of run from <prefix>servers: found
// reports an entry, readable one that could be read; mine that it is the
// entry this Store last read or wrote there (no other Store wrote since).
func (s *Store) loadBaseline(ctx context.Context, run string) (b baseline, found, readable, mine bool, err error) {
	v, err := s.call(ctx, "HGET", s.serversKey(), run)
	switch {
	case errors.Is(err, errNil):
		return baseline{}, false, false, false, nil
	case err != nil:
		return baseline{}, false, false, false, err
	}
	str, _ := v.(string)
	b, _, ok := decodeBaseline(str)
	s.srv.mu.Lock()
	mine = s.srv.entries[run] == str
	if s.srv.entries == nil {
		s.srv.entries = map[string]string{}
	}
	s.srv.entries[run] = str
	s.srv.mu.Unlock()
	return b, true, ok, mine, nil
}

// serversKey is the key of the hash of server baselines.
func (s *Store) serversKey() string { return s.prefix + "servers" }

// commit takes the observations as the baselines of their servers, in
// memory (the guarded scripts' counters too: see countersLua) and, for
// changed ones, in <prefix>servers (best effort: a baseline that could
// not be written is written by a later check).
func (s *Store) commit(ctx context.Context, obs []observation) {
	s.srv.mu.Lock()
	if s.srv.runs == nil {
		s.srv.runs, s.srv.current, s.srv.unsaved = map[string]*baseline{}, map[string]string{}, map[string]bool{}
	}
	if s.srv.entries == nil {
		s.srv.entries = map[string]string{}
	}
	var write []observation
	guard := map[string]*string{}
	if g := s.srv.guard.Load(); g != nil {
		maps.Copy(guard, *g)
	}
	for _, o := range obs {
		b := o.next
		if p, ok := s.srv.runs[o.run]; !ok || p.kept() != b.kept() || s.srv.unsaved[o.run] {
			if o.persist {
				write = append(write, o)
			}
		}
		s.srv.runs[o.run] = &b
		s.srv.current[o.master] = o.run
		arg := noCounters
		if o.counted {
			evicted := strconv.FormatInt(b.evicted, 10)
			if s.opts.AllowEviction {
				evicted = "-"
			}
			arg = evicted + " " + strconv.FormatInt(b.commands, 10) + " " + strconv.FormatInt(b.errs, 10) + " " + s.witnessCode()
		}
		guard[o.master] = &arg
	}
	s.srv.guard.Store(&guard)
	s.srv.mu.Unlock()
	for _, o := range write {
		kept := o.next
		var err error
		if s.opts.AllowEviction {
			// Evictions are this store's accepted risk, not another's:
			// the shared baseline keeps the count it had (none for a
			// server it did not have), so a store of the key space
			// without AllowEviction still finds them.
			var b baseline
			var readable bool
			if b, _, readable, _, err = s.loadBaseline(ctx, o.run); err == nil {
				kept.evicted = 0
				if readable {
					kept.evicted = min(b.evicted, o.next.evicted)
				}
			}
		}
		entry := kept.encode(time.Now())
		if err == nil {
			_, err = s.call(ctx, "HSET", s.serversKey(), o.run, entry)
		}
		s.srv.mu.Lock()
		if err != nil {
			s.srv.unsaved[o.run] = true
		} else {
			delete(s.srv.unsaved, o.run)
			s.srv.entries[o.run] = entry
		}
		s.srv.mu.Unlock()
		if err == nil {
			s.pruneServers(ctx)
		}
	}
}

// pruneServers keeps the maxServers newest entries of <prefix>servers.
func (s *Store) pruneServers(ctx context.Context) {
	v, err := s.call(ctx, "HLEN", s.serversKey())
	if n, _ := v.(int64); err != nil || n <= maxServers {
		return
	}
	v, err = s.call(ctx, "HGETALL", s.serversKey())
	if err != nil {
		return
	}
	type entry struct {
		run string
		at  int64
	}
	var all []entry
	add := func(k, val any) {
		ks, _ := k.(string)
		vs, _ := val.(string)
		_, at, _ := decodeBaseline(vs)
		all = append(all, entry{ks, at})
	}
	switch r := v.(type) {
	case map[any]any:
		for k, val := range r {
			add(k, val)
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			add(r[i], r[i+1])
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Compare(b.at, a.at) })
	for _, e := range all[min(maxServers, len(all)):] {
		s.call(ctx, "HDEL", s.serversKey(), e.run)
	}
}

// previous returns the baseline of the run that was behind master before,
// when it is not run; nil otherwise.
func (s *Store) previous(master, run string) *baseline {
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	cur, ok := s.srv.current[master]
	if !ok || cur == run {
		return nil
	}
	if b, ok := s.srv.runs[cur]; ok {
		c := *b
		return &c
	}
	return nil
}
