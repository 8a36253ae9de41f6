package mcptoken

// The server side of the Tasks extension: Tasks, its configuration, a
// task's creation, polls, updates and cancels. Its store entries are in
// tasks_entries.go, its runs in tasks_runner.go, its wire in tasks_wire.go.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// TasksExtension is the identifier of the MCP Tasks extension, under which a
// server advertises it (capabilities.extensions) and a client declares it.
const TasksExtension = "io.modelcontextprotocol/tasks"

// CodeMissingCapability is the JSON-RPC code of a request a server cannot
// serve to a client that did not declare a capability it requires (-32021).
const CodeMissingCapability = -32021

// TasksConfig configures [NewTasks].
type TasksConfig struct {
	// Keys seals task IDs and the outcomes the store keeps; required. Every
	// instance of a fleet uses the same keys.
	Keys *ctoken.Keyring
	// Store keeps every task; it must be a replay.Recorder that is also a
	// replay.Renewer and a replay.Reader (replay.MemoryStore, redisstore,
	// pgstore, sqlitestore): a poll reads, writing nothing but the failure
	// of a task whose instance stopped. A fleet shares one store, so any instance answers for
	// any task.
	Store replay.Recorder
	// TTL is how long a task and its outcome stay readable from its
	// creation (ttlMs); 0 means one hour. Its ID expires with it, and a
	// tool still running then has its context cancelled.
	TTL time.Duration
	// Hold is the lease of the running instance, renewed every Hold/3: a
	// task whose instance stopped is reported failed within Hold. 0 means
	// 6 seconds.
	Hold time.Duration
	// PollInterval is the longest polling interval suggested to clients
	// (pollIntervalMs: a running task's age, from 10 ms up to it), and how
	// often a running task looks for its answers and for a cancel made on
	// another instance. 0 means 500 milliseconds.
	PollInterval time.Duration
	// Caller names the authenticated caller of an HTTP request, the one a
	// task is bound to; required by [Tasks.Handler], which refuses a
	// request for which it returns an error or "". It sees only the
	// request (an authentication middleware in front of the handler, or a
	// fixed caller), not what the SDK derives from it later.
	Caller func(r *http.Request) (string, error)
	// InsecureSkipLocalhostProtection turns off the DNS-rebinding check of
	// [Tasks.Handler], which, as both Go SDKs do by default, refuses with
	// 403 a request that arrived on a loopback address with a Host header
	// that is not loopback. Set it only where the SDK's own check is off
	// too (a reverse proxy on the same host that forwards the public Host).
	InsecureSkipLocalhostProtection bool
	// Logger is told of every failure: a store that could not answer, a
	// tool that failed or panicked, a lease lost (never a key, a caller or
	// a task ID). Nil means slog.Default().
	Logger *slog.Logger
}

// Tasks runs task-augmented tools durably and answers the Tasks
// extension's methods. It is safe for concurrent use. Build it with
// [NewTasks].
type Tasks struct {
	ids     *ctoken.CursorIssuer
	seal    *recordSealer
	store   replay.Recorder
	renew   replay.Renewer
	read    replay.Reader
	ttl     time.Duration
	hold    time.Duration
	poll    time.Duration
	caller  func(*http.Request) (string, error)
	anyHost bool
	log     *slog.Logger
	maxRuns int // maxTaskRuns; fewer in tests

	mu    sync.RWMutex
	tools map[string]TaskTool
	// running are the tasks this instance runs, by entry; once closed
	// (Shutdown), no task is created.
	running map[string]*runner
	closed  bool
}

