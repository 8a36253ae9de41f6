package ctoken

import (
	"container/heap"
	"context"
	"errors"
	"sync"
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

// ReplayReleaser is an optional interface of a ReplayStore: Release forgets a
// claim of id made by the caller, so a later Claim of id is first again.
//
// The webhook middleware uses it to undo its claim when the wrapped handler
// fails (a 5xx status or a panic), so the sender's retry is processed rather
// than acknowledged as a duplicate. Releasing an id that is not claimed is
// not an error. One-time tokens and single-use request states never release.
type ReplayReleaser interface {
	Release(ctx context.Context, id string) error
}

// replaySkewMargin is how long one-time tokens and single-use request states
// hold their claim past their own expiry: an instance whose clock is behind
// the store's (or another instance's) still accepts them for that long, and
// Redis answers "first" to a SET NX PXAT that is already past by its clock.
const replaySkewMargin = 60 * time.Second

// DefaultReplayStoreMax is the capacity of a MemoryReplayStore whose Max is
// zero or negative.
const DefaultReplayStoreMax = 100_000

var (
	// ErrReplayStoreFull reports that a bounded ReplayStore holds its maximum
	// number of live entries and so cannot record a new one. The claim is
	// refused (fail closed); no live entry is ever dropped to make room.
	ErrReplayStoreFull = errors.New("ctoken: replay store full")

	// errReplayPast reports a claim whose expiry is not after the store's
	// current time; recording it would be forgotten at once, so it is refused.
	errReplayPast = errors.New("ctoken: replay claim already expired")
)

// MemoryReplayStore is a bounded, in-process ReplayStore. It holds at most
// Max live entries; entries whose expiry has passed are evicted before every
// claim. When it is full of live entries, Claim returns ErrReplayStoreFull:
// it fails closed and never forgets a live entry to make room, because a
// forgotten entry is an accepted replay.
//
// It also implements ReplayReleaser. Its state is local to the process: a
// fleet of several instances needs a shared store (for example one backed by
// Redis SET NX with an expiry) to reject a replay sent to another instance.
//
// The zero value is ready to use with DefaultReplayStoreMax and time.Now. Set
// Max and Now before the first call and do not change them afterwards. A
// MemoryReplayStore is safe for concurrent use and must not be copied after
// first use. Each call costs O(log n) plus amortised eviction.
type MemoryReplayStore struct {
	// Max is the maximum number of live entries; zero or negative means
	// DefaultReplayStoreMax.
	Max int
	// Now is the store's clock, which decides when an entry has expired;
	// nil means time.Now. Give it the same clock as the code that computes
	// the expiry times passed to Claim.
	Now func() time.Time

	mu      sync.Mutex
	entries map[string]time.Time // live entries: id → expiry
	byTime  expiryHeap           // the same entries ordered by expiry, plus stale leftovers
}

// NewMemoryReplayStore returns a MemoryReplayStore holding at most max live
// entries (zero or negative: DefaultReplayStoreMax) with the system clock.
func NewMemoryReplayStore(max int) *MemoryReplayStore {
	return &MemoryReplayStore{Max: max}
}

// Claim records id until the given time and reports whether this was the
// first live claim of id. A second claim of a live id reports false and
// leaves the first expiry unchanged; once the expiry has passed the id may
// be claimed again. It returns ctx's error if ctx is done, ErrReplayStoreFull
// when the store is full of live entries, and an error when until is not
// after the store's current time; first is false whenever err is non-nil.
func (s *MemoryReplayStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !until.After(now) {
		return false, errReplayPast
	}
	s.evictLocked(now)
	if _, live := s.entries[id]; live {
		return false, nil
	}
	if len(s.entries) >= s.max() {
		return false, ErrReplayStoreFull
	}
	if s.entries == nil {
		s.entries = make(map[string]time.Time)
	}
	s.entries[id] = until
	heap.Push(&s.byTime, expiryEntry{id: id, until: until})
	return true, nil
}

// Release forgets id, so its next Claim is first again. It returns ctx's
// error if ctx is done; releasing an unknown id is not an error.
func (s *MemoryReplayStore) Release(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, id)
	// The heap keeps a stale entry until its expiry; rebuild it if released
	// leftovers ever dominate, so memory stays proportional to Max.
	if len(s.byTime) > 2*len(s.entries)+64 {
		s.rebuildLocked()
	}
	return nil
}

// Len returns the number of live entries (entries not yet evicted as
// expired), for metrics.
func (s *MemoryReplayStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictLocked(s.now())
	return len(s.entries)
}

func (s *MemoryReplayStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *MemoryReplayStore) max() int {
	if s.Max <= 0 {
		return DefaultReplayStoreMax
	}
	return s.Max
}

// evictLocked removes every entry whose expiry is not after now.
func (s *MemoryReplayStore) evictLocked(now time.Time) {
	for len(s.byTime) > 0 && !s.byTime[0].until.After(now) {
		e := heap.Pop(&s.byTime).(expiryEntry)
		// Only delete the map entry this heap entry describes: the id may
		// have been released and claimed again with a later expiry.
		if u, ok := s.entries[e.id]; ok && u.Equal(e.until) {
			delete(s.entries, e.id)
		}
	}
}

func (s *MemoryReplayStore) rebuildLocked() {
	s.byTime = s.byTime[:0]
	for id, until := range s.entries {
		s.byTime = append(s.byTime, expiryEntry{id: id, until: until})
	}
	heap.Init(&s.byTime)
}

type expiryEntry struct {
	id    string
	until time.Time
}

// expiryHeap is a min-heap of entries by expiry (container/heap).
type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = expiryEntry{}
	*h = old[:len(old)-1]
	return e
}
