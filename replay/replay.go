// Package replay records single-use IDs — webhook deliveries, one-time
// tokens, single-use request states — so that each is accepted once.
//
// A [Store] claims an ID until a time; [MemoryStore] is the bounded
// in-process implementation, and the redisstore module offers one shared by
// a fleet. Optional capabilities are separate interfaces that a caller
// detects with a type assertion ([Releaser] today), so a Store written
// against this package keeps working as capabilities are added. This
// package depends on the standard library only.
package replay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Store remembers single-use IDs so each is accepted once.
//
// Claim atomically records id until the given time and reports whether this
// call was the first claim of id that is still live. An implementation must
// fail closed: when it cannot decide (full, unreachable, timed out) it
// returns an error, never first == true. Implementations are safe for
// concurrent use.
type Store interface {
	Claim(ctx context.Context, id string, until time.Time) (first bool, err error)
}

// Releaser is an optional interface of a [Store]: Release forgets a claim of
// id made by the caller, so a later Claim of id is first again.
//
// The webhook middleware uses it to undo its claim when the wrapped handler
// fails (a 5xx status or a panic), so the sender's retry is processed rather
// than acknowledged as a duplicate. Releasing an id that is not claimed is
// not an error. One-time tokens and single-use request states never release.
type Releaser interface {
	Release(ctx context.Context, id string) error
}

// SkewMargin is how long callers hold a claim past the last instant their
// own checks would still accept the ID: an instance whose clock is behind
// the store's (or another instance's) still accepts the ID for that long,
// and Redis answers "first" to a SET NX PXAT that is already past by its
// clock. One-time tokens and single-use request states use it.
const SkewMargin = 60 * time.Second

// DefaultMax is the capacity of a [MemoryStore] whose Max is zero.
const DefaultMax = 100_000

var (
	// ErrFull reports that a bounded [Store] holds its maximum number of live
	// entries and so cannot record a new one. The claim is refused (fail
	// closed); no live entry is ever dropped to make room.
	ErrFull = errors.New("replay: store full")

	// ErrExpired reports a claim whose until is not after the store's
	// current time: recording it would be forgotten at once, so it is
	// refused.
	ErrExpired = errors.New("replay: claim already expired")

	// ErrConfig reports a store whose configuration is invalid (a negative
	// [MemoryStore.Max]); every call refuses until it is fixed.
	ErrConfig = errors.New("replay: invalid store configuration")
)

// MemoryStore is a bounded, in-process [Store]. It holds at most Max live
// entries; entries whose expiry has passed are evicted before every claim.
// When it is full of live entries, Claim returns [ErrFull]:
// it fails closed and never forgets a live entry to make room, because a
// forgotten entry is an accepted replay.
//
// It also implements [Releaser]. Its state is local to the process: a
// fleet of several instances needs a shared store (for example one backed by
// Redis SET NX with an expiry) to reject a replay sent to another instance.
//
// The zero value is ready to use with [DefaultMax] and time.Now. Set Max and
// Now before the first call and do not change them afterwards. A
// MemoryStore is safe for concurrent use and must not be copied after
// first use. Each call costs O(log n) plus amortised eviction.
type MemoryStore struct {
	// Max is the maximum number of live entries; zero means [DefaultMax]. A
	// negative Max is a configuration error: every call returns [ErrConfig].
	Max int
	// Now is the store's clock, which decides when an entry has expired;
	// nil means time.Now. Give it the same clock as the code that computes
	// the expiry times passed to Claim.
	Now func() time.Time

	mu      sync.Mutex
	entries map[string]time.Time // live entries: id → expiry
	byTime  expiryHeap           // the same entries ordered by expiry, plus stale leftovers
}

// NewMemoryStore returns a [MemoryStore] holding at most max live entries
// (zero: [DefaultMax]; negative: every call fails with [ErrConfig]) with the
// system clock.
func NewMemoryStore(max int) *MemoryStore {
	return &MemoryStore{Max: max}
}

// Claim records id until the given time and reports whether this was the
// first live claim of id. A second claim of a live id reports false and
// leaves the first expiry unchanged; once the expiry has passed the id may
// be claimed again. It returns ctx's error if ctx is done, [ErrFull] when
// the store is full of live entries, [ErrExpired] when until is not after
// the store's current time, and [ErrConfig] when Max is negative; first is
// false whenever err is non-nil.
func (s *MemoryStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := s.check(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !until.After(now) {
		return false, ErrExpired
	}
	s.evictLocked(now)
	if _, live := s.entries[id]; live {
		return false, nil
	}
	if len(s.entries) >= s.max() {
		return false, ErrFull
	}
	if s.entries == nil {
		s.entries = make(map[string]time.Time)
	}
	s.entries[id] = until
	heap.Push(&s.byTime, expiryEntry{id: id, until: until})
	return true, nil
}

// Release forgets id, so its next Claim is first again. It returns ctx's
// error if ctx is done and [ErrConfig] when Max is negative; releasing an
// unknown id is not an error.
func (s *MemoryStore) Release(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.check(); err != nil {
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
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictLocked(s.now())
	return len(s.entries)
}

// check refuses a negative Max.
func (s *MemoryStore) check() error {
	if s.Max < 0 {
		return fmt.Errorf("%w: Max is negative", ErrConfig)
	}
	return nil
}

func (s *MemoryStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *MemoryStore) max() int {
	if s.Max == 0 {
		return DefaultMax
	}
	return s.Max
}

// evictLocked removes every entry whose expiry is not after now.
func (s *MemoryStore) evictLocked(now time.Time) {
	for len(s.byTime) > 0 && !s.byTime[0].until.After(now) {
		e := heap.Pop(&s.byTime).(expiryEntry)
		// Only delete the map entry this heap entry describes: the id may
		// have been released and claimed again with a later expiry.
		if u, ok := s.entries[e.id]; ok && u.Equal(e.until) {
			delete(s.entries, e.id)
		}
	}
}

func (s *MemoryStore) rebuildLocked() {
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

var (
	_ Store    = (*MemoryStore)(nil)
	_ Releaser = (*MemoryStore)(nil)
)
