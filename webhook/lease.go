package webhook

import (
	"context"
	"errors"
	"time"

	"github.com/ctoken/ctoken/internal/confirm"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// Lease is an authentic delivery held "in progress" in the replay store,
// from [Verifier.Acquire]: while it is live, every other copy of the
// delivery (a sender's retry, here or on another instance) is refused with
// [ErrInProgress]. Finish with [Lease.Confirm] when the delivery was
// processed, or [Lease.Release] when processing failed and the sender's
// retry must run it again. A lease that is neither (the process died, the
// store could not be reached) ends by itself at [Lease.Expires], and the
// delivery can then be processed again: an unknown outcome becomes a retry,
// never an acknowledged delivery that was not processed.
//
// With a store that implements [replay.Transactor] (the pgstore and
// sqlitestore modules),
// [Lease.Begin] opens a transaction for the work: Confirm then commits the
// work's writes in the same transaction that records the delivery, and
// Release rolls them back, so the writes are kept exactly when the
// delivery is recorded as processed.
//
// Under [Config.Transactional] with a store that also implements
// [replay.WorkAcquirer] (pgstore, sqlitestore), the lease is that
// transaction ([replay.WorkAcquirer.AcquireWork]): Acquire opens it,
// taking the delivery with a lock the transaction holds, and commits
// nothing; Begin returns it; Confirm commits the work and the delivery's
// record together, one durable commit for the delivery; Release rolls it
// back, which frees the delivery. Other copies are refused with
// [ErrInProgress] meanwhile, by this Verifier and by any other on the
// same store, with or without Transactional. Such a lease holds a store
// connection from Acquire on: end every one with Confirm or Release. It
// ends by itself, with nothing kept, when the holder's connection or
// process dies (the delivery is then free at once, not at
// [Lease.Expires]), and once [Config.Lease] has passed since Acquire:
// Confirm then fails, keeping nothing, with [replay.ErrLeaseLost], or
// with [replay.ErrRolledBack] when the store ended the transaction after
// it sat idle that long.
//
// A Lease is used by one goroutine. Its zero value refuses every call with
// [ErrMalformed].
type Lease struct {
	v          *Verifier
	d          Delivery
	key, token string
	deadline   time.Time     // the work should be done by then
	expires    time.Time     // the store frees the delivery by then
	acquired   time.Duration // the store's latency taking the lease (and beginning the work), for the observer

	ended    bool        // Confirm or Release was called
	begun    bool        // Begin returned the work's context
	held     bool        // the lease is work, from AcquireWork: no committed lease entry
	work     replay.Work // the transaction Begin (or, held, Acquire) opened; nil without one
	workDone workState   // how the work ended
	workErr  error       // Confirm's result, once it ended the work
}

// workState is how a Lease's work ended.
type workState uint8

const (
	workOpen       workState = iota // begun, not ended (or never begun)
	workCommitting                  // Confirm asked the store to commit
	workRolledBack                  // Release rolled it back
)

// Acquire takes the lease on an authentic delivery d (from
// [Verifier.Verify]) for [Config.Lease]. It returns:
//   - a Lease when d is to be processed now;
//   - an error matching [ErrDuplicate] when d was already processed
//     (acknowledge it, 2xx);
//   - an error matching [ErrInProgress] when another attempt holds d's lease
//     (refuse it so the sender retries later);
//   - an error matching [ErrReplayStore] and the store's error when the
//     store cannot decide (refuse it; if the lease was taken anyway, it ends
//     by itself within [Config.Lease]);
//   - [ErrMalformed] for a Delivery not from Verify.
//
// Which deliveries count as one is set by [Config.Dedup]; each delivery
// takes one store entry.
//
// Under [Config.Transactional] with a store that implements
// [replay.WorkAcquirer], the returned Lease holds the work's open
// transaction, and a store connection with it (see [Lease]): end it with
// [Lease.Confirm] or [Lease.Release].
//
// The [Config.Observer] is told of every call but a successful one (whose
// store latency is reported with [observe.OutcomeProcessed] by
// [Lease.Confirm]): [observe.OutcomeDuplicate], [observe.OutcomeInProgress]
// or [observe.OutcomeStoreFailure] with the store's latency and the
// position of the secret that verified d, or [observe.OutcomeRefused] for a
// Delivery not from Verify.
func (v *Verifier) Acquire(ctx context.Context, d Delivery) (*Lease, error) {
	l, _, err := v.acquire(ctx, d)
	return l, err
}

// acquire is Acquire, also returning for ErrInProgress how long the other
// attempt's lease still runs (zero when unknown).
func (v *Verifier) acquire(ctx context.Context, d Delivery) (*Lease, time.Duration, error) {
	if v == nil || v.p == nil {
		return nil, 0, errZeroVerifier
	}
	p := v.p
	if !d.verified || checkID(d.ID, p.scheme.forbidsDot()) != nil {
		if p.obs != nil {
			p.report(observe.OutcomeRefused, observe.KeyNone, errNotVerified, 0)
		}
		return nil, 0, errNotVerified
	}
	start := time.Now()
	key := p.storeKey(&d)
	var l *Lease
	var wait time.Duration
	var err error
	if p.acquirer != nil {
		l, wait, err = v.acquireWork(ctx, d, key, start)
	} else {
		got, aerr := p.leaser.AcquireLease(ctx, key, p.lease)
		l, wait, err = v.leaseFrom(d, key, start, got, aerr)
	}
	if p.obs != nil {
		took := max(time.Since(start), 1) // a store was called: never 0
		if err == nil {
			l.acquired = took
		} else {
			p.report(observe.OutcomeRefused, d.key, err, took)
		}
	}
	return l, wait, err
}

// acquireWork is acquire's store call under Config.Transactional on a
// WorkAcquirer: the lease is the work's transaction. Every copy of a
// delivery asks with the same (empty) fingerprint: a holder is always
// reported busy, never a different request.
func (v *Verifier) acquireWork(ctx context.Context, d Delivery, key string, start time.Time) (*Lease, time.Duration, error) {
	rec, w, err := v.p.acquirer.AcquireWork(ctx, key, v.p.lease, nil)
	if w != nil && (err != nil || rec.State != replay.LeaseAcquired || rec.Token == "") {
		// Outside the contract: hold nothing.
		rctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(v.p.lease/4))
		w.Rollback(rctx)
		cancel()
		w = nil
		if err == nil {
			err = errStoreAnswer
		}
	}
	if err == nil && rec.State == replay.LeaseAcquired && w == nil {
		err = errStoreAnswer
	}
	l, wait, err := v.leaseFrom(d, key, start, rec.Lease, err)
	if l != nil {
		l.work, l.held = w, true
	}
	return l, wait, err
}

