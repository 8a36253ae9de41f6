package protopage_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/internal/fingerprintpb"
	"github.com/ctoken/ctoken/protopage/internal/pagetest"
	"github.com/ctoken/ctoken/protopage/internal/shelf"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

type fixture = pagetest.Fixture

func newFixture(t testing.TB, cfg protopage.Config) *fixture { return pagetest.New(t, cfg) }

func callCtx(method, caller string) context.Context { return pagetest.CallCtx(method, caller) }

const listMethod = pagetest.ListMethod

func minYear(y int32) *int32 { return &y }

func listReq() *librarypb.ListBooksRequest {
	return &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 3, Filter: "a", OrderBy: "title"}
}

// firstToken serves the first page of req for alice and returns its next
// token.
func firstToken(t *testing.T, f *fixture, req *librarypb.ListBooksRequest) string {
	t.Helper()
	page, err := f.Pager.Start(callCtx(listMethod, "alice"), req)
	if err != nil {
		t.Fatal(err)
	}
	token, err := page.NextMessage(&librarypb.BookKey{Title: "Title 03", Id: "b007"})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func TestStartResumesWithTheStateAndHonorsAChangedPageSize(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	req := listReq()
	req.MinYear = minYear(1950)
	token := firstToken(t, f, req)

	next := proto.Clone(req).(*librarypb.ListBooksRequest)
	next.PageToken = token
	next.PageSize = 7 // AIP-158: a changed page_size is honored
	page, err := f.Pager.Start(callCtx(listMethod, "alice"), next)
	if err != nil {
		t.Fatalf("Start with the next token and another page_size: %v", err)
	}
	var key librarypb.BookKey
	if err := page.StateMessage(&key); err != nil {
		t.Fatal(err)
	}
	if page.First() || page.Index() != 1 || key.Title != "Title 03" || key.Id != "b007" {
		t.Fatalf("resumed page: first %v, index %d, key %v", page.First(), page.Index(), &key)
	}
	third, err := page.Next([]byte("raw"))
	if err != nil {
		t.Fatal(err)
	}
	next.PageToken = third
	page, err = f.Pager.Start(callCtx(listMethod, "alice"), next)
	if err != nil || page.Index() != 2 || string(page.State()) != "raw" {
		t.Fatalf("third page: %v", err)
	}
}

func TestStartFirstPageHasNoState(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	page, err := f.Pager.Start(callCtx(listMethod, "alice"), listReq())
	if err != nil {
		t.Fatal(err)
	}
	key := &librarypb.BookKey{Title: "left over"}
	if err := page.StateMessage(key); err != nil {
		t.Fatal(err)
	}
	if !page.First() || page.Index() != 0 || page.State() != nil || key.Title != "" {
		t.Fatalf("first page: first %v, index %d, state %q, key %v", page.First(), page.Index(), page.State(), key)
	}
}

// TestStartRefusesAndLogsTheReasonOnly drives every refusal: the error
// matches its kind and ctoken's sentinel, its text is the kind's fixed
// text, and the reason is in the log, never in the error text.
func TestStartRefusesAndLogsTheReasonOnly(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	token := firstToken(t, f, listReq())
	foreign, err := f.Foreign.Issue(ctoken.CursorPayload{CursorScope: func() ctoken.CursorScope {
		fp, err := f.Pager.Fingerprint(listReq())
		if err != nil {
			t.Fatal(err)
		}
		return ctoken.CursorScope{ToolID: listMethod, CallerID: "alice", Args: fp}
	}()})
	if err != nil {
		t.Fatal(err)
	}
	tampered := pagetest.Tamper(token)
	// The map head of the body changed to three pairs: no layout has it, so
	// the token is malformed and nothing else.
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		t.Fatal(err)
	}
	raw[0] = 0xa3
	undecodable := base64.RawURLEncoding.EncodeToString(raw)

	cases := []struct {
		name    string
		method  string
		caller  string
		token   string
		edit    func(*librarypb.ListBooksRequest)
		advance time.Duration
		kind    error
		sent    error // ctoken's sentinel it also matches
		reason  observe.RefusalReason
	}{
		{name: "changed filter", edit: func(r *librarypb.ListBooksRequest) { r.Filter = "Ada" }, kind: protopage.ErrRequestChanged, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorWrongScope},
		{name: "changed order", edit: func(r *librarypb.ListBooksRequest) { r.OrderBy = "year" }, kind: protopage.ErrRequestChanged, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorWrongScope},
		{name: "changed parent", edit: func(r *librarypb.ListBooksRequest) { r.Parent = "shelves/b" }, kind: protopage.ErrRequestChanged, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorWrongScope},
		{name: "optional field now set to its default", edit: func(r *librarypb.ListBooksRequest) { r.MinYear = minYear(0) }, kind: protopage.ErrRequestChanged, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorWrongScope},
		{name: "another caller", caller: "mallory", kind: protopage.ErrRequestChanged, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorWrongScope},
		{name: "another method", method: "/ctoken.protopage.example.v1.LibraryService/ListShelves", kind: protopage.ErrRequestChanged, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorWrongScope},
		// A token whose body still decodes but whose MAC fails is a
		// forgery or a token of another request: they look the same.
		{name: "tampered", token: tampered, kind: protopage.ErrRequestChanged, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorWrongScope},
		{name: "tampered so that it does not decode", token: undecodable, kind: protopage.ErrTokenInvalid, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorMalformed},
		{name: "truncated", token: token[:len(token)-10], kind: protopage.ErrTokenInvalid, sent: ctoken.ErrCursorInvalid},
		{name: "not a token", token: "page-2", kind: protopage.ErrTokenInvalid, sent: ctoken.ErrCursorInvalid},
		{name: "oversize", token: strings.Repeat("A", ctoken.MaxCursorBytes+1), kind: protopage.ErrTokenInvalid, sent: ctoken.ErrCursorInvalid, reason: observe.ReasonCursorOversize},
		{name: "expired", advance: 2 * time.Minute, kind: protopage.ErrTokenExpired, sent: ctoken.ErrCursorExpired, reason: observe.ReasonOlderThanTTL},
		{name: "another server session", token: foreign, kind: protopage.ErrTokenExpired, sent: ctoken.ErrCursorExpired, reason: observe.ReasonOtherSession},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { f.Advance(-tc.advance) })
			f.Advance(tc.advance)
			req := listReq()
			req.PageToken = token
			if tc.token != "" {
				req.PageToken = tc.token
			}
			if tc.edit != nil {
				tc.edit(req)
			}
			method, caller := listMethod, "alice"
			if tc.method != "" {
				method = tc.method
			}
			if tc.caller != "" {
				caller = tc.caller
			}
			before := len(f.Log.String())
			page, err := f.Pager.Start(callCtx(method, caller), req)
			if page != nil || !errors.Is(err, tc.kind) || !errors.Is(err, tc.sent) {
				t.Fatalf("Start = %v, %v; want %v and %v", page, err, tc.kind, tc.sent)
			}
			if err.Error() != tc.kind.Error() {
				t.Fatalf("error text %q, want exactly %q", err, tc.kind)
			}
			why := ctoken.Reason(err)
			if tc.reason != observe.ReasonNone && why != tc.reason {
				t.Fatalf("reason %q, want %q", why, tc.reason)
			}
			if why == observe.ReasonNone || strings.Contains(err.Error(), why.String()) {
				t.Fatalf("reason %q: missing, or in the error text %q", why, err)
			}
			logged := f.Log.String()[before:]
			if !strings.Contains(logged, "reason=\""+why.String()+"\"") || !strings.Contains(logged, "method="+method) {
				t.Fatalf("log %q lacks the reason %q or the method", logged, why)
			}
			level := "level=WARN"
			if tc.kind == protopage.ErrTokenExpired || tc.kind == protopage.ErrRequestChanged {
				level = "level=INFO" // what an honest client causes
			}
			if !strings.Contains(logged, level) {
				t.Fatalf("log %q, want %s", logged, level)
			}
			if strings.Contains(logged, req.PageToken) || strings.Contains(logged, caller) {
				t.Fatalf("log %q carries the token or the caller", logged)
			}
		})
	}
}