// TaskTool is a tool that runs as a task.
type TaskTool struct {
	// Name is the tool's name, as registered with the SDK.
	Name string
	// Required makes the tool refuse a client that did not declare the
	// extension with [CodeMissingCapability]; otherwise such a client's
	// call goes to the SDK, which runs the tool synchronously.
	Required bool
	// Ask, when set, is asked before a task is created: a non-empty map of
	// input requests is answered at once as an input_required result, and
	// the client's retry with the answers (TaskCall.InputResponses) creates
	// the task.
	Ask func(call *TaskCall) map[string]json.RawMessage
	// Run does the tool's work and returns its CallToolResult as JSON; a
	// tool error is a result with isError true. An error (or a panic) fails
	// the task with a JSON-RPC internal error. Its context is cancelled
	// when the task is cancelled (at once on this instance, within a
	// PollInterval from another), its lease is lost, its TTL ends or
	// [Tasks.Shutdown] hands it over; a Run that returns a result all the
	// same completes the task, and one that ignores its context and acts
	// after its task was reported failed acts on a task a client reads as
	// failed.
	Run func(ctx context.Context, call *TaskCall) (json.RawMessage, error)
	// Transactional runs Run in a transaction of the Store, which must be
	// a replay.WorkAcquirer (pgstore): the task's entry is taken in it,
	// and the tool's writes (through pgstore.TxFrom on Run's context) commit with its outcome, or, on
	// an error or panic of Run, a cancel or the TTL's end, are rolled back
	// and the task recorded failed (or cancelled). [TaskCall.Input] fails
	// in it: no transaction stays open while a client answers. tasks/cancel
	// stops it only on the instance that runs it. A store whose Work holds
	// its only writer (sqlitestore, a [replay.OneWriter]) is refused: one
	// such task would stall every other task, creation and poll.
	// A keyed task (a call with an idempotency key) that failed with its
	// writes rolled back, or whose instance stopped mid-transaction, is
	// run again by the next call under the key, up to 65 536 runs a key.
	Transactional bool
}

// TaskCall is the call a task runs.
type TaskCall struct {
	// Tool is the tool's name.
	Tool string
	// Caller is the caller the task is bound to.
	Caller string
	// Arguments are the call's arguments, as sent.
	Arguments json.RawMessage
	// InputResponses are the answers the creating tools/call carried.
	InputResponses map[string]json.RawMessage

	input func(ctx context.Context, requests map[string]json.RawMessage) (map[string]json.RawMessage, error)
	// key is the call's idempotency key ("": none), args its arguments'
	// fingerprint: Create keys the task by caller, tool and key.
	key  string
	args [32]byte
}

// Input asks the client for input: the task reports input_required with
// requests until tasks/update has answered every key, and Input returns the
// answers. It fails when ctx ends, outside a running task, and for a key
// an earlier Input of the task used (a key names one request for the
// task's whole life). Calls from several goroutines are asked one after
// another.
func (c *TaskCall) Input(ctx context.Context, requests map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	if c == nil || c.input == nil {
		return nil, errors.New("mcptoken: TaskCall.Input outside a running task")
	}
	return c.input(ctx, requests)
}

// Task status values.
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskFailed        = "failed"
	taskCancelled     = "cancelled"
)

const (
	taskSealLabel      = "ctoken.mcp task record xaes-256-gcm key"
	taskSession        = "ctoken.mcp task"
	taskIDScope        = "mcp.task"
	codeInternal       = -32603
	codeInvalid        = -32602
	codeInvalidRequest = -32600
	codeParse          = -32700
	maxTaskInputs      = 64
)

// ErrTaskInvalid reports a task ID that is malformed, forged, another
// caller's or expired: the client is told -32602 and nothing is consumed.
var ErrTaskInvalid = errors.New("mcptoken: task not found")

// errTaskConfig reports an invalid TasksConfig.
var errTaskConfig = errors.New("mcptoken: invalid TasksConfig")

// NewTasks returns the Tasks of cfg, or an error matching ctoken.ErrConfig
// (or ctoken.ErrNoKey without Keys) for an unusable configuration.
func NewTasks(cfg TasksConfig) (*Tasks, error) {
	if cfg.Keys == nil {
		return nil, fmt.Errorf("%w: TasksConfig.Keys is nil", ctoken.ErrNoKey)
	}
	renew, ok := cfg.Store.(replay.Renewer)
	read, ok2 := cfg.Store.(replay.Reader)
	if cfg.Store == nil || !ok || !ok2 {
		return nil, fmt.Errorf("%w: TasksConfig.Store must be a replay.Recorder, a replay.Renewer and a replay.Reader", ctoken.ErrConfig)
	}
	t := &Tasks{store: cfg.Store, renew: renew, read: read, ttl: cfg.TTL, hold: cfg.Hold, poll: cfg.PollInterval, caller: cfg.Caller, anyHost: cfg.InsecureSkipLocalhostProtection, log: cfg.Logger, maxRuns: maxTaskRuns, tools: map[string]TaskTool{}, running: map[string]*runner{}}
	if t.ttl == 0 {
		t.ttl = time.Hour
	}
	if t.hold == 0 {
		t.hold = 6 * time.Second
	}
	if t.poll == 0 {
		t.poll = 500 * time.Millisecond
	}
	if t.ttl < 0 || t.hold < 3*time.Millisecond || t.poll < time.Millisecond || t.ttl < t.hold {
		return nil, fmt.Errorf("%w: TasksConfig.TTL, Hold or PollInterval out of range", ctoken.ErrConfig)
	}
	if b, ok := cfg.Store.(replay.Bounded); ok && b.Horizon() > 0 && b.Horizon() < t.ttl {
		return nil, fmt.Errorf("%w: TasksConfig.TTL %v is longer than the store's horizon %v", ctoken.ErrConfig, t.ttl, b.Horizon())
	}
	ids, err := newTaskIDs(cfg.Keys, t.ttl, time.Now)
	if err != nil {
		return nil, err
	}
	t.ids = ids
	if t.seal, ok = newSealer(cfg.Keys, taskSealLabel); !ok {
		return nil, fmt.Errorf("%w: TasksConfig.Keys holds no key", ctoken.ErrConfig)
	}
	return t, nil
}

