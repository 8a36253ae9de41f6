package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// call runs fn within the store's deadline and returns its result.
//
// It returns when the deadline passes or ctx is cancelled even if the
// driver has not, so a hung server cannot hold the caller past it. When
// the pool's connections end a statement as soon as its context ends
// (s.direct: pgconn's DeadlineContextWatcherHandler without a delay, pgx's
// default; see [honoursContext]), fn runs on the caller's goroutine and
// the driver itself returns at the deadline. Otherwise fn runs on a
// goroutine of its own, and call stops waiting for it at the deadline;
// the abandoned fn then writes only into its own result, which nobody
// reads. Errors are wrapped in ErrUnavailable, together with the context
// error when the deadline or a cancellation ended the call; on error the
// result is T's zero value.
func call[T any](s *Store, ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	return callIn(s, ctx, s.direct, fn)
}

// callIn is [call], with fn run on the caller's goroutine when direct is
// set, else on a goroutine of its own.
func callIn[T any](s *Store, ctx context.Context, direct bool, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if s.pool == nil {
		return zero, fmt.Errorf("%w: zero Store (use pgstore.New)", ErrConfig)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return callBounded(ctx, direct, fn)
}

// callBounded is [callIn] under a ctx that already carries the store's
// deadline (and is not nil), which it does not set again.
func callBounded[T any](ctx context.Context, direct bool, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var v T
	var err error
	if direct {
		v, err = fn(ctx)
	} else {
		type result struct {
			v   T
			err error
		}
		done := make(chan result, 1) // buffered: the sender never blocks
		go func() {
			v, err := fn(ctx)
			done <- result{v, err}
		}()
		select {
		case r := <-done:
			v, err = r.v, r.err
		case <-ctx.Done():
			return zero, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	if err == nil {
		return v, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return zero, fmt.Errorf("%w: %w (%w)", ErrUnavailable, ctxErr, err)
	}
	return zero, fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// honoursContext reports whether pool's connections end a statement, a
// read or a write as soon as its context ends: their context watcher is
// pgconn's DeadlineContextWatcherHandler with no DeadlineDelay (pgx's
// default), which sets the connection's deadline to now when the context
// is done, so a blocked read or write returns at once. (Acquiring a
// connection and dialing honour the context in pgx whatever the handler.)
// Any other handler — one that sends a cancel request first, waits a
// delay, or is the caller's own — is not trusted, and each call then runs
// on a goroutine of its own. The handler is built on a zero PgConn, which
// pgx's default reads no more of than its nil net.Conn; a builder that
// panics on it is not trusted either.
func honoursContext(pool *pgxpool.Pool) (ok bool) {
	build := pool.Config().ConnConfig.BuildContextWatcherHandler
	if build == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	h, isDeadline := build(new(pgconn.PgConn)).(*pgconn.DeadlineContextWatcherHandler)
	return isDeadline && h.DeadlineDelay == 0
}

// run is call for a statement without a result.
func (s *Store) run(ctx context.Context, fn func(ctx context.Context) error) error {
	_, err := call(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// maxRaces is how many times a claim or an acquire runs when a concurrent
// statement changed the expired row it found (nothing was written by the
// runs that lost); errRaced reports that it lost every time.
const maxRaces = 3

var errRaced = errors.New("the row kept changing under concurrent statements")