func TestStartRefusesServerFaults(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	failing := func(context.Context) (string, error) { return "", errors.New("bad credential for alice") }
	cases := []struct {
		name string
		ctx  context.Context
		req  proto.Message
		kind error
	}{
		{"no call in the context", context.Background(), listReq(), protopage.ErrServer},
		{"call without a method", protopage.WithCall(context.Background(), protopage.Call{Caller: failing}), listReq(), protopage.ErrServer},
		{"call without a caller func", protopage.WithCall(context.Background(), protopage.Call{Method: listMethod}), listReq(), protopage.ErrServer},
		{"nil request", callCtx(listMethod, "alice"), nil, protopage.ErrServer},
		{"typed nil request", callCtx(listMethod, "alice"), (*librarypb.ListBooksRequest)(nil), protopage.ErrServer},
		{"request without page fields", callCtx(listMethod, "alice"), &librarypb.Book{}, protopage.ErrServer},
		{"caller func fails", protopage.WithCall(context.Background(), protopage.Call{Method: listMethod, Caller: failing}), listReq(), protopage.ErrNoCaller},
		{"empty caller", callCtx(listMethod, ""), listReq(), protopage.ErrNoCaller},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Log.String())
			page, err := f.Pager.Start(tc.ctx, tc.req)
			if page != nil || !errors.Is(err, tc.kind) || err.Error() != tc.kind.Error() {
				t.Fatalf("Start = %v, %v; want exactly %v", page, err, tc.kind)
			}
			logged := f.Log.String()[before:]
			if !strings.Contains(logged, "reason=") || strings.Contains(logged, "alice") {
				t.Fatalf("log %q: no reason, or the CallerFunc's own error text", logged)
			}
			// The message names the package once: ErrServer's text
			// already begins with "protopage: ".
			if want := `msg="protopage: ` + strings.TrimPrefix(tc.kind.Error(), "protopage: ") + `"`; !strings.Contains(logged, want) || strings.Contains(logged, "protopage: protopage:") {
				t.Fatalf("log %q, want the message %s", logged, want)
			}
		})
	}
	var zero protopage.Pager
	if _, err := zero.Start(callCtx(listMethod, "alice"), listReq()); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("zero Pager: %v", err)
	}
	if _, err := zero.Fingerprint(listReq()); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("zero Pager Fingerprint: %v", err)
	}
	var zeroPage protopage.Page
	if _, err := zeroPage.Next(nil); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("zero Page: %v", err)
	}
}

