package webhook

import (
	"context"
	"errors"
	"time"

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
// A Lease is used by one goroutine. Its zero value refuses every call with
// [ErrMalformed].
type Lease struct {
	v          *Verifier
	d          Delivery
	key, token string
	deadline   time.Time     // the work should be done by then
	expires    time.Time     // the store frees the delivery by then
	acquired   time.Duration // the store's latency taking the lease, for the observer
}

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
	got, err := p.leaser.AcquireLease(ctx, key, p.lease)
	l, wait, err := v.leaseFrom(d, key, start, got, err)
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
// The [Config.Observer] is told [observe.OutcomeProcessed] when the store
// recorded the delivery, else [observe.OutcomeStoreFailure]; either with
// the position of the secret that verified the delivery and the time spent
// in the store for it: taking the lease ([Verifier.Acquire]) plus
// confirming it, retries included.
func (l *Lease) Confirm(ctx context.Context) error {
	if l == nil || l.v == nil {
		return errLeaseNotAcquired
	}
	start := time.Now()
	err := l.confirm(ctx)
	if p := l.v.p; p.obs != nil {
		p.report(observe.OutcomeProcessed, l.d.key, err, l.acquired+max(time.Since(start), 1))
	}
	return err
}

// confirm is Confirm.
func (l *Lease) confirm(ctx context.Context) error {
	p := l.v.p
	until := p.holdUntil(&l.d)
	giveUp := l.expires
	if late := time.Now().Add(p.lease / 4); late.After(giveUp) {
		giveUp = late
	}
	ctx, cancel := context.WithDeadline(ctx, giveUp)
	defer cancel()
	failed := func(err error) error {
		return reason.Wrap(ErrReplayStore, "replay store could not confirm the delivery", err)
	}
	wait := 10 * time.Millisecond
	for {
		err := p.leaser.ConfirmLease(ctx, l.key, l.token, until)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, replay.ErrLeaseLost):
			return reason.Wrap(ErrReplayStore, "lease lost: another attempt took the delivery after the lease expired", err)
		case errors.Is(err, replay.ErrExpired), errors.Is(err, replay.ErrConfig),
			ctx.Err() != nil, time.Now().Add(wait).After(giveUp):
			return failed(err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return failed(err)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// Release gives the delivery up after its processing failed, so that the
// sender's retry is processed at once rather than refused with
// [ErrInProgress] until the lease expires. It frees the delivery only while
// this lease holds it, and waits at most a quarter of [Config.Lease] for
// the store. A store failure matches [ErrReplayStore] and the store's
// error; the lease then ends by itself at [Lease.Expires].
//
// The [Config.Observer] is told only of a failure
// ([observe.OutcomeStoreFailure], with the store's latency): a released
// delivery is neither processed nor refused, and its retry is reported
// when it arrives.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil || l.v == nil {
		return errLeaseNotAcquired
	}
	p := l.v.p
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.lease/4)
	defer cancel()
	if err := p.leaser.ReleaseLease(ctx, l.key, l.token); err != nil {
		err = reason.Wrap(ErrReplayStore, "replay store could not release the delivery", err)
		if p.obs != nil {
			p.report(observe.OutcomeStoreFailure, l.d.key, err, max(time.Since(start), 1))
		}
		return err
	}
	return nil
}

// errStoreAnswer is a store answer outside the [replay.Leaser] contract.
var errStoreAnswer = errors.New("replay store answered outside the Leaser contract")
