package redisstore

// The token exchange on Redis: the exchangetest contract (two instances,
// each with its own Store), and three exchange.Handler instances on
// loopback redeeming through one Redis replay store that dies.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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
	t      *testing.T
	minter *ctoken.OneTimeIssuer // the launcher's issuer (same keys and purpose)
	urls   []string
	issued atomic.Int64 // Issue calls, fleet-wide
	client *http.Client
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
			Issuer:    newIssuer(),
			Authorize: func(ctx context.Context, req exchange.Request) error { return nil },
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

// TestFleetExchange pins what Redis adds to the contract: a Redis that
// dies fails closed on every instance.
func TestFleetExchange(t *testing.T) {
	subtests(t, []subtest{
		{"fails closed when redis dies", fleetExchangeFailsClosedWhenRedisDies},
	})
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