// leaseFrom turns the store's answer to AcquireLease into acquire's
// results.
func (v *Verifier) leaseFrom(d Delivery, key string, start time.Time, got replay.Lease, err error) (*Lease, time.Duration, error) {
	p := v.p
	if err != nil {
		return nil, 0, storeError(err)
	}
	switch got.State {
	case replay.LeaseAcquired:
		if got.Token == "" {
			break
		}
		return &Lease{
			v: v, d: d, key: key, token: got.Token,
			deadline: start.Add(p.lease / 4 * 3),
			expires:  start.Add(p.lease),
		}, 0, nil
	case replay.LeaseBusy:
		return nil, min(max(got.Wait, 0), p.lease), errBusy
	case replay.LeaseDone:
		return nil, 0, errDup
	}
	return nil, 0, storeError(errStoreAnswer)
}

// Delivery returns the delivery the lease holds.
func (l *Lease) Delivery() Delivery {
	if l == nil {
		return Delivery{}
	}
	return l.d
}

// Deadline is when the work on the delivery should be done: three quarters
// of [Config.Lease] after Acquire was called, leaving the last quarter to
// confirm it. [Verifier.Middleware] gives the handler a context with this
// deadline.
func (l *Lease) Deadline() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.deadline
}

// Expires is the latest time the lease may end: [Config.Lease] after
// Acquire was called (the store measures it from when it took the lease,
// which is no earlier). After it, another attempt may process the delivery.
func (l *Lease) Expires() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.expires
}

