package mcptoken

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ctoken/ctoken"
)

// The four paginated list methods of MCP whose cursors [ListCursors] seal.
const (
	MethodListTools             = "tools/list"
	MethodListPrompts           = "prompts/list"
	MethodListResources         = "resources/list"
	MethodListResourceTemplates = "resources/templates/list"
)

// IsListMethod reports whether method is one of the four paginated list
// methods: [MethodListTools], [MethodListPrompts], [MethodListResources] or
// [MethodListResourceTemplates].
func IsListMethod(method string) bool {
	switch method {
	case MethodListTools, MethodListPrompts, MethodListResources, MethodListResourceTemplates:
		return true
	}
	return false
}

// ListCursors seals the cursors an MCP SDK hands out for its list methods
// into ctoken cursors, and opens them again, so that a client only ever sees
// a ctoken cursor and the SDK only ever sees its own. A sealed list cursor
// is bound to the list method (ctoken.MCPTarget(method, "")), to the
// authenticated caller, and to the transport session when there is one;
// the SDK's cursor travels inside it, encrypted. It is safe for concurrent
// use. An SDK integration resolves the caller and the session and calls
// [ListCursors.Seal] on a list result's next cursor and [ListCursors.Open]
// on a list request's cursor. A zero or nil ListCursors refuses every
// call with an error.
type ListCursors struct {
	issuer *ctoken.CursorIssuer
	in     *Integration
}

// listProbeTool is the scope of the cursor [NewListCursors] issues to check
// that the issuer seals.
const listProbeTool = "ctoken list cursor probe"

// NewListCursors returns ListCursors that seal with issuer and report
// through in. A nil issuer or an incomplete in is an error; an issuer not
// made by ctoken.NewCursorIssuer (it has no key) is an error matching
// ctoken.ErrConfig and ctoken.ErrNoKey; so is an issuer that does not seal
// (ctoken.CursorConfig.Seal false), with ctoken.ErrConfig: its cursors
// carry their state readable, and the state of a list cursor is the SDK's
// own cursor, which must not be revealed. The check issues one cursor with
// a random state and looks for that state in it.
func NewListCursors(issuer *ctoken.CursorIssuer, in *Integration) (*ListCursors, error) {
	if err := in.check("NewListCursors"); err != nil {
		return nil, err
	}
	if issuer == nil {
		return nil, errors.New(in.Name + ": NewListCursors: nil issuer")
	}
	if len(issuer.Session()) == 0 {
		return nil, fmt.Errorf("%s: NewListCursors: %w: the cursor issuer is not made by ctoken.NewCursorIssuer: %w", in.Name, ctoken.ErrConfig, ctoken.ErrNoKey)
	}
	sealed, err := seals(issuer)
	if err != nil {
		return nil, fmt.Errorf("%s: NewListCursors: %w", in.Name, err)
	}
	if !sealed {
		return nil, fmt.Errorf("%s: NewListCursors: %w: the cursor issuer signs but does not seal (set ctoken.CursorConfig.Seal): the SDK's own cursor would be readable in every list cursor", in.Name, ctoken.ErrConfig)
	}
	return &ListCursors{issuer: issuer, in: in}, nil
}

// seals reports whether issuer's cursors hide their state: a probe cursor
// with 32 random bytes of state must not contain them.
func seals(issuer *ctoken.CursorIssuer) (bool, error) {
	var marker [32]byte
	rand.Read(marker[:])
	c, err := issuer.Issue(ctoken.CursorPayload{CursorScope: ctoken.CursorScope{ToolID: listProbeTool}, State: marker[:]})
	if err != nil {
		return false, err
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return false, fmt.Errorf("%w: the issuer's cursor is not base64url", ctoken.ErrConfig)
	}
	return !bytes.Contains(raw, marker[:]), nil
}

// Integration returns the Integration l reports through, nil for
// ListCursors not made by [NewListCursors].
func (l *ListCursors) Integration() *Integration {
	if l == nil {
		return nil
	}
	return l.in
}

// errListCursorsZero is the error of every method of ListCursors not made
// by [NewListCursors] (a zero or nil value).
var errListCursorsZero = errors.New("mcptoken: ListCursors not made by NewListCursors")

// made reports whether l was made by [NewListCursors].
func (l *ListCursors) made() bool { return l != nil && l.issuer != nil && l.in.check("") == nil }

// The first byte of a list cursor's state says how the SDK's cursor is
// stored after it: its text as is, or the bytes of its padded base64 (the
// standard alphabet is mark3labs/mcp-go's, the URL alphabet go-sdk's),
// which take a quarter less of the state budget.
const (
	innerText   byte = 0
	innerStdB64 byte = 1
	innerURLB64 byte = 2
)

// packInner returns the state that carries the SDK cursor inner.
func packInner(inner string) []byte {
	for _, e := range [...]struct {
		tag byte
		enc *base64.Encoding
	}{{innerStdB64, base64.StdEncoding}, {innerURLB64, base64.URLEncoding}} {
		// Only a text the encoding writes back byte for byte (the decoder
		// skips CR and LF, and accepts nonzero trailing bits).
		if b, err := e.enc.DecodeString(inner); err == nil && e.enc.EncodeToString(b) == inner {
			return append([]byte{e.tag}, b...)
		}
	}
	return append([]byte{innerText}, inner...)
}