// newTaskIDs returns the issuer of the task IDs of a TTL. A cursor's issue
// time is stamped in whole seconds, up to a second before the task's
// creation: its ID lives a second longer, so that it outlives the task,
// whose end the store decides.
func newTaskIDs(keys *ctoken.Keyring, ttl time.Duration, now func() time.Time) (*ctoken.CursorIssuer, error) {
	return ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: keys, TTL: ttl + time.Second, Session: []byte(taskSession), Seal: true, Now: now})
}

// Add registers tool as task-augmented; a second tool of the same name
// replaces the first. It fails for a tool without a name or Run, and with
// an error matching ctoken.ErrConfig for a Transactional tool on a Store
// that is not a replay.WorkAcquirer, or whose Work holds its only writer.
func (t *Tasks) Add(tool TaskTool) error {
	if tool.Name == "" || tool.Run == nil {
		return fmt.Errorf("%w: a TaskTool needs a Name and a Run", errTaskConfig)
	}
	if tool.Transactional {
		if _, err := t.workStore(tool.Name); err != nil {
			return err
		}
	}
	t.mu.Lock()
	t.tools[tool.Name] = tool
	t.mu.Unlock()
	return nil
}

// logger returns the Logger, or slog.Default().
func (t *Tasks) logger() *slog.Logger {
	if t.log != nil {
		return t.log
	}
	return slog.Default()
}

// fail logs a failure of a task of tool.
func (t *Tasks) fail(level slog.Level, msg, tool string, err error) {
	attrs := []slog.Attr{slog.String("tool", tool)}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	t.logger().LogAttrs(context.Background(), level, "mcptoken: "+msg, attrs...)
}

func (t *Tasks) tool(name string) (TaskTool, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	tool, ok := t.tools[name]
	return tool, ok
}

// taskRef is what a task ID seals.
type taskRef struct {
	Nonce   []byte `cbor:"1,keyasint"`
	Token   string `cbor:"2,keyasint"`
	Tool    string `cbor:"3,keyasint"`
	Created int64  `cbor:"4,keyasint"` // unix milliseconds
	// Args is the arguments' fingerprint of a task keyed by an idempotency
	// key; an ID without Token names such a task for a retry of its call,
	// whose cancel is a marker entry the running instance looks for.
	Args []byte `cbor:"5,keyasint,omitempty"`
}

// keyedTask returns the entry nonce of the task of caller's call of tool
// with an idempotency key: 16 bytes of callHash under a domain of its own.
func keyedTask(caller, tool, key string) []byte {
	sum := callHash("ctoken/mcp keyed task v1\x00", caller, tool, key)
	return sum[:16]
}

// taskRun returns the entry nonce of run n (from 0) of the keyed task
// whose first run's nonce is first.
func taskRun(first []byte, n int) []byte {
	if n == 0 {
		return first
	}
	sum := sha256.Sum256(binary.BigEndian.AppendUint32(append([]byte("ctoken/mcp keyed task run v1\x00"), first...), uint32(n)))
	return sum[:16]
}

func taskScope(caller string) ctoken.CursorScope {
	return ctoken.CursorScope{ToolID: taskIDScope, CallerID: caller}
}

// open returns the task an ID names for caller, or ErrTaskInvalid.
func (t *Tasks) open(caller, id string) (taskRef, error) {
	ref, _, err := ctoken.VerifyState[taskRef](t.ids, id, taskScope(caller))
	if err != nil || len(ref.Nonce) != 16 || ref.Token == "" && len(ref.Args) != 32 || len(ref.Args) != 0 && len(ref.Args) != 32 {
		return taskRef{}, ErrTaskInvalid
	}
	return ref, nil
}