// Begin opens a transaction of the replay store for the work on the
// delivery and returns ctx carrying it, where the store's accessor finds
// it (pgstore.TxFrom): make the work's writes in that transaction, then
// finish the lease as usual. [Lease.Confirm] commits the writes in the
// same transaction that records the delivery as processed: either both
// are kept or neither is, whatever happens meanwhile (a lease that ran out
// and was taken by another attempt, a process killed before the commit).
// [Lease.Release] rolls the writes back and frees the delivery. Once the
// lease has ended, the transaction refuses every statement, so writes that
// outlive it (a goroutine still running after a timeout) are never kept.
//
// Under [Config.Transactional] with a [replay.WorkAcquirer] store,
// Begin returns the transaction Acquire opened and calls no store.
//
// Begin does not change the lease: other copies of the delivery stay
// refused with [ErrInProgress] while the work runs, and the work should
// still be done by [Lease.Deadline]. The returned context has ctx's
// deadline; bound the work with one of your own. The transaction holds a
// resource of the store (a pgstore connection) until Confirm or Release:
// end every lease whose work was begun (a deferred Release does).
//
// It returns an error matching [ErrConfig] when the [Config.Replay] store
// does not implement [replay.Transactor], or when called a second time or
// after Confirm or Release; one matching [ErrReplayStore] and the store's
// error when the store could not open the transaction (no transaction is
// open then; release the lease, or let it end). [ErrMalformed] for a Lease
// not from [Verifier.Acquire].
//
// The [Config.Observer] is told only of a store failure
// ([observe.OutcomeStoreFailure], with the store's latency); a begun
// transaction's latency is reported with the outcome of Confirm.
func (l *Lease) Begin(ctx context.Context) (context.Context, error) {
	if l == nil || l.v == nil {
		return ctx, errLeaseNotAcquired
	}
	p := l.v.p
	if p.transactor == nil {
		return ctx, errNotTransactor
	}
	if l.ended || l.begun {
		return ctx, errBeginTwice
	}
	if l.held {
		// Acquire opened the work, holding the lease.
		l.begun = true
		return l.work.Context(ctx), nil
	}
	start := time.Now()
	w, err := p.transactor.BeginWork(ctx, l.key, l.token)
	took := max(time.Since(start), 1)
	if err == nil && w == nil {
		err = errStoreAnswer
	}
	if err != nil {
		err = storeError(err)
		if p.obs != nil {
			p.report(observe.OutcomeStoreFailure, l.d.key, err, l.acquired+took)
		}
		return ctx, err
	}
	l.work, l.begun = w, true
	l.acquired += took
	return w.Context(ctx), nil
}

// Confirm records the delivery as processed, so that every later copy is a
// [ErrDuplicate], for the dedup window (and, for a delivery with a signed
// timestamp, at least [replay.SkewMargin] past the last instant the
// timestamp check accepts it). When the store fails it retries, with
// backoff, until ctx is done or the lease expires — or, when called that
// late, for a quarter of [Config.Lease]: a confirmation after the lease
// expired still succeeds if no other attempt has taken the delivery.
//
// An error matches [ErrReplayStore] and the store's last error: with
// [replay.ErrLeaseLost], the lease had expired and another attempt took the
// delivery (the work ran twice — finish the work by [Lease.Deadline]);
// otherwise the store did not record the outcome, and after the lease
// expires a copy of the delivery would be processed again.
//
// After [Lease.Begin], or on a lease that is the work's transaction (see
// [Lease]), Confirm commits the work's writes with the record, once,
// without retrying: nil means both were committed. An error matching
// [replay.ErrLeaseLost] means neither was: the lease had run out, whether
// or not another attempt took the delivery since, and the transaction was
// rolled back (unlike a Confirm without a work, which still succeeds
// late while no other attempt holds the delivery). An error matching
// [replay.ErrRolledBack] means the store rolled the work back for a
// reason it knows (a statement of the work had failed): nothing was
// kept, and Confirm has released the lease, so the sender's retry
// processes the delivery at once. Any other
// store error leaves the outcome unknown — the commit may have happened:
// do not report the work as done, and let the sender retry, which finds
// the delivery either processed or, once the lease ends, free; Release
// does nothing then. A Confirm after Release returns an error matching
// [ErrConfig] and commits nothing; a second Confirm returns the first
// one's result.
//
// The [Config.Observer] is told [observe.OutcomeProcessed] when the store
// recorded the delivery, else [observe.OutcomeStoreFailure]; either with
// the position of the secret that verified the delivery and the time spent
// in the store for it: taking the lease ([Verifier.Acquire]) plus
// beginning the work, if any, plus confirming it, retries included.
func (l *Lease) Confirm(ctx context.Context) error {
	if l == nil || l.v == nil {
		return errLeaseNotAcquired
	}
	l.ended = true
	if l.work != nil {
		switch l.workDone {
		case workRolledBack:
			return errConfirmReleased
		case workCommitting:
			return l.workErr
		}
	}
	start := time.Now()
	var err error
	if l.work != nil {
		l.workDone = workCommitting
		err = l.commit(ctx)
		l.workErr = err
	} else {
		err = l.confirm(ctx)
	}
	if p := l.v.p; p.obs != nil {
		p.report(observe.OutcomeProcessed, l.d.key, err, l.acquired+max(time.Since(start), 1))
	}
	return err
}

// confirmDeadline is when Confirm gives up: when the lease expires or,
// when called that late, a quarter of the lease from now.
func (l *Lease) confirmDeadline() time.Time {
	return confirm.Deadline(l.expires, l.v.p.lease)
}

// errConfirmFailed wraps a store error of a confirmation whose outcome is
// not recorded (or, for the work, unknown).
func errConfirmFailed(err error) error {
	return reason.Wrap(ErrReplayStore, "replay store could not confirm the delivery", err)
}

// errLost wraps a [replay.ErrLeaseLost] of a confirmation.
func errLost(err error) error {
	return reason.Wrap(ErrReplayStore, "lease lost: another attempt took the delivery after the lease expired", err)
}

