package replay

import (
	"bytes"
	"context"
	"strconv"
	"time"
)

// DefaultMaxRecordBytes is the byte budget of a [MemoryStore] whose
// MaxRecordBytes is zero: 64 MiB of fingerprints and results, room for 63
// records of the largest size.
const DefaultMaxRecordBytes = 64 << 20

// record is the fingerprint and result of an entry confirmed with
// ConfirmRecord, in one allocation, and the token of the lease that
// confirmed it, so that a resent confirmation is recognised.
type record struct {
	token uint64
	fpLen int    // data[:fpLen] is the fingerprint
	data  []byte // fingerprint ‖ result
}

// copies returns a copy of the fingerprint (nil when empty) and of the
// result, in one allocation; the fingerprint's capacity ends where the
// result begins, so appending to one never changes the other.
func (r record) copies() (fingerprint, result []byte) {
	data := clone(r.data)
	if r.fpLen > 0 {
		fingerprint = data[:r.fpLen:r.fpLen]
	}
	return fingerprint, data[r.fpLen:]
}

// errRecordBytes refuses a record that would take the bytes a MemoryStore
// holds past MaxRecordBytes.
var errRecordBytes error = recordBytesError{}

// recordBytesError matches [ErrFull] (the store is full of bytes, as it can
// be full of entries: fail closed, no live entry is forgotten to make room)
// and [ErrTooLarge] (the record does not fit).
type recordBytesError struct{}

func (recordBytesError) Error() string {
	return "replay: store full: records would exceed MaxRecordBytes"
}

func (recordBytesError) Is(target error) bool { return target == ErrFull || target == ErrTooLarge }

// AcquireRecord implements [Recorder]: it is [MemoryStore.AcquireLease]
// keeping a copy of fingerprint with an acquired lease. Besides the errors
// of AcquireLease, it refuses a fingerprint over [MaxFingerprintBytes]
// with [ErrTooLarge], and one that would take the bytes held past
// MaxRecordBytes with an error matching [ErrFull] and [ErrTooLarge]; a
// refused call takes nothing. The Fingerprint and Result it returns are
// copies, nil when empty.
func (s *MemoryStore) AcquireRecord(ctx context.Context, id string, d time.Duration, fingerprint []byte) (Record, error) {
	if err := s.check(ctx); err != nil {
		return Record{}, err
	}
	if err := CheckFingerprint(fingerprint); err != nil {
		return Record{}, err
	}
	if d <= 0 {
		return Record{}, ErrExpired
	}
	return s.acquire(keyOf(id), d, clone(fingerprint))
}

// ConfirmRecord implements [Recorder]: it is [MemoryStore.ConfirmLease]
// keeping copies of fingerprint and result with the done entry, which is
// remembered until the given time. Confirming again with the same token
// while that entry lives returns nil and keeps the first fingerprint and
// result. Besides the errors of ConfirmLease, it refuses a fingerprint over
// [MaxFingerprintBytes] and a result that is empty or over
// [MaxResultBytes] with [ErrTooLarge], and a record that would take the
// bytes held past MaxRecordBytes with an error matching [ErrFull] and
// [ErrTooLarge]; a refused call writes nothing and leaves the lease as it
// was.
func (s *MemoryStore) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fingerprint, result []byte) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := CheckRecord(fingerprint, result); err != nil {
		return err
	}
	tok, err := strconv.ParseUint(token, 10, 64)
	if err != nil || tok == 0 {
		return ErrLeaseLost // not a token of this store: never a lease on id
	}
	k := keyOf(id)
	size := len(fingerprint) + len(result)
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
		if s.st.held-len(l.fingerprint)+size > s.maxRecordBytes() {
			return errRecordBytes
		}
		s.dropLeaseLocked(l)
	} else if _, live := s.st.entries[k]; live {
		if r, ok := s.st.records[k]; ok && r.token == tok {
			return nil // this confirmation, resent
		}
		return ErrLeaseLost
	} else if s.st.held+size > s.maxRecordBytes() {
		return errRecordBytes
	}
	if err := s.insertLocked(k, unixNano(until)); err != nil {
		return err
	}
	if s.st.records == nil {
		s.st.records = make(map[entryKey]record)
	}
	data := bytes.Join([][]byte{fingerprint, result}, nil) // one copy, into memory it does not clear first
	s.st.records[k] = record{token: tok, fpLen: len(fingerprint), data: data}
	s.st.held += size
	return nil
}

// ReadRecord implements [Reader]: it returns what AcquireRecord of id would
// find by the store's clock, without evicting, taking or changing anything,
// so a store full of entries or of record bytes answers it too. The
// Fingerprint and Result it returns are copies, nil when empty. It returns
// ctx's error if ctx is done and [ErrConfig] for an invalid configuration.
func (s *MemoryStore) ReadRecord(ctx context.Context, id string) (Record, error) {
	if err := s.check(ctx); err != nil {
		return Record{}, err
	}
	k := keyOf(id)
	s.lockState()
	defer s.mu.Unlock()
	// Live is what evictLocked keeps: an end after now.
	now := unixNano(s.now())
	if l, leased := s.st.leases[k]; leased && l.end > now {
		return Record{
			Lease:       Lease{State: LeaseBusy, Wait: time.Duration(l.end - now)},
			Fingerprint: clone(l.fingerprint),
		}, nil
	}
	if until, ok := s.st.entries[k]; ok && until > now {
		r := Record{Lease: Lease{State: LeaseDone}}
		if rec, ok := s.st.records[k]; ok {
			r.Fingerprint, r.Result = rec.copies()
		}
		return r, nil
	}
	return Record{Lease: Lease{State: LeaseFree}}, nil
}

func (s *MemoryStore) maxRecordBytes() int {
	if s.MaxRecordBytes == 0 {
		return DefaultMaxRecordBytes
	}
	return s.MaxRecordBytes
}

// clone copies b, returning nil for an empty b.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
