package replaytest

// Stores for the tests of code built on the replay contracts: one whose
// work runs in a transaction, and one an instance stops reaching.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// TxStore is a [replay.MemoryStore] whose work runs in a transaction, as
// pgstore's does: AcquireWork's lease is held by the open Work, whose
// writes ([TxWrite]) only its Commit keeps. [TxStore.Kill] ends every open
// Work as the death of its process ends its connection: the lease freed,
// nothing kept. Use it to test code that runs work in a store's
// transaction (Transactional tasks and tools) without a database.
type TxStore struct {
	*replay.MemoryStore
	mu        sync.Mutex
	open      map[*txWork]bool
	committed map[string]int
}

// NewTxStore returns an empty TxStore without a size limit.
func NewTxStore() *TxStore {
	return &TxStore{MemoryStore: replay.NewMemoryStore(0), open: map[*txWork]bool{}, committed: map[string]int{}}
}

// AcquireWork implements [replay.WorkAcquirer]: a lease on id held by the
// Work it returns.
func (s *TxStore) AcquireWork(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, replay.Work, error) {
	rec, err := s.AcquireRecord(ctx, id, lease, fp)
	if err != nil || rec.State != replay.LeaseAcquired {
		return rec, nil, err
	}
	return rec, s.begin(id, rec.Token), nil
}

// BeginWork implements [replay.Transactor]: a Work under token's lease on
// id, which its Commit confirms.
func (s *TxStore) BeginWork(_ context.Context, id, token string) (replay.Work, error) {
	return s.begin(id, token), nil
}

func (s *TxStore) begin(id, token string) *txWork {
	w := &txWork{s: s, id: id, token: token}
	s.mu.Lock()
	s.open[w] = true
	s.mu.Unlock()
	return w
}

// Kill ends every open Work: its lease freed, its writes dropped.
func (s *TxStore) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.open {
		w.ended, w.err = true, replay.ErrLeaseLost
		delete(s.open, w)
		_ = s.MemoryStore.ReleaseLease(context.Background(), w.id, w.token)
	}
}

// Committed returns how many writes of what were committed.
func (s *TxStore) Committed(what string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed[what]
}

// txWork is a Work of TxStore; its fields are guarded by the store's mu.
type txWork struct {
	s         *TxStore
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

// TxWrite writes what in the transaction of a [TxStore] that ctx carries
// (from its Work's Context); it fails outside one, or once it has ended.
func TxWrite(ctx context.Context, what string) error {
	w, ok := ctx.Value(txKey{}).(*txWork)
	if !ok {
		return errors.New("replaytest: TxWrite outside a transaction")
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.ended {
		return errors.New("replaytest: TxWrite: the transaction ended")
	}
	w.writes = append(w.writes, what)
	return nil
}

// ErrCut is the error of every call to a [CutOff] store once cut.
var ErrCut = errors.New("replaytest: the instance stopped")

// CutOff is a [replay.MemoryStore] that one instance stops reaching once
// Cut is set, as when that instance stopped: its leases are neither
// renewed nor confirmed, and it reads nothing, while other instances go on
// using the MemoryStore itself.
type CutOff struct {
	*replay.MemoryStore
	Cut atomic.Bool
}

// AcquireRecord implements [replay.Recorder], or returns [ErrCut].
func (c *CutOff) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	if c.Cut.Load() {
		return replay.Record{}, ErrCut
	}
	return c.MemoryStore.AcquireRecord(ctx, id, lease, fp)
}

// ConfirmRecord implements [replay.Recorder], or returns [ErrCut].
func (c *CutOff) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	if c.Cut.Load() {
		return ErrCut
	}
	return c.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

// ReadRecord implements [replay.Reader], or returns [ErrCut].
func (c *CutOff) ReadRecord(ctx context.Context, id string) (replay.Record, error) {
	if c.Cut.Load() {
		return replay.Record{}, ErrCut
	}
	return c.MemoryStore.ReadRecord(ctx, id)
}

// RenewLease implements [replay.Renewer], or returns [ErrCut].
func (c *CutOff) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if c.Cut.Load() {
		return ErrCut
	}
	return c.MemoryStore.RenewLease(ctx, id, token, lease)
}

var (
	_ replay.WorkAcquirer = (*TxStore)(nil)
	_ replay.Reader       = (*CutOff)(nil)
	_ replay.Renewer      = (*CutOff)(nil)
)
