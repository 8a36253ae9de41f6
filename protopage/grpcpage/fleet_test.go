package grpcpage_test

import (
	"log/slog"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/grpcpage/examples/librarygrpc"
	"github.com/ctoken/ctoken/protopage/internal/shelf"
	"google.golang.org/protobuf/proto"
)

// TestGRPCFleetOfTwoThroughAKeyRotation runs two instances, each with its
// own issuer and key source but the same keys and Session, and pages one
// listing alternating between them while the keys rotate in two passes
// (docs/operations.md): the new key first as a previous key everywhere,
// then as primary on one instance and then the other. Every book comes
// once, in order.
func TestGRPCFleetOfTwoThroughAKeyRotation(t *testing.T) {
	oldKey, newKey := ctoken.RandomKey(), ctoken.RandomKey()
	ring := func(primary []byte, previous ...[]byte) *ctoken.Keyring {
		kr, err := ctoken.NewKeyring(primary, previous...)
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	books := shelf.Books(50)
	type instance struct {
		keys   *ctoken.KeySource
		client librarygrpc.LibraryServiceClient
	}
	var fleet [2]instance
	for i := range fleet {
		ks, err := ctoken.NewKeySource(ring(oldKey))
		if err != nil {
			t.Fatal(err)
		}
		issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{KeySource: ks, Session: []byte("library-fleet")})
		if err != nil {
			t.Fatal(err)
		}
		pager, err := protopage.New(protopage.Config{Issuer: issuer, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		fleet[i] = instance{keys: ks, client: start(t, pager, books)}
	}
	rotation := []func(){
		func() {}, // both: old
		func() { // pass 1: both learn the new key, verify-only
			for _, in := range fleet {
				if err := in.keys.Swap(ring(oldKey, newKey)); err != nil {
					t.Fatal(err)
				}
			}
		},
		func() { // pass 2, instance 0 first: signs with the new key
			if err := fleet[0].keys.Swap(ring(newKey, oldKey)); err != nil {
				t.Fatal(err)
			}
		},
		func() {}, // instance 1 still signs with the old key; 0 verifies it
		func() {
			if err := fleet[1].keys.Swap(ring(newKey, oldKey)); err != nil {
				t.Fatal(err)
			}
		},
	}
	req := &librarypb.ListBooksRequest{Parent: "shelves/a", OrderBy: "title", PageSize: 3}
	want := shelf.Sorted(books, req)
	var got []*librarypb.Book
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatal("more pages than books")
		}
		if page < len(rotation) {
			rotation[page]()
		}
		resp, err := fleet[page%2].client.ListBooks(as("alice"), req)
		if err != nil {
			t.Fatalf("page %d on instance %d: %v", page+1, page%2, err)
		}
		got = append(got, resp.Books...)
		if resp.NextPageToken == "" {
			if page < len(rotation) {
				t.Fatalf("the listing ended after %d pages, before the rotation did", page+1)
			}
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
