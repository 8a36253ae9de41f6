package ctoken

import (
	"context"
	"time"
)

// ReplayStore remembers single-use IDs (webhook deliveries, one-time tokens,
// single-use request states) so each is accepted once.
//
// Claim atomically records id until the given time and reports whether this
// call was the first claim of id that is still live. An implementation must
// fail closed: when it cannot decide (full, unreachable, timed out) it returns
// an error, never first == true. Implementations are safe for concurrent use.
type ReplayStore interface {
	Claim(ctx context.Context, id string, until time.Time) (first bool, err error)
}
