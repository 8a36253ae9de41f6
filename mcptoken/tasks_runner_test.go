package mcptoken

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// fleet is two instances of one Tasks configuration on one store, whose
// leases outlast any test (renewed every 200 s, longer than a wait of the
// tests): a cancel never reaches a tool through a renewal.
func fleet(t *testing.T) (a, b *Tasks) {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	store := replay.NewMemoryStore(0)
	cfg := TasksConfig{Keys: keys, Store: store, Hold: 10 * time.Minute, PollInterval: 10 * time.Millisecond}
	a, err = NewTasks(cfg)
	must(t, err)
	b, err = NewTasks(cfg)
	must(t, err)
	return a, b
}

// gate is a tool that reports when it started and when its context ended,
// and returns once released: a result, or, when honour is set and its
// context ended first, the context's error.
type gate struct {
	started, stopped, release chan struct{}
	honour                    bool
	fail                      atomic.Bool // once released, fail instead
}

func newGate(honour bool) *gate {
	return &gate{started: make(chan struct{}), stopped: make(chan struct{}), release: make(chan struct{}), honour: honour}
}

func (g *gate) run(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
	close(g.started)
	select {
	case <-ctx.Done():
		close(g.stopped)
		if g.honour {
			return nil, ctx.Err()
		}
		<-g.release
	case <-g.release:
	}
	if g.fail.Load() {
		return nil, errors.New("the tool failed")
	}
	return json.RawMessage(`{"content":[]}`), nil
}

// wait fails the test unless ch closes within a minute.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: not within a minute", what)
	}
}

// settled polls the task on ts until it leaves working, recording every
// status read on the way.
func settled(t *testing.T, ts *Tasks, id string, seen *[]string) TaskState {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		st, err := ts.Get(context.Background(), "alice", id)
		must(t, err)
		if seen != nil {
			*seen = append(*seen, st.Status)
		}
		if st.Status != taskWorking {
			return st
		}
	}
	t.Fatal("task still working after a minute")
	return TaskState{}
}

func TestTaskCancel(t *testing.T) {
	for _, where := range []string{"on the instance running it", "on another instance"} {
		canceller := func(a, b *Tasks) *Tasks {
			if where == "on another instance" {
				return b
			}
			return a
		}
		t.Run("reaches the tool at once "+where+", and the task ends cancelled", func(t *testing.T) {
			a, b := fleet(t)
			g := newGate(true)
			st, err := a.Create(context.Background(), TaskTool{Name: "t", Run: g.run}, &TaskCall{Caller: "alice"})
			must(t, err)
			wait(t, g.started, "the tool's start")
			must(t, canceller(a, b).Cancel(context.Background(), "alice", st.ID))
			wait(t, g.stopped, "the cancel reaching the tool") // the lease outlasts the test: no renewal told it
			for _, ts := range []*Tasks{a, b} {
				if got := settled(t, ts, st.ID, nil); got.Status != taskCancelled {
					t.Fatalf("status %s, want cancelled", got.Status)
				}
			}
		})
		t.Run("of a tool that completes all the same "+where+" reports completed, never cancelled", func(t *testing.T) {
			a, b := fleet(t)
			g := newGate(false)
			st, err := a.Create(context.Background(), TaskTool{Name: "t", Run: g.run}, &TaskCall{Caller: "alice"})
			must(t, err)
			wait(t, g.started, "the tool's start")
			must(t, canceller(a, b).Cancel(context.Background(), "alice", st.ID))
			wait(t, g.stopped, "the cancel reaching the tool")
			var seen []string
			for range 5 {
				got, err := b.Get(context.Background(), "alice", st.ID)
				must(t, err)
				seen = append(seen, got.Status)
			}
			close(g.release)
			if got := settled(t, b, st.ID, &seen); got.Status != taskCompleted {
				t.Fatalf("status %s, want completed", got.Status)
			}
			for range 3 {
				got, err := a.Get(context.Background(), "alice", st.ID)
				must(t, err)
				seen = append(seen, got.Status)
			}
			for i, s := range seen {
				if s != taskWorking && s != taskCompleted || i > 0 && seen[i-1] == taskCompleted && s != taskCompleted {
					t.Fatalf("statuses read: %v", seen)
				}
			}
		})
	}
	t.Run("of a keyed task through a retry's ID reads working until the runner ends it", func(t *testing.T) {
		a, b := fleet(t)
		g := newGate(false)
		tool := TaskTool{Name: "t", Run: g.run}
		call := func() *TaskCall { return &TaskCall{Caller: "alice", key: "k1", args: [32]byte{1}} }
		first, err := a.Create(context.Background(), tool, call())
		must(t, err)
		wait(t, g.started, "the tool's start")
		retry, err := b.Create(context.Background(), tool, call())
		must(t, err)
		if retry.ID == first.ID {
			t.Fatal("the retry's ID is the first's")
		}
		must(t, b.Cancel(context.Background(), "alice", retry.ID))
		wait(t, g.stopped, "the cancel reaching the tool")
		var seen []string
		got, err := b.Get(context.Background(), "alice", retry.ID)
		must(t, err)
		seen = append(seen, got.Status)
		close(g.release)
		got = settled(t, b, retry.ID, &seen)
		if got.Status != taskCompleted || seen[0] != taskWorking {
			t.Fatalf("statuses read: %v", seen)
		}
	})
	t.Run("of a finished task leaves it as it is", func(t *testing.T) {
		a, b := fleet(t)
		g := newGate(true)
		close(g.release)
		st, err := a.Create(context.Background(), TaskTool{Name: "t", Run: g.run}, &TaskCall{Caller: "alice"})
		must(t, err)
		settled(t, a, st.ID, nil)
		for _, ts := range []*Tasks{a, b} {
			must(t, ts.Cancel(context.Background(), "alice", st.ID))
			if got := settled(t, ts, st.ID, nil); got.Status != taskCompleted {
				t.Fatalf("status %s after a cancel", got.Status)
			}
		}
	})
}

