package exchange_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/exchange"
)

// A bootstrap exchange: the launcher mints a one-time token for an agent
// run; the agent exchanges it once at the token endpoint for a run-scoped
// bearer. The server refuses runs that are no longer active before the
// token is consumed; a second exchange of the same token is refused.
func ExampleHandler() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		panic(err)
	}
	bootstrap, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "agent-bootstrap"})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex // the handler runs on the server's goroutines
	active := map[string]bool{"run_1": true}
	bearers := map[string]string{} // bearer → run; a real server stores these with their expiry
	handler, err := exchange.NewHandler(exchange.Config{
		Issuer: bootstrap,
		Authorize: func(ctx context.Context, req exchange.Request) error {
			mu.Lock()
			defer mu.Unlock()
			if !active[req.Token.Claims["run"]] {
				return errors.New("run is not active")
			}
			return nil
		},
		Issue: func(ctx context.Context, req exchange.Request) (exchange.Credential, error) {
			bearer := rand.Text()
			mu.Lock()
			defer mu.Unlock()
			bearers[bearer] = req.Token.Claims["run"]
			return exchange.Credential{AccessToken: bearer, ExpiresIn: 15 * time.Minute}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(handler)
	defer srv.Close()

	post := func(token string) {
		res, err := http.PostForm(srv.URL, url.Values{
			"grant_type":         {exchange.GrantTypeTokenExchange},
			"subject_token":      {token},
			"subject_token_type": {exchange.TokenTypeOneTime},
		})
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		var body map[string]any
		json.NewDecoder(res.Body).Decode(&body)
		if tok, ok := body["access_token"].(string); ok {
			mu.Lock()
			defer mu.Unlock()
			fmt.Println(res.StatusCode, body["token_type"], body["expires_in"], body["issued_token_type"], "bearer for", bearers[tok])
			return
		}
		fmt.Println(res.StatusCode, body["error"], body["error_description"])
	}

	run1, err := bootstrap.Mint(map[string]string{"agent": "agt_42", "run": "run_1"})
	if err != nil {
		panic(err)
	}
	run2, err := bootstrap.Mint(map[string]string{"agent": "agt_43", "run": "run_2"})
	if err != nil {
		panic(err)
	}
	post(run1)
	post(run1)
	post(run2) // refused by Authorize: not consumed
	mu.Lock()
	active["run_2"] = true
	mu.Unlock()
	post(run2)
	forged := []byte(run1)
	forged[20] ^= 'A' ^ 'B' // change one character
	post(string(forged))
	// Output:
	// 200 Bearer 900 urn:ietf:params:oauth:token-type:access_token bearer for run_1
	// 400 invalid_grant subject_token was already used
	// 400 invalid_grant the server refused the exchange
	// 200 Bearer 900 urn:ietf:params:oauth:token-type:access_token bearer for run_2
	// 400 invalid_grant subject_token is invalid
}
