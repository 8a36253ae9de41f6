package ctokenmcpgo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
)

// CursorOptions configures [Cursors]. The zero value is ready to use.
type CursorOptions struct {
	// Caller finds the authenticated caller; nil means ContextCaller.
	Caller CallerFunc
	// Logger receives one record per rejected cursor, with the tool name
	// and ctoken's log-safe reason (never the cursor). Nil discards them.
	Logger *slog.Logger
}

// Cursors issues and checks continuation cursors for paginated mcp-go tools.
// It is safe for concurrent use.
type Cursors struct {
	issuer *ctoken.CursorIssuer
	caller CallerFunc
	log    *slog.Logger
}

// NewCursors returns Cursors that sign with issuer. opts may be nil. A nil
// issuer is an error.
func NewCursors(issuer *ctoken.CursorIssuer, opts *CursorOptions) (*Cursors, error) {
	if issuer == nil {
		return nil, errors.New("ctokenmcpgo: NewCursors: nil issuer")
	}
	c := &Cursors{issuer: issuer, caller: ContextCaller}
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
// every page of one listing has the same fingerprint: typically the decoded
// input with its cursor field cleared (and tagged omitempty). A request
// without an authenticated caller is [ErrNoCaller].
func (c *Cursors) Scope(ctx context.Context, req mcp.CallToolRequest, args any) (ctoken.CursorScope, error) {
	id, err := caller(ctx, c.caller, c.log)
	if err != nil {
		return ctoken.CursorScope{}, err
	}
	var fp ctoken.Fingerprint
	if args != nil {
		if fp, err = ctoken.ArgsFingerprint(args); err != nil {
			return ctoken.CursorScope{}, fmt.Errorf("ctokenmcpgo: fingerprinting arguments: %w", err)
		}
	}
	return ctoken.CursorScope{ToolID: ctoken.MCPTarget("tools/call", req.Params.Name), CallerID: id, Args: fp}, nil
}

// Resume checks the cursor a client sent with req and returns its payload.
// An empty cursor is the first page: the zero payload and no error. A
// request without an authenticated caller is refused with [ErrNoCaller],
// even for the first page.
//
// A cursor that does not verify, including one issued to another caller,
// for another tool, for other arguments, by another server session or too
// long ago, is a [*Rejection] with code 1020 (expired: start over) or 1021
// (invalid); no part of its payload is returned. Hand the error to
// [ToolResult].
func (c *Cursors) Resume(ctx context.Context, req mcp.CallToolRequest, args any, cursor string) (ctoken.CursorPayload, error) {
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
		c.log.LogAttrs(ctx, slog.LevelInfo, "ctokenmcpgo: cursor rejected",
			slog.String("tool", req.Params.Name), slog.String("reason", r.Reason))
		return ctoken.CursorPayload{}, rejection(r)
	}
	return p, nil
}

// Next issues the cursor for the page after the current one: bound like
// Scope(ctx, req, args), carrying page and the opaque state (at most
// ctoken.MaxOpaqueStateBytes).
func (c *Cursors) Next(ctx context.Context, req mcp.CallToolRequest, args any, page uint32, state []byte) (string, error) {
	scope, err := c.Scope(ctx, req, args)
	if err != nil {
		return "", err
	}
	return c.issuer.Issue(ctoken.CursorPayload{CursorScope: scope, Page: page, State: state})
}
