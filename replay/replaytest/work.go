package replaytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// WorkStore is a store whose leases guard work in its own database: what
// [RunWorkContract] checks.
type WorkStore interface {
	replay.Transactor
	replay.Recorder
}

// Effects writes and counts the work a lease guards, in the store's own
// database, for [RunWorkContract]: the store's test supplies it, with the
// store's accessor of the transaction a [replay.Work] carries
// (pgstore.TxFrom, sqlitestore.TxFrom).
type Effects interface {
	// Write makes one effect of id in the transaction ctx carries (from
	// [replay.Work.Context]); it returns the store's error when ctx
	// carries none, or one that refuses.
	Write(ctx context.Context, id string) error
	// Count returns how many effects of id are committed, read outside
	// any Work.
	Count(t *testing.T, id string) int
}

// RunWorkContract runs the contract of [replay.Transactor] (and of
// [replay.WorkAcquirer] when the store is one) against a fresh store and
// its effects from newStore per test: a committed Work keeps its effect
// and its record, nothing of it is visible before; a rolled back one
// keeps nothing and leaves the lease; a Work whose lease another holder
// took keeps nothing; a Work refuses writes once ended, and answers a
// second Commit or Rollback with the first outcome; of 16 concurrent
// holders of one ID, one effect is committed. pgstore and sqlitestore run
// it.
func RunWorkContract(t *testing.T, newStore func(t *testing.T) (WorkStore, Effects)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s WorkStore, e Effects)
	}{
		{"CommitKeepsTheEffectAndTheRecord", commitKeepsTheEffectAndTheRecord},
		{"RollbackKeepsNothingAndTheLeaseStays", rollbackKeepsNothing},
		{"TakenOverLeaseKeepsNothing", takenOverLeaseKeepsNothing},
		{"EndedWorkRefusesWrites", endedWorkRefusesWrites},
		{"ConcurrentHoldersOneEffect", concurrentHoldersOneEffect},
		{"AcquireWorkCommitsOnce", acquireWorkCommitsOnce},
		{"AcquireWorkRollbackFreesTheID", acquireWorkRollbackFreesTheID},
		{"AcquireWorkConcurrentHoldersOneEffect", acquireWorkConcurrentOneEffect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, e := newStore(t)
			tc.fn(t, s, e)
		})
	}
}

// beginWork opens a Work for the holder of token's lease on id and writes
// its effect.
func beginWork(t *testing.T, s WorkStore, e Effects, id, token string) replay.Work {
	t.Helper()
	w, err := s.BeginWork(ctx(), id, token)
	if err != nil {
		t.Fatalf("BeginWork(%q) = %v", id, err)
	}
	if err := e.Write(w.Context(ctx()), id); err != nil {
		w.Rollback(ctx())
		t.Fatalf("the effect of %q in its Work: %v", id, err)
	}
	return w
}

func wantEffects(t *testing.T, e Effects, id string, want int) {
	t.Helper()
	if n := e.Count(t, id); n != want {
		t.Fatalf("%d effects of %q committed; want %d", n, id, want)
	}
}

func commitKeepsTheEffectAndTheRecord(t *testing.T, s WorkStore, e Effects) {
	fp, result := []byte("fingerprint"), []byte("the response")
	r, err := s.AcquireRecord(ctx(), "job", time.Minute, fp)
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord = %+v, %v", r, err)
	}
	w := beginWork(t, s, e, "job", r.Token)
	wantEffects(t, e, "job", 0) // not before the commit
	if err := w.Commit(ctx(), time.Now().Add(time.Hour), fp, result); err != nil {
		t.Fatalf("Commit = %v", err)
	}
	wantEffects(t, e, "job", 1)
	got, err := s.AcquireRecord(ctx(), "job", time.Minute, fp)
	if err != nil || got.State != replay.LeaseDone || !bytes.Equal(got.Fingerprint, fp) || !bytes.Equal(got.Result, result) { //ctcheck:ok test fingerprints are made up by the contract, no secret
		t.Fatalf("AcquireRecord after Commit = %+v, %v; want done with the record", got, err)
	}
	if first, err := s.Claim(ctx(), "job", time.Now().Add(time.Hour)); first || err != nil {
		t.Fatalf("Claim after Commit = %v, %v; want not first", first, err)
	}
	if err := w.Commit(ctx(), time.Now().Add(time.Hour), fp, result); err != nil {
		t.Fatalf("a second Commit = %v; want the first outcome (nil)", err)
	}
	if err := w.Rollback(ctx()); err != nil {
		t.Fatalf("Rollback after Commit = %v; want nil", err)
	}
	wantEffects(t, e, "job", 1)
}

