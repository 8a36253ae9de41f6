package ctoken

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// testClock is a settable clock for injecting into configs.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Unix(1_700_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
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
