package ctokenmcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/ctoken/ctoken/mcptoken"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// IdempotencyOptions configures [NewIdempotency]: the store, where the key
// comes from, the durations and Transactional, as documented at
// [mcptoken.IdempotencyConfig]; Caller (nil means ContextCaller) and Logger.
type IdempotencyOptions = mcptoken.IdempotencyOptions[CallerFunc]

// Codes in the _meta of the tool error results an idempotent tool answers
// with (beside [StateExpired] and [StateInvalid]), local to ctoken.
const (
	// KeyReused (1024): the idempotency key was used by this caller for
	// this tool with other arguments.
	KeyReused = mcptoken.CodeKeyReused
	// InProgress (1025): the key's first call still runs, or the tool had
	// no effect ([mcptoken.ErrNoEffect]); _meta also holds
	// [MetaRetryAfterMs]: retry the same call with the same key after it.
	InProgress = mcptoken.CodeInProgress
	// OutcomeUnknown (1028): the tool ran and its transaction's commit
	// has an unknown outcome; _meta also holds [MetaRetryAfterMs]: retry
	// the same call with the same key after it, never under a new key.
	OutcomeUnknown = mcptoken.CodeOutcomeUnknown
	// ToolFailed (1030) ends the message of the -32603 error of a tool
	// that began and failed, which [Idempotency.Wrap] recorded and sends
	// to the first call and every retry, as " (ctokenCode 1030)": mcp-go
	// sends a handler's error by its text alone. [CallTool] ends with it,
	// matching [mcptoken.ErrToolFailed].
	ToolFailed = mcptoken.CodeToolFailed
)

// MetaRetryAfterMs is the _meta member of an [InProgress] or
// [OutcomeUnknown] tool error result: the milliseconds after which to
// retry.
const MetaRetryAfterMs = "retryAfterMs"

// ErrIdempotencyStore is the error (sent as JSON-RPC -32603) of an
// idempotent call whose store failed, or that retries a call whose result
// was not recorded.
var ErrIdempotencyStore = errors.New("ctokenmcpgo: idempotency store unavailable, or the first result was not recorded")

// Idempotency makes the tool handlers it wraps idempotent: see
// [Idempotency.Wrap]. It is safe for concurrent use.
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
// IsError set is a result, recorded and replayed). The key comes from the
// argument named by KeyArgument and/or from _meta
// [mcptoken.MetaIdempotencyKey]. An error from h is returned as it is
// (mcp-go sends it as -32603): one that matches mcp.ErrInvalidParams says
// the tool did not begin; any other is recorded and sent, by its text
// ended with " (ctokenCode 1030)" ([ToolFailed]), to the first call and
// every retry alike, which [CallTool] returns matching
// [mcptoken.ErrToolFailed]; except one matching [mcptoken.ErrNoEffect]
// (and the end of a context ctoken ended, which matches it): nothing is
// recorded, and the client gets a tool error result with _meta ctokenCode
// [InProgress] and [MetaRetryAfterMs], which [CallTool] retries under the
// same key. A handler that answers its
// failures with mcp.NewToolResultError returns such an error instead for
// a failure before any effect: a tool error result is a result, recorded.
//
// mcp-go (v1.2.1) sends every handler error as -32603, so the refusals that
// are the client's to act on are tool error results, as [ToolResult] makes
// them: a missing (unless NonIdempotentWithoutKey) or malformed key (no
// code); a key used with other arguments (_meta ctokenCode [KeyReused]); a
// key whose first call still runs after waiting up to Wait (_meta
// ctokenCode [InProgress] and [MetaRetryAfterMs]). None runs h or consumes
// the key. With Transactional, a commit whose outcome is unknown (h ran)
// is a tool error result with _meta ctokenCode [OutcomeUnknown] and
// [MetaRetryAfterMs]. A request without an authenticated caller is [ErrNoCaller]; a
// store failure and the retry of a call whose result was too large to
// record are [ErrIdempotencyStore]. A zero Idempotency answers every call
// with ErrIdempotencyStore.
func (i *Idempotency) Wrap(h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if i == nil || i.core == nil || h == nil {
			return nil, ErrIdempotencyStore
		}
		caller, err := i.caller(ctx)
		if err != nil {
			caller = "" // refused by the core, and logged, when the call carries a key
		}
		var metaKey any
		if req.Params.Meta != nil {
			metaKey = mcptoken.MetaKeyOf(req.Params.Meta.AdditionalFields)
		}
		args := []byte(req.Params.RawArguments)
		if len(args) == 0 && req.Params.Arguments != nil {
			if args, err = json.Marshal(req.Params.Arguments); err != nil {
				return mcp.NewToolResultError("arguments cannot be encoded"), nil
			}
		}
		return toolRules.Call(ctx, i.core, caller, req.Params.Name, args, metaKey, func(hctx context.Context) (*mcp.CallToolResult, error) { return h(hctx, req) })
	}
}

