package replay

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// MemoryStore is a bounded, in-process [Store]. It holds at most Max live
// entries; entries whose expiry has passed are evicted before every call
// but [MemoryStore.ReadRecord], which changes nothing.
// When it is full of live entries, a new claim or lease is refused with
// [ErrFull]: it fails closed and never forgets a live entry to make room,
// because a forgotten entry is an accepted replay.
//
// It also implements [Releaser], [Leaser], [Recorder], [Renewer] and
// [Reader]. Each claimed or confirmed entry, whatever the length of its
// ID, is kept as a 128-bit SHA-256 prefix of the ID and an expiry,
// without a pointer, so memory is
// independent of ID length and the garbage collector never scans the
// entries (a live lease takes a small allocation of its own until it is
// confirmed, released or ends): a full store of 2^20 entries without
// records retains 80 bytes per entry (BenchmarkMemoryStoreBytesPerEntry),
// and TestMemoryStoreBytesPerEntryBounded holds it under 96. An entry
// confirmed with [MemoryStore.ConfirmRecord] keeps, beside that, a copy of
// its fingerprint and result until it expires; MaxRecordBytes bounds those
// bytes over the whole store (TestMemoryStoreRecordBytes). Two distinct
// IDs collide with negligible probability (2^-128 per pair). Its state is
// local to the process: a fleet of several instances needs a shared store
// (such as the redisstore module) to reject a replay sent to another
// instance.
//
// The zero value is ready to use with [DefaultMax], [DefaultMaxRecordBytes]
// and time.Now. Set Max, MaxRecordBytes and Now before the first call and
// do not change them afterwards. A MemoryStore is safe for concurrent use
// and must not be copied after first use. Each call costs O(log n) plus
// amortised eviction.
//
// Expiries are kept as int64 Unix nanoseconds: an until or lease end past
// the last instant they represent (2262-04-11 23:47:16.854775807 UTC) is
// held until that instant, so no entry is forgotten before its time.
type MemoryStore struct {
	// Max is the maximum number of live entries; zero means [DefaultMax]. A
	// negative Max is a configuration error: every call returns [ErrConfig].
	Max int
	// MaxRecordBytes is the most bytes of fingerprints and results of
	// [Recorder] the store holds at once, counted over live leases and done
	// entries (their copies' lengths; the bookkeeping around each is bounded
	// by Max instead); zero means [DefaultMaxRecordBytes]. A record that
	// would exceed it is refused with an error matching both [ErrFull] and
	// [ErrTooLarge], and nothing is written. A negative MaxRecordBytes, or a
	// positive one under one largest record ([MaxFingerprintBytes] +
	// [MaxResultBytes]), is a configuration error: every call returns
	// [ErrConfig].
	MaxRecordBytes int
	// Now is the store's clock, which decides when an entry has expired;
	// nil means time.Now. Give it the same clock as the code that computes
	// the expiry times passed to Claim.
	Now func() time.Time

	mu sync.Mutex
	// The store's state is behind a pointer, set by the first call (under
	// mu): fmt follows a pointer only at the top of what it prints, so a
	// MemoryStore held by value in a struct that is printed (%+v of a
	// pointer to it, which go vet does not flag) shows an address, never
	// an ID, a token or a recorded byte.
	st *memState
}

// memState is what a MemoryStore holds.
type memState struct {
	entries map[entryKey]int64  // claimed and confirmed ids: hashed id → expiry (unix nanoseconds)
	byTime  expiryHeap          // the entries ordered by expiry, plus stale leftovers
	leases  map[entryKey]*lease // ids under a lease, which are not in entries
	byEnd   leaseHeap           // the leases ordered by end
	tokens  uint64              // the last lease token handed out
	records map[entryKey]record // the records of entries confirmed with ConfirmRecord
	held    int                 // bytes of fingerprints and results in leases and records
}

// lockState locks s and sets its state on first use.
func (s *MemoryStore) lockState() {
	s.mu.Lock()
	if s.st == nil {
		s.st = &memState{}
	}
}