// TestNextRefusesAKeyTooLargeForATokenAsTheClientsToActOn: a sort key over
// the budget is ErrKeyTooLarge, whose fixed text tells the client what it
// can do (another page_size), never ErrServer (a fault a client retries in
// vain); the operator learns it at Error, with the reason.
func TestNextRefusesAKeyTooLargeForATokenAsTheClientsToActOn(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	page, err := f.Pager.Start(callCtx(listMethod, "alice"), listReq())
	if err != nil {
		t.Fatal(err)
	}
	before := len(f.Log.String())
	long := &librarypb.BookKey{Title: strings.Repeat("é", 130), Id: "b001"} // 260 bytes of title
	_, err = page.NextMessage(long)
	if !errors.Is(err, protopage.ErrKeyTooLarge) || !errors.Is(err, ctoken.ErrOpaqueStateTooLarge) || errors.Is(err, protopage.ErrServer) {
		t.Fatalf("NextMessage with a key over the budget: %v, want ErrKeyTooLarge (and ctoken.ErrOpaqueStateTooLarge), not ErrServer", err)
	}
	if err.Error() != protopage.ErrKeyTooLarge.Error() || !strings.Contains(err.Error(), "another page_size") {
		t.Fatalf("text %q, want ErrKeyTooLarge's, which names what the client can do", err)
	}
	if logged := f.Log.String()[before:]; !strings.Contains(logged, "level=ERROR") || !strings.Contains(logged, `reason="state over MaxOpaqueStateBytes"`) {
		t.Fatalf("log %q, want an Error record with the reason", logged)
	}
	// The page ends on another item: the listing goes on.
	if _, err := page.NextMessage(&librarypb.BookKey{Title: "Solaris", Id: "b002"}); err != nil {
		t.Fatal(err)
	}
}

