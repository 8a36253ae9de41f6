package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A confirmation needs no Lua when the acquisition that took the lease
// (AcquireLease, AcquireRecord) ran on a connection the store keeps for
// the lease: its pipeline (acquire.go) sends, after the SET NX,
//
//	WATCH marker entry
//	MGET marker entry                "O" and this lease's own value
//	TIME                             T0
//	(the policy probe, the Durability waits)
//	MULTI
//
// and the confirmation sends on that connection, in one pipeline,
//
//	TIME                             Redis's clock when EXEC runs
//	SET side token+result PXAT until (ConfirmRecord)
//	SET entry done PXAT until
//	EXEC
//
// followed by the Durability waits. MULTI's reply is read at the
// acquisition, so a confirmation only queues writes: a server that
// refuses MULTI keeps no lease's connection. EXEC runs only when neither
// key was written, flushed, swapped or expired since the WATCH (Redis
// 6.0.9 and later abort on an expired watched key too; a restart or a
// failover ends the connection, which go-redis never replaces under a
// kept one), so the marker is still "O" and the entry still this lease:
// the confirm script would have recorded, and the transaction writes
// what it writes (the side key directly, where the script renames a
// staging key to it; no staging key is left). Every other outcome (EXEC aborted, an error, a lease whose
// connection was not kept) goes to the confirm script with the same
// token, which decides as it always did.
//
// The script's clock checks hold by construction, or are read after:
//
//   - until is after Redis's now at EXEC: the lease was set at or before
//     the acquisition's TIME (T0, same connection, earlier command) and
//     expires by T0 + lease; EXEC ran while it was live, so before then.
//     The fast path asks until ≥ T0 + lease + 1 s (the second covers
//     EXEC's own clock reads).
//   - until is within the bound of Redis's now at EXEC: EXEC runs after
//     T0, so until ≤ T0 + bound suffices (Redis's clock not stepping
//     back, as every PXAT and fence of the store assumes).
//   - the caller's clock within MaxSkew of Redis's: Redis's clock is at
//     least T0 plus the monotonic time since the acquisition, so a
//     caller lagging that goes to the script before anything is sent
//     (refused, nothing written); the TIME inside the transaction then
//     catches only a jump of Redis's own clock, reported as the script
//     reports it, [ErrClockSkew] ("may or may not have been applied").
//
// Outside these bounds (a lease renewed or longer than until's distance,
// an until near the bound), the script decides.
//
// The connections are the client's (its options, hooks and dialer), taken
// with Client.Conn: a store keeps up to a quarter of the client's pool
// (none under 4), and takes a new one only while under half of the pool is
// in use, so that the stores and the user sharing a client keep room.
// Each pipeline on one begins with UNWATCH or DISCARD as its state asks
// (connState); one in an unknown state (after an error reply) leaves.
// One leaves in a goroutine of its own (Close does no network I/O), after
// DISCARD and UNWATCH (one whose UNWATCH is queued, still in a
// transaction, never goes back to the client's pool), or broken (go-redis
// closes a connection after a transport error). A lease gives its
// connection back when it is confirmed, released or renewed; one never
// confirmed is taken back by an acquisition that finds every kept
// connection busy, once the lease has ended; when none is free, a call
// takes the ordinary path. A server that refuses a command only the kept
// path sends turns it off: the kept connections leave. A connection is
// used by one goroutine at a time: whoever takes it from the free list or
// the lease map owns it until it gives it back.

// heldConns are the connections the store keeps for confirmations.
type heldConns struct {
	mu     sync.Mutex
	client *redis.Client // nil: no connection is kept (a Cluster, another client, a pool under 4)
	max    int
	owned  int // free, held or in use
	free   []*keptConn
	leases map[string]*keptConn // by token
	closed bool
	// off is set once the kept path is turned off (see [Store.keptOff]):
	// no more are kept.
	off atomic.Bool
}

