package ctoken_test

// A behaviour of the exchange handler a mutation run (scripts/mutation.sh,
// issue 21) showed no other test pinned; see mutation_gaps_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/observe/observetest"
	"github.com/ctoken/ctoken/replay"
)

// delayedStore is a replay.Store that takes at least delay per Claim.
type delayedStore struct {
	delay time.Duration
	inner replay.Store
}

func (s delayedStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	time.Sleep(s.delay)
	return s.inner.Claim(ctx, id, until)
}

// Kills exchange.go `if h.obs != nil { start = time.Now() }` negated: the
// StoreLatency the handler's observer is told is how long the redeem took
// (at least the store's delay, far less than a minute), not the time since
// the zero time — for an exchange that succeeds and for a replayed token.
func TestExchangeObserverStoreLatencyIsTheRedeemsDuration(t *testing.T) {
	const delay = 2 * time.Millisecond
	kr, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{
		Keys: kr, Purpose: exchangePurpose,
		Replay: delayedStore{delay: delay, inner: &replay.MemoryStore{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var events observetest.Recorder
	h, err := ctoken.NewExchangeHandler(ctoken.ExchangeConfig{
		Issuer:    iss,
		Authorize: func(context.Context, ctoken.ExchangeRequest) error { return nil },
		Issue: func(context.Context, ctoken.ExchangeRequest) (ctoken.Credential, error) {
			return ctoken.Credential{AccessToken: "cred", ExpiresIn: time.Minute}, nil
		},
		Observer: &events,
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := iss.Mint(exchangeClaims)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{http.StatusOK, http.StatusBadRequest} {
		if w := post(h, exchangeForm(tok).Encode()); w.Code != want {
			t.Fatalf("status %d, want %d", w.Code, want)
		}
	}
	got := events.Take()
	if len(got) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(got), got)
	}
	for _, e := range got {
		if e.StoreLatency < delay || e.StoreLatency > time.Minute {
			t.Fatalf("%v: StoreLatency = %v, want between %v and a minute", e.Outcome, e.StoreLatency, delay)
		}
	}
}

// Kills exchange.go `int64(cred.ExpiresIn/time.Second)` with `/` made `*`
// in the success log record: the record's expires_in is the credential's
// lifetime in whole seconds (15m0.999s → 900), as in the response body.
func TestExchangeSuccessLogStatesExpiresInWholeSeconds(t *testing.T) {
	f := newExchangeFixture(t, nil)
	w := post(f.handler, exchangeForm(f.mint()).Encode())
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var rec struct {
			Msg       string `json:"msg"`
			ExpiresIn *int64 `json:"expires_in"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg != "ctoken exchange: credential issued" {
			continue
		}
		found = true
		if rec.ExpiresIn == nil || *rec.ExpiresIn != 900 {
			t.Fatalf("expires_in = %v in %s, want 900", rec.ExpiresIn, line)
		}
	}
	if !found {
		t.Fatalf("no success record in the log:\n%s", f.logs)
	}
}

// refusalRecord is a "ctoken exchange: refused" log record.
type refusalRecord struct {
	Level  string  `json:"level"`
	Status int     `json:"status"`
	Check  string  `json:"check"`
	Err    *string `json:"err"`
}

// lastRefusal returns the last refusal record in f's log and clears the log.
func lastRefusal(t *testing.T, f *exchangeFixture) refusalRecord {
	t.Helper()
	var rec refusalRecord
	found := false
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var r struct {
			Msg string `json:"msg"`
			refusalRecord
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r.Msg == "ctoken exchange: refused" {
			rec, found = r.refusalRecord, true
		}
	}
	if !found {
		t.Fatalf("no refusal record in the log:\n%s", f.logs)
	}
	f.logs.mu.Lock()
	f.logs.b.Reset()
	f.logs.mu.Unlock()
	return rec
}

// Kills exchange.go `ref.status >= 500` (→ `>`, and negated) and the `||`
// → `&&` mutants of isOneTimeRefusal: a refusal of the token itself
// (forged, expired, replayed) is logged at WARN with the issuer's check and
// without the error text, a server-side failure (status 500 exactly, or
// 503) at ERROR with the callback's or the store's error text.
func TestExchangeRefusalLogLevelAndErrorText(t *testing.T) {
	f := newExchangeFixture(t, nil)

	post(f.handler, exchangeForm("ot1.AAAA").Encode())
	if r := lastRefusal(t, f); r.Level != "WARN" || r.Status != http.StatusBadRequest || r.Check != "truncated" || r.Err != nil {
		t.Fatalf("forged token: %+v, want WARN 400 check truncated and no err", r)
	}

	expired := f.mint()
	f.clock.Advance(ctoken.DefaultOneTimeTTL)
	post(f.handler, exchangeForm(expired).Encode())
	if r := lastRefusal(t, f); r.Level != "WARN" || r.Check != "expired" || r.Err != nil {
		t.Fatalf("expired token: %+v, want WARN, check expired and no err", r)
	}

	used := f.mint()
	if w := post(f.handler, exchangeForm(used).Encode()); w.Code != http.StatusOK {
		t.Fatalf("first exchange: %d", w.Code)
	}
	post(f.handler, exchangeForm(used).Encode())
	if r := lastRefusal(t, f); r.Level != "WARN" || r.Check != "already redeemed" || r.Err != nil {
		t.Fatalf("replayed token: %+v, want WARN, check already redeemed and no err", r)
	}

	issueErr := errors.New("credential database down")
	f.issueErr.Store(&issueErr)
	post(f.handler, exchangeForm(f.mint()).Encode())
	f.issueErr.Store(nil)
	if r := lastRefusal(t, f); r.Level != "ERROR" || r.Status != http.StatusInternalServerError || r.Err == nil || *r.Err != issueErr.Error() {
		t.Fatalf("Issue failure: %+v, want ERROR 500 with the callback's error", r)
	}
}
