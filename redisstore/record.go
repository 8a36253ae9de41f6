package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

var _ replay.Recorder = (*Store)(nil)

// A record's entry lives in the ID's one entry, <prefix>{NN}:<id>, beside
// the lease states of scripts.go, so it shares the entry's hash slot (and
// shard fence) and every atomic step; the response itself lives in a side
// key of the same slot, <prefix>{NN}r:<id>, so that no Lua script ever
// holds it (Redis's Lua hashes every byte of every string it makes):
//
//	leased    "L" + token + fingerprint                    (AcquireRecord)
//	done      "D" + token + (0x80|n) + fingerprint + size + crc
//	                                                       (ConfirmRecord)
//	side key  token + result, expiring with the done entry (PXAT until)
//
// token is the lease's 32 hex digits, n the fingerprint's length
// (0..replay.MaxFingerprintBytes) with the high bit set, size the result's
// length and crc its CRC-32C (4 bytes each, big endian), result
// 1..replay.MaxResultBytes bytes. "L" + token and "D" + token are the same
// entries without a record, as AcquireLease and ConfirmLease write them,
// so the plain scripts read a record entry as leased or done by its first
// byte, and a record step reads a plain entry (or a claim, "1" + nonce) as
// one with an empty fingerprint and result.
//
// The side key begins with the token of the lease whose confirmation
// wrote it, and a replay returns it only under a done entry naming that
// token: a side key left by an earlier holder of the ID (which the next
// confirmation replaces, and which expires with the entry it was written
// with) is never returned for another.
//
// Entries written before the side key, "D" + token + n + fingerprint +
// result with n at most replay.MaxFingerprintBytes, still replay (the
// acquire script returns them whole, as before); no step writes them any
// more.

// A confirmation with a record is two commands on one connection, in one
// pipeline: SET of a staging key <prefix>{NN}s:<nonce> holding token +
// result, expiring at until (PXAT; nonce fresh per ConfirmRecord call, so
// no other call ever writes it), then confirmRecordLua, which decides on
// the entry alone and, when it records, RENAMEs the staging key to the
// side key (no bytes pass through Lua; RENAME keeps the PXAT, the entry's).
// Whatever else it decides, it deletes the staging key. A staging key is
// left behind, until its until, when the script does not run after it (a
// client that dies between the two commands, a NOSCRIPT whose EVAL resend
// fails) or ends in an error (an ACL refusal of its RENAME). A resend of the pipeline
// after a lost reply stages the same bytes under the same name, finds its
// own done entry (the header compares token, fingerprint, size and CRC)
// and writes only the entry again, so the Durability wait after it covers
// the record on this connection too, and the recorded bytes never change.
//
// A replay is the acquire script followed by a GET of the side key in the
// same pipeline: the script decides, the GET carries the bytes.

// Acquire with a record: ARGV[4] lease (ms), ARGV[5] token, ARGV[6] the
// fingerprint, ARGV[7] the loss counters (countersLua). {1, 0} acquired, {2, pttl, entry} busy, {3, 0, entry} done,
// {4, 0} cancelled by this token's own note. The entry is returned whole
// (a few dozen bytes; an entry of the earlier layout with its result); the
// client decodes it (parseEntry, parseSide) and keeps only the record.
const acquireRecordScript = countersLua + guardLua + `if tonumber(ARGV[4]) > tonumber(ARGV[3]) then return {-6, now} end
local v = redis.call('GET', KEYS[2])
if v == 'X' .. ARGV[5] then return {4, 0} end
local own = 'L' .. ARGV[5] .. ARGV[6]
if (not v) or string.sub(v, 1, 1) == 'X' then
  if moved(ARGV[7]) then return {-8, 0} end
  redis.call('SET', KEYS[2], own, 'PX', ARGV[4])
  return {1, 0}
end
if v == own then
  -- A resent script finds its own lease: written again with its remaining
  -- time, so that the WAIT pipelined after it covers it on this connection.
  local p = redis.call('PTTL', KEYS[2])
  if p <= 0 then return {-4, now} end
  redis.call('SET', KEYS[2], v, 'PX', p)
  return {1, 0}
end
if string.sub(v, 1, 1) == 'L' then return {2, redis.call('PTTL', KEYS[2]), v} end
return {3, 0, v}`

