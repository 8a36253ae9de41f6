package connectpage_test

import (
	"cmp"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/connectpage"
	"github.com/ctoken/ctoken/protopage/connectpage/examples/librarypbconnect"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/internal/pagetest"
	"github.com/ctoken/ctoken/protopage/internal/shelf"
)

// plainHandler is the floor: the same listing with an unsigned page token
// (the last book's title and ID in the clear), no interceptor, no ctoken.
type plainHandler struct{ books []*librarypb.Book }

func (h *plainHandler) ListBooks(_ context.Context, r *connect.Request[librarypb.ListBooksRequest]) (*connect.Response[librarypb.ListBooksResponse], error) {
	req := r.Msg
	resp := &librarypb.ListBooksResponse{}
	title, id, _ := strings.Cut(req.PageToken, "\x00")
	for _, b := range shelf.Sorted(h.books, req) {
		if req.PageToken != "" && cmp.Or(cmp.Compare(b.Title, title), cmp.Compare(b.Id, id)) <= 0 {
			continue
		}
		if len(resp.Books) == int(req.PageSize) {
			last := resp.Books[len(resp.Books)-1]
			resp.NextPageToken = last.Title + "\x00" + last.Id
			break
		}
		resp.Books = append(resp.Books, b)
	}
	return connect.NewResponse(resp), nil
}

// BenchmarkConnectListBooks is one List call (page 2 of 10 books) over
// loopback HTTP/1.1 with the Connect protocol and binary protobuf: with
// protopage (interceptor, Start, Next) and without (the same listing with
// an unsigned token).
func BenchmarkConnectListBooks(b *testing.B) {
	books := shelf.Books(200)
	run := func(b *testing.B, svc librarypbconnect.LibraryServiceHandler, opts ...connect.HandlerOption) {
		mux := http.NewServeMux()
		mux.Handle(librarypbconnect.NewLibraryServiceHandler(svc, opts...))
		srv := httptest.NewServer(mux)
		b.Cleanup(srv.Close)
		client := librarypbconnect.NewLibraryServiceClient(srv.Client(), srv.URL)
		req := &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 10}
		first, err := call(client, "alice@example.com", req)
		if err != nil {
			b.Fatal(err)
		}
		req.PageToken = first.NextPageToken
		b.ReportAllocs()
		for b.Loop() {
			resp, err := call(client, "alice@example.com", req)
			if err != nil || len(resp.Books) != int(req.PageSize) {
				b.Fatal(resp, err)
			}
		}
	}
	b.Run("plain", func(b *testing.B) { run(b, &plainHandler{books: books}) })
	b.Run("protopage", func(b *testing.B) {
		f := pagetest.New(b, protopage.Config{})
		intercept, err := connectpage.NewInterceptor(headerCaller)
		if err != nil {
			b.Fatal(err)
		}
		run(b, &handler{&shelf.Shelf{Pager: f.Pager, Books: books}}, connect.WithInterceptors(intercept))
	})
}
