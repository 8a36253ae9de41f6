package pgstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
)

// The one-commit transactional mode ([replay.WorkAcquirer]): AcquireWork
// takes the lease inside the work's own transaction, as a
// transaction-scoped advisory lock, and Commit writes the done row with
// the record in that transaction. Nothing is committed before the work:
// a first request costs one durable commit.
//
// Two locks of the database's advisory lock space, both computed from
// SHA-256 of the table's name and the row's key:
//
//	idLock    (one bigint)   held, exclusive, for the whole work by its
//	          holder; every acquire statement of the store on the table
//	          (AcquireLease, AcquireRecord, with or without the
//	          transactional mode) tries it shared in its own statement
//	          and, failing, takes nothing (acquire statements do not
//	          exclude each other: the row does, as without Works)
//	fpLock    (two int4s)    of the key and the request's fingerprint,
//	          taken (exclusive, never waited for) before idLock by every
//	          caller, held by a Work for its whole length and by an
//	          acquire statement for its own: a caller that cannot take
//	          fpLock is answered busy with the same request in flight
//	          (409); one that takes fpLock but not idLock, busy with a
//	          different request (422). Two acquire statements of one
//	          request that overlap a Work's AcquireWork of the same
//	          request may make the latter answer 422 for 409 (the second
//	          statement holds idLock shared without fpLock)
//
// Why at most one work commits for an ID, whatever the hashes: a work's
// Commit writes the done row only where the table holds no live row of
// the key (the lease fence below), in the work's transaction; an acquire
// statement writes a lease only while it holds idLock, which no live Work
// of the key holds meanwhile. AcquireWork reads the row in a statement
// that starts after it took idLock: a Work that committed before sees its
// done row (PostgreSQL makes a commit visible before it releases the
// transaction's locks). Should two keys' idLocks collide, they exclude
// each other (a busy answer, never a second holder); should fpLocks
// collide, a 409 becomes a 422 or back, and no lease is taken either way.
// A crash of the holder, or its connection's end, rolls the transaction
// back and releases both locks with nothing of the work kept.

// idLock and fpLock are the advisory lock keys of key (see above).
func (s *Store) idLock(key []byte) int64 {
	h := sha256.New()
	h.Write([]byte("ctoken pgstore lease\x00"))
	h.Write([]byte(s.table))
	h.Write([]byte{0})
	h.Write(key)
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])))
}

func (s *Store) fpLock(key, fingerprint []byte) (int32, int32) {
	h := sha256.New()
	h.Write([]byte("ctoken pgstore request\x00"))
	h.Write([]byte(s.table))
	h.Write([]byte{0})
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(key))))
	h.Write(key)
	h.Write(fingerprint)
	var buf [sha256.Size]byte
	sum := h.Sum(buf[:0])
	return int32(binary.BigEndian.Uint32(sum)), int32(binary.BigEndian.Uint32(sum[4:]))
}

// lockSQL takes the locks of an AcquireWork, in BEGIN's round trip,
// fpLock first, so that a holder of idLock always holds its fpLock: 2,
// fpLock is held by another caller of the same request (a holder, or one
// about to find out), so the ID is busy with a request that may be the
// same; 0, both taken (the caller holds the ID); 1, fpLock taken but the
// ID held by another request, whose fingerprint therefore differs. Both
// locks are released with the rollback that follows a busy answer. No
// lock is waited for. CASE evaluates its branches in order, and only as
// far as needed.
//
// It also ends the session should it stay idle in the transaction for the
// lease ($4, in milliseconds): a holder stalled outside the database
// frees the ID with nothing kept.
const lockSQL = `SELECT txid_current(), set_config('idle_in_transaction_session_timeout', $4::text, true) IS NULL, CASE
  WHEN NOT pg_try_advisory_xact_lock($2::int, $3::int) THEN 2
  WHEN pg_try_advisory_xact_lock($1::bigint) THEN 0 ELSE 1 END`

