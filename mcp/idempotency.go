package ctokenmcp

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// IdempotencyOptions configures [NewIdempotency]: the store, where the key
// comes from, the durations and Transactional, as documented at
// [mcptoken.IdempotencyConfig]; Caller (nil means TokenUserID) and Logger.
type IdempotencyOptions = mcptoken.IdempotencyOptions[CallerFunc]

// Codes in the data member of the errors an idempotent tool sends (beside
// [StateExpired] and [StateInvalid]), local to ctoken.
const (
	// KeyReused (1024) is in the -32602 error of a call whose idempotency
	// key this caller used for this tool with other arguments.
	KeyReused = mcptoken.CodeKeyReused
	// InProgress (1025) is in the -32603 error of a call whose key's first
	// call still runs, or whose tool had no effect
	// ([mcptoken.ErrNoEffect]); data also holds "retryAfterMs": retry
	// the same call with the same key after it.
	InProgress = mcptoken.CodeInProgress
	// OutcomeUnknown (1028) is in the -32603 error of a call whose tool ran
	// and whose transaction's commit has an unknown outcome; data also
	// holds "retryAfterMs": retry the same call with the same key after
	// it (never under a new key) to get the result, or have it run if
	// nothing was kept.
	OutcomeUnknown = mcptoken.CodeOutcomeUnknown
	// ToolFailed (1030) is in the data of the error of a tool that began
	// and failed, which [Idempotency.Wrap] recorded and sends to the
	// first call and every retry: [CallTool] ends with it, matching
	// [mcptoken.ErrToolFailed].
	ToolFailed = mcptoken.CodeToolFailed
)

// Idempotency makes the tool handlers it wraps idempotent: see [NewIdempotency].
// It is safe for concurrent use.
type Idempotency struct {
	core   *mcptoken.Idempotency
	caller CallerFunc
}

// NewIdempotency returns an Idempotency for opts, or an error matching
// ctoken.ErrConfig that names the invalid field (see
// [mcptoken.NewIdempotency]).
func NewIdempotency(opts IdempotencyOptions) (*Idempotency, error) {
	core, caller, err := mcptoken.NewIdempotencyFor(opts, integration)
	if err != nil {
		return nil, err
	}
	return &Idempotency{core: core, caller: callerOr(caller)}, nil
}

// Wrap returns a tool handler that runs h at most once per authenticated
// caller, tool and idempotency key, as [mcptoken.Idempotency.Call] says,
// and answers a retry with the first result, byte for byte (a result with
// IsError set is a result, recorded and replayed). Register it with
// mcp.Server.AddTool; a typed handler (mcp.AddTool) is wrapped with
// [WrapFor]. The key comes from the argument named by KeyArgument (declare
// it in the tool's input schema) and/or from _meta
// [mcptoken.MetaIdempotencyKey]. A -32602 error from h says the tool did
// not begin, and one matching [mcptoken.ErrNoEffect] that it had no
// effect: neither is recorded, and the second is sent as -32603 with data
// {"ctokenCode":1025,"retryAfterMs":N}, which [CallTool] retries under the
// same key; so is an error that is the end of a context ctoken ended (see
// [mcptoken.ErrNoEffect]). Any other error is recorded, and sent as
// recorded to the first call and every retry: -32603 with data
// {"ctokenCode":1030} ([ToolFailed]; a *jsonrpc.Error keeps its code, and
// its data when it has some), which [CallTool] returns matching
// [mcptoken.ErrToolFailed].
//
// Refusals, which run nothing and consume nothing: a missing (unless
// NonIdempotentWithoutKey) or malformed key is -32602; a key used with
// other arguments is -32602 with data {"ctokenCode":1024} ([KeyReused]);
// a key whose first call still runs is, after waiting up to Wait, -32603
// with data {"ctokenCode":1025,"retryAfterMs":N} ([InProgress]; read it
// with [RetryAfter]); a request without an authenticated caller, a store
// failure, and the retry of a call whose result was too large to record
// are -32603. A zero Idempotency refuses every call with -32603. With
// Transactional, a commit whose outcome is unknown (the tool ran) is
// -32603 with data {"ctokenCode":1028,"retryAfterMs":N} ([OutcomeUnknown]).
func (i *Idempotency) Wrap(h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if h == nil {
			return nil, errMisconfigured()
		}
		return call(ctx, i, req, toolRules, func(hctx context.Context) (*mcp.CallToolResult, error) { return h(hctx, req) })
	}
}

