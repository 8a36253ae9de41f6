package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgtype"
)

// A lease is one row, and every step is one statement on it:
//
//	free      no row, or a row whose until has passed (by now())
//	leased    state 'l', token, until = now() + lease when it was taken
//	          or last renewed
//	done      state 'd', token, until = the confirmed until
//	claimed   state 'c' from Claim, which AcquireLease reports as done
//
// The token is 32 hex digits from crypto/rand, minted per AcquireLease
// before the statement is sent, so a resend of a statement whose reply was
// lost gets the same answer: an acquire finds its own lease, a confirm its
// own done row, a renewal its own lease (renewed again, from that later
// now()), a release nothing left to do.
//
// The columns fingerprint and result carry the record of [Store.AcquireRecord]
// and [Store.ConfirmRecord] (record.go). The acquire and confirm statements
// below are shared by both interfaces: every acquire writes fingerprint
// (NULL for AcquireLease) and clears result, and every confirm writes both
// (NULL for ConfirmLease), so a row never carries the record of an earlier
// holder. A claimed row (state 'c', whose statement leaves the columns
// alone) is read as done without a record.

// tokenLen is the length of a lease token: 16 random bytes in hex.
const tokenLen = 32

func (s *Store) prepareLease() {
	t := s.table
	// The acquire inserts a free key (ins) or takes over an expired row
	// (upd, which checks until again on the row's newest version after
	// waiting for its lock), as the claim does. Otherwise it writes
	// nothing and reports the row as the statement's snapshot shows it
	// (cur): the caller's own live lease (a resend: acquired), another
	// live lease (busy, with its remaining time), or done. When the
	// snapshot shows no live row and nothing was taken, a concurrent
	// statement inserted, took over or deleted the row: AcquireLease runs
	// the statement again, and reports busy (wait unknown) if the row
	// keeps changing. A live row of id under the layout before version 2
	// (leg, $4: see [Store.legacyKey]) is never taken over and is reported
	// as it is (a lease of an older instance: busy; a claim: done).
	//
	// lk tries the request's lock, then the ID's, shared (lockedwork.go),
	// for the length of the statement: 0, the ID's taken, so no Work of
	// [Store.AcquireWork] holds the ID and none can take it before this
	// statement commits (acquire statements do not exclude each other:
	// the row does); 1 or 2, a Work holds the ID (1: for a request of
	// another fingerprint), and nothing is written.
	s.acquireSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
lk AS MATERIALIZED (SELECT CASE WHEN NOT pg_try_advisory_xact_lock($8::int, $9::int)
    THEN CASE WHEN pg_try_advisory_xact_lock_shared($7::bigint) THEN 0 ELSE 2 END
  WHEN pg_try_advisory_xact_lock_shared($7::bigint) THEN 0 ELSE 1 END AS v),
leg AS (SELECT 1 FROM ` + t + ` WHERE key = $4::bytea AND until > now()),
ins AS (
  INSERT INTO ` + t + ` (key, state, token, until, fingerprint)
  SELECT $1::bytea, 'l', $2::text, now() + $3::bigint * interval '1 microsecond', $5::bytea FROM m WHERE NOT EXISTS (SELECT 1 FROM leg)
    AND (SELECT v FROM lk) = 0
  ON CONFLICT (key) DO NOTHING
  RETURNING 1
),
upd AS (
  UPDATE ` + t + ` SET state = 'l', token = $2::text, until = now() + $3::bigint * interval '1 microsecond', fingerprint = $5::bytea, result = NULL
  WHERE key = $1::bytea AND until <= now() AND EXISTS (SELECT 1 FROM m) AND NOT EXISTS (SELECT 1 FROM ins)
    AND NOT EXISTS (SELECT 1 FROM leg) AND (SELECT v FROM lk) = 0
  RETURNING 1
),
cur AS (
  SELECT state, key = $1::bytea AND token = $2::text AS mine,
    CASE WHEN state = 'l' THEN ceil(extract(epoch FROM until - now()) * 1000000)::bigint ELSE 0 END AS wait,
    CASE WHEN $6::boolean AND state IN ('l', 'd') THEN fingerprint END AS fingerprint,
    CASE WHEN $6::boolean AND state = 'd' THEN result END AS result
  FROM ` + t + ` WHERE (key = $1::bytea OR key = $4::bytea) AND until > now()
  ORDER BY key = $1::bytea DESC LIMIT 1
)
SELECT EXISTS (SELECT 1 FROM m), EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM upd),
  coalesce((SELECT state FROM cur), ''), coalesce((SELECT mine FROM cur), false), coalesce((SELECT wait FROM cur), 0),
  (SELECT fingerprint FROM cur), (SELECT result FROM cur), (SELECT v FROM lk)`
	// The confirm writes the done row with its record (fingerprint and
	// result, both NULL for ConfirmLease) in the one statement that ends
	// the lease. A resend that finds its own live done row (the first
	// confirmation committed and its reply was lost) keeps the record the
	// first one wrote.
	s.confirmSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
up AS (
  INSERT INTO ` + t + ` AS r (key, state, token, until, fingerprint, result)
  SELECT $1::bytea, 'd', $2::text, $3::timestamptz, $4::bytea, $5::bytea FROM m WHERE $3::timestamptz > now()
  ON CONFLICT (key) DO UPDATE SET state = 'd', token = excluded.token, until = excluded.until,
      fingerprint = CASE WHEN r.state = 'd' AND r.until > now() THEN r.fingerprint ELSE excluded.fingerprint END,
      result = CASE WHEN r.state = 'd' AND r.until > now() THEN r.result ELSE excluded.result END
    WHERE r.until <= now() OR (r.state IN ('l', 'd') AND r.token = excluded.token)
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM m), $3::timestamptz > now(), EXISTS (SELECT 1 FROM up)`
	s.releaseLeaseSQL = `DELETE FROM ` + t + ` WHERE key = $1 AND state = 'l' AND token = $2::text AND until > now()`
	// The renewal moves the end of token's live lease to now() + $3
	// microseconds, leaving every other column (the fingerprint) as it
	// is, when the marker is there as for every other step. A row that a
	// concurrent statement changed (a takeover after the lease ended, a
	// confirm, a Work's Commit) is checked again on its newest version
	// after its lock is released, so the renewal never extends a row
	// that is no longer token's live lease. A Work of AcquireWork has no
	// row to renew (its lease is its transaction's advisory lock), and
	// another session's uncommitted rows are not seen at all.
	s.renewSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
