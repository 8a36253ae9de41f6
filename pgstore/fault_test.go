package pgstore

// Faults against real servers: a serialization failure, a backend
// terminated mid-statement, replies lost after the commit, a server
// SIGKILLed mid-load and restarted, a paused (SIGSTOPped) server, and a
// 64-client load with a server restart.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// blockKey inserts id's row in an open transaction of its own, so that a
// store's statement on the same key waits for it; finish commits (true) or
// rolls back (false).
func blockKey(t *testing.T, pool *pgxpool.Pool, s *Store, id string) (finish func(commit bool)) {
	t.Helper()
	tx := mustBegin(t, pool)
	mustExec(t, tx, `INSERT INTO `+s.table+` (key, state, token, until) VALUES ($1, 'c', '', now() + interval '1 hour')`, s.key(id))
	return func(commit bool) {
		if commit {
			must(t, tx.Commit(bg()))
			return
		}
		tx.Rollback(bg())
	}
}

// claimResult is what a Claim returned.
type claimResult struct {
	first bool
	err   error
}

// claimAsync runs s's Claim of id on a goroutine of its own and returns
// where its result arrives.
func claimAsync(s *Store, id string, until time.Time) <-chan claimResult {
	done := make(chan claimResult, 1)
	go func() {
		first, err := s.Claim(bg(), id, until)
		done <- claimResult{first, err}
	}()
	return done
}

// refusalErr is the error of a call that must refuse: err, or one saying
// that it accepted.
func refusalErr(accepted bool, err error) error {
	if accepted {
		return errors.New("accepted")
	}
	return err
}

// waitForLockWaiter returns the PID of a backend waiting on a lock.
func waitForLockWaiter(t *testing.T, pool *pgxpool.Pool) (pid int32) {
	t.Helper()
	waitFor(t, 10*time.Second, func() (bool, string) {
		err := pool.QueryRow(bg(), `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH %' LIMIT 1`).Scan(&pid)
		return err == nil, "no statement waiting on the lock"
	})
	return pid
}

// TestFaults pins the steps against server faults.
func TestFaults(t *testing.T) {
	subtests(t, []subtest{
		{"serialization failure fails closed", serializationFailureFailsClosed},
		{"backend terminated mid-statement", terminatedBackendMidStatementFailsClosed},
		{"paused server fails closed within timeout", pausedServerFailsClosedWithinTimeout},
		{"resend after lost reply is safe", resendAfterLostReplyIsSafe},
	})
}

// serializationFailureFailsClosed: with default_transaction_isolation
// serializable, a claim that meets a row committed after its snapshot
// fails with SQLSTATE 40001; the store reports it unavailable, never
// first, and a resend sees the row.
func serializationFailureFailsClosed(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	s := storeOn(t, p.pool(t, "default_transaction_isolation", "serializable"))
	finish := blockKey(t, admin, s, "a")
	done := claimAsync(s, "a", time.Now().Add(time.Minute))
	waitForLockWaiter(t, admin)
	finish(true)
	r := <-done
	if r.first || !errors.Is(r.err, ErrUnavailable) || !strings.Contains(r.err.Error(), "40001") {
		t.Fatalf("Claim after a concurrent commit under serializable = %v, %v; want ErrUnavailable (SQLSTATE 40001)", r.first, r.err)
	}
	if first, err := s.Claim(bg(), "a", time.Now().Add(time.Minute)); first || err != nil {
		t.Fatalf("resend = %v, %v; want false, nil", first, err)
	}
}

