// Package exchangetest checks a replay store under the token-exchange
// endpoint as a fleet runs it: [RunContract] serves the endpoint from two
// instances, each with its own one-time issuer and its own store value on
// one backend. Every store of this repository runs it; the author of
// another store can too (ExampleRunContract shows the call from a test).
package exchangetest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/exchange"
	"github.com/ctoken/ctoken/replay"
)

// RunContract runs the token exchange's scenarios across two instances of
// the endpoint against a store: newStores returns two store values on one
// backend (two processes' stores, or two Stores in one process on the same
// server, table or file), and the instances' issuers share a keyring and
// a purpose, as a fleet's do. A one-time token is exchanged for a
// credential once: a second exchange on either instance is refused
// invalid_grant; of copies sent to both instances at once exactly one is
// answered with a credential, and the credential is issued once; a
// refusal of the application's Authorize consumes nothing, so the token
// is exchanged afterwards on the other instance; distinct tokens are each
// exchanged. Every store of this repository runs it.
func RunContract(t *testing.T, newStores func(t *testing.T) (a, b replay.Store)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f *fleet)
	}{
		{"SecondExchangeRefusedOnEveryInstance", secondExchangeRefused},
		{"ConcurrentExchangesIssueOnce", concurrentExchangesIssueOnce},
		{"RefusalConsumesNothing", refusalConsumesNothing},
		{"DistinctTokensEachExchange", distinctTokensEachExchange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sa, sb := newStores(t)
			tc.fn(t, newFleet(t, sa, sb))
		})
	}
}

// purpose is the issuers' purpose.
const purpose = "agent-bootstrap"

// fleet is the endpoint on two instances and the launcher that mints
// their tokens.
type fleet struct {
	minter    *ctoken.OneTimeIssuer
	instances [2]http.Handler
	issued    atomic.Int32 // credentials issued, fleet-wide
	refusing  atomic.Bool  // when set, Authorize refuses on instance 0
}

func newFleet(t *testing.T, a, b replay.Store) *fleet {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	issuer := func(s replay.Store) *ctoken.OneTimeIssuer {
		iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: purpose, TTL: time.Minute, Replay: s})
		if err != nil {
			t.Fatal(err)
		}
		return iss
	}
	f := &fleet{minter: issuer(a)}
	for i, s := range []replay.Store{a, b} {
		h, err := exchange.NewHandler(exchange.Config{
			Issuer: issuer(s),
			Authorize: func(context.Context, exchange.Request) error {
				if i == 0 && f.refusing.Load() {
					return exchange.ErrUnavailable
				}
				return nil
			},
			Issue: func(_ context.Context, req exchange.Request) (exchange.Credential, error) {
				f.issued.Add(1)
				return exchange.Credential{AccessToken: "bearer-for-" + req.Token.Claims["run"], ExpiresIn: 15 * time.Minute}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		f.instances[i] = h
	}
	return f
}

// mint returns a token for run.
func (f *fleet) mint(t *testing.T, run string) string {
	t.Helper()
	tok, err := f.minter.Mint(map[string]string{"agent": "agt_1", "run": run})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// answer is what the endpoint answered: the status, the credential on
// success and the OAuth error code on a refusal.
type answer struct {
	status     int
	credential string
	code       string
}

// exchange sends tok to instance i.
func (f *fleet) exchange(i int, tok string) answer {
	form := url.Values{
		"grant_type":         {exchange.GrantTypeTokenExchange},
		"subject_token":      {tok},
		"subject_token_type": {exchange.TokenTypeOneTime},
	}
	r := httptest.NewRequest(http.MethodPost, "/token", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	f.instances[i].ServeHTTP(w, r)
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		return answer{status: w.Code, code: "body not JSON"}
	}
	return answer{w.Code, body.AccessToken, body.Error}
}

// refusedGrant is a used token's answer.
var refusedGrant = answer{status: http.StatusBadRequest, code: "invalid_grant"}

func secondExchangeRefused(t *testing.T, f *fleet) {
	tok := f.mint(t, "run_1")
	if got := f.exchange(1, tok); got.status != http.StatusOK || got.credential != "bearer-for-run_1" {
		t.Fatalf("the first exchange: %+v; want 200 and the run's credential", got)
	}
	for _, i := range []int{0, 1} {
		if got := f.exchange(i, tok); got != refusedGrant {
			t.Fatalf("a second exchange on instance %d: %+v; want 400 invalid_grant", i, got)
		}
	}
	if n := f.issued.Load(); n != 1 {
		t.Fatalf("%d credentials issued for one token", n)
	}
}

func concurrentExchangesIssueOnce(t *testing.T, f *fleet) {
	const copies = 8
	for round := range 5 {
		tok := f.mint(t, "run_c")
		before := f.issued.Load()
		answers := make([]answer, copies)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers[c] = f.exchange(c%2, tok)
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for c, got := range answers {
			switch {
			case got.status == http.StatusOK && got.credential == "bearer-for-run_c":
				won++
			case got != refusedGrant:
				t.Fatalf("round %d, copy %d: %+v; want the credential or 400 invalid_grant", round, c, got)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of %d copies of one token got a credential", round, won, copies)
		}
		if n := f.issued.Load() - before; n != 1 {
			t.Fatalf("round %d: %d credentials issued for one token", round, n)
		}
	}
}

func refusalConsumesNothing(t *testing.T, f *fleet) {
	tok := f.mint(t, "run_1")
	f.refusing.Store(true)
	if got := f.exchange(0, tok); got.status != http.StatusServiceUnavailable || got.code != "temporarily_unavailable" {
		t.Fatalf("an exchange its Authorize refused: %+v; want 503 temporarily_unavailable", got)
	}
	f.refusing.Store(false)
	if got := f.exchange(1, tok); got.status != http.StatusOK || got.credential != "bearer-for-run_1" {
		t.Fatalf("the same token on the other instance after the refusal: %+v; want 200 and the credential", got)
	}
	if got := f.exchange(0, tok); got != refusedGrant {
		t.Fatalf("the token again once exchanged: %+v; want 400 invalid_grant", got)
	}
	if n := f.issued.Load(); n != 1 {
		t.Fatalf("%d credentials issued for one token", n)
	}
}

func distinctTokensEachExchange(t *testing.T, f *fleet) {
	for i, run := range []string{"run_1", "run_2", "run_3", "run_4"} {
		if got := f.exchange(i%2, f.mint(t, run)); got.status != http.StatusOK || got.credential != "bearer-for-"+run {
			t.Fatalf("%s on instance %d: %+v; want 200 and its credential", run, i%2, got)
		}
	}
	if n := f.issued.Load(); n != 4 {
		t.Fatalf("%d credentials issued for four tokens", n)
	}
}
