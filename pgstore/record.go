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
