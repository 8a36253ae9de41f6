package replay

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// retainedBytesPerEntry fills a fresh MemoryStore with n live entries and
// returns the heap it retains per entry, measured after a full collection.
// The IDs are 40 bytes, like a one-time token's ("onetime:" and 32 hex
// digits); their strings are garbage once claimed.
func retainedBytesPerEntry(tb testing.TB, n int) float64 {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := &MemoryStore{Max: n}
	ctx, until := context.Background(), time.Now().Add(time.Hour)
	const pad = "onetime:00000000000000000000000000000000"
	for i := range n {
		id := strconv.Itoa(i)
		if _, err := s.Claim(ctx, pad[:len(pad)-len(id)]+id, until); err != nil {
			tb.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len() != n {
		tb.Fatalf("Len = %d, want %d", s.Len(), n)
	}
	runtime.KeepAlive(s)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkMemoryStoreBytesPerEntry reports the heap a full store of 2^20
// entries retains per live entry (run with -benchtime=1x).
func BenchmarkMemoryStoreBytesPerEntry(b *testing.B) {
	var per float64
	for b.Loop() {
		per = retainedBytesPerEntry(b, 1<<20)
	}
	b.ReportMetric(per, "bytes/entry")
}

// TestMemoryStoreBytesPerEntryBounded pins the bound the MemoryStore
// documentation states.
func TestMemoryStoreBytesPerEntryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 10 MB")
	}
	const bound = 96
	for _, n := range []int{100_000, 1 << 17} {
		if per := retainedBytesPerEntry(t, n); per > bound {
			t.Errorf("%d entries retain %.1f bytes each, want at most %d", n, per, bound)
		} else {
			t.Logf("%d entries retain %.1f bytes each", n, per)
		}
	}
}

// Kills memory.go `len(s.st.byTime) > 2*len(s.st.entries)+64` (→ `>=`, negated,
// and `+ 64` made `- 64`): the expiry heap is rebuilt only once its stale
// leftovers make it longer than twice the live entries plus 64, so a
// Release costs O(log n) amortized rather than a rebuild each time, and
// memory stays bounded.
func TestMemoryStoreRebuildsTheHeapOnlyPastTheThreshold(t *testing.T) {
	clk := newStepClock()
	s := &MemoryStore{Now: clk.Now}
	ctx := context.Background()
	until := clk.Now().Add(time.Hour)
	heapLen := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.st.byTime)
	}
	// No live entry: the threshold is 64 heap entries.
	for i := range 64 {
		id := strconv.Itoa(i)
		mustClaim(t, s, id, until)
		if err := s.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got := heapLen(); got != i+1 {
			t.Fatalf("after %d releases the heap holds %d entries, want %d (no rebuild yet)", i+1, got, i+1)
		}
	}
	mustClaim(t, s, "65th", until)
	if err := s.Release(ctx, "65th"); err != nil {
		t.Fatal(err)
	}
	if got := heapLen(); got != 0 {
		t.Fatalf("after 65 releases the heap holds %d entries, want 0 (rebuilt)", got)
	}
}