// toolRules are [Idempotency.Wrap]'s rules for the core.
var toolRules = mcptoken.ToolRules[mcp.CallToolResult]{
	Failure:    failure,
	NoResult:   &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "tool returned no result"},
	NeedsInput: needsInput,
	Replay:     replayMarked,
	Refused:    func(err error) (*mcp.CallToolResult, error) { return nil, idempotencyError(err) },
}

// typedRecord is what [WrapFor] records: the handler's result and output.
type typedRecord[Out any] struct {
	Result *mcp.CallToolResult `json:"r,omitempty"`
	Output Out                 `json:"o"`
}

// WrapFor is [Idempotency.Wrap] for a typed handler, registered with
// mcp.AddTool: it records the handler's result and output (which must
// survive a JSON round trip: a struct, a map, a slice) and returns the
// recorded ones to the first call and every retry, from which the SDK
// builds the same CallToolResult each time. A refusal is a *jsonrpc.Error,
// which the SDK sends as it is; an error from h is, as the SDK does with
// any error of a typed handler, a tool error result, recorded as Wrap
// records h's errors (a -32602 releases the key; an error matching
// [mcptoken.ErrNoEffect] releases it and is sent as Wrap sends it).
func WrapFor[In, Out any](i *Idempotency, h mcp.ToolHandlerFor[In, Out]) mcp.ToolHandlerFor[In, Out] {
	rules := mcptoken.ToolRules[typedRecord[Out]]{
		Failure:    failure,
		NeedsInput: func(r *typedRecord[Out]) bool { return r.Result != nil && needsInput(r.Result) },
		Replay:     replayFailure,
		Refused:    func(err error) (*typedRecord[Out], error) { return nil, idempotencyError(err) },
	}
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		if h == nil {
			return nil, zero, errMisconfigured()
		}
		rec, err := call(ctx, i, req, rules, func(hctx context.Context) (*typedRecord[Out], error) {
			res, out, err := h(hctx, req, in)
			return &typedRecord[Out]{Result: res, Output: out}, err
		})
		if err != nil {
			return nil, zero, err
		}
		return rec.Result, rec.Output, nil
	}
}

// needsInput reports whether res asks the client for input.
func needsInput(res *mcp.CallToolResult) bool {
	return len(res.InputRequests) > 0 || res.NeedsInput()
}

// errMisconfigured is the error of a zero Idempotency or a nil handler.
func errMisconfigured() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "idempotent tool misconfigured"}
}

// call runs run, the handler of req, under i with rules: what the handler
// returns.
func call[R any](ctx context.Context, i *Idempotency, req *mcp.CallToolRequest, rules mcptoken.ToolRules[R], run func(context.Context) (*R, error)) (*R, error) {
	if i == nil || i.core == nil || req == nil || req.Params == nil {
		return nil, errMisconfigured()
	}
	caller, err := i.caller(ctx, req)
	if err != nil {
		caller = "" // refused by the core, and logged, when the call carries a key
	}
	return rules.Call(ctx, i.core, caller, req.Params.Name, req.Params.Arguments, mcptoken.MetaKeyOf(req.Params.Meta), run)
}

// failureRecord is what is recorded of a tool's error: its JSON-RPC code
// (0 for an error of another type), message and data, the data as its
// bytes (base64 in the record) so that it is replayed byte for byte,
// whatever it holds: a json.RawMessage member would be compacted and
// HTML-escaped ({"&":0} replayed as {"\u0026":0}). OldData is the data
// of a record written before Raw existed, replayed as it was recorded.
type failureRecord struct {
	Code    int64           `json:"c,omitempty"`
	Message string          `json:"m"`
	Raw     []byte          `json:"b,omitempty"`
	OldData json.RawMessage `json:"d,omitempty"`
}

// failure returns what a handler's error is to the engine: a -32602 as it
// is (a validation failure: the tool did not begin, the key is released),
// any other wrapped in a [mcptoken.Failure] that records it.
func failure(err error) error {
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code == jsonrpc.CodeInvalidParams {
		return err
	}
	rec := failureRecord{Message: err.Error()}
	if we != nil {
		rec = failureRecord{Code: we.Code, Message: we.Message, Raw: we.Data}
	}
	b, _ := json.Marshal(rec) // a string, an int and bytes: never fails
	return &mcptoken.Failure{Record: b, Err: err}
}