// Confirm with a record: KEYS[3] the staging key, KEYS[4] the side key;
// ARGV[4] until (ms), ARGV[5] token, ARGV[6] the done entry, "D" + token +
// (0x80|n) + fingerprint + size + crc, built by the client. {1, 0}
// recorded, {0, 0} lost, {-7, 0} the staging key is missing (any other error of the RENAME,
// such as an ACL refusal, is the script's error reply). Like the
// confirm script, it records when the token's lease (with or without a
// fingerprint) is live or when the ID is free: it RENAMEs the staging key,
// which expires at until already, to the side key, and writes the entry.
// When this very entry is there already (a resent script), it writes the
// entry again for the WAIT after it and moves the side key's expiry to
// the entry's, leaving the recorded bytes as they are. The guard runs in a
// function so that the staging key is deleted after every other answer,
// refusals included.
const confirmRecordScript = `local moved = false
local function decide()
` + guardLua + untilLua + `local v = redis.call('GET', KEYS[2])
if v == ARGV[6] then
  redis.call('SET', KEYS[2], v, 'PXAT', ARGV[4])
  redis.call('PEXPIREAT', KEYS[4], ARGV[4])
  return {1, 0}
end
if (not v) or string.sub(v, 1, 1) == 'X' or (#ARGV[5] == 32 and string.sub(v, 1, 33) == 'L' .. ARGV[5]) then
  local r = redis.pcall('RENAME', KEYS[3], KEYS[4])
  if type(r) == 'table' and r['err'] then
    if string.find(r['err'], 'no such key', 1, true) then return {-7, 0} end
    return r
  end
  moved = true
  redis.call('SET', KEYS[2], ARGV[6], 'PXAT', ARGV[4])
  return {1, 0}
end
return {0, 0}
end
local r = decide()
if not moved then redis.call('DEL', KEYS[3]) end
return r`

var (
	acquireRecordLua = script{acquireRecordScript, "60ef3df50a71abe3a82d57796275e1000f5794a2"}
	confirmRecordLua = script{confirmRecordScript, "b08e96566da11a18b24910ecd9dad1c14944f943"}
)

// AcquireRecord implements [replay.Recorder]: it is [Store.AcquireLease]
// that keeps fingerprint in the lease's entry, with the same guarantees
// (the shard's fence, Redis's clock and horizon, Durability after the
// script, a resent script answered the same, and the background release of
// a lease whose acquisition had an unknown outcome). For [replay.LeaseBusy]
// it returns the live lease's fingerprint, for [replay.LeaseDone] the
// fingerprint and result given to [Store.ConfirmRecord] (both empty for an
// entry taken by AcquireLease, ConfirmLease or Claim); the result is read
// with a GET of the record's side key sent in the same pipeline as the
// script, and returned only when it belongs to the done entry the script
// found. A fingerprint longer than [replay.MaxFingerprintBytes] is refused
// with an error matching [ErrInvalidClaim] and [replay.ErrTooLarge] before
// anything is sent; the other errors are those of AcquireLease, and an
// entry that does not decode, or a done entry whose side key is missing
// or another lease's, is refused with [ErrUnavailable].
func (s *Store) AcquireRecord(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, error) {
	if err := checkID(id); err != nil {
		return replay.Record{}, err
	}
	if err := replay.CheckFingerprint(fingerprint); err != nil {
		return replay.Record{}, fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	ms, err := s.leaseMillis(lease)
	if err != nil {
		return replay.Record{}, err
	}
	token := newToken()
	start := time.Now()
	code, pttl, entry, side, err := s.acquireRecord(ctx, id, ms, token, fingerprint)
	if err != nil {
		if unknownOutcome(err) {
			s.releaseLater(id, token, start.Add(lease))
		}
		return replay.Record{}, err
	}
	switch code {
	case 1:
		return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired, Token: token}}, nil
	case 2, 3:
		return found(code, pttl, entry, side)
	}
	return replay.Record{}, fmt.Errorf("%w: unexpected reply to the acquire script", ErrUnavailable)
}

// ConfirmRecord implements [replay.Recorder]: it is [Store.ConfirmLease]
// that records fingerprint and result with the done entry, in the same
// script that ends the lease, with the same outcomes and guarantees. The
// result travels in a plain SET of a staging key pipelined before the
// script, which renames it to the record's side key when it records (see
// the layout above): no Lua string holds it. A resend with the same
// token, fingerprint and result after a lost reply returns nil; a second
// confirmation of the same token with another fingerprint or result (told
// apart by fingerprint, length and CRC-32C) finds a done entry that is not
// its own and fails with [replay.ErrLeaseLost]; in no case does it change
// the recorded bytes. A fingerprint longer than
// [replay.MaxFingerprintBytes], or a result that is empty or longer than
// [replay.MaxResultBytes], is refused with an error matching
// [ErrInvalidClaim] and [replay.ErrTooLarge] before anything is sent.
func (s *Store) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fingerprint, result []byte) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := replay.CheckRecord(fingerprint, result); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	if !validToken(token) {
		return replay.ErrLeaseLost
	}
	ms, err := s.untilMillis(until)
	if err != nil {
		return err
	}
	code, err := s.confirmRecord(ctx, id, ms, token, doneHeader(token, fingerprint, result), sideValue(token, result), newToken())
	switch {
	case err != nil:
		return err
	case code == 1:
		return nil
	case code == 0:
		return replay.ErrLeaseLost
	}
	return fmt.Errorf("%w: unexpected reply to the confirm script", ErrUnavailable)
}

