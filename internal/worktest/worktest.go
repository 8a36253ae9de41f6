// Package worktest runs the middleware kits' transactional scenarios:
// each against a fresh store and its effects, skipping those that need a
// writer beside an open Work on a store whose Work holds its only writer.
// It is generic over the store and effects types (replaytest.WorkStore,
// replaytest.Effects) because internal/ imports the standard library only.
package worktest

import "testing"

// Case is one scenario of a transactional contract.
type Case[S, E any] struct {
	Name string
	Run  func(t *testing.T, s S, e E)
	// ConcurrentWriter marks a scenario that needs a writer beside an
	// open Work: it is skipped on a store whose Work holds the writer
	// (replay.OneWriter).
	ConcurrentWriter bool
}

// oneWriter is replay.OneWriter's method.
type oneWriter interface{ WorkHoldsWriter() bool }

// Run runs each case as a parallel subtest against a fresh store and its
// effects from newWork.
func Run[S, E any](t *testing.T, newWork func(t *testing.T) (S, E), cases []Case[S, E]) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			s, e := newWork(t)
			if w, ok := any(s).(oneWriter); tc.ConcurrentWriter && ok && w.WorkHoldsWriter() {
				t.Skip("a Work holds the store's only writer")
			}
			tc.Run(t, s, e)
		})
	}
}
