package pgstore

import (
	"context"
	"testing"

	"github.com/ctoken/ctoken/exchange/exchangetest"
	"github.com/ctoken/ctoken/idempotency/idempotencytest"
	"github.com/ctoken/ctoken/mcptoken/mcptokentest"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/ctoken/ctoken/webhook/webhooktest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestLeaseContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunLeaseContract(t, func(t *testing.T) replaytest.Store { return storeOn(t, pool) })
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
	if err := e.pool.QueryRow(bg(), `SELECT count(*) FROM "`+e.table+`" WHERE id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWorkContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunWorkContract(t, func(t *testing.T) (replaytest.WorkStore, replaytest.Effects) {
		e := pgEffects{pool, uniqueTable(t, pool)}
		if _, err := pool.Exec(bg(), `CREATE TABLE "`+e.table+`" (id text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return storeOn(t, pool), e
	})
}

// TestIdempotencyContract: two instances of a service, each with its own
// Store on the shared server's table (one prefix).
func TestIdempotencyContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	idempotencytest.RunContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, pool) })
}

// TestExchangeContract: two token-exchange endpoints, each with its own
// issuer and Store on the shared server's table (one prefix).
func TestExchangeContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	exchangetest.RunContract(t, func(t *testing.T) (replay.Store, replay.Store) { return twoInstances(t, pool) })
}

// TestMCPIdempotencyContract: two MCP server instances, each with its own
// Store on the shared server's table (one prefix).
func TestMCPIdempotencyContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	mcptokentest.RunContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, pool) })
}

// TestMCPTasksContract: durable MCP tasks from two server instances, each
// with its own Store on the shared server's table (one prefix).
func TestMCPTasksContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	mcptokentest.RunTasksContract(t, func(t *testing.T) (replay.Recorder, replay.Recorder) { return twoInstances(t, pool) })
}

// TestMCPTasksWorkContract: Transactional task tools, their writes in a
// table of the shared server.
func TestMCPTasksWorkContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	mcptokentest.RunTasksWorkContract(t, func(t *testing.T) (replaytest.WorkStore, replaytest.Effects) {
		e := pgEffects{pool, uniqueTable(t, pool)}
		if _, err := pool.Exec(bg(), `CREATE TABLE "`+e.table+`" (id text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return storeOn(t, pool), e
	})
}

// twoInstances returns two Stores on the shared server's table with one
// prefix, as two instances of a service have.
func twoInstances(t *testing.T, pool *pgxpool.Pool) (*Store, *Store) {
	t.Helper()
	prefix := uniquePrefix()
	one := func(o *Options) { o.Prefix = prefix }
	return storeOn(t, pool, one), storeOn(t, pool, one)
}

// TestWebhookContract: two receivers, each with its own Store on the
// shared server's table (one prefix).
func TestWebhookContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	webhooktest.RunContract(t, func(t *testing.T) (replay.Store, replay.Store) { return twoInstances(t, pool) })
}

func TestClaimContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunClaimContract(t, func(t *testing.T) replay.Store { return storeOn(t, pool) })
}

// TestForgetContract: the table loses everything (TRUNCATE, DELETE, or
// dropped); no ID claimed, confirmed or leased before is accepted again.
// For PostgreSQL a crash does not forget (TestLoad/crash mid-load loses
// no acknowledged claim); these are an operator's acts.
func TestForgetContract(t *testing.T) {
	for _, forget := range []string{"TRUNCATE", "DELETE FROM", "DROP TABLE"} {
		t.Run(forget, func(t *testing.T) {
			t.Parallel() // a table of its own
			p := needServer(t)
			pool := p.pool(t)
			name := migratedTable(t, pool)
			replaytest.RunForgetContract(t,
				func(t *testing.T) replaytest.Store { return storeOn(t, pool, func(o *Options) { o.Table = name }) },
				func(t *testing.T) {
					if _, err := pool.Exec(bg(), forget+` "`+name+`"`); err != nil {
						t.Fatal(err)
					}
				})
		})
	}
}

// TestRequestStateContract: no refusal (caller, tool, arguments, audience)
// consumes a single-use request state held in PostgreSQL; the right request
// opens it afterwards exactly once (replaytest.RunRequestStateContract).
func TestRequestStateContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunRequestStateContract(t, func(t *testing.T) replay.Store { return storeOn(t, pool) })
}
