package mcptoken

import (
	"context"
	"errors"
	"sync"
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
	defer w.s.mu.Unlock()
	if w.ended {
		return nil
	}
	w.ended = true
	delete(w.s.open, w)
	return w.s.MemoryStore.ReleaseLease(ctx, w.id, w.token)
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