// prepareLockedWork writes the read of AcquireWork.
func (s *Store) prepareLockedWork() {
	t := s.table
	// Sent after lockSQL, as a statement of its own so that its snapshot
	// follows the locks: the marker and the key's live row (or its
	// layout-1 key's), as the acquire statement reports them.
	s.lockedReadSQL = `WITH ` + markerCTE(t) + `
cur AS (
  SELECT state,
    CASE WHEN state = 'l' THEN ceil(extract(epoch FROM until - statement_timestamp()) * 1000000)::bigint ELSE 0 END AS wait,
    CASE WHEN state IN ('l', 'd') THEN fingerprint END AS fingerprint,
    CASE WHEN state = 'd' THEN result END AS result
  FROM ` + t + ` WHERE (key = $1::bytea OR key = $2::bytea) AND until > statement_timestamp()
  ORDER BY key = $1::bytea DESC LIMIT 1
)
SELECT EXISTS (SELECT 1 FROM m), coalesce((SELECT state FROM cur), ''), coalesce((SELECT wait FROM cur), 0),
  (SELECT fingerprint FROM cur), (SELECT result FROM cur)`
}

// lockedFenceSQL is the fence of a work of [Store.AcquireWork] on the
// table t (schema-qualified), the statement of its fence function (see
// [workFns]): the done row is inserted, or takes over a row that has
// expired, never a live one (a lease an acquire statement took while the
// work held nothing, a Claim of the ID). Parameters and refusals as
// [fenceSQL]'s; $7 is the lease in microseconds: a fence after it has
// passed since the transaction began (now(), BEGIN's time) is lost. $8
// is the commit's nonce.
func lockedFenceSQL(t string) string {
	return `WITH x AS (SELECT pg_catalog.txid_current() OPERATOR(pg_catalog.=) $6::bigint AS same),
` + markerCTE(t) + `
up AS (
  INSERT INTO ` + t + ` AS r (key, state, token, until, fingerprint, result)
  SELECT $1::bytea, 'd', $2::text, $3::timestamptz, $4::bytea, $5::bytea FROM m
  WHERE $3::timestamptz > statement_timestamp() AND (SELECT same FROM x)
    AND statement_timestamp() < now() + $7::bigint * interval '1 microsecond'
  ON CONFLICT (key) DO UPDATE SET state = 'd', token = excluded.token, until = excluded.until,
      fingerprint = excluded.fingerprint, result = excluded.result
    WHERE r.until <= statement_timestamp() AND statement_timestamp() < now() + $7::bigint * interval '1 microsecond'
  RETURNING 1
)
` + fenceAnswerSQL("$8")
}

