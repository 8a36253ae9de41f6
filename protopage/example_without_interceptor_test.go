package protopage_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
)

// Paging without an interceptor: a transport of its own (here, none) puts
// the Call in the context itself.
func ExamplePager_Start() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("library-v1")})
	if err != nil {
		log.Fatal(err)
	}
	pager, err := protopage.New(protopage.Config{Issuer: issuer, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	ctx := protopage.WithCall(context.Background(), protopage.Call{
		Method: "/ctoken.protopage.example.v1.LibraryService/ListBooks",
		Caller: func(context.Context) (string, error) { return "alice", nil },
	})

	// Page 1: no token; the handler served books up to ID "b2".
	req := &librarypb.ListBooksRequest{Parent: "shelves/sf", Filter: "Le Guin", PageSize: 2}
	page, err := pager.Start(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	next, err := page.NextMessage(&librarypb.BookKey{Id: "b2"})
	if err != nil {
		log.Fatal(err)
	}

	// Page 2, with a bigger page: resumes after "b2".
	req.PageToken, req.PageSize = next, 10
	page, err = pager.Start(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	var after librarypb.BookKey
	if err := page.StateMessage(&after); err != nil {
		log.Fatal(err)
	}
	fmt.Println("page", page.Index(), "after", after.Id)

	// The same token with another filter is refused.
	req.Filter = "Lem"
	_, err = pager.Start(ctx, req)
	fmt.Println(errors.Is(err, protopage.ErrRequestChanged), ctoken.Reason(err))
	// Output:
	// page 1 after b2
	// true forged or wrong scope (tool, caller or arguments)
}
