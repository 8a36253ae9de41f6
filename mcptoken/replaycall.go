package mcptoken

// The record/replay engine of idempotent tool calls: the store protocol
// alone (lease and record, compare the fingerprint, wait, confirm with
// retries, release on failure, transactional commit), with no MCP types.
// [Idempotency] drives it for a tools/call; anything else that must run a
// piece of work at most once and answer its retries with the first result
// can drive it the same way.

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ctoken/ctoken/internal/confirm"
	"github.com/ctoken/ctoken/replay"
)

// Polling of a busy ID in wait mode: the first poll after
// engineFirstPoll, each next one after twice the last, at most
// engineMaxPoll (as the idempotency middleware polls).
const (
	engineFirstPoll = 10 * time.Millisecond
	engineMaxPoll   = 250 * time.Millisecond
)

// defaultBusyRetryAfter is the retry hint of a busy ID: a second, or less
// when the holder's lease ends sooner.
const defaultBusyRetryAfter = time.Second

// notRecorded is the record of a result that was not stored (over
// [replay.MaxResultBytes], or refused by the store for its size or its
// byte budget): a few bytes no result begins with (results are JSON
// objects), so that the work is done and its retries are told so rather
// than run it again.
var notRecorded = []byte("\x00ctoken: result not recorded")

// failurePrefix begins the record of a work that began and failed (a
// [Failure]): a byte no result begins with, then the Failure's Record.
const failurePrefix = 0x01

// engine runs work at most once per ID and answers its retries with the
// first result. It is safe for concurrent use; its fields are not
// changed after it is built.
type engine struct {
	store replay.Recorder
	tx    replay.Transactor // nil unless the work runs in the store's transaction
	// renew renews the lease while the work runs; nil when the store
	// cannot, or when the work runs in a transaction (which holds it).
	renew replay.Renewer
	// acq is tx when it takes the lease in the work's transaction
	// (replay.WorkAcquirer: one durable commit per call); else nil.
	acq   replay.WorkAcquirer
	lease time.Duration
	// window is how long a done ID keeps its result.
	window time.Duration
	// wait is how long a busy ID is waited for; 0 answers busy at once.
	wait time.Duration
	name string // begins every log message
	log  *slog.Logger
	// seal, when set, seals every record and opens it before a replay
	// (recordseal.go); nil records results in clear.
	seal *recordSealer
}

// errors of the engine, wrapped by its users.
var (
	// errBusy: the same work holds the ID; retry later (busyError says when).
	errBusy = errors.New("in progress")
	// errFingerprint: the ID was taken by other work (another fingerprint).
	errFingerprint = errors.New("fingerprint differs")
	// errEngineStore: the store could not answer, or answered outside the
	// Recorder contract; nothing was run.
	errEngineStore = errors.New("store failed")
	// errUnknownOutcome: the work ran but its transaction's commit has an
	// unknown outcome: its result is not sent (unknownError says when a
	// retry can learn it).
	errUnknownOutcome = errors.New("outcome unknown")
	// errNoResult: the ID is done without a result this engine can
	// replay (recorded as not stored, or taken by something else).
	errNoResult = errors.New("done without a replayable result")
)

// busyError is errBusy with the retry hint.
type busyError struct{ retryAfter time.Duration }

func (e *busyError) Error() string { return errBusy.Error() }
func (e *busyError) Unwrap() error { return errBusy }

// unknownError is errUnknownOutcome with the commit's error and the
// retry hint: when the store can tell whether the commit happened.
type unknownError struct {
	retryAfter time.Duration
	err        error
}

func (e *unknownError) Error() string   { return errUnknownOutcome.Error() + ": " + e.err.Error() }
func (e *unknownError) Unwrap() []error { return []error{errUnknownOutcome, e.err} }

// runFunc runs the work with ctx (which carries the store's transaction
// for a transactional engine) and returns its result, the bytes recorded
// and replayed, or an error: a [*Failure] is recorded (rolled back and
// the ID released in a transactional engine), any other records nothing
// and releases the ID.
type runFunc func(ctx context.Context) ([]byte, error)