// terminatedBackendMidStatementFailsClosed: the backend running a
// claim is killed (pg_terminate_backend) while the claim waits: the store
// reports unavailable, never first, and a resend is decided correctly
// whichever way the other transaction ended.
func terminatedBackendMidStatementFailsClosed(t *testing.T) {
	p := needServer(t)
	admin := p.pool(t)
	s := storeOn(t, p.pool(t))
	for _, commit := range []bool{true, false} {
		id := fmt.Sprint("terminated-", commit)
		finish := blockKey(t, admin, s, id)
		done := claimAsync(s, id, time.Now().Add(time.Minute))
		pid := waitForLockWaiter(t, admin)
		mustExec(t, admin, `SELECT pg_terminate_backend($1)`, pid)
		if r := <-done; r.first || !errors.Is(r.err, ErrUnavailable) {
			t.Fatalf("Claim whose backend was terminated = %v, %v; want ErrUnavailable", r.first, r.err)
		}
		finish(commit)
		// The other transaction committed: the ID is taken. It rolled
		// back: nothing was recorded and the resend is the first claim.
		if f, err := s.Claim(bg(), id, time.Now().Add(time.Minute)); f == commit || err != nil {
			t.Fatalf("resend after the other transaction's commit=%v: first = %v, %v", commit, f, err)
		}
	}
}

// lossyStores returns a proxy that drops replies on request (d.drop), and two
// stores on one table and prefix: s calls through the proxy on one
// connection and gives up after 500 ms; r, straight to the server,
// resends. s rechecks the server only after the test: a recheck on the
// pool's one connection while replies are dropped would hold it, and the
// lost statement would never be sent.
func lossyStores(t *testing.T) (d *cutProxy, s, r *Store) {
	t.Helper()
	p := needServer(t)
	d = newCutProxy(t, "127.0.0.1:"+p.port)
	pool := poolVia(t, p, d.ln.Addr().String(), 1)
	s = storeRetried(t, pool, 5, Options{Prefix: uniquePrefix(), SweepInterval: -1, Timeout: 500 * time.Millisecond, RecheckInterval: time.Hour})
	r = storeOn(t, p.pool(t), func(o *Options) { o.Prefix = s.Prefix() })
	return d, s, r
}

// storeRetried is New(opts) on pool, closed when t ends. New's checks run
// under opts' short Timeout too: on a loaded machine one can exceed it,
// which is not what these tests are about, so New is tried up to tries
// times while it refuses with ErrUnavailable.
func storeRetried(t *testing.T, pool *pgxpool.Pool, tries int, opts Options) *Store {
	t.Helper()
	for try := 1; ; try++ {
		s, err := New(bg(), pool, opts)
		if err == nil {
			t.Cleanup(func() { s.Close() })
			return s
		}
		if try == tries || !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
	}
}

// waitRowState waits until id's live row, read by r (straight to the
// server), is in state want: the effect of a statement whose reply was
// lost.
func waitRowState(t *testing.T, r *Store, id, want string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() (bool, string) {
		var got string
		r.pool.QueryRow(bg(), `SELECT state FROM `+r.table+` WHERE key = $1 AND until > now()`, r.key(id)).Scan(&got)
		return got == want, fmt.Sprintf("row %s in state %q, want %q", id, got, want)
	})
}

// lostReply runs call with the server's replies dropped by d, after warm
// ran the same statement (for a fresh ID) on the lossy store's single
// connection, so that the statement is already prepared and the lost
// reply is the commit's: call must fail with ErrUnavailable and
// context.DeadlineExceeded.
func lostReply(t *testing.T, d *cutProxy, name string, warm func(id string) error, call func() error) {
	t.Helper()
	// A warm-up slower than the store's Timeout on a loaded machine is
	// retried: it only has to succeed once.
	err := warm("warm-" + uniquePrefix())
	for deadline := time.Now().Add(time.Minute); err != nil && time.Now().Before(deadline); {
		err = warm("warm-" + uniquePrefix())
	}
	must(t, err)
	d.drop.Store(true)
	err = call()
	d.drop.Store(false)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s with its reply lost: %v; want ErrUnavailable and DeadlineExceeded", name, err)
	}
}

