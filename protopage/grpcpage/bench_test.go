package grpcpage_test

import (
	"cmp"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/grpcpage"
	"github.com/ctoken/ctoken/protopage/grpcpage/examples/librarygrpc"
	"github.com/ctoken/ctoken/protopage/internal/pagetest"
	"github.com/ctoken/ctoken/protopage/internal/shelf"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// plainServer is the floor: the same listing with an unsigned page token
// (the last book's title and ID in the clear), no interceptor, no ctoken.
type plainServer struct {
	librarygrpc.UnimplementedLibraryServiceServer
	books []*librarypb.Book
}

func (s *plainServer) ListBooks(_ context.Context, req *librarypb.ListBooksRequest) (*librarypb.ListBooksResponse, error) {
	resp := &librarypb.ListBooksResponse{}
	title, id, _ := strings.Cut(req.PageToken, "\x00")
	for _, b := range shelf.Sorted(s.books, req) {
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
	return resp, nil
}

func dial(b *testing.B, srv *grpc.Server) librarygrpc.LibraryServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return librarygrpc.NewLibraryServiceClient(conn)
}

// BenchmarkGRPCListBooks is one List call (page 2 of 10 books) over
// loopback: with protopage (interceptor, Start, Next) and without (the
// same listing with the last ID as an unsigned token). The difference is
// what protopage adds to a call; BenchmarkPager in protopage measures that
// part alone beside SHA-256 + HMAC of the same bytes.
func BenchmarkGRPCListBooks(b *testing.B) {
	books := shelf.Books(200)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-caller", "alice@example.com")
	run := func(b *testing.B, client librarygrpc.LibraryServiceClient, req *librarypb.ListBooksRequest) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.ListBooks(ctx, req)
			if err != nil || len(resp.Books) != int(req.PageSize) {
				b.Fatal(resp, err)
			}
		}
	}
	b.Run("plain", func(b *testing.B) {
		srv := grpc.NewServer()
		librarygrpc.RegisterLibraryServiceServer(srv, &plainServer{books: books})
		client := dial(b, srv)
		req := &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 10}
		first, err := client.ListBooks(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		req.PageToken = first.NextPageToken
		run(b, client, req)
	})
	b.Run("protopage", func(b *testing.B) {
		f := pagetest.New(b, protopage.Config{})
		intercept, err := grpcpage.UnaryServerInterceptor(metadataCaller)
		if err != nil {
			b.Fatal(err)
		}
		srv := grpc.NewServer(grpc.UnaryInterceptor(intercept))
		librarygrpc.RegisterLibraryServiceServer(srv, &server{shelf: &shelf.Shelf{Pager: f.Pager, Books: books}})
		client := dial(b, srv)
		req := &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 10}
		first, err := client.ListBooks(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		req = proto.Clone(req).(*librarypb.ListBooksRequest)
		req.PageToken = first.NextPageToken
		run(b, client, req)
	})
}