// do runs run under id unless id is done, busy or another fingerprint's:
// it returns the result run returned, recorded (the first call), or the
// recorded one (a retry, replayed true). A ctx that has ended runs
// nothing and asks the store nothing. ctx's values reach run, but not the
// client's cancellation, since a caller that goes away does not undo work
// that may have taken effect: run ends when its lease cannot be kept (see
// run).
func (e *engine) do(ctx context.Context, id string, fp []byte, run runFunc) (result []byte, replayed bool, err error) {
	if err := ctx.Err(); err != nil {
		// The caller went away before the store was asked: nothing is
		// taken and nothing runs, whatever the store would do with ctx.
		return nil, false, fmt.Errorf("%w: %w", errEngineStore, err)
	}
	start := time.Now()
	pause := engineFirstPoll
	for {
		acquiredAt := time.Now()
		var rec replay.Record
		var held replay.Work // the Work holding the lease, from AcquireWork
		if e.acq != nil {
			rec, held, err = e.acq.AcquireWork(ctx, id, e.lease, fp)
			if held != nil && (err != nil || rec.State != replay.LeaseAcquired) {
				e.rollback(ctx, held) // outside the contract: hold nothing
				held = nil
			}
		} else {
			rec, err = e.store.AcquireRecord(ctx, id, e.lease, fp)
		}
		if err != nil {
			return nil, false, fmt.Errorf("%w: %w", errEngineStore, err)
		}
		switch rec.State {
		case replay.LeaseAcquired:
			if rec.Token == "" || e.acq != nil && held == nil {
				break
			}
			res, err := e.run(ctx, id, rec.Token, fp, acquiredAt, held, run)
			return res, false, err
		case replay.LeaseDone:
			if len(rec.Result) == 0 || len(rec.Fingerprint) == 0 {
				return nil, false, errNoResult
			}
			if !sameFingerprint(rec.Fingerprint, fp) {
				return nil, false, errFingerprint
			}
			res := rec.Result
			if e.seal != nil {
				if res, err = e.seal.open(id, fp, rec.Result); err != nil {
					return nil, false, err
				}
			}
			if bytes.Equal(res, notRecorded) { // a marker, not a secret
				return nil, false, errNoResult
			}
			if len(res) > 0 && res[0] == failurePrefix {
				return nil, true, &Failure{Record: res[1:], recorded: true}
			}
			return res, true, nil
		case replay.LeaseBusy:
			if len(rec.Fingerprint) > 0 && !sameFingerprint(rec.Fingerprint, fp) {
				return nil, false, errFingerprint
			}
			left := time.Until(start.Add(e.wait))
			if left <= 0 {
				hint := defaultBusyRetryAfter
				if rec.Wait > 0 && rec.Wait < hint {
					hint = rec.Wait
				}
				return nil, false, &busyError{retryAfter: hint}
			}
			t := time.NewTimer(min(pause, left))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, false, fmt.Errorf("%w: %w", errEngineStore, ctx.Err())
			case <-t.C:
			}
			pause = min(2*pause, engineMaxPoll)
			continue
		}
		return nil, false, fmt.Errorf("%w: the store answered outside the Recorder contract", errEngineStore)
	}
}

// sameFingerprint compares two fingerprints in constant time. They are
// not secret; the compare is constant-time all the same.
func sameFingerprint(storedFP, fp []byte) bool {
	return subtle.ConstantTimeCompare(storedFP, fp) == 1
}

