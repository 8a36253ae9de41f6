package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// refusedErr is the error the test integration sends for a refusal.
type refusedErr struct{ r Refusal }

func (e *refusedErr) Error() string { return e.r.Message }

var errTestNoCaller = errors.New("test: no caller")

// testIntegration reports through a buffer the test reads.
func testIntegration(log *bytes.Buffer) *Integration {
	return &Integration{
		Name:     "test",
		Log:      slog.New(slog.NewTextHandler(log, nil)),
		NoCaller: func() error { return errTestNoCaller },
		Refused:  func(r Refusal) error { return &refusedErr{r} },
	}
}

func testCursors(t testing.TB, log *bytes.Buffer, c *clock) *Cursors {
	t.Helper()
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: []byte("s1"), TTL: time.Minute, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := NewCursors(issuer, testIntegration(log))
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// ctxSteps records, for each store step a test store sees, whether its
// context is one only a deadline ends (replay.EndsOnlyAtDeadline), whether
// it was already done, and its deadline.
type ctxSteps struct {
	mu    sync.Mutex
	steps []ctxStep
}

type ctxStep struct {
	method       string
	deadlineOnly bool
	err          error
	deadline     time.Time
}

func (s *ctxSteps) record(method string, ctx context.Context) {
	d, _ := ctx.Deadline()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, ctxStep{method, replay.EndsOnlyAtDeadline(ctx), ctx.Err(), d})
}

func (s *ctxSteps) list() []ctxStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ctxStep(nil), s.steps...)
}

// checkDeadlineOnly fails t unless step ran under a live context that only
// its deadline ends, a deadline within after of the window [from, to].
func checkDeadlineOnly(t *testing.T, step ctxStep, from, to time.Time, after time.Duration) {
	t.Helper()
	if !step.deadlineOnly || step.err != nil {
		t.Fatalf("%s ran under deadline-only %v, done %v; want a live context only its deadline ends", step.method, step.deadlineOnly, step.err)
	}
	if lo, hi := from.Add(after), to.Add(after); step.deadline.Before(lo) || step.deadline.After(hi) {
		t.Fatalf("%s deadline %v, want within [%v, %v]", step.method, step.deadline, lo, hi)
	}
}