func rollbackKeepsNothing(t *testing.T, s WorkStore, e Effects) {
	l := acquire(t, s, "job", time.Minute, replay.LeaseAcquired)
	w := beginWork(t, s, e, "job", l.Token)
	if err := w.Rollback(ctx()); err != nil {
		t.Fatalf("Rollback = %v", err)
	}
	wantEffects(t, e, "job", 0)
	acquire(t, s, "job", time.Minute, replay.LeaseBusy) // the lease stays
	if err := s.ReleaseLease(ctx(), "job", l.Token); err != nil {
		t.Fatal(err)
	}
	// A retry runs the work.
	l = acquire(t, s, "job", time.Minute, replay.LeaseAcquired)
	w = beginWork(t, s, e, "job", l.Token)
	if err := w.Commit(ctx(), time.Now().Add(time.Hour), nil, nil); err != nil {
		t.Fatalf("the retry's Commit = %v", err)
	}
	wantEffects(t, e, "job", 1)
}

func takenOverLeaseKeepsNothing(t *testing.T, s WorkStore, e Effects) {
	l := acquire(t, s, "job", Lease, replay.LeaseAcquired)
	start := time.Now()
	waitOut(start, Lease)
	other := acquire(t, s, "job", time.Minute, replay.LeaseAcquired)
	// The first holder finds its lease lost at BeginWork or at Commit.
	if w, err := s.BeginWork(ctx(), "job", l.Token); err == nil {
		werr := e.Write(w.Context(ctx()), "job")
		if err := w.Commit(ctx(), time.Now().Add(time.Hour), nil, nil); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("Commit of the taken-over holder (its write: %v) = %v; want ErrLeaseLost", werr, err)
		}
	} else if !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("BeginWork of the taken-over holder = %v; want ErrLeaseLost", err)
	}
	wantEffects(t, e, "job", 0)
	w := beginWork(t, s, e, "job", other.Token)
	if err := w.Commit(ctx(), time.Now().Add(time.Hour), nil, nil); err != nil {
		t.Fatalf("the new holder's Commit = %v", err)
	}
	wantEffects(t, e, "job", 1)
}

func endedWorkRefusesWrites(t *testing.T, s WorkStore, e Effects) {
	for _, end := range []string{"Commit", "Rollback"} {
		id := "ended-" + end
		l := acquire(t, s, id, time.Minute, replay.LeaseAcquired)
		w := beginWork(t, s, e, id, l.Token)
		wctx := w.Context(ctx())
		var err error
		if end == "Commit" {
			err = w.Commit(ctx(), time.Now().Add(time.Hour), nil, nil)
		} else {
			err = w.Rollback(ctx())
		}
		if err != nil {
			t.Fatalf("%s = %v", end, err)
		}
		if err := e.Write(wctx, id+"-late"); err == nil {
			t.Fatalf("a write through the Work's context after its %s succeeded", end)
		}
		wantEffects(t, e, id+"-late", 0)
	}
	if err := e.Write(ctx(), "no-work"); err == nil {
		t.Fatal("a write through a context that carries no Work succeeded")
	}
}

// holders runs n goroutines at once, each calling work with its index.
func holders(n int, work func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			work(i)
		}()
	}
	close(start)
	wg.Wait()
}

