package replay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/replay"
)

// minRecordBytes is the smallest valid MaxRecordBytes: one largest record.
const minRecordBytes = replay.MaxFingerprintBytes + replay.MaxResultBytes

// largest returns the largest fingerprint and result a Recorder takes.
func largest() (fp, result []byte) {
	return bytes.Repeat([]byte{0xfe}, replay.MaxFingerprintBytes), bytes.Repeat([]byte{0}, replay.MaxResultBytes)
}

// isBudgetRefusal reports whether err is the refusal of a record past
// MaxRecordBytes: it matches both ErrFull and ErrTooLarge.
func isBudgetRefusal(err error) bool {
	return errors.Is(err, replay.ErrFull) && errors.Is(err, replay.ErrTooLarge)
}

// fillBudget records "full" with the largest record in a store whose
// budget is one largest record.
func fillBudget(t *testing.T) (*replay.MemoryStore, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	s := &replay.MemoryStore{MaxRecordBytes: minRecordBytes, Now: clk.Now}
	fp, result := largest()
	l, err := s.AcquireRecord(context.Background(), "full", time.Minute, fp)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatal(l.Lease, err)
	}
	if err := s.ConfirmRecord(context.Background(), "full", l.Token, clk.Now().Add(time.Hour), fp, result); err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// TestMemoryStoreRecordBytes pins MaxRecordBytes, the byte budget of the
