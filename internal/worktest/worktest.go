// Package worktest runs the middleware kits' transactional scenarios:
// each against a fresh store and its effects, skipping those that need a
// writer beside an open Work on a store whose Work holds its only writer.
package worktest

import (
	"testing"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// Case is one scenario of a transactional contract.
type Case struct {
	Name string
	Run  func(t *testing.T, s replaytest.WorkStore, e replaytest.Effects)
	// ConcurrentWriter marks a scenario that needs a writer beside an
	// open Work: it is skipped on a [replay.OneWriter] whose Work holds
	// the writer.
	ConcurrentWriter bool
}

// Run runs each case as a parallel subtest against a fresh store and its
// effects from newWork.
func Run(t *testing.T, newWork func(t *testing.T) (replaytest.WorkStore, replaytest.Effects), cases []Case) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			s, e := newWork(t)
			if w, ok := s.(replay.OneWriter); tc.ConcurrentWriter && ok && w.WorkHoldsWriter() {
				t.Skip("a Work holds the store's only writer")
			}
			tc.Run(t, s, e)
		})
	}
}
