package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
	"github.com/ctoken/ctoken/replay"
)

// hadStore reports whether e reports a store latency, and returns e with
// the latency cleared, for comparison.
func hadStore(e observe.Event) (observe.Event, bool) {
	had := e.StoreLatency > 0
	e.StoreLatency = 0
	return e, had
}

func webhookEvent(o observe.Outcome, r observe.RefusalReason, k observe.KeyPosition) observe.Event {
	return observe.Event{Kind: observe.KindWebhook, Outcome: o, Reason: r, Key: k}
}

// TestVerifyReportsEveryOutcomeToTheObserver drives Verify and Sign through
// each outcome and checks the one event of each.
func TestVerifyReportsEveryOutcomeToTheObserver(t *testing.T) {
	clk := newStepClock()
	log := &observetest.Recorder{}
	// The verifier knows the new secret (primary) and the old one
	// (previous 1); one signer signs with each.
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret2, stdSecret}, Now: clk.Now, Observer: log})
	byNew, err := NewSigner(Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret2}, Now: clk.Now, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	byOld := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now})
	body := `{"a":1}`
	sign := func(s *Signer, id string) http.Header {
		h := http.Header{}
		if err := s.Sign(h, id, []byte(body)); err != nil {
			t.Fatal(err)
		}
		return h
	}
	fresh := sign(byNew, "msg_1")
	if e := log.Only(t, "sign"); e != webhookEvent(observe.OutcomeIssued, observe.ReasonNone, observe.KeyPrimary) {
		t.Errorf("sign: event %+v", e)
	}
	if err := byNew.Sign(http.Header{}, "bad id", []byte(body)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("sign with a bad id: %v", err)
	}
	if e := log.Only(t, "sign refused"); e != webhookEvent(observe.OutcomeRefused, observe.ReasonWebhookIDChar, observe.KeyNone) {
		t.Errorf("sign refused: event %+v", e)
	}
	old := sign(byOld, "msg_2")
	clk.Advance(-time.Hour)
	stale := sign(byNew, "msg_3")
	clk.Advance(time.Hour)
	log.Take()
	noID := fresh.Clone()
	noID.Del(HeaderStandardID)
	for _, tc := range []struct {
		name string
		h    http.Header
		body string
		want observe.Event
	}{
		{"verified by the primary", fresh, body, webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary)},
		{"verified by previous 1", old, body, webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyAt(1))},
		{"forged", fresh, body + " ", webhookEvent(observe.OutcomeRefused, observe.ReasonWebhookSignatureMismatch, observe.KeyNone)},
		{"stale, after the signature matched", stale, body, webhookEvent(observe.OutcomeRefused, observe.ReasonWebhookTimestampTooOld, observe.KeyPrimary)},
		{"no id", noID, body, webhookEvent(observe.OutcomeRefused, observe.ReasonWebhookIDHeader, observe.KeyNone)},
		{"body over the cap", fresh, strings.Repeat("x", DefaultMaxBody+1), webhookEvent(observe.OutcomeRefused, observe.ReasonWebhookBodyTooLarge, observe.KeyNone)},
	} {
		d, err := v.Verify(tc.h, []byte(tc.body))
		if (err == nil) != (tc.want.Outcome == observe.OutcomeVerified) {
			t.Fatalf("%s: err %v", tc.name, err)
		}
		if err != nil && d != (Delivery{}) {
			t.Errorf("%s: a refused delivery returned %+v", tc.name, d)
		}
		if e := log.Only(t, tc.name); e != tc.want {
			t.Errorf("%s: event %+v, want %+v", tc.name, e, tc.want)
		}
	}
}

