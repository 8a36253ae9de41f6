package mcptoken

// The tasks this instance runs: a cancel reaches a local task's tool at
// once, and Shutdown drains them.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// runner is a task this instance runs. stop cancels its tool's context
// with a cause (errTaskCancelled, errTaskDrained, errLeaseGone); done is
// closed once it has ended. Its outcome is recorded by whoever claims it
// first: the runner when its tool returns, or Shutdown when it hands the
// task over.
type runner struct {
	ref           taskRef
	transactional bool
	stop          context.CancelCauseFunc
	done          chan struct{}

	mu      sync.Mutex
	claimed bool
}

// claim reports whether the caller is the first to claim the task's
// outcome, and so the one to record it.
func (r *runner) claim() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.claimed
	r.claimed = true
	return first
}

// msgTaskDrained is the error message of a task Shutdown handed over.
const msgTaskDrained = "the server shut down before the task finished"

var (
	// errTaskCancelled is the cause of a task's cancel (tasks/cancel).
	errTaskCancelled = errors.New("mcptoken: the task was cancelled")
	// errTaskDrained is the cause of a task cancelled by Shutdown.
	errTaskDrained = errors.New("mcptoken: " + msgTaskDrained)
	// errLeaseGone is the cause of a task whose lease was lost.
	errLeaseGone = errors.New("mcptoken: the task's lease was lost")
	// errTasksClosed reports a task not created after Shutdown.
	errTasksClosed = errors.New("mcptoken: Tasks is shut down")
)

// register starts r unless t is shut down, under parent's values; it
// returns the context r's tool runs in.
func (t *Tasks) register(parent context.Context, ref taskRef, transactional bool) (*runner, context.Context, error) {
	ctx, stop := context.WithCancelCause(context.WithoutCancel(parent))
	r := &runner{ref: ref, transactional: transactional, stop: stop, done: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		stop(nil)
		return nil, nil, errTasksClosed
	}
	t.running[ref.entry()] = r
	return r, ctx, nil
}

// unregister ends r.
func (t *Tasks) unregister(r *runner) {
	t.mu.Lock()
	delete(t.running, r.ref.entry())
	t.mu.Unlock()
	r.stop(nil)
	close(r.done)
}

// local returns the runner of the task ref names, if this instance runs it.
func (t *Tasks) local(ref taskRef) *runner {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.running[ref.entry()]
}

// Shutdown drains t: it stops taking tasks (a task tool's call is then
// refused with HTTP 503, nothing created, for the client to call again,
// on another instance), waits until every task this instance runs has
// ended or ctx ends, then cancels the tools of the rest and records those
// tasks failed at once ("the server shut down before the task finished"),
// so that no client waits a Hold to learn it; a Transactional task is
// rolled back and recorded failed when its tool returns, whatever it
// returns. It returns nil
// when every task ended in time, and ctx's error when it handed tasks
// over. Call it once the HTTP server has stopped taking requests; tasks/get
// goes on answering from the store on every other instance.
func (t *Tasks) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	runners := make([]*runner, 0, len(t.running))
	for _, r := range t.running {
		runners = append(runners, r)
	}
	t.mu.Unlock()
	var left []*runner
	for _, r := range runners {
		select {
		case <-r.done:
			continue
		default:
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			left = append(left, r)
		}
	}
	if len(left) == 0 {
		return nil
	}
	for _, r := range left {
		r.stop(errTaskDrained)
		if r.transactional || !r.claim() {
			continue
		}
		o := outcome{Status: taskFailed, Error: &rpcError{Code: codeInternal, Message: msgTaskDrained}, Updated: time.Now().UnixMilli(), Effect: effectUnknown}
		if err := t.finish(r.ref, r.ref.Token, o); err != nil {
			t.fail(slog.LevelError, "a task could not be handed over at shutdown; another instance reports it failed once its lease lapses", r.ref.Tool, err)
		}
	}
	t.fail(slog.LevelWarn, "Tasks shut down with tasks still running: they are recorded failed", "", nil)
	return ctx.Err()
}
