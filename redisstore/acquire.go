package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// An acquisition (AcquireLease, AcquireRecord) whose entry is free or done,
// the common cases, needs no Lua: one pipeline on the connection of the
// master serving the entry's slot sends
//
//	GET marker                       the shard's fence marker (T0)
//	SET entry lease NX PX ms GET     the acquisition, or the entry found
//	MGET marker side                 the marker again (T2), and the
//	                                 record's side key (AcquireRecord;
//	                                 GET marker for a plain lease)
//	TIME                             Redis's clock
//
// (on a connection the store keeps, held.go: UNWATCH or DISCARD first as
// its state asks, and WATCH marker entry, then MGET marker entry [side] as
// T2), followed by the policy probe and the Durability waits, as after a
// script (and MULTI, on a kept connection). Its answer stands when both reads of the marker are "O", the
// caller's clock is within MaxSkew of Redis's, and the SET either took the
// ID (an acquired lease) or found a done entry or a claim (done, with the
// side key read after it). A marker read "O" before and after the SET
// was "O" when it ran: a loss in between (a flush, a restart, an evicted
// marker) leaves it missing or fenced at T2, and "O" is written again only
// by an operator (Provision, Reopen) or when a fence ends, a lifetime
// after it was raised, so no fence both begins after T0 and ends before
// T2. Every
// other answer (a marker fenced or missing, a lagging clock, an entry
// leased, a cancel note, an error reply such as Redis 6.2's to SET NX GET)
// is decided again by the acquire script with the same token, which finds
// the lease the SET may have taken as its own; when the script refuses,
// that lease is released at once, so a refusal keeps nothing.

// fastAcquire is what [Store.acquireFast] read: whether its SET took the
// ID, else the entry it found; the side key's value (nil when missing or
// not asked for); the Durability verdict of the write. With a kept
// connection (held.go), also Redis's clock (t0, ms), whether the reads
// after the WATCH found the marker "O" and the entry this lease's (mine),
// and the connection when the caller still owns it.
type fastAcquire struct {
	wrote  bool
	entry  string
	side   any
	durErr error
	t0     int64
	mine   bool
	conn   *keptConn
}

// fastAcquirable reports whether acquisitions try the pipeline first: the
// client is a *redis.Client or a *redis.ClusterClient (the pipeline must
// run on one connection) and no server refused SET NX GET.
func (s *Store) fastAcquirable() bool {
	return (s.dur.single != nil || s.dur.cluster != nil) && !s.noSetNXGet.Load()
}

// acquireFast sends the acquisition pipeline for the entry key of marker's
// shard with lease value val for ms (side names the record's side key, ""
// for a plain lease), on the caller's goroutine when direct is set; on a
// connection the store keeps (see held.go) when it has one free, with
// the WATCH a confirmation without Lua needs. ok
// reports whether its answer stands; when it does not, f.wrote says
// whether the SET took the ID (the script then finds that lease as its
// own). err is a transport error, a deadline or the probe's refusal: the
// outcome is unknown, as after a script.
func (s *Store) acquireFast(ctx context.Context, marker *string, key, side string, val string, ms int64, direct bool) (f fastAcquire, ok bool, err error) {
	hc := s.held.get()
	defer func() {
		if !ok && f.conn != nil {
			s.held.put(f.conn, nil)
			f.conn = nil
		}
	}()
	cmds, at, t2, tm := fastCmds(hc, marker, key, side, val, ms)
	sent := s.now().UnixMilli()
	var replies []any
	var durErr error
	if hc != nil {
		multi := redis.NewCmd(ctx, "MULTI")
		var owns bool
		replies, durErr, err, owns = s.onConn(ctx, hc, nil, cmds, at, multi, direct)
		switch {
		case owns && err == nil:
			f.conn = hc
			hc.state = connInMulti
			if merr := multi.Err(); merr != nil {
				hc.state = connWatching
				if why, ok := refused(merr); ok {
					s.keptOff(why)
				}
			}
		case owns:
			hc.state = connUnsure // an error reply: MULTI's may not have been read
			s.held.put(hc, err)
			if why, ok := refused(err); ok {
				s.keptOff(why) // the SET's own refusal included: the script decides below
			}
			if !isServerError(err) && !errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
				// A kept connection the server closed (a restart, an
				// idle timeout): go-redis checks a pooled connection
				// before each use, not a kept one. The same pipeline
				// again on the pool: a SET that landed finds this
				// lease, its own.
				hc = nil
				cmds, at, t2, tm = fastCmds(nil, marker, key, side, val, ms)
			}
		}
		if hc != nil && err != nil && !errors.Is(err, ErrUnavailable) {
			err = s.wrapErr(ctx, err)
		}
	}
	if hc == nil {
		replies, durErr, err = s.sendRecord(ctx, nil, *marker, cmds, at, direct)
	}
	if err != nil {
		if Reason(err) == "" && isServerError(err) {
			if strings.Contains(err.Error(), "syntax error") {
				s.noSetNXGet.Store(true)
				s.keptOff("SET NX GET")
			}
			// The script decides; it finds what the SET may have taken,
			// and a refusal releases it.
			return fastAcquire{wrote: true}, false, nil
		}
		return fastAcquire{}, false, err
	}
	f.durErr = durErr
	entry, isStr := replies[at].(string)
	f.wrote = replies[at] == nil
	if isStr && entry == val {
		// This very lease, taken by a pipeline sent again: the script
		// writes it again (for the waits after it), and a refusal of
		// the script releases it.
		f.wrote = true
		return f, false, nil
	}
	// The marker's second read, with the entry on a kept connection and
	// the side key last (MGET reads a key of another type as nil: the
	// marker then is not "O", the side key not this record's).
	m2 := replies[t2]
	if hc != nil || side != "" {
		mv, _ := m2.([]any)
		n := 1
		if hc != nil {
			n++
		}
		if side != "" {
			n++
		}
		if len(mv) != n {
			return f, false, nil
		}
		if side != "" {
			f.side = mv[n-1]
		}
		m2 = mv[0]
		f.mine = hc != nil && mv[0] == "O" && mv[1] == val
	}
	now, tok := redisMillis(replies[tm])
	f.t0 = now
	if m0, _ := replies[at-1].(string); m0 != "O" || m2 != "O" || !tok || sent < now-s.maxSkew.Milliseconds() {
		return f, false, nil
	}
	if f.wrote {
		return f, true, nil
	}
	if !isStr || entry == "" || (entry[0] != 'D' && entry[0] != '1') {
		return f, false, nil // leased, a cancel note, or foreign: the script decides
	}
	f.entry = entry
	return f, true, nil
}

