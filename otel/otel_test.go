package ctokenotel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/observe"
	ctokenotel "github.com/ctoken/ctoken/otel"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/webhook"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// clock is a settable clock for the scripted run.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// downStore is a replay store that cannot answer.
type downStore struct{}

func (downStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("store unreachable")
}

func TestNewRejectsNilMeterProvider(t *testing.T) {
	if _, err := ctokenotel.New(nil); !errors.Is(err, ctokenotel.ErrNoMeterProvider) {
		t.Fatalf("err = %v", err)
	}
}

// series is one counter series: its attributes, in a comparable form.
type series struct{ kind, outcome, reason, key string }

// TestScriptedRunExactCounts drives a cursor issuer, a one-time issuer, a
// single-use request-state codec and a webhook signer and verifier through
// a fixed script, then reads the
// metrics with the SDK's ManualReader and checks every series' count and
// the store-latency histogram.
func TestScriptedRunExactCounts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := ctokenotel.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	oldKey, newKey := ctoken.RandomKey(), ctoken.RandomKey()
	ring := func(keys ...[]byte) *ctoken.Keyring {
		kr, err := ctoken.NewKeyring(keys[0], keys[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	session := []byte("fleet")
	iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: ring(newKey, oldKey), Session: session, Now: clk.Now, TTL: time.Minute, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	before, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: ring(oldKey), Session: session, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ot, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: ring(newKey), Purpose: "bootstrap", Now: clk.Now, Replay: &replay.MemoryStore{Now: clk.Now}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Binding: ctoken.BindSubject, Keys: ring(newKey), Now: clk.Now, Replay: downStore{}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}

	scope := ctoken.CursorScope{ToolID: "list", CallerID: "alice"}
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// 1. issue two cursors (primary), and one before the rotation (old key,
	//    not observed).
	c1 := must(iss.Issue(ctoken.CursorPayload{CursorScope: scope}))
	must(iss.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 1}))
	old := must(before.Issue(ctoken.CursorPayload{CursorScope: scope}))
	// 2. verify under the primary twice and under the previous key once.
	for _, c := range []string{c1, c1, old} {
		if _, err := iss.Verify(c, scope); err != nil {
			t.Fatal(err)
		}
	}
	// 3. tamper: one character in the middle, which carries six bits of
	//    the body (the last may carry fewer, and a changed unused bit is a
	//    malformed token, not a forged one).
	mid := len(c1) / 2
	tampered := c1[:mid] + map[bool]string{true: "A", false: "B"}[c1[mid] != 'A'] + c1[mid+1:]
	if _, err := iss.Verify(tampered, scope); !errors.Is(err, ctoken.ErrCursorInvalid) {
		t.Fatalf("tampered: %v", err)
	}
	// 4. one-time token: mint, redeem, redeem again (duplicate).
	tok := must(ot.Mint(nil))
	if _, err := ot.Redeem(context.Background(), tok, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ot.Redeem(context.Background(), tok, nil); !errors.Is(err, ctoken.ErrOneTimeRedeemed) {
		t.Fatalf("second redeem: %v", err)
	}
	// 5. store down.
	st := must(codec.Encode("s", "alice", ""))
	if _, err := codec.Decode(st, "alice", ""); err == nil {
		t.Fatal("decode with the store down succeeded")
	}
	// 6. expire.
	clk.now = clk.now.Add(2 * time.Minute)
	if _, err := iss.Verify(c1, scope); !errors.Is(err, ctoken.ErrCursorExpired) {
		t.Fatalf("expired: %v", err)
	}
	// 7. webhook deliveries, through the same observer: sign, verify under
	//    the primary and the previous secret, forge, process, duplicate.
	webhookRun(t, obs, clk.Now)
	// 8. idempotent requests, through the same observer: first (processed),
	//    retry (duplicate), changed body (refused, mismatch), a handler
	//    failing with 503 (released).
	idempotencyRun(t, obs)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[series]int64{}
	var storeCalls map[[2]string]uint64
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ctokenotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch m.Name {
			case ctokenotel.EventsName:
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || !sum.IsMonotonic {
					t.Fatalf("%s is %T, want a monotonic Sum[int64]", m.Name, m.Data)
				}
				for _, dp := range sum.DataPoints {
					counts[series{get(dp.Attributes, ctokenotel.AttrKind), get(dp.Attributes, ctokenotel.AttrOutcome), get(dp.Attributes, ctokenotel.AttrReason), get(dp.Attributes, ctokenotel.AttrKey)}] += dp.Value
				}
			case ctokenotel.StoreDurationName:
				h, ok := m.Data.(metricdata.Histogram[float64])
				if !ok {
					t.Fatalf("%s is %T", m.Name, m.Data)
				}
				storeCalls = map[[2]string]uint64{}
				for _, dp := range h.DataPoints {
					if dp.Attributes.Len() != 2 {
						t.Errorf("histogram attributes %v", dp.Attributes.ToSlice())
					}
					storeCalls[[2]string{get(dp.Attributes, ctokenotel.AttrKind), get(dp.Attributes, ctokenotel.AttrOutcome)}] += dp.Count
					if dp.Sum <= 0 {
						t.Errorf("histogram sum %v", dp.Sum)
					}
				}
			default:
				t.Errorf("unexpected metric %q", m.Name)
			}
		}
	}
	want := map[series]int64{
		{"cursor", "issued", "", "primary"}:                                                          2,
		{"cursor", "verified", "", "primary"}:                                                        2,
		{"cursor", "verified", "", "previous 1"}:                                                     1,
		{"cursor", "refused", "forged or wrong scope (tool, caller or arguments)", "none"}:           1,
		{"cursor", "refused", "older than TTL", "primary"}:                                           1,
		{"one_time", "issued", "", "primary"}:                                                        1,
		{"one_time", "verified", "", "primary"}:                                                      1,
		{"one_time", "duplicate", "already redeemed", "primary"}:                                     1,
		{"request_state", "issued", "", "primary"}:                                                   1,
		{"request_state", "store_failure", "replay store failed", "primary"}:                         1,
		{"webhook", "issued", "", "primary"}:                                                         2,
		{"webhook", "verified", "", "primary"}:                                                       2,
		{"webhook", "verified", "", "previous 1"}:                                                    1,
		{"webhook", "refused", "signature mismatch", "none"}:                                         1,
		{"webhook", "processed", "", "primary"}:                                                      1,
		{"webhook", "duplicate", "delivery already processed", "primary"}:                            1,
		{"idempotency", "processed", "", "none"}:                                                     1,
		{"idempotency", "duplicate", "stored response replayed", "none"}:                             1,
		{"idempotency", "refused", "key reused with a different request", "none"}:                    1,
		{"idempotency", "released", "handler asked for a retry (5xx, 408, 423, 425 or 429)", "none"}: 1,
	}
	if len(counts) != len(want) {
		t.Errorf("%d series, want %d: %v", len(counts), len(want), counts)
	}
	for s, n := range want {
		if counts[s] != n {
			t.Errorf("series %+v = %d, want %d", s, counts[s], n)
		}
	}
	wantStore := map[[2]string]uint64{
		{"one_time", "verified"}:           1,
		{"one_time", "duplicate"}:          1,
		{"request_state", "store_failure"}: 1,
		{"webhook", "processed"}:           1,
		{"webhook", "duplicate"}:           1,
		{"idempotency", "processed"}:       1,
		{"idempotency", "duplicate"}:       1,
		{"idempotency", "refused"}:         1,
		{"idempotency", "released"}:        1,
	}
	if len(storeCalls) != len(wantStore) {
		t.Errorf("store histogram series %v, want %v", storeCalls, wantStore)
	}
	for k, n := range wantStore {
		if storeCalls[k] != n {
			t.Errorf("store calls %v = %d, want %d", k, storeCalls[k], n)
		}
	}
}

