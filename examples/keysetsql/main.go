// Command keysetsql lists the books of a SQLite table in title order, a
// page at a time, over net/http (ctoken's keyset cursors) and over gRPC
// (protopage and grpcpage), titles of any length: 1 KiB titles here.
//
// A cursor carries the page's last sort key, at most 256 bytes encoded
// (ctoken.CursorIssuer.StateBudget), and a title is text a user typed. So
// the listing is ordered by a bounded key, (substr(title, 1, 50), id): the
// database computes it, the cursor carries the database's value, and the
// next page is WHERE (substr(title, 1, 50), id) > (?, ?). Titles that share
// their first 50 characters are ordered by the unique id, so the order is
// total and paging stays exact whatever is inserted or deleted between
// pages; at 4 bytes a character the longest key is 200 bytes of title, and
// the server checks at startup that it fits (checkKeyBudget).
// docs/cursors.md, "A sort key of text", is this recipe.
//
//	go run ./examples/keysetsql
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	pb "github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/grpcpage"
	pbgrpc "github.com/ctoken/ctoken/protopage/grpcpage/examples/librarygrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	_ "modernc.org/sqlite"
)

// keyChars is N of the sort key (substr(title, 1, N), id): the most
// characters of a title a cursor carries. checkKeyBudget proves at startup
// that N characters of 4 bytes, the largest id and the encoding fit the
// issuer's state budget.
const keyChars = 50

// schema is the table and the index the listing reads in order. The
// expression in the index is the one in the queries, character for
// character, so that SQLite reads the index.
const schema = `
CREATE TABLE IF NOT EXISTS books (
	id    INTEGER PRIMARY KEY, -- a rowid: 1 and up, so the zero key is before every row
	shelf TEXT NOT NULL,
	title TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS books_by_title ON books (shelf, substr(title, 1, 50), id);`

// pageQuery is one page: the rows after the key, in key order. The key the
// next cursor carries is the database's substr of the last row, never a
// prefix Go cuts: the database's idea of a character is the one its
// comparison uses.
const pageQuery = `
SELECT id, title, substr(title, 1, 50) FROM books
WHERE shelf = ? AND (substr(title, 1, 50), id) > (?, ?)
ORDER BY substr(title, 1, 50), id
LIMIT ?`

// TitleKey is the sort key an HTTP cursor carries: the database's
// substr(title, 1, 50) of the page's last row, and its id. The zero key
// (the first page) is before every row.
type TitleKey struct {
	Title string
	ID    int64
}

// Book is one row.
type Book struct {
	ID    int64  `json:"id"`
	Title string `json:"title"`
}

// Store is the books table.
type Store struct{ DB *sql.DB }

// Open opens (and creates) the SQLite database at path.
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{DB: db}, nil
}