// resendAfterLostReplyIsSafe: each step's reply is lost after the
// server committed it; the call fails closed, and resending it (a new
// lease for an acquire, the same token for the others) never accepts an ID
// twice.
func resendAfterLostReplyIsSafe(t *testing.T) {
	d, s, r := lossyStores(t)
	until := time.Now().Add(time.Hour)
	acquired := func(id string) (replay.Lease, error) { return s.AcquireLease(bg(), id, time.Minute) }

	lostReply(t, d, "Claim", func(id string) error { return errOf(s.Claim(bg(), id, until)) },
		func() error { return refusalErr(s.Claim(bg(), "claim", until)) })
	waitRowState(t, r, "claim", "c")
	if first, err := r.Claim(bg(), "claim", until); first || err != nil {
		t.Fatalf("resent Claim = %v, %v; want false, nil", first, err)
	}

	lostReply(t, d, "AcquireLease", func(id string) error { return errOf(acquired(id)) }, func() error {
		l, err := s.AcquireLease(bg(), "lease", 2*time.Second)
		return refusalErr(l.State != 0, err)
	})
	waitRowState(t, r, "lease", "l")
	if l, err := r.AcquireLease(bg(), "lease", time.Minute); l.State != replay.LeaseBusy || err != nil {
		t.Fatalf("resent AcquireLease = %+v, %v; want busy until the lost lease ends", l, err)
	}
	var l replay.Lease
	var err error
	for deadline := time.Now().Add(10 * time.Second); l.State != replay.LeaseAcquired; time.Sleep(50 * time.Millisecond) {
		if l, err = r.AcquireLease(bg(), "lease", time.Minute); err != nil || l.State == replay.LeaseDone || time.Now().After(deadline) {
			t.Fatalf("AcquireLease after the lost lease ended = %+v, %v; want acquired once it ends", l, err)
		}
	}

	lostReply(t, d, "ConfirmLease", func(id string) error {
		l, err := acquired(id)
		if err != nil {
			return err
		}
		return s.ConfirmLease(bg(), id, l.Token, until)
	}, func() error { return s.ConfirmLease(bg(), "lease", l.Token, until) })
	waitRowState(t, r, "lease", "d")
	wantIs(t, r.ConfirmLease(bg(), "lease", l.Token, until), nil, "resent ConfirmLease: %v; want nil (its own done row)")
	if l, err := r.AcquireLease(bg(), "lease", time.Minute); l.State != replay.LeaseDone || err != nil {
		t.Fatalf("AcquireLease after the confirmation = %+v, %v; want done", l, err)
	}

	l = mustLease(t, r, "release", time.Minute)
	lostReply(t, d, "ReleaseLease", func(id string) error {
		l, err := acquired(id)
		if err != nil {
			return err
		}
		return s.ReleaseLease(bg(), id, l.Token)
	}, func() error { return s.ReleaseLease(bg(), "release", l.Token) })
	must(t, r.ReleaseLease(bg(), "release", l.Token))
	mustLease(t, r, "release", time.Minute)
}

