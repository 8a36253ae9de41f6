// Package mcptoken holds the parts of ctoken's MCP integrations that do not
// depend on an MCP SDK: the binding of a sealed request state to the
// arguments of the call, the ctoken codes a refused cursor or request state
// carries to the client, and the mapping from ctoken's errors to what the
// client is told. The integrations for the official go-sdk
// (github.com/ctoken/ctoken/mcp) and for mark3labs/mcp-go
// (github.com/ctoken/ctoken/mcpgo) both build on it, so both seal the same
// text for a state and tell a client the same codes.
// Most users start with the SDK module instead (ctokenmcp or
// ctokenmcpgo); a server on another SDK starts with [NewStates] or
// [NewCursors] and an [Integration]. ExampleWrapArgs binds a state to the
// call's arguments as both integrations do.
//
// It imports only package ctoken, package replay (a round's record,
// [States.Answer]) and the standard library. Applications
// normally use it through an integration; use it directly to wire ctoken
// into another MCP server framework the same way.
//
// # Argument binding
//
// [WrapArgs] turns an application's state into the text the request-state
// codec seals: the JSON object {"a":<fingerprint>,"s":<state>}, where the
// fingerprint is the lowercase hex of [ctoken.ArgsFingerprint] of the call's
// arguments. [UnwrapArgs] checks that text against the arguments of the
// retried call and returns the state. A client that keeps a state but
// changes the arguments is refused with [ErrArgsMismatch].
//
// # List cursors
//
// [ListCursors] seal an SDK's own cursors of the four list methods
// ([IsListMethod]) into sealed ctoken cursors bound to the method, the
// caller and the session, and open them back into the SDK's cursor; both
// integrations' SecureListCursors build on it.
//
// # Retries of a round
//
// [States.Answer], for States built with StatesConfig.AnswerRetries over a
// single-use codec whose store is a replay.Recorder, runs the round of a
// state at most once and answers the honest retry (same caller, target,
// arguments and state) with the result that round returned, so a client
// whose response was lost is not made to start over and act twice. The
// store holds each result sealed under a subkey of the codec's own keys,
// never in clear.
//
// # Durable tasks
//
// [Tasks] runs task-augmented tools under the MCP Tasks extension
// (io.modelcontextprotocol/tasks): a task ID is a sealed ctoken cursor
// bound to the caller, expiring with the task; the task is created with
// one write to a replay.Recorder before its CreateTaskResult is sent, its
// running instance holds and renews a lease on it, and its outcome is
// recorded sealed, so any instance answers tasks/get, a task whose
// instance stopped is reported failed within the lease (TasksConfig.Hold),
// and tasks/cancel reaches the running instance through the store.
// [Tasks.Handler] speaks the extension's wire in front of an SDK's HTTP
// handler; mcptokentest.RunTasksContract is the stores' contract.
//
// # Codes
//
// A refused cursor carries the reference protocol's codes
// [ctoken.CodeCursorExpired] (1020) and [ctoken.CodeCursorInvalid] (1021). A
// refused request state carries [CodeStateExpired] (1022) or
// [CodeStateInvalid] (1023), and, for an authentic state already used,
// [CodeStateUsed] (1026) or, while its round runs, [CodeStateBusy] (1027),
// or, for a round that began and was never recorded,
// [CodeRoundInterrupted] (1029), which are local to ctoken: the reference
// protocol defines no code for a refused requestState, and no other
// implementation is known to send or understand them.
package mcptoken

import (
	"bytes"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ctoken/ctoken"
)

