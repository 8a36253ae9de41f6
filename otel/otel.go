// Package ctokenotel records the events of ctoken's issuers, codecs and
// handlers, of its webhook package's verifiers and signers (kind
// "webhook") and of its idempotency middleware (kind "idempotency"), as
// OpenTelemetry metrics, through the OpenTelemetry metric API.
// It is a module of its own (github.com/ctoken/ctoken/otel), so the ctoken
// module itself never depends on OpenTelemetry.
// Most users need one call: [New] with their meter provider, given as the
// Observer of each config; ExampleNew shows it.
//
// Four instruments are recorded:
//
//   - ctoken.events, an Int64Counter of events, with the attributes
//     ctoken.kind ([observe.TokenKind]), ctoken.outcome ([observe.Outcome]),
//     ctoken.reason ([observe.RefusalReason]; "" when the token was not
//     refused) and ctoken.key ([observe.KeyPosition]: "primary",
//     "previous N", or "none");
//   - ctoken.replay_store.duration, a Float64Histogram in seconds of every
//     replay-store call, with ctoken.kind and ctoken.outcome;
//   - ctoken.store.risk_accepted, an Int64Counter of the times a replay
//     store found a risk that one of its Allow* options accepts, with the
//     attributes ctoken.store and ctoken.option (see [Observer.RiskAccepted]),
//     so a dashboard finds every weakened deployment;
//   - ctoken.key.seals, an Int64Gauge of the messages the primary key of an
//     AES-256-GCM request-state codec ("v1e." states, random 96-bit nonces)
//     has sealed in this process, recorded with ctoken.kind each time the
//     codec reports that the key should be rotated (outcome "rotate_key",
//     from 2^28 seals on and at every doubling; ctoken.events counts the
//     reports too). Alert on any such report: the key's budget is 2^32
//     messages across the fleet (NIST SP 800-38D).
//
// Every attribute value comes from a fixed set that ctoken documents as
// stable, so the series can be pre-registered and their number is bounded:
// no token text, subject, caller or key ever becomes an attribute.
package ctokenotel

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/ctoken/ctoken/observe"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instrument and attribute names.
const (
	// EventsName is the name of the event counter.
	EventsName = "ctoken.events"
	// StoreDurationName is the name of the replay-store latency histogram.
	StoreDurationName = "ctoken.replay_store.duration"

	// RiskAcceptedName is the name of the counter of accepted store risks.
	RiskAcceptedName = "ctoken.store.risk_accepted"

	// KeySealsName is the name of the gauge of messages sealed by a key
	// that should be rotated (outcome "rotate_key").
	KeySealsName = "ctoken.key.seals"

	AttrKind    = "ctoken.kind"    // a observe.TokenKind
	AttrOutcome = "ctoken.outcome" // a observe.Outcome
	AttrReason  = "ctoken.reason"  // a observe.RefusalReason, "" for none
	AttrKey     = "ctoken.key"     // a observe.KeyPosition
	AttrStore   = "ctoken.store"   // a replay store's package name
	AttrOption  = "ctoken.option"  // the Allow* option that accepts a risk
)

// ScopeName is the instrumentation scope of the meter [New] obtains.
const ScopeName = "github.com/ctoken/ctoken/otel"

// ErrNoMeterProvider reports a nil meter provider given to [New].
var ErrNoMeterProvider = errors.New("ctokenotel: meter provider is nil")

// Observer is a [observe.Observer] that records every event as metrics; set
// it as the Observer of a ctoken config. It is safe for concurrent use.
// Observe does not block beyond what the SDK's instruments do (an atomic or
// a short lock per series in the OpenTelemetry Go SDK).
type Observer struct {
	events  metric.Int64Counter
	latency metric.Float64Histogram
	risks   metric.Int64Counter
	seals   metric.Int64Gauge

	mu   sync.RWMutex
	sets map[setKey]metric.MeasurementOption // cached attribute sets by label key
}

var _ observe.Observer = (*Observer)(nil)

