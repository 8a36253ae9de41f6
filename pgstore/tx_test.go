package pgstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestTx pins claims in a caller's transaction ([WithTx], [TxFrom], a
// Work's context).
func TestTx(t *testing.T) {
	subtests(t, []subtest{
		{"claim in a transaction", claimInATransaction},
		{"claim ignores a Work on another pool", claimIgnoresTheWorkOfAStoreOnAnotherPool},
		{"only the store's database and server", withTxOnlyTheStoresDatabaseAndServer},
		{"TxFrom without a transaction fails", txFromWithoutATransactionFails},
	})
}

// txFromWithoutATransactionFails: a context without a transaction
// yields ErrNoTx, never a connection; WithTx places one.
func txFromWithoutATransactionFails(t *testing.T) {
	var nilCtx context.Context
	for name, ctx := range map[string]context.Context{"background": bg(), "nil": nilCtx, "other value": context.WithValue(bg(), txKey{}, "not a tx")} {
		if tx, err := TxFrom(ctx); tx != nil || !errors.Is(err, ErrNoTx) {
			t.Errorf("TxFrom(%s) = %v, %v; want ErrNoTx", name, tx, err)
		}
	}
	s := newTestStore(t)
	tx := mustBegin(t, s.pool)
	if got, err := TxFrom(WithTx(nilCtx, tx)); got != tx || err != nil {
		t.Fatalf("TxFrom(WithTx(tx)) = %v, %v", got, err)
	}
	table := chargeTable(t, s.pool)
	wantIs(t, charge(bg(), table, "x", "nobody"), ErrNoTx, "a handler wired without the transactional mode: %v, want ErrNoTx")
}

// claimInATransaction: a Claim whose context carries a transaction
// (WithTx; a Work's Context: claimIgnoresTheWorkOfAStoreOnAnotherPool)
// holds only if the transaction commits, and a concurrent claim of the
// same ID waits for the transaction's end, then follows its outcome
// (taken when it committed, first when it rolled back), and is kept.
func claimInATransaction(t *testing.T) {
	s := newTestStore(t)
	until := time.Now().Add(time.Hour)
	tests := []struct {
		name   string
		commit bool
	}{
		{"committed", true},
		{"rolled back", false},
	}
	for _, tt := range tests {
		t.Run("WithTx "+tt.name, func(t *testing.T) {
			id := "tx-" + tt.name
			tx := mustBegin(t, s.pool)
			if first, err := s.Claim(WithTx(bg(), tx), id, until); !first || err != nil {
				t.Fatalf("Claim in the transaction = %v, %v", first, err)
			}
			// Another session's claim waits for the transaction.
			done := claimAsync(s, id, until)
			waitForLockWaiter(t, s.pool)
			select {
			case r := <-done:
				t.Fatalf("the concurrent claim returned %v, %v before the transaction ended", r.first, r.err)
			default:
			}
			end := tx.Rollback
			if tt.commit {
				end = tx.Commit
			}
			must(t, end(bg()))
			r := <-done
			if r.err != nil || r.first == tt.commit {
				t.Fatalf("concurrent claim after the transaction %s = %v, %v; want first = %v", tt.name, r.first, r.err, !tt.commit)
			}
			wantClaim(t, s, id, until, false, nil) // the resend
		})
	}

	t.Run("a one-time token redeemed in a transaction", func(t *testing.T) {
		iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: testKeys(t), Purpose: "pgtx", TTL: time.Minute, Replay: s})
		must(t, err)
		tok, err := iss.Mint(map[string]string{"sub": "a"})
		must(t, err)
		tx := mustBegin(t, s.pool)
		want := map[string]string{"sub": "a"}
		wantIs(t, errOf(iss.Redeem(WithTx(bg(), tx), tok, want)), nil, "Redeem in a transaction: %v")
		tx.Rollback(bg())
		wantIs(t, errOf(iss.Redeem(bg(), tok, want)), nil, "Redeem after the rollback: %v, want the token still unused")
		if _, err := iss.Redeem(bg(), tok, want); err == nil {
			t.Fatal("third Redeem succeeded: the token was not consumed")
		}
	})

	t.Run("a transaction that has ended", func(t *testing.T) {
		w, _ := acquire(t, s, "ended", time.Minute)
		ctx := w.Context(bg())
		must(t, w.Rollback(bg()))
		if first, err := s.Claim(ctx, "after-end", until); first || !errors.Is(err, ErrUnavailable) || !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("Claim in an ended work = %v, %v; want ErrUnavailable and ErrTxClosed", first, err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		tx := mustBegin(t, s.pool)
		cancelled, cancel := context.WithCancel(WithTx(bg(), tx))
		cancel()
		tests := []struct {
			name string
			s    *Store
			ctx  context.Context
			want []error
		}{
			{"a zero Store", &Store{}, WithTx(bg(), tx), []error{ErrConfig}},
			{"a cancelled context", s, cancelled, []error{ErrUnavailable, context.Canceled}},
		}
		for _, tt := range tests {
			first, err := tt.s.Claim(tt.ctx, "refused", until)
			for _, want := range tt.want {
				if first || !errors.Is(err, want) {
					t.Errorf("%s: Claim = %v, %v; want %v", tt.name, first, err, want)
				}
			}
		}
	})

	t.Run("expiry by the database's clock", func(t *testing.T) {
		tx := mustBegin(t, s.pool)
		// now() is the transaction's start; the claim reads the statement's
		// time, so an until between the two is refused as expired.
		time.Sleep(300 * time.Millisecond)
		var dbNow time.Time
		must(t, tx.QueryRow(bg(), `SELECT statement_timestamp()`).Scan(&dbNow))
		if first, err := s.Claim(WithTx(bg(), tx), "stale", dbNow.Add(-100*time.Millisecond)); first || !errors.Is(err, replay.ErrExpired) {
			t.Fatalf("Claim with an until past by the statement's clock = %v, %v; want ErrExpired", first, err)
		}
	})
}

