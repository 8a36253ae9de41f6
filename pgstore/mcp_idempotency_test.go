package pgstore

// Idempotent MCP tool calls (mcptoken.Idempotency, the engine under
// ctokenmcp's and ctokenmcpgo's Idempotency.Wrap) on a real PostgreSQL,
// through a fault only this store has: a lost COMMIT reply. The tool's
// effect is a row in a table with no unique key, so an effect kept twice
// shows as two rows.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/jackc/pgx/v5/pgxpool"
)

// mcpIntegration is a minimal mcptoken.Integration for the tests.
func mcpIntegration() *mcptoken.Integration {
	return &mcptoken.Integration{
		Name:     "test",
		NoCaller: func() error { return errors.New("no caller") },
		Refused:  func(mcptoken.Refusal) error { return errors.New("refused") },
	}
}

// paymentsTable creates the tool's table, one row per payment kept and no
// unique key, dropped when t ends.
func paymentsTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	return newTable(t, pool, "mcp_payments_", "amount int not null")
}

// TestMCPIdempotencyOnPostgreSQL: a tool run in the store's transaction
// (Transactional) whose COMMIT reply is lost is outcome unknown, and the
// retry gets the committed result. (Idempotent tools on every store, this
// one's transactional mode included: mcp/drivertest.)
func TestMCPIdempotencyOnPostgreSQL(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	table := paymentsTable(t, pool)
	ctx := context.Background()
	dropper := newCommitReplyDropper(t, "127.0.0.1:"+p.port)
	via := poolVia(t, p, dropper.ln.Addr().String(), 4)
	// The client waits for the lost reply until the lease
	// ends: long enough that no loaded machine outlives it
	// before the COMMIT (whose passing the fence is the
	// premise), short enough for the test.
	idem, err := mcptoken.NewIdempotency(mcptoken.IdempotencyConfig{Keys: testKeys(t), Store: storeOn(t, via), KeyArgument: "key", Transactional: true, Lease: 5 * time.Second}, mcpIntegration())
	must(t, err)
	var runs atomic.Int32
	pay := func(ctx context.Context) ([]byte, error) {
		n := runs.Add(1)
		tx, err := TxFrom(ctx)
		if err != nil {
			return nil, err
		}
		var pid int32
		if err := tx.QueryRow(ctx, "insert into "+table+" values (7) returning pg_backend_pid()").Scan(&pid); err != nil {
			return nil, err
		}
		if n == 1 {
			dropper.doom(pid)
		}
		return []byte(fmt.Sprintf(`{"content":[{"type":"text","text":"payment %d"}]}`, n)), nil
	}
	args := []byte(`{"key":"pay-3","amount":7}`)
	_, err = idem.Call(ctx, "alice", "pay", args, nil, pay)
	if d, ok := mcptoken.RetryAfter(err); !errors.Is(err, mcptoken.ErrOutcomeUnknown) || errors.Is(err, mcptoken.ErrIdempotencyStore) || !ok || d > time.Second {
		t.Fatalf("the call whose COMMIT reply was lost: %v (RetryAfter %v, %v); want ErrOutcomeUnknown within 1s", err, d, ok)
	}
	var res []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		if res, err = idem.Call(ctx, "alice", "pay", args, nil, pay); err == nil {
			break
		}
		if !errors.Is(err, mcptoken.ErrInProgress) && !errors.Is(err, mcptoken.ErrIdempotencyStore) || time.Now().After(deadline) {
			t.Fatalf("the retry: %v", err)
		}
	}
	var kept int
	must(t, pool.QueryRow(ctx, "select count(*) from "+table+" where amount = 7").Scan(&kept))
	if string(res) != `{"content":[{"type":"text","text":"payment 1"}]}` || runs.Load() != 1 || kept != 1 || dropper.dropped.Load() != 1 {
		t.Fatalf("the retry got %s; %d runs, %d payments kept, %d replies dropped; want the first run's, kept once", res, runs.Load(), kept, dropper.dropped.Load())
	}
}
