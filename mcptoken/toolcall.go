package mcptoken

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ToolRules are an SDK integration's rules for the idempotent calls of its
// tool handlers, whose result type is R: how a handler's error is
// recorded, which result asks for input, and what the client is sent for
// a recorded failure and for a refusal. [ToolRules.Call] applies them to
// one call; an integration's Wrap reads the request and calls it.
type ToolRules[R any] struct {
	// Failure returns what a handler's error other than [ErrNoEffect] is
	// to [Idempotency.Call]: as it is when it says the tool did not begin
	// (nothing is recorded, the key is released), else a [*Failure] that
	// records it.
	Failure func(error) error
	// NoResult is the error of a handler that returned neither a result
	// nor an error, recorded as Failure makes it.
	NoResult error
	// NeedsInput reports whether a result asks the client for input (a
	// round of a multi round-trip call): it is sent as it is and not
	// recorded, so that the round that completes the call is the one
	// recorded and replayed.
	NeedsInput func(*R) bool
	// Replay returns the error a recorded failure is sent, from the
	// Record its [*Failure] holds: to every retry, and to the first call
	// too, so that each gets the same bytes. It should mark the error as
	// recorded ([CodeToolFailed]) where its SDK lets it.
	Replay func(record []byte) error
	// Refused returns what the handler returns for any other error of
	// Idempotency.Call: a refusal, a store failure, [ErrNotRecorded], a
	// handler's error matching [ErrNoEffect] (which the client is to
	// retry after [RetryAfter]), or one that Failure returned as it is.
	Refused func(error) (*R, error)
}

// errInputRequired is what a run returns to Idempotency.Call for a result
// that asks for input: not recorded, the key released.
var errInputRequired = errors.New("mcptoken: input required: not recorded")

// Call runs run, the handler of one call of tool by caller, under i, as
// [Idempotency.Call] says (args and metaKey as it takes them), and returns
// what the SDK's handler returns. A result is recorded as its JSON, and
// the first call and every retry get it decoded from those bytes, so the
// client sees the same result each time; a result whose JSON does not
// decode back (a number outside float64, say) is never sent: it is
// recorded as the tool's failure, saying so, since the tool ran. A record
// that does not decode (one an older version wrote) is [ErrNotRecorded]
// to a retry. A handler's failure that was recorded is sent as Replay
// makes it from its Record, to the first call as to every retry; one that
// was not (its record failed, or a Transactional call rolled back) is
// sent to the first call as the handler returned it.
func (r ToolRules[R]) Call(ctx context.Context, i *Idempotency, caller, tool string, args []byte, metaKey any, run func(context.Context) (*R, error)) (*R, error) {
	var first, decoded *R
	b, err := i.Call(ctx, caller, tool, args, metaKey, func(hctx context.Context) ([]byte, error) {
		res, err := run(hctx)
		if err == nil && res == nil {
			err = r.NoResult
		}
		switch {
		case errors.Is(err, ErrNoEffect):
			return nil, err // recorded by no integration: the key is released
		case err != nil:
			return nil, r.Failure(err)
		}
		first = res
		if r.NeedsInput(res) {
			return nil, errInputRequired
		}
		b, err := json.Marshal(res)
		if err == nil {
			decoded = new(R)
			err = json.Unmarshal(b, decoded)
		}
		if err != nil {
			// The tool ran: record what its retries will be told.
			return nil, r.Failure(fmt.Errorf("%w: %w", errUnreplayable, err))
		}
		return b, nil
	})
	var f *Failure
	switch {
	case errors.Is(err, errInputRequired):
		return first, nil
	case errors.As(err, &f) && f.recorded:
		return nil, r.Replay(f.Record) // the first call, as every retry
	case errors.As(err, &f) && f.Err != nil:
		return nil, f.Err // the first call's own failure, not recorded
	case errors.As(err, &f):
		return nil, r.Replay(f.Record)
	case err != nil:
		return r.Refused(err)
	}
	if decoded != nil {
		return decoded, nil // the first call
	}
	var out R
	if err := json.Unmarshal(b, &out); err != nil {
		return r.Refused(fmt.Errorf("%w: the recorded result does not decode", ErrNotRecorded))
	}
	return &out, nil
}

// errUnreplayable is the failure recorded for a tool whose result cannot
// be sent as recorded.
var errUnreplayable = errors.New("the tool ran, but its result cannot be sent: its JSON does not decode back into a result (a number outside float64, say); it is not run again under this key: check its effect")
