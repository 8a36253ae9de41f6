package mcptoken

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// Codes of a refused idempotent tool call, local to ctoken like
// [CodeStateExpired] and [CodeStateInvalid].
const (
	// CodeKeyReused tells a client that its idempotency key was used by
	// this caller for this tool with other arguments: [ErrKeyReused].
	CodeKeyReused = 1024
	// CodeInProgress tells a client to retry the same call with the same
	// key after the hint: a call with its key is still running
	// ([ErrInProgress]), or its tool had no effect ([ErrNoEffect]).
	CodeInProgress = 1025
	// CodeOutcomeUnknown tells a client that its call ran but whether its
	// effects were kept is unknown: retry the same call with the same key
	// after the hint, never under a new key ([ErrOutcomeUnknown]). 1026,
	// 1027 and 1029 are request-state codes; an interrupted round is
	// [CodeRoundInterrupted], never this code.
	CodeOutcomeUnknown = 1028
	// CodeToolFailed tells a client that the error it got is its tool's
	// failure, recorded under the call's key: the tool began and failed,
	// and every call under the key gets the same error without a run
	// ([ErrToolFailed]). Do not retry under the key; check the effect,
	// and call under a new key only to run the tool again.
	CodeToolFailed = 1030
)

// MetaIdempotencyKey is the _meta member of a tools/call that may carry the
// idempotency key ([IdempotencyConfig].KeyFromMeta), under the
// reverse-DNS prefix the MCP specification asks _meta members to use.
// SEP-3182 proposed an idempotencyKey member of the tools/call params
// themselves; it was closed unmerged, and neither SDK reads such a
// member, so ctoken reads a _meta member under its own prefix instead.
const MetaIdempotencyKey = "io.github.ctoken/idempotencyKey"

// LegacyMetaIdempotencyKey is the _meta member that carried the key before
// [MetaIdempotencyKey]: servers still read it ([MetaKeyOf]) until 1.0;
// clients send MetaIdempotencyKey only.
const LegacyMetaIdempotencyKey = "ctoken/idempotencyKey"

// MetaKeyOf returns what a call's _meta carries as its idempotency key, to
// pass to [Idempotency.Call]: the member [MetaIdempotencyKey], else
// [LegacyMetaIdempotencyKey], else nil. When both are present with
// different values, it returns a value Call refuses with
// [ErrIdempotencyKey].
func MetaKeyOf(meta map[string]any) any {
	v, ok := meta[MetaIdempotencyKey]
	old, legacy := meta[LegacyMetaIdempotencyKey]
	switch {
	case ok && legacy && v != old:
		return metaKeysDiffer{}
	case ok:
		return v
	case legacy:
		return old
	}
	return nil
}

// metaKeysDiffer is what MetaKeyOf returns for a _meta with two different
// keys.
type metaKeysDiffer struct{}

// Defaults and limits of an [IdempotencyConfig], as the idempotency
// package's.
const (
	// DefaultIdempotencyWindow is how long a completed call is remembered.
	DefaultIdempotencyWindow = 24 * time.Hour
	// DefaultIdempotencyLease is how long one call may hold its key.
	DefaultIdempotencyLease = time.Minute
	// DefaultMaxIdempotencyKeyBytes is the longest key.
	DefaultMaxIdempotencyKeyBytes = 255
	// MaxIdempotencyKeyBytes is the largest MaxKeyBytes.
	MaxIdempotencyKeyBytes = 4096
)

