package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// argBytes is a script argument built in a reused buffer. go-redis writes
// a *argBytes through MarshalBinary, so passing one (like a *string or an
// *int64) puts no new value on the heap.
type argBytes []byte

// MarshalBinary returns the argument's bytes (for go-redis).
func (a *argBytes) MarshalBinary() ([]byte, error) { return *a, nil }

// String returns the argument as text (for logs and hooks).
func (a *argBytes) String() string { return string(*a) }

// scriptCall is the command of one guarded script: EVALSHA sha 2 marker
// entry now skew bound ARGV[4] ARGV[5] (bound: see lifetime.go), and for a
// claim or an acquisition the loss counters (see countersLua). The constant arguments point
// into the Store and the script, the rest into the scriptCall (the entry
// key and ARGV[5] share one buffer, inside the scriptCall when they fit),
// so a command is one allocation. It is not reused: a client hook may keep
// a command's arguments after the call.
type scriptCall struct {
	cmd        [11]any
	entry, val argBytes
	now, ms    int64
	// buf holds entry and val when they fit: a default prefix, the shard,
	// an ID of up to about 40 bytes and a claim's nonce.
	buf [128]byte
}

// run runs one guarded script (claim, acquire, confirm, renew) for id within one
// store deadline, after the server checks, and decodes its reply: {code,
// value}, or a bare code (the common replies of the claim, acquire and
// confirm scripts). ARGV[4] is
// ms; ARGV[5] is arg, followed by seq in base 36 when seq is not zero (the
// claim's nonce, built without a string of its own). The guard's refusals
// become errors; code 1 (the script wrote the entry) also needs the
// Durability verdict.
func (s *Store) run(ctx context.Context, sc *script, id string, ms int64, arg string, seq uint64) (code, val int64, err error) {
	direct := s.direct(ctx)
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.readySpace(ctx); err != nil {
		return 0, 0, err
	}
	// A claim or an acquisition can take a free ID: held while the loss
	// counters moved, and its script compares them.
	takesFree := sc == &claimLua || sc == &acquireLua
	if takesFree {
		if err := s.held(); err != nil {
			return 0, 0, err
		}
	}
	shard := shardOf(id)
	marker := &s.tags[shard]
	c := new(scriptCall)
	buf := c.buf[:0]
	if n := len(*marker) + 1 + len(id) + len(arg) + 13; n > len(c.buf) { // 13: seq in base 36
		buf = make([]byte, 0, n)
	}
	buf = append(append(append(buf, *marker...), ':'), id...)
	c.entry = buf[:len(buf):len(buf)]
	c.val = append(buf[len(buf):], arg...)
	if seq != 0 {
		c.val = strconv.AppendUint(c.val, seq, 36)
	}
	c.now, c.ms = s.now().UnixMilli(), ms
	life := ms // a lease
	if sc != &acquireLua && sc != &renewLua {
		life = ms - c.now // an until
	}
	bound, err := s.boundFor(ctx, life)
	if err != nil {
		return 0, 0, err
	}
	c.cmd = [11]any{"EVALSHA", &sc.sha, 2, marker, &c.entry, &c.now, &s.skewArg, bound, &c.ms, &c.val}
	cmd := c.cmd[:10]
	if takesFree {
		c.cmd[10] = s.countersArg(ctx, *marker)
		cmd = c.cmd[:]
	}
	v, durErr, err := s.send(ctx, sc, *marker, cmd, direct)
	if err != nil {
		return 0, 0, err
	}
	if n, ok := v.(int64); ok && n >= 0 {
		// A bare code: the common replies of the claim, acquire and
		// confirm scripts (value 0).
		return s.verdict(sc, shard, n, 0, c.now, durErr)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 2 {
		return 0, 0, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	code, ok1 := reply[0].(int64)
	val, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	return s.verdict(sc, shard, code, val, c.now, durErr)
}

// send sends cmd, a guarded script of sc on marker's shard, with the
// Durability wait pipelined after it when it is on, on the caller's
// goroutine when direct is set (see [Store.direct]). A durability failure
// that came with the script's reply is returned apart, as durErr, for
// [Store.verdict]: it matters only when the script wrote.
func (s *Store) send(ctx context.Context, sc *script, marker string, cmd []any, direct bool) (v any, durErr, err error) {
	if !s.dur.pipelines() {
		v, err = s.evalOn(ctx, sc, cmd, direct)
		return v, nil, err
	}
	v, err = s.pipelineOn(ctx, sc, marker, cmd, direct)
	if err != nil && v != nil {
		return v, err, nil
	}
	return v, nil, err
}

// verdict turns a script's reply into run's result; sent is the caller's
// clock (ms) the script was sent with, which a lagging-clock refusal
// reports against Redis's (the call's transit included).
func (s *Store) verdict(sc *script, shard int, code, val, sent int64, durErr error) (int64, int64, error) {
	switch code {
	case -1:
		until := time.UnixMilli(val)
		s.emit(replay.Event{Kind: replay.EventFenceRaised, Shard: shard, Until: until})
		s.checkSoon()
		return code, val, fenced(whyFenceRaised, shard, until)
	case -2:
		until := time.UnixMilli(val)
		s.emit(replay.Event{Kind: replay.EventFenced, Shard: shard, Until: until})
		return code, val, fenced(whyFenced, shard, until)
	case -3:
		s.emit(replay.Event{Kind: replay.EventClockSkew, Shard: shard})
		return code, val, refuse(ErrClockSkew, whySkew, fmt.Errorf("%w: behind by %v", ErrUnavailable, time.Duration(val-sent)*time.Millisecond))
	case -4:
		return code, val, refuse(ErrUnavailable, whyBadMarker, nil)
	case -5:
		return code, val, refuse(ErrInvalidClaim, whyPastRedis, replay.ErrExpired)
	case -6:
		return code, val, refuse(ErrInvalidClaim, whyHorizon, nil)
	case -8:
		// Every step that can take a free ID refuses until a check has
		// judged the counters: the commands that follow a reset can
		// regrow past the baseline.
		err := refuse(ErrUnavailable, whyCountersMoved, nil)
		s.holdForCheck(err)
		return code, val, err
	}
	if (code == 1 || (sc == &claimLua && code == 2)) && durErr != nil {
		s.emit(replay.Event{Kind: replay.EventNotDurable, Shard: shard})
		return 0, 0, durErr
	}
	return code, val, nil
}

// fenced is the refusal of a call on shard, fenced until (Redis's
// clock): ErrFenced, with RetryAt until.
func fenced(why string, shard int, until time.Time) error {
	return &refusal{sentinel: ErrFenced, why: why, retryAt: until,
		cause: fmt.Errorf("%w: shard %d fenced until %s", ErrUnavailable, shard, until.UTC().Format(time.RFC3339))}
}

// eval runs an EVALSHA command of sc (see [command]) on the client, and
// its EVAL form (which also caches the script) only when the server does
// not know the script yet. ctx already carries the store's deadline.
func (s *Store) eval(ctx context.Context, sc *script, cmd []any) (any, error) {
	return s.evalOn(ctx, sc, cmd, false)
}

// evalOn is eval, on the caller's goroutine when direct is set (see
// [Store.direct]).
func (s *Store) evalOn(ctx context.Context, sc *script, cmd []any, direct bool) (any, error) {
	v, err := s.callOn(ctx, direct, cmd)
	if err != nil && isNoScript(err) {
		v, err = s.callOn(ctx, direct, asEval(*sc, cmd))
	}
	if err != nil && errors.Is(err, errNil) {
		return nil, fmt.Errorf("%w: unexpected nil reply to a script", ErrUnavailable)
	}
	return v, err
}

// direct reports whether a call under parent, the caller's context before
// the store's deadline is added, may run on the caller's goroutine instead
// of on a goroutine of its own (see [Store.call]). That goroutine exists
// to return at once when the caller's context ends or the store's deadline
// passes while the client is still waiting. A context that cannot be
// cancelled (Done returns nil), or one from [replay.WithDeadlineOnly]
// (the webhook middleware's lease steps, and the record and renewal
// steps of the idempotency and mcptoken packages), ends only
// at a deadline, and a go-redis client with ContextTimeoutEnabled puts
// the context's deadline on the socket (reads, writes, dials) and on its
// pool wait, so it returns by the deadline itself: then the goroutine
// would only add a scheduling hop per call. Any other client, or a
// context that can be cancelled otherwise, keeps it.
func (s *Store) direct(parent context.Context) bool {
	if parent == nil || (parent.Done() != nil && !replay.EndsOnlyAtDeadline(parent)) {
		return false
	}
	switch c := s.client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// callOn runs cmd through callDirect when direct is set, else through call.
func (s *Store) callOn(ctx context.Context, direct bool, cmd []any) (any, error) {
	if direct {
		return s.callDirect(ctx, cmd...)
	}
	return s.call(ctx, cmd...)
}

// callDirect is [Store.call] on the caller's goroutine, for a call that
// [Store.direct] allows: the client returns by ctx's deadline.
func (s *Store) callDirect(ctx context.Context, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	v, err := s.client.Do(ctx, args...).Result()
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, redis.Nil):
		return nil, err
	}
	return nil, s.wrapErr(ctx, err)
}
