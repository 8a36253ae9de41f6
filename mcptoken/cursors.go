package mcptoken

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ctoken/ctoken"
)

// Cursors issues and checks the continuation cursors of paginated tools for
// an SDK integration, which resolves the caller and converts its request
// type; everything else happens here. It is safe for concurrent use.
type Cursors struct {
	issuer *ctoken.CursorIssuer
	in     *Integration
}

// NewCursors returns Cursors that sign with issuer and report through in.
// A nil issuer or an incomplete in is an error; an issuer not made by
// ctoken.NewCursorIssuer (it has no key) is an error matching
// ctoken.ErrConfig and ctoken.ErrNoKey.
func NewCursors(issuer *ctoken.CursorIssuer, in *Integration) (*Cursors, error) {
	if err := in.check("NewCursors"); err != nil {
		return nil, err
	}
	if issuer == nil {
		return nil, errors.New(in.Name + ": NewCursors: nil issuer")
	}
	// Every issuer NewCursorIssuer makes has a session (a configured one or
	// a random one); the zero value has none and no key.
	if len(issuer.Session()) == 0 {
		return nil, fmt.Errorf("%s: NewCursors: %w: the cursor issuer is not made by ctoken.NewCursorIssuer: %w", in.Name, ctoken.ErrConfig, ctoken.ErrNoKey)
	}
	return &Cursors{issuer: issuer, in: in}, nil
}

// Integration returns the Integration c reports through.
func (c *Cursors) Integration() *Integration { return c.in }

// Scope returns the scope a cursor of the tool name is bound to for caller:
// ctoken.MCPTarget("tools/call", name), the caller, and the fingerprint of
// args, which is not bound (zero) when args is nil. An empty caller is
// logged and refused with the Integration's NoCaller error.
func (c *Cursors) Scope(caller, name string, args any) (ctoken.CursorScope, error) {
	if err := c.in.anonymous(context.Background(), caller); err != nil {
		return ctoken.CursorScope{}, err
	}
	var fp ctoken.Fingerprint
	if args != nil {
		var err error
		if fp, err = ctoken.ArgsFingerprint(args); err != nil {
			return ctoken.CursorScope{}, fmt.Errorf("%s: fingerprinting arguments: %w", c.in.Name, err)
		}
	}
	return ctoken.CursorScope{ToolID: ctoken.MCPTarget("tools/call", name), CallerID: caller, Args: fp}, nil
}

// Turn is one page turn of a paginated tool: the payload of the cursor the
// client sent and the scope the next cursor is bound to, built (and the
// arguments fingerprinted) once. The zero Turn issues nothing.
type Turn struct {
	// Payload is the verified payload of the cursor the client sent; the
	// zero payload (Page 0, no State) on the first page, when the client
	// sent no cursor.
	Payload ctoken.CursorPayload

	scope  ctoken.CursorScope
	issuer *ctoken.CursorIssuer
}

// errNoTurn reports Next on a Turn that no Cursors returned.
var errNoTurn = errors.New("mcptoken: Turn.Next on a zero Turn")

// Next issues the cursor for the page after this one: bound to the same
// scope as the cursor the client sent, carrying page and the opaque state
// (at most ctoken.MaxOpaqueStateBytes).
func (t Turn) Next(page uint32, state []byte) (string, error) {
	if t.issuer == nil {
		return "", errNoTurn
	}
	return t.issuer.Issue(ctoken.CursorPayload{CursorScope: t.scope, Page: page, State: state})
}

// Turn verifies the cursor a client sent with a call of the tool name
// against scope (from [Cursors.Scope]). An empty cursor is the first page:
// a Turn with the zero payload. A cursor that does not verify is logged
// with the tool and ctoken's reason (never the cursor) and is the error the
// Integration's Refused returns for [RefuseCursor] of it; no part of its
// payload is returned. A scope without a caller is refused with the
// Integration's NoCaller error, even for the first page.
func (c *Cursors) Turn(ctx context.Context, scope ctoken.CursorScope, name, cursor string) (Turn, error) {
	if err := c.in.anonymous(ctx, scope.CallerID); err != nil {
		return Turn{}, err
	}
	t := Turn{scope: scope, issuer: c.issuer}
	if cursor == "" {
		return t, nil
	}
	p, err := c.issuer.Verify(cursor, scope)
	if err != nil {
		r := RefuseCursor(err)
		if r.Internal {
			c.in.Logger().LogAttrs(ctx, slog.LevelError, c.in.Name+": cursor issuer has no key (not made by ctoken.NewCursorIssuer)",
				slog.String("tool", name), slog.String("reason", r.Reason))
		} else {
			c.in.Logger().LogAttrs(ctx, slog.LevelInfo, c.in.Name+": cursor rejected",
				slog.String("tool", name), slog.String("reason", r.Reason))
		}
		return Turn{}, c.in.Refused(r)
	}
	t.Payload = p
	return t, nil
}

// Next issues the cursor for page with the opaque state, bound to scope. A
// scope without a caller is refused with the Integration's NoCaller error.
func (c *Cursors) Next(scope ctoken.CursorScope, page uint32, state []byte) (string, error) {
	if err := c.in.anonymous(context.Background(), scope.CallerID); err != nil {
		return "", err
	}
	return Turn{scope: scope, issuer: c.issuer}.Next(page, state)
}
