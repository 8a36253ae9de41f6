package observetest_test

import (
	"fmt"
	"log"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
)

// A server's test checks that a cursor presented by another caller is
// refused and reported with the reason it expects.
func ExampleRecorder() {
	var rec observetest.Recorder
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Observer: &rec})
	if err != nil {
		log.Fatal(err)
	}
	cursor, err := issuer.Issue(ctoken.CursorPayload{CursorScope: ctoken.CursorScope{ToolID: "search_issues", CallerID: "user:42"}})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = issuer.Verify(cursor, ctoken.CursorScope{ToolID: "search_issues", CallerID: "user:43"})

	for _, e := range rec.Take() {
		fmt.Println(e.Outcome, e.Reason == observe.ReasonCursorWrongScope)
	}
	// Output:
	// issued false
	// refused true
}
