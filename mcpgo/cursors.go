package ctokenmcpgo

import (
	"context"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
)

// CursorOptions configures [Cursors]: Caller (nil means ContextCaller) and
// Logger, as documented at [mcptoken.CursorOptions]. The zero value is ready
// to use.
type CursorOptions = mcptoken.CursorOptions[CallerFunc]

// Cursors issues and checks continuation cursors for paginated mcp-go tools.
// It is safe for concurrent use.
type Cursors struct {
	core   *mcptoken.Cursors
	caller CallerFunc
}

// NewCursors returns Cursors that sign with issuer. opts may be nil. A nil
// issuer is an error.
func NewCursors(issuer *ctoken.CursorIssuer, opts *CursorOptions) (*Cursors, error) {
	core, caller, err := mcptoken.NewCursorsFor(issuer, opts, integration)
	if err != nil {
		return nil, err
	}
	return &Cursors{core: core, caller: callerOr(caller)}, nil
}

// Scope returns the scope a cursor of req is bound to: the tool
// (ctoken.MCPTarget("tools/call", name)), the authenticated caller, and the
// fingerprint of args (not bound when args is nil).
//
// args must be the call's arguments without the cursor itself, so that
// every page of one listing has the same fingerprint: typically the decoded
// input with its cursor field cleared (and tagged omitempty). A request
// without an authenticated caller is [ErrNoCaller].
func (c *Cursors) Scope(ctx context.Context, req mcp.CallToolRequest, args any) (ctoken.CursorScope, error) {
	id, err := c.caller(ctx)
	if id, err = c.core.Integration().Caller(ctx, id, err); err != nil {
		return ctoken.CursorScope{}, err
	}
	return c.core.Scope(id, req.Params.Name, args)
}

// Turn checks the cursor a client sent with req and returns the page turn:
// the cursor's verified payload (the zero payload, Page 0, for an empty
// cursor: the first page) and the scope the next cursor is bound to, so
// that Turn.Next issues it without fingerprinting args again. Errors are
// those of [Cursors.Resume].
func (c *Cursors) Turn(ctx context.Context, req mcp.CallToolRequest, args any, cursor string) (mcptoken.Turn, error) {
	scope, err := c.Scope(ctx, req, args)
	if err != nil {
		return mcptoken.Turn{}, err
	}
	return c.core.Turn(ctx, scope, req.Params.Name, cursor)
}

// Resume checks the cursor a client sent with req and returns its payload.
// An empty cursor is the first page: the zero payload (Page 0) and no
// error. A request without an authenticated caller is refused with
// [ErrNoCaller], even for the first page. [Cursors.Turn] does the same and
// keeps the scope for the next cursor.
//
// A cursor that does not verify, including one issued to another caller,
// for another tool, for other arguments, by another server session or too
// long ago, is a [*Rejection] with code 1020 (expired: start over) or 1021
// (invalid); no part of its payload is returned. Hand the error to
// [ToolResult].
func (c *Cursors) Resume(ctx context.Context, req mcp.CallToolRequest, args any, cursor string) (ctoken.CursorPayload, error) {
	t, err := c.Turn(ctx, req, args, cursor)
	return t.Payload, err
}

// Next issues the cursor for the page after the current one: bound like
// Scope(ctx, req, args), carrying page and the opaque state (at most
// ctoken.MaxOpaqueStateBytes). After [Cursors.Turn], Turn.Next does the same
// without building the scope again.
func (c *Cursors) Next(ctx context.Context, req mcp.CallToolRequest, args any, page uint32, state []byte) (string, error) {
	scope, err := c.Scope(ctx, req, args)
	if err != nil {
		return "", err
	}
	return c.core.Next(scope, page, state)
}
