package ctoken_test

import (
	"fmt"
	"log"
	"slices"

	"github.com/ctoken/ctoken"
)

// A keyset listing: each page ends on a sort key, and the next cursor
// carries it. The scope binds the cursor to the endpoint, the caller and
// the filter; the page size is not bound, so the client may change it.
func ExampleIssueKeyset() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	ids := []int64{3, 8, 15, 16, 23, 42, 57} // sorted, as an index returns them
	filter, err := ctoken.ArgsFingerprint(map[string]string{"status": "open"})
	if err != nil {
		log.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: "GET /v1/items", CallerID: "user:42", Args: filter}

	cursor := "" // the first page has none
	for {
		after := int64(-1)
		if cursor != "" {
			if after, err = ctoken.VerifyKeyset[int64](issuer, cursor, scope); err != nil {
				log.Fatal(err) // answer with ctoken.CursorHTTPStatus(err)
			}
		}
		// WHERE id > after ORDER BY id LIMIT 3
		start, _ := slices.BinarySearch(ids, after+1)
		page := ids[start:min(start+3, len(ids))]
		fmt.Println(page)
		if start+len(page) == len(ids) {
			break
		}
		if cursor, err = ctoken.IssueKeyset(issuer, scope, page[len(page)-1]); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// [3 8 15]
	// [16 23 42]
	// [57]
}

func ExampleCursorHTTPStatus() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: "GET /v1/items", CallerID: "user:42"}
	cursor, err := ctoken.IssueKeyset(issuer, scope, "item-0042")
	if err != nil {
		log.Fatal(err)
	}
	_, err = ctoken.VerifyKeyset[string](issuer, cursor, scope)
	fmt.Println(ctoken.CursorHTTPStatus(err))

	restarted, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys}) // a new random session
	if err != nil {
		log.Fatal(err)
	}
	_, err = ctoken.VerifyKeyset[string](restarted, cursor, scope)
	fmt.Println(ctoken.CursorHTTPStatus(err), ctoken.Reason(err)) // the reason is for the server's log

	scope.CallerID = "user:43"
	_, err = ctoken.VerifyKeyset[string](issuer, cursor, scope)
	fmt.Println(ctoken.CursorHTTPStatus(err), ctoken.Reason(err))
	// Output:
	// 200
	// 410 other server session
	// 400 forged or wrong scope (tool, caller or arguments)
}
