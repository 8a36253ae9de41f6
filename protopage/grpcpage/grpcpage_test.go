package grpcpage_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/grpcpage"
	"github.com/ctoken/ctoken/protopage/grpcpage/examples/librarygrpc"
	"github.com/ctoken/ctoken/protopage/internal/pagetest"
	"github.com/ctoken/ctoken/protopage/internal/shelf"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// server is the gRPC face of the example shelf.
type server struct {
	librarygrpc.UnimplementedLibraryServiceServer
	shelf *shelf.Shelf
}

func (s *server) ListBooks(ctx context.Context, req *librarypb.ListBooksRequest) (*librarypb.ListBooksResponse, error) {
	resp, err := s.shelf.ListBooks(ctx, req)
	if errors.Is(err, shelf.ErrBadRequest) {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return resp, err
}

// metadataCaller takes the caller from the "x-caller" metadata: a stand-in
// for real authentication, for tests only.
func metadataCaller(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-caller"); len(v) == 1 {
		return v[0], nil
	}
	return "", errors.New("no x-caller")
}

func as(caller string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-caller", caller)
}

// start serves the shelf over gRPC on a loopback port and returns a client.
func start(t testing.TB, pager *protopage.Pager, books []*librarypb.Book) librarygrpc.LibraryServiceClient {
	t.Helper()
	intercept, err := grpcpage.UnaryServerInterceptor(metadataCaller)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(intercept))
	librarygrpc.RegisterLibraryServiceServer(srv, &server{shelf: &shelf.Shelf{Pager: pager, Books: books}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return librarygrpc.NewLibraryServiceClient(conn)
}

func TestGRPCPagesToTheEndHonoringPageSizeChanges(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	books := shelf.Books(60)
	client := start(t, f.Pager, books)
	req := &librarypb.ListBooksRequest{Parent: "shelves/b", OrderBy: "year", PageSize: 4}
	want := shelf.Sorted(books, req)
	var got []*librarypb.Book
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatal("more pages than books")
		}
		resp, err := client.ListBooks(as("alice"), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.NextPageToken != "" && len(resp.Books) != int(req.PageSize) {
			t.Fatalf("page %d: %d books, page_size %d", pages, len(resp.Books), req.PageSize)
		}
		got = append(got, resp.Books...)
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
		req.PageSize = int32(pages%3 + 2) // AIP-158: honored, not bound
	}
	if len(got) != len(want) {
		t.Fatalf("%d books, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("book %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestGRPCRefusesWithInvalidArgumentAndNoReason(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	client := start(t, f.Pager, shelf.Books(30))
	req := &librarypb.ListBooksRequest{Parent: "shelves/a", Filter: "a", PageSize: 2}
	first, err := client.ListBooks(as("alice"), req)
	if err != nil || first.NextPageToken == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	for _, r := range f.Refusals(t, req, first.NextPageToken) {
		t.Run(r.Name, func(t *testing.T) {
			f.Advance(r.Advance)
			t.Cleanup(func() { f.Advance(-r.Advance) })
			caller := "alice"
			if r.Caller != "" {
				caller = r.Caller
			}
			sent := r.Request()
			before := len(f.Log.String())
			resp, err := client.ListBooks(as(caller), sent)
			st, _ := status.FromError(err)
			if resp != nil || st.Code() != codes.InvalidArgument {
				t.Fatalf("ListBooks = %v, %v; want InvalidArgument", resp, err)
			}
			pagetest.CheckRefusal(t, st.Message(), r.Want, f.Log.String()[before:], sent.PageToken, caller)
		})
	}
}

// TestGRPCBindsTheFullMethodName sends a token issued for
// pagetest.ListMethod outside any transport: the interceptor must name the
// call exactly so for it to verify.
func TestGRPCBindsTheFullMethodName(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	client := start(t, f.Pager, shelf.Books(10))
	req := &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 2}
	req.PageToken = f.TokenFor(t, req, "alice")
	if _, err := client.ListBooks(as("alice"), req); err != nil {
		t.Fatalf("a token for %s: %v", pagetest.ListMethod, err)
	}
}

func TestGRPCRefusesARequestWithoutCaller(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	client := start(t, f.Pager, shelf.Books(10))
	_, err := client.ListBooks(context.Background(), &librarypb.ListBooksRequest{Parent: "shelves/a"})
	if st, _ := status.FromError(err); st.Code() != codes.Unauthenticated {
		t.Fatalf("no caller: %v", err)
	} else {
		pagetest.CheckClientMessage(t, st.Message(), protopage.ErrNoCaller)
	}
}

func TestGRPCMapsServerFaultsToInternalAndPassesOtherErrors(t *testing.T) {
	// A Pager told of page fields the request does not have is a server
	// fault: Internal, with a fixed message.
	f := pagetest.New(t, protopage.Config{PageTokenField: "cursor"})
	client := start(t, f.Pager, shelf.Books(10))
	_, err := client.ListBooks(as("alice"), &librarypb.ListBooksRequest{Parent: "shelves/a"})
	if st, _ := status.FromError(err); st.Code() != codes.Internal || st.Message() != "internal error" {
		t.Fatalf("server fault: %v", err)
	}
	// The handler's own status passes through unchanged.
	_, err = client.ListBooks(as("alice"), &librarypb.ListBooksRequest{Parent: "shelves/a", OrderBy: "price"})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "shelf: bad request: order_by must be title or year" {
		t.Fatalf("handler error: %v", err)
	}
}

func TestStatusMapsEveryKindWhateverTheWrapping(t *testing.T) {
	other := errors.New("other")
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{protopage.ErrTokenInvalid, codes.InvalidArgument, protopage.ErrTokenInvalid.Error()},
		{fmt.Errorf("listing shelves/a: %w", protopage.ErrTokenExpired), codes.InvalidArgument, protopage.ErrTokenExpired.Error()},
		{fmt.Errorf("x: %w", protopage.ErrRequestChanged), codes.InvalidArgument, protopage.ErrRequestChanged.Error()},
		{protopage.ErrNoCaller, codes.Unauthenticated, protopage.ErrNoCaller.Error()},
		{fmt.Errorf("listing: %w", protopage.ErrKeyTooLarge), codes.FailedPrecondition, protopage.ErrKeyTooLarge.Error()},
		{fmt.Errorf("secret detail: %w", protopage.ErrServer), codes.Internal, "internal error"},
	} {
		st, _ := status.FromError(grpcpage.Status(tc.err))
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("Status(%v) = %v %q, want %v %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
	if grpcpage.Status(nil) != nil || grpcpage.Status(other) != other {
		t.Error("Status changed nil or a foreign error")
	}
}

func TestUnaryServerInterceptorRefusesNilCaller(t *testing.T) {
	if i, err := grpcpage.UnaryServerInterceptor(nil); i != nil || !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("nil caller: %v", err)
	}
}

// TestGRPCAnswersAKeyTooLargeWithFailedPreconditionThatAnotherPageSizePasses:
// a page that would end on a book whose sort key is over the state budget
// (a 250-byte title, as the handler puts the whole title in the key) is
// FailedPrecondition with the fixed text naming what the client can do,
// every time it is asked; the same request with another page_size ends on
// another book, and the listing completes, every book once.
func TestGRPCAnswersAKeyTooLargeWithFailedPreconditionThatAnotherPageSizePasses(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	books := shelf.Books(12)
	books[2].Title = "A " + strings.Repeat("long title ", 23)[:248] // first in title order, on shelves/a
	client := start(t, f.Pager, books)
	req := &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 1}
	for range 2 { // the same request, the same answer: no retry helps
		before := len(f.Log.String())
		resp, err := client.ListBooks(as("alice"), req)
		st, _ := status.FromError(err)
		if resp != nil || st.Code() != codes.FailedPrecondition {
			t.Fatalf("a page ending on the long title: %v, %v; want FailedPrecondition", resp, err)
		}
		pagetest.CheckRefusal(t, st.Message(), protopage.ErrKeyTooLarge, f.Log.String()[before:], "", "alice")
	}
	want := shelf.Sorted(books, req)
	var got []*librarypb.Book
	req.PageSize = 2 // the page ends on the book after it
	for {
		resp, err := client.ListBooks(as("alice"), req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.Books...)
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	if len(got) != len(want) {
		t.Fatalf("%d books, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("book %d: %v, want %v", i, got[i], want[i])
		}
	}
}
