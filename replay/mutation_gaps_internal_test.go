package replay

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// Kills memory.go `len(s.byTime) > 2*len(s.entries)+64` (→ `>=`, negated,
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
		return len(s.byTime)
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
