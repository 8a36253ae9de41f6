package webhook

import (
	"time"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// ReasonOf returns the [observe.RefusalReason] of err: the typed form of
// [Reason] for every refusal of a delivery by this package (so
// ReasonOf(err).String() == Reason(err)), including duplicates
// ([ErrDuplicate]), copies in progress ([ErrInProgress]) and replay-store
// failures; [observe.ReasonNone] for nil, for a configuration or secret
// error of a constructor or of SetSecrets, and for an error that carries no
// reason of the set. It costs no allocation for an error this package
// returned unwrapped.
func ReasonOf(err error) observe.RefusalReason { return rejectionReasons.Of(err) }

// rejectionReasons maps each package-level rejection value to its reason,
// so that reporting a refusal costs a map lookup and no allocation (a
// wrapped replay-store error is parsed from its reason).
var rejectionReasons = reason.NewLookup(observe.ParseReason,
	errBodyTooLarge, errBodyUnreadable, errIDHeader, errIDLength, errIDChar,
	errNilHeader, errNotVerified, errTSHeader, errTSMalformed, errSigHeader,
	errSigMalformed, errSigMismatch, errTSTooOld, errTSFuture,
	errStripeEventID, errStripeSignID, errStripeT, errSlackBody, errSlackSignID,
	errDup, errBusy, errLeaseNotAcquired,
)

// outcomeOf is the outcome of a refusal with reason r.
func outcomeOf(r observe.RefusalReason) observe.Outcome {
	switch r {
	case observe.ReasonWebhookDuplicate:
		return observe.OutcomeDuplicate
	case observe.ReasonWebhookInProgress:
		return observe.OutcomeInProgress
	case observe.ReasonWebhookStoreRecord, observe.ReasonWebhookStoreConfirm,
		observe.ReasonWebhookStoreRelease, observe.ReasonWebhookLeaseLost:
		return observe.OutcomeStoreFailure
	}
	return observe.OutcomeRefused
}

// report tells p's observer of one operation: outcome ok when err is nil,
// else the refusal err describes. key is the secret that authenticated the
// delivery, if any; store the time spent in the replay store. It is called
// only when p.obs is non-nil.
func (p *params) report(ok observe.Outcome, key observe.KeyPosition, err error, store time.Duration) {
	e := observe.Event{Kind: observe.KindWebhook, Outcome: ok, Key: key, StoreLatency: store}
	if err != nil {
		e.Reason = ReasonOf(err)
		e.Outcome = outcomeOf(e.Reason)
	}
	p.obs.Observe(e)
}
