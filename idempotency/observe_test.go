package idempotency

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		err     error
		reason  observe.RefusalReason
		outcome observe.Outcome
	}{
		{errKeyMissing, observe.ReasonIdempotencyKeyMissing, observe.OutcomeRefused},
		{errKeyRepeated, observe.ReasonIdempotencyKeyRepeated, observe.OutcomeRefused},
		{errKeyMalformed, observe.ReasonIdempotencyKeyMalformed, observe.OutcomeRefused},
		{errKeyLength, observe.ReasonIdempotencyKeyLength, observe.OutcomeRefused},
		{errNoCaller, observe.ReasonIdempotencyNoCaller, observe.OutcomeRefused},
		{errBodyTooLarge, observe.ReasonIdempotencyBodyTooLarge, observe.OutcomeRefused},
		{errBodyUnreadable, observe.ReasonIdempotencyBodyUnreadable, observe.OutcomeRefused},
		{errInProgress, observe.ReasonIdempotencyInProgress, observe.OutcomeInProgress},
		{errMismatch, observe.ReasonIdempotencyMismatch, observe.OutcomeRefused},
		{errReplayed, observe.ReasonIdempotencyReplayed, observe.OutcomeDuplicate},
		{errNoRecord, observe.ReasonIdempotencyNoRecord, observe.OutcomeStoreFailure},
		{errRecordCorrupt, observe.ReasonIdempotencyRecordCorrupt, observe.OutcomeStoreFailure},
		{errResponseTooBig, observe.ReasonIdempotencyResponseTooLarge, observe.OutcomeRefused},
		{errReleasedRetry, observe.ReasonIdempotencyHandlerRetry, observe.OutcomeReleased},
		{errReleasedPanic, observe.ReasonIdempotencyHandlerPanic, observe.OutcomeReleased},
		{errReleasedLate, observe.ReasonIdempotencyHandlerDeadline, observe.OutcomeReleased},
		{errGoneAcquire, observe.ReasonIdempotencyGoneBeforeLease, observe.OutcomeRefused},
		{storeAcquireError(errInjected), observe.ReasonIdempotencyStoreAcquire, observe.OutcomeStoreFailure},
		{storeConfirmError(errInjected), observe.ReasonIdempotencyStoreConfirm, observe.OutcomeStoreFailure},
		{storeReleaseError(errInjected), observe.ReasonIdempotencyStoreRelease, observe.OutcomeStoreFailure},
		{leaseLostError(errInjected), observe.ReasonIdempotencyLeaseLost, observe.OutcomeStoreFailure},
		{errTimeoutHandler, observe.ReasonIdempotencyTimeoutHandler, observe.OutcomeRefused},
		{storeBeginError(errInjected), observe.ReasonIdempotencyStoreBegin, observe.OutcomeStoreFailure},
		{outcomeUnknownError(errInjected), observe.ReasonIdempotencyOutcomeUnknown, observe.OutcomeStoreFailure},
	} {
		t.Run(tc.reason.String(), func(t *testing.T) {
			if got := ReasonOf(tc.err); got != tc.reason || got.String() != reason.Of(tc.err) {
				t.Errorf("ReasonOf = %v, want %v", got, tc.reason)
			}
			if got := outcomeOf(tc.err); got != tc.outcome {
				t.Errorf("outcomeOf = %v, want %v", got, tc.outcome)
			}
		})
	}
	for _, err := range []error{nil, errors.New("other"), func() error { _, err := New(Config{}); return err }()} {
		if r := ReasonOf(err); r != observe.ReasonNone {
			t.Errorf("ReasonOf(%v) = %v, want none", err, r)
		}
	}
}

func TestLogsNeverHoldTheKeyTheCallerOrABody(t *testing.T) {
	const caller, key, reqBody, respBody = "caller-secret-7", "key-secret-9", "request-secret-3", "response-secret-5"
	fs := &faultStore{Recorder: newStore(), confirmErr: errInjected, releaseErr: errInjected}
	fs.confirmFails.Store(-1)
	f := newFixture(t, Config{Store: fs, Lease: 40 * MinLease, Window: 3600 * 1000 * MinLease, MaxResponseBytes: 32,
		Caller: func(*http.Request) (string, error) { return caller, nil }}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(500)
		}
		w.Write([]byte(strings.Repeat(respBody, 3)))
	})
	f.do(req(http.MethodPost, "/payments", "u", `"`+key+`"`, reqBody))
	r := req(http.MethodPost, "/payments", "u", `"`+key+`-2"`, reqBody)
	r.Header.Set("X-Fail", "1")
	f.do(r)
	logs := f.logs.String()
	if !strings.Contains(logs, "level=ERROR") {
		t.Fatalf("nothing logged: %s", logs)
	}
	for _, secret := range []string{caller, key, reqBody, respBody} {
		if strings.Contains(logs, secret) {
			t.Errorf("log holds %q: %s", secret, logs)
		}
	}
}

func TestNilObserverAndLoggerAreOptional(t *testing.T) {
	mw, err := New(Config{Store: newStore(), Keys: testKeys, Caller: func(*http.Request) (string, error) { return "a", nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	f := &fixture{h: h}
	for _, tc := range []struct {
		key      string
		status   int
		replayed string
	}{{key1, 201, ""}, {key1, 201, "true"}, {"a b", 400, ""}} {
		w := f.do(req(http.MethodPost, "/p", "", tc.key, `{}`))
		if w.Code != tc.status || w.Header().Get(ReplayedHeader) != tc.replayed {
			t.Fatalf("key %s: %d replayed %q, want %d %q", tc.key, w.Code, w.Header().Get(ReplayedHeader), tc.status, tc.replayed)
		}
	}
}