// Errors of an idempotent tool call (match with errors.Is).
var (
	// ErrIdempotencyKey reports a call without a key that must carry one,
	// or whose key is malformed (not a string of 1 to MaxKeyBytes visible
	// ASCII bytes other than '"', '\', ',' and ';'), or that carries two
	// different keys (argument and _meta). The tool did not run.
	ErrIdempotencyKey = errors.New("mcptoken: missing or malformed idempotency key")
	// ErrKeyReused reports a key this caller used for this tool with
	// other arguments: the tool did not run (code [CodeKeyReused]).
	ErrKeyReused = errors.New("mcptoken: idempotency key reused with other arguments")
	// ErrInProgress reports a key whose first call still runs: the tool
	// did not run again; [RetryAfter] tells when to retry (code
	// [CodeInProgress]).
	ErrInProgress = errors.New("mcptoken: a call with this idempotency key is in progress")
	// ErrIdempotencyStore reports a replay store that could not answer,
	// or a transactional call whose commit the store refused knowing
	// that nothing was kept (its lease lost, or the transaction rolled
	// back): the client should retry. Before the tool ran nothing was
	// taken; after, the key is released or held by another call. A commit
	// whose outcome is unknown is [ErrOutcomeUnknown] instead.
	ErrIdempotencyStore = errors.New("mcptoken: idempotency store failed")
	// ErrNotRecorded reports a retry of a call that completed but whose
	// result could not be recorded (too large for the store), whose
	// record does not open (edited in the store, moved to another call,
	// sealed under a key no longer in Keys), or whose store ID is taken by
	// something else: the tool does not run again.
	ErrNotRecorded = errors.New("mcptoken: the first result of this call was not recorded")
	// ErrOutcomeUnknown reports a call of a Transactional Idempotency
	// whose tool ran and whose transaction's commit failed in a way that
	// leaves its fate unknown (the store's connection broke during
	// COMMIT): its result is not sent and its key stays taken. The same
	// call with the same key, retried after [RetryAfter], learns the
	// outcome: the committed result, replayed, or, if nothing was kept,
	// the tool run (code [CodeOutcomeUnknown]). A call under a new key
	// may act twice. A [TaskFailure] of [AwaitTask] matches it too when
	// the task's instance stopped while it ran.
	ErrOutcomeUnknown = errors.New("mcptoken: the outcome of this call is unknown")
	// ErrNoEffect is what a tool handler returns, around its cause
	// (fmt.Errorf("%w: %w", mcptoken.ErrNoEffect, err)), to say that its
	// call had no effect and may run again: it failed before it acted (a
	// database that refused the connection), or undid all it did.
	// Nothing is recorded and the key is released; the client is told to
	// retry the same call with the same key after a hint ([CodeInProgress],
	// [RetryAfter]), and that retry runs the tool. Any other error of a
	// tool that began is recorded and replayed: return this one only when
	// nothing happened. ctoken infers it from one error only: the end of
	// a context ctoken ended itself (the call's lease could not be kept,
	// its time ran out, the round or task that runs it lost its hold or
	// was drained), returned by the tool as it is or wrapped
	// (ctx.Err(), context.Cause(ctx)); a tool that may have acted before
	// it met that end returns an error of its own instead, recorded. The
	// caller's cancel (a task's tasks/cancel) is never ctoken's. A
	// task tool's task fails with nothing kept, and the next call under
	// its key runs it again.
	ErrNoEffect = errors.New("mcptoken: the tool had no effect")
	// ErrToolFailed reports, to a client ([CallWithRetries], the SDK
	// modules' CallTool), an error its server sent as its tool's recorded
	// failure ([CodeToolFailed]): the tool began and failed, and the
	// server replays that failure to every call under the key for its
	// Window, without running the tool. The error wraps the server's.
	// Calling again under the key gets it again; check what the tool
	// did, and call under a new key only to run it again.
	ErrToolFailed = errors.New("mcptoken: the tool failed after it began, and its failure is recorded under the idempotency key: every call under that key gets it again without a run; check its effect, and call under a new key only to run it again")
)

// RetryAfter returns the retry hint of an [ErrInProgress],
// [ErrOutcomeUnknown] or [ErrNoEffect] error of [Idempotency.Call], and
// false for any other error.
func RetryAfter(err error) (time.Duration, bool) {
	if errors.Is(err, ErrNoEffect) {
		return defaultBusyRetryAfter, true
	}
	var b *busyError
	if errors.As(err, &b) {
		return b.retryAfter, true
	}
	var u *unknownError
	if errors.As(err, &u) {
		return u.retryAfter, true
	}
	return 0, false
}

