package mcptoken

// A keyed task's runs: a retry of a call under its idempotency key reads
// the task it created, and runs it again only when its run certainly kept
// nothing or AllowRerun allowed it.

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// again answers a retry of a keyed task's call that found its task's run
// (rec, busy or done): the run, under an ID without its lease token, for
// the same arguments; [ErrKeyReused] for others. Nothing is written. For a
// run that failed keeping nothing, or whose rerun [Tasks.AllowRerun]
// allowed, it returns rerun true and ref with the task's creation time
// instead, for the next run, when more may follow.
func (t *Tasks) again(ctx context.Context, ref taskRef, caller string, rec replay.Record, more bool) (st TaskState, next taskRef, rerun bool, err error) {
	fp := rec.Fingerprint
	if len(fp) != len(taskFP)+1+32+8 {
		// Taken for a moment by an instance that records the task failed.
		return TaskState{}, ref, false, fmt.Errorf("mcptoken: a keyed task's entry is %s without its fingerprint", rec.State)
	}
	if subtle.ConstantTimeCompare(fp[:len(taskFP)+1+32], ref.fp()[:len(taskFP)+1+32]) != 1 {
		return TaskState{}, ref, false, ErrKeyReused
	}
	ref.Created = int64(binary.BigEndian.Uint64(fp[len(fp)-8:]))
	if rec.State == replay.LeaseDone && more {
		o, err := t.openOutcome(ref, rec.Result)
		if err != nil {
			return TaskState{}, ref, false, err
		}
		if o.Status == taskFailed {
			if o.Effect == effectNone {
				return TaskState{}, ref, true, nil
			}
			if _, ok, err := t.peek(ctx, ref, ref.rerunMark()); err != nil || ok {
				return TaskState{}, ref, ok, err
			}
		}
	}
	id, err := ctoken.IssueState(t.ids, taskScope(caller), 0, ref)
	if err != nil {
		return TaskState{}, ref, false, err
	}
	st, _, err = t.state(ctx, ref)
	st.ID = id
	return st, ref, false, err
}

// lastRun returns the latest run (from 0) of the keyed task whose first
// run's nonce is first that the store holds, leased or done, or 0, in
// reads only. A key's runs fill entries 0, 1, … in order, each taken
// after the one before it ended, so an exponential search, then a binary
// one, finds the latest; a latest run whose lease lapsed unrecorded reads
// free, and the run before it is found, whose successor the caller takes.
func (t *Tasks) lastRun(ctx context.Context, first []byte) (int, error) {
	held := func(n int) (bool, error) {
		rec, err := t.read.ReadRecord(ctx, taskRef{Nonce: taskRun(first, n)}.entry())
		return err == nil && rec.State != replay.LeaseFree, err
	}
	lo, hi := 0, 1 // run lo is held, or lo is 0; run hi is not, or is the cap
	for hi < t.maxRuns {
		ok, err := held(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, min(2*hi, t.maxRuns)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := held(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// begin makes the creation of a task whose entry was just acquired with
// token durable before its ID is returned: a mark that its run began,
// recorded (and so synced: a store may keep a lease unsynced, as
// sqlitestore does) in an entry of its own. A keyed task's run found free
// with its mark already recorded began before, and its instance stopped
// with the lease lapsing before any read recorded it: begin records it
// failed, effect unknown, and reports false, so that the retry reads that
// instead of running the task again.
func (t *Tasks) begin(ctx context.Context, ref taskRef, token string) (fresh bool, err error) {
	prior, err := t.putOnce(ctx, ref, ref.beganMark(), ref.fp())
	if err != nil || prior == nil {
		return err == nil, err
	}
	fp := ref.fp()
	if len(ref.Args) == 0 || len(prior) != len(fp) {
		return false, fmt.Errorf("mcptoken: a task's began mark %w", errRecordForged)
	}
	if subtle.ConstantTimeCompare(prior[:len(fp)-8], fp[:len(fp)-8]) != 1 {
		return false, ErrKeyReused
	}
	ref.Created = int64(binary.BigEndian.Uint64(prior[len(prior)-8:]))
	t.fail(slog.LevelWarn, "a keyed task's instance stopped before its end; the task is recorded failed", ref.Tool, nil)
	o := outcome{Status: taskFailed, Error: &rpcError{Code: codeInternal, Message: msgStoppedUnknown}, Updated: time.Now().UnixMilli(), Effect: effectUnknown}
	if err := t.finish(ref, token, o); err != nil && !errors.Is(err, replay.ErrLeaseLost) {
		return false, err
	}
	return false, nil
}

// openOutcome opens a task entry's sealed outcome.
func (t *Tasks) openOutcome(ref taskRef, sealed []byte) (outcome, error) {
	b, err := t.seal.open(ref.entry(), taskFP, sealed)
	var o outcome
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	if err != nil {
		return outcome{}, fmt.Errorf("mcptoken: task record %w", errRecordForged)
	}
	return o, nil
}

// errNoRerun reports an AllowRerun for a key whose latest run did not
// fail, is still running, or was the last.
var errNoRerun = errors.New("mcptoken: AllowRerun: the key's latest run did not fail, still runs, or was the last")

// AllowRerun lets the next call of caller's tool under the idempotency key
// run its task again after its latest run failed (its instance stopped
// while it ran, so that whether it took effect is unknown, or its tool
// failed): call it once the application has checked, where the tool
// acts, that the run did not take effect. A run whose failure kept
// nothing (a Transactional task's, or one whose tool returned
// ErrNoEffect) is run again without it. One key has at most 65 536 runs.
// AllowRerun fails for a key whose latest run did not fail, still runs or
// was the last, and with [ErrTaskInvalid] for a key without a task.
func (t *Tasks) AllowRerun(ctx context.Context, caller, tool, key string) error {
	first := keyedTask(caller, tool, key)
	last, err := t.lastRun(ctx, first)
	if err != nil {
		return err
	}
	for run := last; run < t.maxRuns; run++ {
		ref := taskRef{Nonce: taskRun(first, run), Tool: tool}
		rec, err := t.store.AcquireRecord(ctx, ref.entry(), t.hold, nil)
		if err != nil {
			return err
		}
		switch {
		case rec.State == replay.LeaseAcquired:
			if err := t.store.ReleaseLease(context.WithoutCancel(ctx), ref.entry(), rec.Token); err != nil || run > 0 {
				return err // run > 0: the next call makes this run already
			}
			return ErrTaskInvalid
		case rec.State != replay.LeaseDone, len(rec.Fingerprint) != len(taskFP)+1+32+8:
			return errNoRerun // running
		}
		ref.Created = int64(binary.BigEndian.Uint64(rec.Fingerprint[len(rec.Fingerprint)-8:]))
		o, err := t.openOutcome(ref, rec.Result)
		if err != nil {
			return err
		}
		if o.Status != taskFailed {
			return errNoRerun
		}
		if o.Effect == effectNone {
			continue // followed by the next run already
		}
		_, marked, err := t.peek(ctx, ref, ref.rerunMark())
		switch {
		case err != nil:
			return err
		case marked:
			continue
		case run+1 == t.maxRuns:
			return errNoRerun
		}
		return t.put(ctx, ref, ref.rerunMark(), []byte("true"))
	}
	return errNoRerun
}