// Codes of a refused request state, beside the reference protocol's cursor
// codes [ctoken.CodeCursorExpired] (1020) and [ctoken.CodeCursorInvalid]
// (1021). These two are local to ctoken, not part of the reference protocol.
const (
	// CodeStateExpired tells a client to call again without the state.
	CodeStateExpired = 1022
	// CodeStateInvalid tells a client its state was refused as invalid:
	// forged, edited, sealed with another key, or presented by another
	// caller, for another tool or with other arguments.
	CodeStateInvalid = 1023
	// 1024 and 1025 are left to the codes of idempotent tool calls.

	// CodeStateUsed tells a client its state is authentic and bound to
	// this very call (caller, target, arguments) but was already used, and
	// the result of its round cannot be answered again: the round failed,
	// its record expired or was too large, or the States do not record
	// rounds (StatesConfig.AnswerRetries off). Start the call over; nothing
	// is wrong with the client.
	CodeStateUsed = 1026
	// CodeStateBusy tells a client that the round of its state is still
	// running (a retry that overtook the first attempt): retry the same
	// call later, with the same state. Only States that answer retries
	// (StatesConfig.AnswerRetries) send it.
	CodeStateBusy = 1027
	// 1028 is left to [CodeOutcomeUnknown], which says retry.

	// CodeRoundInterrupted tells a client that the round of its state
	// began but its result was never recorded (its server stopped, or its
	// hold on the state was lost): whether it acted is unknown, it does
	// not run again, and no retry settles it ([ErrRoundInterrupted]). Do
	// not retry; check the effect, and call again without the state.
	CodeRoundInterrupted = 1029
)

// KnownCode reports whether code is one of the codes a refusal carries:
// [ctoken.CodeCursorExpired], [ctoken.CodeCursorInvalid], [CodeStateExpired],
// [CodeStateInvalid], [CodeKeyReused], [CodeInProgress], [CodeStateUsed],
// [CodeStateBusy], [CodeOutcomeUnknown] or [CodeRoundInterrupted].
func KnownCode(code int) bool {
	switch code {
	case ctoken.CodeCursorExpired, ctoken.CodeCursorInvalid, CodeStateExpired, CodeStateInvalid, CodeKeyReused, CodeInProgress, CodeStateUsed, CodeStateBusy, CodeOutcomeUnknown, CodeRoundInterrupted:
		return true
	}
	return false
}

// ErrArgsMismatch reports an authentic request state whose arguments binding
// does not match the arguments of the call, or is malformed. [UnwrapArgs]
// returns no state with it.
var ErrArgsMismatch = errors.New("mcptoken: arguments differ from the sealed call")

// argsMismatchReason is the log reason of [ErrArgsMismatch], the text the
// integrations have always logged.
const argsMismatchReason = "arguments differ from the sealed call"

// envelope is the text sealed for a state bound to arguments.
type envelope struct {
	Args  string `json:"a"`
	State string `json:"s"`
}

// argsDigest fingerprints args, taking nil and blank JSON text as {}.
func argsDigest(args any) (ctoken.Fingerprint, error) {
	switch v := args.(type) {
	case nil:
		args = json.RawMessage("{}")
	case []byte:
		if len(bytes.TrimSpace(v)) == 0 {
			args = json.RawMessage("{}")
		}
	case json.RawMessage:
		if len(bytes.TrimSpace(v)) == 0 {
			args = json.RawMessage("{}")
		}
	}
	return ctoken.ArgsFingerprint(args)
}