// TestLeaseReportsEveryOutcome drives Acquire, Confirm and Release
// through each outcome: duplicates, in progress, processed and store
// failures.
func TestLeaseReportsEveryOutcome(t *testing.T) {
	ctx := context.Background()
	log := &observetest.Recorder{}
	flaky := &flakyStore{MemoryStore: &replay.MemoryStore{}}
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret2, stdSecret}, Replay: flaky, Namespace: "orders", Observer: log}
	v := newVerifier(t, cfg)
	old := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	verify := func(id string) Delivery {
		t.Helper()
		h := signed(t, old, id, "{}")
		d, err := v.Verify(h, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		log.Take()
		return d
	}
	prev := observe.KeyAt(1)

	if _, err := v.Acquire(ctx, Delivery{ID: "msg_0"}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unverified: %v", err)
	}
	if e := log.Only(t, "unverified"); e != webhookEvent(observe.OutcomeRefused, observe.ReasonWebhookNotVerified, observe.KeyNone) {
		t.Errorf("unverified: event %+v", e)
	}

	d := verify("msg_1")
	lease, err := v.Acquire(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if got := log.Take(); len(got) != 0 {
		t.Errorf("an acquired lease reported %+v; its latency belongs to Confirm", got)
	}
	if _, err := v.Acquire(ctx, d); !errors.Is(err, ErrInProgress) {
		t.Fatalf("copy in progress: %v", err)
	}
	if e, had := hadStore(log.Only(t, "in progress")); e != webhookEvent(observe.OutcomeInProgress, observe.ReasonWebhookInProgress, prev) || !had {
		t.Errorf("in progress: event %+v, store latency %v", e, had)
	}
	if err := lease.Confirm(ctx); err != nil {
		t.Fatal(err)
	}
	if e, had := hadStore(log.Only(t, "confirm")); e != webhookEvent(observe.OutcomeProcessed, observe.ReasonNone, prev) || !had {
		t.Errorf("confirm: event %+v, store latency %v", e, had)
	}
	if _, err := v.Acquire(ctx, d); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	if e, had := hadStore(log.Only(t, "duplicate")); e != webhookEvent(observe.OutcomeDuplicate, observe.ReasonWebhookDuplicate, prev) || !had {
		t.Errorf("duplicate: event %+v, store latency %v", e, had)
	}

	// The store fails to confirm, then to release.
	flaky.failing.Store(true)
	for _, tc := range []struct {
		name   string
		finish func(*Lease) error
		want   observe.RefusalReason
	}{
		{"confirm", func(l *Lease) error {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			return l.Confirm(ctx)
		}, observe.ReasonWebhookStoreConfirm},
		{"release", func(l *Lease) error { return l.Release(ctx) }, observe.ReasonWebhookStoreRelease},
	} {
		flaky.failing.Store(false)
		lease, err := v.Acquire(ctx, verify("msg_"+tc.name))
		if err != nil {
			t.Fatal(err)
		}
		flaky.failing.Store(true)
		if err := tc.finish(lease); !errors.Is(err, ErrReplayStore) {
			t.Fatalf("%s with the store down: %v", tc.name, err)
		}
		if e, had := hadStore(log.Only(t, tc.name)); e != webhookEvent(observe.OutcomeStoreFailure, tc.want, prev) || !had {
			t.Errorf("%s: event %+v, store latency %v", tc.name, e, had)
		}
	}

	down := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Replay: failingStore{}, Namespace: "orders", Observer: log})
	h := signed(t, old, "msg_down", "{}")
	d, err = down.Verify(h, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	log.Take()
	if _, err := down.Acquire(ctx, d); !errors.Is(err, ErrReplayStore) {
		t.Fatalf("store down: %v", err)
	}
	if e, had := hadStore(log.Only(t, "store down")); e != webhookEvent(observe.OutcomeStoreFailure, observe.ReasonWebhookStoreRecord, observe.KeyPrimary) || !had {
		t.Errorf("store down: event %+v, store latency %v", e, had)
	}
}

// TestMiddlewareReportsEachRequestOnce checks the events of the middleware:
// a body it refuses before Verify, a processed delivery, a duplicate.
func TestMiddlewareReportsEachRequestOnce(t *testing.T) {
	log := &observetest.Recorder{}
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, MaxBody: 64, Observer: log})
	s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	handler := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	serve := func(body string, h http.Header) int {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		for k, vs := range h {
			r.Header[k] = vs
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w.Code
	}
	h := signed(t, s, "msg_1", "{}")
	if code := serve(strings.Repeat("x", 65), h); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the cap: %d", code)
	}
	if e := log.Only(t, "over the cap"); e != webhookEvent(observe.OutcomeRefused, observe.ReasonWebhookBodyTooLarge, observe.KeyNone) {
		t.Errorf("over the cap: event %+v", e)
	}
	if code := serve("{}", h); code != http.StatusNoContent {
		t.Fatalf("first delivery: %d", code)
	}
	got := log.Take()
	if len(got) != 2 || got[0] != webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary) ||
		got[1].Outcome != observe.OutcomeProcessed || got[1].StoreLatency <= 0 {
		t.Errorf("first delivery: events %+v, want verified then processed", got)
	}
	if code := serve("{}", h); code != http.StatusOK {
		t.Fatalf("retry: %d", code)
	}
	got = log.Take()
	if len(got) != 2 || got[1].Outcome != observe.OutcomeDuplicate || got[1].Reason != observe.ReasonWebhookDuplicate {
		t.Errorf("retry: events %+v, want verified then duplicate", got)
	}
}

