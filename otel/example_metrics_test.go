package ctokenotel_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ctoken/ctoken"
	ctokenotel "github.com/ctoken/ctoken/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// One Observer records every issuer's, codec's and verifier's events as
// OpenTelemetry metrics. A server passes its own meter provider (the
// global one, otel.GetMeterProvider(), or its SDK's); this example reads
// the metrics back with the SDK's manual reader.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	obs, err := ctokenotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}
	// A fixed test key, for a reproducible example; in production the
	// fleet's ring comes from ctoken.KeyringFromEnv.
	keys, err := ctoken.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Observer: obs})
	if err != nil {
		panic(err)
	}
	scope := ctoken.CursorScope{ToolID: "search", CallerID: "user:42"}
	cursor, _ := issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 2})
	issuer.Verify(cursor, scope)
	issuer.Verify("not a cursor", scope)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == ctokenotel.EventsName {
				total := int64(0)
				for _, p := range sum.DataPoints {
					total += p.Value
				}
				fmt.Println(m.Name, total) // issued, verified, refused
			}
		}
	}
	// Output:
	// ctoken.events 3
}
