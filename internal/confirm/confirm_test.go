package confirm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

var errDown = errors.New("store down")

// deadlineOnly has a deadline but never ends, so Retry's schedule alone
// decides when it stops, however late the machine runs its timers.
type deadlineOnly struct {
	context.Context
	d time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.d, true }

// failing is a try that always fails, noting when it was called.
func failing(at *[]time.Time) func(context.Context) error {
	return func(context.Context) error {
		*at = append(*at, time.Now())
		return errDown
	}
}

func TestRetry(t *testing.T) {
	t.Run("waits double from 10 ms and the last call comes late in the lease", func(t *testing.T) {
		// A 2 s lease: calls 10, 20, 40, 80, 160, 320 and 640 ms apart
		// (the last at 1 270 ms); the next wait, 1 s, would pass the
		// deadline, so the last call starts halfway through the 730 ms
		// left. The rule it replaced gave up with those 730 ms left.
		giveUp := time.Now().Add(2 * time.Second)
		var at []time.Time
		if err := Retry(deadlineOnly{context.Background(), giveUp}, failing(&at)); err != errDown {
			t.Fatalf("Retry = %v, want the last error of try", err)
		}
		n := len(at)
		if n < 2 || n > 9 {
			t.Fatalf("try called %d times within a 2 s lease, want 2 to 9", n)
		}
		for i := 1; i < n-1; i++ {
			if gap, want := at[i].Sub(at[i-1]), 10*time.Millisecond<<(i-1); gap < want {
				t.Fatalf("call %d came %v after the last, want at least %v", i, gap, want)
			}
		}
		// Timers only run late, so however loaded the machine the last
		// call leaves at most half of what was left before it (under a
		// second): less than half a second, and no more than the wait
		// that preceded it.
		if left, gap := giveUp.Sub(at[n-1]), at[n-1].Sub(at[n-2]); left > gap || left >= 500*time.Millisecond {
			t.Fatalf("the last call came %v before the deadline, after a wait of %v: Retry gave up early", left, gap)
		}
	})

	t.Run("a final error ends it at once", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		errLost := errors.New("lease lost")
		calls := 0
		err := Retry(ctx, func(context.Context) error {
			calls++
			return fmt.Errorf("store: %w", errLost)
		}, errors.New("other"), errLost)
		if !errors.Is(err, errLost) || calls != 1 {
			t.Fatalf("Retry = %v after %d calls, want the final error after 1", err, calls)
		}
	})

	t.Run("a success ends it", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		calls := 0
		err := Retry(ctx, func(context.Context) error {
			if calls++; calls < 3 {
				return errDown
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("Retry = %v after %d calls, want nil after 3", err, calls)
		}
	})

	t.Run("a cancelled context ends it", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		err := Retry(ctx, func(context.Context) error {
			cancel()
			return errDown
		})
		if el := time.Since(start); err != errDown || el > 30*time.Second {
			t.Fatalf("Retry = %v after %v, want the try's error once the context was cancelled, not at its deadline", err, el)
		}
	})
}

func TestDeadline(t *testing.T) {
	const lease = 4 * time.Second
	t.Run("the lease's end when it is far", func(t *testing.T) {
		end := time.Now().Add(time.Hour)
		if got := Deadline(end, lease); !got.Equal(end) {
			t.Fatalf("Deadline = %v, want the lease's end %v", got, end)
		}
	})
	t.Run("a quarter of the lease from now when the end is near or past", func(t *testing.T) {
		for _, end := range []time.Time{time.Now(), time.Now().Add(-time.Hour)} {
			before := time.Now()
			got := Deadline(end, lease)
			if got.Before(before.Add(lease/4)) || got.After(time.Now().Add(lease/4)) {
				t.Fatalf("Deadline(%v) = %v, want a quarter lease (%v) from now", end, got, lease/4)
			}
		}
	})
}