// sideFlag marks the length byte of a done entry whose result is in the
// side key; sideTrailer is the size and CRC-32C after its fingerprint.
const (
	sideFlag    = 0x80
	sideTrailer = 8
)

// castagnoli is the CRC-32C table (hardware-assisted on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// doneHeader is the done entry of a record: "D" + token + (0x80|n) +
// fingerprint + size + CRC-32C of result.
func doneHeader(token string, fingerprint, result []byte) []byte {
	h := make([]byte, 0, 2+tokenLen+len(fingerprint)+sideTrailer)
	h = append(append(h, 'D'), token...)
	h = append(append(h, sideFlag|byte(len(fingerprint))), fingerprint...)
	h = binary.BigEndian.AppendUint32(h, uint32(len(result)))
	return binary.BigEndian.AppendUint32(h, crc32.Checksum(result, castagnoli))
}

// sideValue is what the side key holds: token + result.
func sideValue(token string, result []byte) []byte {
	v := make([]byte, 0, tokenLen+len(result))
	return append(append(v, token...), result...)
}

// parseSide decodes a done entry whose result is in the side key: its
// token and a copy of its fingerprint. ok is false for anything else.
func parseSide(v string) (token string, fingerprint []byte, ok bool) {
	if len(v) < 2+tokenLen+sideTrailer || v[0] != 'D' || !validToken(v[1:1+tokenLen]) {
		return "", nil, false
	}
	b := v[1+tokenLen]
	n := int(b &^ sideFlag)
	if b&sideFlag == 0 || n > replay.MaxFingerprintBytes || len(v) != 2+tokenLen+n+sideTrailer {
		return "", nil, false
	}
	size := binary.BigEndian.Uint32([]byte(v[2+tokenLen+n : 6+tokenLen+n]))
	if size == 0 || size > replay.MaxResultBytes {
		return "", nil, false
	}
	return v[1 : 1+tokenLen], copyBytes(v[2+tokenLen : 2+tokenLen+n]), true
}

// sideResult returns a copy of the result a side key's value v holds
// when it is token's; ok is false when it is missing (nil), another
// lease's, empty, or over the limit.
func sideResult(v any, token string) ([]byte, bool) {
	str, isStr := v.(string)
	if !isStr || len(str) <= tokenLen || len(str) > tokenLen+replay.MaxResultBytes || str[:tokenLen] != token {
		return nil, false
	}
	return []byte(str[tokenLen:]), true
}

// sideKey is the key of id's record: <prefix>{NN}r:<id>. The byte after
// the hash tag ('r', not ':') keeps it apart from every entry.
func sideKey(marker, id string) string { return marker + "r:" + id }

// stagingKey is a confirmation's staging key: <prefix>{NN}s:<nonce>.
func stagingKey(marker, nonce string) string { return marker + "s:" + nonce }