// IdempotencyConfig configures [NewIdempotency]. Zero durations and sizes
// mean the documented defaults; negative ones are refused.
type IdempotencyConfig struct {
	// Keys seal every recorded result, and is required: the store holds
	// each result encrypted and authenticated (XAES-256-GCM under a
	// subkey of the primary key, bound to the call's store ID and
	// fingerprint), never in clear, as the idempotency middleware holds
	// its responses. A record that does not open is never replayed
	// ([ErrNotRecorded]). Rotate as for tokens: a new primary first, the
	// previous keys after it until Window has passed.
	Keys *ctoken.Keyring
	// Store records each call's result. Required. Every replay.Recorder
	// serves: replay.MemoryStore (one process, forgotten on restart),
	// redisstore, pgstore, sqlitestore.
	Store replay.Recorder
	// KeyArgument names the tool argument that carries the key, a JSON
	// string; declare it in the tool's input schema so that every client,
	// a model included, can fill it. It is removed from the arguments
	// before they are fingerprinted. Empty: keys come from _meta only.
	KeyArgument string
	// KeyFromMeta accepts the key in the call's _meta member
	// [MetaIdempotencyKey]. A call that carries the key both there and in
	// KeyArgument must carry the same key. At least one of KeyArgument
	// and KeyFromMeta is required.
	KeyFromMeta bool
	// NonIdempotentWithoutKey runs a call that carries no key as a plain,
	// non-idempotent call (logged at Warn per call, and when built). By
	// default such a call is refused with [ErrIdempotencyKey].
	NonIdempotentWithoutKey bool
	// Window is how long a completed call is remembered: its retries get
	// its result. Zero means [DefaultIdempotencyWindow]; it must be longer
	// than Lease.
	Window time.Duration
	// Lease is how long one call holds its key unless renewed. While the
	// tool runs its lease is renewed every third of it (in a store that
	// is a replay.Renewer, without Transactional), and the tool's context
	// is cancelled once the lease cannot be kept, before another call can
	// take the key (a tool that ignores its context can still act after
	// that, beside the retry that runs it again), and at the latest
	// Window less a Lease after the key was taken. Not renewed, the
	// tool's context ends after three quarters of it. Zero means
	// [DefaultIdempotencyLease].
	Lease time.Duration
	// Wait makes a duplicate of a running call wait up to this long for
	// its result instead of being refused with [ErrInProgress] at once.
	// Zero: no wait; it must be less than Lease.
	Wait time.Duration
	// MaxKeyBytes is the longest key. Zero means
	// [DefaultMaxIdempotencyKeyBytes]; at most [MaxIdempotencyKeyBytes].
	MaxKeyBytes int
	// Transactional runs the tool in a transaction of Store, which must
	// be a replay.Transactor (pgstore, sqlitestore): the tool's writes,
	// made through the transaction its context carries
	// (pgstore.TxFrom, sqlitestore.TxFrom), commit with the record, or
	// not at all.
	Transactional bool
}

// IdempotencyOptions configures the Idempotency of an SDK module, whose
// caller function has type C (ctokenmcp.IdempotencyOptions and
// ctokenmcpgo.IdempotencyOptions are this type for their CallerFunc).
type IdempotencyOptions[C any] struct {
	IdempotencyConfig
	// Caller finds the authenticated caller, the scope of every key; nil
	// means the module's default.
	Caller C
	// Logger receives store failures, unknown outcomes and refusals
	// (never a key, a caller or a result). Nil means slog.Default().
	Logger *slog.Logger
}

// Idempotency runs tool calls at most once per caller, tool and key, and
// answers the retries of a call with its first result. It is safe for
// concurrent use. A zero Idempotency refuses every call with
// [ErrIdempotencyStore].
type Idempotency struct {
	e        *engine
	arg      string
	meta     bool
	optional bool
	maxKey   int
	in       *Integration
}

