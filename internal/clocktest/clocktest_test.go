package clocktest

import (
	"sync"
	"testing"
	"time"
)

func TestClockAdvancesBothWays(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := At(start)
	c.Advance(time.Hour)
	c.Advance(-time.Minute)
	if got := c.Now(); !got.Equal(start.Add(59 * time.Minute)) {
		t.Fatalf("Now = %v", got)
	}
	if !New().Now().Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatal("New is not at its documented time")
	}
}

func TestClockIsSafeForConcurrentUse(t *testing.T) {
	c := New()
	start := c.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if got := c.Now().Sub(start); got != 800*time.Second {
		t.Fatalf("advanced %v, want 800s", got)
	}
}
