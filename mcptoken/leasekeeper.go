package mcptoken

// The one lease keeper of rounds, tasks and idempotent calls: it renews a
// lease while work runs and gives the work up before the store could find
// the lease lapsed.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// keptLease is a lease to keep while work runs.
type keptLease struct {
	renewer   replay.Renewer
	id, token string
	// hold is the lease each renewal asks for; it is renewed every third
	// of it.
	hold time.Duration
	// held is when the call that took the lease was sent: the store's
	// lease began no earlier.
	held time.Time
	// end, when set, is when the work must end anyway: no renewal asks
	// for a lease past it.
	end time.Time
	// lost is called once, when the lease is lost: the store refused a
	// renewal (the error matches replay.ErrLeaseLost), or no renewal was
	// accepted within five sixths of the hold by this process's clock.
	lost func(err error)
	// retrying is called for a renewal that failed while the lease is
	// still surely held; nil: not told.
	retrying func(err error)
}

// keep renews l every third of its hold, from its own goroutine, until
// ctx ends or stop is called. The lease counts as lost once five sixths of
// the hold have passed since the last renewal the store accepted was sent:
// the store's lease began no earlier than that send, so by a clock that
// runs at the same rate it is lost before the store can find it lapsed and
// give it to another caller. stop returns once the renewals have stopped,
// with the time the last accepted one was sent (l.held if none was): the
// lease lasts until then plus the hold at least, unless it was lost. A
// lease granted five sixths of its hold or more after it was taken is
// lost before keep returns.
func keep(ctx context.Context, l keptLease) (stop func() (held time.Time)) {
	if !time.Now().Before(l.held.Add(l.hold - l.hold/6)) {
		// Granted so late that it may lapse before a renewal: lost
		// before the work begins.
		l.lost(errors.New("mcptoken: the lease was granted too late to be kept"))
		return func() time.Time { return l.held }
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	held := l.held
	// Nothing runs before the first renewal is due, a third of the hold
	// after the lease was taken (at once when the store's answer came
	// that late): most work ends before, and costs a timer only.
	first := time.AfterFunc(time.Until(l.held.Add(l.hold/3)), func() {
		defer close(stopped)
		held = l.run(ctx)
	})
	return func() time.Time {
		cancel()
		if first.Stop() {
			return l.held // never started
		}
		<-stopped
		return held
	}
}

// run is keep's loop, until ctx ends; it returns when the last accepted
// renewal was sent.
func (l keptLease) run(ctx context.Context) (held time.Time) {
	held = l.held
	margin := l.hold / 6
	heldUntil := l.held.Add(l.hold - margin)
	expire := time.NewTimer(time.Until(heldUntil))
	defer expire.Stop()
	tick := time.NewTicker(l.hold / 3)
	defer tick.Stop()
	for first := true; ; first = false {
		if !first { // the first renewal is due when run starts
			select {
			case <-ctx.Done():
				return held
			case <-expire.C:
				l.lost(errors.New("mcptoken: no renewal of the lease reached the store in time"))
				return held
			case <-tick.C:
			}
		}
		lease := l.hold
		if !l.end.IsZero() {
			lease = min(lease, time.Until(l.end))
		}
		if lease <= 0 {
			continue // the work ends by itself before the lease does
		}
		sent := time.Now()
		deadline := sent.Add(l.hold / 3)
		if heldUntil.Before(deadline) {
			deadline = heldUntil
		}
		// Deadline-only, so that a store whose client enforces deadlines
		// runs it on this goroutine; stop waits for it (a third of the
		// hold at most).
		rctx, cancel := replay.WithDeadlineOnly(ctx, deadline)
		err := l.renewer.RenewLease(rctx, l.id, l.token, lease)
		cancel()
		switch {
		case ctx.Err() != nil:
			return held // stopped: the work has returned
		case err == nil:
			// A lease cut short by end outlives the work all the same:
			// the work ends by end.
			held, heldUntil = sent, sent.Add(l.hold-margin)
			expire.Reset(time.Until(heldUntil))
		case errors.Is(err, replay.ErrLeaseLost):
			l.lost(err)
			return held
		case !time.Now().Before(heldUntil):
			l.lost(fmt.Errorf("mcptoken: no renewal of the lease reached the store in time: %w", err))
			return held
		case l.retrying != nil:
			l.retrying(err)
		}
	}
}

// errServerEnded is what every cause of a context ctoken ends itself
// matches: a lease or hold it could not keep, a time limit of its own, a
// drain. The caller's cancellation (a client's tasks/cancel) never does.
var errServerEnded = errors.New("mcptoken: the server ended the tool's context")

// serverCause is the cause of a context ctoken ends itself for why: it
// matches errServerEnded and why.
func serverCause(why error) error { return fmt.Errorf("%w: %w", errServerEnded, why) }

// stoppedByServer reports whether err, the error of work whose context is
// ctx, is that context's end, caused by ctoken itself: the work honoured
// an end it did not ask for, which is never its failure.
func stoppedByServer(ctx context.Context, err error) bool {
	cause := context.Cause(ctx)
	if err == nil || cause == nil || !errors.Is(cause, errServerEnded) {
		return false
	}
	return errors.Is(err, ctx.Err()) || errors.Is(err, cause)
}

// stoppedError is the error of a tool that returned the end of a context
// ctoken ended itself (with cause): nothing is recorded and the key is
// released, and, as for [ErrNoEffect] (which it matches), the client is
// told to retry under the same key, which runs the tool.
type stoppedError struct{ err, cause error }

func (e *stoppedError) Error() string {
	return e.cause.Error() + "; the tool returned that end: nothing recorded, the key released: " + e.err.Error()
}

// Unwrap returns ErrNoEffect, the cause, and the tool's own error, never
// a [*Failure] it was wrapped in: it is not recorded.
func (e *stoppedError) Unwrap() []error {
	err := e.err
	var f *Failure
	if errors.As(err, &f) && f.Err != nil {
		err = f.Err
	}
	return []error{ErrNoEffect, e.cause, err}
}

// detachedKey marks a context made by detach.
type detachedKey struct{}

// detach returns a context with ctx's values but not its cancellation, for
// work that must not stop when the client goes away (it may already have
// acted), unless ctx is itself one (a round's or a task's): its
// cancellation is then a lost lease or a cancel, which must reach the work
// it runs, an idempotent call included.
func detach(ctx context.Context) context.Context {
	if ctx.Value(detachedKey{}) != nil {
		return ctx
	}
	return context.WithValue(context.WithoutCancel(ctx), detachedKey{}, true)
}
