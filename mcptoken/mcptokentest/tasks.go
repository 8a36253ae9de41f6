package mcptokentest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
)

// RunTasksContract runs the scenarios of durable tasks ([mcptoken.Tasks])
// across two server instances against a store: newStores returns two store
// values on one backend, each a replay.Recorder that is also a
// replay.Renewer, and the instances share a keyring, as a fleet does. A
// task created on one instance is read, answered and cancelled on the
// other; a task whose instance stopped is reported failed by the other
// within the lease, never working until its TTL; another caller's,
// tampered and expired task IDs are refused, consuming nothing; a retry of
// a call with its idempotency key gets the task the call created. Every
// store of this repository runs it.
func RunTasksContract(t *testing.T, newStores func(t *testing.T) (a, b replay.Recorder)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring)
	}{
		{"CreatedOnOneInstanceReadOnTheOther", tasksReadAcross},
		{"CancelReachesTheRunningInstance", tasksCancelAcross},
		{"StoppedInstanceIsReportedFailed", tasksStoppedInstance},
		{"InputAnsweredOnEitherInstance", tasksInputAcross},
		{"ForeignTamperedAndExpiredIDsRefused", tasksRefusals},
		{"KeyedRetryGetsTheSameTask", tasksKeyedRetry},
		{"KeyedRetryIDCancels", tasksKeyedCancel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sa, sb := newStores(t)
			keys, err := ctoken.NewKeyring(ctoken.RandomKey())
			if err != nil {
				t.Fatal(err)
			}
			tc.fn(t, sa, sb, keys)
		})
	}
}

// contractHold is the lease of the contract's tasks: long enough that a
// renewal every third of it is not missed on a loaded machine.
const contractHold = 2 * time.Second

