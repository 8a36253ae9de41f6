package mcptoken

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The client side of the Tasks extension, shared by both SDKs' CallTool:
// each shell sends the extension's requests its own way and hands them to
// AwaitTask as an rpc function.

// ErrTaskCancelled reports a task that ended cancelled ([AwaitTask]).
var ErrTaskCancelled = errors.New("mcptoken: the task was cancelled")

// TaskFailure is the JSON-RPC error a task failed with ([AwaitTask]): the
// tool's own protocol error, or the server's, such as "the server running
// the task stopped". Its text says what the server knows of the task's
// effect: nothing kept (a Transactional task's writes were rolled back:
// calling again is safe), or unknown (the error then also matches
// [ErrOutcomeUnknown]).
type TaskFailure struct {
	Code    int
	Message string

	effect string // the error data's ctokenEffect: effectNone, effectUnknown or ""
}

func (f *TaskFailure) Error() string {
	s := fmt.Sprintf("mcptoken: the task failed: JSON-RPC error %d: %s", f.Code, f.Message)
	if f.effect == effectNone {
		s += " (nothing of it was kept: calling again is safe)"
	}
	return s
}

// unknownFailure is a [TaskFailure] whose effect is unknown: it matches
// [ErrOutcomeUnknown] too.
type unknownFailure struct{ f *TaskFailure }

func (u *unknownFailure) Error() string   { return u.f.Error() }
func (u *unknownFailure) Unwrap() []error { return []error{ErrOutcomeUnknown, u.f} }

// settledByTask reports whether err is a task's own end that settles its
// call: a failure whose effect is not unknown, or a cancel.
func settledByTask(err error) bool {
	var f *TaskFailure
	return errors.Is(err, ErrTaskCancelled) || errors.As(err, &f) && f.effect != effectUnknown
}

// Polling bounds of AwaitTask: a server's pollIntervalMs is honoured
// within them, and a task whose answers do not say is polled every second.
const (
	minTaskPoll     = 10 * time.Millisecond
	maxTaskPoll     = 30 * time.Second
	defaultTaskPoll = time.Second
)

// TaskIDOf returns the taskId of a CreateTaskResult (resultType "task"),
// and false for any other result.
func TaskIDOf(result json.RawMessage) (string, bool) {
	var r struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
	}
	if json.Unmarshal(result, &r) != nil || r.ResultType != "task" || r.TaskID == "" {
		return "", false
	}
	return r.TaskID, true
}

// detailedTask is what tasks/get answers.
type detailedTask struct {
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	PollIntervalMs *int64                     `json:"pollIntervalMs"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	Result         json.RawMessage            `json:"result"`
	Error          *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// AwaitTask drives the task taskID to its end and returns its result (the
// CallToolResult's JSON). rpc sends one request (tasks/get, tasks/update)
// with params, to which it adds what its SDK needs (_meta declaring the
// extension, the Mcp-Name header), and returns its result or error.
//
// It polls tasks/get at once, then 10 ms later, doubling the wait up to
// the pollIntervalMs of the latest answer (taken within 10 ms and 30 s;
// 1 s when it does not say), so that a quick task is read soon after its
// end without polling a long one more often than its server asks. A task in
// input_required has its requests answered by input, each key once (a key
// seen again in a later poll is not asked again), and the answers sent
// with tasks/update (again after a transient error, without asking
// again). A failed task is a [*TaskFailure] (which matches
// [ErrOutcomeUnknown] too when the server says that whether it took
// effect is unknown: its instance stopped while it ran), a cancelled one
// [ErrTaskCancelled]. An error of rpc for which transient returns true (a
// server restarting, a connection lost) is waited out as a poll is, until
// ctx ends: the task lives in the server's store, and a later AwaitTask
// with the same ID resumes it. Any other error of rpc or input ends
// AwaitTask with that error, and so does ctx.
func AwaitTask(ctx context.Context, taskID string,
	rpc func(ctx context.Context, method string, params map[string]any) (json.RawMessage, error),
	input func(ctx context.Context, requests map[string]json.RawMessage) (map[string]json.RawMessage, error),
	transient func(error) bool,
) (json.RawMessage, error) {
	if taskID == "" || rpc == nil {
		return nil, errors.New("mcptoken: AwaitTask: no task ID or rpc")
	}
	answered := map[string]bool{}          // keys whose answers were delivered
	unsent := map[string]json.RawMessage{} // answers not delivered yet
	wait, backoff := defaultTaskPoll, minTaskPoll
	for {
		raw, err := rpc(ctx, "tasks/get", map[string]any{"taskId": taskID})
		if err != nil {
			if ctx.Err() != nil || transient == nil || !transient(err) {
				return nil, err
			}
			if err := sleepCtx(ctx, wait); err != nil {
				return nil, err
			}
			continue
		}
		var t detailedTask
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("mcptoken: AwaitTask: tasks/get answered no task: %w", err)
		}
		if t.PollIntervalMs != nil {
			wait = min(max(time.Duration(*t.PollIntervalMs)*time.Millisecond, minTaskPoll), maxTaskPoll)
		}
		switch t.Status {
		case taskCompleted:
			if len(t.Result) == 0 {
				return nil, errors.New("mcptoken: AwaitTask: a completed task without a result")
			}
			return t.Result, nil
		case taskFailed:
			f := &TaskFailure{Code: codeInternal, Message: "the task failed without an error"}
			if t.Error != nil {
				f.Code, f.Message = t.Error.Code, t.Error.Message
				var data struct {
					Effect string `json:"ctokenEffect"`
				}
				if json.Unmarshal(t.Error.Data, &data) == nil && (data.Effect == effectNone || data.Effect == effectUnknown) {
					f.effect = data.Effect
				}
			}
			if f.effect == effectUnknown {
				return nil, &unknownFailure{f}
			}
			return nil, f
		case taskCancelled:
			return nil, ErrTaskCancelled
		case taskInputRequired:
			need := map[string]json.RawMessage{}
			for key, r := range t.InputRequests {
				if _, ok := unsent[key]; !ok && !answered[key] {
					need[key] = r
				}
			}
			if len(need) > 0 {
				if input == nil {
					return nil, errors.New("mcptoken: AwaitTask: the task asks for input and no input handler was given")
				}
				answers, err := input(ctx, need)
				if err != nil {
					return nil, err
				}
				for key, a := range answers {
					unsent[key] = a
				}
			}
			if len(unsent) > 0 {
				_, err := rpc(ctx, "tasks/update", map[string]any{"taskId": taskID, "inputResponses": unsent})
				switch {
				case err == nil:
					for key := range unsent {
						answered[key] = true
					}
					clear(unsent)
					continue // the answers may end the input at once
				case ctx.Err() != nil || transient == nil || !transient(err):
					return nil, err
				}
				// Not delivered: sent again after the next poll.
			}
		}
		if err := sleepCtx(ctx, min(backoff, wait)); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, maxTaskPoll)
	}
}
