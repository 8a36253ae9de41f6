package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultDurabilityTimeout is how long a write waits for its
// acknowledgements when Durability.Timeout is zero.
const DefaultDurabilityTimeout = 250 * time.Millisecond

// Durability is what a write must reach before the store reports success:
// after every claim, lease acquisition and confirmation the store sends
// WAIT (and WAITAOF) on the connection that wrote, and refuses the call
// with [ErrNotDurable] when fewer acknowledgements than asked arrive
// within Timeout. A release is not waited for: losing one only keeps a
// lease until it ends by itself. The zero value waits for nothing.
type Durability struct {
	// Replicas is how many replicas must have received the write (WAIT).
	Replicas int
	// LocalAOF asks for the primary's own AOF to have fsynced the write
	// (WAITAOF 1 ..., Redis 7.2 or newer, appendonly yes). It does not
	// make appendfsync everysec safe: WAITAOF can acknowledge the local
	// fsync before it ran there (Valkey 8, Redis 7.4 until
	// redis/redis#13793, February 2025), so the store still requires
	// appendfsync always (or Options.AllowRollback).
	LocalAOF bool
	// ReplicaAOF is how many replicas must have fsynced the write to their
	// AOF (WAITAOF .. N, Redis 7.2 or newer). A replica reports its fsync
	// through the same code as a primary, so on a replica with appendfsync
	// everysec the acknowledgement can come before the fsync (see
	// LocalAOF); the store does not read replicas' settings: run them
	// with appendfsync always.
	ReplicaAOF int
	// Timeout bounds the wait; it must be shorter than Options.Timeout
	// (when that is positive). Zero means DefaultDurabilityTimeout.
	Timeout time.Duration
}

// durability is a validated Durability and how to pin a connection.
type durability struct {
	Durability
	wait    []any // WAIT n ms, or nil
	waitAOF []any // WAITAOF l n ms, or nil
	single  *redis.Client
	cluster *redis.ClusterClient
	// implied is the local AOF wait the server checks turn on by
	// themselves (see [Store.decideLocalAOF]); nil when Durability already
	// waits for the local fsync or no connection can be pinned.
	implied *impliedAOF
	// probe is the CONFIG GET maxmemory-policy pipelined after every
	// guarded script (see [policyProbe]); nil when no connection can be
	// pinned or Options.AllowEviction accepts eviction.
	probe *policyProbe
	// pipes keeps the pipelines of single between calls (see
	// [durability.pipeline]); nil without single.
	pipes *sync.Pool
}

// impliedAOF is the WAITAOF 1 n ms every write sends, without
// Durability.LocalAOF, while the checked server runs AOF with appendfsync
// always and knows WAITAOF (Redis 7.2 or newer, Valkey 8). Such a server
// has fsynced each write before it replies, so the wait costs a round
// trip on the same pipeline and no fsync; what it buys is the refusal of
// every write once AOF is switched off at run time (the server answers
// WAITAOF with an error when appendonly is no), before the next recheck
// finds the change.
type impliedAOF struct {
	on  atomic.Bool
	cmd []any // WAITAOF 1 ReplicaAOF ms
}

// policyProbe is the CONFIG GET maxmemory-policy every step that can take
// a free ID (claims and acquisitions: see [durability.probes]) is followed
// by, in the same pipeline on the connection that ran it, while the server checks found that every
// master answers it (see [Store.decidePolicyProbe]). Redis runs a
// connection's commands in order, and eviction needs an evicting policy
// set before it: so an eviction that happened before the script ran was
// caused by a policy the probe reads after it, unless that policy was
// switched back to noeviction before the probe ran. A policy other than
// noeviction turns the call's answer into a refusal ([ErrUnavailable],
// Reason [whyEvictionOn]; the script may have written, and what it wrote
// stays) and has the store check the server at once, which fences the
// key space when eviction became possible. What the probe cannot see is
// an evicting policy set and switched back between two of the store's
// scripts (or between a script and its probe): the next script finds that
// eviction in evicted_keys itself (see countersLua).
type policyProbe struct {
	on atomic.Bool
}

// probeCmd is the probe's command.
var probeCmd = []any{"CONFIG", "GET", "maxmemory-policy"}

// on reports whether Durability asks for a wait.
func (d *durability) on() bool { return d.wait != nil || d.waitAOF != nil }

// pipelines reports whether a guarded script of sc must be pipelined with
// more commands now: Durability asks for a wait, the implied local AOF
// wait is on, or the policy probe follows sc (see [durability.probes]).
func (d *durability) pipelines(sc *script) bool {
	return d.on() || (d.implied != nil && d.implied.on.Load()) || d.probes(sc)
}