// lease is a live lease: its token, its end (unix nanoseconds) and its
// index in byEnd.
type lease struct {
	key         entryKey
	token       uint64
	end         int64
	index       int
	fingerprint []byte // from AcquireRecord, counted in held
}

// entryKey is the first 128 bits of the SHA-256 of an ID.
type entryKey [16]byte

// maxExpiry and minExpiry are the last and first instants of int64 Unix
// nanoseconds.
var (
	maxExpiry = time.Unix(0, math.MaxInt64)
	minExpiry = time.Unix(0, math.MinInt64)
)

// unixNano is t in Unix nanoseconds, saturated to the int64 range (where
// time.Time.UnixNano is undefined).
func unixNano(t time.Time) int64 {
	switch {
	case t.After(maxExpiry):
		return math.MaxInt64
	case t.Before(minExpiry):
		return math.MinInt64
	}
	return t.UnixNano()
}

// addSat is now + d, saturated at math.MaxInt64; d is positive.
func addSat(now int64, d time.Duration) int64 {
	if now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}

func keyOf(id string) entryKey {
	sum := sha256.Sum256([]byte(id))
	return entryKey(sum[:16])
}

// NewMemoryStore returns a [MemoryStore] holding at most max live entries
// (zero: [DefaultMax]; negative: every call fails with [ErrConfig]) with the
// system clock.
func NewMemoryStore(max int) *MemoryStore {
	return &MemoryStore{Max: max}
}

// Claim records id until the given time and reports whether this was the
// first live claim of id. A second claim of a live id (or of an id under a
// live lease) reports false and leaves the first expiry unchanged; once the
// expiry has passed the id may be claimed again. It returns ctx's error if
// ctx is done, [ErrFull] when the store is full of live entries,
// [ErrExpired] when until is not after the store's current time, and
// [ErrConfig] when Max is negative; first is false whenever err is non-nil.
func (s *MemoryStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	k := keyOf(id)
	s.lockState()
	defer s.mu.Unlock()
	now := s.now()
	if !until.After(now) {
		return false, ErrExpired
	}
	s.evictLocked(unixNano(now))
	if s.liveLocked(k) {
		return false, nil
	}
	if err := s.insertLocked(k, unixNano(until)); err != nil {
		return false, err
	}
	return true, nil
}

// Release forgets id, whether claimed, leased or confirmed, so its next
// Claim is first again. It returns ctx's error if ctx is done and
// [ErrConfig] when Max is negative; releasing an unknown id is not an
// error.
func (s *MemoryStore) Release(ctx context.Context, id string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	k := keyOf(id)
	s.lockState()
	defer s.mu.Unlock()
	s.deleteLocked(k)
	return nil
}

// AcquireLease implements [Leaser]: it takes id for lease by the store's
// clock if no live entry holds it. Besides the errors of [MemoryStore.Claim]
// it refuses a lease that is not positive with [ErrExpired].
func (s *MemoryStore) AcquireLease(ctx context.Context, id string, d time.Duration) (Lease, error) {
	if err := s.check(ctx); err != nil {
		return Lease{}, err
	}
	if d <= 0 {
		return Lease{}, ErrExpired
	}
	r, err := s.acquire(keyOf(id), d, nil)
	return r.Lease, err
}

