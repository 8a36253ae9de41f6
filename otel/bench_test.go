package ctokenotel_test

import (
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
	ctokenotel "github.com/ctoken/ctoken/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// BenchmarkObserve measures what recording one event costs with the
// OpenTelemetry SDK behind the observer: the attribute set's cache lookup
// by the event's labels plus the SDK's counter (and, with a store latency,
// histogram) update. The events are those a verified cursor, a refused
// one and a single-use redemption report.
func BenchmarkObserve(b *testing.B) {
	obs, err := ctokenotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		e    observe.Event
	}{
		{"verified", observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeVerified, Key: observe.KeyPrimary}},
		{"refused", observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeRefused, Reason: observe.ReasonMACMismatch}},
		{"previous-key+store", observe.Event{Kind: observe.KindOneTime, Outcome: observe.OutcomeVerified, Key: observe.KeyAt(2), StoreLatency: time.Millisecond}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				obs.Observe(bc.e)
			}
		})
	}
}