func TestStateMessageRefusesStateOfAnotherType(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	first, err := f.Pager.Start(callCtx(listMethod, "alice"), listReq())
	if err != nil {
		t.Fatal(err)
	}
	token, err := first.Next([]byte{0xff, 0xff}) // not a protobuf message
	if err != nil {
		t.Fatal(err)
	}
	req := listReq()
	req.PageToken = token
	page, err := f.Pager.Start(callCtx(listMethod, "alice"), req)
	if err != nil {
		t.Fatal(err)
	}
	var key librarypb.BookKey
	if err := page.StateMessage(&key); !errors.Is(err, protopage.ErrTokenExpired) {
		t.Fatalf("StateMessage of undecodable state: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for name, cfg := range map[string]protopage.Config{
		"nil issuer":          {Logger: log},
		"nil logger":          {Issuer: issuer},
		"invalid token field": {Issuer: issuer, Logger: log, PageTokenField: "page token"},
		"invalid size field":  {Issuer: issuer, Logger: log, PageSizeField: "1size"},
		"same field twice":    {Issuer: issuer, Logger: log, PageTokenField: "page_size"},
		"invalid skip field":  {Issuer: issuer, Logger: log, SkipField: "skip-me"},
		"skip is page size":   {Issuer: issuer, Logger: log, SkipField: "page_size"},
		"skip is page token":  {Issuer: issuer, Logger: log, SkipField: "page_token"},
	} {
		if p, err := protopage.New(cfg); p != nil || !errors.Is(err, ctoken.ErrConfig) {
			t.Errorf("%s: New = %v, %v; want ctoken.ErrConfig", name, p, err)
		}
	}
}

func TestConfiguredFieldNamesAreLeftOut(t *testing.T) {
	// fingerprintpb.Nested has no page fields; with name and values as the
	// page fields it must refuse (values is repeated), and Request under
	// f_string/f_int32 must leave exactly those out.
	f := newFixture(t, protopage.Config{PageTokenField: "f_string", PageSizeField: "f_int32"})
	a := &fingerprintpb.Request{FString: "token", FInt32: 5, PageToken: "x", PageSize: 1}
	b := &fingerprintpb.Request{FString: "other", FInt32: 9, PageToken: "x", PageSize: 1}
	c := &fingerprintpb.Request{FString: "token", FInt32: 5, PageToken: "y", PageSize: 1}
	fa, errA := f.Pager.Fingerprint(a)
	fb, errB := f.Pager.Fingerprint(b)
	fc, errC := f.Pager.Fingerprint(c)
	if err := errors.Join(errA, errB, errC); err != nil {
		t.Fatal(err)
	}
	if fa != fb || fa == fc {
		t.Fatal("the configured page fields are bound, or the default ones are not")
	}
	g := newFixture(t, protopage.Config{PageTokenField: "name", PageSizeField: "values"})
	if _, err := g.Pager.Fingerprint(&fingerprintpb.Nested{}); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("repeated page size field: %v", err)
	}
	if _, err := g.Pager.Start(callCtx(listMethod, "alice"), &fingerprintpb.Nested{}); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("Start with a repeated page size field: %v", err)
	}
}

// TestShelfPagesToTheEnd pages the example handler through every listing
// shape with several page sizes: every book once, in order, nothing lost
// or repeated.
func TestShelfPagesToTheEnd(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	s := &shelf.Shelf{Pager: f.Pager, Books: shelf.Books(40)}
	for _, req := range []*librarypb.ListBooksRequest{
		{Parent: "shelves/a"},
		{Parent: "shelves/b", OrderBy: "year", PageSize: 3},
		{Parent: "shelves/a", Filter: "Grace", PageSize: 1},
		{Parent: "shelves/b", MinYear: minYear(1955), OrderBy: "title", PageSize: 4},
		{Parent: "shelves/none", PageSize: 2},
	} {
		want := shelf.Sorted(s.Books, req)
		var got []*librarypb.Book
		for pages := 0; ; pages++ {
			if pages > len(want)+1 {
				t.Fatalf("%v: more pages than books", req)
			}
			resp, err := s.ListBooks(callCtx(listMethod, "alice"), req)
			if err != nil {
				t.Fatalf("%v: %v", req, err)
			}
			got = append(got, resp.Books...)
			if resp.NextPageToken == "" {
				break
			}
			req.PageToken = resp.NextPageToken
		}
		if len(got) != len(want) {
			t.Fatalf("%v: %d books, want %d", req, len(got), len(want))
		}
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Fatalf("%v: book %d is %v, want %v", req, i, got[i], want[i])
			}
		}
	}
}