// pausedServerFailsClosedWithinTimeout: a server that stops answering
// (SIGSTOP on every process: a frozen VM, a stalled disk) turns each call
// into ErrUnavailable within the store's timeout, and a call whose context
// is cancelled returns at once with context.Canceled; when the server
// resumes, claims are decided again. Both ways a call is bounded are
// shown: on a pool with pgx's default context watcher the call runs on the
// caller's goroutine and the driver returns at the deadline ("direct");
// on a pool whose watcher would wait a minute before giving up (a cancel
// request first, then a deadline), the call runs on a goroutine of its
// own and the store stops waiting for it ("own goroutine").
func pausedServerFailsClosedWithinTimeout(t *testing.T) {
	t.Parallel() // a server of its own
	p := ownServer(t)
	const timeout = 500 * time.Millisecond
	patient := p.poolWith(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: time.Minute, DeadlineDelay: time.Minute}
		}
	})
	stores := []struct {
		name   string
		pool   *pgxpool.Pool
		direct bool
		s      *Store
	}{{"direct", p.pool(t), true, nil}, {"own goroutine", patient, false, nil}}
	until := time.Now().Add(time.Hour)
	for i := range stores {
		st := &stores[i]
		st.s = storeRetried(t, st.pool, 21, Options{Prefix: uniquePrefix(), SweepInterval: -1, Timeout: timeout})
		if st.s.direct != st.direct {
			t.Fatalf("%s: Store.direct = %v", st.name, st.s.direct)
		}
		for try := 0; ; try++ { // with the server running, on a loaded machine, within the timeout
			first, err := st.s.Claim(bg(), "before", until)
			if err == nil {
				if !first {
					t.Fatal("first claim of a fresh ID refused")
				}
				break
			}
			if !errors.Is(err, ErrUnavailable) || try == 20 {
				t.Fatal(err)
			}
		}
	}
	// A work's end past a done context, under a negative Timeout: only
	// DefaultTimeout bounds the question whether its transaction was
	// committed (the session cannot answer it, the context being done),
	// on a pool with no connect_timeout, pgx's default.
	unbounded := p.poolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.ConnectTimeout = 0 })
	callers := storeOn(t, unbounded, func(o *Options) { o.Timeout = -1 })
	_, work, err := callers.AcquireWork(bg(), "ending", time.Minute, []byte("fp"))
	must(t, err)
	t.Cleanup(func() { work.Rollback(bg()) }) // when -run skips the subtest below
	p.signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			p.signal(syscall.SIGCONT)
		}
	}()
	type callFunc func(ctx context.Context, s *Store) error
	claim := func(id string) callFunc {
		return func(ctx context.Context, s *Store) error { return refusalErr(s.Claim(ctx, id, until)) }
	}
	calls := []struct {
		name string
		call callFunc
	}{
		{"Claim new", claim("during")},
		{"Claim old", claim("before")},
		{"AcquireLease", func(ctx context.Context, s *Store) error {
			l, err := s.AcquireLease(ctx, "lease", time.Minute)
			return refusalErr(l.State != 0, err)
		}},
	}
	const cancelAfter = 100 * time.Millisecond
	for _, st := range stores {
		for _, c := range calls {
			t.Run(st.name+"/"+c.name+"/deadline", func(t *testing.T) {
				start := time.Now()
				err := c.call(bg(), st.s)
				if took := time.Since(start); took > timeout+time.Second {
					t.Fatalf("took %v on a paused server; want about %v", took, timeout)
				}
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%v on a paused server; want ErrUnavailable and DeadlineExceeded", err)
				}
			})
			t.Run(st.name+"/"+c.name+"/cancelled", func(t *testing.T) {
				ctx, cancel := context.WithCancel(bg())
				stop := time.AfterFunc(cancelAfter, cancel)
				defer stop.Stop()
				start := time.Now()
				err := c.call(ctx, st.s)
				if took := time.Since(start); took >= timeout {
					t.Fatalf("took %v on a paused server, cancelled after %v; want it to return at the cancellation, before the %v timeout", took, cancelAfter, timeout)
				}
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
					t.Fatalf("%v on a paused server, cancelled; want ErrUnavailable and context.Canceled", err)
				}
			})
		}
	}
	t.Run("negative Timeout/Rollback past a done context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(bg())
		cancel()
		ended := make(chan error, 1)
		go func() { ended <- work.Rollback(ctx) }()
		select {
		case err := <-ended:
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Rollback = %v; want ErrUnavailable and DeadlineExceeded (DefaultTimeout)", err)
			}
		case <-time.After(time.Minute): // a hang, not a slow answer
			t.Fatal("Rollback past a done context hangs on a paused server; want DefaultTimeout to bound it")
		}
	})
	p.signal(syscall.SIGCONT)
	resumed = true
	for _, st := range stores {
		waitFor(t, 10*time.Second, func() (bool, string) {
			first, err := st.s.Claim(bg(), "before", until)
			if err == nil && first {
				t.Fatalf("%s: a claim made before the pause is first after it", st.name)
			}
			return err == nil, fmt.Sprintf("%s: claims still failing after the server resumed: %v", st.name, err)
		})
	}
}