// records a MemoryStore holds.
func TestMemoryStoreRecordBytes(t *testing.T) {
	ctx := context.Background()

	t.Run("refuses past the budget with ErrFull and ErrTooLarge and keeps live entries", func(t *testing.T) {
		s, clk := fillBudget(t)
		if r, err := s.AcquireRecord(ctx, "b", time.Minute, []byte("f")); !isBudgetRefusal(err) || r.State != 0 || r.Token != "" {
			t.Fatalf("AcquireRecord past the budget = %+v, %v; want ErrFull and ErrTooLarge", r.Lease, err)
		}
		// Nothing was taken: a lease without a fingerprint takes no bytes.
		l, err := s.AcquireRecord(ctx, "b", time.Minute, nil)
		if err != nil || l.State != replay.LeaseAcquired {
			t.Fatalf("AcquireRecord without a fingerprint on a full budget = %+v, %v; want acquired", l.Lease, err)
		}
		err = s.ConfirmRecord(ctx, "b", l.Token, clk.Now().Add(time.Hour), nil, []byte("x"))
		if !isBudgetRefusal(err) {
			t.Fatalf("ConfirmRecord past the budget: %v, want ErrFull and ErrTooLarge", err)
		}
		if r, _ := s.AcquireRecord(ctx, "b", time.Minute, nil); r.State != replay.LeaseBusy {
			t.Fatalf("after a refused confirmation: %v, want the lease still busy", r.State)
		}
		// Claims and records without bytes still fit.
		if err := s.ConfirmLease(ctx, "b", l.Token, clk.Now().Add(time.Hour)); err != nil {
			t.Fatalf("ConfirmLease on a full budget: %v", err)
		}
		if first, err := s.Claim(ctx, "c", clk.Now().Add(time.Hour)); !first || err != nil {
			t.Fatalf("Claim on a full budget = %v, %v", first, err)
		}
		fp, result := largest()
		if r, err := s.AcquireRecord(ctx, "full", time.Minute, nil); err != nil || r.State != replay.LeaseDone ||
			!bytes.Equal(r.Fingerprint, fp) || !bytes.Equal(r.Result, result) {
			t.Fatalf("the live record after refusals = %v, %v; want done with its record", r.State, err)
		}
	})

	t.Run("refuses a confirmation of an ended lease past the budget", func(t *testing.T) {
		s, clk := fillBudget(t)
		l, _ := s.AcquireRecord(ctx, "b", time.Second, nil)
		clk.Advance(2 * time.Second)
		if err := s.ConfirmRecord(ctx, "b", l.Token, clk.Now().Add(time.Hour), nil, []byte("x")); !isBudgetRefusal(err) {
			t.Fatalf("ConfirmRecord of an ended lease past the budget: %v, want ErrFull and ErrTooLarge", err)
		}
		if r, err := s.AcquireRecord(ctx, "b", time.Minute, nil); err != nil || r.State != replay.LeaseAcquired {
			t.Fatalf("after the refused confirmation = %+v, %v; want the ID still free", r.Lease, err)
		}
	})

	t.Run("confirmation counts the lease's fingerprint once", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{MaxRecordBytes: minRecordBytes, Now: clk.Now}
		fp, result := largest()
		l, err := s.AcquireRecord(ctx, "a", time.Minute, fp)
		if err != nil {
			t.Fatal(err)
		}
		// The lease's 80 bytes become the record's: exactly the budget.
		if err := s.ConfirmRecord(ctx, "a", l.Token, clk.Now().Add(time.Hour), fp, result); err != nil {
			t.Fatalf("ConfirmRecord filling the budget exactly: %v", err)
		}
	})

	t.Run("expiry frees the budget", func(t *testing.T) {
		s, clk := fillBudget(t)
		clk.Advance(time.Hour)
		fp, result := largest()
		l, err := s.AcquireRecord(ctx, "b", time.Minute, fp)
		if err != nil || l.State != replay.LeaseAcquired {
			t.Fatalf("AcquireRecord after the record expired = %+v, %v", l.Lease, err)
		}
		if err := s.ConfirmRecord(ctx, "b", l.Token, clk.Now().Add(time.Hour), fp, result); err != nil {
			t.Fatalf("ConfirmRecord after the record expired: %v", err)
		}
	})

	t.Run("release frees the budget", func(t *testing.T) {
		s, clk := fillBudget(t)
		if err := s.Release(ctx, "full"); err != nil {
			t.Fatal(err)
		}
		fp, result := largest()
		l, err := s.AcquireRecord(ctx, "b", time.Minute, fp)
		if err != nil || l.State != replay.LeaseAcquired {
			t.Fatalf("AcquireRecord after Release = %+v, %v", l.Lease, err)
		}
		if err := s.ConfirmRecord(ctx, "b", l.Token, clk.Now().Add(time.Hour), fp, result); err != nil {
			t.Fatalf("ConfirmRecord after Release: %v", err)
		}
	})

	t.Run("a lease's end, release or plain confirmation frees its fingerprint", func(t *testing.T) {
		for _, end := range []struct {
			name string
			fn   func(s *replay.MemoryStore, clk *clocktest.Clock, token string) error
		}{
			{"end", func(_ *replay.MemoryStore, clk *clocktest.Clock, _ string) error {
				clk.Advance(time.Minute)
				return nil
			}},
			{"ReleaseLease", func(s *replay.MemoryStore, _ *clocktest.Clock, token string) error {
				return s.ReleaseLease(ctx, "held", token)
			}},
			{"ConfirmLease", func(s *replay.MemoryStore, clk *clocktest.Clock, token string) error {
				return s.ConfirmLease(ctx, "held", token, clk.Now().Add(time.Hour))
			}},
		} {
			clk := clocktest.New()
			s := &replay.MemoryStore{MaxRecordBytes: minRecordBytes, Now: clk.Now}
			fp, result := largest()
			l, err := s.AcquireRecord(ctx, "held", time.Minute, fp)
			if err != nil {
				t.Fatal(err)
			}
			// The lease holds 80 bytes: a largest record elsewhere does not fit.
			other, err := s.AcquireRecord(ctx, "other", 2*time.Hour, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.ConfirmRecord(ctx, "other", other.Token, clk.Now().Add(time.Hour), fp, result); !isBudgetRefusal(err) {
				t.Fatalf("%s: ConfirmRecord beside a live fingerprint: %v, want the budget refusal", end.name, err)
			}
			if err := end.fn(s, clk, l.Token); err != nil {
				t.Fatal(err)
			}
			if err := s.ConfirmRecord(ctx, "other", other.Token, clk.Now().Add(time.Hour), fp, result); err != nil {
				t.Fatalf("ConfirmRecord after the lease's %s: %v", end.name, err)
			}
		}
	})

	t.Run("the default budget holds 63 largest records", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Now: clk.Now}
		fp, result := largest()
		record := func(id string) error {
			l, err := s.AcquireRecord(ctx, id, time.Minute, nil)
			if err != nil {
				return err
			}
			return s.ConfirmRecord(ctx, id, l.Token, clk.Now().Add(time.Hour), fp, result)
		}
		for i := range replay.DefaultMaxRecordBytes / minRecordBytes {
			if err := record(fmt.Sprint("record-", i)); err != nil {
				t.Fatalf("record %d of %d: %v", i+1, replay.DefaultMaxRecordBytes/minRecordBytes, err)
			}
		}
		if err := record("one more"); !isBudgetRefusal(err) {
			t.Fatalf("one record past the default budget: %v, want ErrFull and ErrTooLarge", err)
		}
	})
}

