// Package observetest records what ctoken reports to an [observe.Observer],
// for tests: ctoken's own, and those of a server checking its wiring (that
// a refused cursor or webhook delivery is reported with the reason it
// expects). Most tests need one [Recorder] given as the Observer of a
// config, as ExampleRecorder shows.
package observetest

import (
	"sync"
	"testing"

	"github.com/ctoken/ctoken/observe"
)

// Recorder is an Observer that keeps the events it is told, safe for
// concurrent use. The zero value is ready to use.
type Recorder struct {
	mu     sync.Mutex
	events []observe.Event
}

// Observe records e.
func (r *Recorder) Observe(e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Take returns the events recorded since the last Take.
func (r *Recorder) Take() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.events
	r.events = nil
	return got
}

// Only returns the one event recorded since the last Take, and fails t
// (naming what) if there was not exactly one.
func (r *Recorder) Only(t testing.TB, what string) observe.Event {
	t.Helper()
	got := r.Take()
	if len(got) != 1 {
		t.Fatalf("%s: %d events %+v, want 1", what, len(got), got)
	}
	return got[0]
}
