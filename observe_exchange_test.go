package ctoken_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/observe/observetest"
	"github.com/ctoken/ctoken/replay"
)

// TestExchangeObserverSeesEveryOutcome runs one exchange per outcome and
// checks the one KindExchange event each produces.
func TestExchangeObserverSeesEveryOutcome(t *testing.T) {
	clock := clocktest.New()
	kr, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	store := &flakyStore{inner: &replay.MemoryStore{Now: clock.Now}}
	iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: kr, Purpose: exchangePurpose, Replay: store, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var (
		events    observetest.Recorder
		refuse    error
		issueFail error
	)
	h, err := ctoken.NewExchangeHandler(ctoken.ExchangeConfig{
		Issuer:    iss,
		Authorize: func(context.Context, ctoken.ExchangeRequest) error { return refuse },
		Issue: func(context.Context, ctoken.ExchangeRequest) (ctoken.Credential, error) {
			return ctoken.Credential{AccessToken: "cred", ExpiresIn: time.Minute}, issueFail
		},
		Observer: &events,
	})
	if err != nil {
		t.Fatal(err)
	}
	mint := func() string {
		tok, err := iss.Mint(exchangeClaims)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	used := mint()
	steps := []struct {
		name    string
		body    string
		setup   func()
		status  int
		outcome ctoken.Outcome
		reason  ctoken.RefusalReason
		store   bool
	}{
		{"issued", exchangeForm(used).Encode(), nil, http.StatusOK, ctoken.OutcomeIssued, ctoken.ReasonNone, true},
		{"duplicate", exchangeForm(used).Encode(), nil, http.StatusBadRequest, ctoken.OutcomeDuplicate, ctoken.ReasonAlreadyRedeemed, true},
		{"malformed request", "grant_type=x", nil, http.StatusBadRequest, ctoken.OutcomeRefused, ctoken.ReasonExchangeRequest, false},
		{"forged token", exchangeForm("ot1.AAAA").Encode(), nil, http.StatusBadRequest, ctoken.OutcomeRefused, ctoken.ReasonTruncated, false},
		{"authorize refuses", exchangeForm(mint()).Encode(), func() { refuse = errors.New("no") }, http.StatusBadRequest, ctoken.OutcomeRefused, ctoken.ReasonAuthorizeRefused, false},
		{"store down", exchangeForm(mint()).Encode(), func() { refuse = nil; store.down.Store(true) }, http.StatusServiceUnavailable, ctoken.OutcomeStoreFailure, ctoken.ReasonStoreFailed, true},
		{"issue fails", exchangeForm(mint()).Encode(), func() { store.down.Store(false); issueFail = errors.New("db") }, http.StatusInternalServerError, ctoken.OutcomeRefused, ctoken.ReasonIssueFailed, true},
	}
	for _, s := range steps {
		if s.setup != nil {
			s.setup()
		}
		w := post(h, s.body)
		if w.Code != s.status {
			t.Errorf("%s: status %d, want %d", s.name, w.Code, s.status)
		}
		e := events.Only(t, s.name)
		if e.Kind != ctoken.KindExchange || e.Outcome != s.outcome || e.Reason != s.reason || (e.StoreLatency > 0) != s.store {
			t.Errorf("%s: event %+v, want outcome %v reason %q store latency %v", s.name, e, s.outcome, s.reason, s.store)
		}
	}
}
