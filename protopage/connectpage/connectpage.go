// Package connectpage connects protopage to Connect (connectrpc.com/connect):
// an interceptor that tells [protopage.Pager.Start] which procedure and
// which caller a request is, and turns protopage's errors into Connect
// errors, for every protocol a Connect handler serves (Connect with binary
// or JSON bodies, gRPC, gRPC-Web).
// Most users add [NewInterceptor] to their handler's options, as
// ExampleNewInterceptor shows.
//
// It lives in its own module, github.com/ctoken/ctoken/protopage/connectpage,
// so that protopage itself does not depend on Connect.
//
// The interceptor cannot page by itself: only the handler knows the sort
// key of the last item it returned. So the handler calls the helper,
// [protopage.Pager.Start] then [protopage.Page.Next], and returns their
// errors as they are; the interceptor puts the [protopage.Call] (the
// procedure, "/package.Service/Method", the same string gRPC uses, so a
// token verifies whichever protocol carried it, and the caller) in the
// context and maps the errors:
//
//	protopage.ErrTokenInvalid    connect.CodeInvalidArgument     "page_token is invalid"
//	protopage.ErrTokenExpired    connect.CodeInvalidArgument     "page_token has expired: start over …"
//	protopage.ErrRequestChanged  connect.CodeInvalidArgument     "page_token does not match this request: …"
//	protopage.ErrNoCaller        connect.CodeUnauthenticated     "the request has no authenticated caller"
//	protopage.ErrKeyTooLarge     connect.CodeFailedPrecondition  "page_token cannot be issued: … another page_size …"
//	protopage.ErrServer          connect.CodeInternal            "internal error"
//
// Over plain HTTP (the Connect protocol, a POST with a JSON body, as curl
// sends it) these are HTTP 400, 401, 400 and 500 with a JSON body
// {"code":"invalid_argument","message":"…"}. The message is the error's
// fixed text whatever the handler wrapped around it: the reason a token was
// refused goes to the Pager's logger only. Any other error passes through
// unchanged. Streaming procedures and clients are not intercepted.
//
// The interceptor is safe for concurrent use.
package connectpage

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
)

// CallerFunc returns the authenticated caller of req (from its headers, or
// what an authentication middleware put in ctx). An error or an empty
// caller refuses the request with [protopage.ErrNoCaller].
type CallerFunc func(ctx context.Context, req connect.AnyRequest) (string, error)

// NewInterceptor returns the interceptor for handlers: it puts a
// [protopage.Call] with the procedure and caller in each unary request's
// context, and maps the handler's protopage errors with [Error]. caller is
// called only when the handler calls [protopage.Pager.Start]. A nil caller
// is ctoken.ErrConfig.
func NewInterceptor(caller CallerFunc) (connect.Interceptor, error) {
	if caller == nil {
		return nil, fmt.Errorf("%w: connectpage.NewInterceptor: nil CallerFunc", ctoken.ErrConfig)
	}
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IsClient {
				return next(ctx, req)
			}
			call := protopage.Call{
				Method: req.Spec().Procedure,
				Caller: func(ctx context.Context) (string, error) { return caller(ctx, req) },
			}
			resp, err := next(protopage.WithCall(ctx, call), req)
			if err != nil {
				return resp, Error(err)
			}
			return resp, nil
		}
	}), nil
}

// Error returns the *connect.Error for a protopage error (see the package
// documentation for the table), and err itself for any other error, nil
// included.
func Error(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, protopage.ErrTokenInvalid):
		return connect.NewError(connect.CodeInvalidArgument, protopage.ErrTokenInvalid)
	case errors.Is(err, protopage.ErrTokenExpired):
		return connect.NewError(connect.CodeInvalidArgument, protopage.ErrTokenExpired)
	case errors.Is(err, protopage.ErrRequestChanged):
		return connect.NewError(connect.CodeInvalidArgument, protopage.ErrRequestChanged)
	case errors.Is(err, protopage.ErrNoCaller):
		return connect.NewError(connect.CodeUnauthenticated, protopage.ErrNoCaller)
	case errors.Is(err, protopage.ErrKeyTooLarge):
		return connect.NewError(connect.CodeFailedPrecondition, protopage.ErrKeyTooLarge)
	case errors.Is(err, protopage.ErrServer):
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
	return err
}
