// Package grpcpage connects protopage to grpc-go: a unary server
// interceptor that tells [protopage.Pager.Start] which RPC and which caller
// a request is, and turns protopage's errors into gRPC statuses.
// Most users install [UnaryServerInterceptor] on their grpc.Server, as
// ExampleUnaryServerInterceptor shows.
//
// It lives in its own module, github.com/ctoken/ctoken/protopage/grpcpage,
// so that protopage itself does not depend on grpc-go.
//
// The interceptor cannot page by itself: only the handler knows the sort
// key of the last item it returned. So the handler calls the helper,
// [protopage.Pager.Start] then [protopage.Page.Next], and returns their
// errors as they are; the interceptor puts the [protopage.Call] (the full
// method name and the caller) in the context and maps the errors:
//
//	protopage.ErrTokenInvalid    codes.InvalidArgument       "page_token is invalid"
//	protopage.ErrTokenExpired    codes.InvalidArgument       "page_token has expired: start over …"
//	protopage.ErrRequestChanged  codes.InvalidArgument       "page_token does not match this request: …"
//	protopage.ErrNoCaller        codes.Unauthenticated       "the request has no authenticated caller"
//	protopage.ErrKeyTooLarge     codes.FailedPrecondition    "page_token cannot be issued: … another page_size …"
//	protopage.ErrServer          codes.Internal              "internal error"
//
// The status message is the error's fixed text (for ErrServer, "internal
// error"), whatever the handler wrapped around it: the reason a token was
// refused goes to the Pager's logger only. Any other error passes through
// unchanged. Streaming RPCs are not intercepted (AIP-158 List methods are
// unary); a streaming handler can use [protopage.WithCall] and [Status].
//
// The interceptor is safe for concurrent use.
package grpcpage

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor returns the interceptor: it puts a
// [protopage.Call] with the RPC's full method name and caller in each
// request's context, and maps the handler's protopage errors with
// [Status]. caller finds the authenticated caller (from the context:
// metadata, peer certificate, or what an authentication interceptor
// earlier in the chain stored); it is called only when the handler calls
// [protopage.Pager.Start]. A nil caller is ctoken.ErrConfig.
func UnaryServerInterceptor(caller protopage.CallerFunc) (grpc.UnaryServerInterceptor, error) {
	if caller == nil {
		return nil, fmt.Errorf("%w: grpcpage.UnaryServerInterceptor: nil CallerFunc", ctoken.ErrConfig)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(protopage.WithCall(ctx, protopage.Call{Method: info.FullMethod, Caller: caller}), req)
		if err != nil {
			return resp, Status(err)
		}
		return resp, nil
	}, nil
}

// Status returns the gRPC status error for a protopage error (see the
// package documentation for the table), and err itself for any other
// error, nil included.
func Status(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, protopage.ErrTokenInvalid):
		return status.Error(codes.InvalidArgument, protopage.ErrTokenInvalid.Error())
	case errors.Is(err, protopage.ErrTokenExpired):
		return status.Error(codes.InvalidArgument, protopage.ErrTokenExpired.Error())
	case errors.Is(err, protopage.ErrRequestChanged):
		return status.Error(codes.InvalidArgument, protopage.ErrRequestChanged.Error())
	case errors.Is(err, protopage.ErrNoCaller):
		return status.Error(codes.Unauthenticated, protopage.ErrNoCaller.Error())
	case errors.Is(err, protopage.ErrKeyTooLarge):
		return status.Error(codes.FailedPrecondition, protopage.ErrKeyTooLarge.Error())
	case errors.Is(err, protopage.ErrServer):
		return status.Error(codes.Internal, "internal error")
	}
	return err
}
