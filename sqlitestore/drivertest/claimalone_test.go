package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// TestLoneClaimChecksTheMarker: a claim that finds the writer idle checks
// the marker row in its transaction. With the marker tampered with after
// the store's first durable commits, the claim is refused with
// ErrUnavailable and is not first.
func TestLoneClaimChecksTheMarker(t *testing.T) {
	tests := []struct {
		name, tamper string
	}{
		{"marker deleted", `DELETE FROM ctoken_replay WHERE key = x'0000'`},
		{"another incarnation", `UPDATE ctoken_replay SET token = 'another' WHERE key = x'0000'`},
		{"fenced", `UPDATE ctoken_replay SET until = 9223372036854775807 WHERE key = x'0000'`},
		{"sequence gone back", `UPDATE ctoken_replay SET seq = 0 WHERE key = x'0000'`},
		{"marker's state", `UPDATE ctoken_replay SET state = 'c' WHERE key = x'0000'`},
	}
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				s, db, _ := readStore(t, d)
				claimAll(t, s, []string{"a", "b"}, time.Now().Add(time.Hour))
				mustExec(t, ctx, db, tc.tamper)
				first, err := s.Claim(ctx, "c", time.Now().Add(time.Hour))
				if first || !errors.Is(err, sqlitestore.ErrUnavailable) {
					t.Fatalf("Claim after %q = %v, %v; want refused with ErrUnavailable", tc.tamper, first, err)
				}
				if n := countRows(t, db, `SELECT count(*) FROM ctoken_replay WHERE state = 'c' AND length(key) > 2`); n != 2 {
					t.Errorf("%d claimed rows; want 2 (the refused claim wrote nothing)", n)
				}
			})
		}
	})
}

// TestEveryDurableCommitAdvancesTheSequence: the judgement of a WAL kept
// after a crash (a claim lost with it is found) needs every durable commit
// of a store to advance the marker's sequence: a lone claim, a claim that
// finds its ID held, a confirmation, a Work's commit, a claim in a
// caller's transaction.
func TestEveryDurableCommitAdvancesTheSequence(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		s, db, _ := readStore(t, d)
		seq := func() int64 {
			t.Helper()
			var n int64
			must(t, db.QueryRowContext(ctx, `SELECT seq FROM ctoken_replay WHERE key = x'0000'`).Scan(&n))
			return n
		}
		until := time.Now().Add(time.Hour)
		steps := []struct {
			name string
			do   func() error
		}{
			{"a lone first claim", func() error { _, err := s.Claim(ctx, "a", until); return err }},
			{"a claim of a held ID", func() error { _, err := s.Claim(ctx, "a", until); return err }},
			{"a confirmation", func() error {
				l, err := s.AcquireLease(ctx, "l", time.Minute)
				if err != nil {
					return err
				}
				return s.ConfirmLease(ctx, "l", l.Token, until)
			}},
			{"a Work's commit", func() error {
				_, w, err := s.AcquireWork(ctx, "w", time.Minute, nil)
				if err != nil {
					return err
				}
				return w.Commit(ctx, until, nil, nil)
			}},
			{"a claim in a caller's transaction", func() error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if _, err := s.Claim(sqlitestore.WithTx(ctx, tx), "tx", until); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			}},
		}
		for _, st := range steps {
			before := seq()
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if after := seq(); after <= before {
				t.Errorf("%s left the sequence at %d; want it advanced", st.name, after)
			}
		}
	})
}

// TestWithTxRefusesASequenceGoneBack: a claim in a caller's transaction
// (WithTx) checks the marker's sequence as the store's own transactions
// do: a database whose sequence went back (an older copy) refuses with
// ErrForgotten before the next check, and the claim is not first.
func TestWithTxRefusesASequenceGoneBack(t *testing.T) {
	eachDriver(t, func(t *testing.T, d Driver) {
		ctx := context.Background()
		s, db, _ := readStore(t, d)
		until := time.Now().Add(time.Hour)
		claimAll(t, s, []string{"a", "b", "c"}, until)
		mustExec(t, ctx, db, `UPDATE ctoken_replay SET seq = 0 WHERE key = x'0000'`)
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		defer tx.Rollback()
		if first, err := s.Claim(sqlitestore.WithTx(ctx, tx), "d", until); first || !errors.Is(err, sqlitestore.ErrForgotten) {
			t.Fatalf("Claim in a caller's transaction after the sequence went back = %v, %v; want ErrForgotten", first, err)
		}
	})
}
