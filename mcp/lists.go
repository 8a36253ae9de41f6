package ctokenmcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SecureListCursors installs, on server, receiving middleware that seals
// the cursors of the four list methods (tools/list, prompts/list,
// resources/list and resources/templates/list) with issuer, so that every
// list cursor the server hands out is ctoken's: sealed (the SDK's own
// cursor travels inside, encrypted) and bound to the list method, to the
// authenticated caller (opts.Caller, TokenUserID when nil) and to the
// transport session (the session's ID, as [mcp.ServerSession.ID] reports
// it). The lists themselves are unchanged: the SDK pages as before, with
// its own cursor, and returns the same items in the same pages.
//
// A transport without sessions (stdio, in-memory transports, stateless
// streamable HTTP, and every request of protocol 2026-07-28, which has no
// sessions) has the empty session ID: its list cursors are bound to the
// method and the caller only, and a cursor handed out on one such
// connection is accepted for the same caller on another. A cursor issued in
// a session is refused outside it, and one issued without a session is
// refused in any session. After a restart, a cursor of a session is
// refused by the SDK (the session is gone); one without a session is
// expired (1020) when the issuer's session was random.
//
// A cursor that does not open (another caller's, another session's,
// another list method's, a tampered, forged or expired one, or one from
// before a restart with a random issuer session) never reaches the SDK:
// the client gets JSON-RPC error -32602 with data {"ctokenCode":1020}
// (expired: list again from the start) or {"ctokenCode":1021} (invalid),
// see [TokenErrorCode]; the reason goes to opts.Logger only. Every list
// request needs an authenticated caller, also when the list fits one page:
// one without is -32603. A page whose SDK cursor does not fit a cursor's
// state (the issuer's ctoken.CursorIssuer.StateBudget, 256 bytes by
// default, less one, after base64 is undone: a go-sdk cursor of a tool or
// prompt name, or a resource URI, of more than 212 bytes) is -32603 and
// logged at Error, rather than sent as a last page.
//
// issuer must seal (ctoken.CursorConfig.Seal): an issuer that signs only
// would show the SDK's cursor, and is an error matching ctoken.ErrConfig;
// so are a nil server, a nil issuer, and an issuer not made by
// ctoken.NewCursorIssuer (ctoken.ErrNoKey too). opts may be nil. Install it
// once, before serving; it does not touch the cursors a paginated tool
// issues with [Cursors].
func SecureListCursors(server *mcp.Server, issuer *ctoken.CursorIssuer, opts *CursorOptions) error {
	if server == nil {
		return errors.New("ctokenmcp: SecureListCursors: nil server")
	}
	core, caller, err := mcptoken.NewListCursorsFor(issuer, opts, integration)
	if err != nil {
		return err
	}
	l := &listCursors{core: core, caller: callerOr(caller)}
	server.AddReceivingMiddleware(l.middleware)
	return nil
}

// listCursors is the middleware of SecureListCursors.
type listCursors struct {
	core   *mcptoken.ListCursors
	caller CallerFunc
}

// listCursor returns the cursor of a list request, and false for a request
// of another type.
func listCursor(req mcp.Request) (string, bool) {
	switch r := req.(type) {
	case *mcp.ListToolsRequest:
		if r.Params != nil {
			return r.Params.Cursor, true
		}
		return "", true
	case *mcp.ListPromptsRequest:
		if r.Params != nil {
			return r.Params.Cursor, true
		}
		return "", true
	case *mcp.ListResourcesRequest:
		if r.Params != nil {
			return r.Params.Cursor, true
		}
		return "", true
	case *mcp.ListResourceTemplatesRequest:
		if r.Params != nil {
			return r.Params.Cursor, true
		}
		return "", true
	}
	return "", false
}

