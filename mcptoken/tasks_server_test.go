package mcptoken

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// hiccup is a MemoryStore whose first n ConfirmRecord calls of a task's
// entry (with a fingerprint, unlike its marks) fail as unavailable.
type hiccup struct {
	*replay.MemoryStore
	n atomic.Int32
}

func (h *hiccup) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	if len(fp) > 0 && h.n.Add(-1) >= 0 {
		return replay.ErrUnavailable
	}
	return h.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

func newCoreTasks(t *testing.T, store replay.Recorder) *Tasks {
	t.Helper()
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	ts, err := NewTasks(TasksConfig{Keys: keys, Store: store, Hold: time.Second, PollInterval: 10 * time.Millisecond})
	must(t, err)
	return ts
}

// runToEnd creates a task of run and returns its state once it left working.
func runToEnd(t *testing.T, ts *Tasks, run func(context.Context, *TaskCall) (json.RawMessage, error)) TaskState {
	t.Helper()
	st, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: run}, &TaskCall{Caller: "alice"})
	must(t, err)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got, err := ts.Get(context.Background(), "alice", st.ID)
		must(t, err)
		if got.Status != taskWorking {
			return got
		}
	}
	t.Fatal("task still working")
	return TaskState{}
}

func TestTaskRun(t *testing.T) {
	t.Run("cancels a tool still running at the TTL", func(t *testing.T) {
		keys, err := ctoken.NewKeyring(ctoken.RandomKey())
		must(t, err)
		// The hold as long as the TTL: a renewal late under load (a tick
		// every Hold/3) must not end the tool before the TTL does.
		const ttl = 1500 * time.Millisecond
		ts, err := NewTasks(TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), TTL: ttl, Hold: ttl, PollInterval: 10 * time.Millisecond})
		must(t, err)
		ended := make(chan error, 1)
		st, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		}}, &TaskCall{Caller: "alice"})
		must(t, err)
		if err := <-ended; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the tool's context ended with %v", err)
		}
		if end := st.Created.Add(ttl); time.Now().Before(end) {
			t.Fatalf("the tool was stopped %v before the TTL", time.Until(end))
		}
	})
	t.Run("records its outcome through a store that failed to answer", func(t *testing.T) {
		store := &hiccup{MemoryStore: replay.NewMemoryStore(0)}
		store.n.Store(2)
		got := runToEnd(t, newCoreTasks(t, store), func(context.Context, *TaskCall) (json.RawMessage, error) {
			return json.RawMessage(`{"content":[]}`), nil
		})
		if got.Status != taskCompleted || store.n.Load() >= 0 {
			t.Fatalf("task %+v, confirmations left to fail %d", got, store.n.Load())
		}
	})
	for name, res := range map[string]string{"an array": `[1]`, "null": `null`, "nothing": ``, "not JSON": `{`, "a key twice": `{"content":[],"content":[]}`} {
		t.Run("fails a task whose tool returned "+name, func(t *testing.T) {
			got := runToEnd(t, newCoreTasks(t, replay.NewMemoryStore(0)), func(context.Context, *TaskCall) (json.RawMessage, error) {
				return json.RawMessage(res), nil
			})
			if got.Status != taskFailed || got.ErrorCode != codeInternal || got.Result != nil {
				t.Fatalf("task %+v", got)
			}
		})
	}
	t.Run("fails a task whose result is too large to keep", func(t *testing.T) {
		big := make([]byte, replay.MaxResultBytes)
		for i := range big {
			big[i] = 'a'
		}
		got := runToEnd(t, newCoreTasks(t, replay.NewMemoryStore(0)), func(context.Context, *TaskCall) (json.RawMessage, error) {
			return json.Marshal(map[string]string{"text": string(big)})
		})
		if got.Status != taskFailed || got.ErrorCode != codeInternal {
			t.Fatalf("task %+v", got)
		}
	})
	t.Run("refuses more input requests than it keeps", func(t *testing.T) {
		asks := map[string]json.RawMessage{}
		for i := 0; i <= maxTaskInputs; i++ {
			asks[string(rune('a'+i%26))+string(rune('a'+i/26))] = json.RawMessage(`{}`)
		}
		var inputErr error
		got := runToEnd(t, newCoreTasks(t, replay.NewMemoryStore(0)), func(ctx context.Context, c *TaskCall) (json.RawMessage, error) {
			_, inputErr = c.Input(ctx, asks)
			return nil, inputErr
		})
		if inputErr == nil || got.Status != taskFailed {
			t.Fatalf("Input of %d requests: %v; task %s", len(asks), inputErr, got.Status)
		}
	})
}

