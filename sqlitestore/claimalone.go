package sqlitestore

import (
	"context"
	"errors"
)

// claimAlone is the claim of a caller that finds the writer idle: one
// autocommit statement on the writer's connection, as an application's own
// INSERT is. Its source is two rows, the claim's and a copy of the marker's
// key, produced only when the marker passes the checks every write
// transaction's first statement makes ([guard.step]: of the store's
// incarnation, not fenced, not behind). Both conflict-or-insert: the
// marker's conflict advances the sequence (every durable commit does), the
// claim's is inserted or takes over an expired row that is not a Work's.
// Two rows changed is a first claim; one, an ID already held. It reports ok
// false, having changed nothing, when the claim must take the ordinary
// path: the writer is busy, or a check failed (the ordinary path says
// which).
func (s *Store) claimAlone(ctx context.Context, id string, until int64) (first, ok bool, err error) {
	if len(s.ops) != 0 {
		return false, false, nil
	}
	select {
	case s.writeMu <- struct{}{}:
	default:
		return false, false, nil
	}
	defer func() { <-s.writeMu }()
	if err := s.guard.refused(); err != nil {
		return false, true, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if ctx.Err() != nil {
		return false, true, unavailable(ctx, errors.New("deadline passed before the step ran"))
	}
	now := s.now().UnixNano()
	if err := s.checkUntil(now, until); err != nil {
		return false, true, err
	}
	wc, _, err := s.writerConn(ctx)
	if err != nil {
		return false, true, err
	}
	last := s.guard.seq.Load()
	// As the writer's statements, it runs to its end whatever the caller's
	// context does (within the store's timeout).
	q := stmtQuerier{context.WithoutCancel(ctx), wc}
	key := s.key(id)
	n, err := execN(q, `INSERT INTO `+s.table+` (key, state, token, until, fingerprint, result)`+
		` SELECT v.column1, v.column2, '', v.column3, NULL, NULL FROM `+s.table+` AS m, (VALUES (?, 'c', ?), (`+markerKey+`, 'm', 0)) AS v`+
		` WHERE m.key = `+markerKey+` AND m.state = 'm' AND m.token = ? AND m.until <= ? AND m.seq >= ?`+
		` ON CONFLICT (key) DO UPDATE SET`+
		` seq = CASE WHEN excluded.state = 'm' THEN seq + 1 ELSE seq END,`+
		` state = CASE WHEN excluded.state = 'm' THEN state ELSE 'c' END,`+
		` token = CASE WHEN excluded.state = 'm' THEN token ELSE '' END,`+
		` until = CASE WHEN excluded.state = 'm' THEN until ELSE excluded.until END,`+
		` fingerprint = NULL, result = NULL`+
		` WHERE excluded.state = 'm' OR until <= ? AND state <> 'w'`,
		key, until, s.guard.incarnation, now, last, now)
	if err != nil {
		// The outcome is unknown (a failed commit may have reached the
		// disk), as after a failed COMMIT.
		s.commitFailed(ctx, err)
		return false, true, unavailable(ctx, err)
	}
	switch n {
	case 2:
		s.guard.saw(last + 1)
		return true, true, nil
	case 1:
		s.guard.saw(last + 1)
		// Held: live, or an escaped Work's expired row (errEscaped).
		r, err := s.row(q, key, now)
		if err != nil || r.live {
			return false, true, err
		}
		if r.found && r.state == "w" {
			return false, true, errEscaped
		}
	}
	return false, false, nil
}
