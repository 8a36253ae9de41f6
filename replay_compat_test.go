package ctoken

import (
	"context"
	"errors"
	"sync"
	"time"
)

// stepClock is a settable clock for tests, safe for concurrent use.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func newStepClock() *stepClock {
	return &stepClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// failingStore is a ReplayStore that is down.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("store unreachable")
}
