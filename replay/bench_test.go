package replay

import (
	"context"
	"strconv"
	"testing"
	"time"
)

func BenchmarkMemoryStoreClaim(b *testing.B) {
	// Steady state: every claim lives 1 ms of a clock that advances 1 µs per
	// claim, so about 1000 entries are live and one expires per claim.
	now := time.Unix(1_700_000_000, 0)
	s := &MemoryStore{Now: func() time.Time { return now }}
	ctx := context.Background()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if _, err := s.Claim(ctx, strconv.Itoa(i), now.Add(time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// benchmarkLeaseCycle runs one acquisition and confirmation per iteration
// in the steady state of BenchmarkMemoryStoreClaim: each confirmed entry
// lives 1 ms of a clock that advances 1 µs per iteration.
func benchmarkLeaseCycle(b *testing.B, cycle func(s *MemoryStore, id string, until time.Time) error) {
	now := time.Unix(1_700_000_000, 0)
	s := &MemoryStore{Now: func() time.Time { return now }}
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if err := cycle(s, strconv.Itoa(i), now.Add(time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkMemoryStoreLeaseCycle is AcquireLease and ConfirmLease: the
// floor of BenchmarkMemoryStoreRecordCycle.
func BenchmarkMemoryStoreLeaseCycle(b *testing.B) {
	ctx := context.Background()
	benchmarkLeaseCycle(b, func(s *MemoryStore, id string, until time.Time) error {
		l, err := s.AcquireLease(ctx, id, time.Second)
		if err != nil {
			return err
		}
		return s.ConfirmLease(ctx, id, l.Token, until)
	})
}

// BenchmarkMemoryStoreRecordCycle is AcquireRecord and ConfirmRecord with a
// 32-byte fingerprint and a result of 1 KiB (a small JSON response and its
// headers).
func BenchmarkMemoryStoreRecordCycle(b *testing.B) {
	ctx := context.Background()
	fp, result := make([]byte, 32), make([]byte, 1024)
	benchmarkLeaseCycle(b, func(s *MemoryStore, id string, until time.Time) error {
		l, err := s.AcquireRecord(ctx, id, time.Second, fp)
		if err != nil {
			return err
		}
		return s.ConfirmRecord(ctx, id, l.Token, until, fp, result)
	})
}

// BenchmarkMemoryStoreRecordReplay is AcquireRecord of a done entry, which
// copies its 32-byte fingerprint and 1 KiB result out: what every retry
// answered from the record costs.
func BenchmarkMemoryStoreRecordReplay(b *testing.B) {
	ctx := context.Background()
	s := NewMemoryStore(0)
	fp, result := make([]byte, 32), make([]byte, 1024)
	l, err := s.AcquireRecord(ctx, "done", time.Second, fp)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.ConfirmRecord(ctx, "done", l.Token, time.Now().Add(time.Hour), fp, result); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if r, err := s.AcquireRecord(ctx, "done", time.Second, fp); err != nil || r.State != LeaseDone {
			b.Fatal(r.Lease, err)
		}
	}
}
