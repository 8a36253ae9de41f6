package ctoken

import (
	"time"

	"github.com/ctoken/ctoken/observe"
)

// Observability: every issuer, codec and handler of this package reports
// each outcome to the [observe.Observer] of its config, with labels drawn
// from the fixed sets of package [observe] ([observe.TokenKind],
// [observe.Outcome], [observe.RefusalReason], [observe.KeyPosition]), which
// the webhook and idempotency packages share, so one observer serves all.

// observeErr reports the outcome of a checking operation: Verified with the
// key at index key when err is nil, else the refusal err describes (and the
// key, if the MAC had already matched). It is called only when obs is
// non-nil.
func observeErr(obs observe.Observer, kind observe.TokenKind, key int, err error, store time.Duration) {
	e := observe.Event{Kind: kind, Key: observe.KeyAt(key), StoreLatency: store}
	if err == nil {
		e.Outcome = observe.OutcomeVerified
	} else {
		e.Reason = Reason(err)
		e.Outcome = outcomeOf(e.Reason)
	}
	obs.Observe(e)
}

// observeIssue reports the outcome of an issuing operation: Issued (by the
// primary key) when err is nil, else the refusal.
func observeIssue(obs observe.Observer, kind observe.TokenKind, err error) {
	e := observe.Event{Kind: kind, Outcome: observe.OutcomeIssued, Key: observe.KeyPrimary}
	if err != nil {
		e.Key = observe.KeyNone
		e.Reason = Reason(err)
		e.Outcome = outcomeOf(e.Reason)
	}
	obs.Observe(e)
}

// outcomeOf is the outcome of a refusal with reason r.
func outcomeOf(r observe.RefusalReason) observe.Outcome {
	switch r {
	case observe.ReasonAlreadyUsed, observe.ReasonAlreadyRedeemed:
		return observe.OutcomeDuplicate
	case observe.ReasonStoreFailed:
		return observe.OutcomeStoreFailure
	}
	return observe.OutcomeRefused
}
