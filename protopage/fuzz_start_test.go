package protopage_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"google.golang.org/protobuf/proto"
)

// FuzzStart feeds Pager.Start any page_token with any request: it never
// panics; an empty token is the first page; anything else is accepted or
// refused with ErrTokenInvalid, ErrTokenExpired or ErrRequestChanged
// (never a server fault), whose text is fixed; and a genuine token (genuine
// set: the fuzzer's token is replaced by one issued for base) is accepted
// exactly when the request's fingerprint is base's, with its state intact.
func FuzzStart(f *testing.F) {
	fx := newFixture(f, protopage.Config{})
	pager, err := protopage.New(protopage.Config{Issuer: fx.Issuer, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	base := listReq()
	page, err := pager.Start(callCtx(listMethod, "alice"), base)
	if err != nil {
		f.Fatal(err)
	}
	key := &librarypb.BookKey{Title: "Title 03", Id: "b007"}
	genuine, err := page.NextMessage(key)
	if err != nil {
		f.Fatal(err)
	}
	baseFP, err := pager.Fingerprint(base)
	if err != nil {
		f.Fatal(err)
	}
	wire := func(r *librarypb.ListBooksRequest) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(genuine, wire(base), false)
	f.Add("", wire(base), true)
	f.Add("", wire(&librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 9, Filter: "a", OrderBy: "title"}), true)
	f.Add("", wire(&librarypb.ListBooksRequest{Parent: "shelves/a", Filter: "b", OrderBy: "title"}), true)
	f.Add(genuine[:len(genuine)-4], wire(base), false)
	f.Add("", wire(&librarypb.ListBooksRequest{}), false)
	f.Fuzz(func(t *testing.T, token string, reqWire []byte, useGenuine bool) {
		var req librarypb.ListBooksRequest
		if proto.Unmarshal(reqWire, &req) != nil {
			return
		}
		if useGenuine {
			token = genuine
		}
		req.PageToken = token
		pg, err := pager.Start(callCtx(listMethod, "alice"), &req)
		if token == "" {
			if err != nil || !pg.First() {
				t.Fatalf("an empty page_token is not the first page: %v", err)
			}
			return
		}
		if err != nil {
			kinds := []error{protopage.ErrTokenInvalid, protopage.ErrTokenExpired, protopage.ErrRequestChanged}
			matched := 0
			for _, k := range kinds {
				if errors.Is(err, k) {
					matched++
					if err.Error() != k.Error() {
						t.Fatalf("error text %q, want the fixed %q", err, k)
					}
				}
			}
			if matched != 1 {
				t.Fatalf("refusal %v (%v) is not exactly one of the client's kinds", err, errors.Unwrap(err))
			}
		}
		if !useGenuine {
			return
		}
		fp, ferr := pager.Fingerprint(&req)
		if ferr != nil {
			t.Fatal(ferr)
		}
		if same := fp == baseFP; same != (err == nil) || (!same && !errors.Is(err, protopage.ErrRequestChanged)) {
			t.Fatalf("same fingerprint %v, Start: %v", same, err)
		}
		if err == nil {
			var got librarypb.BookKey
			if err := pg.StateMessage(&got); err != nil || !proto.Equal(&got, key) || pg.First() || pg.Index() != 1 {
				t.Fatalf("state %v (%v), first %v, index %d", &got, err, pg.First(), pg.Index())
			}
		}
	})
}
