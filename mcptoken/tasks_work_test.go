package mcptoken

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// rollbackHook is a TxStore whose Works call after once their Rollback
// has freed the lease, before it returns.
type rollbackHook struct {
	*replaytest.TxStore
	after func()
}

func (s *rollbackHook) AcquireWork(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, replay.Work, error) {
	rec, w, err := s.TxStore.AcquireWork(ctx, id, lease, fp)
	if w != nil {
		w = hookedWork{Work: w, after: s.after}
	}
	return rec, w, err
}

type hookedWork struct {
	replay.Work
	after func()
}

func (w hookedWork) Rollback(ctx context.Context) error {
	err := w.Work.Rollback(ctx)
	w.after()
	return err
}

// TestTransactionalTaskPolledAfterItsRollback: a poll that finds a
// Transactional task's entry free between its runner's rollback and the
// runner's record of its outcome reads that outcome (cancelled, or failed
// with nothing kept), never a stopped instance's.
func TestTransactionalTaskPolledAfterItsRollback(t *testing.T) {
	for _, c := range []struct {
		name, status string
		cancel       bool
	}{
		{"cancelled", taskCancelled, true},
		{"failed", taskFailed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				id      string
				polled  TaskState
				pollErr error
			)
			store := &rollbackHook{TxStore: replaytest.NewTxStore()}
			ts := newCoreTasks(t, store)
			store.after = func() {
				mu.Lock()
				defer mu.Unlock()
				polled, pollErr = ts.Get(context.Background(), "alice", id)
			}
			proceed := make(chan struct{})
			tool := TaskTool{Name: "pay", Transactional: true, Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
				if err := replaytest.TxWrite(ctx, "paid"); err != nil {
					return nil, err
				}
				if c.cancel {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				<-proceed
				return nil, errors.New("declined")
			}}
			must(t, ts.Add(tool))
			st, err := ts.Create(context.Background(), tool, &TaskCall{Caller: "alice"})
			must(t, err)
			mu.Lock()
			id = st.ID
			mu.Unlock()
			if c.cancel {
				must(t, ts.Cancel(context.Background(), "alice", st.ID))
			} else {
				close(proceed)
			}
			end := settled(t, ts, st.ID, nil)
			mu.Lock()
			defer mu.Unlock()
			must(t, pollErr)
			if polled.Status != c.status || end.Status != c.status || end.ErrorMessage == msgStoppedNone || store.Committed("paid") != 0 {
				t.Fatalf("polled between rollback and record: %+v; at the end: %+v; want %s both times, nothing kept", polled, end, c.status)
			}
		})
	}
}