// AcquireWork implements [replay.WorkAcquirer]: in one round trip it
// begins a transaction (read committed) on a connection of the store's
// pool, takes the ID's advisory locks and reads the key's row. When the
// ID is free it returns [replay.LeaseAcquired] with the open Work, which
// holds the ID until it ends: its Commit writes the done row with the
// record in the work's transaction (one durable commit for the request),
// its Rollback frees the ID. Otherwise it rolls back, in a second round
// trip, and reports what [Store.AcquireRecord] would: busy (a Work of this
// mode holds the ID, or a live lease of AcquireLease or AcquireRecord) or
// done. [Store.AcquireLease] and [Store.AcquireRecord] on the same table,
// by any Store, report the ID busy while a Work holds it; a
// [Store.Claim] of the same ID does not wait for it, and makes that
// Work's Commit fail with [replay.ErrLeaseLost].
//
// Errors: [ErrInvalidClaim] for an empty or oversize id or fingerprint,
// the reason while a recheck refuses (see [New]), and otherwise errors
// matching [ErrUnavailable]; in every error case no transaction is open
// and nothing was taken. The returned Work behaves as one of
// [Store.BeginWork] (see [TxFrom]), except that no lease row exists
// until its Commit: [replay.ErrLeaseLost] then means a live row of the
// ID appeared meanwhile (a Claim, or a lease taken while the locks were
// not held), and nothing of the work was kept.
func (s *Store) AcquireWork(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (replay.Record, replay.Work, error) {
	if err := checkID(id); err != nil {
		return replay.Record{}, nil, err
	}
	if lease <= 0 {
		return replay.Record{}, nil, fmt.Errorf("%w: %w: lease is not positive", ErrInvalidClaim, replay.ErrExpired)
	}
	if err := s.leaseBeyondHorizon(lease); err != nil {
		return replay.Record{}, nil, err
	}
	if err := replay.CheckFingerprint(fingerprint); err != nil {
		return replay.Record{}, nil, fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	if s.pool == nil {
		return replay.Record{}, nil, fmt.Errorf("%w: zero Store (use pgstore.New)", ErrConfig)
	}
	if err := s.refused(); err != nil {
		return replay.Record{}, nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			return replay.Record{}, nil, fmt.Errorf("%w: %w (%w)", ErrUnavailable, ctxErr, err)
		}
		return replay.Record{}, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var raw [tokenLen / 2]byte
	rand.Read(raw[:])
	key := s.key(id)
	us := int64(lease / time.Microsecond)
	if lease%time.Microsecond != 0 {
		us++
	}
	w := &work{s: s, key: key, token: hex.EncodeToString(raw[:]), pc: pc, conn: pc.Conn(), locked: true, leaseUS: us}
	w.tx = &workTx{w: w}
	fp1, fp2 := s.fpLock(key, fingerprint)
	type read struct {
		lock                int
		marker              bool
		state               string
		wait                int64
		fingerprint, result []byte
	}
	started := w.claimEnd()
	// On the caller's goroutine: a call given up while its statements run
	// on must not leave an acquired Work, and its locks, behind.
	// ctx carries the store's deadline already (set above, for Acquire).
	r, err := callBounded(ctx, true, func(ctx context.Context) (read, error) {
		if !started() {
			return read{}, nil
		}
		var r read
		b := &pgx.Batch{}
		b.Queue(beginSQL)
		b.Queue(lockSQL, s.idLock(key), fp1, fp2, strconv.FormatInt(max((us+999)/1000, 1), 10))
		b.Queue(s.lockedReadSQL, key, s.legacyKey(id))
		br := w.conn.SendBatch(ctx, b)
		_, beginErr := br.Exec()
		var unset bool
		lockErr := br.QueryRow().Scan(&w.xid, &unset, &r.lock)
		readErr := br.QueryRow().Scan(&r.marker, &r.state, &r.wait, &r.fingerprint, &r.result)
		closeErr := br.Close()
		w.begun = beginErr == nil
		if err := errors.Join(beginErr, lockErr, readErr, closeErr); err != nil {
			w.put(ctx, false) // closed: nothing taken survives it
			return r, err
		}
		if r.lock == 0 && r.marker && r.state == "" {
			return r, nil // acquired: the Work keeps the connection
		}
		_, err := w.conn.PgConn().Exec(ctx, "rollback").ReadAll()
		w.put(ctx, err == nil)
		return r, nil
	})
	if err != nil {
		w.closeUnlessStarted(started)
		return replay.Record{}, nil, err
	}
	switch {
	case !r.marker:
		return replay.Record{}, nil, fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten)
	case r.state == "l":
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: time.Duration(max(r.wait, 0)) * time.Microsecond},
			Fingerprint: r.fingerprint}, nil, nil
	case r.state == "c" || r.state == "d":
		return replay.Record{Lease: replay.Lease{State: replay.LeaseDone}, Fingerprint: r.fingerprint, Result: r.result}, nil, nil
	case r.state != "":
		return replay.Record{}, nil, fmt.Errorf("%w: unexpected row state from the acquire statement", ErrUnavailable)
	case r.lock == 0:
		return replay.Record{Lease: replay.Lease{State: replay.LeaseAcquired, Token: w.token}}, w, nil
	case r.lock == 1 && len(fingerprint) > 0:
		return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}, Fingerprint: otherFingerprint(fingerprint)}, nil, nil
	}
	return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy}}, nil, nil
}

// otherFingerprint returns a fingerprint that differs from fp (its last
// byte changed): what AcquireWork reports for a holder whose request is
// known to differ but whose fingerprint is not committed.
func otherFingerprint(fp []byte) []byte {
	o := append([]byte(nil), fp...)
	o[len(o)-1] ^= 0xff
	return o
}
