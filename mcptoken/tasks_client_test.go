package mcptoken

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// script is a server seen through AwaitTask's rpc: each tasks/get answers
// the next of gets (the last one again once they run out), and every
// request is recorded.
type script struct {
	gets    []string // tasks/get results (JSON), or "!transient" / "!fatal"
	updates []error  // tasks/update outcomes in turn (nil: accepted)
	calls   []string // "method params" of every request
}

var (
	errTransient = errors.New("connection refused")
	errFatal     = errors.New("JSON-RPC -32602: unknown task")
)

func (s *script) rpc(_ context.Context, method string, params map[string]any) (json.RawMessage, error) {
	b, _ := json.Marshal(params)
	s.calls = append(s.calls, method+" "+string(b))
	switch method {
	case "tasks/get":
		next := s.gets[0]
		if len(s.gets) > 1 {
			s.gets = s.gets[1:]
		}
		switch next {
		case "!transient":
			return nil, errTransient
		case "!fatal":
			return nil, errFatal
		}
		return json.RawMessage(next), nil
	case "tasks/update":
		var err error
		if len(s.updates) > 0 {
			err, s.updates = s.updates[0], s.updates[1:]
		}
		if err != nil {
			return nil, err
		}
		return json.RawMessage(`{"resultType":"complete"}`), nil
	}
	return nil, fmt.Errorf("unexpected method %s", method)
}

func (s *script) count(method string) int {
	n := 0
	for _, c := range s.calls {
		if strings.HasPrefix(c, method+" ") {
			n++
		}
	}
	return n
}

func transientOnly(err error) bool { return errors.Is(err, errTransient) }

const (
	working   = `{"taskId":"t","status":"working","pollIntervalMs":10}`
	completed = `{"taskId":"t","status":"completed","result":{"content":[{"type":"text","text":"done"}]}}`
)

func inputRequired(keys ...string) string {
	m := map[string]any{}
	for _, k := range keys {
		m[k] = map[string]any{"method": "elicitation/create", "params": map[string]any{"message": k + "?"}}
	}
	b, _ := json.Marshal(map[string]any{"taskId": "t", "status": "input_required", "pollIntervalMs": 10, "inputRequests": m})
	return string(b)
}

// answerer answers every request it is given, counting each key.
type answerer map[string]int

func (a answerer) input(_ context.Context, reqs map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for k := range reqs {
		a[k]++
		out[k] = json.RawMessage(`{"action":"accept","content":{}}`)
	}
	return out, nil
}