// TestReasonOfMapsEveryRejection pins every rejection value of the package
// to its reason, checks that the typed reason and Reason agree, and that a
// configuration, secret or foreign error has none. The lookup's own cases
// (unhashable errors, wrapping) are internal/reason's.
func TestReasonOfMapsEveryRejection(t *testing.T) {
	table := []struct {
		err  error
		want observe.RefusalReason
	}{
		{errBodyTooLarge, observe.ReasonWebhookBodyTooLarge},
		{errBodyUnreadable, observe.ReasonWebhookBodyUnreadable},
		{errIDHeader, observe.ReasonWebhookIDHeader},
		{errIDLength, observe.ReasonWebhookIDLength},
		{errIDChar, observe.ReasonWebhookIDChar},
		{errNilHeader, observe.ReasonWebhookNilHeader},
		{errNotVerified, observe.ReasonWebhookNotVerified},
		{errTSHeader, observe.ReasonWebhookTimestampHeader},
		{errTSMalformed, observe.ReasonWebhookTimestampMalformed},
		{errSigHeader, observe.ReasonWebhookSignatureHeader},
		{errSigMalformed, observe.ReasonWebhookSignatureMalformed},
		{errSigMismatch, observe.ReasonWebhookSignatureMismatch},
		{errTSTooOld, observe.ReasonWebhookTimestampTooOld},
		{errTSFuture, observe.ReasonWebhookTimestampFuture},
		{errStripeEventID, observe.ReasonWebhookStripeBody},
		{errStripeSignID, observe.ReasonWebhookStripeID},
		{errStripeT, observe.ReasonWebhookStripeT},
		{errSlackBody, observe.ReasonWebhookSlackBody},
		{errSlackSignID, observe.ReasonWebhookSlackID},
		{errDup, observe.ReasonWebhookDuplicate},
		{errBusy, observe.ReasonWebhookInProgress},
		{errLeaseNotAcquired, observe.ReasonWebhookLeaseNotAcquired},
		// Wrapped per call: the general path.
		{storeError(errStoreDown), observe.ReasonWebhookStoreRecord},
		{reason.Wrap(ErrReplayStore, "replay store could not confirm the delivery", errStoreDown), observe.ReasonWebhookStoreConfirm},
		{reason.Wrap(ErrReplayStore, "replay store could not release the delivery", errStoreDown), observe.ReasonWebhookStoreRelease},
		{reason.Wrap(ErrReplayStore, "lease lost: another attempt took the delivery after the lease expired", replay.ErrLeaseLost), observe.ReasonWebhookLeaseLost},
	}
	if len(table)-4 != rejectionReasons.Len() {
		t.Errorf("table has %d rejections, rejectionReasons %d: keep them in step", len(table)-4, rejectionReasons.Len())
	}
	for _, tc := range table {
		t.Run(tc.want.String(), func(t *testing.T) {
			got := ReasonOf(tc.err)
			if got != tc.want || got.String() != Reason(tc.err) {
				t.Errorf("ReasonOf(%v) = %v, want %v (Reason %q)", tc.err, got, tc.want, Reason(tc.err))
			}
		})
	}
	_, cfgErr := NewVerifier(Config{})
	_, secretErr := NewVerifier(Config{Scheme: StandardWebhooks(), Secrets: []string{" " + stdSecret}})
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil", nil}, {"config", cfgErr}, {"secret", secretErr}, {"no secrets", errNoSecrets},
		{"zero verifier", errZeroVerifier}, {"negative lease", errNegLease}, {"bare sentinel", ErrSignature},
		{"another package", strconv.ErrSyntax},
	} {
		t.Run("none for "+tc.name, func(t *testing.T) {
			if r := ReasonOf(tc.err); r != observe.ReasonNone {
				t.Errorf("ReasonOf(%v) = %v, want ReasonNone", tc.err, r)
			}
		})
	}
}

// TestOutcomeOfEveryWebhookReason pins the outcome each reason is reported
// under: duplicates, copies in progress and store failures (a lost lease
// included) have outcomes of their own; every other reason is a refusal.
func TestOutcomeOfEveryWebhookReason(t *testing.T) {
	special := map[observe.RefusalReason]observe.Outcome{
		observe.ReasonWebhookDuplicate:    observe.OutcomeDuplicate,
		observe.ReasonWebhookInProgress:   observe.OutcomeInProgress,
		observe.ReasonWebhookStoreRecord:  observe.OutcomeStoreFailure,
		observe.ReasonWebhookStoreConfirm: observe.OutcomeStoreFailure,
		observe.ReasonWebhookStoreRelease: observe.OutcomeStoreFailure,
		observe.ReasonWebhookLeaseLost:    observe.OutcomeStoreFailure,
	}
	for _, r := range observe.RefusalReasons() {
		want, ok := special[r]
		if !ok {
			want = observe.OutcomeRefused
		}
		if got := outcomeOf(r); got != want {
			t.Errorf("outcomeOf(%q) = %v, want %v", r, got, want)
		}
	}
}