// acquire is AcquireLease keeping fingerprint (a copy the caller made)
// with an acquired lease, reporting the fingerprint and result it finds.
func (s *MemoryStore) acquire(k entryKey, d time.Duration, fingerprint []byte) (Record, error) {
	s.lockState()
	defer s.mu.Unlock()
	now := unixNano(s.now())
	s.evictLocked(now)
	if l, leased := s.st.leases[k]; leased {
		return Record{
			Lease:       Lease{State: LeaseBusy, Wait: time.Duration(l.end - now)},
			Fingerprint: clone(l.fingerprint),
		}, nil
	}
	if _, live := s.st.entries[k]; live {
		r := Record{Lease: Lease{State: LeaseDone}}
		if rec, ok := s.st.records[k]; ok {
			r.Fingerprint, r.Result = rec.copies()
		}
		return r, nil
	}
	if s.lenLocked() >= s.max() {
		return Record{}, ErrFull
	}
	if s.st.held+len(fingerprint) > s.maxRecordBytes() {
		return Record{}, errRecordBytes
	}
	s.st.tokens++
	l := &lease{key: k, token: s.st.tokens, end: addSat(now, d), fingerprint: fingerprint}
	if s.st.leases == nil {
		s.st.leases = make(map[entryKey]*lease)
	}
	s.st.leases[k] = l
	s.st.held += len(fingerprint)
	heap.Push(&s.st.byEnd, l)
	return Record{Lease: Lease{State: LeaseAcquired, Token: strconv.FormatUint(l.token, 10)}}, nil
}

// ConfirmLease implements [Leaser]: it records id as done until the given
// time when token's lease on id is live, or has ended with id still free
// (then it needs room: [ErrFull] when the store is full). It fails with
// [ErrLeaseLost] when id is held by another lease or entry, and with the
// errors of [MemoryStore.Claim]. A reply is never lost in process, so
// unlike a networked store's, a confirmation sent again after it returned
// nil is [ErrLeaseLost]: a done entry keeps no token, which holds a
// confirmed entry to the bytes the type's doc states.
func (s *MemoryStore) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	tok, err := strconv.ParseUint(token, 10, 64)
	if err != nil || tok == 0 {
		return ErrLeaseLost // not a token of this store: never a lease on id
	}
	k := keyOf(id)
	s.lockState()
	defer s.mu.Unlock()
	now := s.now()
	if !until.After(now) {
		return ErrExpired
	}
	s.evictLocked(unixNano(now))
	if l, leased := s.st.leases[k]; leased {
		if l.token != tok {
			return ErrLeaseLost
		}
		s.dropLeaseLocked(l)
	} else if _, live := s.st.entries[k]; live {
		return ErrLeaseLost
	}
	return s.insertLocked(k, unixNano(until))
}

// RenewLease implements [Renewer]: token's live lease on id ends d from
// now. It fails with [ErrLeaseLost] when token holds no live lease on id,
// with [ErrExpired] for a d that is not positive, and with the errors of
// [MemoryStore.Claim].
func (s *MemoryStore) RenewLease(ctx context.Context, id, token string, d time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if d <= 0 {
		return ErrExpired
	}
	tok, err := strconv.ParseUint(token, 10, 64)
	if err != nil || tok == 0 {
		return ErrLeaseLost // not a token of this store: never a lease on id
	}
	k := keyOf(id)
	s.lockState()
	defer s.mu.Unlock()
	now := unixNano(s.now())
	s.evictLocked(now)
	l, leased := s.st.leases[k]
	if !leased || l.token != tok {
		return ErrLeaseLost
	}
	l.end = addSat(now, d)
	heap.Fix(&s.st.byEnd, l.index)
	return nil
}

// ReleaseLease implements [Leaser]: it frees id when token's lease on it is
// live and otherwise changes nothing. It returns ctx's error if ctx is done
// and [ErrConfig] when Max is negative.
func (s *MemoryStore) ReleaseLease(ctx context.Context, id, token string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	tok, err := strconv.ParseUint(token, 10, 64)
	if err != nil || tok == 0 {
		return nil
	}
	k := keyOf(id)
	s.lockState()
	defer s.mu.Unlock()
	s.evictLocked(unixNano(s.now()))
	if l, leased := s.st.leases[k]; leased && l.token == tok {
		s.dropLeaseLocked(l)
	}
	return nil
}

// Len returns the number of live entries (claims, leases and confirmed
// leases not yet evicted as expired), for metrics.
func (s *MemoryStore) Len() int {
	s.lockState()
	defer s.mu.Unlock()
	s.evictLocked(unixNano(s.now()))
	return s.lenLocked()
}

func (s *MemoryStore) lenLocked() int { return len(s.st.entries) + len(s.st.leases) }