// WrapArgs returns the text to seal for state bound to the call arguments
// args: {"a":<lowercase hex of the fingerprint>,"s":<state>}, as encoding/json
// writes it. args is what [ctoken.ArgsFingerprint] takes (JSON text as
// []byte or json.RawMessage, or a Go value encoding/json marshals); nil and
// blank JSON text stand for absent arguments and fingerprint as {}, so a
// call without arguments and a call with {} are the same call.
//
// A state that is not valid UTF-8 is an error matching
// [ctoken.ErrUnencodable] (encoding/json would silently replace its invalid
// bytes); arguments that cannot be fingerprinted are the error of
// [ctoken.ArgsFingerprint].
func WrapArgs(args any, state string) (string, error) {
	if !utf8.ValidString(state) {
		return "", fmt.Errorf("mcptoken: state is not valid UTF-8: %w", ctoken.ErrUnencodable)
	}
	fp, err := argsDigest(args)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(envelope{Args: hex.EncodeToString(fp[:]), State: state})
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// UnwrapArgs checks the text of an authentic state made by [WrapArgs] against
// the call arguments args (taken as by WrapArgs) and returns the
// application's state. Only the exact text WrapArgs writes is accepted: any
// other spelling, an unknown member, or a fingerprint of other arguments is
// [ErrArgsMismatch], with no state. The fingerprints are compared in
// constant time.
func UnwrapArgs(args any, sealed string) (string, error) {
	// The layout WrapArgs writes: {"a":"<64 lowercase hex>","s":<JSON string>}
	const head, mid = `{"a":"`, `","s":`
	var fpHex [2 * len(ctoken.Fingerprint{})]byte
	end := len(head) + len(fpHex)
	if len(sealed) < end+len(mid)+len(`""}`) || sealed[:len(head)] != head ||
		sealed[end:end+len(mid)] != mid || sealed[len(sealed)-1] != '}' {
		return "", ErrArgsMismatch
	}
	text := []byte(sealed)
	quoted := text[end+len(mid) : len(text)-1]
	var state string
	if json.Unmarshal(quoted, &state) != nil {
		return "", ErrArgsMismatch
	}
	// One spelling: the state quoted exactly as encoding/json quotes it
	// (this also refuses null, which decodes into a string without error).
	if again, err := json.Marshal(state); err != nil || string(again) != string(quoted) {
		return "", ErrArgsMismatch
	}
	// Compared as text with the lowercase hex WrapArgs writes, so any other
	// spelling of the same bytes is refused too.
	fp, err := argsDigest(args)
	if err != nil {
		return "", ErrArgsMismatch
	}
	hex.Encode(fpHex[:], fp[:])
	if subtle.ConstantTimeCompare(fpHex[:], text[len(head):end]) != 1 {
		return "", ErrArgsMismatch
	}
	return state, nil
}

// Refusal is what a client is told about a cursor or request state that did
// not verify or open, and what the server logs about it.
type Refusal struct {
	// Code is the ctoken code for the client: ctoken.CodeCursorExpired,
	// ctoken.CodeCursorInvalid, CodeStateExpired, CodeStateInvalid,
	// CodeStateUsed or CodeStateBusy; 0 when StoreFailed or Internal.
	Code int
	// Message is the fixed text for the client. It never contains the token
	// or the reason.
	Message string
	// Reason is the log-safe reason, for the server log only: the String of
	// [ctoken.Reason] of the error, "arguments differ from the sealed call"
	// for [ErrArgsMismatch], or the error's text for an Internal refusal
	// (a missing key). It never contains the token.
	Reason string
	// StoreFailed reports that the replay store of a single-use codec could
	// not answer (full, unreachable, context done): a server problem, not a
	// bad token, and the state was not consumed. The client should be told
	// of an internal error (JSON-RPC -32603) with Message.
	StoreFailed bool
	// Internal reports a server that cannot judge the token at all: its
	// codec or issuer has no key (ctoken.ErrNoKey), a misconfiguration that
	// NewStates and NewCursors refuse up front; or, from [AnswerJSON], a
	// recorded round's result that does not decode. It is neither a bad token
	// nor a store outage; the client should be told of an internal error
	// (JSON-RPC -32603) with Message, and the server logs it at Error.
	Internal bool
	// RetryAfter is, for [CodeStateBusy], how long the client should wait
	// before it retries the same call with the same state: how long the
	// round's lease still runs, at most a second, and a second when the
	// store does not say; never zero or negative for that code. It is 0
	// for every other refusal. The integrations send it in whole
	// milliseconds, at least 1, as "retryAfterMs".
	RetryAfter time.Duration
}

// Expired reports whether the client should start over (call again without
// the token) rather than treat it as forged: Code is
// [ctoken.CodeCursorExpired] or [CodeStateExpired].
func (r Refusal) Expired() bool {
	return r.Code == ctoken.CodeCursorExpired || r.Code == CodeStateExpired
}

// Busy reports whether the client should retry the same call later with
// the same state: Code is [CodeStateBusy].
func (r Refusal) Busy() bool { return r.Code == CodeStateBusy }

// Messages of the refusals, fixed texts.
const (
	msgCursorExpired = "expired cursor: call again without a cursor"
	msgCursorInvalid = "invalid cursor"
	msgStateExpired  = "expired requestState: call again without it"
	msgStateInvalid  = "invalid requestState"
	msgStateUsed     = "requestState already used: its round ran and its result cannot be answered again; calling again without it starts the call over: check its effect first"
	msgStateBusy     = "requestState busy: its round is still running; retry the same call later"
	msgInterrupted   = "requestState's round was interrupted before its result was recorded (its server stopped, or lost its hold): whether it acted is unknown, and it will not run again; do not retry: check its effect (one that may still appear before the state expires), then call again without the state"
	msgStoreFailed   = "request state store unavailable"
	msgInternal      = "internal error"
)

// refuseNoKey is the refusal of a token that a keyless codec or issuer could
// not judge.
// Its Reason is the error's text, which names the config field or key
// position at fault (never key material): a missing key is not one of the
// refusal reasons [ctoken.Reason] classifies.
func refuseNoKey(err error) Refusal {
	return Refusal{Message: msgInternal, Reason: err.Error(), Internal: true}
}

// RefuseCursor returns the refusal of a cursor that [ctoken.CursorIssuer.Verify]
// refused with err: code 1020 for [ctoken.ErrCursorExpired], Internal for
// ctoken.ErrNoKey (an issuer without a key judged nothing), and 1021 for
// anything else, nil included (fail closed). It never reports StoreFailed.
func RefuseCursor(err error) Refusal {
	if errors.Is(err, ctoken.ErrNoKey) {
		return refuseNoKey(err)
	}
	if errors.Is(err, ctoken.ErrCursorExpired) {
		return Refusal{Code: ctoken.CodeCursorExpired, Message: msgCursorExpired, Reason: ctoken.Reason(err).String()}
	}
	return Refusal{Code: ctoken.CodeCursorInvalid, Message: msgCursorInvalid, Reason: ctoken.Reason(err).String()}
}

// RefuseState returns the refusal of a request state that did not open with
// err, from [ctoken.RequestStateCodec.DecodeContext], [UnwrapArgs] or
// [States.Answer]: code 1022 for [ctoken.ErrStateExpired]; 1026
// ([CodeStateUsed]) for [ctoken.ErrStateReplayed] (which a codec reports
// only once every binding has passed) and [ErrStateUsed]; 1027
// ([CodeStateBusy]) for [ErrStateBusy], with the retry hint [States.Answer]
// attached to it (a second for ErrStateBusy itself) in RetryAfter; 1029
// ([CodeRoundInterrupted], without a retry hint: no retry settles it) for
// [ErrRoundInterrupted]; 1023 for [ctoken.ErrStateInvalid]
// and [ErrArgsMismatch]; Internal, with code 0,
// for ctoken.ErrNoKey (a codec without a key judged nothing); any other
// error comes from the replay store of a single-use codec and is
// StoreFailed, with code 0 (so is nil, which is no refusal to map).
func RefuseState(err error) Refusal {
	switch {
	case errors.Is(err, ctoken.ErrNoKey):
		return refuseNoKey(err)
	case errors.Is(err, ctoken.ErrStateExpired):
		return Refusal{Code: CodeStateExpired, Message: msgStateExpired, Reason: ctoken.Reason(err).String()}
	case errors.Is(err, ErrArgsMismatch):
		return Refusal{Code: CodeStateInvalid, Message: msgStateInvalid, Reason: argsMismatchReason}
	case errors.Is(err, ErrStateBusy):
		r := Refusal{Code: CodeStateBusy, Message: msgStateBusy, Reason: "round still running", RetryAfter: defaultBusyRetryAfter}
		var b *stateBusyError
		if errors.As(err, &b) && b.retryAfter > 0 {
			r.RetryAfter = min(b.retryAfter, defaultBusyRetryAfter)
		}
		return r
	case errors.Is(err, ErrRoundInterrupted):
		return Refusal{Code: CodeRoundInterrupted, Message: msgInterrupted, Reason: "round interrupted before its result was recorded"}
	case errors.Is(err, ErrStateUsed):
		return Refusal{Code: CodeStateUsed, Message: msgStateUsed, Reason: err.Error()}
	case errors.Is(err, ctoken.ErrStateReplayed):
		return Refusal{Code: CodeStateUsed, Message: msgStateUsed, Reason: ctoken.Reason(err).String()}
	case errors.Is(err, ctoken.ErrStateInvalid):
		return Refusal{Code: CodeStateInvalid, Message: msgStateInvalid, Reason: ctoken.Reason(err).String()}
	}
	return Refusal{Message: msgStoreFailed, StoreFailed: true}
}
