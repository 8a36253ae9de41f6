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

// CursorOptions configures Cursors. The zero value is ready to use.
type CursorOptions struct {
	// Caller finds the authenticated caller; nil means TokenUserID.
	Caller CallerFunc
	// Logger receives one record per rejected cursor, with the tool name
	// and ctoken's log-safe reason (never the cursor). Nil discards them.
	Logger *slog.Logger
}

// Cursors issues and checks continuation cursors for paginated MCP tools.
// It is safe for concurrent use.
type Cursors struct {
	issuer *ctoken.CursorIssuer
	caller CallerFunc
	log    *slog.Logger
}

// NewCursors returns Cursors that sign with issuer. opts may be nil.
func NewCursors(issuer *ctoken.CursorIssuer, opts *CursorOptions) (*Cursors, error) {
	if issuer == nil {
		return nil, errors.New("ctokenmcp: NewCursors: nil issuer")
	}
	c := &Cursors{issuer: issuer, caller: TokenUserID}
	if opts != nil {
		if opts.Caller != nil {
			c.caller = opts.Caller
		}
		c.log = opts.Logger
	}
	c.log = logger(c.log)
	return c, nil
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
		return ctoken.CursorScope{}, errors.New("ctokenmcp: nil request")
	}
	id, err := caller(ctx, c.caller, req, c.log)
	if err != nil {
		return ctoken.CursorScope{}, err
	}
	fp, err := argsFingerprint(args)
	if err != nil {
		return ctoken.CursorScope{}, fmt.Errorf("ctokenmcp: fingerprinting arguments: %w", err)
	}
	return ctoken.CursorScope{ToolID: toolTarget(req), CallerID: id, Args: fp}, nil
}

// Resume checks the cursor a client sent with req and returns its payload.
// An empty cursor is the first page: the zero payload and no error. A
// request without an authenticated caller is refused as in Scope, even for
// the first page.
//
// A cursor that does not verify, including one issued to another caller,
// for another tool, for other arguments, by another server session or too
// long ago, is a *jsonrpc.Error with code -32602 (invalid params) whose
// data member is {"ctokenCode":1020} for an expired cursor (start over) or
// {"ctokenCode":1021} for an invalid one; see TokenErrorCode. Return it from
// the tool handler as is (unwrapped): the SDK sends a *jsonrpc.Error as a
// protocol error and turns any other error into a tool result.
func (c *Cursors) Resume(ctx context.Context, req *mcp.CallToolRequest, args any, cursor string) (ctoken.CursorPayload, error) {
	scope, err := c.Scope(ctx, req, args)
	if err != nil {
		return ctoken.CursorPayload{}, err
	}
	if cursor == "" {
		return ctoken.CursorPayload{}, nil
	}
	p, err := c.issuer.Verify(cursor, scope)
	if err != nil {
		r := mcptoken.RefuseCursor(err)
		c.log.LogAttrs(ctx, slog.LevelInfo, "ctokenmcp: cursor rejected",
			slog.String("tool", req.Params.Name), slog.String("reason", r.Reason))
		return ctoken.CursorPayload{}, invalidParams(r.Message, r.Code)
	}
	return p, nil
}

// Next issues the cursor for the page after the current one: bound like
// Scope(ctx, req, args), carrying page and the opaque state (at most
// ctoken.MaxOpaqueStateBytes).
func (c *Cursors) Next(ctx context.Context, req *mcp.CallToolRequest, args any, page uint32, state []byte) (string, error) {
	scope, err := c.Scope(ctx, req, args)
	if err != nil {
		return "", err
	}
	return c.issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: page, State: state})
}