func TestTasksShutdown(t *testing.T) {
	t.Run("waits for a task that ends in time", func(t *testing.T) {
		a, _ := fleet(t)
		g := newGate(true)
		st, err := a.Create(context.Background(), TaskTool{Name: "t", Run: g.run}, &TaskCall{Caller: "alice"})
		must(t, err)
		wait(t, g.started, "the tool's start")
		done := make(chan error, 1)
		go func() { done <- a.Shutdown(context.Background()) }()
		close(g.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := settled(t, a, st.ID, nil); got.Status != taskCompleted {
			t.Fatalf("status %s", got.Status)
		}
	})
	t.Run("hands a task still running at its deadline over as failed at once", func(t *testing.T) {
		a, b := fleet(t)
		g := newGate(false) // ignores its context
		st, err := a.Create(context.Background(), TaskTool{Name: "t", Run: g.run}, &TaskCall{Caller: "alice"})
		must(t, err)
		wait(t, g.started, "the tool's start")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := a.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown = %v, want the context's error", err)
		}
		wait(t, g.stopped, "the shutdown reaching the tool")
		got, err := b.Get(context.Background(), "alice", st.ID) // the lease (a minute) has not lapsed
		must(t, err)
		if got.Status != taskFailed || got.ErrorMessage != msgTaskDrained {
			t.Fatalf("on another instance: %s %q", got.Status, got.ErrorMessage)
		}
		close(g.release) // the tool returns late: its result is not kept
		deadline := time.Now().Add(time.Minute)
		for a.local(taskRefOf(t, a, st.ID)) != nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got, _ := b.Get(context.Background(), "alice", st.ID); got.Status != taskFailed {
			t.Fatalf("status changed to %s", got.Status)
		}
	})
	t.Run("refuses new tasks, and the handler answers 503", func(t *testing.T) {
		a, _ := fleet(t)
		a.caller = func(*http.Request) (string, error) { return "alice", nil }
		tool := TaskTool{Name: "t", Run: newGate(true).run}
		must(t, a.Add(tool))
		must(t, a.Shutdown(context.Background()))
		if _, err := a.Create(context.Background(), tool, &TaskCall{Caller: "alice"}); !errors.Is(err, errTasksClosed) {
			t.Fatalf("Create after Shutdown: %v", err)
		}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": with(map[string]any{"name": "t"}, declared)})
		w := httptest.NewRecorder()
		a.Handler(http.NotFoundHandler()).ServeHTTP(w, jsonPost(strings.NewReader(string(body))))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "no task was created") {
			t.Fatalf("answer %d %s", w.Code, w.Body)
		}
	})
}

func taskRefOf(t *testing.T, ts *Tasks, id string) taskRef {
	t.Helper()
	ref, err := ts.open("alice", id)
	must(t, err)
	return ref
}