// run runs the work under the lease token holds on id (taken at start)
// and settles the ID: the result recorded, or the ID released.
func (e *engine) run(ctx context.Context, id, token string, fp []byte, start time.Time, held replay.Work, run runFunc) ([]byte, error) {
	// The tool's context is not replay.WithDeadlineOnly's: its cancel runs
	// when the tool returns, and code the tool started must see it at once.
	// It is detached from the client's request, but not from a round or a
	// task that runs the call: their cancellation reaches the tool.
	if e.tx != nil || e.renew == nil {
		// The lease is not renewed: a transaction holds it (or the store
		// cannot renew), and the tool ends at three quarters of it.
		hctx, cancel := context.WithDeadlineCause(detach(ctx), start.Add(e.lease/4*3), errCallTimeUp)
		defer cancel()
		if e.tx != nil {
			return e.runWork(ctx, hctx, id, token, fp, start, held, stoppable(run))
		}
		return e.settle(ctx, id, token, fp, func() time.Time { return start }, func() ([]byte, error) { return stoppable(run)(hctx) })
	}
	// The lease is renewed while the tool runs; the tool's context is
	// cancelled once it cannot be kept, before another call can take the
	// key, and when the call's record could no longer outlive it (Window
	// after the key was taken, less a Lease to record it, or three
	// quarters of the Lease if that is later).
	end := start.Add(e.window - e.lease)
	if late := start.Add(e.lease / 4 * 3); end.Before(late) {
		end = late
	}
	hctx, cancel := context.WithDeadlineCause(detach(ctx), end, errCallTimeUp)
	defer cancel()
	hctx, lose := context.WithCancelCause(hctx)
	defer lose(nil)
	// The renewals go on until the tool returns, whatever ends its
	// context: a tool that winds down after a cancel still holds the key.
	kctx, kcancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(e.window))
	defer kcancel()
	stop := keep(kctx, keptLease{renewer: e.renew, id: id, token: token, hold: e.lease, held: start, end: start.Add(e.window),
		lost: func(err error) {
			lose(errCallLeaseLost)
			e.logf(ctx, slog.LevelError, "the call's lease could not be kept while its tool ran: the tool's context was cancelled, and a retry may run the tool once the lease has ended", err)
		},
		retrying: func(err error) {
			e.logf(ctx, slog.LevelWarn, "renewing the call's lease failed; trying again", err)
		},
	})
	if err := context.Cause(hctx); err != nil {
		// Lost before the tool began (granted too late, or the round or
		// task that runs the call ended): nothing runs.
		stop()
		e.release(ctx, id, token, "the tool's context ended before it began")
		return nil, fmt.Errorf("%w: the tool's context ended before it began: %w", errEngineStore, err)
	}
	return e.settle(ctx, id, token, fp, stop, func() ([]byte, error) { return stoppable(run)(hctx) })
}

// Causes of a tool's context that ctoken ended: its call's lease could not
// be kept, or its time (as Lease and Window bound it) ran out.
var (
	errCallLeaseLost = serverCause(errors.New("the call's lease could not be kept"))
	errCallTimeUp    = serverCause(errors.New("the call's time ran out"))
)

// stoppable returns run, whose error is a [*stoppedError] when it is the
// end of a context ctoken ended itself (a lease or hold lost, a time
// limit, a drain): never recorded as the tool's failure, the key
// released.
func stoppable(run runFunc) runFunc {
	return func(ctx context.Context) ([]byte, error) {
		res, err := run(ctx)
		if stoppedByServer(ctx, err) {
			return nil, &stoppedError{err: err, cause: context.Cause(ctx)}
		}
		return res, err
	}
}