func TestAwaitTask(t *testing.T) {
	ctx := context.Background()

	t.Run("polls until completed and returns the result", func(t *testing.T) {
		s := &script{gets: []string{working, working, completed}}
		res, err := AwaitTask(ctx, "t", s.rpc, nil, transientOnly)
		if err != nil || !strings.Contains(string(res), `"done"`) {
			t.Fatalf("result %s, err %v", res, err)
		}
		if s.count("tasks/get") != 3 || !strings.Contains(s.calls[0], `"taskId":"t"`) {
			t.Fatalf("calls %q", s.calls)
		}
	})

	t.Run("a failed task is a TaskFailure with its JSON-RPC error", func(t *testing.T) {
		s := &script{gets: []string{`{"status":"failed","error":{"code":-32603,"message":"the server running the task stopped"}}`}}
		_, err := AwaitTask(ctx, "t", s.rpc, nil, nil)
		var f *TaskFailure
		if !errors.As(err, &f) || f.Code != -32603 || f.Message != "the server running the task stopped" {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a failure whose effect is unknown also matches ErrOutcomeUnknown", func(t *testing.T) {
		s := &script{gets: []string{`{"status":"failed","error":{"code":-32603,"message":"stopped","data":{"ctokenEffect":"unknown"}}}`}}
		_, err := AwaitTask(ctx, "t", s.rpc, nil, nil)
		var f *TaskFailure
		if !errors.As(err, &f) || !errors.Is(err, ErrOutcomeUnknown) || settledByTask(err) || err.Error() != "mcptoken: the task failed: JSON-RPC error -32603: stopped" {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a failure that kept nothing says calling again is safe", func(t *testing.T) {
		s := &script{gets: []string{`{"status":"failed","error":{"code":-32603,"message":"rolled back","data":{"ctokenEffect":"none"}}}`}}
		_, err := AwaitTask(ctx, "t", s.rpc, nil, nil)
		var f *TaskFailure
		if !errors.As(err, &f) || errors.Is(err, ErrOutcomeUnknown) || !settledByTask(err) || !strings.Contains(err.Error(), "calling again is safe") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a failure's unknown data is ignored", func(t *testing.T) {
		s := &script{gets: []string{`{"status":"failed","error":{"code":-32603,"message":"x","data":{"ctokenEffect":"maybe"}}}`}}
		_, err := AwaitTask(ctx, "t", s.rpc, nil, nil)
		if f, ok := err.(*TaskFailure); !ok || f.effect != "" || err.Error() != "mcptoken: the task failed: JSON-RPC error -32603: x" {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a failed task without an error is still a TaskFailure", func(t *testing.T) {
		s := &script{gets: []string{`{"status":"failed"}`}}
		var f *TaskFailure
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, nil); !errors.As(err, &f) || f.Code != codeInternal {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a cancelled task is ErrTaskCancelled", func(t *testing.T) {
		s := &script{gets: []string{`{"status":"cancelled"}`}}
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, nil); !errors.Is(err, ErrTaskCancelled) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a completed task without a result is an error", func(t *testing.T) {
		s := &script{gets: []string{`{"status":"completed"}`}}
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, nil); err == nil || !strings.Contains(err.Error(), "without a result") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("an answer that is no task is an error", func(t *testing.T) {
		s := &script{gets: []string{`[1,2]`}}
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, nil); err == nil || !strings.Contains(err.Error(), "no task") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a transient error is waited out, another ends the wait", func(t *testing.T) {
		s := &script{gets: []string{working, "!transient", "!transient", completed}}
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, transientOnly); err != nil {
			t.Fatal(err)
		}
		s = &script{gets: []string{working, "!transient", "!fatal"}}
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, transientOnly); !errors.Is(err, errFatal) {
			t.Fatalf("err = %v", err)
		}
		s = &script{gets: []string{"!transient"}}
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, nil); !errors.Is(err, errTransient) {
			t.Fatalf("without transient: err = %v, want the error at once", err)
		}
	})

	t.Run("each input key is asked once, answered with tasks/update", func(t *testing.T) {
		s := &script{gets: []string{inputRequired("a", "b"), inputRequired("b"), inputRequired("b", "c"), completed}}
		a := answerer{}
		if _, err := AwaitTask(ctx, "t", s.rpc, a.input, nil); err != nil {
			t.Fatal(err)
		}
		if a["a"] != 1 || a["b"] != 1 || a["c"] != 1 || len(a) != 3 {
			t.Fatalf("asked %v, want each key once", a)
		}
		if s.count("tasks/update") != 2 {
			t.Fatalf("calls %q, want two updates", s.calls)
		}
	})

	t.Run("answers not delivered are sent again without asking again", func(t *testing.T) {
		s := &script{gets: []string{inputRequired("a"), inputRequired("a"), completed}, updates: []error{errTransient, nil}}
		a := answerer{}
		if _, err := AwaitTask(ctx, "t", s.rpc, a.input, transientOnly); err != nil {
			t.Fatal(err)
		}
		if a["a"] != 1 || s.count("tasks/update") != 2 {
			t.Fatalf("asked %v, calls %q: want one question, two updates", a, s.calls)
		}
	})

	t.Run("an update refused for good ends the wait", func(t *testing.T) {
		s := &script{gets: []string{inputRequired("a")}, updates: []error{errFatal}}
		if _, err := AwaitTask(ctx, "t", s.rpc, answerer{}.input, transientOnly); !errors.Is(err, errFatal) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("input required without an input function is an error", func(t *testing.T) {
		s := &script{gets: []string{inputRequired("a")}}
		if _, err := AwaitTask(ctx, "t", s.rpc, nil, nil); err == nil || !strings.Contains(err.Error(), "no input handler") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("the input function's error ends the wait", func(t *testing.T) {
		s := &script{gets: []string{inputRequired("a")}}
		boom := errors.New("the user left")
		in := func(context.Context, map[string]json.RawMessage) (map[string]json.RawMessage, error) {
			return nil, boom
		}
		if _, err := AwaitTask(ctx, "t", s.rpc, in, nil); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("the context's end stops the wait", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		s := &script{gets: []string{working}}
		rpc := func(ctx context.Context, m string, p map[string]any) (json.RawMessage, error) {
			if s.count("tasks/get") == 2 {
				cancel()
			}
			return s.rpc(ctx, m, p)
		}
		if _, err := AwaitTask(cctx, "t", rpc, nil, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("refuses no task ID or no rpc", func(t *testing.T) {
		s := &script{gets: []string{completed}}
		if _, err := AwaitTask(ctx, "", s.rpc, nil, nil); err == nil {
			t.Fatal("no task ID accepted")
		}
		if _, err := AwaitTask(ctx, "t", nil, nil, nil); err == nil {
			t.Fatal("no rpc accepted")
		}
	})
}

func TestTaskPollInterval(t *testing.T) {
	// The waits AwaitTask makes, as a context deadline would see them:
	// the gaps between polls start at 10 ms and double up to the server's
	// interval, never below either bound (a loaded machine only widens
	// them).
	for _, tc := range []struct {
		poll     string
		interval time.Duration
	}{
		{`"pollIntervalMs":1`, minTaskPoll}, // raised to 10 ms
		{`"pollIntervalMs":40`, 40 * time.Millisecond},
	} {
		var at []time.Time
		rpc := func(context.Context, string, map[string]any) (json.RawMessage, error) {
			at = append(at, time.Now())
			if len(at) == 6 {
				return json.RawMessage(completed), nil
			}
			return json.RawMessage(`{"status":"working",` + tc.poll + `}`), nil
		}
		if _, err := AwaitTask(context.Background(), "t", rpc, nil, nil); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(at); i++ {
			want := min(minTaskPoll<<(i-1), tc.interval)
			if gap := at[i].Sub(at[i-1]); gap < want {
				t.Errorf("%s: poll %d came %v after the one before, want at least %v", tc.poll, i, gap, want)
			}
		}
	}
}

func TestTaskPollBacksOff(t *testing.T) {
	// A server that asks for 10 s between polls: AwaitTask's first five
	// waits (10, 20, 40, 80, 160 ms) still come well before one interval.
	var at []time.Time
	rpc := func(context.Context, string, map[string]any) (json.RawMessage, error) {
		at = append(at, time.Now())
		if len(at) == 6 {
			return json.RawMessage(completed), nil
		}
		return json.RawMessage(`{"status":"working","pollIntervalMs":10000}`), nil
	}
	start := time.Now()
	if _, err := AwaitTask(context.Background(), "t", rpc, nil, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= 10*time.Second {
		t.Fatalf("6 polls took %v: the waits did not start at 10 ms", d)
	}
}

func TestTaskIDOf(t *testing.T) {
	for in, want := range map[string]string{
		`{"resultType":"task","taskId":"abc","status":"working"}`: "abc",
		`{"resultType":"complete","taskId":"abc"}`:                "",
		`{"resultType":"task"}`:                                   "",
		`{"content":[]}`:                                          "",
		`not json`:                                                "",
	} {
		got, ok := TaskIDOf(json.RawMessage(in))
		if got != want || ok != (want != "") {
			t.Errorf("TaskIDOf(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// FuzzAwaitTask feeds AwaitTask arbitrary tasks/get answers: it returns a
// result, an error or keeps polling, and never panics. Its context is
// done from the start, so that no wait between polls slows the fuzzing
// (every answer is still read, and its input asked and sent).
func FuzzAwaitTask(f *testing.F) {
	for _, s := range []string{working, completed, inputRequired("a"), `{"status":"failed","error":{"code":1}}`, `{"status":"cancelled"}`, `null`, `{"inputRequests":null,"status":"input_required"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		gets := 0
		rpc := func(_ context.Context, method string, _ map[string]any) (json.RawMessage, error) {
			if method == "tasks/get" {
				gets++
				if gets > 2 {
					return nil, errFatal // stop a task that keeps working
				}
				return json.RawMessage(answer), nil
			}
			return json.RawMessage(`{}`), nil
		}
		TaskIDOf(answer)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		AwaitTask(ctx, "t", rpc, answerer{}.input, nil)
	})
}