// probing reports whether the policy probe is on.
func (d *durability) probing() bool { return d.probe != nil && d.probe.on.Load() }

// probes reports whether the policy probe follows a step of sc now: the
// steps that can take an ID because they found it free (a claim, an
// acquisition). A
// confirmation, a renewal or a release answers for the caller's own
// lease, which eviction can only end (the lease is then lost, or the ID
// recorded done), never give to another holder: an ID that eviction freed
// is taken again only through an acquisition or a claim, and their probe
// refuses it.
func (d *durability) probes(sc *script) bool {
	return d.probing() && (sc == &claimLua || sc == &acquireLua || sc == &acquireRecordLua)
}

// aofWait returns the WAITAOF command a write sends now (nil for none)
// and whether it asks for the local fsync.
func (d *durability) aofWait() ([]any, bool) {
	if d.implied != nil && d.implied.on.Load() {
		return d.implied.cmd, true
	}
	return d.waitAOF, d.LocalAOF
}

// newDurability validates d for client: it returns every fault of d,
// each naming its fix, and a nil client checks nothing of the client's type
// (New names the nil client itself).
func newDurability(client Client, d Durability, timeout time.Duration) (durability, []string) {
	out := durability{Durability: d}
	var faults []string
	if d.Replicas < 0 || d.ReplicaAOF < 0 {
		faults = append(faults, "negative Durability replica count (set Durability.Replicas and Durability.ReplicaAOF to 0 or more)")
	}
	if d.Timeout < 0 {
		faults = append(faults, "negative Durability.Timeout (set 0 for DefaultDurabilityTimeout, or a positive wait)")
	}
	asked := d.Replicas > 0 || d.ReplicaAOF > 0 || d.LocalAOF
	if !asked && d.Timeout > 0 {
		faults = append(faults, "Durability.Timeout without anything to wait for (set Durability.Replicas, ReplicaAOF or LocalAOF, or leave Timeout 0)")
	}
	switch c := client.(type) {
	case *redis.Client:
		out.single = c
		out.pipes = new(sync.Pool)
	case *redis.ClusterClient:
		out.cluster = c
	default:
		if asked && client != nil {
			faults = append(faults, "Durability needs a *redis.Client or *redis.ClusterClient (WAIT runs on the connection that wrote): pass one, or leave Durability zero")
		}
	}
	if !d.LocalAOF && (out.single != nil || out.cluster != nil) {
		// The implied local AOF wait: Durability.Timeout when set, else
		// DefaultDurabilityTimeout, kept under Options.Timeout. With
		// appendfsync always it returns at once.
		wait := cmp.Or(d.Timeout, DefaultDurabilityTimeout)
		if timeout > 0 && wait >= timeout {
			wait = max(timeout/2, time.Millisecond)
		}
		out.implied = &impliedAOF{cmd: []any{"WAITAOF", "1", strconv.Itoa(d.ReplicaAOF), strconv.FormatInt(max(wait.Milliseconds(), 1), 10)}}
	}
	if out.single != nil || out.cluster != nil {
		out.probe = new(policyProbe)
	}
	if !asked || d.Timeout < 0 {
		return out, faults
	}
	if out.Timeout == 0 {
		out.Timeout = DefaultDurabilityTimeout
	}
	if out.Timeout < time.Millisecond {
		faults = append(faults, "Durability.Timeout under a millisecond (set at least 1ms, or 0 for DefaultDurabilityTimeout)")
	} else if timeout > 0 && out.Timeout >= timeout {
		faults = append(faults, "Durability.Timeout not shorter than Options.Timeout (lower Durability.Timeout or raise Options.Timeout)")
	}
	if len(faults) > 0 {
		return out, faults
	}
	ms := strconv.FormatInt(out.Timeout.Milliseconds(), 10)
	if d.Replicas > 0 {
		out.wait = []any{"WAIT", strconv.Itoa(d.Replicas), ms}
	}
	if d.LocalAOF || d.ReplicaAOF > 0 {
		local := "0"
		if d.LocalAOF {
			local = "1"
		}
		out.waitAOF = []any{"WAITAOF", local, strconv.Itoa(d.ReplicaAOF), ms}
	}
	return out, nil
}