func concurrentHoldersOneEffect(t *testing.T, s WorkStore, e Effects) {
	holders(16, func(int) {
		l, err := s.AcquireLease(ctx(), "race", time.Minute)
		if err != nil || l.State != replay.LeaseAcquired {
			return // busy or done: another holder's
		}
		w, err := s.BeginWork(ctx(), "race", l.Token)
		if err != nil {
			t.Errorf("BeginWork = %v", err)
			return
		}
		if err := e.Write(w.Context(ctx()), "race"); err != nil {
			t.Errorf("the effect: %v", err)
			w.Rollback(ctx())
			return
		}
		if err := w.Commit(ctx(), time.Now().Add(time.Hour), nil, nil); err != nil {
			t.Errorf("Commit = %v", err)
		}
	})
	wantEffects(t, e, "race", 1)
}

func workAcquirer(t *testing.T, s WorkStore) replay.WorkAcquirer {
	a, ok := s.(replay.WorkAcquirer)
	if !ok {
		t.Skip("the store is not a replay.WorkAcquirer")
	}
	return a
}

func acquireWorkCommitsOnce(t *testing.T, s WorkStore, e Effects) {
	a := workAcquirer(t, s)
	fp, result := []byte("fingerprint"), []byte("the response")
	r, w, err := a.AcquireWork(ctx(), "job", time.Minute, fp)
	if err != nil || r.State != replay.LeaseAcquired || w == nil {
		t.Fatalf("AcquireWork = %+v, %v, %v; want acquired with a Work", r, w, err)
	}
	if err := e.Write(w.Context(ctx()), "job"); err != nil {
		w.Rollback(ctx())
		t.Fatal(err)
	}
	if err := w.Commit(ctx(), time.Now().Add(time.Hour), fp, result); err != nil {
		t.Fatalf("Commit = %v", err)
	}
	wantEffects(t, e, "job", 1)
	got, w2, err := a.AcquireWork(ctx(), "job", time.Minute, fp)
	if err != nil || w2 != nil || got.State != replay.LeaseDone || !bytes.Equal(got.Result, result) {
		t.Fatalf("AcquireWork after the commit = %+v, %v, %v; want done with the result, no Work", got, w2, err)
	}
}

func acquireWorkRollbackFreesTheID(t *testing.T, s WorkStore, e Effects) {
	a := workAcquirer(t, s)
	_, w, err := a.AcquireWork(ctx(), "job", time.Minute, []byte("fp"))
	if err != nil || w == nil {
		t.Fatalf("AcquireWork = %v, %v", w, err)
	}
	if err := e.Write(w.Context(ctx()), "job"); err != nil {
		w.Rollback(ctx())
		t.Fatal(err)
	}
	if err := w.Rollback(ctx()); err != nil {
		t.Fatalf("Rollback = %v", err)
	}
	wantEffects(t, e, "job", 0)
	acquire(t, s, "job", time.Minute, replay.LeaseAcquired) // free again
}

func acquireWorkConcurrentOneEffect(t *testing.T, s WorkStore, e Effects) {
	a := workAcquirer(t, s)
	fp := []byte("fp")
	holders(16, func(i int) {
		r, w, err := a.AcquireWork(ctx(), "race", time.Minute, fp)
		switch {
		case err != nil:
			// A store may answer a contended ID with an error (nothing
			// taken): never with two Works.
			return
		case w == nil:
			if r.State == replay.LeaseAcquired {
				t.Errorf("AcquireWork %d: acquired without a Work", i)
			}
			return
		}
		if err := e.Write(w.Context(ctx()), "race"); err != nil {
			t.Errorf("the effect: %v", err)
			w.Rollback(ctx())
			return
		}
		if err := w.Commit(ctx(), time.Now().Add(time.Hour), fp, []byte(fmt.Sprint("holder ", i))); err != nil {
			t.Errorf("Commit = %v", err)
		}
	})
	wantEffects(t, e, "race", 1)
}
