package ctokenmcpgo

import (
	"context"
	"log/slog"
	"sync"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// SecureListCursors returns one server option that seals the cursors of the
// four list methods (tools/list, prompts/list, resources/list and
// resources/templates/list) with issuer, so that every list cursor the
// server hands out is ctoken's: sealed (mcp-go's own cursor, the base64 of
// the last item's name, travels inside, encrypted) and bound to the list
// method, to the authenticated caller (opts.Caller, ContextCaller when nil)
// and to the client session (the SessionID of
// server.ClientSessionFromContext). The lists themselves are unchanged:
// mcp-go pages as before (server.WithPaginationLimit), with its own cursor,
// and returns the same items in the same pages. mcp-go v1.2.1 pages a
// fifth list, tasks/list (the tasks of AddTaskTool, which this module does
// not cover): its cursors stay mcp-go's own, the base64 of a task ID,
// unsealed and bound to no one.
//
// A request without a session (stateless streamable HTTP, and protocol
// 2026-07-28, which has no sessions) has the empty session ID: its list
// cursors are bound to the method and the caller only, and a cursor handed
// out on one such connection is accepted for the same caller on another. A
// cursor issued in a session is refused outside it, and one issued without
// a session is refused in any session.
//
// mcp-go v1.2.1 lets a list be changed only through hooks, which cannot
// fail a request. A cursor that does not open (another caller's, another
// session's, another list method's, a tampered, forged or expired one), and
// a list request without an authenticated caller, are therefore handed to
// mcp-go as a cursor it cannot decode, and mcp-go answers JSON-RPC error
// -32602 (invalid params, its own message "illegal base64 data at input
// byte 0"): nothing of the client's cursor reaches mcp-go. The client
// cannot tell an expired cursor from a forged one (there is no data
// member); the log tells, with ctoken's reason, never the cursor. Package
// ctokenmcp sends the same refusals with {"ctokenCode":1020|1021}. A page
// whose cursor cannot be sealed (an item name of more than the issuer's
// StateBudget less one bytes) is logged at Error and carries a cursor that
// is refused on the next page.
//
// issuer must seal (ctoken.CursorConfig.Seal): an issuer that signs only
// would show mcp-go's cursor, and is an error matching ctoken.ErrConfig; so
// is an issuer not made by ctoken.NewCursorIssuer (ctoken.ErrNoKey too),
// and a nil issuer is an error. opts may be nil.
//
// The option adds hooks to the server's hooks (server.Hooks), keeping any
// already there: its after-list hooks run before theirs, so every
// OnAfterList hook sees the sealed cursor the client gets; the OnSuccess
// hooks, which mcp-go runs before any of them, and OnBeforeList hooks
// added after the option, see mcp-go's own cursor. server.WithHooks replaces the server's hooks, these
// included, so pass SecureListCursors after any server.WithHooks:
// server.NewMCPServer(name, version, server.WithHooks(h), list, ...).
// Passed before it, the option cannot fail at construction: it also adds
// a tool filter and a prompt filter (server.WithToolFilter,
// server.WithPromptFilter) that see the hooks replaced, log that at Error
// once, and fail closed: every tool and prompt is withheld from its list
// and its calls. mcp-go has no filter for resources, so a server that
// serves resources and no tools or prompts gets no such check.
func SecureListCursors(issuer *ctoken.CursorIssuer, opts *CursorOptions) (server.ServerOption, error) {
	core, caller, err := mcptoken.NewListCursorsFor(issuer, opts, integration)
	if err != nil {
		return nil, err
	}
	l := &listCursors{core: core, caller: callerOr(caller)}
	return l.install, nil
}

// listCursors are the hooks of SecureListCursors.
type listCursors struct {
	core   *mcptoken.ListCursors
	caller CallerFunc
	// replaced logs, once, hooks replaced after install.
	replaced sync.Once
}

// refusedCursor is what mcp-go is handed for a cursor that does not open:
// not base64, so mcp-go answers -32602 and lists nothing.
const refusedCursor mcp.Cursor = "!"

// unsealable is the next cursor of a page whose cursor cannot be sealed: it
// is refused (as not base64url) when it comes back.
const unsealable mcp.Cursor = "ctoken:unsealable"

// install adds the hooks to s (its after-list hooks first, so that every
// after-list hook already there sees the sealed cursor), and a tool filter
// and a prompt filter that fail closed when they are replaced later
// ([listCursors.intact]).
func (l *listCursors) install(s *server.MCPServer) {
	h := s.GetHooks()
	if h == nil {
		h = &server.Hooks{}
		server.WithHooks(h)(s)
	}
	server.WithToolFilter(func(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
		if !l.intact(ctx, s, h) {
			return nil
		}
		return tools
	})(s)
	server.WithPromptFilter(func(ctx context.Context, prompts []mcp.Prompt) []mcp.Prompt {
		if !l.intact(ctx, s, h) {
			return nil
		}
		return prompts
	})(s)
	h.AddBeforeListTools(func(ctx context.Context, _ any, r *mcp.ListToolsRequest) {
		l.open(ctx, mcptoken.MethodListTools, &r.Params.Cursor)
	})
	h.OnAfterListTools = append([]server.OnAfterListToolsFunc{func(ctx context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
		if res != nil {
			l.seal(ctx, mcptoken.MethodListTools, &res.NextCursor)
		}
	}}, h.OnAfterListTools...)
	h.AddBeforeListPrompts(func(ctx context.Context, _ any, r *mcp.ListPromptsRequest) {
		l.open(ctx, mcptoken.MethodListPrompts, &r.Params.Cursor)
	})
	h.OnAfterListPrompts = append([]server.OnAfterListPromptsFunc{func(ctx context.Context, _ any, _ *mcp.ListPromptsRequest, res *mcp.ListPromptsResult) {
		if res != nil {
			l.seal(ctx, mcptoken.MethodListPrompts, &res.NextCursor)
		}
	}}, h.OnAfterListPrompts...)
	h.AddBeforeListResources(func(ctx context.Context, _ any, r *mcp.ListResourcesRequest) {
		l.open(ctx, mcptoken.MethodListResources, &r.Params.Cursor)
	})
	h.OnAfterListResources = append([]server.OnAfterListResourcesFunc{func(ctx context.Context, _ any, _ *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		if res != nil {
			l.seal(ctx, mcptoken.MethodListResources, &res.NextCursor)
		}
	}}, h.OnAfterListResources...)
	h.AddBeforeListResourceTemplates(func(ctx context.Context, _ any, r *mcp.ListResourceTemplatesRequest) {
		l.open(ctx, mcptoken.MethodListResourceTemplates, &r.Params.Cursor)
	})
	h.OnAfterListResourceTemplates = append([]server.OnAfterListResourceTemplatesFunc{func(ctx context.Context, _ any, _ *mcp.ListResourceTemplatesRequest, res *mcp.ListResourceTemplatesResult) {
		if res != nil {
			l.seal(ctx, mcptoken.MethodListResourceTemplates, &res.NextCursor)
		}
	}}, h.OnAfterListResourceTemplates...)
}

// intact reports whether s still runs the hooks h that install added to;
// server.WithHooks after SecureListCursors replaces them, and mcp-go would
// hand out its own cursors unsealed. That is logged at Error, once.
func (l *listCursors) intact(ctx context.Context, s *server.MCPServer, h *server.Hooks) bool {
	if s.GetHooks() == h {
		return true
	}
	l.replaced.Do(func() {
		l.core.Integration().Logger().LogAttrs(ctx, slog.LevelError,
			"ctokenmcpgo: SecureListCursors: the server's hooks were replaced after it (server.WithHooks after SecureListCursors): its list cursors would be mcp-go's own, unsealed; every tool and prompt is withheld until server.WithHooks comes first")
	})
	return false
}

// sessionOf returns the ID of the client session of ctx, "" when there is
// none.
func sessionOf(ctx context.Context) string {
	if s := server.ClientSessionFromContext(ctx); s != nil {
		return s.SessionID()
	}
	return ""
}

// open replaces the client's cursor with mcp-go's own, or with
// refusedCursor when it does not open or the request has no caller.
func (l *listCursors) open(ctx context.Context, method string, cursor *mcp.Cursor) {
	id, err := l.caller(ctx)
	caller, err := l.core.Integration().Caller(ctx, id, err)
	if err != nil {
		*cursor = refusedCursor
		return
	}
	inner, err := l.core.Open(ctx, caller, sessionOf(ctx), method, string(*cursor))
	if err != nil {
		*cursor = refusedCursor
		return
	}
	*cursor = mcp.Cursor(inner)
}

// seal replaces mcp-go's next cursor with the sealed one, or with
// unsealable when it cannot be sealed (logged by the core).
func (l *listCursors) seal(ctx context.Context, method string, cursor *mcp.Cursor) {
	if *cursor == "" {
		return
	}
	id, err := l.caller(ctx)
	caller, err := l.core.Integration().Caller(ctx, id, err)
	if err != nil {
		*cursor = unsealable
		return
	}
	out, err := l.core.Seal(ctx, caller, sessionOf(ctx), method, string(*cursor))
	if err != nil {
		*cursor = unsealable
		return
	}
	*cursor = mcp.Cursor(out)
}
