package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

var _ replay.Recorder = (*Store)(nil)

// A record lives in the ID's one entry, <prefix>{NN}:<id>, beside the
// lease states of scripts.go, so it shares the entry's hash slot (and
// shard fence), its expiry and every atomic step:
//
//	leased    "L" + token + fingerprint                  (AcquireRecord)
//	done      "D" + token + n + fingerprint + result     (ConfirmRecord)
//
// token is the lease's 32 hex digits, n one byte, the fingerprint's length
// (0..replay.MaxFingerprintBytes), and result 1..replay.MaxResultBytes
// bytes. "L" + token and "D" + token are the same entries without a
// record, as AcquireLease and ConfirmLease write them, so the plain scripts
// read a record entry as leased or done by its first byte, and a record
// step reads a plain entry (or a claim, "1" + nonce) as one with an empty
// fingerprint and result.

// Acquire with a record: ARGV[4] lease (ms), ARGV[5] token, ARGV[6] the
// fingerprint. {1, 0} acquired, {2, pttl, entry} busy, {3, 0, entry} done,
// {4, 0} cancelled by this token's own note. The entry is returned whole;
// the client decodes it (parseEntry) and keeps only the record.
const acquireRecordScript = guardLua + `if tonumber(ARGV[4]) > tonumber(ARGV[3]) then return {-6, now} end
local v = redis.call('GET', KEYS[2])
if v == 'X' .. ARGV[5] then return {4, 0} end
local own = 'L' .. ARGV[5] .. ARGV[6]
if (not v) or string.sub(v, 1, 1) == 'X' then
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

// Confirm with a record: ARGV[4] until (ms), ARGV[5] token, ARGV[6] the
// done entry, "D" + token + n + fingerprint + result, built by the client
// (so Redis copies a large result once, not again in a concatenation).
// {1, 0} recorded, {0, 0} lost. Like the confirm script, it records when
// the token's lease (with or without a fingerprint) is live, when the ID is
// free, or when this very entry is there already (a resent script, written
// again for the WAIT after it).
const confirmRecordScript = guardLua + untilLua + `local v = redis.call('GET', KEYS[2])
if (not v) or string.sub(v, 1, 1) == 'X' or (#ARGV[5] == 32 and string.sub(v, 1, 33) == 'L' .. ARGV[5]) or v == ARGV[6] then
  redis.call('SET', KEYS[2], ARGV[6], 'PXAT', ARGV[4])
  return {1, 0}
end
return {0, 0}`

var (
	acquireRecordLua = script{acquireRecordScript, "c419c1ccbee1e4aeacca8ae0c6ef9ef3ffb7d155"}
	confirmRecordLua = script{confirmRecordScript, "727d708842ee56c4f66aa81198a4af7afecb67f6"}
)

// AcquireRecord implements [replay.Recorder]: it is [Store.AcquireLease]
// that keeps fingerprint in the lease's entry, with the same guarantees
// (the shard's fence, Redis's clock and horizon, Durability after the
// script, a resent script answered the same, and the background release of
// a lease whose acquisition had an unknown outcome). For [replay.LeaseBusy]
// it returns the live lease's fingerprint, for [replay.LeaseDone] the
// fingerprint and result given to [Store.ConfirmRecord] (both empty for an
// entry taken by AcquireLease, ConfirmLease or Claim). A fingerprint
// longer than [replay.MaxFingerprintBytes] is refused with an error
// matching [ErrInvalidClaim] and [replay.ErrTooLarge] before anything is
// sent; the other errors are those of AcquireLease, and an entry that does
// not decode is refused with [ErrUnavailable].
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
	code, pttl, entry, err := s.runRecord(ctx, &acquireRecordLua, id, ms, token, fingerprint)
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
		state, fp, result, ok := parseEntry(entry)
		if !ok || (state == replay.LeaseBusy) != (code == 2) {
			return replay.Record{}, fmt.Errorf("%w: an entry that does not decode", ErrUnavailable)
		}
		r := replay.Record{Lease: replay.Lease{State: state}, Fingerprint: fp, Result: result}
		if state == replay.LeaseBusy {
			r.Wait = time.Duration(max(pttl, 0)) * time.Millisecond
		}
		return r, nil
	}
	return replay.Record{}, fmt.Errorf("%w: unexpected reply to the acquire script", ErrUnavailable)
}

// ConfirmRecord implements [replay.Recorder]: it is [Store.ConfirmLease]
// that writes fingerprint and result into the done entry in the same
// script that ends the lease, with the same outcomes and guarantees. A
// resend with the same token, fingerprint and result after a lost reply
// returns nil; a second confirmation of the same token with another
// fingerprint or result finds a done entry that is not its own and fails
// with [replay.ErrLeaseLost], leaving the first. A fingerprint longer
// than [replay.MaxFingerprintBytes], or a result that is empty or longer
// than [replay.MaxResultBytes], is refused with an error matching
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
	done := make([]byte, 0, 2+tokenLen+len(fingerprint)+len(result))
	done = append(append(done, 'D'), token...)
	done = append(append(append(done, byte(len(fingerprint))), fingerprint...), result...)
	code, _, _, err := s.runRecord(ctx, &confirmRecordLua, id, ms, token, done)
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

// runRecord runs a record script (acquireRecordLua, confirmRecordLua) for
// id like [Store.run] runs the others: within one store deadline, after
// the server checks, through [Store.send]; ARGV[4]
// is ms, ARGV[5] token, ARGV[6] data. It decodes the reply, {code, value}
// or {code, value, entry}; the guard's refusals become errors.
func (s *Store) runRecord(ctx context.Context, sc *script, id string, ms int64, token string, data []byte) (code, val int64, entry string, err error) {
	direct := s.direct(ctx)
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.readySpace(ctx); err != nil {
		return 0, 0, "", err
	}
	shard := shardOf(id)
	marker := &s.tags[shard]
	key := *marker + ":" + id
	// Pointers to what the Store holds, so that only the call's own
	// values are boxed.
	cmd := []any{"EVALSHA", &sc.sha, 2, marker, key, s.now().UnixMilli(), &s.skewArg, &s.horizonArg, ms, token, data}
	v, durErr, err := s.send(ctx, sc, *marker, cmd, direct)
	if err != nil {
		return 0, 0, "", err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) < 2 || len(reply) > 3 {
		return 0, 0, "", fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	code, ok1 := reply[0].(int64)
	val, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, "", fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	if len(reply) == 3 {
		if entry, ok = reply[2].(string); !ok || (code != 2 && code != 3) {
			return 0, 0, "", fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
		}
	} else if code == 2 || code == 3 {
		return 0, 0, "", fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	code, val, err = s.verdict(sc, shard, code, val, durErr)
	return code, val, entry, err
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
