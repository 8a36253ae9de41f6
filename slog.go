package ctoken

import (
	"context"
	"log/slog"
)

// SlogObserver is an [Observer] that writes each [Event] as one structured
// log/slog record, at a level chosen by what the event means:
//
//   - Debug: a token issued or verified, a webhook delivery signed,
//     verified or recorded as processed (the normal case);
//   - Info: a refusal an honest client causes in normal operation (a token
//     past its age or expiry, a cursor from another server session, an
//     input too large or not encodable at issue, an exchange request that
//     is malformed or that Authorize refused), and a webhook delivery that
//     arrives again (a sender's retry: a duplicate, or a copy refused while
//     another attempt holds its lease); for idempotent requests, a retry
//     answered with the stored response, a request refused while another
//     with its key runs, and a key released after a failed attempt;
//   - Warn: every other refusal (a MAC or webhook signature mismatch, a
//     malformed or tampered token or delivery, a stale webhook timestamp,
//     a wrong scope, binding, purpose or claims), a duplicate token (a
//     single-use token replayed), and a key to rotate
//     ([observe.OutcomeRotateKey], with the attribute seals);
//   - Error: a replay-store failure (for webhooks also a lease lost or a
//     delivery that could not be confirmed or released), or an exchange
//     whose credential could not be issued.
//
// Each record has the message "ctoken: " + the outcome and the attributes
// kind, outcome, reason (refusals), key (when a key authenticated the
// token) and store_latency (when a store was called): only values of the
// fixed sets of [Event], never token text, subjects, callers or keys.
//
// The logger's handler runs on the hot path: give it one that does not
// block (or raise its level so that Enabled filters early, which costs no
// allocation). A [SlogObserver] is safe for concurrent use if its handler
// is.
type SlogObserver struct {
	log *slog.Logger
}

var errSlogNil = configError("NewSlogObserver: the logger is nil")

// NewSlogObserver returns a [SlogObserver] writing to l. A nil l is
// [ErrConfig].
func NewSlogObserver(l *slog.Logger) (*SlogObserver, error) {
	if l == nil {
		return nil, errSlogNil
	}
	return &SlogObserver{log: l}, nil
}

// Observe logs e; see [SlogObserver].
func (s *SlogObserver) Observe(e Event) {
	level := eventLevel(e)
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("kind", e.Kind.String()), slog.String("outcome", e.Outcome.String()))
	if e.Reason != ReasonNone {
		attrs = append(attrs, slog.String("reason", e.Reason.String()))
	}
	if e.Key != KeyNone {
		attrs = append(attrs, slog.String("key", e.Key.String()))
	}
	if e.StoreLatency > 0 {
		attrs = append(attrs, slog.Duration("store_latency", e.StoreLatency))
	}
	if e.Seals > 0 {
		attrs = append(attrs, slog.Uint64("seals", e.Seals))
	}
	s.log.LogAttrs(ctx, level, "ctoken: "+e.Outcome.String(), attrs...)
}

// eventLevel is the level [SlogObserver] logs e at.
func eventLevel(e Event) slog.Level {
	switch e.Outcome {
	case OutcomeIssued, OutcomeVerified, OutcomeProcessed:
		return slog.LevelDebug
	case OutcomeInProgress, OutcomeReleased:
		return slog.LevelInfo
	case OutcomeDuplicate:
		if e.Kind == KindWebhook || e.Kind == KindIdempotency {
			return slog.LevelInfo // senders and clients retry: a retry is normal
		}
		return slog.LevelWarn
	case OutcomeStoreFailure:
		return slog.LevelError
	}
	switch e.Reason {
	case ReasonIssueFailed:
		return slog.LevelError
	case ReasonOlderThanTTL, ReasonOtherSession, ReasonPastExp, ReasonExpired,
		ReasonOpaqueStateTooBig, ReasonCursorTooLarge, ReasonCursorStateNotCBOR,
		ReasonStateNotUTF8, ReasonSubjectNUL, ReasonStateTooLarge, ReasonStateNotJSON,
		ReasonClaimsTooLarge, ReasonExchangeRequest, ReasonAuthorizeRefused,
		ReasonIdempotencyGoneBeforeLease: // clients hang up: normal
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