// decideLocalAOF turns the implied local AOF wait (see [impliedAOF]) on
// when every master of masters runs AOF with appendfsync always and
// answers WAITAOF, and off when one does not (Redis older than 7.2, AOF
// off, appendfsync weaker, CONFIG GET refused, or a failover to such a
// server). The server checks call it after each check that passed, so it
// follows the server behind the client: on Redis 7.0 the wait stays off
// and AOF switched off at run time is found only by the next recheck
// (within Options.RecheckInterval). A master that cannot answer leaves
// the setting as it was. obs are the check's observations of masters, in
// order: their persistence settings are not read again.
//
// A master this check read as running AOF with appendfsync always whose
// WAITAOF probe then fails with an error reply other than "unknown
// command" or a permission refusal (which say the server cannot wait, as
// on Redis 7.0) is evidence that AOF was switched off between the read
// and the probe, not a reason to stop waiting: the wait is turned on (or
// kept), so every write until the next check is refused by WAITAOF
// ([ErrNotDurable]), and that check runs at once and fences the key space
// for the switch (TestDurability/AOF probe failing after a fresh read).
func (s *Store) decideLocalAOF(ctx context.Context, masters []doer, obs []observation) {
	im := s.dur.implied
	if im == nil || len(masters) == 0 || len(obs) != len(masters) {
		return
	}
	on, changed := true, false
	for i, m := range masters {
		if !obs[i].aofAlways {
			on = false
			break
		}
		ok, known, cannot := waitsForAOF(ctx, m)
		if !known {
			return
		}
		if !ok && !cannot {
			changed = true // read AOF always, then refused: switched off since
			break
		}
		if !ok {
			on = false
			break
		}
	}
	if changed {
		im.on.Store(true)
		s.checkSoon()
		s.log.Warn("redisstore: the server refused WAITAOF right after it showed AOF with appendfsync always: AOF was switched off meanwhile; writes wait for WAITAOF (and are refused) until the next check fences the key space", "prefix", s.prefix)
		return
	}
	if im.on.Swap(on) != on {
		if on {
			s.log.Info("redisstore: the server runs AOF with appendfsync always and knows WAITAOF: every write now waits for its local fsync", "prefix", s.prefix)
		} else {
			s.log.Info("redisstore: the server does not run AOF with appendfsync always, or does not know WAITAOF: writes no longer wait for the local fsync", "prefix", s.prefix)
		}
	}
}

// decidePolicyProbe turns the policy probe (see [policyProbe]) on when
// every master observed answered CONFIG GET maxmemory-policy, and off when
// one refused it (a managed service, an ACL without +config) or answered
// something unexpected: then no claim sends a command the server refuses,
// and eviction switched on at run time is found by the next check (the
// checks warn once). The server checks call it after each round that
// reached every master.
func (s *Store) decidePolicyProbe(obs []observation) {
	p := s.dur.probe
	if p == nil || len(obs) == 0 {
		return
	}
	on := true
	for _, o := range obs {
		on = on && o.policyRead
	}
	if p.on.Swap(on) != on && !on {
		s.log.Info("redisstore: maxmemory-policy cannot be read: claims no longer read it after each script", "prefix", s.prefix)
	}
}

// probe queues the policy probe on p: a typed command, whose reply (a
// map in RESP3, a flat list in RESP2) is read into a map of strings
// rather than a map of interfaces.
func probe(ctx context.Context, p redis.Pipeliner) *redis.MapStringStringCmd {
	pc := probeCommand(ctx)
	_ = p.Process(ctx, pc) // a pipeline only queues it
	return pc
}

// probeCommand is the policy probe's command, not yet sent.
func probeCommand(ctx context.Context) *redis.MapStringStringCmd {
	return redis.NewMapStringStringCmd(ctx, probeCmd...)
}

// probed returns the refusal the probe's reply (nil when not sent) asks
// for: nil when the policy is noeviction.
func probed(pc *redis.MapStringStringCmd) error {
	if pc == nil {
		return nil
	}
	v, err := pc.Result()
	switch {
	case err != nil && (isServerError(err) || isRefused(err) || strings.Contains(err.Error(), "can't parse")):
		// Refused, or a reply that is not a map (or a list) of strings.
		return refuse(ErrUnavailable, whyPolicyUnread, fmt.Errorf("%w: CONFIG GET maxmemory-policy: %w", ErrUnavailable, err))
	case err != nil:
		return fmt.Errorf("%w: CONFIG GET maxmemory-policy: %w", ErrUnavailable, err)
	}
	policy, ok := v["maxmemory-policy"]
	switch {
	case !ok:
		return refuse(ErrUnavailable, whyPolicyUnread, fmt.Errorf("%w: unexpected reply to CONFIG GET maxmemory-policy", ErrUnavailable))
	case policy != "noeviction":
		return refuse(ErrUnavailable, whyEvictionOn, fmt.Errorf("%w: maxmemory-policy %s", ErrUnavailable, policy))
	}
	return nil
}