up AS (
  UPDATE ` + t + ` SET until = now() + $3::bigint * interval '1 microsecond'
  WHERE key = $1::bytea AND state = 'l' AND token = $2::text AND until > now() AND EXISTS (SELECT 1 FROM m)
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM m), EXISTS (SELECT 1 FROM up)`
}

// AcquireLease implements [replay.Leaser]: it takes id for lease, measured
// by the database's clock (until = now() + lease), unless a live row holds
// id, and reports id busy while a Work of [Store.AcquireWork] holds it. A
// row written by [Store.Claim] counts as done. Errors match
// [ErrUnavailable] (the lease may or may not have been taken; if it was,
// it ends by itself) or [ErrInvalidClaim] for an empty or oversize id or a
// lease that is not positive, which also matches [replay.ErrExpired]. A
// lease is rounded up to a whole microsecond.
func (s *Store) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	r, err := s.acquire(ctx, id, lease, nil, false)
	return r.Lease, err
}

// acquire is AcquireLease that writes fingerprint (NULL when nil) with the
// lease and, when record is set, reads the fingerprint of a live lease or
// done row and the result of a done row.
func (s *Store) acquire(ctx context.Context, id string, lease time.Duration, fingerprint []byte, record bool) (replay.Record, error) {
	if err := checkID(id); err != nil {
		return replay.Record{}, err
	}
	if lease <= 0 {
		return replay.Record{}, fmt.Errorf("%w: %w: lease is not positive", ErrInvalidClaim, replay.ErrExpired)
	}
	if err := s.leaseBeyondHorizon(lease); err != nil {
		return replay.Record{}, err
	}
	if err := replay.CheckFingerprint(fingerprint); err != nil {
		return replay.Record{}, fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	if err := s.refused(); err != nil {
		return replay.Record{}, err
	}
	us := int64(lease / time.Microsecond)
	if lease%time.Microsecond != 0 {
		us++
	}
	// The token is minted before the statement is sent: a statement run
	// again (below) finds its own lease.
	var raw [tokenLen / 2]byte
	rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	type acquired struct {
		marker, taken, mine bool
		state               string
		wait                int64
		lock                int
		fingerprint, result []byte
	}
	a, err := call(s, ctx, func(ctx context.Context) (acquired, error) {
		key := s.key(id)
		idLock := s.idLock(key)
		fp1, fp2 := s.fpLock(key, fingerprint)
		var a acquired
		for range maxRaces {
			err := s.pool.QueryRow(ctx, s.acquireSQL, key, token, us, s.legacyKey(id), fingerprint, record, idLock, fp1, fp2).Scan(
				&a.marker, &a.taken, &a.state, &a.mine, &a.wait, &a.fingerprint, &a.result, &a.lock)
			if err != nil || a.taken || a.state != "" || !a.marker || a.lock != 0 {
				return a, err
			}
			// No live row in the snapshot and nothing taken: a concurrent
			// statement inserted, took over or deleted the row. Look again.
		}
		return a, nil
	})
	marker, taken, mine, state, wait := a.marker, a.taken, a.mine, a.state, a.wait
	switch {
	case err != nil:
		return replay.Record{}, err
	case !marker:
		return replay.Record{}, fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten)
	case taken || state == "l" && mine:
		return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired, Token: token}}, nil
	case state == "l":
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: time.Duration(max(wait, 0)) * time.Microsecond},
			Fingerprint: a.fingerprint}, nil
	case state == "c" || state == "d":
		return replay.Record{Lease: replay.Lease{State: replay.LeaseDone}, Fingerprint: a.fingerprint, Result: a.result}, nil
	case state == "" && a.lock == 1 && record && len(fingerprint) > 0:
		// A Work of AcquireWork holds the ID for a request of another
		// fingerprint, which is not committed yet.
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}, Fingerprint: otherFingerprint(fingerprint)}, nil
	case state == "":
		// A Work of AcquireWork holds the ID, or the row kept changing
		// under concurrent statements: busy, for how long is unknown.
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}}, nil
	}
	return replay.Record{}, fmt.Errorf("%w: unexpected row state from the acquire statement", ErrUnavailable)
}

// ConfirmLease implements [replay.Leaser]: it records id as done until the
// given time (rounded up to a microsecond) when token's lease on id is
// live, when the lease has ended and id is free, or when this very
// confirmation was already applied (a resend after a lost reply). It fails
// with [replay.ErrLeaseLost] when another holder has id, including for a
// token this store never issued; with [ErrInvalidClaim] (and
// [replay.ErrExpired]) for an until not after the database's clock, leaving
// the row as it was; and with [ErrUnavailable] when PostgreSQL cannot
// answer, after which the confirmation may or may not have been applied
// and may be resent with the same token.
func (s *Store) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	if err := checkID(id); err != nil {
		return err
	}
	return s.confirm(ctx, id, token, until, nil, nil)
}

// confirm is ConfirmLease that writes fingerprint and result (NULL when
// nil) with the done row; the caller has checked id and the record's
// sizes.
func (s *Store) confirm(ctx context.Context, id, token string, until time.Time, fingerprint, result []byte) error {
	if !validToken(token) {
		return replay.ErrLeaseLost
	}
	if err := s.beyondHorizon(until); err != nil {
		return err
	}
	if err := s.refused(); err != nil {
		return err
	}
	type confirmed struct{ marker, future, done bool }
	c, err := call(s, ctx, func(ctx context.Context) (confirmed, error) {
		var c confirmed
		err := s.pool.QueryRow(ctx, s.confirmSQL, s.key(id), token, pgTime(until), fingerprint, result).Scan(&c.marker, &c.future, &c.done)
		return c, err
	})
	marker, future, done := c.marker, c.future, c.done
	switch {
	case err != nil:
		return err
	case done:
		return nil
	case !marker:
		return fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten)
	case !future:
		return fmt.Errorf("%w: %w: until is not after the database's clock", ErrInvalidClaim, replay.ErrExpired)
	}
	return replay.ErrLeaseLost
}

// RenewLease implements [replay.Renewer]: token's live lease on id ends
// lease from the database's clock (until = now() + lease, rounded up to a
// whole microsecond), in one statement that commits before it returns.
// It keeps the fingerprint of a lease taken by [Store.AcquireRecord].
// It fails with [replay.ErrLeaseLost] when token holds no live lease on
// id (ended, taken by another holder, confirmed or claimed), including
// for a token this store never issued, which is refused without a
// statement.
// The lease of a Work of [Store.AcquireWork] is not renewable: it has no
// row until its Commit, so its token is refused with
// [replay.ErrLeaseLost], and the Work is left as it was.
// A Work of [Store.BeginWork] runs under a lease row committed before it:
// that row renews as any other, and the Work's Commit checks the new end.
// A lease that is not positive is refused with [ErrInvalidClaim] and
// [replay.ErrExpired] before anything is sent.
// Like AcquireLease it refuses a table that forgot its claims or is on
// another timeline than its history record ([ErrUnavailable] and
// [ErrForgotten]) and the recheck's refusals ([ErrFenced] among them),
// changing nothing.
// Any other error matches [ErrUnavailable]: the renewal may or may not
// have been committed (a statement the store's Timeout cut off may still
// commit after it), and a renewal that commits late still extends only
// token's live lease.
func (s *Store) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if err := checkID(id); err != nil {
		return err
	}
	if lease <= 0 {
		return fmt.Errorf("%w: %w: lease is not positive", ErrInvalidClaim, replay.ErrExpired)
	}
	if err := s.leaseBeyondHorizon(lease); err != nil {
		return err
	}
	if !validToken(token) {
		return replay.ErrLeaseLost
	}
	if err := s.refused(); err != nil {
		return err
	}
	us := int64(lease / time.Microsecond)
	if lease%time.Microsecond != 0 {
		us++
	}
	type renewed struct{ marker, renewed bool }
	r, err := call(s, ctx, func(ctx context.Context) (renewed, error) {
		var r renewed
		err := s.pool.QueryRow(ctx, s.renewSQL, s.key(id), token, us).Scan(&r.marker, &r.renewed)
		return r, err
	})
	switch {
	case err != nil:
		return err
	case r.renewed:
		return nil
	case !r.marker:
		return fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten)
	}
	return replay.ErrLeaseLost
}

// ReleaseLease implements [replay.Leaser]: it deletes id's row only while
// it holds token's live lease, so a late release never frees another
// holder's lease or a done row. A token this store never issued changes
// nothing. Errors match [ErrUnavailable] (the lease then ends by itself)
// or, for an empty or oversize id, [ErrInvalidClaim].
func (s *Store) ReleaseLease(ctx context.Context, id, token string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if !validToken(token) {
		return nil
	}
	return s.run(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, s.releaseLeaseSQL, s.key(id), token)
		return err
	})
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

// maxTime is the last instant the store records as given; a later until is
// held forever (timestamptz 'infinity'), so it is never wrapped into the
// past. minTime is the first: an earlier until is sent as '-infinity' and
// refused as expired, never wrapped into the future (pgx computes
// microseconds since 1970 without an overflow check, and an instant some
// 300 000 years away overflows them).
var (
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	minTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
)

// pgTime rounds t up to a whole microsecond (timestamptz's precision), so a
// row never expires before t.
func pgTime(t time.Time) pgtype.Timestamptz {
	switch {
	case t.After(maxTime):
		return pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	case t.Before(minTime):
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	r := t.Truncate(time.Microsecond)
	if r.Before(t) {
		r = r.Add(time.Microsecond)
	}
	return pgtype.Timestamptz{Time: r, Valid: true}
}