// acquireRecord runs the acquire script for id with a GET of its side key
// in the same pipeline: the script's reply {code, value} or {code, value,
// entry}, and the side key's value (a string, or nil).
func (s *Store) acquireRecord(ctx context.Context, id string, ms int64, token string, fingerprint []byte) (code, val int64, entry string, side any, err error) {
	direct := s.direct(ctx)
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.readySpace(ctx); err != nil {
		return 0, 0, "", nil, err
	}
	if err := s.held(); err != nil {
		return 0, 0, "", nil, err
	}
	shard := shardOf(id)
	marker := &s.tags[shard]
	key := *marker + ":" + id
	bound, err := s.boundFor(ctx, ms)
	if err != nil {
		return 0, 0, "", nil, err
	}
	sent := s.now().UnixMilli()
	cmds := [][]any{
		{"EVALSHA", &acquireRecordLua.sha, 2, marker, key, sent, &s.skewArg, bound, ms, token, fingerprint, s.countersArg(ctx, *marker)},
		{"GET", sideKey(*marker, id)},
	}
	replies, durErr, err := s.sendRecord(ctx, &acquireRecordLua, *marker, cmds, 0, direct)
	if err != nil {
		return 0, 0, "", nil, err
	}
	if _, ok := replies[1].(string); !ok && replies[1] != nil {
		return 0, 0, "", nil, fmt.Errorf("%w: unexpected reply to GET", ErrUnavailable)
	}
	reply, ok := replies[0].([]any)
	if !ok || len(reply) < 2 || len(reply) > 3 {
		return 0, 0, "", nil, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	code, ok1 := reply[0].(int64)
	val, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, "", nil, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	if len(reply) == 3 {
		if entry, ok = reply[2].(string); !ok || (code != 2 && code != 3) {
			return 0, 0, "", nil, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
		}
	} else if code == 2 || code == 3 {
		return 0, 0, "", nil, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	code, val, err = s.verdict(&acquireRecordLua, shard, code, val, sent, durErr)
	return code, val, entry, replies[1], err
}

// confirmRecord stages side (token + result) under a fresh staging key and
// runs the confirm script after it, in one pipeline: the script's code.
func (s *Store) confirmRecord(ctx context.Context, id string, ms int64, token string, header, side []byte, nonce string) (int64, error) {
	direct := s.direct(ctx)
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.readySpace(ctx); err != nil {
		return 0, err
	}
	shard := shardOf(id)
	marker := &s.tags[shard]
	staging := stagingKey(*marker, nonce)
	now := s.now().UnixMilli()
	bound, err := s.boundFor(ctx, ms-now)
	if err != nil {
		return 0, err
	}
	key := *marker + ":" + id
	cmds := [][]any{
		{"SET", staging, side, "PXAT", ms},
		{"EVALSHA", &confirmRecordLua.sha, 4, marker, key, staging, sideKey(*marker, id),
			now, &s.skewArg, bound, ms, token, header},
	}
	replies, durErr, err := s.sendRecord(ctx, &confirmRecordLua, *marker, cmds, 1, direct)
	if err != nil {
		return 0, err
	}
	if ok, _ := replies[0].(string); ok != "OK" {
		return 0, fmt.Errorf("%w: unexpected reply to SET", ErrUnavailable)
	}
	reply, ok := replies[1].([]any)
	if !ok || len(reply) != 2 {
		return 0, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	code, ok1 := reply[0].(int64)
	val, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	if code == -7 {
		return 0, fmt.Errorf("%w: the staged record expired before the confirm script ran", ErrUnavailable)
	}
	code, _, err = s.verdict(&confirmRecordLua, shard, code, val, now, durErr)
	return code, err
}

// sendRecord sends cmds, one of which (cmds[at]) is a script of sc, on
// marker's shard within ctx, on the caller's goroutine when direct is set
// (see [Store.direct]): in one pipeline on one connection, followed by the
// Durability wait when one is set (on the master serving marker, as
// [Store.send] does), or, for a client that only has Do, one command after
// the other (no Durability: it needs a *redis.Client or
// *redis.ClusterClient). The script is sent again as EVAL, with the
// commands around it, when the server does not know it. It returns every
// command's reply (nil for a nil reply), the durability verdict apart (as
// [Store.send] does), or the first error.
func (s *Store) sendRecord(ctx context.Context, sc *script, marker string, cmds [][]any, at int, direct bool) ([]any, error, error) {
	if direct {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return s.sendRecordOnce(ctx, sc, marker, cmds, at)
	}
	return awaitExchange(ctx, func() ([]any, error, error) {
		return s.sendRecordOnce(ctx, sc, marker, cmds, at)
	})
}

// awaitExchange runs f (a pipeline's exchange) on a goroutine of its own
// and waits for it until ctx ends (the error then wraps ctx's in
// ErrUnavailable).
func awaitExchange(ctx context.Context, f func() ([]any, error, error)) (replies []any, durErr, err error) {
	type result struct {
		replies     []any
		durErr, err error
	}
	done := make(chan result, 1) // buffered: the sender never blocks
	go func() {
		r, d, err := f()
		done <- result{r, d, err}
	}()
	select {
	case r := <-done:
		return r.replies, r.durErr, r.err
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// sendRecordOnce is sendRecord on the calling goroutine.
func (s *Store) sendRecordOnce(ctx context.Context, sc *script, marker string, cmds [][]any, at int) ([]any, error, error) {
	var p pipeliner
	if s.dur.pipelines() { // the waits run on the connection that wrote
		c, err := s.dur.pinned(ctx, marker)
		if err != nil {
			return nil, nil, err
		}
		p = c
	} else if c, ok := s.client.(pipeliner); ok {
		p = c
	}
	replies, durErr, err := s.exchange(ctx, p, sc, cmds, at, false)
	if err != nil && isNoScript(err) {
		replies, durErr, err = s.exchange(ctx, p, sc, cmds, at, true)
	}
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			return nil, nil, err
		}
		if s.dur.cluster != nil {
			s.dur.cluster.ReloadState(context.WithoutCancel(ctx))
		}
		return nil, nil, s.wrapErr(ctx, err)
	}
	return replies, durErr, nil
}

// exchange sends cmds (the script as EVAL when eval is set) through p,
// or one by one through the client when p is nil, and reads their
// replies.
// A nil reply is nil; any other error ends the exchange.
func (s *Store) exchange(ctx context.Context, p pipeliner, sc *script, cmds [][]any, at int, eval bool) ([]any, error, error) {
	replies := make([]any, len(cmds))
	if p == nil {
		for i, cmd := range cmds {
			if i == at && eval {
				cmd = asEval(*sc, cmd)
			}
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			v, err := s.client.Do(ctx, cmd...).Result()
			if err != nil && (i == at || !errors.Is(err, redis.Nil)) {
				return nil, nil, err
			}
			replies[i] = v
		}
		return replies, nil, nil
	}
	// The waits are keyless: they go only on one server's
	// connection (the pinned master, or the client's one server), never
	// through a Cluster client that would send them to a node of its
	// choosing (a recheck may turn them on after sendRecordOnce chose p).
	_, one := p.(*redis.Client)
	if !one && s.dur.on() {
		return nil, nil, fmt.Errorf("%w: a Durability wait needs the connection that wrote", ErrUnavailable)
	}
	pipe := p.Pipeline()
	sent := make([]*redis.Cmd, len(cmds))
	for i, cmd := range cmds {
		if i == at && eval {
			cmd = asEval(*sc, cmd)
		}
		sent[i] = pipe.Do(ctx, cmd...)
	}
	var w, wa *redis.Cmd
	if one && s.dur.wait != nil {
		w = pipe.Do(ctx, s.dur.wait...)
	}
	waitAOF, localAOF := s.dur.aofWait()
	if one && waitAOF != nil {
		wa = pipe.Do(ctx, waitAOF...)
	}
	pipe.Exec(ctx) // errors are read per command
	// The script's error first: NOSCRIPT sends the pipeline again.
	if err := sent[at].Err(); err != nil {
		return nil, nil, err
	}
	for i, c := range sent {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, err
		}
		replies[i] = v
	}
	if w == nil && wa == nil {
		return replies, nil, nil
	}
	return replies, s.dur.ackedAOF(w, wa, localAOF), nil
}

// parseEntry decodes an entry that holds an ID, as the record scripts
// return it: a lease ("L" + token + fingerprint) is busy, with its
// fingerprint; a confirmation ("D" + token, or "D" + token + n +
// fingerprint + result) and a claim ("1" + nonce) are done, with the
// record if there is one. It copies what it returns. ok is false for
// anything else: a short entry, a fingerprint or result over the limits,
// an empty result, an unknown first byte.
func parseEntry(v string) (state replay.LeaseState, fingerprint, result []byte, ok bool) {
	if v == "" {
		return 0, nil, nil, false
	}
	switch v[0] {
	case '1':
		return replay.LeaseDone, nil, nil, true
	case 'L':
		if len(v) < 1+tokenLen || len(v) > 1+tokenLen+replay.MaxFingerprintBytes || !validToken(v[1:1+tokenLen]) {
			return 0, nil, nil, false
		}
		return replay.LeaseBusy, copyBytes(v[1+tokenLen:]), nil, true
	case 'D':
		if len(v) < 1+tokenLen || !validToken(v[1:1+tokenLen]) {
			return 0, nil, nil, false
		}
		rec := v[1+tokenLen:]
		if rec == "" {
			return replay.LeaseDone, nil, nil, true
		}
		n := int(rec[0])
		if n > replay.MaxFingerprintBytes || len(rec) < 1+n+1 || len(rec)-1-n > replay.MaxResultBytes {
			return 0, nil, nil, false
		}
		return replay.LeaseDone, copyBytes(rec[1 : 1+n]), copyBytes(rec[1+n:]), true
	}
	return 0, nil, nil, false
}

// copyBytes returns s as a new slice, nil when s is empty.
func copyBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