// waitsForAOF reports whether m, which runs AOF with appendfsync always,
// accepts WAITAOF 1 0; known is false when m could not answer; cannot is
// true when m refused the command itself (unknown, as on Redis 7.0, or
// forbidden), as opposed to refusing to wait (AOF off).
func waitsForAOF(ctx context.Context, m doer) (ok, known, cannot bool) {
	_, err := m.Do(ctx, "WAITAOF", "1", "0", "1").Result()
	switch {
	case err == nil:
		return true, true, false
	case isServerError(err):
		return false, true, isRefused(err)
	}
	return false, false, false
}

// isServerError reports an error reply of the server (as opposed to a
// transport failure or a deadline).
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// pinned returns the client of the master that serves key, whose
// pipelines run on one connection.
func (d *durability) pinned(ctx context.Context, key string) (*redis.Client, error) {
	if d.single != nil {
		return d.single, nil
	}
	c, err := d.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return c, nil
}

// acked reports whether the WAIT and WAITAOF replies of a pipeline meet
// the setting.
func (d *durability) acked(wait, waitAOF *redis.Cmd) error {
	return d.ackedAOF(wait, waitAOF, d.LocalAOF)
}

// ackedAOF is acked, with localAOF saying whether waitAOF asked for the
// local fsync.
func (d *durability) ackedAOF(wait, waitAOF *redis.Cmd, localAOF bool) error {
	if wait != nil {
		n, err := wait.Int64()
		if err != nil {
			return fmt.Errorf("%w: WAIT: %w", ErrUnavailable, err)
		}
		if n < int64(d.Replicas) {
			return refuse(ErrNotDurable, whyNotDurable, fmt.Errorf("%w: %d of %d replicas acknowledged", ErrUnavailable, n, d.Replicas))
		}
	}
	if waitAOF != nil {
		v, err := waitAOF.Slice()
		switch {
		case err != nil && isServerError(err):
			// Refused by the server: AOF switched off since (appendonly
			// no), or the server no longer knows WAITAOF.
			return refuse(ErrNotDurable, whyNotDurable, fmt.Errorf("%w: WAITAOF: %w", ErrUnavailable, err))
		case err != nil:
			return fmt.Errorf("%w: WAITAOF: %w", ErrUnavailable, err)
		}
		if len(v) != 2 {
			return fmt.Errorf("%w: unexpected reply to WAITAOF", ErrUnavailable)
		}
		local, ok1 := v[0].(int64)
		reps, ok2 := v[1].(int64)
		if !ok1 || !ok2 {
			return fmt.Errorf("%w: unexpected reply to WAITAOF", ErrUnavailable)
		}
		if (localAOF && local < 1) || reps < int64(d.ReplicaAOF) {
			return refuse(ErrNotDurable, whyNotDurable, fmt.Errorf("%w: AOF fsync acknowledged locally %d, by %d of %d replicas", ErrUnavailable, local, reps, d.ReplicaAOF))
		}
	}
	return nil
}

