package idempotency

import (
	"errors"
	"time"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// ReasonOf returns the [observe.RefusalReason] of an error of this
// package: the reason a request was refused, replayed or released
// (ReasonOf(err).String() is its fixed text), [observe.ReasonNone] for nil,
// a configuration error, or an error of another package.
func ReasonOf(err error) observe.RefusalReason { return reasons.Of(err) }

// reasons maps each package-level rejection value to its reason, so that
// reporting one costs a map lookup and no allocation.
var reasons = reason.NewLookup(observe.ParseReason,
	errKeyMissing, errKeyRepeated, errKeyMalformed, errKeyLength, errNoCaller,
	errBodyTooLarge, errBodyUnreadable, errInProgress, errMismatch, errReplayed,
	errNoRecord, errRecordCorrupt, errResponseTooBig, errReleasedRetry,
	errReleasedPanic, errReleasedLate, errGoneAcquire, errTimeoutHandler,
)

// outcomeOf is the outcome of a request that ended with err (never nil):
// replayed → duplicate, a live lease → in_progress, a released key →
// released, a store that failed or holds no usable response →
// store_failure, and every other refusal (the key, the caller, the body,
// a mismatch, a response too large to have been stored) → refused.
func outcomeOf(err error) observe.Outcome {
	switch {
	case errors.Is(err, errReplay):
		return observe.OutcomeDuplicate
	case errors.Is(err, ErrInProgress):
		return observe.OutcomeInProgress
	case errors.Is(err, errReleased):
		return observe.OutcomeReleased
	case errors.Is(err, ErrStore), errors.Is(err, ErrOutcomeUnknown), err == errNoRecord, err == errRecordCorrupt:
		return observe.OutcomeStoreFailure
	}
	return observe.OutcomeRefused
}

// report tells the observer, if any, how a request with a key ended: err
// is the refusal, replay or release (never nil); store the time spent in
// the replay store.
func (p *params) report(err error, store time.Duration) {
	if p.obs == nil {
		return
	}
	p.obs.Observe(observe.Event{Kind: observe.KindIdempotency, Outcome: outcomeOf(err), Reason: ReasonOf(err), StoreLatency: store})
}