// settle runs the work with run and settles the ID under the lease token
// holds: the result (or a [*Failure]) recorded, or the ID released. held
// is called once the work has returned and says since when the lease is
// held.
func (e *engine) settle(ctx context.Context, id, token string, fp []byte, held func() time.Time, run func() ([]byte, error)) (result []byte, err error) {
	settled := false
	defer func() {
		// A run that panics, or ends its goroutine with runtime.Goexit,
		// returns nothing: release the ID, then let the panic go on.
		if !settled {
			held()
			e.release(ctx, id, token, "the work panicked")
		}
	}()
	result, err = run()
	start := held()
	settled = true
	var f *Failure
	if errors.As(err, &f) {
		// The work began and failed: recorded, so that a retry gets the
		// same failure and never runs it again.
		record, stored := e.recordOf(id, fp, append([]byte{failurePrefix}, f.Record...))
		cerr := e.confirm(ctx, id, token, fp, start, record)
		if cerr != nil && refusedForSize(cerr) {
			cerr, stored = e.confirm(ctx, id, token, fp, start, e.marker(id, fp)), false
		}
		switch {
		case cerr != nil:
			e.logf(ctx, slog.LevelError, "the work failed after it began and its failure was not recorded; the call runs again once its lease ends", cerr)
		case !stored:
			e.logf(ctx, slog.LevelError, "the work failed after it began and its failure was too large to record: recorded as done without it; its retries are refused", nil)
		default:
			f.recorded = true
		}
		return nil, err
	}
	if err != nil {
		e.release(ctx, id, token, "the work returned an error before it began")
		return nil, err
	}
	record, stored := e.recordOf(id, fp, result)
	cerr := e.confirm(ctx, id, token, fp, start, record)
	if cerr != nil && refusedForSize(cerr) {
		cerr = e.confirm(ctx, id, token, fp, start, e.marker(id, fp))
		stored = false
	}
	switch {
	case cerr != nil:
		e.logf(ctx, slog.LevelError, "the result was returned but not recorded; the call runs again once its lease ends", cerr)
	case !stored:
		e.logf(ctx, slog.LevelError, "the result was too large to record (or refused by the store for its size): returned, and the call recorded as done without it; its retries are refused", nil)
	}
	return result, nil
}

// runWork is run for a transactional engine: the work runs in the
// store's transaction (in the context hctx), and its writes commit with
// the record, or not at all. Nothing of the result is returned before the
// commit succeeded. held is the Work of AcquireWork, which holds the
// lease itself (its Rollback frees the ID), or nil.
func (e *engine) runWork(ctx, hctx context.Context, id, token string, fp []byte, start time.Time, held replay.Work, run runFunc) ([]byte, error) {
	wctx, wcancel := replay.WithDeadlineOnly(ctx, e.confirmDeadline(start))
	defer wcancel()
	work, err := held, error(nil)
	release := func(why string) {
		// A held Work's end (its Rollback, or a Commit that kept
		// nothing) is what frees the ID: nothing more to release.
		if held == nil {
			e.release(ctx, id, token, why)
		}
	}
	if held == nil {
		work, err = e.tx.BeginWork(wctx, id, token)
	}
	if err == nil && work == nil {
		err = errors.New("BeginWork returned no Work")
	}
	if err != nil {
		release("the store could not begin the transaction")
		return nil, fmt.Errorf("%w: %w", errEngineStore, err)
	}
	settled := false
	defer func() {
		if !settled {
			e.rollback(ctx, work)
			release("the work panicked")
		}
	}()
	result, err := run(work.Context(hctx))
	settled = true
	if err != nil {
		e.rollback(ctx, work)
		release("the work returned an error")
		return nil, err
	}
	record, stored := e.recordOf(id, fp, result)
	if !stored {
		e.logf(ctx, slog.LevelError, "the result was too large to record: the call is recorded as done without it; its retries are refused", nil)
	}
	err = work.Commit(wctx, time.Now().Add(e.window), fp, record)
	switch {
	case err == nil:
		return result, nil
	case errors.Is(err, replay.ErrLeaseLost):
		e.logf(ctx, slog.LevelError, "the lease ran out before the commit and another call took the key; the transaction was rolled back and the result not returned", err)
		return nil, fmt.Errorf("%w: %w", errEngineStore, err)
	case errors.Is(err, replay.ErrRolledBack):
		release("the store rolled the transaction back")
		e.logf(ctx, slog.LevelError, "the store rolled the transaction back (a statement failed, or the record was refused); nothing was kept, key released", err)
		return nil, fmt.Errorf("%w: %w", errEngineStore, err)
	}
	e.logf(ctx, slog.LevelError, "the commit failed with an unknown outcome; key left leased, the result not returned", err)
	// A lease taken in the transaction (AcquireWork) was committed or
	// not with it: the store can tell once the transaction has ended.
	// Otherwise the key stays leased until the lease ends.
	hint := defaultBusyRetryAfter
	if held == nil {
		hint = max(time.Until(start.Add(e.lease)), time.Millisecond)
	}
	return nil, &unknownError{retryAfter: hint, err: err}
}

