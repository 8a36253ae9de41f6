package sqlitestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// A lease is one row: free (none, or expired), leased ('l'), working
// ('w', in a Work), done ('d') or claimed ('c'). Every acquire and confirm
// writes the record's columns, so no row carries an earlier holder's.

// errEscaped reports a row left 'w' by a Work committed without Commit.
var errEscaped = errors.New("sqlitestore: the work guarded by this ID committed outside its Work (its transaction escaped); its outcome is unknown: refused until an operator runs Release for the ID")

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// AcquireLease takes id for the given lease if nobody holds it
// ([replay.Leaser]); committed, in WAL mode without an fsync.
func (s *Store) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	r, err := s.acquire(ctx, id, lease, nil, false)
	return r.Lease, err
}

// AcquireRecord is AcquireLease keeping fingerprint ([replay.Recorder]).
func (s *Store) AcquireRecord(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, error) {
	if err := replay.CheckFingerprint(fingerprint); err != nil {
		return replay.Record{}, err
	}
	return s.acquire(ctx, id, lease, fingerprint, true)
}

func (s *Store) acquire(ctx context.Context, id string, lease time.Duration, fp []byte, record bool) (replay.Record, error) {
	if err := s.readyFor(id); err != nil {
		return replay.Record{}, err
	}
	if err := s.checkLease(lease); err != nil {
		return replay.Record{}, err
	}
	// An ID a Work holds is busy, answered without the writer.
	if r, ok := s.heldRecord(s.key(id), record); ok {
		return r, nil
	}
	token := newToken()
	var out replay.Record
	err := s.do(ctx, false, func(q querier, now int64) error {
		r, err := s.acquireStep(q, now, id, token, lease, fp, record)
		out = r
		return err
	})
	if err != nil {
		return replay.Record{}, err
	}
	return out, nil
}

func (s *Store) acquireStep(q querier, now int64, id, token string, lease time.Duration, fp []byte, record bool) (replay.Record, error) {
	key := s.key(id)
	e, err := s.row(q, key, now)
	if err != nil {
		return replay.Record{}, err
	}
	if e.found && e.state == "w" && !e.live {
		return replay.Record{}, errEscaped
	}
	if e.live {
		var r replay.Record
		switch e.state {
		case "l", "w":
			r.State, r.Wait = replay.LeaseBusy, time.Duration(e.until-now)
			if record {
				r.Fingerprint = e.fingerprint
			}
		default:
			r.State = replay.LeaseDone
			if record && e.state == "d" {
				r.Fingerprint, r.Result = e.fingerprint, e.result
			}
		}
		return r, nil
	}
	var fpArg any // NULL for AcquireLease
	if record {
		fpArg = append([]byte{}, fp...)
	}
	if _, err := q.exec(`INSERT OR REPLACE INTO `+s.table+` (key, state, token, until, fingerprint, result) VALUES (?, 'l', ?, ?, ?, NULL)`,
		key, token, now+int64(lease), fpArg); err != nil {
		return replay.Record{}, err
	}
	return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired, Token: token}}, nil
}

// ConfirmLease records id as done until the given time, ending the
// caller's lease ([replay.Leaser]), once the row is on the disk.
func (s *Store) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	return s.confirm(ctx, id, token, until, nil, nil)
}

// ConfirmRecord is ConfirmLease keeping fingerprint, result ([replay.Recorder]).
func (s *Store) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fingerprint, result []byte) error {
	if err := replay.CheckRecord(fingerprint, result); err != nil {
		return err
	}
	return s.confirm(ctx, id, token, until, fingerprint, result)
}

func (s *Store) confirm(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	if err := s.readyFor(id); err != nil {
		return err
	}
	if token == "" {
		return fmt.Errorf("%w: empty lease token", replay.ErrLeaseLost)
	}
	u := nanos(until)
	return s.do(ctx, true, func(q querier, now int64) error {
		return s.confirmStep(q, now, id, token, u, fp, result, "l")
	})
}

// confirmStep turns token's lease (state from) into a done row.
func (s *Store) confirmStep(q querier, now int64, id, token string, until int64, fp, result []byte, from string) error {
	e, err := s.row(q, s.key(id), now)
	if err != nil {
		return err
	}
	return s.confirmRow(q, e, now, id, token, until, fp, result, from)
}

func (s *Store) confirmRow(q querier, e entry, now int64, id, token string, until int64, fp, result []byte, from string) error {
	if err := s.checkUntil(now, until); err != nil {
		return err
	}
	key := s.key(id)
	switch {
	case e.found && e.token == token && e.state == "d" && e.live:
		return nil // a resend after a lost reply
	case e.found && e.token == token && e.state == from:
	case !e.found: // ended and swept
	default:
		return fmt.Errorf("%w: id is held by another holder, done or claimed", replay.ErrLeaseLost)
	}
	var fpArg, resArg any
	if result != nil {
		fpArg, resArg = append([]byte{}, fp...), append([]byte{}, result...)
	}
	_, err := q.exec(`INSERT OR REPLACE INTO `+s.table+` (key, state, token, until, fingerprint, result) VALUES (?, 'd', ?, ?, ?, ?)`,
		key, token, until, fpArg, resArg)
	return err
}

// RenewLease makes token's live lease on id end lease from now, without
// an fsync ([replay.Renewer]); else [replay.ErrLeaseLost].
func (s *Store) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if err := s.readyFor(id); err != nil {
		return err
	}
	if err := s.checkLease(lease); err != nil {
		return err
	}
	if token == "" {
		return fmt.Errorf("%w: empty lease token", replay.ErrLeaseLost)
	}
	if _, held := s.heldRecord(s.key(id), false); held {
		return fmt.Errorf("%w: the ID is held by a Work", replay.ErrLeaseLost)
	}
	return s.do(ctx, false, func(q querier, now int64) error {
		n, err := execN(q, `UPDATE `+s.table+` SET until = ? WHERE key = ? AND state = 'l' AND token = ? AND until > ?`, now+int64(lease), s.key(id), token, now)
		if err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("%w: the lease ended, or is another holder's", replay.ErrLeaseLost)
		}
		return nil
	})
}

// ReleaseLease frees id if token's lease on it is live ([replay.Leaser]).
func (s *Store) ReleaseLease(ctx context.Context, id, token string) error {
	if err := s.readyFor(id); err != nil {
		return err
	}
	return s.do(ctx, false, func(q querier, now int64) error {
		_, err := q.exec(`DELETE FROM `+s.table+` WHERE key = ? AND state = 'l' AND token = ? AND until > ?`, s.key(id), token, now)
		return err
	})
}
