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
