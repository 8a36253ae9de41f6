package connectpage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/connectpage"
	"github.com/ctoken/ctoken/protopage/connectpage/examples/librarypbconnect"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/internal/pagetest"
	"github.com/ctoken/ctoken/protopage/internal/shelf"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// handler is the Connect face of the example shelf.
type handler struct{ shelf *shelf.Shelf }

func (h *handler) ListBooks(ctx context.Context, req *connect.Request[librarypb.ListBooksRequest]) (*connect.Response[librarypb.ListBooksResponse], error) {
	resp, err := h.shelf.ListBooks(ctx, req.Msg)
	if errors.Is(err, shelf.ErrBadRequest) {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// headerCaller takes the caller from the X-Caller header: a stand-in for
// real authentication, for tests only.
func headerCaller(_ context.Context, req connect.AnyRequest) (string, error) {
	if c := req.Header().Get("X-Caller"); c != "" {
		return c, nil
	}
	return "", errors.New("no X-Caller")
}

// start serves the shelf with Connect on a loopback port (HTTP/2 over TLS,
// so that the gRPC protocol works too) and returns the server.
func start(t testing.TB, pager *protopage.Pager, books []*librarypb.Book) *httptest.Server {
	t.Helper()
	intercept, err := connectpage.NewInterceptor(headerCaller)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(librarypbconnect.NewLibraryServiceHandler(&handler{&shelf.Shelf{Pager: pager, Books: books}}, connect.WithInterceptors(intercept)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	if !strings.HasPrefix(srv.URL, "https://127.0.0.1:") {
		t.Fatalf("server at %s, want loopback", srv.URL)
	}
	return srv
}

// protocols are the ways a Connect client can call the handler.
var protocols = map[string][]connect.ClientOption{
	"connect+proto": nil,
	"connect+json":  {connect.WithProtoJSON()},
	"grpc":          {connect.WithGRPC()},
	"grpc-web":      {connect.WithGRPCWeb()},
}

func call(client librarypbconnect.LibraryServiceClient, caller string, req *librarypb.ListBooksRequest) (*librarypb.ListBooksResponse, error) {
	r := connect.NewRequest(req)
	if caller != "" {
		r.Header().Set("X-Caller", caller)
	}
	resp, err := client.ListBooks(context.Background(), r)
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func TestConnectPagesToTheEndHonoringPageSizeChanges(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	books := shelf.Books(60)
	srv := start(t, f.Pager, books)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := librarypbconnect.NewLibraryServiceClient(srv.Client(), srv.URL, opts...)
			req := &librarypb.ListBooksRequest{Parent: "shelves/a", Filter: "a", PageSize: 3}
			want := shelf.Sorted(books, req)
			var got []*librarypb.Book
			for pages := 0; ; pages++ {
				if pages > len(want) {
					t.Fatal("more pages than books")
				}
				resp, err := call(client, "alice", req)
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
				req.PageSize = int32(pages%4 + 1)
			}
			if len(got) != len(want) {
				t.Fatalf("%d books, want %d", len(got), len(want))
			}
			for i := range want {
				if !proto.Equal(got[i], want[i]) {
					t.Fatalf("book %d: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestConnectRefusesWithInvalidArgumentAndNoReason(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	srv := start(t, f.Pager, shelf.Books(30))
	req := &librarypb.ListBooksRequest{Parent: "shelves/b", PageSize: 2, OrderBy: "title"}
	for name, opts := range protocols {
		client := librarypbconnect.NewLibraryServiceClient(srv.Client(), srv.URL, opts...)
		first, err := call(client, "alice", req)
		if err != nil || first.NextPageToken == "" {
			t.Fatalf("%s: first page: %v, %v", name, first, err)
		}
		for _, r := range f.Refusals(t, req, first.NextPageToken) {
			t.Run(name+"/"+r.Name, func(t *testing.T) {
				f.Advance(r.Advance)
				t.Cleanup(func() { f.Advance(-r.Advance) })
				caller := "alice"
				if r.Caller != "" {
					caller = r.Caller
				}
				sent := r.Request()
				before := len(f.Log.String())
				resp, err := call(client, caller, sent)
				var ce *connect.Error
				if resp != nil || !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
					t.Fatalf("ListBooks = %v, %v; want invalid_argument", resp, err)
				}
				pagetest.CheckRefusal(t, ce.Message(), r.Want, f.Log.String()[before:], sent.PageToken, caller)
			})
		}
	}
}

// TestConnectBindsTheProcedureAsGRPCNamesIt sends a token issued for
// pagetest.ListMethod (gRPC's full method name) outside any transport, over
// every protocol: the interceptor must name the call exactly so.
func TestConnectBindsTheProcedureAsGRPCNamesIt(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	srv := start(t, f.Pager, shelf.Books(10))
	req := &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: 2}
	req.PageToken = f.TokenFor(t, req, "alice")
	for name, opts := range protocols {
		client := librarypbconnect.NewLibraryServiceClient(srv.Client(), srv.URL, opts...)
		if _, err := call(client, "alice", req); err != nil {
			t.Fatalf("%s: a token for %s: %v", name, pagetest.ListMethod, err)
		}
	}
}

// post sends body to ListBooks as curl would: a plain HTTP POST with a JSON
// body (the Connect protocol's unary form). It returns the status and the
// response body.
func post(t *testing.T, srv *httptest.Server, caller, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+librarypbconnect.LibraryServiceListBooksProcedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if caller != "" {
		req.Header.Set("X-Caller", caller)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// errorBody is the Connect protocol's JSON error.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func TestPlainHTTPJSONPagesAndIsRefusedWithStatus400(t *testing.T) {
	f := pagetest.New(t, protopage.Config{})
	books := shelf.Books(40)
	srv := start(t, f.Pager, books)
	want := shelf.Sorted(books, &librarypb.ListBooksRequest{Parent: "shelves/a", OrderBy: "year"})

	// The first page over the Connect client in binary protobuf; the rest
	// as JSON with the fields spelled, ordered and spaced another way each
	// time: the token is bound to the request, not to its encoding.
	client := librarypbconnect.NewLibraryServiceClient(srv.Client(), srv.URL)
	first, err := call(client, "alice", &librarypb.ListBooksRequest{Parent: "shelves/a", OrderBy: "year", PageSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	got, token := first.Books, first.NextPageToken
	bodies := []string{
		`{"parent":"shelves/a","orderBy":"year","pageSize":3,"pageToken":%q}`,
		"{\n  \"page_token\" : %q ,\n  \"order_by\":\"year\",\t\"parent\": \"shelves/a\"\n}",
		`  { "pageToken": %q, "parent": "shelves/a", "order_by": "year", "page_size": "5" }  `,
	}
	for i := 0; token != ""; i++ {
		if i > len(want) {
			t.Fatal("more pages than books")
		}
		code, body := post(t, srv, "alice", fmt.Sprintf(bodies[i%len(bodies)], token))
		if code != http.StatusOK {
			t.Fatalf("page %d: HTTP %d %s", i+2, code, body)
		}
		var resp librarypb.ListBooksResponse
		if err := protojson.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		got, token = append(got, resp.Books...), resp.NextPageToken
	}
	if len(got) != len(want) {
		t.Fatalf("%d books, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("book %d: %v, want %v", i, got[i], want[i])
		}
	}

	req := &librarypb.ListBooksRequest{Parent: "shelves/a", OrderBy: "year", PageSize: 2}
	code, body := post(t, srv, "alice", `{"parent":"shelves/a","orderBy":"year","pageSize":2}`)
	var firstJSON librarypb.ListBooksResponse
	if code != http.StatusOK || protojson.Unmarshal(body, &firstJSON) != nil || firstJSON.NextPageToken == "" {
		t.Fatalf("first page as JSON: HTTP %d %s", code, body)
	}
	for _, r := range f.Refusals(t, req, firstJSON.NextPageToken) {
		t.Run(r.Name, func(t *testing.T) {
			f.Advance(r.Advance)
			t.Cleanup(func() { f.Advance(-r.Advance) })
			caller := "alice"
			if r.Caller != "" {
				caller = r.Caller
			}
			sent := r.Request()
			text, err := protojson.Marshal(sent)
			if err != nil {
				t.Fatal(err)
			}
			before := len(f.Log.String())
			code, body := post(t, srv, caller, string(text))
			var e errorBody
			if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Code != "invalid_argument" {
				t.Fatalf("HTTP %d %s; want 400 invalid_argument", code, body)
			}
			pagetest.CheckRefusal(t, e.Message, r.Want, f.Log.String()[before:], sent.PageToken, caller)
		})
	}

	code, body = post(t, srv, "", `{"parent":"shelves/a"}`)
	var e errorBody
	if code != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Code != "unauthenticated" {
		t.Fatalf("no caller: HTTP %d %s", code, body)
	}
	pagetest.CheckClientMessage(t, e.Message, protopage.ErrNoCaller)
}

func TestConnectMapsServerFaultsToInternalAndPassesOtherErrors(t *testing.T) {
	f := pagetest.New(t, protopage.Config{PageSizeField: "limit"})
	srv := start(t, f.Pager, shelf.Books(10))
	client := librarypbconnect.NewLibraryServiceClient(srv.Client(), srv.URL)
	_, err := call(client, "alice", &librarypb.ListBooksRequest{Parent: "shelves/a"})
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInternal || ce.Message() != "internal error" {
		t.Fatalf("server fault: %v", err)
	}
	_, err = call(client, "alice", &librarypb.ListBooksRequest{Parent: "shelves/a", PageSize: -1})
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || ce.Message() != "shelf: bad request: page_size is negative" {
		t.Fatalf("handler error: %v", err)
	}
}

func TestErrorMapsEveryKindWhateverTheWrapping(t *testing.T) {
	other := errors.New("other")
	for _, tc := range []struct {
		err  error
		code connect.Code
		msg  string
	}{
		{protopage.ErrTokenInvalid, connect.CodeInvalidArgument, protopage.ErrTokenInvalid.Error()},
		{fmt.Errorf("listing shelves/a: %w", protopage.ErrTokenExpired), connect.CodeInvalidArgument, protopage.ErrTokenExpired.Error()},
		{fmt.Errorf("x: %w", protopage.ErrRequestChanged), connect.CodeInvalidArgument, protopage.ErrRequestChanged.Error()},
		{protopage.ErrNoCaller, connect.CodeUnauthenticated, protopage.ErrNoCaller.Error()},
		{fmt.Errorf("listing: %w", protopage.ErrKeyTooLarge), connect.CodeFailedPrecondition, protopage.ErrKeyTooLarge.Error()},
		{fmt.Errorf("secret detail: %w", protopage.ErrServer), connect.CodeInternal, "internal error"},
	} {
		var ce *connect.Error
		if !errors.As(connectpage.Error(tc.err), &ce) || ce.Code() != tc.code || ce.Message() != tc.msg {
			t.Errorf("Error(%v) = %v, want %v %q", tc.err, ce, tc.code, tc.msg)
		}
	}
	if connectpage.Error(nil) != nil || connectpage.Error(other) != other {
		t.Error("Error changed nil or a foreign error")
	}
}

func TestNewInterceptorRefusesNilCaller(t *testing.T) {
	if i, err := connectpage.NewInterceptor(nil); i != nil || !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("nil caller: %v", err)
	}
}
