package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

var _ replay.Reader = (*Store)(nil)

// A read is one pipeline, one round trip: the read script on the marker
// and the entry, then a GET of the record's side key, as an acquisition
// that finds a done entry sends them (record.go). The script only reads
// (MGET, GET, PTTL, TIME): a script without flags is refused by a Redis at
// maxmemory (noeviction) only when it calls a write command, so it
// answers on a full Redis; EVAL_RO and the no-writes flag would say so
// to the server, but a user's ACL would then need EVAL_RO too. A script rather than plain reads, so that the marker,
// the entry and its remaining time are read at one instant of Redis's
// clock, the clock whose expiry decides a lapsed lease for every step (a
// lapsed entry is gone for GET), and on the marker's own server (a
// Cluster node's TIME, for a fence).
//
// The marker is judged as the guard judges it, without writing: "O" is
// open; "F<ms>" refuses while Redis's clock is before ms (or before when
// it was raised plus this store's lifetime, if later: the guard would
// lengthen it so) and is open after; a missing marker (a loss not fenced
// yet: the next write or check raises the fence) refuses for a lifetime
// from now. The caller's clock is not compared with Redis's: a read
// decides nothing by it. Replies: {0, 0} free, {2, pttl, entry} busy,
// {3, 0, entry} done (entries decoded as AcquireRecord decodes them), and
// the guard's {-1, until}, {-2, until}, {-4, 0}. ARGV[1] is the lifetime
// bound (ms).
const readRecordScript = `local mv = redis.call('MGET', KEYS[1], KEYS[2])
local m, v = mv[1], mv[2]
if not m then m = redis.call('GET', KEYS[1]) end
if m ~= 'O' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not m then return {-1, now + tonumber(ARGV[1])} end
  local f = tonumber(string.sub(m, 2))
  if string.sub(m, 1, 1) ~= 'F' or not f then return {-4, 0} end
  local r = tonumber(redis.call('GET', KEYS[1] .. 'f'))
  if r and r + tonumber(ARGV[1]) > f then f = r + tonumber(ARGV[1]) end
  if now < f then return {-2, f} end
end
if not v then v = redis.call('GET', KEYS[2]) end
if (not v) or string.sub(v, 1, 1) == 'X' then return {0, 0} end
if string.sub(v, 1, 1) == 'L' then return {2, redis.call('PTTL', KEYS[2]), v} end
return {3, 0, v}`

var readRecordLua = script{readRecordScript, "786f1d1592d831b51c764dbf367f82dacd5a4553"}

// ReadRecord implements [replay.Reader]: it returns what
// [Store.AcquireRecord] of id would find, by Redis's clock (a lapsed lease
// or an expired entry has expired in Redis, and reads free), in one round
// trip that sends no write command, so a Redis at maxmemory answers it.
// It needs none of the Durability waits. Like
// AcquireRecord it refuses while the server checks refuse and while the
// ID's shard is fenced or its marker is missing
// ([ErrFenced], with [replay.RetryAt]): a free read of a key space that
// lost data would be a claim forgotten. An entry that does not decode, or
// a done entry whose side key is missing or another lease's, is refused
// with [ErrUnavailable], as AcquireRecord refuses it.
func (s *Store) ReadRecord(ctx context.Context, id string) (replay.Record, error) {
	r, err := s.readRecord(ctx, id)
	if errors.Is(err, errSideMissing) {
		// A done entry and its side key expire at one instant, and the
		// side key is read after the script: the entry was read just
		// before it expired. Read again: it is free now, or the side key
		// is missing for good.
		r, err = s.readRecord(ctx, id)
	}
	return r, err
}

// errSideMissing reports a done entry whose side key is missing.
var errSideMissing = fmt.Errorf("%w: a recorded entry without its side key", ErrUnavailable)

