package mcptoken

import (
	"log/slog"

	"github.com/ctoken/ctoken"
)

// The constructors below build the core of an SDK module's Cursors,
// SecureListCursors, States and Idempotency from the module's options,
// nil meaning their zero value: the core reports through
// integration(Logger), and the options' Caller is returned beside it for
// the module to default.

// NewCursorsFor is [NewCursors] for an SDK module's [CursorOptions].
func NewCursorsFor[C any](issuer *ctoken.CursorIssuer, opts *CursorOptions[C], integration func(*slog.Logger) *Integration) (*Cursors, C, error) {
	o := deref(opts)
	c, err := NewCursors(issuer, integration(o.Logger))
	return c, o.Caller, err
}

// NewListCursorsFor is [NewListCursors] for an SDK module's [CursorOptions].
func NewListCursorsFor[C any](issuer *ctoken.CursorIssuer, opts *CursorOptions[C], integration func(*slog.Logger) *Integration) (*ListCursors, C, error) {
	o := deref(opts)
	l, err := NewListCursors(issuer, integration(o.Logger))
	return l, o.Caller, err
}

// NewStatesFor is [NewStates] for an SDK module's [StateOptions].
func NewStatesFor[C any](codec *ctoken.RequestStateCodec, opts *StateOptions[C], integration func(*slog.Logger) *Integration) (*States, C, error) {
	o := deref(opts)
	cfg := StatesConfig{UnboundArgs: o.UnboundArgs, InsecureSkipToolBinding: o.InsecureSkipToolBinding, AnswerRetries: o.AnswerRetries}
	s, err := NewStates(codec, cfg, integration(o.Logger))
	return s, o.Caller, err
}

// NewIdempotencyFor is [NewIdempotency] for an SDK module's
// [IdempotencyOptions].
func NewIdempotencyFor[C any](opts IdempotencyOptions[C], integration func(*slog.Logger) *Integration) (*Idempotency, C, error) {
	i, err := NewIdempotency(opts.IdempotencyConfig, integration(opts.Logger))
	return i, opts.Caller, err
}

// deref returns *p, or the zero T for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
