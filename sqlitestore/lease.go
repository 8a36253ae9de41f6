package sqlitestore

import (
	"context"
	"crypto/rand"
	"database/sql"
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
		return e.answer(now, record), nil
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

// answer is what an acquisition reports of the live entry e: busy, or done
// (a claim's row without a record); with record unset, no record at all.
func (e entry) answer(now int64, record bool) replay.Record {
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
	return r
}

// ReadRecord returns what AcquireRecord of id would find
// ([replay.Reader]), by the store's clock, without the writer: one SELECT
// on a connection of the pool reads the row and, in the same snapshot,
// the table's marker, so nothing is written to the database or its WAL,
// and a store whose disk is full answers it. It reads what is committed,
// whatever transaction ctx carries; an ID a Work of this Store holds is
// busy, as for AcquireRecord.
//
// A read answers only from contents the store vouches for: it refuses
// whenever the store refuses claims (a loss, a fence, a repair after an
// I/O error, a lowered setting), and its marker check refuses a database
// that forgot acknowledged claims as a write's would, since a free read
// from such a database would be a claim forgotten.
func (s *Store) ReadRecord(ctx context.Context, id string) (replay.Record, error) {
	if err := s.readyFor(id); err != nil {
		return replay.Record{}, err
	}
	key := s.key(id)
	if r, ok := s.heldRecord(key, true); ok {
		return r, nil
	}
	ctx, cancel := s.bound(orBackground(ctx))
	defer cancel()
	// Loaded before the snapshot, which holds every commit seen by then.
	last := s.guard.seq.Load()
	now := s.now().UnixNano()
	var seq, fence int64
	var state, token sql.NullString
	var until sql.NullInt64
	var e entry
	st, err := s.readStatement(ctx)
	if err == nil {
		err = st.QueryRowContext(ctx, key, s.guard.incarnation).Scan(&seq, &fence, &state, &token, &until, &e.fingerprint, &e.result)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return replay.Record{}, s.guard.missing()
	case err != nil:
		return replay.Record{}, unavailable(ctx, err)
	}
	if err := s.guard.judgeSince(seq, fence, now, last); err != nil {
		return replay.Record{}, err
	}
	if !state.Valid {
		return replay.Record{Lease: replay.Lease{State: replay.LeaseFree}}, nil
	}
	e.found, e.state, e.token, e.until = true, state.String, token.String, until.Int64
	switch e.live = e.until > now; {
	case e.live:
		return e.answer(now, true), nil
	case e.state == "w":
		return replay.Record{}, errEscaped
	}
	return replay.Record{Lease: replay.Lease{State: replay.LeaseFree}}, nil
}

// readStatement is ReadRecord's statement, prepared on the pool at the
// first read (database/sql prepares it again on each connection that runs
// it, and Close closes it): the row and the marker in one snapshot.
func (s *Store) readStatement(ctx context.Context) (*sql.Stmt, error) {
	if st := s.read.Load(); st != nil {
		return st, nil
	}
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if st := s.read.Load(); st != nil {
		return st, nil
	}
	select {
	case <-s.done: // Close has closed any statement: none is made after it
		return nil, fmt.Errorf("%w: store closed", ErrUnavailable)
	default:
	}
	st, err := s.db.PrepareContext(ctx, `SELECT m.seq, m.until, r.state, r.token, r.until, r.fingerprint, r.result FROM `+s.table+` AS m`+
		` LEFT JOIN `+s.table+` AS r ON r.key = ? WHERE m.key = `+markerKey+` AND m.state = 'm' AND m.token = ?`)
	if err != nil {
		return nil, err
	}
	s.read.Store(st)
	return st, nil
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