// NewIdempotency returns an Idempotency for cfg, reporting through in, or
// an error matching ctoken.ErrConfig that names the invalid field: no
// Keys, no Store, neither KeyArgument nor KeyFromMeta, a negative or inconsistent
// duration, a MaxKeyBytes out of range, Transactional with a Store that
// is not a replay.Transactor.
func NewIdempotency(cfg IdempotencyConfig, in *Integration) (*Idempotency, error) {
	if err := in.check("NewIdempotency"); err != nil {
		return nil, err
	}
	bad := func(msg string) error {
		return fmt.Errorf("%s: NewIdempotency: %w: %s", in.Name, ctoken.ErrConfig, msg)
	}
	if cfg.Store == nil {
		return nil, bad("Store is nil")
	}
	seal, ok := newRecordSealer(cfg.Keys)
	if !ok {
		return nil, bad("Keys is nil or an empty keyring (recorded results are sealed with it)")
	}
	if cfg.KeyArgument == "" && !cfg.KeyFromMeta {
		return nil, bad("neither KeyArgument nor KeyFromMeta is set: no call could carry a key")
	}
	window, lease := cfg.Window, cfg.Lease
	if window == 0 {
		window = DefaultIdempotencyWindow
	}
	if lease == 0 {
		lease = DefaultIdempotencyLease
	}
	switch {
	case window < 0 || lease < 0 || cfg.Wait < 0:
		return nil, bad("Window, Lease or Wait is negative")
	case lease < time.Millisecond:
		return nil, bad("Lease is under a millisecond")
	case window <= lease:
		return nil, bad("Window is not longer than Lease")
	case cfg.Wait >= lease:
		return nil, bad("Wait is not less than Lease")
	}
	maxKey := cfg.MaxKeyBytes
	if maxKey == 0 {
		maxKey = DefaultMaxIdempotencyKeyBytes
	}
	if maxKey < 0 || maxKey > MaxIdempotencyKeyBytes {
		return nil, bad("MaxKeyBytes is negative or over MaxIdempotencyKeyBytes")
	}
	e := &engine{store: cfg.Store, lease: lease, window: window, wait: cfg.Wait, name: in.Name, log: in.Logger(), seal: seal}
	if cfg.Transactional {
		tx, ok := cfg.Store.(replay.Transactor)
		if !ok {
			return nil, bad("Transactional is set but Store is not a replay.Transactor (pgstore, sqlitestore)")
		}
		e.tx = tx
		e.acq, _ = tx.(replay.WorkAcquirer)
	} else {
		e.renew, _ = cfg.Store.(replay.Renewer)
	}
	if cfg.NonIdempotentWithoutKey {
		in.Logger().LogAttrs(context.Background(), slog.LevelWarn,
			in.Name+": NonIdempotentWithoutKey: a tool call without an idempotency key runs without protection; a retry of it runs the tool again")
	}
	return &Idempotency{e: e, arg: cfg.KeyArgument, meta: cfg.KeyFromMeta, optional: cfg.NonIdempotentWithoutKey, maxKey: maxKey, in: in}, nil
}

// RunFunc runs a tool call and returns its result as the JSON text the
// client is sent, or an error. A [*Failure] says the tool began and
// failed: it is recorded and answers every retry, as a result does (with
// Transactional, its writes are rolled back instead and the key
// released). Any other error records nothing: the tool had no effect
// ([ErrNoEffect], a validation failure), the key is released and a retry
// runs the tool again. ctx carries the store's transaction when the
// Idempotency is Transactional.
type RunFunc func(ctx context.Context) ([]byte, error)

// Failure is the error of a tool call that began and failed, as Stripe
// records a request that began executing whatever its status: a retry
// must not run the tool a second time. A [RunFunc] returns it with Err,
// the error the first call is answered with, and Record, the bytes
// recorded for it (sealed, as results are, at most
// replay.MaxResultBytes; an integration encodes the error its SDK sends
// in them). [Idempotency.Call] returns it as it is to the first call, and
// to every retry a Failure with the recorded Record and a nil Err, which
// the integration decodes into the same error.
type Failure struct {
	Record []byte
	Err    error

	recorded bool // the engine recorded Record (or replayed it)
}

// Error returns Err's text, or a fixed text for a replayed Failure.
func (f *Failure) Error() string {
	if f.Err == nil {
		return "mcptoken: the tool failed after it began (its recorded failure)"
	}
	return f.Err.Error()
}

// Unwrap returns Err.
func (f *Failure) Unwrap() error { return f.Err }