// New returns an [Observer] whose instruments come from a meter of mp named
// [ScopeName]. A nil mp is [ErrNoMeterProvider]; an instrument the provider
// refuses is returned as its error.
func New(mp metric.MeterProvider) (*Observer, error) {
	if mp == nil {
		return nil, ErrNoMeterProvider
	}
	m := mp.Meter(ScopeName)
	events, err := m.Int64Counter(EventsName,
		metric.WithDescription("Outcomes of ctoken token operations, by token kind, outcome, refusal reason and key position."),
		metric.WithUnit("{event}"))
	if err != nil {
		return nil, err
	}
	latency, err := m.Float64Histogram(StoreDurationName,
		metric.WithDescription("Duration of ctoken replay-store calls."),
		metric.WithUnit("s"))
	if err != nil {
		return nil, err
	}
	risks, err := m.Int64Counter(RiskAcceptedName,
		metric.WithDescription("Times a ctoken replay store found a risk that one of its Allow* options accepts."),
		metric.WithUnit("{risk}"))
	if err != nil {
		return nil, err
	}
	seals, err := m.Int64Gauge(KeySealsName,
		metric.WithDescription("Messages sealed in this process by an AES-GCM key that ctoken reports should be rotated (budget: 2^32 per key, fleet-wide)."),
		metric.WithUnit("{message}"))
	if err != nil {
		return nil, err
	}
	return &Observer{events: events, latency: latency, risks: risks, seals: seals, sets: map[setKey]metric.MeasurementOption{}}, nil
}

// RiskAccepted records one count on ctoken.store.risk_accepted with the
// attributes ctoken.store = store and ctoken.option = option. Call it from
// a store's Observer for its replay.EventRiskAccepted events, which a
// store emits each time the risk appears (at Open or New, and when a
// recheck finds it again after it had gone):
//
//	Observer: func(e replay.Event) {
//		if e.Kind == replay.EventRiskAccepted {
//			obs.RiskAccepted(e.Store, e.Option)
//		}
//	}
//
// option is one of the stores' fixed Allow* field names (Event.Option), so
// the number of series stays bounded; the event's Risk text is for logs and
// is not recorded.
func (o *Observer) RiskAccepted(store, option string) {
	o.risks.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(AttrStore, store), attribute.String(AttrOption, option)))
}

// Observe records e: one count on ctoken.events; when a replay store
// was called, its latency on ctoken.replay_store.duration; and for a key to
// rotate, its count of seals on ctoken.key.seals.
func (o *Observer) Observe(e observe.Event) {
	ctx := context.Background()
	o.events.Add(ctx, 1, o.attrs(e, true))
	if e.StoreLatency > 0 {
		o.latency.Record(ctx, e.StoreLatency.Seconds(), o.attrs(e, false))
	}
	if e.Seals > 0 {
		o.seals.Record(ctx, int64(min(e.Seals, math.MaxInt64)), metric.WithAttributes(attribute.String(AttrKind, e.Kind.String())))
	}
}

// setKey is the label key of a cached attribute set: the labels of kind,
// outcome, key position and reason as String returns them ("" for a value
// outside its set, so the cache stays bounded), and whether the set is the
// counter's (all four) or the histogram's (kind and outcome only; key and
// reason "").
type setKey struct {
	kind, outcome, key, reason string
	full                       bool
}

// attrs returns the cached attribute set of e's labels: all four for the
// counter (full), kind and outcome for the histogram.
func (o *Observer) attrs(e observe.Event, full bool) metric.MeasurementOption {
	k := setKey{kind: e.Kind.String(), outcome: e.Outcome.String(), full: full}
	if full {
		k.key, k.reason = e.Key.String(), e.Reason.String()
	}
	o.mu.RLock()
	opt, ok := o.sets[k]
	o.mu.RUnlock()
	if ok {
		return opt
	}
	kv := []attribute.KeyValue{
		attribute.String(AttrKind, k.kind),
		attribute.String(AttrOutcome, k.outcome),
	}
	if full {
		kv = append(kv, attribute.String(AttrReason, k.reason), attribute.String(AttrKey, k.key))
	}
	opt = metric.WithAttributeSet(attribute.NewSet(kv...))
	o.mu.Lock()
	o.sets[k] = opt
	o.mu.Unlock()
	return opt
}
