package mcptoken

import (
	"log/slog"
)

// CursorOptions configures the Cursors of an SDK module, whose caller
// function has type C (ctokenmcp.CursorOptions and ctokenmcpgo.CursorOptions
// are this type for their CallerFunc). The zero value is ready to use.
type CursorOptions[C any] struct {
	// Caller finds the authenticated caller; nil means the module's
	// default (ctokenmcp.TokenUserID, ctokenmcpgo.ContextCaller).
	Caller C
	// Logger receives one record per rejected cursor, with the tool name
	// and ctoken's log-safe reason (never the cursor). Nil means
	// slog.Default(); to drop them, set a logger that discards.
	Logger *slog.Logger
}

// StateOptions configures the States (and SecureRequestState) of an SDK
// module, whose caller function has type C (ctokenmcp.StateOptions and
// ctokenmcpgo.StateOptions are this type for their CallerFunc). The zero
// value is ready to use.
type StateOptions[C any] struct {
	// Caller finds the authenticated caller, the subject a state is bound
	// to; nil means the module's default (ctokenmcp.TokenUserID,
	// ctokenmcpgo.ContextCaller).
	Caller C
	// UnboundArgs turns off binding states to the call's arguments and
	// seals the application's state as is. It is the interop mode: with a
	// ctoken.BindSubjectAndTool codec, states are sealed exactly as the
	// reference D dispatch seals them (subject, method "\x00" name). Set it
	// only to share states with another implementation of the
	// request-state codec; by default a client that keeps a state but
	// changes the arguments of the retried call is refused.
	UnboundArgs bool
	// InsecureSkipToolBinding lets the States seal with a codec that does
	// not bind states to the tool, prompt or resource they were sealed for
	// (ctoken.BindSubject or ctoken.BindNone): a state
	// sealed by preview_delete then opens in delete_now called with the
	// same arguments. By default such a codec is refused when the States
	// are built ([ErrTargetUnbound], ctoken.ErrConfig); with this set it is
	// accepted and the States log a Warn record saying so when they are
	// built. Set it only to share states with a peer that binds the subject
	// alone, and never with SecureRequestState, which refuses such a codec
	// whatever this says.
	InsecureSkipToolBinding bool
	// AnswerRetries makes SecureRequestState answer the retry of a
	// tools/call round with the result that round returned, instead of
	// refusing the already used state: the client whose response was lost
	// after the round ran (a deploy, a payment) gets its result again, and
	// the round never runs twice. The retry must be the same call: same
	// caller, tool, arguments and state; anyone else, and any change, is
	// refused as without it. See mcptoken.States.Answer for every outcome.
	// It needs a single-use codec whose replay store is a replay.Recorder
	// (replay.MemoryStore, redisstore, pgstore, sqlitestore); any other
	// codec is refused when the States are built ([ErrNoRecorder]). The
	// store keeps each round's result (the JSON of the tool result, with
	// the next sealed state if it asks for more input) for as long as the
	// state could be presented: its expiry plus replay.SkewMargin, sealed
	// (XAES-256-GCM under a subkey of the codec's own keys, bound to the
	// state and the call), never in clear; a record that does not open is
	// never answered. A retry while the round runs is told when to retry
	// (at most a second). prompts/get and resources/read keep plain
	// single use.
	AnswerRetries bool
	// Logger receives one record per rejected state, with the tool, prompt
	// or resource and ctoken's log-safe reason (never the state). Nil
	// means slog.Default(); to drop them, set a logger that discards.
	Logger *slog.Logger
}
