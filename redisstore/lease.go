package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// tokenLen is the length of a lease token: 16 random bytes in hex.
const tokenLen = 32

var (
	_ replay.Leaser  = (*Store)(nil)
	_ replay.Renewer = (*Store)(nil)
)

// AcquireLease implements [replay.Leaser]: it takes id for lease, measured
// by Redis's clock (SET PX), unless a live entry holds id. An entry written
// by [Store.Claim] counts as done. Errors match [ErrUnavailable] (including
// [ErrFenced], [ErrClockSkew] and [ErrNotDurable]) or [ErrInvalidClaim]
// for an empty or oversize id, a lease under one millisecond (which also
// matches [replay.ErrExpired] when the lease is not positive) or a lease
// longer than the horizon.
//
// When the outcome is unknown (Redis did not answer in time, or the lease
// was taken but not acknowledged by enough replicas), the store releases
// what the call may have taken in the background, once Redis answers again
// and within the lease: the token was chosen before sending, so the
// release frees exactly that lease, or leaves a note that makes the
// acquisition take nothing should it land later. The sender's next retry
// is then processed instead of waiting out the lease. At most
// maxPendingReleases such releases run per Store; beyond that, or after
// [Store.Close], the lease ends by itself.
func (s *Store) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	if err := checkID(id); err != nil {
		return replay.Lease{}, err
	}
	ms, err := s.leaseMillis(lease)
	if err != nil {
		return replay.Lease{}, err
	}
	token := newToken()
	start := time.Now()
	state, pttl, err := s.run(ctx, &acquireLua, id, ms, token, 0)
	if err != nil {
		if unknownOutcome(err) {
			s.releaseLater(id, token, start.Add(lease))
		}
		return replay.Lease{}, err
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
// without touching Redis, or by Redis's clock; with [ErrInvalidClaim] for
// an until past the horizon; and with [ErrUnavailable] (including
// [ErrFenced], [ErrClockSkew] and [ErrNotDurable]) when Redis cannot
// answer or refuses, after which the confirmation may or may not have been
// applied and may be retried with the same token.
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
	code, _, err := s.run(ctx, &confirmLua, id, ms, token, 0)
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

// RenewLease implements [replay.Renewer]: token's live lease on id ends
// lease from Redis's now (SET PX), in one guarded script on the entry's
// slot.
// It keeps the fingerprint of a lease taken by [Store.AcquireRecord].
// It fails with [replay.ErrLeaseLost] when token holds no live lease on
// id (ended, taken by another holder, confirmed or claimed), including
// for a token this store never issued, which is refused without Redis.
// It refuses as AcquireLease does, changing nothing: a lease that is not
// positive, under a millisecond or longer than the horizon with
// [ErrInvalidClaim] (and [replay.ErrExpired] when not positive); a
// fenced or lost shard with [ErrFenced], a lagging clock with
// [ErrClockSkew], a key space or server the checks refuse with their
// error.
// A renewal written but not acknowledged by the replicas [Durability]
// asks for fails with [ErrNotDurable]: it may or may not hold after a
// failover.
// Any other error matches [ErrUnavailable]: the renewal may or may not
// have been applied, and one that lands late still extends only token's
// live lease.
func (s *Store) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if err := checkID(id); err != nil {
		return err
	}
	ms, err := s.leaseMillis(lease)
	if err != nil {
		return err
	}
	if !validToken(token) {
		return replay.ErrLeaseLost
	}
	code, _, err := s.run(ctx, &renewLua, id, ms, token, 0)
	switch {
	case err != nil:
		return err
	case code == 1:
		return nil
	case code == 0:
		return replay.ErrLeaseLost
	}
	return fmt.Errorf("%w: unexpected reply to the renew script", ErrUnavailable)
}

// ReleaseLease implements [replay.Leaser]: it deletes id's entry only while
// it holds token's lease, so a late release never frees another holder's
// lease or a done entry. A token this store never issued changes nothing.
// It needs no fence or clock check and is not waited for by Durability:
// it can only free what the caller holds, and a lost release only keeps
// the lease until it ends. Errors match [ErrUnavailable] (the lease then
// ends by itself) or, for an empty or oversize id, [ErrInvalidClaim].
func (s *Store) ReleaseLease(ctx context.Context, id, token string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if !validToken(token) {
		return nil
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	v, err := s.eval(ctx, &releaseLua, command(releaseLua, []string{s.key(id)}, token))
	if err != nil {
		return err
	}
	if _, ok := v.(int64); !ok {
		return fmt.Errorf("%w: unexpected reply to the release script", ErrUnavailable)
	}
	return nil
}

// leaseMillis is lease in whole milliseconds, refusing one that is not
// positive, under a millisecond, or longer than the horizon.
func (s *Store) leaseMillis(lease time.Duration) (int64, error) {
	if lease <= 0 {
		return 0, fmt.Errorf("%w: %w: lease is not positive", ErrInvalidClaim, replay.ErrExpired)
	}
	ms := lease.Milliseconds()
	if ms == 0 {
		return 0, fmt.Errorf("%w: lease under a millisecond", ErrInvalidClaim)
	}
	if lease > s.horizon {
		return 0, refuse(ErrInvalidClaim, whyLeaseLong, nil)
	}
	return ms, nil
}

// newToken mints a lease token: 16 bytes from crypto/rand in hex, chosen
// before the script is sent so that a resent script carries the same one.
func newToken() string {
	var raw [tokenLen / 2]byte
	rand.Read(raw[:])
	return hex.EncodeToString(raw[:])
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

// untilMillis rounds until up to a whole millisecond, so a key never
// expires before it, and refuses one that is not in the future or lies
// past the horizon, by Options.Now (the script checks both again by
// Redis's clock).
func (s *Store) untilMillis(until time.Time) (int64, error) {
	if until.After(s.now().Add(s.horizon)) {
		return 0, refuse(ErrInvalidClaim, whyHorizon, nil)
	}
	ms := until.UnixMilli()
	if until.After(time.UnixMilli(ms)) {
		ms++
	}
	now := s.now().UnixMilli()
	if until.IsZero() || ms <= now {
		return 0, fmt.Errorf("%w: %w: until is not in the future", ErrInvalidClaim, replay.ErrExpired)
	}
	if ms-now > s.horizon.Milliseconds() {
		return 0, refuse(ErrInvalidClaim, whyHorizon, nil)
	}
	return ms, nil
}
