package pgstore

import (
	"context"
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/ctoken/ctoken/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestStore runs storetest's suite: every contract kit a Store's
// interfaces call for, on tables of the shared server (two instances share
// a prefix).
func TestStore(t *testing.T) {
	pool := needServer(t).pool(t)
	storetest.Exercise(t, storetest.Harness{
		NewStore:     func(t *testing.T) replay.Store { return storeOn(t, pool) },
		NewInstances: func(t *testing.T) (replay.Store, replay.Store) { return twoInstances(t, pool) },
		NewWork: func(t *testing.T) (replaytest.WorkStore, replaytest.Effects) {
			e := pgEffects{pool, uniqueTable(t, pool)}
			mustExec(t, pool, `CREATE TABLE "`+e.table+`" (id text NOT NULL)`)
			return storeOn(t, pool), e
		},
	})
}

// pgEffects is replaytest.Effects on a table of the shared server: one
// row per effect, written through TxFrom.
type pgEffects struct {
	pool  *pgxpool.Pool
	table string
}

func (e pgEffects) Write(ctx context.Context, id string) error {
	tx, err := TxFrom(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO "`+e.table+`" (id) VALUES ($1)`, id)
	return err
}

func (e pgEffects) Count(t *testing.T, id string) int {
	t.Helper()
	var n int
	must(t, e.pool.QueryRow(bg(), `SELECT count(*) FROM "`+e.table+`" WHERE id = $1`, id).Scan(&n))
	return n
}

// twoInstances returns two Stores on the shared server's table with one
// prefix, as two instances of a service have.
func twoInstances(t *testing.T, pool *pgxpool.Pool) (*Store, *Store) {
	t.Helper()
	prefix := uniquePrefix()
	one := func(o *Options) { o.Prefix = prefix }
	return storeOn(t, pool, one), storeOn(t, pool, one)
}

// TestForgetContract: the table loses everything (TRUNCATE, DELETE, or
// dropped); no ID claimed, confirmed or leased before is accepted again.
// For PostgreSQL a crash does not forget (TestLoad/server restart loses
// nothing; .ci/powerloss, TestPostgresPowerLoss); these are an operator's
// acts.
func TestForgetContract(t *testing.T) {
	for _, forget := range []string{"TRUNCATE", "DELETE FROM", "DROP TABLE"} {
		t.Run(forget, func(t *testing.T) {
			t.Parallel() // a table of its own
			pool := needServer(t).pool(t)
			name := migratedTable(t, pool)
			replaytest.RunForgetContract(t,
				func(t *testing.T) replaytest.Store { return storeOn(t, pool, func(o *Options) { o.Table = name }) },
				func(t *testing.T) { mustExec(t, pool, forget+` "`+name+`"`) })
		})
	}
}
