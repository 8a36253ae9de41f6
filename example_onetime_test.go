package ctoken_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctoken/ctoken"
)

// A one-time bootstrap token: minted for one agent run, looked at, then
// exchanged exactly once. An issuer of another purpose on the same keys
// refuses it.
func ExampleOneTimeIssuer() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		panic(err)
	}
	bootstrap, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "agent-bootstrap"})
	if err != nil {
		panic(err)
	}
	reset, err := ctoken.NewOneTimeIssuer(ctoken.OneTimeConfig{Keys: keys, Purpose: "password-reset"})
	if err != nil {
		panic(err)
	}
	claims := map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_1"}
	tok, err := bootstrap.Mint(claims)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// Verify reads the authenticated claims without consuming the token.
	seen, err := bootstrap.Verify(tok)
	fmt.Println(seen.Purpose, seen.Claims["run"], err)

	_, err = reset.Redeem(ctx, tok, claims)
	fmt.Println(errors.Is(err, ctoken.ErrOneTimeInvalid), ctoken.Reason(err))

	_, err = bootstrap.Redeem(ctx, tok, map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_2"})
	fmt.Println(errors.Is(err, ctoken.ErrOneTimeClaims))

	got, err := bootstrap.Redeem(ctx, tok, claims)
	fmt.Println(got["agent"], got["run"], err)

	_, err = bootstrap.Redeem(ctx, tok, claims)
	fmt.Println(errors.Is(err, ctoken.ErrOneTimeRedeemed))
	// Output:
	// agent-bootstrap run_1 <nil>
	// true other purpose
	// true
	// agt_42 run_1 <nil>
	// true
}
