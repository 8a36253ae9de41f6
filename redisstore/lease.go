package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// A lease is one Redis key, so every step touches one key (one hash slot in
// Redis Cluster) and is one atomic script run in one round trip:
//
//	free      no key
//	leased    "L" + token, expiring lease after it was taken (PX, Redis's clock)
//	done      "D" + token, expiring at the confirmed until (PXAT)
//	claimed   "1" from Claim, which AcquireLease reports as done
//
// The token is 32 hex digits from crypto/rand, minted per AcquireLease
// before the script is sent, so a client that resends a script whose reply
// was lost gets the same answer: an acquire finds its own lease, a confirm
// its own done entry, a release nothing left to do.
const (
	acquireScript = `local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], 'L' .. ARGV[1], 'PX', ARGV[2])
  return {1, 0}
end
if v == 'L' .. ARGV[1] then return {1, 0} end
if string.sub(v, 1, 1) == 'L' then return {2, redis.call('PTTL', KEYS[1])} end
return {3, 0}`

	confirmScript = `local v = redis.call('GET', KEYS[1])
if (not v) or v == 'L' .. ARGV[1] or v == 'D' .. ARGV[1] then
  redis.call('SET', KEYS[1], 'D' .. ARGV[1], 'PXAT', ARGV[2])
  return 1
end
return 0`

	releaseScript = `if redis.call('GET', KEYS[1]) == 'L' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0`
)

// script is a Lua script and its SHA-1, which names it to EVALSHA. The
// digests are constants rather than computed with crypto/sha1, which panics
// under GODEBUG=fips140=only (SHA-1 here only names a script to Redis; it
// protects nothing). TestScriptDigestsAreTheScriptsSHA1 checks them.
type script struct{ src, sha string }

var (
	acquireLua = script{acquireScript, "551126a6c478b3d6f3dcd6857d962f05388f28d1"}
	confirmLua = script{confirmScript, "9915dabdd458911340e2c5f0b0b97795c70be289"}
	releaseLua = script{releaseScript, "bf71827a537b7beaab6705f877859f07d6d0155e"}
)

// tokenLen is the length of a lease token: 16 random bytes in hex.
const tokenLen = 32

var _ replay.Leaser = (*Store)(nil)

// AcquireLease implements [replay.Leaser]: it takes id for lease, measured
// by Redis's clock (SET PX), unless a live key holds id. A key written by
// [Store.Claim] counts as done. Errors match [ErrUnavailable] (the lease
// may or may not have been taken; if it was, it ends by itself) or
// [ErrInvalidClaim] for an empty or oversize id or a lease under one
// millisecond, which also matches [replay.ErrExpired] when the lease is not
// positive.
func (s *Store) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	if err := checkID(id); err != nil {
		return replay.Lease{}, err
	}
	if lease <= 0 {
		return replay.Lease{}, fmt.Errorf("%w: %w: lease is not positive", ErrInvalidClaim, replay.ErrExpired)
	}
	ms := lease.Milliseconds()
	if ms == 0 {
		return replay.Lease{}, fmt.Errorf("%w: lease under a millisecond", ErrInvalidClaim)
	}
	var raw [tokenLen / 2]byte
	rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	v, err := s.eval(ctx, acquireLua, s.prefix+id, token, strconv.FormatInt(ms, 10))
	if err != nil {
		return replay.Lease{}, err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 2 {
		return replay.Lease{}, fmt.Errorf("%w: unexpected reply to the acquire script", ErrUnavailable)
	}
	state, ok1 := reply[0].(int64)
	pttl, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return replay.Lease{}, fmt.Errorf("%w: unexpected reply to the acquire script", ErrUnavailable)
	}
	switch state {
	case 1:
		return replay.Lease{State: replay.LeaseAcquired, Token: token}, nil
	case 2:
		wait := time.Duration(max(pttl, 0)) * time.Millisecond
		return replay.Lease{State: replay.LeaseBusy, Wait: wait}, nil
	case 3:
		return replay.Lease{State: replay.LeaseDone}, nil
	}
	return replay.Lease{}, fmt.Errorf("%w: unexpected reply to the acquire script", ErrUnavailable)
}

