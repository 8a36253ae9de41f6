package ctoken

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"runtime"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/internal/reason"
)

// testClock and stepClock are the shared settable test clock
// (internal/clocktest), started at two different instants that existing
// tests depend on.
type (
	testClock = clocktest.Clock
	stepClock = clocktest.Clock
)

func newTestClock() *testClock { return clocktest.At(time.Unix(1_700_000_000, 0)) }

func newStepClock() *stepClock { return clocktest.New() }

// failingStore is a [replay.Store] that is down.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("store unreachable")
}

// fixedKey returns a deterministic 32-byte key whose bytes all equal b.
func fixedKey(b byte) []byte {
	k := make([]byte, MinKeyBytes)
	for i := range k {
		k[i] = b
	}
	return k
}

func mustKeyring(t testing.TB, primary []byte, previous ...[]byte) *Keyring {
	t.Helper()
	kr, err := NewKeyring(primary, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// wantErr fails unless err matches want with errors.Is.
func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

// exactlyOnce runs attempt from workers goroutines released together and
// fails unless exactly one returns nil and every other returns refused.
func exactlyOnce(t testing.TB, workers int, attempt func() error, refused error) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = attempt()
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, refused):
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d attempts succeeded, want exactly 1", ok, workers)
	}
}

// bytesPerRun returns the heap bytes allocated per call of f: the average
// over runs calls, taking the smallest of three trials so that stray
// allocations by the runtime or the testing package do not count. Tests
// using it must not run in parallel with others.
func bytesPerRun(runs int, f func()) uint64 {
	f() // warm up pools and lazily initialized state
	best := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		best = min(best, (after.TotalAlloc-before.TotalAlloc)/uint64(runs))
	}
	return best
}

// reasonText is the reason text err carries ("" if none): the String of
// its [Reason] for a refusal, and the field a constructor refused for a
// configuration or key error, which [Reason] does not classify.
func reasonText(err error) string { return reason.Of(err) }
