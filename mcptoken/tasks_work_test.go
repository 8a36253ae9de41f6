package mcptoken

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// txStore is a MemoryStore that runs a task's work in a "transaction", as
// pgstore and sqlitestore do: AcquireWork's entry is held by the open
// Work, whose writes (txWrite) only its Commit keeps; kill ends every open
// Work as the death of its instance ends its connection: the entry freed,
// nothing kept.
type txStore struct {
	*replay.MemoryStore
	mu        sync.Mutex
	open      map[*txWork]bool
	committed map[string]int
	// rolledBack, when set, is called after a Work's Rollback freed its
	// entry, before the Rollback returns.
	rolledBack func()
}

func newTxStore() *txStore {
	return &txStore{MemoryStore: replay.NewMemoryStore(0), open: map[*txWork]bool{}, committed: map[string]int{}}
}

func (s *txStore) AcquireWork(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, replay.Work, error) {
	rec, err := s.AcquireRecord(ctx, id, lease, fp)
	if err != nil || rec.State != replay.LeaseAcquired {
		return rec, nil, err
	}
	w := &txWork{s: s, id: id, token: rec.Token}
	s.mu.Lock()
	s.open[w] = true
	s.mu.Unlock()
	return rec, w, nil
}

func (s *txStore) BeginWork(context.Context, string, string) (replay.Work, error) {
	return nil, errors.New("txStore: BeginWork is not used by tasks")
}

// kill ends every open Work: its entry freed, its writes dropped.
func (s *txStore) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.open {
		w.ended, w.err = true, replay.ErrLeaseLost
		delete(s.open, w)
		_ = s.MemoryStore.ReleaseLease(context.Background(), w.id, w.token)
	}
}

// count returns the committed writes of what.
func (s *txStore) count(what string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed[what]
}

// txWork is a Work of txStore; its fields are guarded by the store's mu.
type txWork struct {
	s         *txStore
	id, token string
	writes    []string
	ended     bool
	err       error
}

type txKey struct{}

func (w *txWork) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, w)
}

func (w *txWork) Commit(ctx context.Context, until time.Time, fp, result []byte) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.ended {
		return w.err
	}
	w.ended = true
	delete(w.s.open, w)
	if w.err = w.s.MemoryStore.ConfirmRecord(ctx, w.id, w.token, until, fp, result); w.err == nil {
		for _, what := range w.writes {
			w.s.committed[what]++
		}
	}
	return w.err
}

func (w *txWork) Rollback(ctx context.Context) error {
	w.s.mu.Lock()
	if w.ended {
		w.s.mu.Unlock()
		return nil
	}
	w.ended = true
	delete(w.s.open, w)
	err := w.s.MemoryStore.ReleaseLease(ctx, w.id, w.token)
	hook := w.s.rolledBack
	w.s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return err
}

// txWrite writes what in the transaction ctx carries.
func txWrite(ctx context.Context, what string) error {
	w, ok := ctx.Value(txKey{}).(*txWork)
	if !ok {
		return errors.New("txWrite outside a transaction")
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.ended {
		return errors.New("txWrite: the transaction ended")
	}
	w.writes = append(w.writes, what)
	return nil
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
			store := newTxStore()
			ts := newCoreTasks(t, store)
			started := make(chan struct{})
			tool := TaskTool{Name: "pay", Transactional: true, Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
				if err := txWrite(ctx, "paid"); err != nil {
					return nil, err
				}
				close(started)
				if c.cancel {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, errors.New("declined")
			}}
			must(t, ts.Add(tool))
			var polled TaskState
			var pollErr error
			st, err := ts.Create(context.Background(), tool, &TaskCall{Caller: "alice"})
			must(t, err)
			store.mu.Lock()
			store.rolledBack = func() { polled, pollErr = ts.Get(context.Background(), "alice", st.ID) }
			store.mu.Unlock()
			<-started
			if c.cancel {
				must(t, ts.Cancel(context.Background(), "alice", st.ID))
			}
			end := settled(t, ts, st.ID, nil)
			must(t, pollErr)
			if polled.Status != c.status || end.Status != c.status || end.ErrorMessage == msgStoppedNone || store.count("paid") != 0 {
				t.Fatalf("polled between rollback and record: %+v; at the end: %+v; want %s both times, nothing kept", polled, end, c.status)
			}
		})
	}
}