// commit is Confirm with a work begun: one commit of the work and the
// record together. A retry could not help: the first call to Commit ends
// the work whatever its outcome.
func (l *Lease) commit(ctx context.Context) error {
	ctx, cancel := context.WithDeadline(ctx, l.confirmDeadline())
	defer cancel()
	err := l.work.Commit(ctx, l.v.p.holdUntil(&l.d), nil, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, replay.ErrLeaseLost):
		return errLost(err)
	case errors.Is(err, replay.ErrRolledBack):
		// Nothing was kept (a statement of the work had failed): the
		// lease is released, so the sender's retry processes the delivery
		// at once instead of waiting out the lease. A failed release
		// leaves the lease to end by itself.
		// A held lease ended with its transaction: nothing to release.
		if !l.held {
			rctx, rcancel := replay.WithDeadlineOnly(ctx, time.Now().Add(l.v.p.lease/4))
			l.v.p.leaser.ReleaseLease(rctx, l.key, l.token)
			rcancel()
		}
	}
	return errConfirmFailed(err)
}

// confirm is Confirm without a work.
func (l *Lease) confirm(ctx context.Context) error {
	p := l.v.p
	until := p.holdUntil(&l.d)
	giveUp := l.confirmDeadline()
	var cancel context.CancelFunc
	if ctx.Done() == nil {
		// Nothing but giveUp ends the confirmation (the middleware's
		// case): a store whose client enforces the deadline itself needs
		// no goroutine to watch for a cancellation.
		ctx, cancel = replay.WithDeadlineOnly(ctx, giveUp)
	} else {
		ctx, cancel = context.WithDeadline(ctx, giveUp)
	}
	defer cancel()
	err := confirm.Retry(ctx, func(ctx context.Context) error {
		return p.leaser.ConfirmLease(ctx, l.key, l.token, until)
	}, replay.ErrLeaseLost, replay.ErrExpired, replay.ErrConfig)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, replay.ErrLeaseLost):
		return errLost(err)
	}
	return errConfirmFailed(err)
}

// Release gives the delivery up after its processing failed, so that the
// sender's retry is processed at once rather than refused with
// [ErrInProgress] until the lease expires. It frees the delivery only while
// this lease holds it, and waits at most a quarter of [Config.Lease] for
// the store. A store failure matches [ErrReplayStore] and the store's
// error; the lease then ends by itself at [Lease.Expires].
//
// After [Lease.Begin], Release first rolls the work's writes back (for a
// lease that is the work's transaction, see [Lease], that alone frees
// the delivery). Once
// Confirm was called on a begun work, Release does nothing and returns nil
// (the work's outcome is Confirm's, and a release after an unknown outcome
// could let a copy run while the commit still lands), so a deferred
// Release is safe; so is a second Release.
//
// The [Config.Observer] is told only of a failure
// ([observe.OutcomeStoreFailure], with the store's latency): a released
// delivery is neither processed nor refused, and its retry is reported
// when it arrives.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil || l.v == nil {
		return errLeaseNotAcquired
	}
	l.ended = true
	if l.work != nil && l.workDone != workOpen {
		return nil
	}
	p := l.v.p
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.lease/4)
	defer cancel()
	var rollback error
	if l.work != nil {
		l.workDone = workRolledBack
		rollback = l.work.Rollback(ctx)
	}
	// The lease is released even when the rollback failed: a transaction
	// that could not be rolled back is never committed either. A held
	// lease is the transaction's: its end released it.
	err := rollback
	if !l.held {
		if err = p.leaser.ReleaseLease(ctx, l.key, l.token); err == nil {
			err = rollback
		}
	}
	if err != nil {
		err = reason.Wrap(ErrReplayStore, "replay store could not release the delivery", err)
		if p.obs != nil {
			p.report(observe.OutcomeStoreFailure, l.d.key, err, max(time.Since(start), 1))
		}
		return err
	}
	return nil
}

// Misuses of [Lease.Begin] and [Lease.Confirm] (configuration errors: a
// program that hits one is wrong whatever the delivery).
var (
	errNotTransactor   = reason.New(ErrConfig, "Replay store does not implement replay.Transactor, which Lease.Begin and Config.Transactional need")
	errBeginTwice      = reason.New(ErrConfig, "Lease.Begin called twice, or after Confirm or Release")
	errConfirmReleased = reason.New(ErrConfig, "Lease.Confirm after Release rolled the work back")
	errSignerTx        = reason.New(ErrConfig, "Transactional has no effect on a Signer")
)

// errStoreAnswer is a store answer outside the [replay.Leaser] contract.
var errStoreAnswer = errors.New("replay store answered outside the Leaser contract")
