package sqlitestore

import (
	"context"
	"errors"
)

// claimAlone is the claim of a caller that finds the writer idle, in one
// autocommit statement on the writer's connection: the row is inserted,
// or takes over an expired row that is not a Work's, only if the marker
// row is there in the same statement, of the store's incarnation, not
// fenced, and not behind the sequence the store saw: the checks every
// write transaction's first statement makes ([guard.step]), here in the
// claim's own statement, so a lone first claim costs one statement and
// one commit, as an application's own INSERT does. It reports ok false,
// having changed nothing, when the claim must take the ordinary path: the
// writer is busy, the commit must advance the marker's sequence (the
// first durable commit after a check), or no row changed (the ID is
// live, or a check failed: the ordinary path tells which).
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
	if bump, _ := s.guard.wantBump(true); bump {
		return false, false, nil
	}
	if err := s.guard.refused(); err != nil {
		return false, true, err
	}
	if ctx == nil {
		ctx = context.Background()
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
	// As the writer's statements, it runs to its end even if the
	// caller's context ends (within the store's timeout).
	q := stmtQuerier{context.WithoutCancel(ctx), wc}
	res, err := q.exec(`INSERT INTO `+s.table+` (key, state, token, until, fingerprint, result)`+
		` SELECT ?, 'c', '', ?, NULL, NULL FROM `+s.table+` AS m`+
		` WHERE m.key = `+markerKey+` AND m.state = 'm' AND m.token = ? AND m.until <= ? AND m.seq >= ?`+
		` ON CONFLICT (key) DO UPDATE SET state = 'c', token = '', until = excluded.until, fingerprint = NULL, result = NULL`+
		` WHERE until <= ? AND state <> 'w'`,
		s.key(id), until, s.guard.incarnation, now, s.guard.seq.Load(), now)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		// The outcome is unknown (a failed commit may have reached the
		// disk), as after a failed COMMIT.
		s.commitFailed(ctx, err)
		return false, true, unavailable(ctx, err)
	}
	if n == 1 {
		return true, true, nil
	}
	return false, false, nil
}
