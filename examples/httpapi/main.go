// Command httpapi is a plain net/http listing API paginated with keyset
// cursors, served by a fleet of two instances that share a key file and a
// session. A client pages through every open item, alternating instances,
// while the key file is rotated in two passes under it; nothing is lost or
// repeated. Then it shows the refusals a client can meet and their status.
//
//	go run ./examples/httpapi
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/keyfile"
)

// listItems is the cursor's ToolID: the operation or endpoint the cursor
// belongs to. A cursor of another endpoint is refused.
const listItems = "GET /v1/items"

// Item is one row of the listing.
type Item struct {
	ID     int64  `json:"id"`
	Status string `json:"status"`
}

// Store is the data every instance serves (in production, a database).
type Store struct {
	mu    sync.Mutex
	items []Item // sorted by ID
}

// NewStore returns n items with IDs 10, 20, ...; two in three are open.
func NewStore(n int) *Store {
	s := &Store{}
	for i := 1; i <= n; i++ {
		status := "open"
		if i%3 == 0 {
			status = "closed"
		}
		s.items = append(s.items, Item{ID: int64(10 * i), Status: status})
	}
	return s
}

// Insert adds it in ID order.
func (s *Store) Insert(it Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.items, it.ID, func(a Item, id int64) int { return int(a.ID - id) })
	s.items = slices.Insert(s.items, i, it)
}

// after returns up to limit items with the status and an ID over after
// (WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3), and whether more
// follow.
func (s *Store) after(status string, after int64, limit int) ([]Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var page []Item
	for _, it := range s.items {
		if it.ID <= after || it.Status != status {
			continue
		}
		if len(page) == limit {
			return page, true
		}
		page = append(page, it)
	}
	return page, false
}