// recordOf returns what is recorded for result: the result (sealed when
// the engine seals), or, for a result that cannot be recorded (empty, or
// too large), the marker of a result not recorded, and stored false.
func (e *engine) recordOf(id string, fp, result []byte) (record []byte, stored bool) {
	if len(result) == 0 {
		return e.marker(id, fp), false
	}
	if e.seal == nil {
		if len(result) > replay.MaxResultBytes {
			return notRecorded, false
		}
		return result, true
	}
	sealed, err := e.seal.seal(id, fp, result)
	if err != nil {
		return e.marker(id, fp), false
	}
	return sealed, true
}

// marker is the record of a result not recorded, sealed when the engine
// seals.
func (e *engine) marker(id string, fp []byte) []byte {
	if e.seal == nil {
		return notRecorded
	}
	m, err := e.seal.seal(id, fp, notRecorded)
	if err != nil {
		panic("mcptoken: the not-recorded marker does not seal") // a few bytes: never too large
	}
	return m
}

// confirmDeadline is how long a record of a lease taken at start may be
// tried: until the lease ends or, when that is already near, for a
// quarter of the lease.
func (e *engine) confirmDeadline(start time.Time) time.Time {
	return confirm.Deadline(start.Add(e.lease), e.lease)
}

// confirm records result under the lease, retrying a failing store with
// backoff until confirmDeadline, however the caller's context ends.
func (e *engine) confirm(ctx context.Context, id, token string, fp []byte, start time.Time, result []byte) error {
	until := time.Now().Add(e.window)
	cctx, cancel := replay.WithDeadlineOnly(ctx, e.confirmDeadline(start))
	defer cancel()
	return confirm.Retry(cctx, func(ctx context.Context) error {
		return e.store.ConfirmRecord(ctx, id, token, until, fp, result)
	}, replay.ErrLeaseLost, replay.ErrExpired, replay.ErrConfig, replay.ErrTooLarge, replay.ErrFull)
}

// refusedForSize reports whether a confirm failed because the store
// refused the record for its size or its byte budget.
func refusedForSize(err error) bool {
	return !errors.Is(err, replay.ErrLeaseLost) && (errors.Is(err, replay.ErrTooLarge) || errors.Is(err, replay.ErrFull))
}

// release frees id after work that must be retried (why says why),
// waiting at most a quarter of the lease for the store. A failure is
// logged: the ID then frees itself when the lease ends.
func (e *engine) release(ctx context.Context, id, token, why string) {
	rctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(e.lease/4))
	defer cancel()
	if err := e.store.ReleaseLease(rctx, id, token); err != nil {
		e.logf(ctx, slog.LevelError, why+"; the key could not be released: retries are busy until its lease ends", err)
	}
}

// rollback discards work's writes, waiting at most a quarter of the lease.
func (e *engine) rollback(ctx context.Context, work replay.Work) {
	rctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(e.lease/4))
	defer cancel()
	if err := work.Rollback(rctx); err != nil {
		e.logf(ctx, slog.LevelError, "the transaction could not be rolled back; its writes are not committed", err)
	}
}

// logf writes one record: never the key, the caller or a result.
func (e *engine) logf(ctx context.Context, level slog.Level, msg string, err error) {
	if e.log == nil || !e.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	e.log.LogAttrs(ctx, level, e.name+": "+msg, attrs...)
}
