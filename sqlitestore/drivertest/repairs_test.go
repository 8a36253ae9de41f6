package drivertest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// repairs follows a Store's repair after an I/O error through its
// Observer: the repair starts with EventRefusing (its reason says the
// store rewrites the database) and ends with the next EventServing.
type repairs struct {
	mu             sync.Mutex
	started, ended int
	changed        chan struct{}
}

func newRepairs() *repairs { return &repairs{changed: make(chan struct{}, 1)} }

func (r *repairs) observe(e sqlitestore.Event) {
	r.mu.Lock()
	switch {
	case e.Kind == sqlitestore.EventRefusing && e.Reason != nil && strings.Contains(e.Reason.Error(), "rewritten the database"):
		r.started++
	case e.Kind == sqlitestore.EventServing && r.ended < r.started:
		r.ended++
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// count is how many repairs started.
func (r *repairs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// wait returns once every repair started has ended: the store serves
// again. The bound is a safety net for a repair that never ends.
func (r *repairs) wait(t testing.TB) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		r.mu.Lock()
		done := r.ended == r.started
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatal("the store's repair after an I/O error did not end within 2 minutes")
		}
	}
}