// connState is what a kept connection carries from its last pipeline.
type connState uint8

const (
	connClean    connState = iota // new, or its last reply an EXEC's (which unwatches, run or aborted)
	connWatching                  // a WATCH, not in a transaction (MULTI refused)
	connInMulti                   // in the transaction the acquisition opened, nothing queued
	connUnsure                    // after an error reply: it leaves
)

// keptConn is a kept connection with its pipeline (see
// [durability.pipeline]) and, while it holds a lease, what the
// confirmation needs of it.
type keptConn struct {
	conn  *redis.Conn
	pipe  redis.Pipeliner
	state connState
	key   string    // the entry
	t0    int64     // Redis's clock at the acquisition (ms)
	end   int64     // Redis's ms by which the lease has ended: t0 + lease
	by    time.Time // the caller's clock after which the lease has ended
	at    time.Time // when the acquisition was kept (monotonic)
}

// Pipeline returns c's pipeline, empty after each Exec (c has one user at
// a time).
func (c *keptConn) Pipeline() redis.Pipeliner { return c.pipe }

// poolCap is how many connections c's pool opens at most.
func poolCap(c *redis.Client) int {
	o := c.Options()
	if o.MaxActiveConns > 0 && o.MaxActiveConns < o.PoolSize {
		return o.MaxActiveConns
	}
	return o.PoolSize
}

// newHeldConns keeps connections of c; none when c is nil or its pool is
// under 4.
func newHeldConns(c *redis.Client) *heldConns {
	if c == nil || poolCap(c) < 4 {
		return &heldConns{}
	}
	return &heldConns{client: c, max: poolCap(c) / 4, leases: make(map[string]*keptConn)}
}

// room reports whether the client's pool has room for one more kept
// connection: under half of it in use (kept ones included, every store's).
func (h *heldConns) room() bool {
	st := h.client.PoolStats()
	return int(st.TotalConns)-int(st.IdleConns) < poolCap(h.client)/2
}

// get returns a free connection, a new one while fewer than max are kept
// and the pool has room, or one whose lease has ended (never confirmed: a
// handler that panicked, a caller that went away); nil when none is (the
// caller takes the ordinary path).
func (h *heldConns) get() *keptConn {
	if h.client == nil || h.off.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil
	case len(h.free) > 0:
		c := h.free[len(h.free)-1]
		h.free = h.free[:len(h.free)-1]
		return c
	case h.owned < h.max && h.room():
		h.owned++
		conn := h.client.Conn()
		return &keptConn{conn: conn, pipe: conn.Pipeline()}
	}
	now := time.Now()
	for token, c := range h.leases { // at most max
		if now.After(c.by) {
			delete(h.leases, token)
			return c
		}
	}
	return nil
}

// put gives c back after a use that ended with err: a connection that may
// be broken, or in an unknown state, leaves; the others wait for the next
// acquisition.
func (h *heldConns) put(c *keptConn, err error) {
	if c.state == connUnsure || (err != nil && !errors.Is(err, redis.Nil) && !isServerError(err) && !errors.Is(err, ErrUnavailable)) {
		h.drop(c)
		return
	}
	h.mu.Lock()
	if h.closed || h.off.Load() {
		h.mu.Unlock()
		h.drop(c)
		return
	}
	h.free = append(h.free, c)
	h.mu.Unlock()
}

// drop gives c back to the client's pool (see end).
func (h *heldConns) drop(c *keptConn) {
	h.mu.Lock()
	h.owned--
	h.mu.Unlock()
	go end(c)
}

// end returns c to the client's pool out of any transaction and WATCH:
// a broken connection fails at once and go-redis closes it; one whose
// UNWATCH, after DISCARD, is not answered OK (but QUEUED: DISCARD refused)
// may still queue commands and is left out of the pool.
func end(c *keptConn) {
	if c.state != connClean {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var unwatch *redis.Cmd
		_, _ = c.conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "DISCARD") // not p.Discard, which empties the pipeline
			unwatch = p.Do(ctx, "UNWATCH")
			return nil
		})
		if v, err := unwatch.Result(); isServerError(err) || (err == nil && v != "OK") {
			return // refused, or QUEUED inside a transaction: never back to the pool
		}
	}
	c.conn.Close()
}

