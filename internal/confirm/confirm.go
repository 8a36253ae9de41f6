// Package confirm retries the confirmation of a lease (a webhook
// delivery's, an idempotency key's, a tool call's) while the store fails,
// until the lease is over.
package confirm

import (
	"context"
	"errors"
	"time"
)

// Deadline is when the confirmation of a lease of the given length that
// ends at end gives up: at end or, when called later than a quarter of the
// lease before it, a quarter of the lease from now.
func Deadline(end time.Time, lease time.Duration) time.Time {
	if late := time.Now().Add(lease / 4); late.After(end) {
		return late
	}
	return end
}

// Retry calls try until it returns nil or an error matching one of final,
// or ctx ends, and returns try's last error; ctx carries the deadline of
// [Deadline] (or the caller's, when earlier). The waits between calls
// double from 10 ms to at most a second; when the next wait would reach
// the deadline, the last call starts halfway through what is left, with
// the other half for its answer: no call is given up while more than
// half a second of the lease is left.
func Retry(ctx context.Context, try func(context.Context) error, final ...error) error {
	giveUp, bounded := ctx.Deadline()
	wait := 10 * time.Millisecond
	for last := false; ; {
		err := try(ctx)
		if err == nil || last || ctx.Err() != nil || matches(err, final) {
			return err
		}
		if left := time.Until(giveUp); bounded && wait >= left {
			wait, last = left/2, true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

func matches(err error, targets []error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