// mangler is a MemoryStore that flips a byte of every result it records,
// as an edit of the store would.
type mangler struct{ *replay.MemoryStore }

func (m mangler) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	edited := append([]byte(nil), result...)
	edited[len(edited)-1] ^= 1
	return m.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, edited)
}

// down is a MemoryStore that refuses every AcquireRecord once down is set.
type down struct {
	*replay.MemoryStore
	down atomic.Bool
}

func (d *down) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	if d.down.Load() {
		return replay.Record{}, replay.ErrUnavailable
	}
	return d.MemoryStore.AcquireRecord(ctx, id, lease, fp)
}

func (d *down) ReadRecord(ctx context.Context, id string) (replay.Record, error) {
	if d.down.Load() {
		return replay.Record{}, replay.ErrUnavailable
	}
	return d.MemoryStore.ReadRecord(ctx, id)
}

// serverOfAStoreGoneDown returns a task server whose store went down once
// it had created a task of tool "quick" for alice, and that task's ID.
func serverOfAStoreGoneDown(t *testing.T) (*taskServer, string) {
	t.Helper()
	store := &down{MemoryStore: replay.NewMemoryStore(0)}
	s := newTaskServer(t)
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	s.tasks, err = NewTasks(TasksConfig{Keys: keys, Store: store, Hold: time.Second, Caller: func(*http.Request) (string, error) { return "alice", nil }})
	must(t, err)
	must(t, s.tasks.Add(TaskTool{Name: "quick", Run: func(context.Context, *TaskCall) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[]}`), nil
	}}))
	s.h = s.tasks.Handler(http.NotFoundHandler())
	id := s.create("quick")
	store.down.Store(true)
	return s, id
}
func TestTaskStoreFaults(t *testing.T) {
	t.Run("never answers from a record that does not open", func(t *testing.T) {
		ts := newCoreTasks(t, mangler{replay.NewMemoryStore(0)})
		st, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: func(context.Context, *TaskCall) (json.RawMessage, error) {
			return json.RawMessage(`{"content":[]}`), nil
		}}, &TaskCall{Caller: "alice"})
		must(t, err)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			got, err := ts.Get(context.Background(), "alice", st.ID)
			if err != nil {
				if errors.Is(err, ErrTaskInvalid) || got.Status != "" {
					t.Fatalf("Get: %+v, %v", got, err)
				}
				break // refused: the record does not open
			}
			if got.Status != taskWorking || time.Now().After(deadline) {
				t.Fatalf("answered %+v from an edited record", got)
			}
		}
	})
	t.Run("tells the client the store could not answer", func(t *testing.T) {
		s, id := serverOfAStoreGoneDown(t)
		_, out := s.rpc("tasks/get", with(map[string]any{"taskId": id}, declared), nil)
		_, out2 := s.rpc("tools/call", with(map[string]any{"name": "quick"}, declared), nil)
		if errCode(out) != codeInternal || errCode(out2) != codeInternal {
			t.Fatalf("answers %v, %v", out, out2)
		}
	})
	t.Run("logs each failure, to slog.Default without a Logger, never the caller or the ID", func(t *testing.T) {
		var buf bytes.Buffer
		prev := slog.Default()
		slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
		t.Cleanup(func() { slog.SetDefault(prev) })
		s, id := serverOfAStoreGoneDown(t)
		s.rpc("tasks/get", with(map[string]any{"taskId": id}, declared), nil)
		s.rpc("tasks/cancel", with(map[string]any{"taskId": id}, declared), nil)
		s.rpc("tools/call", with(map[string]any{"name": "quick"}, declared), nil)
		logged := buf.String()
		if n := strings.Count(logged, `"level":"ERROR"`); n < 2 {
			t.Fatalf("%d errors logged for a store that failed two requests: %s", n, logged)
		}
		if strings.Contains(logged, "alice") || strings.Contains(logged, id) || !strings.Contains(logged, `"tool":"quick"`) {
			t.Fatalf("logged %s", logged)
		}
	})
	t.Run("logs a tool that panicked", func(t *testing.T) {
		var buf syncBuffer
		keys, err := ctoken.NewKeyring(ctoken.RandomKey())
		must(t, err)
		ts, err := NewTasks(TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0), Hold: time.Second, PollInterval: 10 * time.Millisecond,
			Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		must(t, err)
		if got := runToEnd(t, ts, func(context.Context, *TaskCall) (json.RawMessage, error) { panic("secret detail") }); got.Status != taskFailed {
			t.Fatalf("task %+v", got)
		}
		if logged := buf.String(); !strings.Contains(logged, `"level":"ERROR"`) || !strings.Contains(logged, "panicked") || strings.Contains(logged, "secret") {
			t.Fatalf("logged %q", logged)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger in another goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTaskIDLivesAsLongAsTheTask: a task is readable for its whole TTL
// (ttlMs from createdAt), so its ID must not expire sooner, although
// cursors stamp their issue time in whole seconds.
func TestTaskIDLivesAsLongAsTheTask(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	const ttl = time.Minute
	var clock atomic.Pointer[time.Time]
	now := func() time.Time {
		if c := clock.Load(); c != nil {
			return *c
		}
		return time.Now()
	}
	store := replay.NewMemoryStore(0)
	store.Now = now
	ts, err := NewTasks(TasksConfig{Keys: keys, Store: store, TTL: ttl, Hold: time.Second, PollInterval: 10 * time.Millisecond})
	must(t, err)
	ts.ids, err = newTaskIDs(keys, ttl, now)
	must(t, err)
	var st TaskState
	for st.Created.Nanosecond() < int(10*time.Millisecond) { // else no rounding to see
		st = runToEnd(t, ts, func(context.Context, *TaskCall) (json.RawMessage, error) {
			return json.RawMessage(`{"content":[]}`), nil
		})
	}
	created, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: func(context.Context, *TaskCall) (json.RawMessage, error) { return nil, nil }}, &TaskCall{Caller: "alice"})
	must(t, err)
	if got, err := ts.Get(context.Background(), "alice", created.ID); err != nil || !got.Created.Equal(created.Created) {
		t.Fatalf("created at %v, read as created at %v (%v)", created.Created, got.Created, err)
	}
	late := st.Created.Add(ttl - time.Millisecond)
	clock.Store(&late)
	if got, err := ts.Get(context.Background(), "alice", st.ID); err != nil || got.Status != taskCompleted {
		t.Fatalf("a task created at %v read at %v (ttl %v): %+v, %v", st.Created, late, ttl, got, err)
	}
	gone := st.Created.Add(ttl)
	clock.Store(&gone)
	if got, err := ts.Get(context.Background(), "alice", st.ID); !errors.Is(err, ErrTaskInvalid) {
		t.Fatalf("a task read at its end: %+v, %v", got, err)
	}
}

// writes is a MemoryStore that counts the calls that write.
type writes struct {
	*replay.MemoryStore
	n atomic.Int64
}

func (w *writes) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	w.n.Add(1)
	return w.MemoryStore.AcquireRecord(ctx, id, lease, fp)
}

func (w *writes) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	w.n.Add(1)
	return w.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

func (w *writes) ReleaseLease(ctx context.Context, id, token string) error {
	w.n.Add(1)
	return w.MemoryStore.ReleaseLease(ctx, id, token)
}

func (w *writes) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	w.n.Add(1)
	return w.MemoryStore.RenewLease(ctx, id, token, lease)
}

// TestTaskPollIsARead: tasks/get of a working, input_required, completed,
// failed or cancelled task writes nothing to the store, and answers from a
// store too full to take a write.
func TestTaskPollIsARead(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(t *testing.T, ts *Tasks, id string, g *gate)
		want string
	}{
		{"working", func(*testing.T, *Tasks, string, *gate) {}, taskWorking},
		{"input_required", nil, taskInputRequired},
		{"completed", func(t *testing.T, _ *Tasks, _ string, g *gate) { close(g.release) }, taskCompleted},
		{"cancelled", func(t *testing.T, ts *Tasks, id string, _ *gate) {
			must(t, ts.Cancel(context.Background(), "alice", id))
		}, taskCancelled},
		{"failed", func(t *testing.T, ts *Tasks, id string, g *gate) { g.fail.Store(true); close(g.release) }, taskFailed},
	} {
		t.Run("of a "+c.name+" task", func(t *testing.T) {
			keys, err := ctoken.NewKeyring(ctoken.RandomKey())
			must(t, err)
			store := &writes{MemoryStore: replay.NewMemoryStore(0)}
			ts, err := NewTasks(TasksConfig{Keys: keys, Store: store, Hold: 10 * time.Minute, PollInterval: time.Hour})
			must(t, err)
			g := newGate(true)
			run := g.run
			if c.end == nil { // asks, and waits for an answer it never gets
				run = func(ctx context.Context, call *TaskCall) (json.RawMessage, error) {
					_, err := call.Input(ctx, map[string]json.RawMessage{"q": json.RawMessage(`{"method":"roots/list"}`)})
					return nil, err
				}
			}
			st, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: run}, &TaskCall{Caller: "alice"})
			must(t, err)
			if c.end != nil {
				wait(t, g.started, "the tool's start")
				c.end(t, ts, st.ID, g)
			}
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				got, err := ts.Get(context.Background(), "alice", st.ID)
				must(t, err)
				if got.Status == c.want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("status %s, want %s", got.Status, c.want)
				}
			}
			store.MemoryStore.Max = store.MemoryStore.Len() // full: a write is refused
			before := store.n.Load()
			for range 20 {
				got, err := ts.Get(context.Background(), "alice", st.ID)
				must(t, err)
				if got.Status != c.want {
					t.Fatalf("status %s, want %s", got.Status, c.want)
				}
			}
			if n := store.n.Load() - before; n != 0 {
				t.Fatalf("20 polls made %d writes", n)
			}
		})
	}
}

// reads is a MemoryStore that counts ReadRecord calls.
type reads struct {
	*replay.MemoryStore
	n atomic.Int64
}

func (r *reads) ReadRecord(ctx context.Context, id string) (replay.Record, error) {
	r.n.Add(1)
	return r.MemoryStore.ReadRecord(ctx, id)
}

// TestTaskPollOfAWorkingTaskReads: a poll of a working task whose tool has
// not asked reads the task's entry alone on the instance running it, and
// the entry and its first round's on another; once the tool asked, the
// running instance reads its rounds too and reports input_required.
func TestTaskPollOfAWorkingTaskReads(t *testing.T) {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	store := &reads{MemoryStore: replay.NewMemoryStore(0)}
	cfg := TasksConfig{Keys: keys, Store: store, Hold: 10 * time.Minute, PollInterval: time.Hour}
	runs, err := NewTasks(cfg)
	must(t, err)
	other, err := NewTasks(cfg)
	must(t, err)
	ask := make(chan struct{})
	st, err := runs.Create(context.Background(), TaskTool{Name: "t", Run: func(ctx context.Context, call *TaskCall) (json.RawMessage, error) {
		<-ask
		_, err := call.Input(ctx, map[string]json.RawMessage{"q": json.RawMessage(`{"method":"roots/list"}`)})
		return nil, err
	}}, &TaskCall{Caller: "alice"})
	must(t, err)
	t.Cleanup(func() {
		must(t, runs.Cancel(context.Background(), "alice", st.ID))
		must(t, runs.Shutdown(context.Background()))
	})
	poll := func(ts *Tasks, want string) int64 {
		t.Helper()
		before := store.n.Load()
		got, err := ts.Get(context.Background(), "alice", st.ID)
		must(t, err)
		if got.Status != want {
			t.Fatalf("status %s, want %s", got.Status, want)
		}
		return store.n.Load() - before
	}
	if n := poll(runs, taskWorking); n != 1 {
		t.Errorf("a poll on the running instance read %d entries; want 1 (the task's)", n)
	}
	if n := poll(other, taskWorking); n != 2 {
		t.Errorf("a poll on another instance read %d entries; want 2 (the task's, its first round's)", n)
	}
	close(ask)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		got, err := runs.Get(context.Background(), "alice", st.ID)
		must(t, err)
		if got.Status == taskInputRequired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %s a minute after the tool asked; want %s", got.Status, taskInputRequired)
		}
	}
	// The task's entry, round 0, round 1 (absent), round 0's answer.
	if n := poll(runs, taskInputRequired); n != 4 {
		t.Errorf("a poll of a task that asked read %d entries; want 4", n)
	}
	if n := poll(other, taskInputRequired); n != 4 {
		t.Errorf("a poll on another instance of a task that asked read %d entries; want 4", n)
	}
}

// TestTaskInputFromConcurrentGoroutines: a tool may ask for input from
// several goroutines; each round is asked in turn (the client sees one
// round at a time) and every answer reaches its asker.
func TestTaskInputFromConcurrentGoroutines(t *testing.T) {
	ts := newCoreTasks(t, replay.NewMemoryStore(0))
	st, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: func(ctx context.Context, c *TaskCall) (json.RawMessage, error) {
		var wg sync.WaitGroup
		got := make([]string, 2)
		errs := make([]error, 2)
		for i, key := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ans map[string]json.RawMessage
				ans, errs[i] = c.Input(ctx, map[string]json.RawMessage{key: json.RawMessage(`{"method":"elicitation/create"}`)})
				got[i] = string(ans[key])
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": got[0] + got[1]}}})
	}}, &TaskCall{Caller: "alice"})
	must(t, err)
	deadline := time.Now().Add(30 * time.Second) // ends a hung run only
	for answered := 0; answered < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 rounds asked", answered)
		}
		got, err := ts.Get(context.Background(), "alice", st.ID)
		must(t, err)
		if got.Status != taskInputRequired {
			if got.Status != taskWorking {
				t.Fatalf("task %+v", got)
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if len(got.InputRequests) != 1 {
			t.Fatalf("input requests %v", got.InputRequests)
		}
		for key := range got.InputRequests {
			must(t, ts.Update(context.Background(), "alice", st.ID, map[string]json.RawMessage{key: json.RawMessage(`"` + key + `"`)}))
		}
		answered++
		for { // until the answered round is no longer the one asked
			now, err := ts.Get(context.Background(), "alice", st.ID)
			must(t, err)
			if now.Status != taskInputRequired || fmt.Sprint(now.InputRequests) != fmt.Sprint(got.InputRequests) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	done := runToEndOf(t, ts, st.ID)
	if done.Status != taskCompleted || !strings.Contains(string(done.Result), `"\"a\"\"b\""`) {
		t.Fatalf("task %+v", done)
	}
}

// runToEndOf waits for the task id to leave working and input_required.
func runToEndOf(t *testing.T, ts *Tasks, id string) TaskState {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got, err := ts.Get(context.Background(), "alice", id)
		must(t, err)
		if got.Status != taskWorking && got.Status != taskInputRequired {
			return got
		}
	}
	t.Fatal("task still running")
	return TaskState{}
}

// TestTaskTransactionalRefusedWithoutWorkStore: a Transactional tool on a
// store that cannot run work in its transactions is refused by Add with
// ctoken.ErrConfig, and by Create, which takes nothing.
func TestTaskTransactionalRefusedWithoutWorkStore(t *testing.T) {
	store := replay.NewMemoryStore(0)
	ts := newCoreTasks(t, store)
	tool := TaskTool{Name: "tx", Transactional: true, Run: func(context.Context, *TaskCall) (json.RawMessage, error) {
		t.Error("the tool ran")
		return json.RawMessage(`{}`), nil
	}}
	if err := ts.Add(tool); !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("Add of a Transactional tool on a MemoryStore = %v; want ctoken.ErrConfig", err)
	}
	if _, ok := ts.tool("tx"); ok {
		t.Fatal("the refused tool was registered")
	}
	if _, err := ts.Create(context.Background(), tool, &TaskCall{Caller: "alice"}); !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("Create of a Transactional tool on a MemoryStore = %v; want ctoken.ErrConfig", err)
	}
	if n := store.Len(); n != 0 {
		t.Fatalf("the refusal left %d entries in the store", n)
	}
}

// oneWriter is a TxStore whose Work holds the only writer, as
// sqlitestore's does.
type oneWriter struct{ *replaytest.TxStore }

func (oneWriter) WorkHoldsWriter() bool { return true }

func TestTaskTransactionalRefusedOnOneWriter(t *testing.T) {
	ts := newCoreTasks(t, oneWriter{replaytest.NewTxStore()})
	tool := TaskTool{Name: "tx", Transactional: true, Run: func(context.Context, *TaskCall) (json.RawMessage, error) {
		t.Error("the tool ran")
		return json.RawMessage(`{}`), nil
	}}
	if err := ts.Add(tool); !errors.Is(err, ctoken.ErrConfig) || !strings.Contains(err.Error(), "only writer") {
		t.Fatalf("Add = %v; want ctoken.ErrConfig naming the writer", err)
	}
	if _, err := ts.Create(context.Background(), tool, &TaskCall{Caller: "alice"}); !errors.Is(err, ctoken.ErrConfig) {
		t.Fatalf("Create = %v; want ctoken.ErrConfig", err)
	}
	must(t, ts.Add(TaskTool{Name: "plain", Run: tool.Run})) // only Transactional is refused
}

// keyedCall is caller's call of a task tool with arguments {} under key.
func keyedCall(caller, key string) *TaskCall {
	fp, _ := ctoken.ArgsFingerprint(json.RawMessage(`{}`))
	return &TaskCall{Caller: caller, Arguments: json.RawMessage(`{}`), key: key, args: fp}
}

// confirms is a MemoryStore that keeps the IDs it confirmed.
type confirms struct {
	*replay.MemoryStore
	mu  sync.Mutex
	ids []string
}

func (c *confirms) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	err := c.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
	if err == nil {
		c.mu.Lock()
		c.ids = append(c.ids, id)
		c.mu.Unlock()
	}
	return err
}

func (c *confirms) confirmed(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.ids, id)
}

// TestTaskCreationConfirmedBeforeItsID: Create returns a task's ID only
// once the store confirmed a record of the task's run (its began mark), a
// write every store makes durable before it answers, where the lease
// alone need not be (sqlitestore keeps leases unsynced): so a creation
// the client was told of outlives a crash of the store's machine.
func TestTaskCreationConfirmedBeforeItsID(t *testing.T) {
	for _, c := range []struct {
		name string
		call func() *TaskCall
	}{
		{"a call without a key", func() *TaskCall { return &TaskCall{Caller: "alice"} }},
		{"a keyed call", func() *TaskCall { return keyedCall("alice", "k") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := &confirms{MemoryStore: replay.NewMemoryStore(0)}
			ts := newCoreTasks(t, store)
			g := newGate(true)
			st, err := ts.Create(context.Background(), TaskTool{Name: "t", Run: g.run}, c.call())
			must(t, err)
			t.Cleanup(func() { close(g.release); must(t, ts.Shutdown(context.Background())) })
			ref, err := ts.open("alice", st.ID)
			must(t, err)
			if !store.confirmed(ref.beganMark()) {
				t.Fatalf("Create returned %s before any record of the task was confirmed (confirmed: %q)", st.Status, store.ids)
			}
		})
	}
}

// TestKeyedTaskRuns: under one idempotency key, a task whose failure kept
// nothing (a Transactional task's, whose transaction rolled back or whose
// instance stopped) is run again by the next call, up to the cap (8 here),
// with one committed effect; a non-Transactional task whose instance
// stopped is not, its effect unknown, until AllowRerun lets it.
func TestKeyedTaskRuns(t *testing.T) {
	ok := json.RawMessage(`{"content":[{"type":"text","text":"paid"}]}`)
	newTx := func(t *testing.T, run func(ctx context.Context, n int32) (json.RawMessage, error)) (*Tasks, *replaytest.TxStore, TaskTool, *atomic.Int32) {
		store := replaytest.NewTxStore()
		ts := newCoreTasks(t, store)
		runs := &atomic.Int32{}
		tool := TaskTool{Name: "pay", Transactional: true, Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
			n := runs.Add(1)
			if err := replaytest.TxWrite(ctx, "paid"); err != nil {
				return nil, err
			}
			return run(ctx, n)
		}}
		must(t, ts.Add(tool))
		return ts, store, tool, runs
	}

	t.Run("a Transactional task whose instance stopped runs again, once", func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		t.Cleanup(func() { close(release) })
		ts, store, tool, runs := newTx(t, func(ctx context.Context, n int32) (json.RawMessage, error) {
			if n == 1 {
				close(started)
				<-release // the stopped instance's goroutine, never heard of again
				return nil, errors.New("stopped")
			}
			return ok, nil
		})
		first, err := ts.Create(context.Background(), tool, keyedCall("alice", "k1"))
		must(t, err)
		<-started
		store.Kill()
		if st := settled(t, ts, first.ID, nil); st.Status != taskFailed || st.ErrorMessage != msgStoppedNone || st.effect != effectNone {
			t.Fatalf("the stopped run: %+v", st)
		}
		second, err := ts.Create(context.Background(), tool, keyedCall("alice", "k1"))
		must(t, err)
		if st := settled(t, ts, second.ID, nil); st.Status != taskCompleted {
			t.Fatalf("the next call's run: %+v", st)
		}
		third, err := ts.Create(context.Background(), tool, keyedCall("alice", "k1"))
		must(t, err)
		if third.Status != taskCompleted || !bytes.Contains(third.Result, []byte("paid")) {
			t.Fatalf("a call after the rerun completed: %+v", third)
		}
		if n, c := runs.Load(), store.Committed("paid"); n != 2 || c != 1 {
			t.Fatalf("%d runs, %d committed effects; want 2 runs, 1 effect", n, c)
		}
	})

	t.Run("a Transactional task that rolled back runs again, up to the cap", func(t *testing.T) {
		ts, store, tool, runs := newTx(t, func(context.Context, int32) (json.RawMessage, error) {
			return nil, errors.New("declined")
		})
		ts.maxRuns = 8
		for i := 1; i <= ts.maxRuns+1; i++ {
			st, err := ts.Create(context.Background(), tool, keyedCall("alice", "k2"))
			must(t, err)
			if st = settled(t, ts, st.ID, nil); st.Status != taskFailed || st.effect != effectNone {
				t.Fatalf("call %d: %+v", i, st)
			}
			if want := min(i, ts.maxRuns); runs.Load() != int32(want) {
				t.Fatalf("after call %d: %d runs; want %d", i, runs.Load(), want)
			}
		}
		if c := store.Committed("paid"); c != 0 {
			t.Fatalf("%d effects committed by failed runs", c)
		}
	})

	t.Run("a tool without effect runs again under its key, through an outage of many calls", func(t *testing.T) {
		ts := newCoreTasks(t, replay.NewMemoryStore(0))
		var runs atomic.Int32
		var down atomic.Bool
		down.Store(true)
		tool := TaskTool{Name: "pay", Run: func(context.Context, *TaskCall) (json.RawMessage, error) {
			runs.Add(1)
			if down.Load() {
				return nil, fmt.Errorf("%w: the bank refused the connection", ErrNoEffect)
			}
			return ok, nil
		}}
		must(t, ts.Add(tool))
		for range 20 { // the client retries through the outage
			st, err := ts.Create(context.Background(), tool, keyedCall("alice", "k-out"))
			must(t, err)
			if st = settled(t, ts, st.ID, nil); st.Status != taskFailed || st.effect != effectNone {
				t.Fatalf("a run without effect: %+v", st)
			}
		}
		down.Store(false)
		st, err := ts.Create(context.Background(), tool, keyedCall("alice", "k-out"))
		must(t, err)
		if st = settled(t, ts, st.ID, nil); st.Status != taskCompleted || runs.Load() != 21 {
			t.Fatalf("after the outage: %+v after %d runs; want completed after 21", st, runs.Load())
		}
	})

	t.Run("a non-Transactional task whose lease lapsed unread is not run again", func(t *testing.T) {
		keys, err := ctoken.NewKeyring(ctoken.RandomKey())
		must(t, err)
		mem := replay.NewMemoryStore(0)
		dying := &replaytest.CutOff{MemoryStore: mem}
		a, err := NewTasks(TasksConfig{Keys: keys, Store: dying, Hold: 300 * time.Millisecond, PollInterval: 10 * time.Millisecond})
		must(t, err)
		b, err := NewTasks(TasksConfig{Keys: keys, Store: mem, Hold: 300 * time.Millisecond, PollInterval: 10 * time.Millisecond})
		must(t, err)
		var runs atomic.Int32
		started := make(chan struct{})
		tool := TaskTool{Name: "mail", Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
			if runs.Add(1) == 1 {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return ok, nil
		}}
		_, err = a.Create(context.Background(), tool, keyedCall("alice", "k4"))
		must(t, err)
		<-started
		dying.Cut.Store(true)
		// No tasks/get: the retries alone meet the lease, then its lapse.
		var st TaskState
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if st, err = b.Create(context.Background(), tool, keyedCall("alice", "k4")); err != nil || st.Status != taskWorking || time.Now().After(deadline) {
				break
			}
		}
		must(t, err)
		if st.Status != taskFailed || st.effect != effectUnknown || runs.Load() != 1 {
			t.Fatalf("the retry after the lapse: %+v after %d runs; want the failure, not a run", st, runs.Load())
		}
		if _, err := b.Create(context.Background(), tool, &TaskCall{Caller: "alice", Arguments: json.RawMessage(`{"n":2}`), key: "k4", args: [32]byte{2}}); !errors.Is(err, ErrKeyReused) {
			t.Fatalf("the key with other arguments: %v", err)
		}
	})
	t.Run("a non-Transactional task whose instance stopped runs again only after AllowRerun", func(t *testing.T) {
		keys, err := ctoken.NewKeyring(ctoken.RandomKey())
		must(t, err)
		mem := replay.NewMemoryStore(0)
		dying := &replaytest.CutOff{MemoryStore: mem}
		a, err := NewTasks(TasksConfig{Keys: keys, Store: dying, Hold: time.Second, PollInterval: 10 * time.Millisecond})
		must(t, err)
		b, err := NewTasks(TasksConfig{Keys: keys, Store: mem, Hold: time.Second, PollInterval: 10 * time.Millisecond})
		must(t, err)
		var runs atomic.Int32
		started := make(chan struct{})
		tool := TaskTool{Name: "mail", Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
			if runs.Add(1) == 1 {
				close(started)
				<-ctx.Done() // given up by its instance
				return nil, ctx.Err()
			}
			return ok, nil
		}}
		must(t, a.Add(tool))
		must(t, b.Add(tool))
		first, err := a.Create(context.Background(), tool, keyedCall("alice", "k3"))
		must(t, err)
		<-started
		dying.Cut.Store(true)
		st := settled(t, b, first.ID, nil)
		if st.Status != taskFailed || st.ErrorMessage != msgStoppedUnknown || st.effect != effectUnknown {
			t.Fatalf("the stopped run: %+v", st)
		}
		again, err := b.Create(context.Background(), tool, keyedCall("alice", "k3"))
		must(t, err)
		if again.Status != taskFailed || runs.Load() != 1 {
			t.Fatalf("the next call: %+v after %d runs; want the failure, not a run", again, runs.Load())
		}
		ctx := context.Background()
		if err := b.AllowRerun(ctx, "bob", "mail", "k3"); !errors.Is(err, ErrTaskInvalid) {
			t.Fatalf("AllowRerun of another caller's key: %v", err)
		}
		must(t, b.AllowRerun(ctx, "alice", "mail", "k3"))
		rerun, err := b.Create(ctx, tool, keyedCall("alice", "k3"))
		must(t, err)
		if st := settled(t, b, rerun.ID, nil); st.Status != taskCompleted || runs.Load() != 2 {
			t.Fatalf("the call after AllowRerun: %+v after %d runs", st, runs.Load())
		}
		if err := b.AllowRerun(ctx, "alice", "mail", "k3"); !errors.Is(err, errNoRerun) {
			t.Fatalf("AllowRerun of a completed task: %v", err)
		}
	})
}
