package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

type ctxKey struct{}

// TestWithDeadlineOnlyEndsOnlyAtItsDeadline cancels the parent of a
// WithDeadlineOnly context: the context stays live and keeps the parent's
// values, and it ends at its deadline and when its own cancel is called.
func TestWithDeadlineOnlyEndsOnlyAtItsDeadline(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	far := time.Now().Add(time.Hour)
	ctx, cancel := replay.WithDeadlineOnly(parent, far)
	defer cancel()
	cancelParent()
	if err := ctx.Err(); err != nil {
		t.Fatalf("parent's cancellation reached the context: %v", err)
	}
	if got := ctx.Value(ctxKey{}); got != "v" {
		t.Fatalf("value = %v, want the parent's", got)
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(far) {
		t.Fatalf("deadline = %v, %v; want %v", d, ok, far)
	}
	cancel()
	if ctx.Err() != context.Canceled {
		t.Fatalf("after cancel: %v, want context.Canceled", ctx.Err())
	}
	short, cancelShort := replay.WithDeadlineOnly(context.Background(), time.Now().Add(time.Millisecond))
	defer cancelShort()
	select {
	case <-short.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end at its deadline")
	}
	if short.Err() != context.DeadlineExceeded {
		t.Fatalf("at the deadline: %v, want context.DeadlineExceeded", short.Err())
	}
}

// TestEndsOnlyAtDeadlineReportsOnlyContextsNothingElseEnds checks which
// contexts EndsOnlyAtDeadline reports: WithDeadlineOnly's and value-only
// children of it, never one with a cancellation or deadline of its own.
func TestEndsOnlyAtDeadlineReportsOnlyContextsNothingElseEnds(t *testing.T) {
	marked, cancel := replay.WithDeadlineOnly(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	child, cancelChild := context.WithCancel(marked)
	defer cancelChild()
	timed, cancelTimed := context.WithTimeout(marked, time.Minute)
	defer cancelTimed()
	caused, cancelCaused := context.WithCancelCause(marked)
	defer cancelCaused(nil)
	plain, cancelPlain := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancelPlain()
	cases := []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"WithDeadlineOnly", marked, true},
		{"value child", context.WithValue(marked, ctxKey{}, 1), true},
		{"cancellable child", child, false},
		{"child with a deadline", timed, false},
		{"child with a cause", caused, false},
		{"uncancellable child", context.WithoutCancel(marked), false},
		{"plain WithDeadline", plain, false},
		{"Background", context.Background(), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := replay.EndsOnlyAtDeadline(tc.ctx); got != tc.want {
				t.Fatalf("EndsOnlyAtDeadline = %v, want %v", got, tc.want)
			}
		})
	}
}