// hold keeps c for token's lease until take, or until get reclaims it
// after the lease (by the caller's clock: EXEC aborts after it anyway).
func (h *heldConns) hold(token string, c *keptConn, lease time.Duration) {
	c.at = time.Now()
	c.by = c.at.Add(lease)
	h.mu.Lock()
	if h.closed || h.off.Load() {
		h.mu.Unlock()
		h.drop(c)
		return
	}
	h.leases[token] = c
	h.mu.Unlock()
}

// take removes token's held lease, nil when none is held; the caller owns
// its connection.
func (h *heldConns) take(token string) *keptConn {
	if h.client == nil {
		return nil
	}
	h.mu.Lock()
	c := h.leases[token]
	if c != nil {
		delete(h.leases, token)
	}
	h.mu.Unlock()
	return c
}

// release gives back token's connection, if one is held (ReleaseLease,
// RenewLease: the lease ends or its entry changes).
func (h *heldConns) release(token string) {
	if c := h.take(token); c != nil {
		h.put(c, nil)
	}
}

// close returns every kept connection to the client's pool (see drain).
func (h *heldConns) close() {
	if h.client == nil {
		return
	}
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.drain()
}

// drain returns the free kept connections and those holding a lease (whose
// confirmation then goes to the script) to the client's pool, each in a
// goroutine of its own (see end); one in use goes back when its user gives
// it.
func (h *heldConns) drain() {
	h.mu.Lock()
	conns := h.free
	h.free = nil
	for token, c := range h.leases {
		conns = append(conns, c)
		delete(h.leases, token)
	}
	h.owned -= len(conns)
	h.mu.Unlock()
	for _, c := range conns {
		go end(c)
	}
}

// keptOff turns the kept path off once the server refused a command only
// it sends (why names it), or refused SET NX GET: the kept connections
// leave (see drain).
func (s *Store) keptOff(why string) {
	if s.held.client == nil || s.held.off.Swap(true) {
		return
	}
	s.held.drain()
	s.log.Info("redisstore: the server refused a command confirmations without Lua need: every confirmation runs the confirm script", "prefix", s.prefix, "refused", why)
}

// refused reports whether err is the server's refusal of a command (an
// ACL's NOPERM, anywhere in the reply as in EXECABORT's, or a command
// unknown or renamed away), and names it.
func refused(err error) (string, bool) {
	if !isServerError(err) {
		return "", false
	}
	msg, _, _ := strings.Cut(err.Error(), ", with args") // an unknown command's arguments may name an ID
	if strings.Contains(msg, "NOPERM") || strings.Contains(msg, "unknown command") {
		return msg, true
	}
	return "", false
}

// onConn runs exchange's pipeline of cmds (and tail) on c (sc as exchange
// takes it), on the caller's goroutine when direct is set, else on another one that
// the caller leaves at ctx's end. owns reports whether the caller owns c
// afterwards; when it does not, the goroutine gives it back.
func (s *Store) onConn(ctx context.Context, c *keptConn, sc *script, cmds [][]any, at int, tail *redis.Cmd, direct bool) (replies []any, durErr, err error, owns bool) {
	if direct {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err), true
		}
		replies, durErr, err = s.exchange(ctx, c, sc, cmds, at, false, tail)
		return replies, durErr, err, true
	}
	return awaitExchange(ctx, func() ([]any, error, error) {
		return s.exchange(ctx, c, sc, cmds, at, false, tail)
	}, func(err error) {
		c.state = connUnsure // its caller, who reads the state, has left
		s.held.put(c, err)
	})
}

