package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
)

// TestMCPTasksWorkBackendKilled: the connection of a Transactional task's
// transaction dies mid-task (as its instance would, or a server that ended
// the transaction of a runner paused too long): the task's write is not
// kept, and the other instance reports the task failed; when the tool
// then returns a result, as a resumed runner's would, its commit keeps
// nothing and the task stays failed.
func TestMCPTasksWorkBackendKilled(t *testing.T) {
	e, a, b := taskInstances(t)
	pid, release := make(chan int32, 1), make(chan struct{})
	tool := mcptoken.TaskTool{Name: "txjob", Transactional: true, Run: func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		if err := e.Write(ctx, "killed"); err != nil {
			return nil, err
		}
		tx, err := TxFrom(ctx)
		if err != nil {
			return nil, err
		}
		var n int32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&n); err != nil {
			return nil, err
		}
		pid <- n
		<-release
		return json.RawMessage(`{"content":[]}`), nil
	}}
	must(t, a.Add(tool))
	st, err := a.Create(context.Background(), tool, &mcptoken.TaskCall{Caller: "alice", Arguments: json.RawMessage(`{}`)})
	must(t, err)
	resume := sync.OnceFunc(func() { close(release) })
	defer resume()
	mustExec(t, e.pool, `SELECT pg_terminate_backend($1)`, <-pid)
	if got := taskEnded(t, b, st.ID); got.Status != "failed" {
		t.Fatalf("after the transaction's connection died: %s; want failed", got.Status)
	}
	if n := e.Count(t, "killed"); n != 0 {
		t.Fatalf("%d writes kept by the task whose connection died; want 0", n)
	}
	// The runner resumes: its tool completes.
	resume()
	// Shutdown waits for the runner to end.
	must(t, a.Shutdown(context.Background()))
	if n := e.Count(t, "killed"); n != 0 {
		t.Fatalf("%d writes kept once the tool of the task reported failed completed; want 0", n)
	}
	if got, err := b.Get(context.Background(), "alice", st.ID); err != nil || got.Status != "failed" {
		t.Fatalf("once the tool of the task reported failed completed: %q, %v; want failed", got.Status, err)
	}
}

// TestMCPTasksWorkCancelElsewhere: tasks/cancel of a running
// Transactional task on an instance that does not run it fails (the task
// runs on and commits); once the task ended it is a no-op.
func TestMCPTasksWorkCancelElsewhere(t *testing.T) {
	e, a, b := taskInstances(t)
	written, release := make(chan struct{}), make(chan struct{})
	tool := mcptoken.TaskTool{Name: "txjob", Transactional: true, Run: func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		if err := e.Write(ctx, "kept"); err != nil {
			return nil, err
		}
		close(written)
		<-release
		return json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`), nil
	}}
	must(t, a.Add(tool))
	must(t, b.Add(tool))
	st, err := a.Create(context.Background(), tool, &mcptoken.TaskCall{Caller: "alice", Arguments: json.RawMessage(`{}`)})
	must(t, err)
	<-written
	if err := b.Cancel(context.Background(), "alice", st.ID); err == nil {
		t.Fatal("Cancel on the other instance of a running Transactional task succeeded")
	}
	close(release)
	if got := taskEnded(t, b, st.ID); got.Status != "completed" || !bytes.Contains(got.Result, []byte(`"done"`)) {
		t.Fatalf("after a refused Cancel: %+v; want completed", got)
	}
	if n := e.Count(t, "kept"); n != 1 {
		t.Fatalf("%d writes kept; want 1", n)
	}
	wantIs(t, b.Cancel(context.Background(), "alice", st.ID), nil, "Cancel of a completed Transactional task: %v")
}

// taskInstances returns an effects table and two mcptoken.Tasks on two
// instances of one store, as two instances of a service have.
func taskInstances(t *testing.T) (e pgEffects, a, b *mcptoken.Tasks) {
	t.Helper()
	pool := needServer(t).pool(t)
	e = pgEffects{pool, uniqueTable(t, pool)}
	mustExec(t, pool, `CREATE TABLE "`+e.table+`" (id text NOT NULL)`)
	sa, sb := twoInstances(t, pool)
	keys := testKeys(t)
	newTasks := func(s *Store) *mcptoken.Tasks {
		ts, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: s, TTL: time.Minute,
			Hold: 2 * time.Second, PollInterval: 20 * time.Millisecond})
		must(t, err)
		return ts
	}
	return e, newTasks(sa), newTasks(sb)
}

// taskEnded polls ts until task id no longer works, and returns its state;
// the 60 s bound ends a hung run only.
func taskEnded(t *testing.T, ts *mcptoken.Tasks, id string) mcptoken.TaskState {
	t.Helper()
	var got mcptoken.TaskState
	waitFor(t, 60*time.Second, func() (bool, string) {
		var err error
		got, err = ts.Get(context.Background(), "alice", id)
		must(t, err)
		return got.Status != "working", "still working"
	})
	return got
}