// webhookRun drives a webhook signer and verifier observed by obs: two
// deliveries signed (issued, primary), verified (primary); one signed by
// the secret the verifier holds second (verified, previous 1); one forged
// (refused, signature mismatch, none); the first processed (processed,
// with the store's latency) and presented again (duplicate).
func webhookRun(t *testing.T, obs observe.Observer, now func() time.Time) {
	t.Helper()
	const newSecret, oldSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_3q2+7wAAAAD+ZmxvYXRpbmctcG9pbnQh"
	v, err := webhook.NewVerifier(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{newSecret, oldSecret}, Now: now, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{newSecret}, Now: now, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	old, err := webhook.NewSigner(webhook.Config{Scheme: webhook.StandardWebhooks(), Secrets: []string{oldSecret}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"a":1}`)
	sign := func(s *webhook.Signer, id string) http.Header {
		h := http.Header{}
		if err := s.Sign(h, id, body); err != nil {
			t.Fatal(err)
		}
		return h
	}
	first, second, byOld := sign(s, "msg_1"), sign(s, "msg_2"), sign(old, "msg_3")
	d, err := v.Verify(first, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []http.Header{second, byOld} {
		if _, err := v.Verify(h, body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.Verify(first, []byte(`{"a":2}`)); !errors.Is(err, webhook.ErrSignature) {
		t.Fatalf("forged: %v", err)
	}
	ctx := context.Background()
	lease, err := v.Acquire(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Confirm(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Acquire(ctx, d); !errors.Is(err, webhook.ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
}

// idempotencyRun drives an idempotency middleware observed by obs: a
// first request (processed), its retry (duplicate), the key with another
// body (refused, mismatch), and another key whose handler fails with 503
// (released); each with the store's latency.
func idempotencyRun(t *testing.T, obs observe.Observer) {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store:    &replay.MemoryStore{},
		Caller:   func(*http.Request) (string, error) { return "alice", nil },
		Observer: obs,
		Keys:     keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == `"k2"` {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, c := range []struct {
		key, body string
		want      int
	}{{`"k1"`, `{"a":1}`, 201}, {`"k1"`, `{"a":1}`, 201}, {`"k1"`, `{"a":2}`, 422}, {`"k2"`, `{}`, 503}} {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(c.body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", c.key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Fatalf("%s %s: status %d, want %d", c.key, c.body, w.Code, c.want)
		}
	}
}

func get(set attribute.Set, key string) string {
	v, ok := set.Value(attribute.Key(key))
	if !ok {
		return "<missing>"
	}
	return v.AsString()
}

// TestObserveIsSafeForConcurrentUse records from many goroutines and checks
// the total.
func TestObserveIsSafeForConcurrentUse(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := ctokenotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 500
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				obs.Observe(observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeRefused, Reason: observe.RefusalReasons()[(w+i)%3]})
			}
		}()
	}
	for range workers {
		<-done
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					total += dp.Value
				}
			}
		}
	}
	if total != workers*each {
		t.Errorf("total %d, want %d", total, workers*each)
	}
}

// TestReasonLabelIsAReasonOfTheSetOrEmpty pins that ctoken.reason records
// a reason's text, and that a RefusalReason converted from any other string
// (never one ctoken's packages give) is recorded as "": the label's values
// stay the bounded set, and no text a caller put there reaches a metric.
func TestReasonLabelIsAReasonOfTheSetOrEmpty(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason observe.RefusalReason
		want   string
	}{
		{"a reason of the set", observe.ReasonMACMismatch, "mac mismatch"},
		{"none", observe.ReasonNone, ""},
		{"a string outside the set", observe.RefusalReason("token abc.def"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			obs, err := ctokenotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
			if err != nil {
				t.Fatal(err)
			}
			obs.Observe(observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeRefused, Reason: tc.reason})
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == ctokenotel.EventsName {
						for _, dp := range sum.DataPoints {
							got = append(got, get(dp.Attributes, ctokenotel.AttrReason))
						}
					}
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("reason labels %q, want [%q]", got, tc.want)
			}
		})
	}
}

// TestRiskAcceptedCountsEachStoreAndOption records accepted store risks and
// reads back one series per store and option with its exact count.
func TestRiskAcceptedCountsEachStoreAndOption(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := ctokenotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	obs.RiskAccepted("redisstore", "AllowRollback")
	obs.RiskAccepted("redisstore", "AllowRollback")
	obs.RiskAccepted("redisstore", "AllowEviction")
	obs.RiskAccepted("pgstore", "AllowAsyncCommit")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[[2]string]int64{}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != ctokenotel.RiskAcceptedName {
				continue
			}
			found = true
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic {
				t.Fatalf("%s is %T (monotonic %v), want a monotonic Sum[int64]", m.Name, m.Data, ok && sum.IsMonotonic)
			}
			for _, dp := range sum.DataPoints {
				store, _ := dp.Attributes.Value(attribute.Key(ctokenotel.AttrStore))
				option, _ := dp.Attributes.Value(attribute.Key(ctokenotel.AttrOption))
				if dp.Attributes.Len() != 2 {
					t.Errorf("series %v has %d attributes, want 2", dp.Attributes, dp.Attributes.Len())
				}
				got[[2]string{store.AsString(), option.AsString()}] = dp.Value
			}
		}
	}
	if !found {
		t.Fatalf("no %s metric collected", ctokenotel.RiskAcceptedName)
	}
	want := map[[2]string]int64{
		{"redisstore", "AllowRollback"}: 2,
		{"redisstore", "AllowEviction"}: 1,
		{"pgstore", "AllowAsyncCommit"}: 1,
	}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v = %d, want %d", k, got[k], v)
		}
	}
}

// TestKeySealsRecordsRotateKeyReports reads back a request-state codec's
// reports that its key should be rotated: ctoken.events counts them under
// outcome "rotate_key" and ctoken.key.seals holds the last count.
func TestKeySealsRecordsRotateKeyReports(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := ctokenotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint64{1 << 28, 1 << 29} {
		obs.Observe(observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeRotateKey, Key: observe.KeyPrimary, Seals: n})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var reports, seals int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case ctokenotel.EventsName:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if get(dp.Attributes, ctokenotel.AttrOutcome) == "rotate_key" && get(dp.Attributes, ctokenotel.AttrKind) == "request_state" {
						reports += dp.Value
					}
				}
			case ctokenotel.KeySealsName:
				g, ok := m.Data.(metricdata.Gauge[int64])
				if !ok || len(g.DataPoints) != 1 || get(g.DataPoints[0].Attributes, ctokenotel.AttrKind) != "request_state" {
					t.Fatalf("%s: %+v", m.Name, m.Data)
				}
				seals = g.DataPoints[0].Value
			}
		}
	}
	if reports != 2 || seals != 1<<29 {
		t.Fatalf("rotate_key reports %d, seals %d; want 2 and 2^29", reports, seals)
	}
}
