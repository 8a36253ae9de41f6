package connectpage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/connectpage"
	"github.com/ctoken/ctoken/protopage/connectpage/examples/librarypbconnect"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
)

// libraryHandler lists the books of a shelf by ID, a page at a time.
type libraryHandler struct {
	pager *protopage.Pager
	books []*librarypb.Book // sorted by ID
}

func (h *libraryHandler) ListBooks(ctx context.Context, r *connect.Request[librarypb.ListBooksRequest]) (*connect.Response[librarypb.ListBooksResponse], error) {
	req := r.Msg
	page, err := h.pager.Start(ctx, req) // verifies req.PageToken, if any
	if err != nil {
		return nil, err // the interceptor turns it into a Connect error
	}
	var after librarypb.BookKey // the last book of the previous page
	if err := page.StateMessage(&after); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size <= 0 {
		size = 2
	}
	resp := &librarypb.ListBooksResponse{}
	for _, b := range h.books {
		if b.Shelf != req.Parent || !strings.Contains(b.Author, req.Filter) || (!page.First() && b.Id <= after.Id) {
			continue
		}
		if len(resp.Books) == size {
			if resp.NextPageToken, err = page.NextMessage(&librarypb.BookKey{Id: resp.Books[size-1].Id}); err != nil {
				return nil, err
			}
			break
		}
		resp.Books = append(resp.Books, b)
	}
	return connect.NewResponse(resp), nil
}

// userFromHeader stands in for authentication: a real server takes the
// caller from what its authentication checked.
func userFromHeader(_ context.Context, req connect.AnyRequest) (string, error) {
	if u := req.Header().Get("X-User"); u != "" {
		return u, nil
	}
	return "", errors.New("no user")
}

// A Connect server whose List procedure pages with protopage, paged through
// by the Connect client, then by a plain HTTP POST with a JSON body (as
// curl sends it) carrying a token for another filter.
func ExampleNewInterceptor() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // a fleet shares its keys: ctoken.KeyringFromEnv
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
	intercept, err := connectpage.NewInterceptor(userFromHeader)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(librarypbconnect.NewLibraryServiceHandler(&libraryHandler{pager: pager, books: []*librarypb.Book{
		{Id: "1", Shelf: "shelves/sf", Author: "Le Guin", Title: "The Dispossessed"},
		{Id: "2", Shelf: "shelves/sf", Author: "Lem", Title: "Solaris"},
		{Id: "3", Shelf: "shelves/sf", Author: "Le Guin", Title: "The Lathe of Heaven"},
	}}, connect.WithInterceptors(intercept)))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(lis)
	defer srv.Close()
	url := "http://" + lis.Addr().String()

	client := librarypbconnect.NewLibraryServiceClient(http.DefaultClient, url)
	req := connect.NewRequest(&librarypb.ListBooksRequest{Parent: "shelves/sf", PageSize: 2})
	req.Header().Set("X-User", "alice")
	var token string
	for {
		resp, err := client.ListBooks(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		for _, b := range resp.Msg.Books {
			fmt.Println(b.Title)
		}
		if token == "" {
			token = resp.Msg.NextPageToken
		}
		if resp.Msg.NextPageToken == "" {
			break
		}
		req.Msg.PageToken = resp.Msg.NextPageToken
	}

	body := fmt.Sprintf(`{"parent": "shelves/sf", "filter": "Lem", "pageToken": %q}`, token)
	post, err := http.NewRequest(http.MethodPost, url+librarypbconnect.LibraryServiceListBooksProcedure, strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	post.Header.Set("Content-Type", "application/json")
	post.Header.Set("X-User", "alice")
	resp, err := http.DefaultClient.Do(post)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, string(answer))
	// Output:
	// The Dispossessed
	// Solaris
	// The Lathe of Heaven
	// 400 {"code":"invalid_argument","message":"page_token does not match this request: it was issued for other fields, another caller or another method, or altered; repeat the request it was issued for (only page_size and skip may change), or start over without a page_token"}
}
