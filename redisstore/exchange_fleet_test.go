package redisstore

// The exchange fleet tests run three exchange.Handler instances on
// loopback, each with its own OneTimeIssuer built from the same keys, all
// redeeming through one Redis replay store: a bootstrap token is exchanged
// for a credential by exactly one instance.

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

const exchangeFleetPurpose = "agent-bootstrap"

// exchangeFleet is three exchange endpoints sharing keys and a replay store.
type exchangeFleet struct {
	t       *testing.T
	minter  *ctoken.OneTimeIssuer // the launcher's issuer (same keys and purpose)
	urls    []string
	issued  atomic.Int64 // Issue calls, fleet-wide
	refused atomic.Bool  // when set, every Authorize refuses
	client  *http.Client
}

func newExchangeFleet(t *testing.T, store replay.Store) *exchangeFleet {
	t.Helper()
	keys, err := ctoken.ParseKeyring(fleetKey())
	if err != nil {
		t.Fatal(err)
	}
	f := &exchangeFleet{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	newIssuer := func() *ctoken.OneTimeIssuer {
		iss, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: exchangeFleetPurpose, TTL: time.Minute, Replay: store})
		if err != nil {
			t.Fatal(err)
		}
		return iss
	}
	f.minter = newIssuer()
	for range 3 {
		h, err := exchange.NewHandler(exchange.Config{
			Issuer: newIssuer(),
			Authorize: func(ctx context.Context, req exchange.Request) error {
				if f.refused.Load() {
					return exchange.ErrUnavailable
				}
				return nil
			},
			Issue: func(ctx context.Context, req exchange.Request) (exchange.Credential, error) {
				f.issued.Add(1)
				return exchange.Credential{AccessToken: "bearer-for-" + req.Token.Claims["run"], ExpiresIn: 15 * time.Minute}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		f.urls = append(f.urls, srv.URL)
	}
	t.Cleanup(f.client.CloseIdleConnections)
	return f
}

func (f *exchangeFleet) mint(run string) string {
	f.t.Helper()
	tok, err := f.minter.Mint(map[string]string{"agent": "agt_1", "run": run})
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// exchange posts tok to instance i and returns the status and OAuth error
// code ("" on success); -1 when the request itself failed.
func (f *exchangeFleet) exchange(i int, tok string) (int, string) {
	form := url.Values{
		"grant_type":         {exchange.GrantTypeTokenExchange},
		"subject_token":      {tok},
		"subject_token_type": {exchange.TokenTypeOneTime},
	}
	res, err := f.client.Post(f.urls[i], "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	if err != nil {
		return -1, err.Error()
	}
	defer res.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return -1, "body not JSON"
	}
	if res.StatusCode == http.StatusOK && body.AccessToken == "" {
		return -1, "200 without a credential"
	}
	return res.StatusCode, body.Error
}

// TestFleetExchange pins one-time exchange across a fleet: one instance
// wins, and a Redis that dies fails closed.
func TestFleetExchange(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"one instance wins", fleetExchangeOneInstanceWins},
		{"fails closed when redis dies", fleetExchangeFailsClosedWhenRedisDies},
	} {
		t.Run(tc.name, tc.test)
	}
}

func fleetExchangeOneInstanceWins(t *testing.T) {
	f := newExchangeFleet(t, newFleetStore(t, redisAddr(t)))

	// Sequential: the first exchange wins; every instance refuses a second.
	tok := f.mint("run_1")
	// A refusal by Authorize on one instance does not consume it for the others.
	f.refused.Store(true)
	if status, code := f.exchange(0, tok); status != http.StatusServiceUnavailable || code != "temporarily_unavailable" {
		t.Fatalf("refused exchange on i0: %d %s", status, code)
	}
	f.refused.Store(false)
	if status, code := f.exchange(1, tok); status != http.StatusOK {
		t.Fatalf("first exchange on i1: %d %s", status, code)
	}
	for _, i := range []int{0, 1, 2} {
		if status, code := f.exchange(i, tok); status != http.StatusBadRequest || code != "invalid_grant" {
			t.Fatalf("second exchange on i%d: %d %s, want 400 invalid_grant", i, status, code)
		}
	}

	// Concurrent: four exchanges of one token on each instance, ten times.
	for round := range 10 {
		tok := f.mint("run_c")
		before := f.issued.Load()
		var wg sync.WaitGroup
		results := make(chan [2]any, 12)
		for range 4 {
			for i := range f.urls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					status, code := f.exchange(i, tok)
					results <- [2]any{status, code}
				}()
			}
		}
		wg.Wait()
		close(results)
		counts := map[[2]any]int{}
		for r := range results {
			counts[r]++
		}
		if counts[[2]any{http.StatusOK, ""}] != 1 || counts[[2]any{http.StatusBadRequest, "invalid_grant"}] != 11 {
			t.Fatalf("round %d: outcomes %v, want one 200 and eleven 400 invalid_grant", round, counts)
		}
		if n := f.issued.Load() - before; n != 1 {
			t.Fatalf("round %d: Issue ran %d times, want once", round, n)
		}
	}
}

func fleetExchangeFailsClosedWhenRedisDies(t *testing.T) {
	srv := newServer(t)
	f := newExchangeFleet(t, newFleetStore(t, srv.addr()))
	used, fresh := f.mint("run_1"), f.mint("run_2")
	if status, code := f.exchange(0, used); status != http.StatusOK {
		t.Fatalf("exchange with Redis up: %d %s", status, code)
	}
	srv.kill()
	for i := range f.urls {
		for name, tok := range map[string]string{"fresh": fresh, "used": used} {
			if status, code := f.exchange(i, tok); status != http.StatusServiceUnavailable || code != "temporarily_unavailable" {
				t.Fatalf("%s token on i%d with Redis down: %d %s, want 503 temporarily_unavailable", name, i, status, code)
			}
		}
	}
	if n := f.issued.Load(); n != 1 {
		t.Fatalf("Issue ran %d times, want once (before Redis died)", n)
	}
}
