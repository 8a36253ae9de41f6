package replay

import (
	"context"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
)

// TestMemoryStoreRecordBytesReturnToZero: every way an entry or lease
// leaves the store gives its fingerprint and result bytes back, so the
// budget never leaks.
func TestMemoryStoreRecordBytesReturnToZero(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New()
	s := &MemoryStore{Now: clk.Now}
	fp, result := []byte("fingerprint"), []byte("result")
	until := clk.Now().Add(time.Hour)
	want := 0
	check := func(step string) {
		t.Helper()
		if s.st.held != want {
			t.Fatalf("after %s: %d bytes held, want %d", step, s.st.held, want)
		}
	}
	acq := func(id string, d time.Duration) string {
		t.Helper()
		r, err := s.AcquireRecord(ctx, id, d, fp)
		if err != nil || r.State != LeaseAcquired {
			t.Fatal(r.Lease, err)
		}
		return r.Token
	}

	a := acq("a", time.Minute)
	want += len(fp)
	check("a lease with a fingerprint")
	if err := s.ConfirmRecord(ctx, "a", a, until, fp, result); err != nil {
		t.Fatal(err)
	}
	want += len(result)
	check("its confirmation with a record")
	if err := s.ConfirmRecord(ctx, "a", a, until, fp, result); err != nil {
		t.Fatal(err)
	}
	check("a resent confirmation")

	b := acq("b", time.Minute)
	if err := s.ReleaseLease(ctx, "b", b); err != nil {
		t.Fatal(err)
	}
	check("a released lease")
	c := acq("c", time.Minute)
	if err := s.ConfirmLease(ctx, "c", c, until); err != nil {
		t.Fatal(err)
	}
	check("a lease confirmed without a record")
	acq("d", time.Second)
	clk.Advance(2 * time.Second)
	s.Len()
	check("a lease that ended")

	e := acq("e", time.Minute)
	if err := s.ConfirmRecord(ctx, "e", e, clk.Now().Add(time.Minute), fp, result); err != nil {
		t.Fatal(err)
	}
	want += len(fp) + len(result)
	check("a second record")
	if err := s.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want -= len(fp) + len(result)
	check("a released record")
	clk.Advance(time.Minute)
	s.Len()
	want = 0
	check("an expired record")
	if len(s.st.records) != 0 {
		t.Fatalf("%d records left, want none", len(s.st.records))
	}
}

// TestMemoryStoreReadRecordEvictsNothing pins that ReadRecord changes
// nothing, not even the eviction every other call runs first: an expired
// entry reads free and is still held until the next write.
func TestMemoryStoreReadRecordEvictsNothing(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New()
	s := &MemoryStore{Now: clk.Now}
	if first, err := s.Claim(ctx, "claimed", clk.Now().Add(time.Second)); !first || err != nil {
		t.Fatal(first, err)
	}
	if l, err := s.AcquireRecord(ctx, "leased", time.Second, []byte("fp")); err != nil || l.State != LeaseAcquired {
		t.Fatal(l.Lease, err)
	}
	clk.Advance(time.Second)
	for _, id := range []string{"claimed", "leased"} {
		if r, err := s.ReadRecord(ctx, id); err != nil || r.State != LeaseFree {
			t.Fatalf("ReadRecord(%q) once it ended = %v, %v; want free", id, r.State, err)
		}
	}
	if len(s.st.entries) != 1 || len(s.st.leases) != 1 || s.st.held != 2 {
		t.Fatalf("after the reads: %d entries, %d leases, %d bytes held; want 1, 1, 2: a read evicted", len(s.st.entries), len(s.st.leases), s.st.held)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len after the next call = %d, want 0", n)
	}
}
