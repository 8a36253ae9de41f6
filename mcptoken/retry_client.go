package mcptoken

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// Waits between the attempts a server gives no hint for: the first after
// firstBackoff, each next one after twice the last, at most maxBackoff,
// each taken at random in its upper half.
const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// The client side of idempotent tool calls, shared by the SDK
// integrations' CallTool (ctokenmcp on go-sdk, ctokenmcpgo on mcp-go):
// attempts of one call under one idempotency key, each after the server's
// retry hint or a jittered backoff, until one answers, the error is not
// worth another attempt, or the time, the attempts or the context run
// out; then an error that says whether the outcome is unknown. Once an
// attempt may have reached the server, every error of the call says so,
// whatever the later attempts met: a caller that is told anything else
// calls again under a new key and may act twice. Sending an attempt and
// judging its error are the integration's.

// RetryVerdict is an integration's judgment of a failed attempt.
type RetryVerdict struct {
	Retry   bool          // make another attempt
	Reached bool          // the request may have reached the server: only an answer that says the tool did not run is false
	Closed  bool          // the session can carry no other attempt
	Hint    time.Duration // the server's retry hint; 0: back off
	// Recorded: the server answered with its tool's recorded failure
	// ([CodeToolFailed]), which settles the call: it ends with an error
	// matching [ErrToolFailed], whatever earlier attempts met.
	Recorded bool
}

// CallWithRetries makes attempts of one tool call under key until attempt
// returns no error, within elapsed and, when attempts is positive, at most
// attempts of them (zero or negative: elapsed alone bounds them). attempt
// sends the call and returns the result, or an error and the
// RetryVerdict on it. Once any attempt may have reached the server
// (Reached), the call ends with a result or with an error that matches
// outcome (the integration's ErrOutcomeUnknown; [RetryKey] then gives the
// key), whatever the later attempts met: an error not worth another
// attempt, a closed session, the budget or the context ending. Before
// that, an error not worth another attempt is returned as it is (and so,
// always, is a task's own end: a [*TaskFailure] whose effect is known, or
// [ErrTaskCancelled]; and a failure the server recorded, Recorded, which
// is wrapped to match [ErrToolFailed]), and an
// end of the budget or of the context is an error that matches the
// context's error, if it ended the call, and the last attempt's error.
// name begins every text ("ctokenmcp"), which never holds the key. A
// context ended before the first attempt is returned as it is, and
// nothing is sent.
func CallWithRetries[T any](ctx context.Context, name string, outcome error, key string, attempts int, elapsed time.Duration, attempt func() (T, RetryVerdict, error)) (T, error) {
	var zero T
	deadline := time.Now().Add(elapsed)
	c := &callError{pkg: name, outcome: outcome, key: key}
	for {
		if err := ctx.Err(); err != nil {
			return zero, c.end("the context ended", err)
		}
		c.attempts++
		res, v, err := attempt()
		if err == nil {
			return res, nil
		}
		c.last = err
		if ctx.Err() != nil {
			c.unknown = true // the attempt may have been sent
			return zero, c.end("the context ended", ctx.Err())
		}
		c.unknown = c.unknown || v.Reached
		switch {
		case v.Recorded:
			// What every call under the key gets: the server knows it.
			return zero, fmt.Errorf("%w: %w", ErrToolFailed, err)
		case v.Closed:
			return zero, c.end("the session closed", nil)
		case !v.Retry && (!c.unknown || settledByTask(err)):
			// Not run, or the end of the call's task, which every
			// attempt under the key found.
			return zero, err
		case !v.Retry:
			return zero, c.end("an answer no retry settles", nil)
		case attempts > 0 && c.attempts >= attempts:
			return zero, c.end("no attempt left", nil)
		}
		wait := v.Hint
		if wait <= 0 {
			wait = backoff(c.attempts)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return zero, c.end("no time left", nil)
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, c.end("the context ended", ctx.Err())
		case <-t.C:
		}
	}
}

// RetryKey returns the idempotency key of the call that an error of
// [CallWithRetries] with an unknown outcome ended, to call again with, and
// false for any other error.
func RetryKey(err error) (string, bool) {
	var c *callError
	if !errors.As(err, &c) || !c.unknown {
		return "", false
	}
	return c.key, true
}

// backoff returns the wait after the n-th attempt (from 1) when the
// server gave no hint.
func backoff(n int) time.Duration {
	d := maxBackoff
	if n < 6 {
		d = min(firstBackoff<<(n-1), maxBackoff)
	}
	return d/2 + mrand.N(d/2+1)
}

// callError is the error of a call of CallWithRetries that ended without
// a result after a retryable failure. Its text never holds the key.
type callError struct {
	pkg      string
	outcome  error // the integration's ErrOutcomeUnknown
	key      string
	attempts int
	unknown  bool  // an attempt may have reached the server
	last     error // the last attempt's error
	why      string
	cause    error // the context's error, if it ended the call
}

// end completes c with why the call ended and cause, and returns it.
func (c *callError) end(why string, cause error) error {
	if c.attempts == 0 {
		return cause // nothing sent: the context had ended
	}
	c.why, c.cause = why, cause
	return c
}

func (c *callError) Error() string {
	what := "the tool call was not delivered"
	var f *TaskFailure
	switch {
	case c.unknown && errors.As(c.last, &f) && f.effect == effectUnknown:
		// A call under the key gets this failure again: it is no way on.
		what = "the server running the tool's task stopped, and whether the task took effect is unknown: " +
			"check where the tool acts whether it did; if not, have the server allow a rerun of the key " +
			"(mcptoken.Tasks.AllowRerun) and call again under the same idempotency key, never a new one"
	case c.unknown:
		what = "the outcome of the tool call is unknown: call again under the same idempotency key, never a new one"
	}
	s := fmt.Sprintf("%s: %s (%d attempts; %s)", c.pkg, what, c.attempts, c.why)
	if c.cause != nil && !errors.Is(c.last, c.cause) {
		s += ": " + c.cause.Error()
	}
	return s + ": " + c.last.Error()
}

// Unwrap returns the integration's ErrOutcomeUnknown when the outcome is
// unknown, the context's error that ended the call, and the last
// attempt's error.
func (c *callError) Unwrap() []error {
	errs := make([]error, 0, 3)
	if c.unknown {
		errs = append(errs, c.outcome)
	}
	if c.cause != nil {
		errs = append(errs, c.cause)
	}
	return append(errs, c.last)
}

// GoString keeps the key out of %#v.
func (c *callError) GoString() string { return fmt.Sprintf("&%s.callError{%q}", c.pkg, c.Error()) }
