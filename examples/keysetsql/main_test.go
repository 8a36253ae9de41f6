package main

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
)

// fixture is a store of books with 1 KiB titles on shelf "a", served over
// HTTP and gRPC.
type fixture struct {
	store *Store
	srv   *Servers
	ids   []int64 // the books the fixture inserted, in insertion order
}

func newFixture(t *testing.T, books int) *fixture {
	t.Helper()
	store, err := Open(t.Context(), filepath.Join(t.TempDir(), "books.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.DB.Close() })
	f := &fixture{store: store}
	for i := range books {
		id, err := store.Insert(t.Context(), "a", LongTitle(i, 1024))
		if err != nil {
			t.Fatal(err)
		}
		f.ids = append(f.ids, id)
	}
	if _, err := store.Insert(t.Context(), "b", LongTitle(1, 1024)); err != nil { // another shelf: never listed
		t.Fatal(err)
	}
	if f.srv, err = Start(store, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.srv.Close)
	return f
}

// keyOf is the sort key of a title as Go computes it: the first keyChars
// characters. The test compares the listing's order with it, so SQLite's
// substr and Go's idea of a character are checked to agree.
func keyOf(title string, id int64) TitleKey {
	n := 0
	for i := range title {
		if n == keyChars {
			return TitleKey{Title: title[:i], ID: id}
		}
		n++
	}
	return TitleKey{Title: title, ID: id}
}

func compareKeys(a, b TitleKey) int {
	return cmp.Or(strings.Compare(a.Title, b.Title), cmp.Compare(a.ID, b.ID))
}

// TestListingOfKiBTitlesIsExactWhileRowsComeAndGo lists 400 books with
// 1 KiB titles (many sharing their first 50 characters, some of 4-byte
// characters) over net/http and over gRPC, 7 a page, while between every
// two pages 2 books are inserted at random places in the order and 1 book
// (of those inserted during the listing, or of a third of the seeded ones)
// is deleted. Every book present from the first page to the last is listed
// exactly once, no book twice, in the order of (first 50 characters, id).
func TestListingOfKiBTitlesIsExactWhileRowsComeAndGo(t *testing.T) {
	f := newFixture(t, 400)
	titles := map[int64]string{} // every book ever on the shelf, for the order
	// present returns the books on the shelf now.
	present := func(t *testing.T) []int64 {
		rows, err := f.store.DB.Query(`SELECT id, title FROM books WHERE shelf = 'a'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []int64
		for rows.Next() {
			var id int64
			var title string
			if err := rows.Scan(&id, &title); err != nil {
				t.Fatal(err)
			}
			if len(title) != 1024 || !utf8.ValidString(title) {
				t.Fatalf("title of %d bytes", len(title))
			}
			titles[id] = title
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, tr := range []struct {
		name string
		list func(ctx context.Context, between func() error) ([]int64, int, error)
	}{
		{"net/http", func(ctx context.Context, between func() error) ([]int64, int, error) {
			return ListHTTP(ctx, f.srv.HTTPURL, "user:42", "a", 7, between)
		}},
		{"gRPC", func(ctx context.Context, between func() error) ([]int64, int, error) {
			return ListGRPC(ctx, f.srv.GRPC, "user:42", "a", 7, between)
		}},
	} {
		t.Run(tr.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tr.name))))
			// Volatile: a third of the seeded books, and every book
			// inserted during the listing; the rest must all be listed.
			var volatile []int64
			stable := map[int64]bool{}
			for _, id := range present(t) {
				if id%3 == 0 {
					volatile = append(volatile, id)
				} else {
					stable[id] = true
				}
			}
			inserted, deleted := 0, 0
			between := func() error {
				for range 2 {
					title := LongTitle(rng.IntN(1_000_000), 1024)
					id, err := f.store.Insert(t.Context(), "a", title)
					if err != nil {
						return err
					}
					titles[id] = title
					volatile = append(volatile, id)
					inserted++
				}
				i := rng.IntN(len(volatile))
				if err := f.store.Delete(t.Context(), volatile[i]); err != nil {
					return err
				}
				volatile = slices.Delete(volatile, i, i+1)
				deleted++
				return nil
			}
			ids, pages, err := tr.list(t.Context(), between)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			twice, outOfOrder := 0, 0
			for i, id := range ids {
				if seen[id]++; seen[id] == 2 {
					twice++
				}
				if i > 0 && compareKeys(keyOf(titles[ids[i-1]], ids[i-1]), keyOf(titles[id], id)) >= 0 {
					outOfOrder++
				}
			}
			missing := 0
			for id := range stable {
				if seen[id] == 0 {
					missing++
				}
			}
			t.Logf("%d books listed on %d pages (%d inserted, %d deleted meanwhile): %d missing, %d twice, %d out of order",
				len(ids), pages, inserted, deleted, missing, twice, outOfOrder)
			if missing != 0 || twice != 0 || outOfOrder != 0 || pages < 400/7 || inserted == 0 {
				t.Fatal("the listing is not exact")
			}
		})
	}
}

// TestStartRefusesAKeyThatMightNotFitACursor: the startup check passes
// for the 50 characters of the example and refuses 60 (240 bytes of
// 4-byte characters, with the id and the encoding over the 256-byte
// budget) with ctoken.ErrOpaqueStateTooLarge, before any listing.
func TestStartRefusesAKeyThatMightNotFitACursor(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	pager, err := protopage.New(protopage.Config{Issuer: issuer, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkKeyBudget(keyChars, issuer, pager); err != nil {
		t.Fatalf("%d characters: %v", keyChars, err)
	}
	if err := checkKeyBudget(60, issuer, pager); !errors.Is(err, ctoken.ErrOpaqueStateTooLarge) || !strings.Contains(err.Error(), "lower keyChars") {
		t.Fatalf("60 characters: %v, want ErrOpaqueStateTooLarge naming the fix", err)
	}
}

// TestQueryUsesTheIndex: the page query reads the expression index, not
// the whole table (the bounded key costs no sort).
func TestQueryUsesTheIndex(t *testing.T) {
	f := newFixture(t, 0)
	rows, err := f.store.DB.Query(`EXPLAIN QUERY PLAN `+pageQuery, "a", "", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "USING INDEX books_by_title") || strings.Contains(p, "TEMP B-TREE") {
		t.Fatalf("plan %q, want a search of books_by_title and no sort", p)
	}
}

func TestRunListsBothTransports(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), &out, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if want := "HTTP: 100 books of 1 KiB titles on 15 pages\ngRPC: 100 books of 1 KiB titles on 15 pages\n"; out.String() != want {
		t.Fatalf("run printed %q, want %q", out.String(), want)
	}
}
