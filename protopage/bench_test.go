package protopage_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
)

// benchRequest is a typical List request: parent, filter, order, an
// optional field, and a page token for page 2.
func benchRequest(b *testing.B, f *fixture) *librarypb.ListBooksRequest {
	req := &librarypb.ListBooksRequest{Parent: "shelves/science-fiction", Filter: "author = \"Le Guin\"", OrderBy: "title", PageSize: 25, MinYear: minYear(1960)}
	page, err := f.Pager.Start(callCtx(listMethod, "alice@example.com"), req)
	if err != nil {
		b.Fatal(err)
	}
	if req.PageToken, err = page.NextMessage(&librarypb.BookKey{Title: "The Lathe of Heaven", Id: "b00000042"}); err != nil {
		b.Fatal(err)
	}
	return req
}

// BenchmarkPager measures what protopage adds to one List call (Start
// verifying page 2's token, the state unmarshalled, Next issuing page 3's),
// its fingerprint alone, and the floor: SHA-256 of the same fingerprint
// input plus two HMAC-SHA256 of the token's bytes (one verify, one issue).
func BenchmarkPager(b *testing.B) {
	f := newFixture(b, protopage.Config{})
	req := benchRequest(b, f)
	ctx := callCtx(listMethod, "alice@example.com")
	b.Run("start+next", func(b *testing.B) {
		b.ReportAllocs()
		var key librarypb.BookKey
		for b.Loop() {
			page, err := f.Pager.Start(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			if err := page.StateMessage(&key); err != nil {
				b.Fatal(err)
			}
			if _, err := page.NextMessage(&key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Pager.Fingerprint(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	input, err := protopage.FingerprintInput(f.Pager, req)
	if err != nil {
		b.Fatal(err)
	}
	token, err := base64.RawURLEncoding.DecodeString(req.PageToken)
	if err != nil {
		b.Fatal(err)
	}
	key := ctoken.RandomKey()
	b.Run("floor-sha256+2hmac", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(input) + 2*len(token)))
		h := hmac.New(sha256.New, key)
		var sum [sha256.Size]byte
		for b.Loop() {
			sha256.Sum256(input)
			for range 2 {
				h.Reset()
				h.Write(token)
				h.Sum(sum[:0])
			}
		}
	})
	b.Logf("fingerprint input %d bytes, token %d bytes (%d encoded)", len(input), len(token), len(req.PageToken))
}