// pipelineOn runs the script (EVALSHA, or EVAL once the server does not
// know it) followed by WAIT and WAITAOF on one connection of the master
// serving key, on the caller's goroutine when direct is set (see
// [Store.direct]: the client itself returns by ctx's deadline). It returns
// the script's reply and the durability verdict.
func (s *Store) pipelineOn(ctx context.Context, sc *script, key string, cmd []any, direct bool) (any, error) {
	c, err := s.dur.pinned(ctx, key)
	if err != nil {
		return nil, err
	}
	var r pipeResult
	if direct {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		r = s.pipelineOnce(ctx, c, sc, cmd)
	} else {
		done := pipePool.Get().(chan pipeResult) // buffered: the sender never blocks
		go func() { done <- s.pipelineOnce(ctx, c, sc, cmd) }()
		select {
		case r = <-done:
			pipePool.Put(done)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	if r.probeErr != nil && r.err == nil {
		// Eviction may be on (or the policy could not be read): whatever
		// the script answered is refused, and the checks run at once (not
		// for a transport error of the probe, as in exchange).
		if Reason(r.probeErr) != "" {
			s.checkSoon()
		}
		return nil, r.probeErr
	}
	if r.err != nil {
		if s.dur.cluster != nil {
			s.dur.cluster.ReloadState(context.WithoutCancel(ctx))
		}
		return nil, s.wrapErr(ctx, r.err)
	}
	if r.durErr != nil {
		return r.v, r.durErr
	}
	return r.v, nil
}

// pipeResult is a pipeline's script reply, its error, the durability
// verdict, and the policy probe's.
type pipeResult struct {
	v                     any
	err, durErr, probeErr error
}

// pipePool holds the channels pipeline hands its goroutine (see donePool).
var pipePool = sync.Pool{New: func() any { return make(chan pipeResult, 1) }}

// pipelineOnce sends the pipeline of cmd, and again with EVAL when the
// server does not know the script.
func (s *Store) pipelineOnce(ctx context.Context, c *redis.Client, sc *script, cmd []any) pipeResult {
	r := s.pipelined(ctx, c, sc, cmd, false)
	if r.err != nil && isNoScript(r.err) {
		r = s.pipelined(ctx, c, sc, cmd, true)
	}
	if Reason(r.probeErr) == whyEvictionOn {
		// Here, not in pipelineOn: an answer that comes after the
		// caller's deadline still holds every call for the check.
		s.holdForCheck(r.probeErr)
	}
	return r
}

// pipelined sends cmd (as EVAL when eval is set), the policy probe when
// on (right after the script: see [policyProbe]), and the WAIT and WAITAOF
// of the setting in one pipeline on c.
func (s *Store) pipelined(ctx context.Context, c *redis.Client, sc *script, cmd []any, eval bool) pipeResult {
	if eval {
		cmd = asEval(*sc, cmd)
	}
	var queue [4]redis.Cmder
	sv := redis.NewCmd(ctx, cmd...)
	cmds := append(queue[:0], sv)
	var pc *redis.MapStringStringCmd
	if s.dur.probes(sc) {
		pc = probeCommand(ctx)
		cmds = append(cmds, pc)
	}
	var w, wa *redis.Cmd
	if s.dur.wait != nil {
		w = redis.NewCmd(ctx, s.dur.wait...)
		cmds = append(cmds, w)
	}
	waitAOF, localAOF := s.dur.aofWait()
	if waitAOF != nil {
		wa = redis.NewCmd(ctx, waitAOF...)
		cmds = append(cmds, wa)
	}
	p := s.dur.pipeline(c)
	if bp, ok := p.(*redis.Pipeline); ok {
		_ = bp.BatchProcess(ctx, cmds...) // a pipeline only queues them
	} else {
		_ = p.BatchProcess(ctx, slices.Clone(cmds)...) // queue stays on the stack
	}
	p.Exec(ctx) // errors are read per command
	s.dur.donePipeline(c, p)
	v, err := sv.Result()
	if err != nil {
		return pipeResult{err: err, probeErr: probed(pc)}
	}
	return pipeResult{v: v, durErr: s.dur.ackedAOF(w, wa, localAOF), probeErr: probed(pc)}
}

// pipeline returns an empty pipeline on c: for the store's own client one
// an earlier call left (Exec empties a pipeline: what it sent goes to the
// client's hooks in a slice of its own, and a pipeline keeps nothing
// else of a call), else a new one.
func (d *durability) pipeline(c *redis.Client) redis.Pipeliner {
	if c == d.single {
		if p, ok := d.pipes.Get().(redis.Pipeliner); ok {
			return p
		}
	}
	return c.Pipeline()
}

// donePipeline keeps p, a pipeline on c after its Exec, for the next call
// when c is the store's own client.
func (d *durability) donePipeline(c *redis.Client, p redis.Pipeliner) {
	if c == d.single && p.Len() == 0 {
		d.pipes.Put(p)
	}
}

// command is the EVALSHA command of sc on keys with args.
func command(sc script, keys []string, args ...string) []any {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "EVALSHA", sc.sha, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	return cmd
}

// asEval returns the EVAL form of an EVALSHA command of sc, for a server
// that does not know the script yet (it caches it).
func asEval(sc script, cmd []any) []any {
	eval := make([]any, len(cmd))
	copy(eval, cmd)
	eval[0], eval[1] = "EVAL", sc.src
	return eval
}

// wrapErr turns a client error into one matching ErrUnavailable (and the
// context's error when ctx has ended).
func (s *Store) wrapErr(ctx context.Context, err error) error {
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: unexpected nil reply", ErrUnavailable)
	}
	ctxErr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && ctxErr == nil && !time.Now().Before(dl) {
		// The socket's deadline (the context's) can pass an instant before
		// the context's own timer fires.
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w: %w (%w)", ErrUnavailable, ctxErr, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// holdForCheck has every call refuse with err (an evicting policy the
// probe read, or loss counters a script found moved) until a check has
// judged the server: the check acts on the evictions (settle) before it
// replaces the refusal, so neither a policy switched back to noeviction
// meanwhile nor commands regrown past the baseline after a reset let a
// claim be answered first before the counters are judged.
func (s *Store) holdForCheck(err error) {
	s.srv.cond.CompareAndSwap(nil, &err)
	s.checkSoon()
}
