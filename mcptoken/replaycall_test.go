package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// ctxRecorder is a memory store that records the context of each step an
// idempotent call takes after it has leased its key, and refuses every
// ConfirmRecord with refuse when that is set.
type ctxRecorder struct {
	*replay.MemoryStore
	ctxSteps
	refuse error
}

func (s *ctxRecorder) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	s.record("ConfirmRecord", ctx)
	if s.refuse != nil {
		return s.refuse
	}
	return s.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

func (s *ctxRecorder) ReleaseLease(ctx context.Context, id, token string) error {
	s.record("ReleaseLease", ctx)
	return s.MemoryStore.ReleaseLease(ctx, id, token)
}

// ctxTransactor is a ctxRecorder that is a replay.Transactor: its works
// record the contexts of BeginWork, Commit and Rollback.
type ctxTransactor struct{ *ctxRecorder }

func (s ctxTransactor) BeginWork(ctx context.Context, id, token string) (replay.Work, error) {
	s.record("BeginWork", ctx)
	return &ctxWork{s: s.ctxRecorder, id: id, token: token}, nil
}

type ctxWork struct {
	s         *ctxRecorder
	id, token string
}

func (w *ctxWork) Context(ctx context.Context) context.Context { return ctx }

func (w *ctxWork) Commit(ctx context.Context, until time.Time, fp, result []byte) error {
	w.s.record("Commit", ctx)
	return w.s.MemoryStore.ConfirmRecord(ctx, w.id, w.token, until, fp, result)
}

func (w *ctxWork) Rollback(ctx context.Context) error {
	w.s.record("Rollback", ctx)
	return nil
}

// TestIdempotentCallSettlesUnderADeadlineOnlyContext: once the tool has
// run, every store step that settles its key (the record, a release, the
// transaction's begin, commit and rollback) runs under a context that
// only its deadline ends (replay.WithDeadlineOnly), so that a store whose
// client enforces deadlines itself runs it on the caller's goroutine,
// even though the caller's context can be cancelled and is, by a caller
// that goes away while the tool runs. Each deadline is the one meant: the
// record's and the transaction's at the lease's end, a release's and a
// rollback's a quarter of the lease after the step.
func TestIdempotentCallSettlesUnderADeadlineOnlyContext(t *testing.T) {
	const lease = time.Minute
	type want struct {
		method string
		after  time.Duration // the deadline, after the call's start
	}
	boom := errors.New("tool")
	tests := []struct {
		name          string
		transactional bool
		refuse        error
		toolErr       bool
		want          []want
	}{
		{"the result is recorded", false, nil, false, []want{{"ConfirmRecord", lease}}},
		{"a result refused for its size is recorded as not recorded", false, replay.ErrTooLarge, false,
			[]want{{"ConfirmRecord", lease}, {"ConfirmRecord", lease}}},
		{"a failed tool's key is released", false, nil, true, []want{{"ReleaseLease", lease / 4}}},
		{"the transaction is begun and committed", true, nil, false, []want{{"BeginWork", lease}, {"Commit", lease}}},
		{"a failed tool's transaction is rolled back and its key released", true, nil, true,
			[]want{{"BeginWork", lease}, {"Rollback", lease / 4}, {"ReleaseLease", lease / 4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &ctxRecorder{MemoryStore: replay.NewMemoryStore(100), refuse: tc.refuse}
			var store replay.Recorder = rec
			if tc.transactional {
				store = ctxTransactor{rec}
			}
			i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) {
				c.Store, c.Transactional, c.Lease, c.Window = store, tc.transactional, lease, time.Hour
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			toolDeadlineOnly := true
			run := func(tctx context.Context) ([]byte, error) {
				// The tool's context is not marked: it is cancelled when
				// the tool returns, and code the tool started must see
				// that at once.
				toolDeadlineOnly = replay.EndsOnlyAtDeadline(tctx)
				cancel() // the caller goes away while the tool runs
				if tc.toolErr {
					return nil, boom
				}
				return []byte(`{"content":[]}`), nil
			}
			from := time.Now()
			_, err := i.Call(ctx, "alice", "pay", []byte(`{"key":"k"}`), nil, run)
			to := time.Now()
			if tc.toolErr != errors.Is(err, boom) || !tc.toolErr && err != nil {
				t.Fatalf("Call: %v", err)
			}
			if toolDeadlineOnly {
				t.Error("the tool ran under a context marked deadline-only; want one its return cancels")
			}
			steps := rec.list()
			if len(steps) != len(tc.want) {
				t.Fatalf("store steps %+v, want %+v", steps, tc.want)
			}
			for k, w := range tc.want {
				if steps[k].method != w.method {
					t.Fatalf("store steps %+v, want %+v", steps, tc.want)
				}
				checkDeadlineOnly(t, steps[k], from, to, w.after)
			}
		})
	}
}
