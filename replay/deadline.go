package replay

import (
	"context"
	"time"
)

// deadlineOnlyKey is the context key of [WithDeadlineOnly]: its value is
// the Done channel of the context it marks.
type deadlineOnlyKey struct{}

// WithDeadlineOnly returns a context that carries parent's values, ends at
// d, and is cancelled by nothing else but the returned cancel: a
// cancellation of parent does not reach it. [EndsOnlyAtDeadline] reports
// it, so a store whose client enforces a deadline by itself (the
// redisstore module with a go-redis client whose ContextTimeoutEnabled is
// set) can run a call under it on the caller's goroutine instead of
// watching its Done channel from another. Call cancel once the calls made
// under the context have returned (defer it), never while one runs: that
// call would then end at d, not at once.
//
// It is for steps that must not stop when the request behind them ends,
// such as recording an outcome after the work was done.
func WithDeadlineOnly(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(parent), d)
	return context.WithValue(ctx, deadlineOnlyKey{}, ctx.Done()), cancel
}

// EndsOnlyAtDeadline reports whether ctx was made by [WithDeadlineOnly]
// (or derived from such a context without a cancellation or deadline of
// its own, as by context.WithValue): it then ends at its deadline and at
// no other time while a call under it runs. A context derived with a
// cancellation, a deadline or a cause of its own reports false.
func EndsOnlyAtDeadline(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	done, ok := ctx.Value(deadlineOnlyKey{}).(<-chan struct{})
	return ok && done != nil && done == ctx.Done()
}
