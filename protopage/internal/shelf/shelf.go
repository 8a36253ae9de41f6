// Package shelf is the example List handler that protopage's tests and
// examples serve over every transport: a keyset listing of books, in
// memory, with a filter, two orders and an optional field.
package shelf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
)

// Page size bounds of ListBooks (AIP-158: 0 means the default).
const (
	DefaultPageSize = 10
	MaxPageSize     = 100
)

// ErrBadRequest reports a request the handler refuses before paging (an
// unknown order_by, a negative page_size); transports map it to
// InvalidArgument.
var ErrBadRequest = errors.New("shelf: bad request")

// Shelf serves ListBooks over a fixed set of books.
type Shelf struct {
	Pager *protopage.Pager
	Books []*librarypb.Book
}

// Books returns n books on two shelves, "shelves/a" (even) and
// "shelves/b" (odd), with repeated titles and years so that the orders need
// their tie-breaker (the ID).
func Books(n int) []*librarypb.Book {
	authors := []string{"Ada Lovelace", "Grace Hopper", "Barbara Liskov"}
	out := make([]*librarypb.Book, n)
	for i := range out {
		shelf := "shelves/a"
		if i%2 == 1 {
			shelf = "shelves/b"
		}
		out[i] = &librarypb.Book{
			Id:     fmt.Sprintf("b%03d", i),
			Shelf:  shelf,
			Title:  fmt.Sprintf("Title %02d", (i*7)%11),
			Author: authors[i%len(authors)],
			Year:   int32(1950 + (i*5)%13),
		}
	}
	return out
}

// key is the sort key of b under order.
func key(b *librarypb.Book, order string) *librarypb.BookKey {
	k := &librarypb.BookKey{Id: b.Id}
	if order == "year" {
		k.Year = b.Year
	} else {
		k.Title = b.Title
	}
	return k
}

func compareKeys(a, b *librarypb.BookKey) int {
	return cmp.Or(cmp.Compare(a.Year, b.Year), cmp.Compare(a.Title, b.Title), cmp.Compare(a.Id, b.Id))
}

// Match reports whether b is in the listing req asks for (paging aside).
func Match(req *librarypb.ListBooksRequest, b *librarypb.Book) bool {
	return b.Shelf == req.Parent &&
		strings.Contains(b.Author, req.Filter) &&
		(req.MinYear == nil || b.Year >= req.GetMinYear())
}

// Sorted returns the books of req's listing in its order, all pages.
func Sorted(books []*librarypb.Book, req *librarypb.ListBooksRequest) []*librarypb.Book {
	var out []*librarypb.Book
	for _, b := range books {
		if Match(req, b) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *librarypb.Book) int {
		return compareKeys(key(a, req.OrderBy), key(b, req.OrderBy))
	})
	return out
}

// ListBooks serves one page: it resumes after the sort key the page token
// carries and issues the next token from the last book served.
func (s *Shelf) ListBooks(ctx context.Context, req *librarypb.ListBooksRequest) (*librarypb.ListBooksResponse, error) {
	if req.OrderBy != "" && req.OrderBy != "title" && req.OrderBy != "year" {
		return nil, fmt.Errorf("%w: order_by must be title or year", ErrBadRequest)
	}
	size := int(req.PageSize)
	switch {
	case size < 0:
		return nil, fmt.Errorf("%w: page_size is negative", ErrBadRequest)
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	page, err := s.Pager.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	var after librarypb.BookKey
	if err := page.StateMessage(&after); err != nil {
		return nil, err
	}
	resp := &librarypb.ListBooksResponse{}
	for _, b := range Sorted(s.Books, req) {
		if !page.First() && compareKeys(key(b, req.OrderBy), &after) <= 0 {
			continue
		}
		if len(resp.Books) == size {
			last := resp.Books[size-1]
			resp.NextPageToken, err = page.NextMessage(key(last, req.OrderBy))
			return resp, err
		}
		resp.Books = append(resp.Books, b)
	}
	return resp, nil
}