// outcome is a task's terminal record (sealed in the store).
type outcome struct {
	Status  string          `json:"status"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
	Updated int64           `json:"updated"`
	// Effect is, for a failed task, what is certain of its effect:
	// effectNone (its transaction rolled back: nothing happened, and a
	// keyed task is run again by the next call under its key) or
	// effectUnknown (its instance stopped while it ran); "" when the
	// failure is the tool's own.
	Effect string `json:"effect,omitempty"`
}

// Values of outcome.Effect, sent as the failed task's error data
// {"ctokenEffect": ...}.
const (
	effectNone    = "none"
	effectUnknown = "unknown"
)

// maxTaskRuns bounds the runs of one keyed task (Tasks.maxRuns): its
// first and the reruns of failures that kept nothing (or that AllowRerun
// allowed). A call finds the latest in 2·log2(maxTaskRuns) reads at most
// (lastRun).
const maxTaskRuns = 1 << 16

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// Messages of a task whose instance stopped while it ran.
const (
	msgStoppedUnknown = "the server running the task stopped: whether the task took effect is unknown; " +
		"check where the tool acts whether it did, and if not, ask the server's operator to allow a rerun " +
		"of the idempotency key (mcptoken Tasks.RerunHandler), then call again under the same key, never a new one"
	msgStoppedNone = "the server running the task stopped mid-transaction"
)

// taskFP is the fingerprint of every task entry: it tells a task's entry
// from one leased without it.
var taskFP = []byte("mcp.task")

// TaskState is a task as tasks/get reports it.
type TaskState struct {
	ID            string
	Status        string
	Created       time.Time
	Updated       time.Time
	InputRequests map[string]json.RawMessage
	Result        json.RawMessage
	ErrorCode     int
	ErrorMessage  string

	effect string // a failure's outcome.Effect, sent as its error's data
}

// Create creates a task for call durably (one write to the store) and
// starts running it in the background, with ctx's values (such as the
// request's auth) but not its cancellation or deadline; it returns the
// task's state once any instance's [Tasks.Get] would find it.
func (t *Tasks) Create(ctx context.Context, tool TaskTool, call *TaskCall) (TaskState, error) {
	t.mu.RLock()
	closed := t.closed
	t.mu.RUnlock()
	if closed {
		return TaskState{}, errTasksClosed
	}
	ref := taskRef{Nonce: make([]byte, 16), Tool: tool.Name}
	if call.key != "" {
		// Keyed: a retry of the call finds this task instead of creating
		// another one.
		ref.Nonce, ref.Args = keyedTask(call.Caller, tool.Name, call.key), call.args[:]
		ref.Created = time.Now().UnixMilli()
	} else if _, err := rand.Read(ref.Nonce); err != nil {
		return TaskState{}, err
	} else {
		ref.Created = time.Now().UnixMilli()
	}
	first := ref.Nonce
	var held time.Time // the lease lasts until held+Hold at least
	var rec replay.Record
	var work replay.Work
	for run := 1; ; run++ {
		// A keyed task's run n+1 has an entry of its own, the store's
		// done entries being final: it follows a run that kept nothing.
		held = time.Now()
		var err error
		if tool.Transactional {
			rec, work, err = t.acquireWork(ctx, ref)
		} else {
			rec, err = t.store.AcquireRecord(ctx, ref.entry(), t.hold, ref.fp())
		}
		if err != nil {
			return TaskState{}, err
		}
		if rec.State == replay.LeaseAcquired {
			break
		}
		if call.key == "" {
			return TaskState{}, fmt.Errorf("mcptoken: a fresh task entry was %s", rec.State)
		}
		st, next, rerun, err := t.again(ctx, ref, call.Caller, rec, run < t.maxRuns)
		if err != nil || !rerun {
			return st, err
		}
		ref = next
		if run == 1 {
			// Go on at the key's latest run: the ones between ended.
			last, err := t.lastRun(ctx, first)
			if err != nil {
				return TaskState{}, err
			}
			run = max(run, last)
		}
		ref.Nonce = taskRun(first, run)
	}
	now := ref.created() // as tasks/get reports it
	ref.Token = rec.Token
	id, err := ctoken.IssueState(t.ids, taskScope(call.Caller), 0, ref)
	var r *runner
	var rctx context.Context
	if err == nil {
		// Registered before anything is recorded: a Shutdown meanwhile
		// refuses the task before its run began.
		r, rctx, err = t.register(ctx, ref, work != nil)
	}
	fresh := true
	if err == nil && work == nil {
		if fresh, err = t.begin(ctx, ref, rec.Token); err == nil && fresh {
			// The lease must still be held once the run began: a creation
			// that outlived it leaves the task to whoever took it over.
			held = time.Now()
			err = t.renew.RenewLease(ctx, ref.entry(), rec.Token, t.hold)
		}
	}
	if err != nil || !fresh {
		if r != nil {
			t.unregister(r)
		}
		if work != nil {
			_ = work.Rollback(context.WithoutCancel(ctx))
		} else if err != nil {
			_ = t.store.ReleaseLease(context.WithoutCancel(ctx), ref.entry(), rec.Token)
		}
		if err == nil { // recorded failed by begin: read it as a retry would
			return t.Create(ctx, tool, call)
		}
		return TaskState{}, err
	}
	call.Tool = tool.Name
	if work != nil {
		go t.runWork(rctx, r, tool, call, work)
	} else {
		go t.run(rctx, r, held, tool, call)
	}
	return TaskState{ID: id, Status: taskWorking, Created: now, Updated: now}, nil
}

// sealOutcome returns o sealed as a task entry's result.
func (t *Tasks) sealOutcome(ref taskRef, o outcome) ([]byte, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return t.seal.seal(ref.entry(), taskFP, b)
}

// finish records o as the task's outcome with the given lease token.
func (t *Tasks) finish(ref taskRef, token string, o outcome) error {
	sealed, err := t.sealOutcome(ref, o)
	if err != nil {
		// A result too large to keep fails the task instead.
		o = outcome{Status: taskFailed, Error: &rpcError{Code: codeInternal, Message: "internal error: the result is too large to keep"}, Updated: o.Updated}
		if sealed, err = t.sealOutcome(ref, o); err != nil {
			return err
		}
	}
	until := ref.created().Add(t.ttl)
	ctx, cancel := context.WithTimeout(context.Background(), t.hold)
	defer cancel()
	err = t.store.ConfirmRecord(ctx, ref.entry(), token, until, ref.fp(), sealed)
	if errors.Is(err, replay.ErrExpired) {
		// The task outlived its TTL: nobody can ask for it any more.
		_ = t.store.ReleaseLease(ctx, ref.entry(), token)
		return ErrTaskInvalid
	}
	return err
}

// cancelled reports whether the task was cancelled on an instance that
// does not run it (its cancel mark).
func (t *Tasks) cancelled(ctx context.Context, ref taskRef) (bool, error) {
	_, ok, err := t.peek(ctx, ref, ref.cancelMark())
	return ok, err
}

// sleepCtx waits d, or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// Get returns the state of the task id names for caller, from the store:
// [ErrTaskInvalid] for an ID that is not caller's live task.
func (t *Tasks) Get(ctx context.Context, caller, id string) (TaskState, error) {
	ref, err := t.open(caller, id)
	if err != nil {
		return TaskState{}, err
	}
	st, _, err := t.state(ctx, ref)
	st.ID = id
	return st, err
}

// state reads a task; k is the round whose requests are pending (-1: none).
func (t *Tasks) state(ctx context.Context, ref taskRef) (TaskState, int, error) {
	st := TaskState{Status: taskWorking, Created: ref.created(), Updated: ref.created()}
	for {
		rec, err := t.read.ReadRecord(ctx, ref.entry())
		if err == nil && rec.State == replay.LeaseFree {
			// No live lease and no outcome: its instance stopped. Take
			// the entry to record that (another reader may be first).
			rec, err = t.store.AcquireRecord(ctx, ref.entry(), t.hold, ref.fp())
		}
		if err != nil {
			return TaskState{}, -1, err
		}
		switch rec.State {
		case replay.LeaseAcquired:
			// The running instance stopped and its lease lapsed: record it.
			t.fail(slog.LevelWarn, "a task's instance stopped before its end; the task is recorded failed", ref.Tool, nil)
			// Failed even if it was cancelled meanwhile: how far its tool
			// got is unknown (nothing, for a Transactional tool).
			o := outcome{Status: taskFailed, Error: &rpcError{Code: codeInternal, Message: msgStoppedUnknown}, Updated: time.Now().UnixMilli(), Effect: effectUnknown}
			if tool, ok := t.tool(ref.Tool); ok && tool.Transactional {
				// Its transaction ended with its instance (nothing kept),
				// or its runner rolled it back and is about to record
				// the outcome it left.
				o.Error.Message, o.Effect = msgStoppedNone, effectNone
				if b, ok, err := t.peek(ctx, ref, ref.endedMark()); err == nil && ok {
					var left outcome
					if json.Unmarshal(b, &left) == nil {
						o = left
					}
				}
			}
			if err := t.finish(ref, rec.Token, o); err != nil && !errors.Is(err, replay.ErrLeaseLost) {
				_ = t.store.ReleaseLease(context.WithoutCancel(ctx), ref.entry(), rec.Token)
				return TaskState{}, -1, err
			}
			continue // read what was recorded
		case replay.LeaseDone:
			b, err := t.seal.open(ref.entry(), taskFP, rec.Result)
			var o outcome
			if err == nil {
				err = json.Unmarshal(b, &o)
			}
			if err != nil {
				return TaskState{}, -1, fmt.Errorf("mcptoken: task record %w", errRecordForged)
			}
			st.Status, st.Result, st.Updated, st.effect = o.Status, o.Result, time.UnixMilli(o.Updated), o.Effect
			if o.Error != nil {
				st.ErrorCode, st.ErrorMessage = o.Error.Code, o.Error.Message
			}
			return st, -1, nil
		}
		// Busy: working (a cancelled task too, until its runner records
		// how it ended), or waiting for input in its latest round. A
		// Transactional task has no rounds.
		if tool, ok := t.tool(ref.Tool); ok && tool.Transactional {
			return st, -1, nil
		}
		if r := t.local(ref); r != nil && !r.asked.Load() {
			// Run here by a tool that has not asked: no round is
			// recorded, so a poll is the one read of the entry.
			return st, -1, nil
		}
		k, req := -1, map[string]json.RawMessage(nil)
		for i := 0; ; i++ {
			b, ok, err := t.peek(ctx, ref, ref.round(i))
			if err != nil {
				return TaskState{}, -1, err
			}
			if !ok {
				break
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				return TaskState{}, -1, err
			}
			k, req = i, m
		}
		if k < 0 {
			return st, -1, nil
		}
		pending := map[string]json.RawMessage{}
		for key, r := range req {
			_, ok, err := t.peek(ctx, ref, ref.answer(k, key))
			if err != nil {
				return TaskState{}, -1, err
			}
			if !ok {
				pending[key] = r
			}
		}
		if len(pending) > 0 {
			st.Status, st.InputRequests = taskInputRequired, pending
			return st, k, nil
		}
		return st, -1, nil
	}
}

// Update delivers answers to the input requests the task id names is
// waiting for; answers to keys it is not waiting for are ignored.
func (t *Tasks) Update(ctx context.Context, caller, id string, responses map[string]json.RawMessage) error {
	ref, err := t.open(caller, id)
	if err != nil {
		return err
	}
	st, k, err := t.state(ctx, ref)
	if err != nil || k < 0 {
		return err
	}
	for key, v := range responses {
		if _, ok := st.InputRequests[key]; !ok || !json.Valid(v) {
			continue
		}
		if err := t.put(ctx, ref, ref.answer(k, key), v); err != nil {
			return err
		}
	}
	return nil
}

// Cancel cancels the task id names: the tool of a task this instance runs
// has its context cancelled at once; a task another instance runs is
// marked cancelled in the store, which that instance looks for every
// PollInterval. The task ends cancelled unless its tool completes first
// (then completed); a finished task is left as it is. A Transactional
// task is cancelled only by the instance running it (its writes rolled
// back); on another, Cancel fails while the task runs.
func (t *Tasks) Cancel(ctx context.Context, caller, id string) error {
	ref, err := t.open(caller, id)
	if err != nil {
		return err
	}
	if r := t.local(ref); r != nil {
		r.stop(errTaskCancelled)
		// A tool that honours its context has usually ended within a
		// poll: a tasks/get after the acknowledgement then reads it.
		tm := time.NewTimer(t.poll)
		defer tm.Stop()
		select {
		case <-r.done:
		case <-tm.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	st, _, err := t.state(ctx, ref)
	if err != nil || st.Status != taskWorking && st.Status != taskInputRequired {
		return err // finished: left as it is
	}
	if tool, ok := t.tool(ref.Tool); ok && tool.Transactional {
		// Run by another instance, whose transaction holds the entry (and
		// SQLite's writer).
		return errors.New("mcptoken: a Transactional task is cancelled only by the instance running it")
	}
	return t.put(ctx, ref, ref.cancelMark(), []byte("true"))
}
