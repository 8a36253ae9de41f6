package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgconn"
)

// prepare writes the store's statements for its table.
func (s *Store) prepare() {
	t := s.table
	// A claim runs claimSQL, and takeoverSQL only when claimSQL found the
	// marker but neither inserted nor found a live row. In both, m is the
	// marker row: when the table was truncated or emptied it is gone, and
	// the statement neither inserts nor takes anything over. leg is a live row of the same ID
	// under the layout before version 2 ($3, see [Migrate]): a claim made
	// before the table was migrated, which keeps the ID taken until it
	// expires.
	//
	// claimSQL looks up the marker and the ID's row (cur, in the
	// statement's snapshot). A live row refuses the claim: leg is a
	// subquery PostgreSQL evaluates only when the insert's condition
	// reaches it, so it is not read, and nothing is written or locked: a
	// flood of replays costs two index lookups each, not commits.
	// Otherwise it inserts the key when the marker row is there, until is
	// in the future and leg is not live; a row committed after the
	// snapshot is found by ON CONFLICT DO NOTHING, again without a write.
	// It returns whether it inserted, whether the marker is there, whether
	// cur was live and whether until is in the future. When the marker is
	// there and it neither inserted nor found a live row (an expired row,
	// a live leg, a past until, or a concurrent statement that inserted,
	// took over or deleted the row), Claim runs takeoverSQL, which decides
	// each of those.
	s.claimSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
cur AS (SELECT 1 FROM ` + t + ` WHERE key = $1::bytea AND until > now()),
ins AS (
  INSERT INTO ` + t + ` (key, state, token, until)
  SELECT $1::bytea, 'c', '', $2::timestamptz FROM m
  WHERE NOT EXISTS (SELECT 1 FROM cur) AND $2::timestamptz > now()
    AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE key = $3::bytea AND until > now())
  ON CONFLICT (key) DO NOTHING
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins), EXISTS (SELECT 1 FROM m), EXISTS (SELECT 1 FROM cur), $2::timestamptz > now()`
	// takeoverSQL inserts a free key (ins) or takes over a row that has
	// expired (upd: after waiting for its row lock, PostgreSQL checks until
	// again on the row's newest version, so of two takeovers one wins). A
	// claim of a live row matches neither and writes nothing. The last
	// column reports an expired row in the statement's snapshot that the
	// claim could have taken: when neither ins nor upd took it, a
	// concurrent statement changed it first (took it over, or a sweeper or
	// release deleted it), and the claim runs again to see which.
	s.takeoverSQL = `WITH m AS (SELECT 1 FROM ` + t + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now() AND ` + historyGuardSQL + `),
leg AS (SELECT 1 FROM ` + t + ` WHERE key = $3::bytea AND until > now()),
ins AS (
  INSERT INTO ` + t + ` (key, state, token, until)
  SELECT $1::bytea, 'c', '', $2::timestamptz FROM m WHERE $2::timestamptz > now() AND NOT EXISTS (SELECT 1 FROM leg)
  ON CONFLICT (key) DO NOTHING
  RETURNING 1
),
upd AS (
  UPDATE ` + t + ` SET state = 'c', token = '', until = $2::timestamptz
  WHERE key = $1::bytea AND until <= now() AND $2::timestamptz > now()
    AND EXISTS (SELECT 1 FROM m) AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM leg)
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM m), $2::timestamptz > now(),
  EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM upd),
  EXISTS (SELECT 1 FROM m) AND $2::timestamptz > now() AND NOT EXISTS (SELECT 1 FROM leg)
    AND EXISTS (SELECT 1 FROM ` + t + ` WHERE key = $1::bytea AND until <= now())`
	s.releaseSQL = `DELETE FROM ` + t + ` WHERE key = $1`
	s.prepareLease()
	s.prepareRead()
	s.prepareSweep()
	s.prepareWork()
	s.prepareLockedWork()
}

// key is the row key of id: the prefix's length (two bytes, big-endian),
// the prefix, then id. The length makes the key unambiguous across
// prefixes: no key of one prefix is a key of another, even when one prefix
// starts with another ("ctoken:replay:" and "ctoken:replay:webhooks:").
// Its first byte is 0x00 or 0x01 (1 <= len(prefix) <= MaxPrefixBytes), and
// the marker row's key is two zero bytes (a prefix of length 0).
func (s *Store) key(id string) []byte {
	k := make([]byte, 0, 2+len(s.prefix)+len(id))
	k = binary.BigEndian.AppendUint16(k, uint16(len(s.prefix)))
	return append(append(k, s.prefix...), id...)
}

// legacyKey is the row key of id under the layout before version 2
// (prefix then id, ambiguous across nested prefixes). The store writes no
// such key; a live row under it is a claim made before [Migrate] upgraded
// the table, and keeps id taken until it expires.
func (s *Store) legacyKey(id string) []byte {
	k := make([]byte, 0, len(s.prefix)+len(id))
	return append(append(k, s.prefix...), id...)
}

// keys returns id's row key and its layout-1 key (see [Store.key] and
// [Store.legacyKey]) in one allocation.
func (s *Store) keys(id string) (key, legacy []byte) {
	n := 2 + len(s.prefix) + len(id)
	b := make([]byte, 0, n+len(s.prefix)+len(id))
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.prefix)))
	b = append(append(b, s.prefix...), id...)
	b = append(append(b, s.prefix...), id...)
	return b[:n:n], b[n:]
}

