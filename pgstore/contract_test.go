package pgstore

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

func TestLeaseContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunLeaseContract(t, func(t *testing.T) replaytest.Store { return storeOn(t, pool) })
}

// TestForgetContract: the table loses everything (TRUNCATE, DELETE, or
// dropped); no ID claimed, confirmed or leased before is accepted again.
// For PostgreSQL a crash does not forget (TestCrashMidLoadLosesNoAcknowledgedClaim);
// these are an operator's acts.
func TestForgetContract(t *testing.T) {
	for _, forget := range []string{"TRUNCATE", "DELETE FROM", "DROP TABLE"} {
		t.Run(forget, func(t *testing.T) {
			t.Parallel() // a table of its own
			p := needServer(t)
			pool := p.pool(t)
			name := uniqueTable(t, pool)
			if err := Migrate(bg(), pool, name); err != nil {
				t.Fatal(err)
			}
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

// TestDurabilityContractStoppedSynchronousStandby: the synchronous standby
// stops answering (SIGSTOP), so no commit can be made as durable as the
// server requires: every step fails closed with ErrUnavailable at the
// store's timeout (the primary may have committed it locally), and resends
// after the standby resumes never accept an ID twice.
func TestDurabilityContractStoppedSynchronousStandby(t *testing.T) {
	t.Parallel() // servers of its own
	primary, standby := syncPair(t)
	s := storeOn(t, primary.pool(t), func(o *Options) { o.Timeout = time.Second; o.RequireSynchronousStandby = true })
	stopped := false
	t.Cleanup(func() {
		if stopped {
			standby.signal(syscall.SIGCONT)
		}
	})
	replaytest.RunDurabilityContract(t, unavailableOnly{t, s},
		func(t *testing.T) { standby.signal(syscall.SIGSTOP); stopped = true },
		func(t *testing.T) { standby.signal(syscall.SIGCONT); stopped = false })
}

// unavailableOnly fails the test when a step returns an error other than
// ErrUnavailable (or, for a confirmation, replay.ErrLeaseLost).
type unavailableOnly struct {
	t *testing.T
	*Store
}

func (u unavailableOnly) check(err error) error {
	if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, replay.ErrLeaseLost) {
		u.t.Errorf("error %v matches neither ErrUnavailable nor replay.ErrLeaseLost", err)
	}
	return err
}

func (u unavailableOnly) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	first, err := u.Store.Claim(ctx, id, until)
	return first, u.check(err)
}

func (u unavailableOnly) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	l, err := u.Store.AcquireLease(ctx, id, lease)
	return l, u.check(err)
}

func (u unavailableOnly) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	return u.check(u.Store.ConfirmLease(ctx, id, token, until))
}

// TestRequestStateContract: no refusal (caller, tool, arguments, audience)
// consumes a single-use request state held in PostgreSQL; the right request
// opens it afterwards exactly once (replaytest.RunRequestStateContract).
func TestRequestStateContract(t *testing.T) {
	p := needServer(t)
	pool := p.pool(t)
	replaytest.RunRequestStateContract(t, func(t *testing.T) replay.Store { return storeOn(t, pool) })
}
