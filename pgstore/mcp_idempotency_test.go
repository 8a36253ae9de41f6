package pgstore

// Idempotent MCP tool calls (mcptoken.Idempotency, the engine under
// ctokenmcp's and ctokenmcpgo's Idempotency.Wrap) on a real PostgreSQL:
// the tool's effect is a row in a table with no unique key, so an effect
// kept twice shows as two rows. The SDK wrappers are driven by the SDKs'
// own clients in their modules; here the retry of a lost response is the
// same call made again.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/jackc/pgx/v5/pgxpool"
)

// idemKeys seal the recorded results of the tests' idempotent tools.
var idemKeys = func() *ctoken.Keyring {
	kr, err := ctoken.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return kr
}()

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
	b := make([]byte, 6)
	rand.Read(b)
	name := "mcp_payments_" + hex.EncodeToString(b)
	mustExec(t, pool, "create table "+name+" (amount int not null)")
	t.Cleanup(func() { pool.Exec(context.Background(), "drop table "+name) })
	return name
}

func paymentRows(t testing.TB, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	must(t, pool.QueryRow(context.Background(), "select count(*) from "+table).Scan(&n))
	return n
}

// TestMCPIdempotencyOnPostgreSQL runs the tool in the store's transaction
// (Transactional), its write a row: what the store adds to the contract
// every store runs (TestStore), which covers the calls
// without a transaction.
func TestMCPIdempotencyOnPostgreSQL(t *testing.T) {
	t.Run("transactional true", func(t *testing.T) {
		p := needServer(t)
		pool := p.pool(t)
		store := storeOn(t, pool)
		table := paymentsTable(t, pool)
		idem, err := mcptoken.NewIdempotency(mcptoken.IdempotencyConfig{Keys: idemKeys, Store: store, KeyArgument: "key", Transactional: true}, mcpIntegration())
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		fail := atomic.Bool{}
		pay := func(ctx context.Context) ([]byte, error) {
			n := runs.Add(1)
			tx, err := TxFrom(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, "insert into "+table+" values (5)"); err != nil {
				return nil, err
			}
			if fail.Load() {
				return nil, errors.New("the tool failed after its write")
			}
			return []byte(fmt.Sprintf(`{"content":[{"type":"text","text":"payment %d"}]}`, n)), nil
		}
		ctx := context.Background()
		args := []byte(`{"key":"pay-1","amount":5}`)
		first, err := idem.Call(ctx, "alice", "pay", args, nil, pay) // the response is lost
		if err != nil {
			t.Fatal(err)
		}
		t.Run("the retry gets the first result", func(t *testing.T) {
			again, err := idem.Call(ctx, "alice", "pay", args, nil, pay)
			if err != nil || !bytes.Equal(again, first) || runs.Load() != 1 || paymentRows(t, pool, table) != 1 {
				t.Fatalf("%q, %v; %d runs, %d rows", again, err, runs.Load(), paymentRows(t, pool, table))
			}
		})
		t.Run("changed arguments are refused", func(t *testing.T) {
			if _, err := idem.Call(ctx, "alice", "pay", []byte(`{"key":"pay-1","amount":6}`), nil, pay); !errors.Is(err, mcptoken.ErrKeyReused) {
				t.Fatalf("err = %v", err)
			}
		})
		t.Run("another caller's key is its own", func(t *testing.T) {
			if _, err := idem.Call(ctx, "bob", "pay", args, nil, pay); err != nil || runs.Load() != 2 {
				t.Fatalf("%v; %d runs", err, runs.Load())
			}
		})
		t.Run("a tool failure keeps neither its write nor a record", func(t *testing.T) {
			fail.Store(true)
			before := paymentRows(t, pool, table)
			if _, err := idem.Call(ctx, "alice", "pay", []byte(`{"key":"pay-2","amount":5}`), nil, pay); err == nil {
				t.Fatal("the failure was not returned")
			}
			if paymentRows(t, pool, table) != before {
				t.Fatal("the failed tool's write was kept")
			}
			fail.Store(false)
			if _, err := idem.Call(ctx, "alice", "pay", []byte(`{"key":"pay-2","amount":5}`), nil, pay); err != nil {
				t.Fatalf("the released key did not run again: %v", err)
			}
			if paymentRows(t, pool, table) != before+1 {
				t.Fatal("the retry's write and record did not commit together")
			}
		})
		t.Run("a lost COMMIT reply is outcome unknown, and the retry gets the committed result", func(t *testing.T) {
			dropper := newCommitReplyDropper(t, "127.0.0.1:"+p.port)
			via := poolVia(t, p, dropper.ln.Addr().String(), 4)
			// The client waits for the lost reply until the lease
			// ends: long enough that no loaded machine outlives it
			// before the COMMIT (whose passing the fence is the
			// premise), short enough for the test.
			idem, err := mcptoken.NewIdempotency(mcptoken.IdempotencyConfig{Keys: idemKeys, Store: storeOn(t, via), KeyArgument: "key", Transactional: true, Lease: 5 * time.Second}, mcpIntegration())
			if err != nil {
				t.Fatal(err)
			}
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
		})
	})
}