// ConfirmLease implements [replay.Leaser]: it records id as done until the
// given time (SET PXAT, rounded up to a millisecond) when token's lease on
// id is live, when the lease has ended and id is free, or when this very
// confirmation was already applied (a resent script after a lost reply). It
// fails with [replay.ErrLeaseLost] when another holder has id, including
// for a token this store never issued; with [ErrInvalidClaim] (and
// [replay.ErrExpired]) for an until not in the future by Options.Now,
// without touching Redis; and with [ErrUnavailable] when Redis cannot
// answer, after which the confirmation may or may not have been applied and
// may be retried with the same token.
func (s *Store) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	if err := checkID(id); err != nil {
		return err
	}
	if !validToken(token) {
		return replay.ErrLeaseLost
	}
	ms, err := s.untilMillis(until)
	if err != nil {
		return err
	}
	v, err := s.eval(ctx, confirmLua, s.prefix+id, token, strconv.FormatInt(ms, 10))
	if err != nil {
		return err
	}
	switch v {
	case int64(1):
		return nil
	case int64(0):
		return replay.ErrLeaseLost
	}
	return fmt.Errorf("%w: unexpected reply to the confirm script", ErrUnavailable)
}

// ReleaseLease implements [replay.Leaser]: it deletes id's key only while it
// holds token's lease, so a late release never frees another holder's lease
// or a done entry. A token this store never issued changes nothing. Errors
// match [ErrUnavailable] (the lease then ends by itself) or, for an empty or
// oversize id, [ErrInvalidClaim].
func (s *Store) ReleaseLease(ctx context.Context, id, token string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if !validToken(token) {
		return nil
	}
	v, err := s.eval(ctx, releaseLua, s.prefix+id, token)
	if err != nil {
		return err
	}
	if _, ok := v.(int64); !ok {
		return fmt.Errorf("%w: unexpected reply to the release script", ErrUnavailable)
	}
	return nil
}

// checkID refuses an ID that cannot be a key.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", ErrInvalidClaim)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: id longer than %d bytes", ErrInvalidClaim, MaxIDBytes)
	}
	return nil
}

// validToken reports whether token has the form AcquireLease mints.
func validToken(token string) bool {
	if len(token) != tokenLen {
		return false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// maxUntil is the last instant of int64 Unix milliseconds, the latest
// expiry PXAT takes.
var maxUntil = time.UnixMilli(math.MaxInt64)

// untilMillis rounds until up to a whole millisecond, so a key never
// expires before it, and refuses one that is not in the future. An until
// past the last instant of int64 Unix milliseconds (where UnixMilli is
// undefined) is held until that instant.
func (s *Store) untilMillis(until time.Time) (int64, error) {
	if until.After(maxUntil) {
		return math.MaxInt64, nil
	}
	ms := until.UnixMilli()
	if until.After(time.UnixMilli(ms)) {
		ms++
	}
	if until.IsZero() || ms <= s.now().UnixMilli() {
		return 0, fmt.Errorf("%w: %w: until is not in the future", ErrInvalidClaim, replay.ErrExpired)
	}
	return ms, nil
}

// eval runs a one-key script within one store deadline: EVALSHA, and EVAL
// (which also caches it) only when the server does not know the script yet.
func (s *Store) eval(ctx context.Context, sc script, key string, args ...string) (any, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	cmd := make([]any, 0, 4+len(args))
	cmd = append(cmd, "EVALSHA", sc.sha, 1, key)
	for _, a := range args {
		cmd = append(cmd, a)
	}
	v, err := s.call(ctx, cmd...)
	if err != nil && isNoScript(err) {
		eval := append([]any{"EVAL", sc.src}, cmd[2:]...)
		v, err = s.call(ctx, eval...)
	}
	if errors.Is(err, errNil) {
		return nil, fmt.Errorf("%w: unexpected nil reply to a script", ErrUnavailable)
	}
	return v, err
}

func isNoScript(err error) bool { return strings.Contains(err.Error(), "NOSCRIPT") }