// claimIgnoresTheWorkOfAStoreOnAnotherPool: a Work's context reaches
// every Store a handler uses, not only the one that began it. A Store on
// another pool (here another database, with a table of the same name)
// must not write its claim in that Work's transaction, where its own
// database would never see it: it claims on its own pool, as without the
// transactional mode, so the claim holds there and a second claim of the
// ID is refused. A Store on the Work's own pool still claims in the Work.
func claimIgnoresTheWorkOfAStoreOnAnotherPool(t *testing.T) {
	p := needServer(t)
	work := newTestStore(t)
	otherPool := otherDatabase(t, p, work.pool)
	until := time.Now().Add(time.Hour)
	tests := []struct {
		name      string
		store     *Store
		commit    bool
		wantAfter bool // a claim of the ID after the work ended is first
	}{
		{"another pool, the work committed", storeOn(t, otherPool), true, false},
		{"another pool, the work rolled back", storeOn(t, otherPool), false, false},
		{"the work's pool, the work committed", storeOn(t, work.pool), true, false},
		{"the work's pool, the work rolled back", storeOn(t, work.pool), false, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := acquire(t, work, "pool-"+strconv.Itoa(i), time.Minute)
			id := "token-" + strconv.Itoa(i)
			if first, err := tt.store.Claim(w.Context(bg()), id, until); !first || err != nil {
				t.Fatalf("Claim in the work's context = %v, %v; want first", first, err)
			}
			if tt.commit {
				must(t, w.Commit(bg(), time.Now().Add(time.Hour), nil, nil))
			} else {
				must(t, w.Rollback(bg()))
			}
			wantClaim(t, tt.store, id, until, tt.wantAfter, nil)
		})
	}
}

// withTxOnlyTheStoresDatabaseAndServer: a Claim in a transaction of
// WithTx runs only on the store's database of the store's server
// (checked in the claim's statement): on another database, or on a copy
// of the server's data directory running beside it (same system
// identifier), it fails with ErrConfig and claims nothing. On the store's
// database, another pool, a search_path that finds another schema's table
// of the store's name first, or a temporary table of that name, change
// nothing: the claim is written in the store's table.
func withTxOnlyTheStoresDatabaseAndServer(t *testing.T) {
	p := needServer(t)
	s := newTestStore(t)
	otherDB := otherDatabase(t, p, s.pool)
	copyOfServer := ownServer(t).pool(t) // a copy of the same template: the same system identifier
	schema := "other_schema_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	mustExec(t, s.pool, `CREATE SCHEMA `+schema)
	t.Cleanup(func() { s.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	must(t, Migrate(bg(), s.pool, schema+"."+DefaultTable))
	until := time.Now().Add(time.Hour)
	tests := []struct {
		name    string
		pool    *pgxpool.Pool
		prepare string // sent in the transaction before the claim
		foreign bool
	}{
		{"another database", otherDB, "", true},
		{"a copy of the server", copyOfServer, "", true},
		{"another pool on the store's database", p.pool(t), "", false},
		{"another schema first on the search_path", s.pool, "set local search_path = " + schema + ", public", false},
		{"a temporary table of the store's name", s.pool, `CREATE TEMP TABLE ` + DefaultTable + ` (LIKE public.` + DefaultTable + ` INCLUDING ALL) ON COMMIT DROP;
			INSERT INTO pg_temp.` + DefaultTable + ` (key, state, token, until) VALUES (decode('0000', 'hex'), 'm', '', '-infinity')`, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "withtx-" + strconv.Itoa(i)
			tx := mustBegin(t, tt.pool)
			if tt.prepare != "" {
				mustExec(t, tx, tt.prepare)
			}
			first, err := s.Claim(WithTx(bg(), tx), id, until)
			if tt.foreign {
				if first || !errors.Is(err, ErrConfig) {
					t.Fatalf("Claim = %v, %v; want ErrConfig", first, err)
				}
				tx.Rollback(bg())
				mustClaim(t, s, id, until)
				return
			}
			if !first || err != nil {
				t.Fatalf("Claim = %v, %v; want first", first, err)
			}
			must(t, tx.Commit(bg()))
			wantClaim(t, s, id, until, false, nil)
		})
	}
}

// otherDatabase creates a database of its own on p (through admin, and
// dropped when t ends) and returns a pool on it, its default table made.
func otherDatabase(t *testing.T, p *pgServer, admin *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	db := "other_" + strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(uniquePrefix(), "test:"), ":"), "-", "")
	mustExec(t, admin, `CREATE DATABASE "`+db+`"`)
	t.Cleanup(func() { admin.Exec(context.Background(), `DROP DATABASE IF EXISTS "`+db+`" WITH (FORCE)`) })
	pool := p.poolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Database = db })
	must(t, Migrate(bg(), pool, DefaultTable))
	return pool
}
