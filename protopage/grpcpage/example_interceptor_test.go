package grpcpage_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/grpcpage"
	"github.com/ctoken/ctoken/protopage/grpcpage/examples/librarygrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// libraryServer lists the books of a shelf by ID, a page at a time.
type libraryServer struct {
	librarygrpc.UnimplementedLibraryServiceServer
	pager *protopage.Pager
	books []*librarypb.Book // sorted by ID
}

func (s *libraryServer) ListBooks(ctx context.Context, req *librarypb.ListBooksRequest) (*librarypb.ListBooksResponse, error) {
	page, err := s.pager.Start(ctx, req) // verifies req.PageToken, if any
	if err != nil {
		return nil, err // the interceptor turns it into a status
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
	for _, b := range s.books {
		if b.Shelf != req.Parent || !strings.Contains(b.Author, req.Filter) || (!page.First() && b.Id <= after.Id) {
			continue
		}
		if len(resp.Books) == size {
			resp.NextPageToken, err = page.NextMessage(&librarypb.BookKey{Id: resp.Books[size-1].Id})
			break
		}
		resp.Books = append(resp.Books, b)
	}
	return resp, err
}

// userFromMetadata stands in for authentication: a real server takes the
// caller from what its authentication checked (a token, a certificate).
func userFromMetadata(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if u := md.Get("x-user"); len(u) == 1 {
		return u[0], nil
	}
	return "", fmt.Errorf("no user")
}

// A gRPC server whose List method pages with protopage, and a client that
// pages through it, then changes the filter mid-listing.
func ExampleUnaryServerInterceptor() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // a fleet shares its keys: ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("library-v1")})
	if err != nil {
		log.Fatal(err)
	}
	// Reasons go to the server's log (here stdout, without the time).
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	pager, err := protopage.New(protopage.Config{Issuer: issuer, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	intercept, err := grpcpage.UnaryServerInterceptor(userFromMetadata)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(intercept))
	librarygrpc.RegisterLibraryServiceServer(srv, &libraryServer{pager: pager, books: []*librarypb.Book{
		{Id: "1", Shelf: "shelves/sf", Author: "Le Guin", Title: "The Dispossessed"},
		{Id: "2", Shelf: "shelves/sf", Author: "Lem", Title: "Solaris"},
		{Id: "3", Shelf: "shelves/sf", Author: "Le Guin", Title: "The Lathe of Heaven"},
		{Id: "4", Shelf: "shelves/sf", Author: "Butler", Title: "Kindred"},
		{Id: "5", Shelf: "shelves/sf", Author: "Le Guin", Title: "A Wizard of Earthsea"},
	}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := librarygrpc.NewLibraryServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")

	req := &librarypb.ListBooksRequest{Parent: "shelves/sf", PageSize: 2}
	for {
		resp, err := client.ListBooks(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		for _, b := range resp.Books {
			fmt.Println(b.Title)
		}
		if resp.NextPageToken == "" {
			break
		}
		fmt.Println("--")
		req.PageToken = resp.NextPageToken
		if req.Filter == "" && len(resp.Books) == 2 && resp.Books[0].Id == "1" {
			second := &librarypb.ListBooksRequest{Parent: req.Parent, PageToken: req.PageToken, Filter: "Le Guin"}
			_, err := client.ListBooks(ctx, second)
			fmt.Println(status.Code(err), status.Convert(err).Message())
		}
	}
	// Output:
	// The Dispossessed
	// Solaris
	// --
	// level=INFO msg="protopage: page_token does not match this request: it was issued for other fields, another caller or another method, or altered; repeat the request it was issued for (only page_size and skip may change), or start over without a page_token" method=/ctoken.protopage.example.v1.LibraryService/ListBooks reason="forged or wrong scope (tool, caller or arguments)"
	// InvalidArgument page_token does not match this request: it was issued for other fields, another caller or another method, or altered; repeat the request it was issued for (only page_size and skip may change), or start over without a page_token
	// The Lathe of Heaven
	// Kindred
	// --
	// A Wizard of Earthsea
}
