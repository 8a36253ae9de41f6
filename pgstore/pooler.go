package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// poolerProbe is the session setting [Store.checkPooler] writes and reads
// back.
const poolerProbe = "ctoken.pooler_probe"

// checkPooler refuses, at New, a pool whose connections do not keep their
// server session between transactions (a pooler in transaction or
// statement mode between the pool and PostgreSQL, such as PgBouncer's
// pool_mode = transaction) while the pool's exec mode prepares named
// statements on the session and uses them in later transactions
// (pgx's default, QueryExecModeCacheStatement, and
// QueryExecModeDescribeExec, whose two round trips may reach two server
// sessions): there every claim may fail with "prepared statement ...
// already exists" or "does not exist" while the store looks healthy.
//
// The probe: a pooled connection A and a new one B each write a setting
// of their session and read their backend's pid, then A reads both again.
// Directly on PostgreSQL, A keeps its backend and its setting, and B has
// another backend. Behind such a pooler the transactions of A and B are
// served by whichever server session is free (PgBouncer reuses the one
// freed last: B's), so A finds B's backend or B's setting, or its setting
// gone. The probe's statements use the simple protocol, which any pooler
// serves.
func (s *Store) checkPooler(ctx context.Context) error {
	switch s.pool.Config().ConnConfig.DefaultQueryExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheDescribe:
		return nil // nothing of a statement outlives its round trip
	}
	type probe struct {
		pid int32
		got string
	}
	var raw [8]byte
	rand.Read(raw[:])
	mark := hex.EncodeToString(raw[:])
	kept, err := call(s, ctx, func(ctx context.Context) (bool, error) {
		a, err := s.pool.Acquire(ctx)
		if err != nil {
			return false, err
		}
		defer a.Release()
		b, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err != nil {
			return false, err
		}
		defer b.Close(context.Background())
		const set = `SELECT pg_backend_pid(), set_config('` + poolerProbe + `', $1, false)`
		var a1, b1, a2 probe
		if err := a.QueryRow(ctx, set, pgx.QueryExecModeSimpleProtocol, "a"+mark).Scan(&a1.pid, &a1.got); err != nil {
			return false, err
		}
		if err := b.QueryRow(ctx, set, pgx.QueryExecModeSimpleProtocol, "b"+mark).Scan(&b1.pid, &b1.got); err != nil {
			return false, err
		}
		if err := a.QueryRow(ctx, `SELECT pg_backend_pid(), coalesce(current_setting('`+poolerProbe+`', true), '')`,
			pgx.QueryExecModeSimpleProtocol).Scan(&a2.pid, &a2.got); err != nil {
			return false, err
		}
		// The pooled session keeps no trace of the probe (behind a
		// pooler, whichever session this reaches: nothing to check).
		a.Exec(ctx, `RESET `+poolerProbe, pgx.QueryExecModeSimpleProtocol)
		return a1.pid == a2.pid && a1.pid != b1.pid && a2.got == "a"+mark, nil
	})
	switch {
	case err != nil:
		return err
	case !kept:
		return fmt.Errorf("%w: the pool's connections do not keep their server session between transactions "+
			"(a pooler in transaction or statement mode, such as PgBouncer's pool_mode = transaction), "+
			"and the pool's exec mode (pgx's default) prepares named statements on the session: claims would fail with "+
			"\"prepared statement ... already exists\". Set the pool's ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec "+
			"(default_query_exec_mode=exec in the connection string), or the pooler's pool_mode = session", ErrConfig)
	}
	return nil
}