// Page is the response body of GET /v1/items.
type Page struct {
	Items      []Item `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
	Instance   string `json:"instance"`
}

// Server is one instance of the API.
type Server struct {
	Name   string
	Issuer *ctoken.CursorIssuer
	Store  *Store
	Log    *slog.Logger
}

// ServeHTTP serves GET /v1/items?status=open&limit=10&cursor=...
// The caller is the X-User header (stands in for real authentication).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	// Every parameter but the cursor and the page size is bound to the
	// cursor: a changed filter with an old cursor is refused.
	q.Del("cursor")
	q.Del("limit")
	args, err := ctoken.ArgsFingerprint(map[string][]string(q))
	if err != nil {
		s.refuse(w, err)
		return
	}
	scope := ctoken.CursorScope{ToolID: listItems, CallerID: caller, Args: args}
	after := int64(0)
	if cursor != "" {
		if after, err = ctoken.VerifyKeyset[int64](s.Issuer, cursor, scope); err != nil {
			s.refuse(w, err)
			return
		}
	}
	items, more := s.Store.after(q.Get("status"), after, limit)
	page := Page{Items: items, Instance: s.Name}
	if more {
		if page.NextCursor, err = ctoken.IssueKeyset(s.Issuer, scope, items[len(items)-1].ID); err != nil {
			s.refuse(w, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(page)
}

// refuse answers a refused cursor with ctoken.CursorHTTPStatus: 410 to
// start over, 400 for an invalid cursor, 422 when the next cursor cannot
// carry the page's last sort key (not with this store's int64 IDs; a key
// of text is bounded as docs/cursors.md shows). The reason goes to the
// server's log only.
func (s *Server) refuse(w http.ResponseWriter, err error) {
	status := ctoken.CursorHTTPStatus(err)
	s.Log.Warn("cursor refused", "instance", s.Name, "status", status, "reason", ctoken.Reason(err).String())
	switch status {
	case http.StatusGone:
		problem(w, status, "the cursor has expired: start over from the first page, without a cursor")
	case http.StatusBadRequest:
		problem(w, status, "invalid cursor: do not retry it")
	case http.StatusUnprocessableEntity:
		problem(w, status, "no cursor can be issued after this page: it ends on an item whose sort key is too long for a cursor; ask for it again with another limit, so that it ends on another item")
	default:
		problem(w, status, "internal error")
	}
}

// problem writes an RFC 9457 problem document with a fixed detail.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}

// Instance is a running Server on 127.0.0.1.
type Instance struct {
	*Server
	URL   string
	Swaps chan int // receives the key count of every reload of the key file
	http  *http.Server
}

// Fleet starts instances on 127.0.0.1 that each read the key file (as
// separate processes would) and share the session. They stop when ctx is
// done or Close is called.
type Fleet []*Instance

// StartFleet starts n instances.
func StartFleet(ctx context.Context, n int, keyFile string, session []byte, store *Store, reload time.Duration, logger *slog.Logger, now func() time.Time) (Fleet, error) {
	var f Fleet
	for i := range n {
		swaps := make(chan int, 8)
		keys, err := keyfile.NewSource(ctx, keyfile.Config{
			Path:     keyFile,
			Interval: reload,
			OnError:  func(err error) { logger.Error("key file refused; keeping the current keys", "err", err) },
			OnSwap:   func(n int) { swaps <- n },
		})
		if err != nil {
			f.Close()
			return nil, err
		}
		issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{KeySource: keys, Session: session, Now: now})
		if err != nil {
			f.Close()
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Close()
			return nil, err
		}
		srv := &Server{Name: string(session) + "/" + strconv.Itoa(i), Issuer: issuer, Store: store, Log: logger}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(ln)
		f = append(f, &Instance{Server: srv, URL: "http://" + ln.Addr().String(), Swaps: swaps, http: hs})
	}
	return f, nil
}

// Close stops every instance.
func (f Fleet) Close() {
	for _, in := range f {
		in.http.Close()
	}
}

// AwaitReload waits until every instance has loaded a new version of the
// key file.
func (f Fleet) AwaitReload(timeout time.Duration) error {
	deadline := time.After(timeout)
	for _, in := range f {
		select {
		case <-in.Swaps:
		case <-deadline:
			return fmt.Errorf("%s did not reload the key file within %v", in.Name, timeout)
		}
	}
	return nil
}

// WriteKeyFile replaces path with keys (primary first), atomically.
func WriteKeyFile(path string, keys ...[]byte) error {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = ctoken.EncodeKey(k)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(parts, ",")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// HTTPError is a non-200 answer.
type HTTPError struct {
	Status int
	Body   string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// Get fetches one page from base as user.
func Get(ctx context.Context, base, user string, query url.Values) (Page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/items?"+query.Encode(), nil)
	if err != nil {
		return Page{}, err
	}
	req.Header.Set("X-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Page{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Page{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Page{}, &HTTPError{Status: resp.StatusCode, Body: string(body)}
	}
	var p Page
	return p, json.Unmarshal(body, &p)
}

// Demo is what run did, for the test to check.
type Demo struct {
	Listed    []Item   // every item listed, in order
	Instances []string // the instance that served each page
	Cursors   []string // the next cursor of each page but the last
	// OldKey and NewKey are the primaries before and after the rotation.
	OldKey, NewKey []byte
	Refusals       map[string]*HTTPError
}

// run lists every open item through the fleet while the key file rotates,
// then shows the refusals.
func run(ctx context.Context, out io.Writer, logger *slog.Logger) (*Demo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := os.MkdirTemp("", "httpapi")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "keys")
	oldKey, newKey := ctoken.RandomKey(), ctoken.RandomKey()
	if err := WriteKeyFile(keyFile, oldKey); err != nil {
		return nil, err
	}
	store := NewStore(90) // 60 open items
	fleet, err := StartFleet(ctx, 2, keyFile, []byte("httpapi-fleet-1"), store, 20*time.Millisecond, logger, nil)
	if err != nil {
		return nil, err
	}
	defer fleet.Close()

	d := &Demo{OldKey: oldKey, NewKey: newKey, Refusals: map[string]*HTTPError{}}
	query := url.Values{"status": {"open"}, "limit": {"7"}}
	for page := 0; ; page++ {
		switch page {
		case 3: // pass 1: every instance learns the new key
			if err := WriteKeyFile(keyFile, oldKey, newKey); err != nil {
				return nil, err
			}
			if err := fleet.AwaitReload(5 * time.Second); err != nil {
				return nil, err
			}
			fmt.Fprintln(out, "key file: pass 1 (old primary, new previous) loaded by both instances")
			// A new open item before the position: keyset paging neither
			// repeats nor skips because of it.
			store.Insert(Item{ID: 5, Status: "open"})
		case 6: // pass 2: sign with the new key, still verify the old one
			if err := WriteKeyFile(keyFile, newKey, oldKey); err != nil {
				return nil, err
			}
			if err := fleet.AwaitReload(5 * time.Second); err != nil {
				return nil, err
			}
			fmt.Fprintln(out, "key file: pass 2 (new primary, old previous) loaded by both instances")
		}
		in := fleet[page%len(fleet)]
		p, err := Get(ctx, in.URL, "user:42", query)
		if err != nil {
			return nil, fmt.Errorf("page %d from %s: %w", page, in.Name, err)
		}
		ids := make([]int64, len(p.Items))
		for i, it := range p.Items {
			ids[i] = it.ID
		}
		fmt.Fprintf(out, "page %d from %s: %v\n", page, p.Instance, ids)
		d.Listed = append(d.Listed, p.Items...)
		d.Instances = append(d.Instances, p.Instance)
		if p.NextCursor == "" {
			break
		}
		d.Cursors = append(d.Cursors, p.NextCursor)
		query.Set("cursor", p.NextCursor)
	}
	fmt.Fprintf(out, "listed %d items on %d pages\n", len(d.Listed), len(d.Instances))

	// The refusals a client can meet, each with its status: an instance
	// of another session (a session change revokes every cursor) and one
	// whose clock is past the cursor's TTL answer 410; the others 400.
	otherSession, err := StartFleet(ctx, 1, keyFile, []byte("httpapi-fleet-2"), store, time.Hour, logger, nil)
	if err != nil {
		return nil, err
	}
	defer otherSession.Close()
	later := func() time.Time { return time.Now().Add(ctoken.DefaultCursorTTL + time.Minute) }
	expired, err := StartFleet(ctx, 1, keyFile, []byte("httpapi-fleet-1"), store, time.Hour, logger, later)
	if err != nil {
		return nil, err
	}
	defer expired.Close()
	last := d.Cursors[len(d.Cursors)-1]
	for _, r := range []struct {
		name string
		in   *Instance
		user string
		q    url.Values
	}{
		{"another caller's cursor", fleet[0], "user:43", url.Values{"status": {"open"}, "cursor": {last}}},
		{"changed filter", fleet[0], "user:42", url.Values{"status": {"closed"}, "cursor": {last}}},
		{"tampered cursor", fleet[0], "user:42", url.Values{"status": {"open"}, "cursor": {last[:len(last)-10] + flip(last[len(last)-10]) + last[len(last)-9:]}}},
		{"truncated cursor", fleet[0], "user:42", url.Values{"status": {"open"}, "cursor": {last[:len(last)-4]}}},
		{"cursor of another session", otherSession[0], "user:42", url.Values{"status": {"open"}, "cursor": {last}}},
		{"expired cursor", expired[0], "user:42", url.Values{"status": {"open"}, "cursor": {last}}},
	} {
		_, err := Get(ctx, r.in.URL, r.user, r.q)
		var he *HTTPError
		if !errors.As(err, &he) {
			return nil, fmt.Errorf("%s: %v, want a refusal", r.name, err)
		}
		d.Refusals[r.name] = he
		fmt.Fprintf(out, "%s: %d %s\n", r.name, he.Status, strings.TrimSpace(he.Body))
	}
	return d, nil
}

// flip returns another base64url character than c.
func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if _, err := run(context.Background(), os.Stdout, logger); err != nil {
		log.Fatal(err)
	}
}