func newTasks(t *testing.T, s replay.Recorder, keys *ctoken.Keyring, ttl time.Duration) *mcptoken.Tasks {
	t.Helper()
	ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: s, TTL: ttl, Hold: contractHold, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// await polls get until done accepts the state (or fails the test after a
// generous deadline: the wait is for an event, the deadline only ends a
// hung run).
func await(t *testing.T, ts *mcptoken.Tasks, caller, id string, done func(mcptoken.TaskState) bool) mcptoken.TaskState {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := ts.Get(context.Background(), caller, id)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if done(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still %s", st.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func status(s string) func(mcptoken.TaskState) bool {
	return func(st mcptoken.TaskState) bool { return st.Status == s }
}

func create(t *testing.T, ts *mcptoken.Tasks, caller string, run func(ctx context.Context, c *mcptoken.TaskCall) (json.RawMessage, error)) string {
	t.Helper()
	tool := mcptoken.TaskTool{Name: "job", Run: run}
	st, err := ts.Create(context.Background(), tool, &mcptoken.TaskCall{Caller: caller, Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if st.Status != "working" || st.ID == "" {
		t.Fatalf("Create: %+v", st)
	}
	return st.ID
}

func tasksReadAcross(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring) {
	a, b := newTasks(t, sa, keys, time.Minute), newTasks(t, sb, keys, time.Minute)
	release := make(chan struct{})
	var runs atomic.Int32
	id := create(t, a, "alice", func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		runs.Add(1)
		<-release
		return json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`), nil
	})
	if st, err := b.Get(context.Background(), "alice", id); err != nil || st.Status != "working" {
		t.Fatalf("Get on the other instance while running = %+v, %v; want working", st, err)
	}
	close(release)
	st := await(t, b, "alice", id, status("completed"))
	if !bytes.Contains(st.Result, []byte(`"done"`)) {
		t.Fatalf("result %s", st.Result)
	}
	if again, err := a.Get(context.Background(), "alice", id); err != nil || again.Status != "completed" || !bytes.Equal(again.Result, st.Result) {
		t.Fatalf("Get again = %+v, %v", again, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the task ran %d times", n)
	}
}

func tasksCancelAcross(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring) {
	a, b := newTasks(t, sa, keys, time.Minute), newTasks(t, sb, keys, time.Minute)
	started, stopped := make(chan struct{}), make(chan struct{})
	id := create(t, a, "alice", func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	})
	<-started
	if err := b.Cancel(context.Background(), "alice", id); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	<-stopped // the running instance saw the cancel through the store
	if st := await(t, a, "alice", id, func(st mcptoken.TaskState) bool { return st.Status != "working" }); st.Status != "cancelled" {
		t.Fatalf("after cancel: %s", st.Status)
	}
	if err := b.Cancel(context.Background(), "alice", id); err != nil {
		t.Fatalf("Cancel of a cancelled task: %v", err)
	}
}

func tasksStoppedInstance(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring) {
	dead := &killable{Recorder: sa}
	a, b := newTasks(t, dead, keys, time.Minute), newTasks(t, sb, keys, time.Minute)
	started, stopped := make(chan struct{}), make(chan struct{})
	id := create(t, a, "alice", func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	})
	<-started
	dead.killed.Store(true) // instance a can no longer reach the store
	t0 := time.Now()
	st := await(t, b, "alice", id, func(st mcptoken.TaskState) bool { return st.Status != "working" })
	if st.Status != "failed" || st.ErrorCode == 0 || st.ErrorMessage == "" {
		t.Fatalf("task of a stopped instance: %+v", st)
	}
	select {
	case <-stopped: // the stopped instance gave up its tool before its lease could lapse
	default:
		t.Fatal("the task was reported failed while its tool still ran on the stopped instance")
	}
	d := time.Since(t0)
	if d > 20*contractHold {
		t.Fatalf("failed reported after %v, lease %v", d, contractHold)
	}
	t.Logf("a stopped instance's task reported failed %v after it stopped (lease %v)", d.Round(time.Millisecond), contractHold)
	if again, err := b.Get(context.Background(), "alice", id); err != nil || again.Status != "failed" {
		t.Fatalf("Get again = %+v, %v", again, err)
	}
}

func tasksInputAcross(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring) {
	a, b := newTasks(t, sa, keys, time.Minute), newTasks(t, sb, keys, time.Minute)
	id := create(t, a, "alice", func(ctx context.Context, c *mcptoken.TaskCall) (json.RawMessage, error) {
		got, err := c.Input(ctx, map[string]json.RawMessage{
			"x": json.RawMessage(`{"method":"elicitation/create","params":{"message":"x?"}}`),
			"y": json.RawMessage(`{"method":"elicitation/create","params":{"message":"y?"}}`),
		})
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": string(got["x"]) + "+" + string(got["y"])}}})
	})
	st := await(t, b, "alice", id, func(st mcptoken.TaskState) bool { return len(st.InputRequests) == 2 })
	if st.Status != "input_required" {
		t.Fatalf("status %s", st.Status)
	}
	ctx := context.Background()
	if err := b.Update(ctx, "alice", id, map[string]json.RawMessage{"x": json.RawMessage(`1`), "nope": json.RawMessage(`3`)}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	st, err := a.Get(ctx, "alice", id)
	if err != nil || st.Status != "input_required" || len(st.InputRequests) != 1 || st.InputRequests["y"] == nil {
		t.Fatalf("after one answer: %+v, %v", st, err)
	}
	if err := a.Update(ctx, "alice", id, map[string]json.RawMessage{"y": json.RawMessage(`2`)}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	st = await(t, b, "alice", id, status("completed"))
	if !bytes.Contains(st.Result, []byte(`1+2`)) {
		t.Fatalf("result %s", st.Result)
	}
}

func tasksRefusals(t *testing.T, sa, sb replay.Recorder, keys *ctoken.Keyring) {
	ttl := 2 * contractHold
	a, b := newTasks(t, sa, keys, ttl), newTasks(t, sb, keys, ttl)
	// A task's times are wall-clock milliseconds: so is the test's.
	before := time.Now().UnixMilli()
	id := create(t, a, "alice", func(context.Context, *mcptoken.TaskCall) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[]}`), nil
	})
	ctx := context.Background()
	tampered := []byte(id)
	tampered[len(tampered)/2] ^= 1
	for name, try := range map[string]func() error{
		"get by another caller":    func() error { _, err := b.Get(ctx, "mallory", id); return err },
		"cancel by another caller": func() error { return b.Cancel(ctx, "mallory", id) },
		"update by another caller": func() error { return b.Update(ctx, "mallory", id, nil) },
		"tampered":                 func() error { _, err := b.Get(ctx, "alice", string(tampered)); return err },
		"not a task ID":            func() error { _, err := b.Get(ctx, "alice", "tasks-conformance-nonexistent"); return err },
	} {
		if err := try(); !errors.Is(err, mcptoken.ErrTaskInvalid) {
			t.Errorf("%s: %v, want ErrTaskInvalid", name, err)
		}
	}
	// Nothing was consumed: the owner reads the outcome.
	await(t, b, "alice", id, status("completed"))
	// Gone after its TTL, never before.
	for {
		_, err := b.Get(ctx, "alice", id)
		if errors.Is(err, mcptoken.ErrTaskInvalid) {
			if d := time.Duration(time.Now().UnixMilli()-before) * time.Millisecond; d < ttl {
				t.Fatalf("a task refused %v after its creation, before its TTL %v", d, ttl)
			}
			break
		}
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, err := b.Get(ctx, "alice", id); err == nil {
		t.Fatalf("expired task still read: %+v", st)
	}
}

// killable is a store that a test cuts off: every call fails once killed,
// as for an instance that stopped.
type killable struct {
	replay.Recorder
	killed atomic.Bool
}

var errKilled = errors.New("instance stopped")

func (k *killable) check() error {
	if k.killed.Load() {
		return errKilled
	}
	return nil
}

func (k *killable) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := k.check(); err != nil {
		return false, err
	}
	return k.Recorder.Claim(ctx, id, until)
}

func (k *killable) AcquireLease(ctx context.Context, id string, lease time.Duration) (replay.Lease, error) {
	if err := k.check(); err != nil {
		return replay.Lease{}, err
	}
	return k.Recorder.AcquireLease(ctx, id, lease)
}

func (k *killable) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.Recorder.ConfirmLease(ctx, id, token, until)
}

func (k *killable) ReleaseLease(ctx context.Context, id, token string) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.Recorder.ReleaseLease(ctx, id, token)
}

func (k *killable) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	if err := k.check(); err != nil {
		return replay.Record{}, err
	}
	return k.Recorder.AcquireRecord(ctx, id, lease, fp)
}

func (k *killable) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.Recorder.ConfirmRecord(ctx, id, token, until, fp, result)
}

func (k *killable) ReadRecord(ctx context.Context, id string) (replay.Record, error) {
	if err := k.check(); err != nil {
		return replay.Record{}, err
	}
	r, ok := k.Recorder.(replay.Reader)
	if !ok {
		return replay.Record{}, errors.New("store is not a replay.Reader")
	}
	return r.ReadRecord(ctx, id)
}

func (k *killable) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if err := k.check(); err != nil {
		return err
	}
	r, ok := k.Recorder.(replay.Renewer)
	if !ok {
		return errors.New("store is not a replay.Renewer")
	}
	return r.RenewLease(ctx, id, token, lease)
}