// fastCmds is the acquisition pipeline, with the WATCH and MGET of a kept
// connection kc (nil for none), after the UNWATCH or DISCARD its state
// asks (the caller sends MULTI last): the commands, and the indexes of the SET, of the marker's
// second read and of TIME.
func fastCmds(kc *keptConn, marker *string, key, side, val string, ms int64) (cmds [][]any, at, t2, tm int) {
	c := &pipeCall{key: key, val: val, side: side, ms: ms}
	if kc != nil {
		switch kc.state {
		case connWatching:
			c.add("UNWATCH")
		case connInMulti:
			c.add("DISCARD") // which unwatches too
		}
		at = c.k + 1
		c.add("GET", marker)
		c.add("SET", &c.key, &c.val, "NX", "PX", &c.ms, "GET")
		c.add("WATCH", marker, &c.key) // after the SET, which would dirty it
		if side != "" {
			c.add("MGET", marker, &c.key, &c.side)
		} else {
			c.add("MGET", marker, &c.key)
		}
		t2, tm = at+2, at+3
	} else {
		c.add("GET", marker)
		c.add("SET", &c.key, &c.val, "NX", "PX", &c.ms, "GET")
		if side != "" {
			c.add("MGET", marker, &c.side)
		} else {
			c.add("GET", marker)
		}
		at, t2, tm = 1, 2, 3
	}
	c.add("TIME")
	return c.cmds[:c.k], at, t2, tm
}

// pipeCall holds the commands of a pipeline without Lua (an acquisition,
// a kept confirmation) in one allocation, their arguments pointing into
// it, as [scriptCall] does for a script. It is not reused: a client hook
// may keep a command's arguments after the call.
type pipeCall struct {
	args            [19]any
	cmds            [7][]any
	n, k            int
	key, val, side  string
	done, sideValue argBytes
	ms              int64
}

// add appends one command.
func (c *pipeCall) add(args ...any) {
	m := copy(c.args[c.n:], args)
	c.cmds[c.k] = c.args[c.n : c.n+m : c.n+m]
	c.n += m
	c.k++
}

// keep hands f's connection to token's lease when the acquisition stands
// with the WATCH in place and MULTI open (code 1, f.mine), else back to
// the free ones.
func (s *Store) keep(f *fastAcquire, code int64, err error, key, token string, ms int64) {
	if f.conn == nil {
		return
	}
	if code != 1 || err != nil || !f.mine || f.conn.state != connInMulti {
		s.held.put(f.conn, nil)
		return
	}
	f.conn.key, f.conn.t0, f.conn.end = key, f.t0, f.t0+ms
	s.held.hold(token, f.conn, time.Duration(ms)*time.Millisecond)
}

// redisMillis reads t, a TIME reply, as Unix ms; false for a reply that
// does not parse.
func redisMillis(t any) (int64, bool) {
	tv, ok := t.([]any)
	if !ok || len(tv) != 2 {
		return 0, false
	}
	sec, ok1 := tv[0].(string)
	usec, ok2 := tv[1].(string)
	if !ok1 || !ok2 {
		return 0, false
	}
	secs, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(usec, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return secs*1000 + us/1000, true
}

// dropOwn releases token's lease on id (entry key) that the pipeline took
// before the script refused the acquisition, so that the refusal keeps
// nothing: at once when Redis answers within ctx, else in the background
// within the lease (ms).
func (s *Store) dropOwn(ctx context.Context, id, key, token string, ms int64) {
	end := time.Now().Add(time.Duration(ms) * time.Millisecond)
	if _, err := s.eval(ctx, &releaseLua, command(releaseLua, []string{key}, token)); err != nil {
		s.releaseLater(id, token, end)
	}
}