// TestPageNotFromStartRefusesRatherThanPanics calls the methods that
// return an error on a nil Page (what Start returns with an error) and on
// the zero Page: each is ErrServer. NextMessage of a message that does not
// marshal and StateMessage panicked on both, and StateMessage on the zero
// Page reported a first page.
func TestPageNotFromStartRefusesRatherThanPanics(t *testing.T) {
	for name, pg := range map[string]*protopage.Page{"nil": nil, "zero": {}} {
		if _, err := pg.Next(nil); !errors.Is(err, protopage.ErrServer) {
			t.Errorf("%s Page: Next: %v", name, err)
		}
		for _, m := range []*librarypb.BookKey{{Title: "ok"}, {Title: "\xff"}} {
			if _, err := pg.NextMessage(m); !errors.Is(err, protopage.ErrServer) {
				t.Errorf("%s Page: NextMessage(%q): %v", name, m.GetTitle(), err)
			}
		}
		if err := pg.StateMessage(new(librarypb.BookKey)); !errors.Is(err, protopage.ErrServer) {
			t.Errorf("%s Page: StateMessage: %v", name, err)
		}
	}
}

// Page tokens bind the caller inside their MAC: a 1 KiB caller and a
// caller that is not UTF-8 get page 2 with the full state, their bytes
// appear nowhere in the token, and only a state over the budget is refused,
// at Next, as the handler's fault.
func TestPageTokenBudgetIsTheStateCapForAnyCaller(t *testing.T) {
	for _, seal := range []bool{false, true} {
		f := newFixture(t, protopage.Config{})
		if seal {
			kr, err := ctoken.NewKeyring(bytes.Repeat([]byte{7}, 32))
			if err != nil {
				t.Fatal(err)
			}
			iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Seal: true})
			if err != nil {
				t.Fatal(err)
			}
			if f.Pager, err = protopage.New(protopage.Config{Issuer: iss, Logger: slog.New(slog.DiscardHandler)}); err != nil {
				t.Fatal(err)
			}
		}
		if got := f.Pager.StateBudget(); got != ctoken.MaxOpaqueStateBytes {
			t.Fatalf("seal=%v: StateBudget = %d, want %d", seal, got, ctoken.MaxOpaqueStateBytes)
		}
		for name, caller := range map[string]string{
			"1 KiB":     strings.Repeat("alice.secret@example.com/", 41)[:1024],
			"not UTF-8": "alice.secret\xff\xfe@example.com",
		} {
			t.Run(fmt.Sprintf("seal=%v/%s", seal, name), func(t *testing.T) {
				req := listReq()
				page, err := f.Pager.Start(callCtx(listMethod, caller), req)
				if err != nil {
					t.Fatal(err)
				}
				_, err = page.Next(make([]byte, f.Pager.StateBudget()+1))
				if !errors.Is(err, protopage.ErrKeyTooLarge) || !errors.Is(err, ctoken.ErrOpaqueStateTooLarge) {
					t.Fatalf("Next over the budget = %v, want ErrKeyTooLarge and ctoken.ErrOpaqueStateTooLarge", err)
				}
				token, err := page.Next(bytes.Repeat([]byte{1}, f.Pager.StateBudget()))
				if err != nil {
					t.Fatal(err)
				}
				raw, err := base64.RawURLEncoding.DecodeString(token)
				if err != nil || bytes.Contains(raw, []byte("secret")) || bytes.Contains(raw, []byte(listMethod)) {
					t.Fatalf("the token carries the caller or the method (%v)", err)
				}
				req.PageToken = token
				page, err = f.Pager.Start(callCtx(listMethod, caller), req)
				if err != nil || page.Index() != 1 || len(page.State()) != ctoken.MaxOpaqueStateBytes {
					t.Fatalf("page 2: %v", err)
				}
				_, err = f.Pager.Start(callCtx(listMethod, caller+"x"), req)
				if !errors.Is(err, ctoken.ErrCursorInvalid) || ctoken.ErrorCode(err) != ctoken.CodeCursorInvalid {
					t.Fatalf("another caller: %v", err)
				}
			})
		}
	}
}

