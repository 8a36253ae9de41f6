package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// A record is carried by the lease's own row, in two nullable bytea
// columns (see [Schema]): fingerprint, written by the acquire that takes
// the lease, and result, written with the fingerprint by the confirm that
// ends it. AcquireRecord and ConfirmRecord are the statements of
// AcquireLease and ConfirmLease (lease.go) with the record as parameters,
// so every guarantee of a lease step holds for them: one statement per
// step, every deadline by the database's clock, the marker row checked in
// the same snapshot, the ID's layout-1 key honoured, the token minted
// before the statement is sent, and an acknowledgement only after the
// commit (with the durability New checked). The sizes are checked before
// anything is sent.

// AcquireRecord implements [replay.Recorder]: it is [Store.AcquireLease]
// that writes fingerprint with the lease, in the same statement. For
// [replay.LeaseBusy] it returns the live lease's fingerprint, and for
// [replay.LeaseDone] the fingerprint and result written by
// [Store.ConfirmRecord]; both are empty for a row written without a record
// (by AcquireLease, ConfirmLease or Claim, or before [Migrate] added the
// columns). While a Work of [Store.AcquireWork] holds the ID, whose
// fingerprint is not committed, it returns busy with an empty fingerprint
// when the Work's request may be the same one, and one that differs from
// fingerprint when it is known to differ (see [replay.WorkAcquirer]). A
// fingerprint over [replay.MaxFingerprintBytes] is refused
// with an error matching [ErrInvalidClaim] and [replay.ErrTooLarge] before
// anything is sent; the other errors are those of AcquireLease.
func (s *Store) AcquireRecord(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, error) {
	if fingerprint == nil {
		fingerprint = []byte{} // an empty fingerprint, not NULL
	}
	return s.acquire(ctx, id, lease, fingerprint, true)
}

// ConfirmRecord implements [replay.Recorder]: it is [Store.ConfirmLease]
// that writes fingerprint and result with the done row, in the one
// statement that ends the lease, so a done row written by it always has
// its result, and a result is never written for a lease that was lost.
// Its outcomes are ConfirmLease's: nil when token's lease is live, or has
// ended with id still free, or this very confirmation was already applied
// (a resend after a lost reply, which writes the same record again);
// [replay.ErrLeaseLost] when another holder has id; [ErrInvalidClaim] and
// [replay.ErrExpired] for an until not after the database's clock;
// [ErrUnavailable] when PostgreSQL cannot answer (the confirmation may or
// may not have been applied; resend it with the same token). A
// fingerprint over [replay.MaxFingerprintBytes], an empty result, or one
// over [replay.MaxResultBytes] (1 MiB, also this store's limit) is refused
// with an error matching [ErrInvalidClaim] and [replay.ErrTooLarge] before
// anything is sent.
func (s *Store) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fingerprint, result []byte) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := replay.CheckRecord(fingerprint, result); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	if fingerprint == nil {
		fingerprint = []byte{}
	}
	return s.confirm(ctx, id, token, until, fingerprint, result)
}

// prepareRead writes ReadRecord's statement: a plain SELECT, which takes
// no row lock and writes nothing, of the marker (as every step checks it)
// and of id's live row (or its layout-1 key's), as the acquire statement
// reports them (cur, lease.go). Where no live row is seen, a Work of
// [Store.AcquireWork] may hold the ID, with its row not yet committed:
// that is read from pg_locks (the Work holds idLock exclusive), not by
// trying the lock as an acquire does, since a shared hold of it, however
// short, could make a concurrent AcquireWork answer busy: a read must
// change nothing, not even another call's answer. A bigint advisory key is
// listed with its high half in classid, its low half in objid, and
// objsubid 1.
func (s *Store) prepareRead() {
	t := s.table
	s.readSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
cur AS (
  SELECT state,
    CASE WHEN state = 'l' THEN ceil(extract(epoch FROM until - now()) * 1000000)::bigint ELSE 0 END AS wait,
    CASE WHEN state IN ('l', 'd') THEN fingerprint END AS fingerprint,
    CASE WHEN state = 'd' THEN result END AS result
  FROM ` + t + ` WHERE (key = $1::bytea OR key = $2::bytea) AND until > now()
  ORDER BY key = $1::bytea DESC LIMIT 1
)
SELECT EXISTS (SELECT 1 FROM m), coalesce((SELECT state FROM cur), ''), coalesce((SELECT wait FROM cur), 0),
  (SELECT fingerprint FROM cur), (SELECT result FROM cur),
  CASE WHEN EXISTS (SELECT 1 FROM cur) THEN false ELSE EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND mode = 'ExclusiveLock' AND granted
      AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
      AND classid::bigint = $3::bigint AND objid::bigint = $4::bigint AND objsubid = 1) END`
}

// ReadRecord implements [replay.Reader]: it returns what
// [Store.AcquireRecord] of id would find, by the database's clock (now()),
// in one SELECT that takes no row lock and writes nothing, so it needs no
// room in the table and generates no WAL of its own. A live lease reads
// busy with its fingerprint and remaining time, a row of ConfirmRecord
// done with its record (of ConfirmLease or Claim, done without one), and
// anything else free. An ID a Work of [Store.AcquireWork] holds reads busy
// with an empty fingerprint and an unknown Wait (zero), as AcquireRecord
// reports it. Like AcquireRecord it refuses a table that forgot its claims
// or is on another timeline than its history record ([ErrUnavailable] and
// [ErrForgotten]) and the recheck's refusals ([ErrFenced] among them):
// a free read from a table that may have lost rows would be a claim
// forgotten. Other errors match [ErrUnavailable], or [ErrInvalidClaim] for
// an empty or oversize id.
func (s *Store) ReadRecord(ctx context.Context, id string) (replay.Record, error) {
	if err := checkID(id); err != nil {
		return replay.Record{}, err
	}
	if err := s.refused(); err != nil {
		return replay.Record{}, err
	}
	type read struct {
		marker, held        bool
		state               string
		wait                int64
		fingerprint, result []byte
	}
	r, err := call(s, ctx, func(ctx context.Context) (read, error) {
		key, legacy := s.keys(id)
		lock := uint64(s.idLock(key))
		var r read
		err := s.pool.QueryRow(ctx, s.readSQL, key, legacy, int64(lock>>32), int64(lock&0xffffffff)).Scan(
			&r.marker, &r.state, &r.wait, &r.fingerprint, &r.result, &r.held)
		return r, err
	})
	switch {
	case err != nil:
		return replay.Record{}, err
	case !r.marker:
		return replay.Record{}, fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten)
	case r.state == "l":
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: time.Duration(max(r.wait, 0)) * time.Microsecond},
			Fingerprint: r.fingerprint}, nil
	case r.state == "c" || r.state == "d":
		return replay.Record{Lease: replay.Lease{State: replay.LeaseDone}, Fingerprint: r.fingerprint, Result: r.result}, nil
	case r.state == "" && r.held:
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}}, nil
	case r.state == "":
		return replay.Record{Lease: replay.Lease{State: replay.LeaseFree}}, nil
	}
	return replay.Record{}, fmt.Errorf("%w: unexpected row state from the read statement", ErrUnavailable)
}