// replayFailure returns the error of a recorded failure: the JSON-RPC
// error it was, or an error with its text, which the SDK sends as it sent
// the first.
func replayFailure(b []byte) error {
	var rec failureRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "recorded failure unreadable"}
	}
	if rec.Code != 0 {
		data := json.RawMessage(rec.Raw)
		if data == nil {
			data = rec.OldData
		}
		return &jsonrpc.Error{Code: rec.Code, Message: rec.Message, Data: data}
	}
	return errors.New(rec.Message)
}

// replayMarked is replayFailure for [Idempotency.Wrap], marked as the
// tool's recorded failure: an error of another type than jsonrpc.Error
// (which go-sdk would send with code 0) is -32603 with data
// {"ctokenCode":1030}, and a JSON-RPC error without data gets that data;
// one whose data is the tool's own is sent as it is, unmarked.
func replayMarked(b []byte) error {
	err := replayFailure(b)
	we, ok := err.(*jsonrpc.Error)
	switch {
	case !ok:
		we = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	case len(we.Data) > 0:
		return we
	}
	we.Data, _ = json.Marshal(idempotencyData{Code: ToolFailed})
	return we
}

// idempotencyData is the data member of an idempotent tool's refusal.
type idempotencyData struct {
	Code         int   `json:"ctokenCode"`
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// Messages of refusals that say what happened and what to do.
const (
	msgNoEffect    = "nothing was recorded and the key is free (the tool had no effect, or returned the end of a context the server ended): retry it with the same idempotency key after retryAfterMs"
	msgKeyReused   = "idempotency key reused with other arguments: this call did not run, but the first call under this key may have: retry with its arguments to get its result; a new key is for a new operation only"
	msgNotRecorded = "this call completed, but its result cannot be sent again (too large to record, or recorded under a key this server no longer has): the tool does not run again; do not call again under a new key, check its effect"
)

// idempotencyError maps an error of mcptoken.Idempotency.Call to what the
// client is sent.
func idempotencyError(err error) error {
	switch {
	case errors.Is(err, mcptoken.ErrIdempotencyKey):
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	case errors.Is(err, mcptoken.ErrKeyReused):
		return invalidParams(msgKeyReused, KeyReused)
	case errors.Is(err, mcptoken.ErrNoEffect):
		return retryLater(err, msgNoEffect)
	case errors.Is(err, mcptoken.ErrInProgress):
		return retryLater(err, "a call with this idempotency key is in progress: retry it with the same key after retryAfterMs")
	case errors.Is(err, mcptoken.ErrOutcomeUnknown):
		d, _ := mcptoken.RetryAfter(err)
		data, _ := json.Marshal(idempotencyData{Code: OutcomeUnknown, RetryAfterMs: max(d.Milliseconds(), 1)})
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the outcome of this call is unknown: retry it with the same idempotency key, never a new one", Data: data}
	case errors.Is(err, mcptoken.ErrIdempotencyStore):
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "idempotency store unavailable: retry later"}
	case errors.Is(err, mcptoken.ErrNotRecorded):
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msgNotRecorded}
	}
	return err
}

// retryLater is the -32603 [InProgress] error with msg and the retry hint
// of err.
func retryLater(err error, msg string) error {
	d, _ := mcptoken.RetryAfter(err)
	data, _ := json.Marshal(idempotencyData{Code: InProgress, RetryAfterMs: max(d.Milliseconds(), 1)})
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg, Data: data}
}

// RetryAfter returns the retry hint of an [InProgress] or [OutcomeUnknown]
// error, or of a [StateBusy] refusal, as a client sees it (from
// ClientSession.CallTool), and false for any other error.
func RetryAfter(err error) (time.Duration, bool) {
	if d, ok := busyRetryAfter(err); ok {
		return d, true
	}
	var we *jsonrpc.Error
	if !errors.As(err, &we) || len(we.Data) == 0 {
		return 0, false
	}
	var d idempotencyData
	if json.Unmarshal(we.Data, &d) != nil || d.Code != InProgress && d.Code != OutcomeUnknown || d.RetryAfterMs <= 0 {
		return 0, false
	}
	return time.Duration(d.RetryAfterMs) * time.Millisecond, true
}