// withListCursor returns a copy of the list request req (whose cursor is
// not empty, so its params are not nil) carrying cursor. The caller's
// request and params are not modified.
func withListCursor(req mcp.Request, cursor string) mcp.Request {
	switch r := req.(type) {
	case *mcp.ListToolsRequest:
		p, cp := *r.Params, *r
		p.Cursor, cp.Params = cursor, &p
		return &cp
	case *mcp.ListPromptsRequest:
		p, cp := *r.Params, *r
		p.Cursor, cp.Params = cursor, &p
		return &cp
	case *mcp.ListResourcesRequest:
		p, cp := *r.Params, *r
		p.Cursor, cp.Params = cursor, &p
		return &cp
	case *mcp.ListResourceTemplatesRequest:
		p, cp := *r.Params, *r
		p.Cursor, cp.Params = cursor, &p
		return &cp
	}
	return req
}

// nextCursor returns the next cursor of a list result and a function
// returning a copy of the result carrying another one (the SDK may keep
// the result it returned); known is false for a result of another type,
// whose cursor cannot be found.
func nextCursor(res mcp.Result) (cursor string, replace func(string) mcp.Result, known bool) {
	switch r := res.(type) {
	case *mcp.ListToolsResult:
		if r != nil && r.NextCursor != "" {
			return r.NextCursor, func(c string) mcp.Result { cp := *r; cp.NextCursor = c; return &cp }, true
		}
	case *mcp.ListPromptsResult:
		if r != nil && r.NextCursor != "" {
			return r.NextCursor, func(c string) mcp.Result { cp := *r; cp.NextCursor = c; return &cp }, true
		}
	case *mcp.ListResourcesResult:
		if r != nil && r.NextCursor != "" {
			return r.NextCursor, func(c string) mcp.Result { cp := *r; cp.NextCursor = c; return &cp }, true
		}
	case *mcp.ListResourceTemplatesResult:
		if r != nil && r.NextCursor != "" {
			return r.NextCursor, func(c string) mcp.Result { cp := *r; cp.NextCursor = c; return &cp }, true
		}
	default:
		return "", nil, res == nil
	}
	return "", nil, true
}

// unknown logs a list request or result of a type the middleware does not
// know, at Error.
func (l *listCursors) unknown(ctx context.Context, method, what string, v any) {
	l.core.Integration().Logger().LogAttrs(ctx, slog.LevelError, "ctokenmcp: list "+what+" of an unknown type: refused",
		slog.String("method", method), slog.String("type", fmt.Sprintf("%T", v)))
}

// sessionOf returns the ID of the server session req arrived on, "" when
// the transport has none.
func sessionOf(req mcp.Request) string {
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		return ss.ID()
	}
	return ""
}

// errListSealing is the error the client is sent when a list page's cursor
// cannot be sealed; the reason is in the log.
func errListSealing() error {
	return refused(mcptoken.Refusal{Message: "server error sealing a list cursor", Internal: true})
}

func (l *listCursors) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !mcptoken.IsListMethod(method) {
			return next(ctx, method, req)
		}
		wire, ok := listCursor(req)
		if !ok {
			// A list method whose request is not one of the SDK's list
			// requests (not in go-sdk v1.8.0): its cursors could not be
			// sealed, so nothing of it is served.
			l.unknown(ctx, method, "request", req)
			return nil, errListSealing()
		}
		caller, err := callerOf(ctx, l.core.Integration(), l.caller, req)
		if err != nil {
			return nil, err
		}
		session := sessionOf(req)
		inner, err := l.core.Open(ctx, caller, session, method, wire)
		if err != nil {
			return nil, err
		}
		if wire != "" {
			req = withListCursor(req, inner)
		}
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		sdk, replace, known := nextCursor(res)
		if !known {
			l.unknown(ctx, method, "result", res)
			return nil, errListSealing()
		}
		if sdk == "" {
			return res, nil
		}
		out, err := l.core.Seal(ctx, caller, session, method, sdk)
		if err != nil {
			return nil, errListSealing()
		}
		return replace(out), nil
	}
}
