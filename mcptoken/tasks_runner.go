package mcptoken

// The tasks this instance runs: each runner renews its lease and records
// its tool's outcome, a cancel reaches a local task's tool at once, and
// Shutdown drains them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// runner is a task this instance runs. stop cancels its tool's context
// with a cause (errTaskCancelled, errTaskDrained, errLeaseGone); done is
// closed once it has ended. Its outcome is recorded by whoever claims it
// first: the runner when its tool returns, or Shutdown when it hands the
// task over. asked is set before its tool's first input round is
// recorded: until then the task has no round in the store, and a poll on
// this instance does not read one.
type runner struct {
	ref           taskRef
	transactional bool
	stop          context.CancelCauseFunc
	done          chan struct{}
	asked         atomic.Bool

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
	// errTaskDrained is the cause of a task cancelled by Shutdown, which
	// ctoken ended itself (an idempotent call inside records nothing).
	errTaskDrained = serverCause(errors.New(msgTaskDrained))
	// errLeaseGone is the cause of a task whose lease was lost, which
	// ctoken ended itself.
	errLeaseGone = serverCause(errors.New("the task's lease was lost"))
	// errTasksClosed reports a task not created after Shutdown.
	errTasksClosed = errors.New("mcptoken: Tasks is shut down")
)

// register starts r unless t is shut down, under parent's values; it
// returns the context r's tool runs in.
func (t *Tasks) register(parent context.Context, ref taskRef, transactional bool) (*runner, context.Context, error) {
	ctx, stop := context.WithCancelCause(detach(parent))
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

// run runs a task and records its outcome, renewing its lease meanwhile,
// in ctx (with the creating request's values, such as its auth; stopped
// by r's stop).
func (t *Tasks) run(ctx context.Context, r *runner, held time.Time, tool TaskTool, call *TaskCall) {
	defer t.unregister(r)
	ref := r.ref
	// The lease is kept until the outcome is recorded (or the TTL ends),
	// beyond the tool's end: a cancelled tool still records its outcome.
	kctx, kcancel := context.WithDeadline(context.WithoutCancel(ctx), ref.created().Add(t.ttl))
	defer kcancel()
	ctx, cancel := context.WithDeadline(ctx, ref.created().Add(t.ttl))
	defer cancel()
	var lost sync.Once
	lostCh := make(chan struct{})
	stop := keep(kctx, keptLease{renewer: t.renew, id: ref.entry(), token: ref.Token, hold: t.hold, held: held, end: ref.created().Add(t.ttl),
		lost: func(err error) {
			if !errors.Is(err, replay.ErrLeaseLost) { // else taken by another instance
				t.fail(slog.LevelError, "a task's lease could not be renewed before it could lapse; its tool is cancelled", ref.Tool, err)
			}
			lost.Do(func() { close(lostCh); r.stop(errLeaseGone) })
		},
		retrying: func(err error) {
			t.fail(slog.LevelWarn, "a task's lease could not be renewed; retrying", ref.Tool, err)
		},
	})
	defer stop()
	go t.watch(kctx, ref, r.stop)
	var asking sync.Mutex // one round at a time: the client sees the latest
	round, used := 0, map[string]bool{}
	call.input = func(ctx context.Context, req map[string]json.RawMessage) (map[string]json.RawMessage, error) {
		asking.Lock()
		defer asking.Unlock()
		for key := range req {
			if used[key] {
				return nil, fmt.Errorf("mcptoken: input request key %q used in an earlier round of the task", key)
			}
		}
		for key := range req {
			used[key] = true
		}
		k := round
		round++
		r.asked.Store(true)
		return t.input(ctx, ref, k, req)
	}
	res, err := runTool(ctx, tool, call)
	select {
	case <-lostCh:
		return // recorded elsewhere: cancelled, failed, or lapsed
	default:
	}
	o := t.outcomeOf(ref, res, err, context.Cause(ctx))
	if !r.claim() {
		return // handed over by Shutdown
	}
	// Record the outcome, retrying a store that cannot answer while the
	// lease is still kept; once it is lost (recorded by another instance,
	// or lapsed) nothing is recorded here.
	for {
		err := t.finish(ref, ref.Token, o)
		if err == nil || errors.Is(err, replay.ErrLeaseLost) || errors.Is(err, ErrTaskInvalid) {
			return
		}
		t.fail(slog.LevelWarn, "a task's outcome could not be recorded yet; retrying", ref.Tool, err)
		select {
		case <-lostCh:
			return
		case <-time.After(t.poll):
		}
	}
}

// outcomeOf is the outcome of a tool that returned res and err with its
// context's cause: completed with a JSON object (whatever the cause: the
// tool completed), cancelled after a cancel, failed (and logged) otherwise.
func (t *Tasks) outcomeOf(ref taskRef, res json.RawMessage, err error, cause error) outcome {
	o := outcome{Status: taskCompleted, Result: res, Updated: time.Now().UnixMilli()}
	if _, jerr := jsonObject(res); err == nil && jerr == nil {
		return o // a JSON object, each key once (completeResult reads it so)
	}
	if errors.Is(cause, errTaskCancelled) {
		return outcome{Status: taskCancelled, Updated: o.Updated}
	}
	msg := "internal error: the tool failed"
	switch {
	case errors.Is(cause, errTaskDrained):
		msg = msgTaskDrained
	case errors.Is(cause, context.DeadlineExceeded):
		msg = "the task's TTL ended before it finished"
	case err == nil:
		err = errors.New("mcptoken: the result is not a JSON object naming each key once")
	}
	t.fail(slog.LevelError, "a task's tool failed; the task failed", ref.Tool, err)
	o = outcome{Status: taskFailed, Error: &rpcError{Code: codeInternal, Message: msg}, Updated: o.Updated}
	if errors.Is(err, ErrNoEffect) {
		o.Error.Message, o.Effect = "the tool had no effect: safe to call again", effectNone
	}
	return o
}

// runTool runs the tool, turning a panic into an error.
func runTool(ctx context.Context, tool TaskTool, call *TaskCall) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, errors.New("mcptoken: the task's tool panicked")
		}
	}()
	return tool.Run(ctx, call)
}

// watch looks every PollInterval, until ctx ends, for a cancel of the
// task made on another instance, and stops its tool when it finds one.
func (t *Tasks) watch(ctx context.Context, ref taskRef, stop context.CancelCauseFunc) {
	look := time.NewTicker(t.poll)
	defer look.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-look.C:
		}
		// Bounded, so that a store that hangs is asked again.
		lctx, done := context.WithTimeout(ctx, t.poll+t.hold/6)
		c, _ := t.cancelled(lctx, ref)
		done()
		if c {
			stop(errTaskCancelled)
			return // told once
		}
	}
}