// Claim records id until the given time and reports whether this call was
// the first live claim of id, across every process sharing the table and
// prefix. Exactly one of any number of concurrent claims of the same ID
// returns true, and it returns only after the claim is committed. Once
// until has passed by the database's clock, the ID can be claimed again; an
// until after the year 9999 is held forever, and one before the year 1 is
// refused as expired.
//
// Claim fails closed: on any error it returns first == false and an error
// matching ErrUnavailable (PostgreSQL could not answer in time, answered
// with an error, or the table forgot its claims: [ErrForgotten]) or
// ErrInvalidClaim (empty or oversize id, or, also matching
// [replay.ErrExpired], an until not after the database's current time;
// nothing is recorded). Error text never contains id.
//
// A claim whose reply is lost may still have been committed, and a resend
// then reports first == false: the ID is consumed and refused, never
// accepted twice.
//
// When ctx carries a transaction ([WithTx], or the Context of a Work of
// [Store.BeginWork] of a Store on the same pool), Claim runs its
// statements in that transaction, on the caller's goroutine, so first ==
// true means the claim holds if and only if the transaction commits; a
// concurrent claim of the same ID waits for that transaction to end
// (docs/pgstore-reference.md, "Transactional mode"). The Work of a Store on another
// pool, which may be another database, is not used: the claim then runs
// on this Store's pool, as without a transaction. A transaction of
// [WithTx] on another database or server fails the claim with an error
// matching [ErrConfig].
func (s *Store) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if err := s.beyondHorizon(until); err != nil {
		return false, err
	}
	if err := s.refused(); err != nil {
		return false, err
	}
	var c claimed
	var err error
	if tx := s.claimTx(ctx); tx != nil {
		c, err = claimInTx(s, ctx, func(ctx context.Context) (claimed, error) {
			return s.claim(ctx, tx, s.claimTxSQL, s.takeoverTxSQL, id, until, s.dbName, s.sysID, s.port, s.addr)
		})
	} else {
		c, err = call(s, ctx, func(ctx context.Context) (claimed, error) {
			return s.claim(ctx, s.pool, s.claimSQL, s.takeoverSQL, id, until)
		})
	}
	marker, future, first := c.marker, c.future, c.first
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && strings.Contains(pgErr.Message, errForeignTx):
		return false, errForeign
	case err != nil:
		return false, err
	case first:
		return true, nil
	case !marker:
		return false, fmt.Errorf("%w: %w", ErrUnavailable, ErrForgotten)
	case !future:
		return false, fmt.Errorf("%w: %w: until is not after the database's clock", ErrInvalidClaim, replay.ErrExpired)
	}
	return false, nil
}

// claimed is what a claim's statements reported; again: takeoverSQL must
// run again (a concurrent statement changed the row it found).
type claimed struct{ marker, future, first, again bool }

// claim runs a claim's statements (claimSQL, then takeoverSQL when
// needed) on q: the pool, or a caller's transaction.
//
// guard, in a caller's transaction, is the database's name, the server's
// system identifier, port and address (the statements' $4 to $7, checked in the
// statement itself, see [Store.prepareWork]), read back as one more
// column.
func (s *Store) claim(ctx context.Context, q querier, claimSQL, takeoverSQL, id string, until time.Time, guard ...any) (claimed, error) {
	key, legacy := s.keys(id)
	u := pgTime(until)
	var c claimed
	var live bool
	var g int
	args := append([]any{key, u, legacy}, guard...)
	scan := func(dest ...any) []any {
		if len(guard) > 0 {
			dest = append(dest, &g)
		}
		return dest
	}
	if err := q.QueryRow(ctx, claimSQL, args...).Scan(scan(&c.first, &c.marker, &live, &c.future)...); err != nil || c.first || !c.marker || live {
		return c, err
	}
	// Neither inserted nor refused by a live row (an expired row, a row
	// that changed under a concurrent statement, a live leg, a past
	// until): take it over, or see why not.
	for range maxRaces {
		if err := q.QueryRow(ctx, takeoverSQL, args...).Scan(scan(&c.marker, &c.future, &c.first, &c.again)...); err != nil || c.first || !c.again {
			return c, err
		}
	}
	return c, errRaced
}

// Release forgets the claim of id, so the next Claim of id is first again.
// It is for a caller that claimed id and then failed to act on it; one-time
// tokens must never be released. Releasing an ID that is not claimed is not
// an error. Release deletes the row whoever claimed it, so release only IDs
// you claimed, before their until. Errors match ErrUnavailable or, for an
// empty or oversize id, ErrInvalidClaim; the claim may then stay in force.
func (s *Store) Release(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return s.run(ctx, func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, s.releaseSQL, s.key(id))
		return err
	})
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

// beyondHorizon refuses an until more than Options.Horizon past the
// instance's clock (nil without a horizon).
func (s *Store) beyondHorizon(until time.Time) error {
	if s.checks.horizon > 0 && until.Sub(s.checks.now()) > s.checks.horizon {
		return fmt.Errorf("%w: until lies more than Options.Horizon (%v) ahead", ErrInvalidClaim, s.checks.horizon)
	}
	return nil
}

// leaseBeyondHorizon refuses a lease longer than Options.Horizon (nil
// without a horizon).
func (s *Store) leaseBeyondHorizon(lease time.Duration) error {
	if s.checks.horizon > 0 && lease > s.checks.horizon {
		return fmt.Errorf("%w: lease longer than Options.Horizon (%v)", ErrInvalidClaim, s.checks.horizon)
	}
	return nil
}