// TestMemoryStoreRecordRefusals pins the MemoryStore's refusals of records
// beyond the shared contract: configuration, context and a store full of
// entries.
func TestMemoryStoreRecordRefusals(t *testing.T) {
	ctx := context.Background()

	t.Run("invalid MaxRecordBytes refuses every call with ErrConfig", func(t *testing.T) {
		for _, max := range []int{-1, 1, minRecordBytes - 1} {
			s := &replay.MemoryStore{MaxRecordBytes: max}
			until := time.Now().Add(time.Hour)
			if _, err := s.AcquireRecord(ctx, "a", time.Minute, nil); !errors.Is(err, replay.ErrConfig) {
				t.Errorf("MaxRecordBytes %d: AcquireRecord: %v, want ErrConfig", max, err)
			}
			if err := s.ConfirmRecord(ctx, "a", "1", until, nil, []byte("x")); !errors.Is(err, replay.ErrConfig) {
				t.Errorf("MaxRecordBytes %d: ConfirmRecord: %v, want ErrConfig", max, err)
			}
			if _, err := s.AcquireLease(ctx, "a", time.Minute); !errors.Is(err, replay.ErrConfig) {
				t.Errorf("MaxRecordBytes %d: AcquireLease: %v, want ErrConfig", max, err)
			}
			if _, err := s.Claim(ctx, "a", until); !errors.Is(err, replay.ErrConfig) {
				t.Errorf("MaxRecordBytes %d: Claim: %v, want ErrConfig", max, err)
			}
		}
		s := &replay.MemoryStore{MaxRecordBytes: minRecordBytes}
		if _, err := s.AcquireRecord(ctx, "a", time.Minute, nil); err != nil {
			t.Errorf("MaxRecordBytes of one largest record: %v", err)
		}
	})

	t.Run("negative Max refuses with ErrConfig", func(t *testing.T) {
		s := replay.NewMemoryStore(-1)
		if _, err := s.AcquireRecord(ctx, "a", time.Minute, nil); !errors.Is(err, replay.ErrConfig) {
			t.Errorf("AcquireRecord: %v, want ErrConfig", err)
		}
		if err := s.ConfirmRecord(ctx, "a", "1", time.Now().Add(time.Hour), nil, []byte("x")); !errors.Is(err, replay.ErrConfig) {
			t.Errorf("ConfirmRecord: %v, want ErrConfig", err)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		s := replay.NewMemoryStore(10)
		if _, err := s.AcquireRecord(cctx, "a", time.Minute, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("AcquireRecord: %v", err)
		}
		if err := s.ConfirmRecord(cctx, "a", "1", time.Now().Add(time.Hour), nil, []byte("x")); !errors.Is(err, context.Canceled) {
			t.Errorf("ConfirmRecord: %v", err)
		}
		if n := s.Len(); n != 0 {
			t.Errorf("Len = %d after refused calls, want 0", n)
		}
	})

	t.Run("appending to the returned fingerprint leaves the result alone", func(t *testing.T) {
		s := replay.NewMemoryStore(0)
		fp, result := []byte("fingerprint"), []byte("result")
		l, _ := s.AcquireRecord(ctx, "a", time.Minute, fp)
		if err := s.ConfirmRecord(ctx, "a", l.Token, time.Now().Add(time.Hour), fp, result); err != nil {
			t.Fatal(err)
		}
		r, err := s.AcquireRecord(ctx, "a", time.Minute, nil)
		if err != nil || r.State != replay.LeaseDone {
			t.Fatal(r.Lease, err)
		}
		_ = append(r.Fingerprint, "XXXXXX"...)
		if !bytes.Equal(r.Result, result) {
			t.Fatalf("Result = %q after appending to Fingerprint, want %q", r.Result, result)
		}
	})

	t.Run("full of entries", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Max: 1, Now: clk.Now}
		l, _ := s.AcquireRecord(ctx, "a", time.Second, []byte("fp"))
		if r, err := s.AcquireRecord(ctx, "b", time.Minute, []byte("fp")); !errors.Is(err, replay.ErrFull) || r.State != 0 {
			t.Fatalf("AcquireRecord on a full store = %+v, %v; want ErrFull", r.Lease, err)
		}
		clk.Advance(2 * time.Second)
		if first, err := s.Claim(ctx, "b", clk.Now().Add(time.Hour)); !first || err != nil {
			t.Fatal(first, err)
		}
		// The lease ended and the ID is free, but there is no room for it.
		if err := s.ConfirmRecord(ctx, "a", l.Token, clk.Now().Add(time.Hour), []byte("fp"), []byte("x")); !errors.Is(err, replay.ErrFull) || errors.Is(err, replay.ErrTooLarge) {
			t.Fatalf("ConfirmRecord of an ended lease on a full store: %v, want ErrFull alone", err)
		}
		if err := s.Release(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if r, err := s.AcquireRecord(ctx, "a", time.Minute, nil); err != nil || r.State != replay.LeaseAcquired {
			t.Fatalf("after the refused confirmation = %+v, %v; want the ID free", r.Lease, err)
		}
	})
}

