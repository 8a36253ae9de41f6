package ctoken

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
)

// captureHandler is a slog.Handler that keeps every record.
type captureHandler struct {
	mu      sync.Mutex
	level   slog.Level
	records []slog.Record
}

func (h *captureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func (h *captureHandler) take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.records
	h.records = nil
	return r
}

func recordAttrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

func TestNewSlogObserverRejectsNilLogger(t *testing.T) {
	if _, err := NewSlogObserver(nil); err != errSlogNil {
		t.Fatalf("err = %v", err)
	}
	wantErr(t, errSlogNil, ErrConfig)
}

func TestSlogObserver(t *testing.T) {
	// Drives real issuers through the
	// adapter and checks each record's level, message and attributes, and that
	// no record holds the token, the subject or the caller.
	t.Run("levels and attributes", func(t *testing.T) {
		h := &captureHandler{level: slog.LevelDebug}
		obs, err := NewSlogObserver(slog.New(h))
		if err != nil {
			t.Fatal(err)
		}
		clock := newTestClock()
		iss, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, fixedKey(2), fixedKey(1)), Session: []byte("s"), Now: clock.Now, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		codec, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(2)), Now: clock.Now, Replay: failingStore{}, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		scope := CursorScope{ToolID: "secret-tool", CallerID: "secret-caller"}
		cur, err := iss.Issue(CursorPayload{CursorScope: scope})
		if err != nil {
			t.Fatal(err)
		}
		iss.Verify(cur, scope)
		iss.Verify(cur[:len(cur)-4]+"AAAA", scope)
		state, err := codec.Encode("secret-state", "secret-subject", "")
		if err != nil {
			t.Fatal(err)
		}
		codec.Decode(state, "secret-subject", "")
		clock.Advance(time.Hour)
		iss.Verify(cur, scope)

		want := []struct {
			level slog.Level
			msg   string
			attrs map[string]string
		}{
			{slog.LevelDebug, "ctoken: issued", map[string]string{"kind": "cursor", "outcome": "issued", "key": "primary"}},
			{slog.LevelDebug, "ctoken: verified", map[string]string{"kind": "cursor", "outcome": "verified", "key": "primary"}},
			{slog.LevelWarn, "ctoken: refused", map[string]string{"kind": "cursor", "outcome": "refused", "reason": "forged or wrong scope (tool, caller or arguments)"}},
			{slog.LevelDebug, "ctoken: issued", map[string]string{"kind": "request_state", "outcome": "issued", "key": "primary"}},
			{slog.LevelError, "ctoken: store_failure", map[string]string{"kind": "request_state", "outcome": "store_failure", "reason": "replay store failed", "key": "primary", "store_latency": "*"}},
			{slog.LevelInfo, "ctoken: refused", map[string]string{"kind": "cursor", "outcome": "refused", "reason": "older than TTL", "key": "primary"}},
		}
		got := h.take()
		if len(got) != len(want) {
			t.Fatalf("%d records, want %d", len(got), len(want))
		}
		for i, w := range want {
			r := got[i]
			attrs := recordAttrs(r)
			if r.Level != w.level || r.Message != w.msg || len(attrs) != len(w.attrs) {
				t.Errorf("record %d: %v %q %v, want %v %q %v", i, r.Level, r.Message, attrs, w.level, w.msg, w.attrs)
				continue
			}
			for k, v := range w.attrs {
				if attrs[k] != v && !(v == "*" && attrs[k] != "") {
					t.Errorf("record %d: %s = %q, want %q", i, k, attrs[k], v)
				}
			}
			for _, v := range attrs {
				for _, secret := range []string{"secret", cur, state} {
					if strings.Contains(v, secret) {
						t.Errorf("record %d leaks %q", i, secret)
					}
				}
			}
		}
	})

	// Pins the level of each kind of event.
	t.Run("level of every outcome", func(t *testing.T) {
		for _, tc := range []struct {
			e    Event
			want slog.Level
		}{
			{Event{Outcome: OutcomeIssued}, slog.LevelDebug},
			{Event{Outcome: OutcomeVerified}, slog.LevelDebug},
			{Event{Outcome: OutcomeRefused, Reason: ReasonOlderThanTTL}, slog.LevelInfo},
			{Event{Outcome: OutcomeRefused, Reason: ReasonOtherSession}, slog.LevelInfo},
			{Event{Outcome: OutcomeRefused, Reason: ReasonPastExp}, slog.LevelInfo},
			{Event{Outcome: OutcomeRefused, Reason: ReasonExpired}, slog.LevelInfo},
			{Event{Outcome: OutcomeRefused, Reason: ReasonAuthorizeRefused}, slog.LevelInfo},
			{Event{Outcome: OutcomeRefused, Reason: ReasonMACMismatch}, slog.LevelWarn},
			{Event{Outcome: OutcomeRefused, Reason: ReasonUnknownKey}, slog.LevelWarn},
			{Event{Outcome: OutcomeRefused, Reason: ReasonWrongBinding}, slog.LevelWarn},
			{Event{Outcome: OutcomeDuplicate, Reason: ReasonAlreadyUsed}, slog.LevelWarn},
			{Event{Outcome: OutcomeStoreFailure, Reason: ReasonStoreFailed}, slog.LevelError},
			{Event{Outcome: OutcomeRefused, Reason: ReasonIssueFailed}, slog.LevelError},
			{Event{Kind: KindWebhook, Outcome: OutcomeIssued, Key: KeyPrimary}, slog.LevelDebug},
			{Event{Kind: KindWebhook, Outcome: OutcomeVerified, Key: KeyPrimary}, slog.LevelDebug},
			{Event{Kind: KindWebhook, Outcome: OutcomeProcessed, StoreLatency: 1}, slog.LevelDebug},
			{Event{Kind: KindWebhook, Outcome: OutcomeDuplicate, Reason: ReasonWebhookDuplicate}, slog.LevelInfo},
			{Event{Kind: KindWebhook, Outcome: OutcomeInProgress, Reason: ReasonWebhookInProgress}, slog.LevelInfo},
			{Event{Kind: KindWebhook, Outcome: OutcomeRefused, Reason: ReasonWebhookSignatureMismatch}, slog.LevelWarn},
			{Event{Kind: KindWebhook, Outcome: OutcomeRefused, Reason: ReasonWebhookTimestampTooOld}, slog.LevelWarn},
			{Event{Kind: KindWebhook, Outcome: OutcomeStoreFailure, Reason: ReasonWebhookStoreRecord}, slog.LevelError},
			{Event{Kind: KindWebhook, Outcome: OutcomeStoreFailure, Reason: ReasonWebhookLeaseLost}, slog.LevelError},
			{Event{Kind: KindIdempotency, Outcome: OutcomeProcessed, StoreLatency: 1}, slog.LevelDebug},
			{Event{Kind: KindIdempotency, Outcome: OutcomeDuplicate, Reason: ReasonIdempotencyReplayed}, slog.LevelInfo},
			{Event{Kind: KindIdempotency, Outcome: OutcomeInProgress, Reason: ReasonIdempotencyInProgress}, slog.LevelInfo},
			{Event{Kind: KindIdempotency, Outcome: OutcomeRefused, Reason: ReasonIdempotencyGoneBeforeLease}, slog.LevelInfo},
			{Event{Kind: KindIdempotency, Outcome: OutcomeReleased, Reason: ReasonIdempotencyHandlerDeadline}, slog.LevelInfo},
			{Event{Kind: KindIdempotency, Outcome: OutcomeReleased, Reason: ReasonIdempotencyHandlerPanic}, slog.LevelInfo},
			{Event{Kind: KindIdempotency, Outcome: OutcomeRefused, Reason: ReasonIdempotencyMismatch}, slog.LevelWarn},
			{Event{Kind: KindIdempotency, Outcome: OutcomeStoreFailure, Reason: ReasonIdempotencyStoreConfirm}, slog.LevelError},
			{observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeRotateKey, Key: observe.KeyPrimary, Seals: 1 << 28}, slog.LevelWarn},
		} {
			if got := eventLevel(tc.e); got != tc.want {
				t.Errorf("level of %+v = %v, want %v", tc.e, got, tc.want)
			}
		}
	})

	// A key to rotate is a Warn record with the count of seals.
	t.Run("rotate key", func(t *testing.T) {
		h := &captureHandler{level: slog.LevelDebug}
		obs, err := NewSlogObserver(slog.New(h))
		if err != nil {
			t.Fatal(err)
		}
		obs.Observe(observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeRotateKey, Key: observe.KeyPrimary, Seals: 1 << 28})
		got := h.take()
		if len(got) != 1 {
			t.Fatalf("%d records", len(got))
		}
		attrs := recordAttrs(got[0])
		if got[0].Level != slog.LevelWarn || got[0].Message != "ctoken: rotate_key" || attrs["seals"] != "268435456" || attrs["key"] != "primary" || attrs["kind"] != "request_state" {
			t.Fatalf("%v %q %v", got[0].Level, got[0].Message, attrs)
		}
	})

	// TestSlogObserver/filters by level without allocating: a disabled level is
	// dropped before any attribute is built.
	t.Run("filters by level without allocating", func(t *testing.T) {
		if raceEnabled {
			t.Skip("allocation counts are not meaningful under -race")
		}
		h := &captureHandler{level: slog.LevelWarn}
		obs, err := NewSlogObserver(slog.New(h))
		if err != nil {
			t.Fatal(err)
		}
		e := Event{Kind: KindCursor, Outcome: OutcomeVerified, Key: KeyPrimary}
		if n := testing.AllocsPerRun(100, func() { obs.Observe(e) }); n != 0 {
			t.Errorf("a filtered event allocates %v times", n)
		}
		if len(h.take()) != 0 {
			t.Error("a Debug event passed a Warn handler")
		}
	})
}