// toolRules are [Idempotency.Wrap]'s rules for the core: a recorded
// failure is sent again as the first was, -32603 with its text.
var toolRules = mcptoken.ToolRules[mcp.CallToolResult]{
	Failure:    failure,
	NoResult:   errors.New("tool returned no result"),
	NeedsInput: func(res *mcp.CallToolResult) bool { return len(res.InputRequests) > 0 || res.NeedsInput() },
	Replay:     func(record []byte) error { return errors.New(string(record) + recordedSuffix) },
	Refused:    idempotencyResult,
}

// recordedSuffix ends the text of a recorded failure as sent.
var recordedSuffix = " (" + MetaTokenCode + " " + strconv.Itoa(ToolFailed) + ")"

// failure returns what a handler's error is to the engine: one that
// matches mcp.ErrInvalidParams (a validation failure: the tool did not
// begin, the key is released) or is a URL elicitation (the client's input
// is needed first) as it is, any other wrapped in a [mcptoken.Failure]
// that records its text, which mcp-go sends as -32603.
func failure(err error) error {
	if errors.Is(err, mcp.ErrInvalidParams) || errors.As(err, new(mcp.URLElicitationRequiredError)) || errors.As(err, new(*mcp.URLElicitationRequiredError)) {
		return err
	}
	return &mcptoken.Failure{Record: []byte(err.Error()), Err: err}
}

// idempotencyResult maps an error of mcptoken.Idempotency.Call to what
// the handler returns.
func idempotencyResult(err error) (*mcp.CallToolResult, error) {
	switch {
	case errors.Is(err, mcptoken.ErrIdempotencyKey):
		return mcp.NewToolResultError(err.Error()), nil
	case errors.Is(err, mcptoken.ErrKeyReused):
		res := mcp.NewToolResultError("idempotency key reused with other arguments: this call did not run, but the first call under this key may have: retry with its arguments to get its result; a new key is for a new operation only (ctokenCode 1024)")
		res.Meta = mcp.NewMetaFromMap(map[string]any{MetaTokenCode: KeyReused})
		return res, nil
	case errors.Is(err, mcptoken.ErrNoEffect):
		return retryLater(err, "nothing was recorded and the key is free (the tool had no effect, or returned the end of a context the server ended): retry it with the same idempotency key after retryAfterMs (ctokenCode 1025)"), nil
	case errors.Is(err, mcptoken.ErrInProgress):
		return retryLater(err, "a call with this idempotency key is in progress: retry it with the same key after retryAfterMs (ctokenCode 1025)"), nil
	case errors.Is(err, mcptoken.ErrOutcomeUnknown):
		d, _ := mcptoken.RetryAfter(err)
		res := mcp.NewToolResultError("the outcome of this call is unknown: retry it with the same idempotency key, never a new one (ctokenCode 1028)")
		res.Meta = mcp.NewMetaFromMap(map[string]any{MetaTokenCode: OutcomeUnknown, MetaRetryAfterMs: max(d.Milliseconds(), 1)})
		return res, nil
	case errors.Is(err, mcptoken.ErrIdempotencyStore), errors.Is(err, mcptoken.ErrNotRecorded):
		return nil, ErrIdempotencyStore
	}
	return nil, err
}

// retryLater is the [InProgress] tool error result with msg and the retry
// hint of err.
func retryLater(err error, msg string) *mcp.CallToolResult {
	d, _ := mcptoken.RetryAfter(err)
	res := mcp.NewToolResultError(msg)
	res.Meta = mcp.NewMetaFromMap(map[string]any{MetaTokenCode: InProgress, MetaRetryAfterMs: max(d.Milliseconds(), 1)})
	return res
}

// RetryAfter returns the retry hint of an [InProgress] or
// [OutcomeUnknown] tool error result as a client sees it, and false for
// any other result.
func RetryAfter(res *mcp.CallToolResult) (time.Duration, bool) {
	if c := TokenCode(res); c != InProgress && c != OutcomeUnknown {
		return 0, false
	}
	var ms float64
	switch v := res.Meta.AdditionalFields[MetaRetryAfterMs].(type) {
	case float64:
		ms = v
	case int64:
		ms = float64(v)
	case int:
		ms = float64(v)
	}
	if ms < 1 || ms > float64(time.Hour/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
