package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// on reports whether Durability asks for a wait.
func (d *durability) on() bool { return d.wait != nil || d.waitAOF != nil }

// pipelines reports whether a guarded script must be pipelined with
// more commands now: Durability asks for a wait, or the implied local AOF
// wait is on.
func (d *durability) pipelines() bool {
	return d.on() || (d.implied != nil && d.implied.on.Load())
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

// pipeResult is a pipeline's script reply, its error, and the
// durability verdict.
type pipeResult struct {
	v           any
	err, durErr error
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
	return r
}

// pipelined sends cmd (as EVAL when eval is set) and the WAIT and WAITAOF
// of the setting in one pipeline on c.
func (s *Store) pipelined(ctx context.Context, c *redis.Client, sc *script, cmd []any, eval bool) pipeResult {
	if eval {
		cmd = asEval(*sc, cmd)
	}
	var queue [3]redis.Cmder
	sv := redis.NewCmd(ctx, cmd...)
	cmds := append(queue[:0], sv)
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
		return pipeResult{err: err}
	}
	return pipeResult{v: v, durErr: s.dur.ackedAOF(w, wa, localAOF)}
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
	if isServerError(err) && isRefused(err) {
		// A command the user may not run (or renamed away): a fix for
		// the operator, not a retry. The checks verify every right
		// (rights.go), so this is a right revoked since the last one,
		// whose next check names the ACL line.
		return refuse(ErrConfig, whyRefusedCommand, fmt.Errorf("%w: %w", ErrUnavailable, err))
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

// holdForCheck has every step that can take a free ID (a claim, an
// acquisition) refuse with err (loss counters a script found moved) until
// a check begun after it has judged the server, and starts that check at
// once (one more round when one runs). Each finding is a hold of its own,
// which a check begun before it does not lift (see [Store.checkServer]).
// The check acts on the evictions (settle) before it lifts the refusal,
// so commands regrown past the baseline after a reset do not let a claim
// be answered first before the counters are judged. The steps on a
// caller's own lease (confirm, renew, release) go on: the counters guard
// nothing they do, and a lease left unconfirmed until the check could
// end first, and its delivery be processed again.
func (s *Store) holdForCheck(err error) {
	s.srv.hold.Store(&err)
	s.recheck()
}