// Call runs run for the call of tool by caller with the arguments args
// (JSON text of an object; nil or blank is {}) and metaKey, the value of
// the call's _meta member [MetaIdempotencyKey] (nil when absent), at most
// once per caller, tool and key, and returns its result: the one run
// returned, or, for a retry of a call that completed, the one it
// recorded, byte for byte. The key is taken from args[KeyArgument] and
// metaKey and validated before anything else.
//
// Refusals, none of which runs the tool or consumes the key:
// [ErrIdempotencyKey] (no key where one is required, a malformed key, two
// different keys, arguments that are not a JSON object); the error of
// in.NoCaller for an empty caller; [ErrKeyReused] for a key used with
// other arguments; [ErrInProgress] for a key whose call still runs (after
// waiting up to Wait); [ErrIdempotencyStore] for a store that failed;
// [ErrNotRecorded] for a retry of a call whose result was not recorded.
// The error of run is returned as it is; a retry of a call whose run
// returned a [*Failure] gets a *Failure holding its Record.
//
// What the integrations' Wrap makes of it: the tool runs with a context
// that keeps ctx's values but not its cancellation (a client that goes
// away does not stop work that may have taken effect) but with the
// cancellation of a round or task that runs the call, ending as Lease
// says, and, with Transactional,
// carrying the store's transaction (pgstore.TxFrom, sqlitestore.TxFrom).
// An error that says the tool had no effect (a validation failure, an
// error matching [ErrNoEffect]) records nothing and releases the key; any
// other says it began and failed, as Stripe counts a request that began
// executing: it is recorded and every retry gets the same error without
// running the tool again (with Transactional, the tool's writes are rolled
// back instead and the key released). Each is logged once, with the tool. A result that asks the client for input (a round of a
// multi round-trip call) is not recorded: the key is released, and the
// round that completes the call is the one recorded and replayed.
func (i *Idempotency) Call(ctx context.Context, caller, tool string, args []byte, metaKey any, run RunFunc) ([]byte, error) {
	if i == nil || i.e == nil || run == nil {
		return nil, ErrIdempotencyStore
	}
	key, rest, err := i.extract(args, metaKey)
	if err != nil {
		i.in.Logger().LogAttrs(ctx, slog.LevelWarn, i.in.Name+": idempotent call refused: missing or malformed idempotency key; the tool did not run",
			slog.String("tool", tool), slog.String("error", err.Error())) // the error never holds the key
		return nil, err
	}
	if key == "" {
		i.in.Logger().LogAttrs(ctx, slog.LevelWarn, i.in.Name+": NonIdempotentWithoutKey: a tool call without an idempotency key runs unprotected", slog.String("tool", tool))
		return run(ctx)
	}
	if err := i.in.anonymous(ctx, caller); err != nil {
		return nil, err
	}
	fp, err := ctoken.ArgsFingerprint(json.RawMessage(rest))
	if err != nil {
		return nil, fmt.Errorf("%w: arguments: %w", ErrIdempotencyKey, err)
	}
	stored := append([]byte{idemFingerprintVersion}, fp[:]...)
	res, replayed, err := i.e.do(ctx, storeIDOfCall(caller, tool, key), stored, runFunc(run))
	if err == nil {
		return res, nil
	}
	if !replayed {
		i.logFailure(ctx, tool, err)
	}
	return nil, i.refusal(ctx, tool, err)
}

// logFailure logs, once, the error of a run: what was recorded for every
// retry, or that the key was released for a retry to run the tool.
func (i *Idempotency) logFailure(ctx context.Context, tool string, err error) {
	var f *Failure
	var msg string
	switch {
	case errors.As(err, &f) && f.Err != nil && f.recorded:
		msg = "the tool failed after it began: its failure is recorded, and every retry under its key gets it without a run"
	case errors.As(err, &f) && f.Err != nil && i.e.tx != nil:
		msg = "the tool failed: its transaction rolled back and its key released; a retry runs it"
	case errors.As(err, new(*stoppedError)):
		msg = "the server ended the tool's context and the tool returned that end: nothing recorded and its key released; a retry runs it"
	case errors.Is(err, ErrNoEffect):
		msg = "the tool had no effect: nothing recorded and its key released; a retry runs it"
	default:
		return
	}
	i.in.Logger().LogAttrs(ctx, slog.LevelWarn, i.in.Name+": "+msg, slog.String("tool", tool), slog.String("error", err.Error()))
}

// idemFingerprintVersion begins every fingerprint an Idempotency stores.
const idemFingerprintVersion = 1

// refusal maps an engine error to Call's documented errors, logging the
// server's faults.
func (i *Idempotency) refusal(ctx context.Context, tool string, err error) error {
	log := func(msg string) {
		i.in.Logger().LogAttrs(ctx, slog.LevelError, i.in.Name+": "+msg, slog.String("tool", tool), slog.String("error", err.Error()))
	}
	switch {
	case errors.Is(err, errBusy):
		return fmt.Errorf("%w: %w", ErrInProgress, err)
	case errors.Is(err, errFingerprint):
		i.in.Logger().LogAttrs(ctx, slog.LevelWarn, i.in.Name+": idempotent call refused: idempotency key reused with other arguments; the tool did not run",
			slog.String("tool", tool))
		return ErrKeyReused
	case errors.Is(err, errNoResult):
		log("retry of an idempotent call whose result was not recorded (too large, or its store ID taken by something else)")
		return ErrNotRecorded
	case errors.Is(err, errRecordForged):
		log("the recorded result does not open (edited in the store, moved to another call, or sealed under a key no longer in Keys): not replayed, and the tool not run again")
		return ErrNotRecorded
	case errors.Is(err, errEngineStore) && ctx.Err() != nil:
		// The caller went away before the tool ran: nothing was taken.
		return fmt.Errorf("%w: %w", ErrIdempotencyStore, err)
	case errors.Is(err, errUnknownOutcome):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err) // logged by the engine
	case errors.Is(err, errEngineStore):
		log("idempotency store failed")
		return fmt.Errorf("%w: %w", ErrIdempotencyStore, err)
	}
	return err // run's own error
}