// skipRequest builds, at run time, a proto3 List request with AIP-158's
// optional skip (an int32 named skipName) beside the page fields:
//
//	message SkipReq { string page_token = 1; int32 page_size = 2;
//	                  string filter = 3; int32 <skipName> = 4; string offset = 5; }
//
// offset is a string: a field that is not an integer is never a skip.
func skipRequest(t *testing.T, skipName string) protoreflect.MessageDescriptor {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	str, i32 := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("skip_test_" + skipName + ".proto"),
		Package: proto.String("ctoken.protopage.skiptest"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("SkipReq"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("page_token"), Number: proto.Int32(1), Label: opt, Type: str},
				{Name: proto.String("page_size"), Number: proto.Int32(2), Label: opt, Type: i32},
				{Name: proto.String("filter"), Number: proto.Int32(3), Label: opt, Type: str},
				{Name: proto.String(skipName), Number: proto.Int32(4), Label: opt, Type: i32},
				{Name: proto.String("offset"), Number: proto.Int32(5), Label: opt, Type: str},
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

// AIP-158 defines skip relative to the page token: it is left out of the
// fingerprint (by default the field "skip", else Config.SkipField), so a
// client that changes it between pages is not refused, while a change of
// any other field still is ErrRequestChanged.
func TestSkipMayChangeBetweenPages(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		cfg         protopage.Config
	}{
		{"default name", "skip", protopage.Config{}},
		{"configured name", "offset_rows", protopage.Config{SkipField: "offset_rows"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg)
			md := skipRequest(t, tc.field)
			req := func(token, filter string, skip int32) *dynamicpb.Message {
				m := dynamicpb.NewMessage(md)
				m.Set(md.Fields().ByName("page_token"), protoreflect.ValueOfString(token))
				m.Set(md.Fields().ByName("filter"), protoreflect.ValueOfString(filter))
				m.Set(md.Fields().ByName(protoreflect.Name(tc.field)), protoreflect.ValueOfInt32(skip))
				return m
			}
			ctx := callCtx(listMethod, "alice")
			page, err := f.Pager.Start(ctx, req("", "a", 0))
			if err != nil {
				t.Fatal(err)
			}
			token, err := page.Next([]byte("after:3"))
			if err != nil {
				t.Fatal(err)
			}
			for _, skip := range []int32{0, 10, 1 << 30} {
				next, err := f.Pager.Start(ctx, req(token, "a", skip))
				if err != nil || string(next.State()) != "after:3" {
					t.Fatalf("skip %d on page 2: %v", skip, err)
				}
			}
			if _, err := f.Pager.Start(ctx, req(token, "b", 10)); !errors.Is(err, protopage.ErrRequestChanged) {
				t.Fatalf("filter changed: %v; want ErrRequestChanged", err)
			}
			if _, err := f.Pager.Start(ctx, req(token, "b", 0)); !errors.Is(err, protopage.ErrRequestChanged) {
				t.Fatalf("filter changed, skip kept: %v; want ErrRequestChanged", err)
			}
		})
	}
	t.Run("a skip that is not an integer is bound", func(t *testing.T) {
		// offset is a string: with SkipField "offset" it is not an AIP-158
		// skip, and changing it is a changed request.
		f := newFixture(t, protopage.Config{SkipField: "offset"})
		md := skipRequest(t, "skip")
		m := func(offset string) *dynamicpb.Message {
			r := dynamicpb.NewMessage(md)
			r.Set(md.Fields().ByName("offset"), protoreflect.ValueOfString(offset))
			return r
		}
		a, err := f.Pager.Fingerprint(m("1"))
		if err != nil {
			t.Fatal(err)
		}
		if b, err := f.Pager.Fingerprint(m("2")); err != nil || a == b {
			t.Fatalf("a string offset left out of the fingerprint: %v", err)
		}
	})
}

func TestNextRefusesPastTheLastIndexAndUnmarshallableState(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	req := listReq()
	fp := fingerprint(t, f.Pager, req)
	token, err := f.Issuer.Issue(ctoken.CursorPayload{CursorScope: ctoken.CursorScope{ToolID: listMethod, CallerID: "alice", Args: fp}, Page: math.MaxUint32})
	if err != nil {
		t.Fatal(err)
	}
	req.PageToken = token
	page, err := f.Pager.Start(callCtx(listMethod, "alice"), req)
	if err != nil || page.Index() != math.MaxUint32 {
		t.Fatalf("Start: %v", err)
	}
	if _, err := page.Next(nil); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("Next past the last index: %v", err)
	}
	first, err := f.Pager.Start(callCtx(listMethod, "alice"), listReq())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.NextMessage(&librarypb.BookKey{Title: "\xff"}); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("NextMessage of a message that does not marshal: %v", err)
	}
}

func TestStartWithAnIssuerNotMadeByItsConstructorIsAServerFault(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	token := firstToken(t, f, listReq())
	p, err := protopage.New(protopage.Config{Issuer: &ctoken.CursorIssuer{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	req := listReq()
	req.PageToken = token
	if _, err := p.Start(callCtx(listMethod, "alice"), req); !errors.Is(err, protopage.ErrServer) || !errors.Is(err, ctoken.ErrNoKey) {
		t.Fatalf("zero issuer: %v", err)
	}
}