// Insert adds a book and returns its id.
func (s *Store) Insert(ctx context.Context, shelf, title string) (int64, error) {
	res, err := s.DB.ExecContext(ctx, `INSERT INTO books (shelf, title) VALUES (?, ?)`, shelf, title)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// Delete removes a book.
func (s *Store) Delete(ctx context.Context, id int64) error {
	_, err := s.DB.ExecContext(ctx, `DELETE FROM books WHERE id = ?`, id)
	return err
}

// After returns up to limit books of shelf after key, in key order, the key
// of the last, and whether more follow.
func (s *Store) After(ctx context.Context, shelf string, after TitleKey, limit int) ([]Book, TitleKey, bool, error) {
	rows, err := s.DB.QueryContext(ctx, pageQuery, shelf, after.Title, after.ID, limit+1)
	if err != nil {
		return nil, TitleKey{}, false, err
	}
	defer rows.Close()
	var books []Book
	var last TitleKey
	for rows.Next() {
		if len(books) == limit {
			return books, last, true, rows.Close()
		}
		var b Book
		if err := rows.Scan(&b.ID, &b.Title, &last.Title); err != nil {
			return nil, TitleKey{}, false, err
		}
		last.ID = b.ID
		books = append(books, b)
	}
	return books, last, false, rows.Err()
}

// checkKeyBudget refuses a key of chars characters that might not fit a
// cursor: the longest such key (every character 4 bytes in UTF-8, the
// largest id) is issued once as an HTTP cursor and measured as a gRPC
// page token's state. A server runs it at startup, so a longer N, or a
// field added to the key, stops the server instead of a listing.
func checkKeyBudget(chars int, issuer *ctoken.CursorIssuer, pager *protopage.Pager) error {
	longest := strings.Repeat("\U0010FFFF", chars)
	_, err := ctoken.IssueKeyset(issuer, ctoken.CursorScope{ToolID: "startup check"}, TitleKey{Title: longest, ID: math.MaxInt64})
	if err != nil {
		return fmt.Errorf("a sort key of %d characters does not fit a cursor (lower keyChars): %w", chars, err)
	}
	n := proto.Size(&pb.BookKey{Title: longest, Id: strconv.FormatInt(math.MinInt64, 10)})
	if n > pager.StateBudget() {
		return fmt.Errorf("a sort key of %d characters is %d bytes, over the page token budget of %d (lower keyChars): %w",
			chars, n, pager.StateBudget(), ctoken.ErrOpaqueStateTooLarge)
	}
	return nil
}

// Page is the response body of GET /v1/books.
type Page struct {
	Books      []Book `json:"books"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// HTTPServer serves GET /v1/books?shelf=a&limit=10&cursor=...; the caller
// is the X-User header (a stand-in for real authentication).
type HTTPServer struct {
	Issuer *ctoken.CursorIssuer
	Store  *Store
	Log    *slog.Logger
}

func (s *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller := r.Header.Get("X-User")
	if caller == "" {
		problem(w, http.StatusUnauthorized, "no caller")
		return
	}
	q := r.URL.Query()
	limit := 10
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			problem(w, http.StatusBadRequest, "limit must be 1 to 100")
			return
		}
		limit = n
	}
	cursor := q.Get("cursor")
	q.Del("cursor")
	q.Del("limit")
	args, err := ctoken.ArgsFingerprint(map[string][]string(q)) // every other parameter is bound
	if err != nil {
		s.refuse(w, err)
		return
	}
	scope := ctoken.CursorScope{ToolID: "GET /v1/books", CallerID: caller, Args: args}
	var after TitleKey // the first page has no cursor
	if cursor != "" {
		if after, err = ctoken.VerifyKeyset[TitleKey](s.Issuer, cursor, scope); err != nil {
			s.refuse(w, err)
			return
		}
	}
	books, last, more, err := s.Store.After(r.Context(), q.Get("shelf"), after, limit)
	if err != nil {
		s.Log.Error("listing", "err", err)
		problem(w, http.StatusInternalServerError, "internal error")
		return
	}
	page := Page{Books: books}
	if more {
		if page.NextCursor, err = ctoken.IssueKeyset(s.Issuer, scope, last); err != nil {
			s.refuse(w, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(page)
}

// refuse answers with ctoken.CursorHTTPStatus and a fixed detail per
// status; the reason goes to the log.
func (s *HTTPServer) refuse(w http.ResponseWriter, err error) {
	status := ctoken.CursorHTTPStatus(err)
	s.Log.Warn("cursor refused", "status", status, "reason", ctoken.Reason(err).String())
	switch status {
	case http.StatusGone:
		problem(w, status, "the cursor has expired: start over from the first page, without a cursor")
	case http.StatusBadRequest:
		problem(w, status, "invalid cursor: do not retry it")
	case http.StatusUnprocessableEntity: // not with a bounded key
		problem(w, status, "no cursor can be issued after this page: it ends on an item whose sort key is too long for a cursor; ask for it again with another limit, so that it ends on another item")
	default:
		problem(w, status, "internal error")
	}
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}

// GRPCServer serves LibraryService.ListBooks over the same table: parent
// "shelves/<shelf>", the same bounded key, carried as a pb.BookKey.
type GRPCServer struct {
	pbgrpc.UnimplementedLibraryServiceServer
	Pager *protopage.Pager
	Store *Store
}

func (s *GRPCServer) ListBooks(ctx context.Context, req *pb.ListBooksRequest) (*pb.ListBooksResponse, error) {
	shelf, ok := strings.CutPrefix(req.Parent, "shelves/")
	if !ok || req.PageSize < 0 {
		return nil, status.Error(codes.InvalidArgument, "parent must be shelves/<name> and page_size at least 0")
	}
	size := min(int(req.PageSize), 100)
	if size == 0 {
		size = 10
	}
	page, err := s.Pager.Start(ctx, req)
	if err != nil {
		return nil, err // the interceptor maps it
	}
	var key pb.BookKey
	if err := page.StateMessage(&key); err != nil {
		return nil, err
	}
	after := TitleKey{Title: key.Title}
	if !page.First() {
		if after.ID, err = strconv.ParseInt(key.Id, 10, 64); err != nil {
			return nil, status.Error(codes.Internal, "internal error") // signed by this server: cannot happen
		}
	}
	books, last, more, err := s.Store.After(ctx, shelf, after, size)
	if err != nil {
		return nil, status.Error(codes.Internal, "internal error")
	}
	resp := &pb.ListBooksResponse{}
	for _, b := range books {
		resp.Books = append(resp.Books, &pb.Book{Id: strconv.FormatInt(b.ID, 10), Shelf: req.Parent, Title: b.Title})
	}
	if more {
		resp.NextPageToken, err = page.NextMessage(&pb.BookKey{Title: last.Title, Id: strconv.FormatInt(last.ID, 10)})
	}
	return resp, err
}

// Servers is an HTTP and a gRPC server of one store on 127.0.0.1.
type Servers struct {
	HTTPURL string
	GRPC    pbgrpc.LibraryServiceClient
	close   func()
}

// Close stops both servers.
func (s *Servers) Close() { s.close() }

// Start checks the key budget, then serves store over HTTP and gRPC.
func Start(store *Store, logger *slog.Logger) (*Servers, error) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // a fleet: ctoken.KeyringFromEnv
	if err != nil {
		return nil, err
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		return nil, err
	}
	pager, err := protopage.New(protopage.Config{Issuer: issuer, Logger: logger})
	if err != nil {
		return nil, err
	}
	if err := checkKeyBudget(keyChars, issuer, pager); err != nil {
		return nil, err
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: &HTTPServer{Issuer: issuer, Store: store, Log: logger}}
	go hs.Serve(hl)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hs.Close()
		return nil, err
	}
	intercept, err := grpcpage.UnaryServerInterceptor(func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-user"); len(v) == 1 {
			return v[0], nil // a stand-in for real authentication
		}
		return "", errors.New("no x-user")
	})
	if err != nil {
		hs.Close()
		return nil, err
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(intercept))
	pbgrpc.RegisterLibraryServiceServer(gs, &GRPCServer{Pager: pager, Store: store})
	go gs.Serve(gl)
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		hs.Close()
		gs.Stop()
		return nil, err
	}
	return &Servers{
		HTTPURL: "http://" + hl.Addr().String(),
		GRPC:    pbgrpc.NewLibraryServiceClient(conn),
		close:   func() { conn.Close(); gs.Stop(); hs.Close() },
	}, nil
}

// ListHTTP pages through shelf over HTTP as user, limit books a page, and
// calls between after every page but the last (the test inserts and
// deletes there). It returns the ids in the order listed and the pages.
func ListHTTP(ctx context.Context, base, user, shelf string, limit int, between func() error) ([]int64, int, error) {
	q := url.Values{"shelf": {shelf}, "limit": {strconv.Itoa(limit)}}
	var ids []int64
	for pages := 1; ; pages++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/books?"+q.Encode(), nil)
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, 0, fmt.Errorf("page %d: HTTP %d: %s", pages, resp.StatusCode, body)
		}
		var p Page
		if err := json.Unmarshal(body, &p); err != nil {
			return nil, 0, err
		}
		for _, b := range p.Books {
			ids = append(ids, b.ID)
		}
		if p.NextCursor == "" {
			return ids, pages, nil
		}
		q.Set("cursor", p.NextCursor)
		if err := between(); err != nil {
			return nil, 0, err
		}
	}
}

// ListGRPC is ListHTTP over gRPC.
func ListGRPC(ctx context.Context, client pbgrpc.LibraryServiceClient, user, shelf string, limit int, between func() error) ([]int64, int, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
	req := &pb.ListBooksRequest{Parent: "shelves/" + shelf, PageSize: int32(limit)}
	var ids []int64
	for pages := 1; ; pages++ {
		resp, err := client.ListBooks(ctx, req)
		if err != nil {
			return nil, 0, fmt.Errorf("page %d: %w", pages, err)
		}
		for _, b := range resp.Books {
			id, err := strconv.ParseInt(b.Id, 10, 64)
			if err != nil {
				return nil, 0, err
			}
			ids = append(ids, id)
		}
		if resp.NextPageToken == "" {
			return ids, pages, nil
		}
		req.PageToken = resp.NextPageToken
		if err := between(); err != nil {
			return nil, 0, err
		}
	}
}

// openings are the first characters of the titles LongTitle makes, 1 to 4
// bytes in UTF-8.
var openings = []string{"A", "B", "ü", "中", "𝄞", "Z", "a", "😀"}

// LongTitle returns a title of exactly size bytes (at least 300): one of 8
// openings repeated 60 times, so that many titles share their first 50
// characters, then i, then 4-byte characters and ASCII.
func LongTitle(i, size int) string {
	t := strings.Repeat(openings[i%len(openings)], 60) + " " + strconv.Itoa(i) + " "
	t += strings.Repeat("𝄞", (size-len(t))/4)
	return t + strings.Repeat(".", size-len(t))
}

// run seeds a shelf of 1 KiB titles and lists it over both transports.
func run(ctx context.Context, out io.Writer, logger *slog.Logger) error {
	dir, err := os.MkdirTemp("", "keysetsql")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := Open(ctx, filepath.Join(dir, "books.db"))
	if err != nil {
		return err
	}
	defer store.DB.Close()
	for i := range 100 {
		if _, err := store.Insert(ctx, "a", LongTitle(i, 1024)); err != nil {
			return err
		}
	}
	srv, err := Start(store, logger)
	if err != nil {
		return err
	}
	defer srv.Close()
	none := func() error { return nil }
	ids, pages, err := ListHTTP(ctx, srv.HTTPURL, "user:42", "a", 7, none)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "HTTP: %d books of 1 KiB titles on %d pages\n", len(ids), pages)
	if ids, pages, err = ListGRPC(ctx, srv.GRPC, "user:42", "a", 7, none); err != nil {
		return err
	}
	fmt.Fprintf(out, "gRPC: %d books of 1 KiB titles on %d pages\n", len(ids), pages)
	return nil
}

func main() {
	if err := run(context.Background(), os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
		log.Fatal(err)
	}
}
