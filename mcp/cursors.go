package ctokenmcp

import (
	"context"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CursorOptions configures [Cursors]: Caller (nil means TokenUserID) and
// Logger, as documented at [mcptoken.CursorOptions]. The zero value is ready
// to use.
type CursorOptions = mcptoken.CursorOptions[CallerFunc]

// Cursors issues and checks continuation cursors for paginated MCP tools.
// It is safe for concurrent use.
type Cursors struct {
	core   *mcptoken.Cursors
	caller CallerFunc
}

// NewCursors returns Cursors that sign with issuer. opts may be nil.
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
// every page of one listing has the same fingerprint: typically the typed
// input of the tool with its cursor field cleared (and tagged omitempty).
// A request without an authenticated caller is a *jsonrpc.Error with code
// -32603 (internal error), which an mcp.ToolHandlerFor must return
// unwrapped so that the SDK sends it as a protocol error.
func (c *Cursors) Scope(ctx context.Context, req *mcp.CallToolRequest, args any) (ctoken.CursorScope, error) {
	if req == nil || req.Params == nil {
		return ctoken.CursorScope{}, errNilRequest
	}
	id, err := callerOf(ctx, c.core.Integration(), c.caller, req)
	if err != nil {
		return ctoken.CursorScope{}, err
	}
	return c.core.Scope(id, req.Params.Name, args)
}

// Turn checks the cursor a client sent with req and returns the page turn:
// the cursor's verified payload (the zero payload, Page 0, for an empty
// cursor: the first page) and the scope the next cursor is bound to, so
// that Turn.Next issues it without fingerprinting args again. Errors are
// those of [Cursors.Resume].
func (c *Cursors) Turn(ctx context.Context, req *mcp.CallToolRequest, args any, cursor string) (mcptoken.Turn, error) {
	scope, err := c.Scope(ctx, req, args)
	if err != nil {
		return mcptoken.Turn{}, err
	}
	return c.core.Turn(ctx, scope, req.Params.Name, cursor)
}

// Resume checks the cursor a client sent with req and returns its payload.
// An empty cursor is the first page: the zero payload (Page 0) and no
// error. A request without an authenticated caller is refused as in Scope,
// even for the first page. [Cursors.Turn] does the same and keeps the scope
// for the next cursor.
//
// A cursor that does not verify, including one issued to another caller,
// for another tool, for other arguments, by another server session or too
// long ago, is a *jsonrpc.Error with code -32602 (invalid params) whose
// data member is {"ctokenCode":1020} for an expired cursor (start over) or
// {"ctokenCode":1021} for an invalid one; see TokenErrorCode. Return it from
// the tool handler as is (unwrapped): the SDK sends a *jsonrpc.Error as a
// protocol error and turns any other error into a tool result.
func (c *Cursors) Resume(ctx context.Context, req *mcp.CallToolRequest, args any, cursor string) (ctoken.CursorPayload, error) {
	t, err := c.Turn(ctx, req, args, cursor)
	return t.Payload, err
}

// Next issues the cursor for the page after the current one: bound like
// Scope(ctx, req, args), carrying page and the opaque state (at most
// ctoken.MaxOpaqueStateBytes). After [Cursors.Turn], Turn.Next does the same
// without building the scope again.
func (c *Cursors) Next(ctx context.Context, req *mcp.CallToolRequest, args any, page uint32, state []byte) (string, error) {
	scope, err := c.Scope(ctx, req, args)
	if err != nil {
		return "", err
	}
	return c.core.Next(scope, page, state)
}