// confirmHeld tries token's confirmation on the connection its acquisition
// kept (see above): done is the entry's done value, side the side key's
// name and value (sideKey "" for a plain lease), ms the until (Unix ms),
// bound the guarded scripts' bound. ok reports whether its answer stands
// (code and err as the confirm script's, through verdict); when it does
// not, the script decides.
func (s *Store) confirmHeld(ctx context.Context, sc *script, shard int, key, token string, done []byte, sideK string, side []byte, ms int64, bound *string, direct bool) (code int64, err error, ok bool) {
	l := s.held.take(token)
	if l == nil {
		return 0, nil, false
	}
	b, perr := strconv.ParseInt(*bound, 10, 64)
	// Redis's clock has advanced at least as far as the monotonic clock
	// since the acquisition's TIME: a caller's clock behind that by more
	// than MaxSkew goes to the script, which refuses without writing
	// (the TIME in the transaction catches only Redis's own clock jumps).
	sent := s.now().UnixMilli()
	lags := sent < l.t0+time.Since(l.at).Milliseconds()-s.maxSkew.Milliseconds()
	if perr != nil || lags || l.key != key || ms < l.end+1000 || ms > l.t0+b {
		s.held.put(l, nil)
		return 0, nil, false
	}
	if l.state != connInMulti || s.held.off.Load() {
		s.held.put(l, nil)
		return 0, nil, false
	}
	pc := &pipeCall{key: key, side: sideK, done: done, sideValue: side, ms: ms}
	pc.add("TIME")
	if sideK != "" { // before the entry: no done entry without its side key
		pc.add("SET", &pc.side, &pc.sideValue, "PXAT", &pc.ms)
	}
	pc.add("SET", &pc.key, &pc.done, "PXAT", &pc.ms)
	pc.add("EXEC")
	cmds, at := pc.cmds[:pc.k], pc.k-1
	replies, durErr, xerr, owns := s.onConn(ctx, l, sc, cmds, at, nil, direct)
	if !owns {
		return 0, xerr, true // ctx ended: the outcome is unknown, as after a script
	}
	// EXEC answered (run, aborted, or EXECABORT: the transaction is
	// discarded), or the state is unknown (EXEC itself refused, unknown
	// to Redis 6.0, leaves the transaction open).
	l.state = connUnsure
	if xerr == nil || errors.Is(xerr, redis.Nil) || (isServerError(xerr) && strings.HasPrefix(xerr.Error(), "EXECABORT")) {
		l.state = connClean
	}
	s.held.put(l, xerr)
	if why, ok := refused(xerr); ok {
		s.keptOff(why)
	}
	if xerr != nil {
		return 0, nil, false // aborted (nil) or refused: the script decides
	}
	res, isArr := replies[at].([]any)
	if !isArr || len(res) != at {
		return 0, fmt.Errorf("%w: unexpected reply to EXEC", ErrUnavailable), true
	}
	for _, r := range res[1:] {
		if r != "OK" {
			return 0, fmt.Errorf("%w: unexpected reply to EXEC", ErrUnavailable), true
		}
	}
	now, tok := redisMillis(res[0])
	switch {
	case !tok:
		return 0, fmt.Errorf("%w: unexpected reply to TIME", ErrUnavailable), true
	case sent < now-s.maxSkew.Milliseconds():
		code = -3 // the script's clock guard, read at EXEC
	case ms <= now:
		// EXEC ran after the lease ended (its expiry did not abort it,
		// before Redis 6.0.9): a SET with a PXAT in the past deletes its
		// key, so the entry ended as the lease had, and no side key is
		// left, as after the script's refusal.
		code = -5
	case ms > now+b:
		// Only a clock that stepped back since the acquisition comes here.
		return 0, fmt.Errorf("%w: Redis's clock stepped back between the acquisition and the confirmation", ErrUnavailable), true
	default:
		code = 1
	}
	code, _, err = s.verdict(sc, shard, code, now, sent, durErr)
	return code, err, true
}