// liveLocked reports whether k is claimed, confirmed or leased.
func (s *MemoryStore) liveLocked(k entryKey) bool {
	if _, ok := s.st.entries[k]; ok {
		return true
	}
	_, ok := s.st.leases[k]
	return ok
}

func (s *MemoryStore) dropLeaseLocked(l *lease) {
	delete(s.st.leases, l.key)
	s.st.held -= len(l.fingerprint)
	heap.Remove(&s.st.byEnd, l.index)
}

// check refuses a done ctx and a negative Max.
func (s *MemoryStore) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Max < 0 {
		return fmt.Errorf("%w: Max is negative", ErrConfig)
	}
	if s.MaxRecordBytes < 0 {
		return fmt.Errorf("%w: MaxRecordBytes is negative", ErrConfig)
	}
	if s.MaxRecordBytes > 0 && s.MaxRecordBytes < MaxFingerprintBytes+MaxResultBytes {
		return fmt.Errorf("%w: MaxRecordBytes is under one largest record (%d bytes)", ErrConfig, MaxFingerprintBytes+MaxResultBytes)
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

// insertLocked adds a new entry, or fails with ErrFull. The caller has
// checked that k is not live, or dropped its lease.
func (s *MemoryStore) insertLocked(k entryKey, until int64) error {
	if s.lenLocked() >= s.max() {
		return ErrFull
	}
	if s.st.entries == nil {
		s.st.entries = make(map[entryKey]int64)
	}
	s.st.entries[k] = until
	heap.Push(&s.st.byTime, expiryEntry{key: k, until: until})
	return nil
}

// deleteLocked forgets an entry. The heap keeps a stale leftover until its
// expiry; it is rebuilt if leftovers ever dominate, so memory stays
// proportional to Max.
func (s *MemoryStore) deleteLocked(k entryKey) {
	s.dropEntryLocked(k)
	if l, leased := s.st.leases[k]; leased {
		s.dropLeaseLocked(l)
	}
	if len(s.st.byTime) > 2*len(s.st.entries)+64 {
		s.rebuildLocked()
	}
}

// evictLocked removes every entry and lease whose end is not after now.
func (s *MemoryStore) evictLocked(now int64) {
	for len(s.st.byTime) > 0 && s.st.byTime[0].until <= now {
		e := heap.Pop(&s.st.byTime).(expiryEntry)
		// Only delete the entry this heap entry describes: the id may have
		// been released and claimed again with a later expiry.
		if u, ok := s.st.entries[e.key]; ok && u == e.until {
			s.dropEntryLocked(e.key)
		}
	}
	for len(s.st.byEnd) > 0 && s.st.byEnd[0].end <= now {
		s.dropLeaseLocked(s.st.byEnd[0])
	}
}

// dropEntryLocked forgets a claimed or confirmed entry and its record.
func (s *MemoryStore) dropEntryLocked(k entryKey) {
	delete(s.st.entries, k)
	if r, ok := s.st.records[k]; ok {
		s.st.held -= len(r.data)
		delete(s.st.records, k)
	}
}

func (s *MemoryStore) rebuildLocked() {
	s.st.byTime = s.st.byTime[:0]
	for k, until := range s.st.entries {
		s.st.byTime = append(s.st.byTime, expiryEntry{key: k, until: until})
	}
	heap.Init(&s.st.byTime)
}

type expiryEntry struct {
	key   entryKey
	until int64
}

// expiryHeap is a min-heap of entries by expiry (container/heap).
type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// leaseHeap is a min-heap of live leases by end, each knowing its index so
// that a confirmed or released lease leaves the heap at once.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}

var (
	_ Store    = (*MemoryStore)(nil)
	_ Releaser = (*MemoryStore)(nil)
	_ Leaser   = (*MemoryStore)(nil)
	_ Recorder = (*MemoryStore)(nil)
	_ Renewer  = (*MemoryStore)(nil)
	_ Reader   = (*MemoryStore)(nil)
)