// extract returns the key of a call (empty when it carries none and may
// run without) and its arguments without the key argument, as JSON text.
func (i *Idempotency) extract(args []byte, metaKey any) (key string, rest []byte, err error) {
	rest = args
	if len(bytes.TrimSpace(args)) == 0 {
		rest = []byte("{}")
	}
	var argKey, mKey string
	var haveArg, haveMeta bool
	if i.arg != "" {
		var obj map[string]json.RawMessage
		if json.Unmarshal(rest, &obj) != nil || obj == nil {
			return "", nil, fmt.Errorf("%w: the arguments are not a JSON object", ErrIdempotencyKey)
		}
		if raw, ok := obj[i.arg]; ok {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", nil, fmt.Errorf("%w: the key argument is not a string", ErrIdempotencyKey)
			}
			argKey, haveArg = s, true
			delete(obj, i.arg)
			if rest, err = json.Marshal(obj); err != nil {
				return "", nil, fmt.Errorf("%w: %w", ErrIdempotencyKey, err)
			}
		}
	}
	if _, ok := metaKey.(metaKeysDiffer); ok && i.meta {
		return "", nil, fmt.Errorf("%w: _meta %s and %s differ", ErrIdempotencyKey, MetaIdempotencyKey, LegacyMetaIdempotencyKey)
	}
	if i.meta && metaKey != nil {
		s, ok := metaKey.(string)
		if !ok {
			return "", nil, fmt.Errorf("%w: _meta %s is not a string", ErrIdempotencyKey, MetaIdempotencyKey)
		}
		mKey, haveMeta = s, true
	}
	switch {
	case haveArg && haveMeta && argKey != mKey:
		return "", nil, fmt.Errorf("%w: the key argument and _meta %s differ", ErrIdempotencyKey, MetaIdempotencyKey)
	case haveArg:
		key = argKey
	case haveMeta:
		key = mKey
	case i.optional:
		return "", rest, nil
	default:
		return "", nil, fmt.Errorf("%w: the call carries no key", ErrIdempotencyKey)
	}
	if err := checkIdempotencyKey(key, i.maxKey); err != nil {
		return "", nil, err
	}
	return key, rest, nil
}

// checkIdempotencyKey returns nil for a key of 1 to maxBytes bytes of
// visible ASCII other than '"', '\', ',' and ';' (the bare keys
// idempotency.ParseKey accepts), and an error matching
// [ErrIdempotencyKey] that never contains the key otherwise.
func checkIdempotencyKey(key string, maxBytes int) error {
	if key == "" || len(key) > maxBytes {
		return fmt.Errorf("%w: the key is empty or over %d bytes", ErrIdempotencyKey, maxBytes)
	}
	for j := 0; j < len(key); j++ {
		if c := key[j]; c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == ',' || c == ';' {
			return fmt.Errorf("%w: the key holds a byte outside visible ASCII, or one of \" \\ , ;", ErrIdempotencyKey)
		}
	}
	return nil
}

// storeIDDomain separates the store-ID hash of an idempotent tool call
// from every other SHA-256 use (the HTTP middleware's has its own).
const storeIDDomain = "ctoken/mcp idempotent tool call v1\x00"

// storeIDOfCall returns the replay-store ID of an idempotent call of tool
// by caller with key: "mcpidem:" + base64url (no padding) of SHA-256 over a
// domain label and the three strings, each preceded by its length as 8
// bytes big-endian, so no two triples share an ID, no ID is shared with
// the HTTP middleware's, and the store never holds the caller or the key
// in clear. It is not a secret.
func storeIDOfCall(caller, tool, key string) string {
	sum := callHash(storeIDDomain, caller, tool, key)
	return "mcpidem:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// callHash is the SHA-256 of domain and the length-prefixed caller, tool
// and key: no two triples share an input.
func callHash(domain, caller, tool, key string) [sha256.Size]byte {
	b := []byte(domain)
	for _, s := range [...]string{caller, tool, key} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	return sha256.Sum256(b)
}