// TestMemoryStoreReadRecord pins what the Reader contract leaves to the
// MemoryStore: a full store answers reads, the lapse of a lease is decided
// at the same instant for ReadRecord as for AcquireRecord, and a read
// refuses what every call refuses.
func TestMemoryStoreReadRecord(t *testing.T) {
	ctx := context.Background()

	t.Run("answers when full of entries", func(t *testing.T) {
		s := &replay.MemoryStore{Max: 2}
		l, err := s.AcquireRecord(ctx, "leased", time.Minute, []byte("fp"))
		if err != nil || l.State != replay.LeaseAcquired {
			t.Fatal(l.Lease, err)
		}
		if first, err := s.Claim(ctx, "claimed", time.Now().Add(time.Hour)); !first || err != nil {
			t.Fatal(first, err)
		}
		if _, err := s.AcquireRecord(ctx, "more", time.Minute, nil); !errors.Is(err, replay.ErrFull) {
			t.Fatalf("AcquireRecord on a full store: %v, want ErrFull", err)
		}
		for id, want := range map[string]replay.LeaseState{"leased": replay.LeaseBusy, "claimed": replay.LeaseDone, "more": replay.LeaseFree} {
			if r, err := s.ReadRecord(ctx, id); err != nil || r.State != want {
				t.Fatalf("ReadRecord(%q) on a full store = %v, %v; want %v", id, r.State, err, want)
			}
		}
	})

	t.Run("answers when full of record bytes", func(t *testing.T) {
		s, _ := fillBudget(t)
		fp, result := largest()
		r, err := s.ReadRecord(ctx, "full")
		if err != nil || r.State != replay.LeaseDone || !bytes.Equal(r.Fingerprint, fp) || !bytes.Equal(r.Result, result) {
			t.Fatalf("ReadRecord of the record that fills the budget = %v, %v; want done with its record", r.State, err)
		}
	})

	t.Run("lapse at the same instant as AcquireRecord", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Now: clk.Now}
		if l, err := s.AcquireRecord(ctx, "a", time.Second, []byte("fp")); err != nil || l.State != replay.LeaseAcquired {
			t.Fatal(l.Lease, err)
		}
		clk.Advance(time.Second - time.Nanosecond)
		if r, err := s.ReadRecord(ctx, "a"); err != nil || r.State != replay.LeaseBusy || r.Wait != time.Nanosecond {
			t.Fatalf("ReadRecord 1ns before the lease ends = %v (Wait %v), %v; want busy, 1ns", r.State, r.Wait, err)
		}
		if r, err := s.AcquireRecord(ctx, "a", time.Minute, nil); err != nil || r.State != replay.LeaseBusy {
			t.Fatalf("AcquireRecord 1ns before the lease ends = %v, %v; want busy", r.State, err)
		}
		clk.Advance(time.Nanosecond)
		if r, err := s.ReadRecord(ctx, "a"); err != nil || r.State != replay.LeaseFree || r.Fingerprint != nil {
			t.Fatalf("ReadRecord when the lease ends = %v %x, %v; want free, no fingerprint", r.State, r.Fingerprint, err)
		}
		if r, err := s.AcquireRecord(ctx, "a", time.Minute, nil); err != nil || r.State != replay.LeaseAcquired {
			t.Fatalf("AcquireRecord when the lease ends = %v, %v; want acquired", r.State, err)
		}
	})

	t.Run("expiry at the same instant as AcquireRecord", func(t *testing.T) {
		clk := clocktest.New()
		s := &replay.MemoryStore{Now: clk.Now}
		if first, err := s.Claim(ctx, "a", clk.Now().Add(time.Second)); !first || err != nil {
			t.Fatal(first, err)
		}
		clk.Advance(time.Second - time.Nanosecond)
		if r, err := s.ReadRecord(ctx, "a"); err != nil || r.State != replay.LeaseDone {
			t.Fatalf("ReadRecord 1ns before the claim expires = %v, %v; want done", r.State, err)
		}
		clk.Advance(time.Nanosecond)
		if r, err := s.ReadRecord(ctx, "a"); err != nil || r.State != replay.LeaseFree {
			t.Fatalf("ReadRecord when the claim expires = %v, %v; want free", r.State, err)
		}
	})

	t.Run("refuses a done context and an invalid configuration", func(t *testing.T) {
		done, cancel := context.WithCancel(ctx)
		cancel()
		if r, err := replay.NewMemoryStore(1).ReadRecord(done, "a"); !errors.Is(err, context.Canceled) || r.State != 0 {
			t.Fatalf("ReadRecord with a done context = %v, %v; want context.Canceled", r.State, err)
		}
		if r, err := replay.NewMemoryStore(-1).ReadRecord(ctx, "a"); !errors.Is(err, replay.ErrConfig) || r.State != 0 {
			t.Fatalf("ReadRecord with a negative Max = %v, %v; want ErrConfig", r.State, err)
		}
	})
}
