package mcptoken

// Transactional tasks: a task's tool runs in a transaction of the store
// and its writes commit with its outcome (TaskTool.Transactional).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// workStore returns the Store as the replay.WorkAcquirer a Transactional
// task of tool runs in, or an error matching ctoken.ErrConfig.
func (t *Tasks) workStore(tool string) (replay.WorkAcquirer, error) {
	acq, ok := t.store.(replay.WorkAcquirer)
	if !ok {
		return nil, fmt.Errorf("%w: TaskTool %q is Transactional but TasksConfig.Store is not a replay.Transactor that takes leases in its transaction (replay.WorkAcquirer: pgstore)", ctoken.ErrConfig, tool)
	}
	if w, ok := t.store.(replay.OneWriter); ok && w.WorkHoldsWriter() {
		return nil, fmt.Errorf("%w: TaskTool %q is Transactional, but a transaction of TasksConfig.Store (sqlitestore) holds the database's only writer for the task's whole run, which would stall every other task, creation and poll: use pgstore for Transactional tasks, or let the tool commit its writes in a short transaction of its own", ctoken.ErrConfig, tool)
	}
	return acq, nil
}

// acquireWork takes a Transactional task's entry in a transaction of the
// store, held until the task's TTL ends: the task is created when the
// transaction commits with its outcome, and an instance that dies leaves
// the entry free, which tasks/get records failed. It returns a Work only
// for an acquired entry.
func (t *Tasks) acquireWork(ctx context.Context, ref taskRef) (replay.Record, replay.Work, error) {
	acq, err := t.workStore(ref.Tool)
	if err != nil {
		return replay.Record{}, nil, err
	}
	rec, work, err := acq.AcquireWork(ctx, ref.entry(), t.ttl, ref.fp())
	if work != nil && (err != nil || rec.State != replay.LeaseAcquired) {
		_ = work.Rollback(context.WithoutCancel(ctx)) // outside the contract: hold nothing
		work = nil
	}
	if err == nil && rec.State == replay.LeaseAcquired && work == nil {
		err = errors.New("mcptoken: AcquireWork returned no Work")
	}
	return rec, work, err
}

// errTaskInputTx is the error of TaskCall.Input in a Transactional task.
var errTaskInputTx = errors.New("mcptoken: TaskCall.Input in a Transactional task: a transaction must not stay open while the client answers")

// runWork runs a Transactional task in work, whose transaction holds its
// entry, under parent (stopped by r's stop): its outcome commits with the
// tool's writes; a failure, a cancel or a commit that kept nothing rolls
// them back and records the task failed with nothing kept (or cancelled).
func (t *Tasks) runWork(parent context.Context, r *runner, tool TaskTool, call *TaskCall, work replay.Work) {
	defer t.unregister(r)
	ref := r.ref
	ctx, cancel := context.WithDeadline(parent, ref.created().Add(t.ttl))
	defer cancel()
	call.input = func(context.Context, map[string]json.RawMessage) (map[string]json.RawMessage, error) {
		return nil, errTaskInputTx
	}
	res, err := runTool(work.Context(ctx), tool, call)
	bg := context.WithoutCancel(parent)
	o := t.outcomeOf(ref, res, err, context.Cause(ctx))
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTaskCancelled):
		// Cancelled before its commit: rolled back, whatever Run returned.
		o = outcome{Status: taskCancelled, Updated: o.Updated}
	case errors.Is(cause, errTaskDrained):
		// Handed over by Shutdown: rolled back, whatever Run returned.
		o = outcome{Status: taskFailed, Error: &rpcError{Code: codeInternal, Message: msgTaskDrained}, Updated: o.Updated}
	}
	if o.Status == taskCompleted {
		sealed, err := t.sealOutcome(ref, o)
		if err == nil {
			cctx, done := context.WithTimeout(bg, t.hold)
			err = work.Commit(cctx, ref.created().Add(t.ttl), ref.fp(), sealed)
			done()
			if err == nil {
				return
			}
			if !errors.Is(err, replay.ErrLeaseLost) && !errors.Is(err, replay.ErrRolledBack) {
				// The commit may have happened: tasks/get finds the
				// outcome, or the entry free and records it failed.
				t.fail(slog.LevelError, "a Transactional task's commit failed with an unknown outcome", ref.Tool, err)
				return
			}
		}
		t.fail(slog.LevelError, "a Transactional task's outcome was not committed; its writes were rolled back and the task failed", ref.Tool, err)
		o = outcome{Status: taskFailed, Error: &rpcError{Code: codeInternal, Message: "internal error: the task's transaction was rolled back"}, Updated: time.Now().UnixMilli()}
	}
	if o.Status == taskFailed {
		o.Effect = effectNone // rolled back: a keyed task runs again (Create)
	}
	// Left for a poll that finds the entry free before it is recorded
	// below (endedMark).
	if b, err := json.Marshal(o); err == nil {
		lctx, done := context.WithTimeout(bg, t.hold)
		err = t.put(lctx, ref, ref.endedMark(), b)
		done()
		if err != nil {
			t.fail(slog.LevelWarn, "a Transactional task's outcome could not be left for a poll; one meanwhile reads it stopped", ref.Tool, err)
		}
	}
	_ = work.Rollback(bg) // frees the entry (a no-op after a Commit)
	// Record the outcome in the freed entry, retrying a store that cannot
	// answer until the task's TTL ends.
	rctx, rcancel := context.WithDeadline(bg, ref.created().Add(t.ttl))
	defer rcancel()
	for {
		rec, err := t.store.AcquireRecord(bg, ref.entry(), t.hold, ref.fp())
		if err == nil && rec.State != replay.LeaseAcquired {
			return // recorded by another instance meanwhile
		}
		if err == nil {
			if err = t.finish(ref, rec.Token, o); err != nil && !errors.Is(err, replay.ErrLeaseLost) {
				_ = t.store.ReleaseLease(bg, ref.entry(), rec.Token)
			}
		}
		if err == nil || errors.Is(err, replay.ErrLeaseLost) || errors.Is(err, ErrTaskInvalid) {
			return
		}
		t.fail(slog.LevelWarn, "a task's outcome could not be recorded yet; retrying", ref.Tool, err)
		if sleepCtx(rctx, t.poll) != nil {
			return
		}
	}
}
