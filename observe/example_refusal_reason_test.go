package observe_test

import (
	"bytes"
	"fmt"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/observe"
)

// An observer counts refusals by reason; a reason is its stable text
// (RefusalReason is a string type), which fmt's %s and %v, slog and
// string(r) all print.
func ExampleRefusalReason() {
	refusals := map[observe.RefusalReason]int{}
	// A fixed test key, for a reproducible example; in production the
	// fleet's ring comes from ctoken.KeyringFromEnv.
	keys, err := ctoken.NewKeyring(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{
		Keys: keys,
		Observer: observe.ObserverFunc(func(e observe.Event) {
			if e.Outcome != observe.OutcomeIssued && e.Outcome != observe.OutcomeVerified {
				refusals[e.Reason]++ // a real observer must be safe for concurrent use
			}
		}),
	})
	if err != nil {
		panic(err)
	}
	scope := ctoken.CursorScope{ToolID: "search", CallerID: "user:42"}
	cursor, err := issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 2})
	if err != nil {
		panic(err)
	}
	_, err = issuer.Verify(cursor, ctoken.CursorScope{ToolID: "search", CallerID: "user:43"})
	fmt.Println(ctoken.Reason(err))
	_, err = issuer.Verify("not a cursor", scope)
	fmt.Println(ctoken.Reason(err))
	fmt.Println(len(refusals))
	// Output:
	// forged or wrong scope (tool, caller or arguments)
	// not base64url
	// 2
}
