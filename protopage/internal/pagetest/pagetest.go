// Package pagetest is the test fixture protopage and its transport modules
// share: a Pager with a settable clock and a log buffer, a second issuer of
// the same keys in another server session, and the refusals every
// transport must map.
package pagetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
)

// ListMethod is the full method name of LibraryService.ListBooks.
const ListMethod = "/ctoken.protopage.example.v1.LibraryService/ListBooks"

// TTL is the fixture issuer's token lifetime.
const TTL = time.Minute

// LockedBuffer is a log sink tests read while handlers write.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Fixture is a Pager whose issuer has a settable clock, its log, and an
// issuer of the same keys in another server session.
type Fixture struct {
	Pager   *protopage.Pager
	Issuer  *ctoken.CursorIssuer
	Foreign *ctoken.CursorIssuer
	Log     *LockedBuffer
	now     atomic.Int64 // unix seconds
}

// New returns a Fixture; cfg's Issuer and Logger are set by it.
func New(t testing.TB, cfg protopage.Config) *Fixture {
	t.Helper()
	f := &Fixture{Log: new(LockedBuffer)}
	f.now.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).Unix())
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return time.Unix(f.now.Load(), 0) }
	if f.Issuer, err = ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("fleet-1"), TTL: TTL, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if f.Foreign, err = ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, Session: []byte("fleet-2"), TTL: TTL, Now: clock}); err != nil {
		t.Fatal(err)
	}
	cfg.Issuer = f.Issuer
	cfg.Logger = slog.New(slog.NewTextHandler(f.Log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if f.Pager, err = protopage.New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// Advance moves the issuers' clock.
func (f *Fixture) Advance(d time.Duration) { f.now.Add(int64(d / time.Second)) }

// CallCtx returns a context carrying a Call of method by caller.
func CallCtx(method, caller string) context.Context {
	return protopage.WithCall(context.Background(), protopage.Call{
		Method: method,
		Caller: func(context.Context) (string, error) { return caller, nil },
	})
}

// Tamper returns token with one base64url character in its middle changed.
func Tamper(token string) string {
	b := []byte(token)
	if b[len(b)/2] == 'A' {
		b[len(b)/2] = 'B'
	} else {
		b[len(b)/2] = 'A'
	}
	return string(b)
}

// TamperHead returns token with the map head of its body made three pairs,
// which no cursor layout has: a malformed token that cannot be a token of
// another request.
func TamperHead(token string) string {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) == 0 {
		return token + "!"
	}
	raw[0] = 0xa3
	return base64.RawURLEncoding.EncodeToString(raw)
}

// Refusal is a request a transport must refuse, and how.
type Refusal struct {
	Name    string
	Caller  string // "" means the caller the token was issued to
	Request func() *librarypb.ListBooksRequest
	Advance time.Duration // the clock moves this far first, and back after
	Want    error         // the protopage error kind
}

// Refusals returns the refusals for token, the next_page_token of the
// first page of req for caller: a changed filter, another caller,
// tampered, truncated, expired, from another server session, and not a
// token at all.
func (f *Fixture) Refusals(t testing.TB, req *librarypb.ListBooksRequest, token string) []Refusal {
	t.Helper()
	with := func(edit func(r *librarypb.ListBooksRequest)) func() *librarypb.ListBooksRequest {
		return func() *librarypb.ListBooksRequest {
			r := &librarypb.ListBooksRequest{Parent: req.Parent, PageSize: req.PageSize, Filter: req.Filter, OrderBy: req.OrderBy, MinYear: req.MinYear, PageToken: token}
			edit(r)
			return r
		}
	}
	fp, err := f.Pager.Fingerprint(req)
	if err != nil {
		t.Fatal(err)
	}
	return []Refusal{
		{Name: "changed filter", Request: with(func(r *librarypb.ListBooksRequest) { r.Filter += "x" }), Want: protopage.ErrRequestChanged},
		{Name: "changed order", Request: with(func(r *librarypb.ListBooksRequest) {
			if r.OrderBy == "year" {
				r.OrderBy = "title"
			} else {
				r.OrderBy = "year"
			}
		}), Want: protopage.ErrRequestChanged},
		{Name: "changed parent", Request: with(func(r *librarypb.ListBooksRequest) { r.Parent = "shelves/z" }), Want: protopage.ErrRequestChanged},
		// One MAC binds method, caller and fields (cursor format version
		// 2): another caller's token is refused like changed fields.
		{Name: "another caller's token", Caller: "mallory", Request: with(func(*librarypb.ListBooksRequest) {}), Want: protopage.ErrRequestChanged},
		// A body that still decodes under a failing MAC: a forgery and a
		// token of another request look the same (cursor format version 2).
		{Name: "tampered", Request: with(func(r *librarypb.ListBooksRequest) { r.PageToken = Tamper(token) }), Want: protopage.ErrRequestChanged},
		{Name: "tampered so that it does not decode", Request: with(func(r *librarypb.ListBooksRequest) { r.PageToken = TamperHead(token) }), Want: protopage.ErrTokenInvalid},
		{Name: "truncated", Request: with(func(r *librarypb.ListBooksRequest) { r.PageToken = token[:len(token)*2/3] }), Want: protopage.ErrTokenInvalid},
		{Name: "not a token", Request: with(func(r *librarypb.ListBooksRequest) { r.PageToken = "page=2" }), Want: protopage.ErrTokenInvalid},
		{Name: "expired", Advance: TTL + 2*time.Second, Request: with(func(*librarypb.ListBooksRequest) {}), Want: protopage.ErrTokenExpired},
		{Name: "another server session", Request: with(func(r *librarypb.ListBooksRequest) {
			foreign, err := f.Foreign.Issue(ctoken.CursorPayload{CursorScope: ctoken.CursorScope{ToolID: ListMethod, CallerID: "alice", Args: fp}})
			if err != nil {
				t.Fatal(err)
			}
			r.PageToken = foreign
		}), Want: protopage.ErrTokenExpired},
	}
}

// CheckClientMessage fails t unless msg, what the client was told, is
// exactly want's fixed text: no reason, token or detail can be in it.
func CheckClientMessage(t testing.TB, msg string, want error) {
	t.Helper()
	if msg != want.Error() {
		t.Fatalf("client message %q, want exactly %q", msg, want)
	}
}

// CheckRefusal fails t unless the client was told exactly want's fixed
// text (msg), and the server logged (log: what it wrote for this one
// request) the refusal with a reason that is not in msg, and without the
// token or the caller.
func CheckRefusal(t testing.TB, msg string, want error, log, token, caller string) {
	t.Helper()
	CheckClientMessage(t, msg, want)
	_, after, ok := strings.Cut(log, "reason=")
	var reason string
	if q, isQuoted := strings.CutPrefix(after, `"`); isQuoted {
		reason, _, _ = strings.Cut(q, `"`)
	} else if f := strings.Fields(after); len(f) > 0 {
		reason = f[0]
	}
	if !ok || reason == "" {
		t.Fatalf("the refusal was not logged with a reason: %q", log)
	}
	if strings.Contains(msg, reason) {
		t.Fatalf("client message %q carries the reason %q", msg, reason)
	}
	if (token != "" && strings.Contains(log, token)) || (caller != "" && strings.Contains(log, caller)) {
		t.Fatalf("log %q carries the token or the caller", log)
	}
}

// TokenFor issues, without any transport, the token of page 1 of req for
// caller bound to [ListMethod]: a transport that accepts it binds tokens to
// exactly that method name.
func (f *Fixture) TokenFor(t testing.TB, req *librarypb.ListBooksRequest, caller string) string {
	t.Helper()
	page, err := f.Pager.Start(CallCtx(ListMethod, caller), req)
	if err != nil {
		t.Fatal(err)
	}
	token, err := page.NextMessage(&librarypb.BookKey{})
	if err != nil {
		t.Fatal(err)
	}
	return token
}