// unpackInner returns the SDK cursor a state made by packInner carries.
func unpackInner(state []byte) (string, bool) {
	if len(state) < 2 {
		return "", false
	}
	switch state[0] {
	case innerText:
		return string(state[1:]), true
	case innerStdB64:
		return base64.StdEncoding.EncodeToString(state[1:]), true
	case innerURLB64:
		return base64.URLEncoding.EncodeToString(state[1:]), true
	}
	return "", false
}

// listSessionLabel prefixes the session in the fingerprint a list cursor
// binds.
const listSessionLabel = "ctoken mcp list cursor session\x00"

// listScope returns the scope of a list cursor: the method, the caller, and
// the session's fingerprint (not bound when the transport has no session).
func listScope(caller, session, method string) ctoken.CursorScope {
	s := ctoken.CursorScope{ToolID: ctoken.MCPTarget(method, ""), CallerID: caller}
	if session != "" {
		h := sha256.New()
		h.Write([]byte(listSessionLabel))
		h.Write([]byte(session))
		h.Sum(s.Args[:0])
	}
	return s
}

// errNotList reports a method that is not one of the four list methods.
func errNotList(name, method string) error {
	return fmt.Errorf("%s: %q is not a list method: %w", name, method, ctoken.ErrConfig)
}

// Seal returns the cursor the client is sent in place of the SDK's cursor
// inner of a method result: a sealed ctoken cursor bound to method, caller
// and session (an empty session, for a transport without sessions such as
// stdio, stateless HTTP or protocol 2026-07-28, binds the caller and the
// method alone). An empty inner (the last page) is "". An empty caller is
// logged and refused with the Integration's NoCaller error; a method that
// is not a list method matches ctoken.ErrConfig. An SDK cursor too long for
// a cursor's state (more than the issuer's StateBudget less one byte, after
// base64 is undone) is logged at Error, with its length only, and is the
// issuer's error matching ctoken.ErrOpaqueStateTooLarge: the page cannot be
// continued, and the integration must not send it as the last.
// ListCursors not made by [NewListCursors] return an error.
func (l *ListCursors) Seal(ctx context.Context, caller, session, method, inner string) (string, error) {
	if !l.made() {
		return "", errListCursorsZero
	}
	if !IsListMethod(method) {
		return "", errNotList(l.in.Name, method)
	}
	if err := l.in.anonymous(ctx, caller); err != nil {
		return "", err
	}
	if inner == "" {
		return "", nil
	}
	state := packInner(inner)
	wire, err := l.issuer.Issue(ctoken.CursorPayload{CursorScope: listScope(caller, session, method), State: state})
	if err != nil {
		l.in.Logger().LogAttrs(ctx, slog.LevelError, l.in.Name+": list cursor cannot be sealed",
			slog.String("method", method), slog.Int("stateBytes", len(state)), slog.Int("budget", l.issuer.StateBudget()),
			slog.String("reason", ctoken.Reason(err).String()))
		return "", fmt.Errorf("%s: sealing a %s cursor: %w", l.in.Name, method, err)
	}
	return wire, nil
}

// Open returns the SDK's own cursor from the cursor wire a client sent with
// a request of method: "" for an empty wire (the first page). A cursor that
// does not open for this method, caller and session (another caller's,
// another session's, another list method's, a tampered, expired or forged
// one) is logged with the method and ctoken's reason (never the cursor)
// and is the error the Integration's Refused returns for [RefuseCursor] of
// it: code 1020 for an expired cursor or one from before a restart, 1021
// for any other. Nothing of a refused cursor reaches the SDK. An empty
// caller is logged and refused with the Integration's NoCaller error, also
// for the first page; a method that is not a list method matches
// ctoken.ErrConfig. ListCursors not made by [NewListCursors] return an
// error, also for the first page.
func (l *ListCursors) Open(ctx context.Context, caller, session, method, wire string) (string, error) {
	if !l.made() {
		return "", errListCursorsZero
	}
	if !IsListMethod(method) {
		return "", errNotList(l.in.Name, method)
	}
	if err := l.in.anonymous(ctx, caller); err != nil {
		return "", err
	}
	if wire == "" {
		return "", nil
	}
	p, err := l.issuer.Verify(wire, listScope(caller, session, method))
	if err == nil {
		inner, ok := unpackInner(p.State)
		if ok {
			return inner, nil
		}
		// Authentic but not a list cursor's state: only an issuer shared
		// with code that binds the same scope could have written it.
		err = ctoken.ErrCursorInvalid
	}
	r := RefuseCursor(err)
	level, msg := slog.LevelInfo, l.in.Name+": list cursor rejected"
	if r.Internal {
		level, msg = slog.LevelError, l.in.Name+": cursor issuer has no key (not made by ctoken.NewCursorIssuer)"
	}
	l.in.Logger().LogAttrs(ctx, level, msg, slog.String("method", method), slog.String("reason", r.Reason))
	return "", l.in.Refused(r)
}
