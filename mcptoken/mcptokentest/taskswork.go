package mcptokentest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// RunTasksWorkContract runs the scenarios of Transactional task tools
// ([mcptoken.TaskTool].Transactional) against a store that runs work in
// its transactions, and effects, the writes a tool makes in them: the
// tool's write is committed if and only if its task completed; a tool
// that fails, is cancelled or asks for input keeps none. pgstore and
// sqlitestore run it.
func RunTasksWorkContract(t *testing.T, newStore func(t *testing.T) (replaytest.WorkStore, replaytest.Effects)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ts *mcptoken.Tasks, fx replaytest.Effects)
	}{
		{"WriteKeptIffCompleted", tasksWorkCompleted},
		{"FailingToolKeepsNoWrite", tasksWorkFailed},
		{"CancelKeepsNoWrite", tasksWorkCancelled},
		{"InputRefused", tasksWorkInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, fx := newStore(t)
			keys, err := ctoken.NewKeyring(ctoken.RandomKey())
			if err != nil {
				t.Fatal(err)
			}
			tc.fn(t, newTasks(t, s, keys, time.Minute), fx)
		})
	}
}

// createWork registers run as a Transactional tool and creates its task.
func createWork(t *testing.T, ts *mcptoken.Tasks, run func(ctx context.Context, c *mcptoken.TaskCall) (json.RawMessage, error)) string {
	t.Helper()
	tool := mcptoken.TaskTool{Name: "txjob", Run: run, Transactional: true}
	if err := ts.Add(tool); err != nil {
		t.Fatalf("Add: %v", err)
	}
	st, err := ts.Create(context.Background(), tool, &mcptoken.TaskCall{Caller: "alice", Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if st.Status != "working" || st.ID == "" {
		t.Fatalf("Create: %+v", st)
	}
	return st.ID
}

func tasksWorkCompleted(t *testing.T, ts *mcptoken.Tasks, fx replaytest.Effects) {
	written, release := make(chan struct{}), make(chan struct{})
	id := createWork(t, ts, func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		if err := fx.Write(ctx, "done"); err != nil {
			return nil, err
		}
		close(written)
		<-release
		return json.RawMessage(`{"content":[]}`), nil
	})
	<-written
	if st, err := ts.Get(context.Background(), "alice", id); err != nil || st.Status != "working" {
		t.Fatalf("Get while the tool runs = %+v, %v; want working", st, err)
	}
	if n := fx.Count(t, "done"); n != 0 {
		t.Fatalf("%d writes visible before the task completed", n)
	}
	close(release)
	await(t, ts, "alice", id, status("completed"))
	if n := fx.Count(t, "done"); n != 1 {
		t.Fatalf("%d writes kept by the completed task; want 1", n)
	}
}

func tasksWorkFailed(t *testing.T, ts *mcptoken.Tasks, fx replaytest.Effects) {
	id := createWork(t, ts, func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		if err := fx.Write(ctx, "failed"); err != nil {
			return nil, err
		}
		return nil, errors.New("the tool failed after writing")
	})
	st := await(t, ts, "alice", id, func(st mcptoken.TaskState) bool { return st.Status != "working" })
	if st.Status != "failed" || st.ErrorCode == 0 {
		t.Fatalf("after a failing tool: %+v; want failed with an error", st)
	}
	if n := fx.Count(t, "failed"); n != 0 {
		t.Fatalf("%d writes kept by the failed task; want 0", n)
	}
}

func tasksWorkCancelled(t *testing.T, ts *mcptoken.Tasks, fx replaytest.Effects) {
	written := make(chan struct{})
	id := createWork(t, ts, func(ctx context.Context, _ *mcptoken.TaskCall) (json.RawMessage, error) {
		if err := fx.Write(ctx, "cancelled"); err != nil {
			return nil, err
		}
		close(written)
		<-ctx.Done()
		return json.RawMessage(`{"content":[]}`), nil // a result, which the cancel discards
	})
	<-written
	if err := ts.Cancel(context.Background(), "alice", id); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if st := await(t, ts, "alice", id, func(st mcptoken.TaskState) bool { return st.Status != "working" }); st.Status != "cancelled" {
		t.Fatalf("after Cancel: %s; want cancelled", st.Status)
	}
	if n := fx.Count(t, "cancelled"); n != 0 {
		t.Fatalf("%d writes kept by the cancelled task; want 0", n)
	}
}

func tasksWorkInput(t *testing.T, ts *mcptoken.Tasks, fx replaytest.Effects) {
	inputErr := make(chan error, 1)
	id := createWork(t, ts, func(ctx context.Context, c *mcptoken.TaskCall) (json.RawMessage, error) {
		if err := fx.Write(ctx, "input"); err != nil {
			return nil, err
		}
		_, err := c.Input(ctx, map[string]json.RawMessage{"q": json.RawMessage(`{"method":"elicitation/create"}`)})
		inputErr <- err
		if err != nil {
			return nil, err
		}
		return json.RawMessage(`{"content":[]}`), nil
	})
	if err := <-inputErr; err == nil {
		t.Fatal("Input in a Transactional task succeeded; want it refused")
	}
	if st := await(t, ts, "alice", id, func(st mcptoken.TaskState) bool { return st.Status != "working" }); st.Status != "failed" {
		t.Fatalf("after a refused Input: %s; want failed", st.Status)
	}
	if n := fx.Count(t, "input"); n != 0 {
		t.Fatalf("%d writes kept by the failed task; want 0", n)
	}
}