// readRecord is one read of ReadRecord.
func (s *Store) readRecord(ctx context.Context, id string) (replay.Record, error) {
	if err := checkID(id); err != nil {
		return replay.Record{}, err
	}
	direct := s.direct(ctx)
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.readySpace(ctx); err != nil {
		return replay.Record{}, err
	}
	shard := shardOf(id)
	marker := s.tags[shard]
	cmds := [][]any{
		{"EVALSHA", readRecordLua.sha, 2, marker, marker + ":" + id, *s.boundArg.Load()},
		{"GET", sideKey(marker, id)},
	}
	var replies []any
	var err error
	if direct {
		replies, err = s.readOnce(ctx, cmds)
	} else {
		replies, _, err = awaitExchange(ctx, func() ([]any, error, error) {
			r, err := s.readOnce(ctx, cmds)
			return r, nil, err
		})
	}
	if err != nil {
		return replay.Record{}, err
	}
	if _, ok := replies[1].(string); !ok && replies[1] != nil {
		return replay.Record{}, fmt.Errorf("%w: unexpected reply to GET", ErrUnavailable)
	}
	reply, ok := replies[0].([]any)
	if !ok || len(reply) < 2 || len(reply) > 3 {
		return replay.Record{}, fmt.Errorf("%w: unexpected reply to the read script", ErrUnavailable)
	}
	code, ok1 := reply[0].(int64)
	val, ok2 := reply[1].(int64)
	entry, ok3 := "", len(reply) == 2
	if len(reply) == 3 {
		entry, ok3 = reply[2].(string)
	}
	if !ok1 || !ok2 || !ok3 || (len(reply) == 3) != (code == 2 || code == 3) {
		return replay.Record{}, fmt.Errorf("%w: unexpected reply to the read script", ErrUnavailable)
	}
	switch code {
	case 0:
		return replay.Record{Lease: replay.Lease{State: replay.LeaseFree}}, nil
	case 2, 3:
		return found(code, val, entry, replies[1])
	case -1:
		// Not fenced yet: the checks, run soon, raise the fence.
		s.checkSoon()
		return replay.Record{}, fenced(whyFenceRaised, shard, time.UnixMilli(val))
	case -2, -4:
		_, _, err := s.verdict(&readRecordLua, shard, code, val, 0, nil)
		return replay.Record{}, err
	}
	return replay.Record{}, fmt.Errorf("%w: unexpected reply to the read script", ErrUnavailable)
}

// readOnce sends cmds (the read script first) in one pipeline when the
// client has them, else one after the other, and the script again as
// EVAL when the server does not know it; nil for a nil reply.
func (s *Store) readOnce(ctx context.Context, cmds [][]any) ([]any, error) {
	replies := make([]any, len(cmds))
	for eval := false; ; eval = true {
		var err error
		if p, ok := s.client.(pipeliner); ok {
			pipe := p.Pipeline()
			sent := make([]interface{ Result() (any, error) }, len(cmds))
			for i, cmd := range cmds {
				if i == 0 && eval {
					cmd = asEval(readRecordLua, cmd)
				}
				sent[i] = pipe.Do(ctx, cmd...)
			}
			pipe.Exec(ctx) // errors are read per command
			for i, c := range sent {
				v, cerr := c.Result()
				if cerr != nil && (i == 0 || !errors.Is(cerr, errNil)) {
					err = cerr
					break
				}
				replies[i] = v
			}
		} else {
			for i, cmd := range cmds {
				if i == 0 && eval {
					cmd = asEval(readRecordLua, cmd)
				}
				v, cerr := s.client.Do(ctx, cmd...).Result()
				if cerr != nil && (i == 0 || !errors.Is(cerr, errNil)) {
					err = cerr
					break
				}
				replies[i] = v
			}
		}
		switch {
		case err == nil:
			return replies, nil
		case !eval && isNoScript(err):
			continue
		}
		return nil, s.wrapErr(ctx, err)
	}
}

// found decodes what an acquisition or a read found: the script's code (2
// busy, 3 done), the busy lease's remaining time (ms), its entry, and the
// record's side key (a string, or nil). An entry that does not decode, or
// a done entry whose side key is missing or another lease's, is refused
// with ErrUnavailable.
func found(code, pttl int64, entry string, side any) (replay.Record, error) {
	state, fp, result, ok := parseEntry(entry)
	if code == 3 && !ok {
		var tok string
		if tok, fp, ok = parseSide(entry); ok {
			state = replay.LeaseDone
			if result, ok = sideResult(side, tok); !ok {
				return replay.Record{}, errSideMissing
			}
		}
	}
	if !ok || (state == replay.LeaseBusy) != (code == 2) {
		return replay.Record{}, fmt.Errorf("%w: an entry that does not decode", ErrUnavailable)
	}
	r := replay.Record{Lease: replay.Lease{State: state}, Fingerprint: fp, Result: result}
	if state == replay.LeaseBusy {
		r.Wait = time.Duration(max(pttl, 0)) * time.Millisecond
	}
	return r, nil
}
