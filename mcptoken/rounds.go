package mcptoken

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/stateclaim"
	"github.com/ctoken/ctoken/replay"
)

// ErrStateUsed reports an authentic request state, bound to the call that
// presents it (caller, target, arguments), that was already used and whose
// round's result cannot be answered again: the round ended in an error, its
// result was not recorded (too large, or the store failed while recording
// it), its record does not open (see [States.Answer]), or another call
// under the same state (possible only with UnboundArgs) took it.
// [RefuseState] maps it to [CodeStateUsed].
var ErrStateUsed = errors.New("mcptoken: request state already used; its result cannot be answered again")

// ErrStateBusy reports an authentic request state, bound to the call that
// presents it, whose round is still running: the same call presented the
// same state while the first attempt had not finished. Retry later.
// [RefuseState] maps it to [CodeStateBusy], with the retry hint
// [States.Answer] attaches to it ([Refusal].RetryAfter).
var ErrStateBusy = errors.New("mcptoken: request state busy: its round is still running")

// ErrRoundInterrupted reports an authentic request state, bound to the
// call that presents it, whose round began under a server that stopped
// (a crash, a kill), or lost its hold on the state, before it recorded the
// round's result: whether the round acted is unknown, and it is not run
// again. [RefuseState] maps it to [CodeRoundInterrupted], without a retry
// hint: no retry settles it; the client checks the effect before it calls
// again without the state.
var ErrRoundInterrupted = errors.New("mcptoken: request state's round interrupted before its result was recorded; whether it acted is unknown")

// ErrNoRecorder reports States configured to answer retries
// (StatesConfig.AnswerRetries) whose codec is not single-use, or whose
// replay store is not a [replay.Recorder]: nothing could record a round's
// result. It matches ctoken.ErrConfig too.
var ErrNoRecorder = errors.New("mcptoken: AnswerRetries needs a single-use codec (ctoken.RequestStateSecurity.Replay) whose store is a replay.Recorder")

// Reasons logged (never sent) for an already used state.
var (
	errUsedNoRecord   = fmt.Errorf("%w (no record of its result)", ErrStateUsed)
	errUsedOtherCall  = fmt.Errorf("%w (by another call)", ErrStateUsed)
	errUsedOtherRound = fmt.Errorf("%w (running for another call)", ErrStateUsed)
	errUsedUnopened   = fmt.Errorf("%w (its recorded result does not open)", ErrStateUsed)
)

// errNoRoundKeys: the codec handed on no ring to seal round results with
// (it cannot happen with a codec NewStates accepted); Internal, logged at
// Error, and nothing taken.
var errNoRoundKeys = fmt.Errorf("%w: the request-state codec's ring seals no round result", ctoken.ErrNoKey)

// stateBusyError is [ErrStateBusy] with the hint of when to retry, which
// [RefuseState] carries to the client.
type stateBusyError struct{ retryAfter time.Duration }

func (e *stateBusyError) Error() string { return ErrStateBusy.Error() }
func (e *stateBusyError) Unwrap() error { return ErrStateBusy }

// busyRetryAfter is the retry hint of a round whose holder's lease still
// runs for wait: defaultBusyRetryAfter, or wait when it is shorter and
// known (not zero), as for an idempotent call in progress.
func busyRetryAfter(wait time.Duration) time.Duration {
	if wait > 0 && wait < defaultBusyRetryAfter {
		return wait
	}
	return defaultBusyRetryAfter
}

// confirmTimeout bounds the store call that records a round's result once
// the round has run, whatever happened to the request's context meanwhile.
const confirmTimeout = 10 * time.Second

// roundHold is how long a round holds its state in a store that renews
// leases ([replay.Renewer]): the hold is renewed every third of it while
// the round runs, so it ends within roundHold of its server stopping, and
// a retry then learns that the round was interrupted instead of being
// told "busy" until the state expires.
const roundHold = 15 * time.Second

// interruptedRecord is the record of a round judged interrupted: a few
// bytes no result begins with (results are JSON objects), sealed like a
// result, so that every later presentation is told the same.
var interruptedRecord = []byte("\x00ctoken: round interrupted")

// startedID is the store ID of the mark a round's first presentation
// claims before the round runs: found claimed by a later presentation
// that took the round's lease afresh, it tells that the round began under
// a holder that stopped without recording it.
func startedID(id string) string { return id + ".started" }

// A round that had no effect ([ErrNoEffect]) is run again by its state's
// next presentation, at most maxRoundRuns runs in all: each run n claims
// its own started mark (startedMark), and a run that had no effect claims
// freedMark before it releases the round, so that the next presentation
// tells it from a run whose holder stopped.
const maxRoundRuns = 16

// startedMark is the started mark of run n of a round (n from 0; run 0's
// is startedID, as before reruns existed).
func startedMark(id string, n int) string {
	if n == 0 {
		return startedID(id)
	}
	return fmt.Sprintf("%s.started.%d", id, n)
}

// freedMark is the mark run n of a round claims when it had no effect.
func freedMark(id string, n int) string { return fmt.Sprintf("%s.freed.%d", id, n) }

// AnswersRetries reports whether s answers the retry of a round with its
// recorded result ([StatesConfig].AnswerRetries).
func (s *States) AnswersRetries() bool { return s != nil && s.recorder != nil }

// Answer opens the state wire of a request to ctoken.MCPTarget(method, name)
// by caller exactly as [States.Open] does, runs round with the opened state
// at most once per state, and returns round's result; the honest retry of
// the same call (same caller, target, arguments and state) gets the result
// recorded for the first, byte for byte, without running round again.
// round returns the bytes of the result the client is sent (for example
// its JSON text), or an error that Answer returns unchanged.
//
// Every binding (caller, target, audience, expiry, and the arguments) is
// checked before the state is taken, so a refused state is not consumed;
// such a refusal is what Open returns (codes 1022 and 1023). Once every
// check has passed, the state's round is taken in the codec's replay store
// (a [replay.Recorder]) under the ID the codec claims it under, keyed by a
// fingerprint of caller, target, arguments and state, for as long as the
// codec would accept the state (its expiry second plus
// replay.SkewMargin):
//
//   - the first presentation runs round and records its result with the
//     fingerprint, in the step that ends the lease, sealed: the store
//     never holds a result in clear (below);
//   - a presentation while round runs is refused with the Integration's
//     Refused error for [CodeStateBusy] (retry later), whose
//     [Refusal].RetryAfter is how long the round's lease still runs, at
//     most a second (a second when the store does not say);
//   - a presentation after it ran gets the recorded result when its
//     fingerprint matches and its record opens, and otherwise
//     [CodeStateUsed];
//   - a round that returned an error or an empty result, or whose result
//     cannot be recorded (sealed, larger than replay.MaxResultBytes, or
//     refused by the store for its budget), is recorded done without a
//     result: the retry gets [CodeStateUsed], as a single-use state is
//     refused today, but never "invalid";
//   - except a round whose error matches [ErrNoEffect] (an idempotent
//     tool's, or the end of a context ctoken ended: see ErrNoEffect):
//     nothing happened, so it is released, and the same presentation runs
//     it again, with the answers the client already gave (at most 16 runs
//     of one state; the last is recorded as any error is);
//   - a round that panicked is recorded done without a result, as one
//     that returned an error, and the panic goes on to the caller;
//   - a round whose server stopped before recording (a crash) is never run
//     again by a store that outlives the server: the state stays busy
//     until it expires, then 1022 (replay.MemoryStore forgets the lease
//     with the process, and after a restart runs the round again).
//   - in a store that renews leases ([replay.Renewer]), a round whose hold
//     is lost (its renewals stalled, or refused by the store) has its
//     context cancelled, with a cause matching [ErrRoundInterrupted], before a
//     store whose clock runs at this process's rate can end the hold;
//     a store whose clock steps forward can end it first, which is why
//     [CodeRoundInterrupted] tells the client that the effect may still
//     appear until the state expires.
//
// A result is recorded sealed with XAES-256-GCM under a subkey of the
// primary key of the codec's own ring (the one the state opened with; HKDF
// label "ctoken.mcp round result xaes-256-gcm key", of its own, so that
// no idempotent tool call's record opens as a round's, nor the other way),
// bound to the state's store ID and the fingerprint: no configuration of
// its own. A record that does not open (edited in the store, moved from
// another state, sealed under a key no longer in the codec's ring, or
// recorded in clear by a version that did not seal) is never answered: the
// retry is refused with [CodeStateUsed] and logged at Error, and the round
// does not run again. A record sealed under any key of the ring opens, so
// a rotation that keeps the previous keys (as it must for the states
// themselves) keeps answering.
//
// A store that cannot answer is the StoreFailed refusal and consumes
// nothing. A failure to record after round ran is logged at Error and the
// fresh result is still returned; the state then stays busy until it
// expires.
//
// The codec's observer, if any, sees the state verified once every check
// has passed, before the store is asked; what Answer decides after that
// (busy, already used, answered from the record) is logged, not observed.
//
// States that do not answer retries (AnswerRetries off) open the state with
// Open (claiming it, once) and run round. A nil round, and States not made
// by [NewStates], are an error before anything is opened. Answer is safe
// for concurrent use.
func (s *States) Answer(ctx context.Context, caller, method, name string, args any, wire string, round func(ctx context.Context, state string) ([]byte, error)) ([]byte, error) {
	if s == nil || s.in == nil || s.codec == nil {
		return nil, errors.New("mcptoken: Answer: States not made by NewStates")
	}
	if round == nil {
		return nil, errors.New("mcptoken: Answer: nil round")
	}
	if s.recorder == nil {
		plain, err := s.Open(ctx, caller, method, name, args, wire)
		if err != nil {
			return nil, err
		}
		return round(ctx, plain)
	}
	if err := s.in.anonymous(ctx, caller); err != nil {
		return nil, err
	}
	target := ctoken.MCPTarget(method, name)
	var check func(string) (string, error)
	if !s.unboundArgs {
		check = func(plain string) (string, error) { return UnwrapArgs(args, plain) }
	}
	o, err := stateclaim.Open(ctx, s.codec, wire, caller, target, check)
	if err != nil {
		return nil, s.refuse(ctx, method, name, err)
	}
	seal, ok := s.sealerOf(o.Keys)
	if !ok {
		return nil, s.refuse(ctx, method, name, errNoRoundKeys)
	}
	fp, err := roundFingerprint(caller, target, args, o.ID)
	if err != nil {
		// The arguments passed the codec's check, so they fingerprint;
		// fail closed all the same.
		return nil, s.refuse(ctx, method, name, ErrArgsMismatch)
	}
	lease := o.Lease
	if s.renewer != nil {
		lease = min(s.hold, o.Lease)
	}
	acquiredAt := time.Now() // the store's hold begins no earlier
	rec, err := s.recorder.AcquireRecord(ctx, o.ID, lease, fp)
	if err != nil {
		return nil, s.refuse(ctx, method, name, err)
	}
	switch rec.State {
	case replay.LeaseBusy:
		if !sameFingerprint(rec.Fingerprint, fp) {
			return nil, s.refuse(ctx, method, name, errUsedOtherRound)
		}
		return nil, s.refuse(ctx, method, name, &stateBusyError{retryAfter: busyRetryAfter(rec.Wait)})
	case replay.LeaseDone:
		switch {
		case len(rec.Fingerprint) == 0 || len(rec.Result) == 0:
			return nil, s.refuse(ctx, method, name, errUsedNoRecord)
		case !sameFingerprint(rec.Fingerprint, fp):
			return nil, s.refuse(ctx, method, name, errUsedOtherCall)
		}
		res, err := seal.open(o.ID, fp, rec.Result)
		if err != nil {
			s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state retried: the recorded result of its round does not open (edited in the store, moved from another state, sealed under a key no longer in the codec's ring, or recorded in clear before results were sealed); not answered, and the round not run again",
				NameAttr(method, name))
			return nil, s.in.Refused(RefuseState(errUsedUnopened))
		}
		if bytes.Equal(res, interruptedRecord) { // a marker, not a secret
			return nil, s.refuse(ctx, method, name, ErrRoundInterrupted)
		}
		s.in.Logger().LogAttrs(ctx, slog.LevelInfo, s.in.Name+": request state retried: answered with the recorded result of its round",
			NameAttr(method, name))
		return res, nil
	case replay.LeaseAcquired:
	default:
		return nil, s.refuse(ctx, method, name, fmt.Errorf("replay store answered lease state %v", rec.State))
	}
	run := 0 // the round's run, from 0 (reruns follow runs with no effect)
	if s.renewer != nil {
		if run, err = s.start(ctx, method, name, o, rec.Token, fp, seal); err != nil {
			return nil, err
		}
	}
	res, runErr := s.run(ctx, method, name, o, rec.Token, acquiredAt, round)
	if errors.Is(runErr, ErrNoEffect) && s.free(ctx, o, rec.Token, run) {
		// Nothing happened: the same presentation runs the round again,
		// with the answers the client already gave.
		s.in.Logger().LogAttrs(ctx, slog.LevelWarn, s.in.Name+": request state: the round had no effect; released for the same request to run it again",
			NameAttr(method, name))
		return nil, runErr
	}
	cctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(confirmTimeout))
	defer cancel()
	if runErr != nil {
		// The round may have had effects before it failed: consumed, as a
		// single-use state always was, and the retry is told so (1026).
		if err := s.recorder.ConfirmLease(cctx, o.ID, rec.Token, o.Until); err != nil {
			s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state: recording a failed round failed; the state stays busy "+s.unrecorded(),
				NameAttr(method, name), slog.String("error", err.Error()))
		}
		return nil, runErr
	}
	err = replay.ErrTooLarge // an empty result, as a store refuses it
	if len(res) > 0 {
		var record []byte
		if record, err = seal.seal(o.ID, fp, res); err == nil {
			err = s.recorder.ConfirmRecord(cctx, o.ID, rec.Token, o.Until, fp, record)
		}
	}
	if errors.Is(err, replay.ErrTooLarge) || errors.Is(err, replay.ErrFull) {
		s.in.Logger().LogAttrs(ctx, slog.LevelWarn, s.in.Name+": request state: the round's result cannot be recorded; a retry will be told the state was already used",
			NameAttr(method, name), slog.Int("bytes", len(res)), slog.String("error", err.Error()))
		err = s.recorder.ConfirmLease(cctx, o.ID, rec.Token, o.Until)
	}
	if err != nil {
		s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state: recording the round's result failed; the state stays busy "+s.unrecorded(),
			NameAttr(method, name), slog.String("error", err.Error()))
	}
	return res, nil
}

// start claims the mark that the round of o began, before it runs, in a
// store that renews leases, and returns the run's number. A mark already
// claimed means that the round began before: under a holder that freed it
// (it had no effect: its freed mark is claimed), and the next run's mark
// is tried, or under a holder whose hold has ended without a record: that
// holder stopped, and whether the round acted is unknown. The round is
// then recorded as interrupted (every later presentation is told so) and
// not run; the error returned is the Integration's refusal.
func (s *States) start(ctx context.Context, method, name string, o stateclaim.Opened, token string, fp []byte, seal *recordSealer) (int, error) {
	for n := 0; n < maxRoundRuns; n++ {
		first, err := s.claims.Claim(ctx, startedMark(o.ID, n), o.Until)
		if err == nil && first {
			return n, nil
		}
		var stopped bool
		if err == nil {
			// Claimed first here: its holder never freed the run, and
			// now never can.
			stopped, err = s.claims.Claim(ctx, freedMark(o.ID, n), o.Until)
		}
		if err != nil {
			s.releaseRound(ctx, o.ID, token)
			return 0, s.refuse(ctx, method, name, err)
		}
		if stopped {
			break
		}
	}
	s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state: its round began under a server that stopped before recording its result; whether it acted is unknown: not run again, and every presentation is told so",
		NameAttr(method, name))
	cctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(confirmTimeout))
	defer cancel()
	record, err := seal.seal(o.ID, fp, interruptedRecord)
	if err == nil {
		err = s.recorder.ConfirmRecord(cctx, o.ID, token, o.Until, fp, record)
	}
	if err != nil {
		s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state: recording an interrupted round failed; the next presentation judges it again",
			NameAttr(method, name), slog.String("error", err.Error()))
	}
	return 0, s.refuse(ctx, method, name, ErrRoundInterrupted)
}

// free releases the round of o, run n, that had no effect, for the
// state's next presentation to run it again, and reports whether it did:
// not for the last run a state may have, nor when its freed mark cannot be
// claimed (the store failed, or a presentation found the hold ended and
// judged the round interrupted).
func (s *States) free(ctx context.Context, o stateclaim.Opened, token string, n int) bool {
	if s.renewer != nil {
		if n+1 >= maxRoundRuns {
			return false
		}
		first, err := s.claims.Claim(ctx, freedMark(o.ID, n), o.Until)
		if err != nil || !first {
			return false
		}
	}
	cctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(confirmTimeout))
	defer cancel()
	if err := s.recorder.ReleaseLease(cctx, o.ID, token); err != nil {
		// Freed all the same once the hold ends: with the freed mark
		// claimed, the next presentation runs the round again.
		s.in.Logger().LogAttrs(ctx, slog.LevelWarn, s.in.Name+": request state: releasing a round that had no effect failed; it runs again once its hold ends",
			slog.String("error", err.Error()))
	}
	return true
}

// unrecorded says what follows for a state whose round ran but was not
// recorded: busy until its hold ends, then interrupted (a store that
// renews), or busy until it expires.
func (s *States) unrecorded() string {
	if s.renewer != nil {
		return "until the round's hold ends, then every presentation is told it was interrupted (1029)"
	}
	return "until it expires"
}

// releaseRound frees the round's lease after a store failure before the
// round ran, so that a retry need not wait for the hold to end.
func (s *States) releaseRound(ctx context.Context, id, token string) {
	cctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(confirmTimeout))
	defer cancel()
	_ = s.recorder.ReleaseLease(cctx, id, token) // on failure the hold ends by itself
}

// run runs round with the opened state, detached from ctx's cancellation
// and ending before the state's lease does, or, in a store that renews
// leases, once its hold is lost (context.Cause then matches
// [ErrRoundInterrupted]). A round that panics may have had effects, as a
// failed one: its lease is ended without a result (a retry is told 1026,
// not busy until the state expires), logged at Error, and the panic goes
// on.
func (s *States) run(ctx context.Context, method, name string, o stateclaim.Opened, token string, acquiredAt time.Time, round func(context.Context, string) ([]byte, error)) (_ []byte, err error) {
	panicked := true
	defer func() {
		if !panicked {
			return
		}
		cctx, cancel := replay.WithDeadlineOnly(ctx, time.Now().Add(confirmTimeout))
		defer cancel()
		s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state: the round panicked; a retry will be told the state was already used",
			NameAttr(method, name))
		if err := s.recorder.ConfirmLease(cctx, o.ID, token, o.Until); err != nil {
			s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state: recording a panicked round failed; the state stays busy "+s.unrecorded(),
				NameAttr(method, name), slog.String("error", err.Error()))
		}
	}()
	// The round keeps the request's values but not its cancellation: a
	// client that goes away (often the very loss its retry recovers from)
	// must not cut short a round that may already have had effects, which
	// would use the state up (1026) instead of recording the result its
	// retry is answered with. It ends before the lease does, with time
	// left to record, and when its hold is lost: a retry may then be told
	// that it was interrupted, and it must not act after that.
	rctx, cancel := context.WithDeadlineCause(detach(ctx), o.Until.Add(-confirmTimeout), errRoundTimeUp)
	defer cancel()
	if s.renewer != nil {
		// The hold is renewed while the round runs (leasekeeper.go) and
		// counts as lost before the store can find it lapsed: the round's
		// context is then cancelled with [ErrRoundInterrupted] before
		// any later presentation can be told the round was interrupted.
		hctx, lost := context.WithCancelCause(rctx)
		defer lost(nil)
		// Renewed until the round returns, whatever ends its context.
		kctx, kcancel := context.WithDeadline(context.WithoutCancel(ctx), o.Until)
		defer kcancel()
		stop := keep(kctx, keptLease{renewer: s.renewer, id: o.ID, token: token, hold: s.hold, held: acquiredAt, end: o.Until,
			lost: func(err error) {
				lost(errRoundHoldLost)
				why := "no renewal reached the store in time"
				if errors.Is(err, replay.ErrLeaseLost) {
					why = "the store ended it"
				}
				s.in.Logger().LogAttrs(ctx, slog.LevelError, s.in.Name+": request state: the round's hold was lost while it ran ("+why+"); its context was cancelled, and a retry may be told it was interrupted",
					NameAttr(method, name), slog.String("error", err.Error()))
			},
			retrying: func(err error) {
				s.in.Logger().LogAttrs(ctx, slog.LevelWarn, s.in.Name+": request state: renewing the round's hold failed; trying again",
					NameAttr(method, name), slog.String("error", err.Error()))
			},
		})
		defer stop()
		rctx = hctx
	}
	res, err := round(rctx, o.State)
	panicked = false
	if stoppedByServer(rctx, err) {
		// The end ctoken gave it (its hold lost, its time up), not its
		// failure: nothing happened, as for ErrNoEffect.
		return nil, &stoppedError{err: err, cause: context.Cause(rctx)}
	}
	return res, err
}

// Causes of a round's context that ctoken ended: its hold was lost
// (matching [ErrRoundInterrupted]), or its state's time ran out.
var (
	errRoundHoldLost = serverCause(ErrRoundInterrupted)
	errRoundTimeUp   = serverCause(errors.New("the round's request state is about to expire"))
)

// roundFingerprint is what a round's record is bound to: SHA-256 of a
// domain label and the length-prefixed caller, target, hex fingerprint of
// the arguments (as [WrapArgs] takes them) and the state's claim ID.
func roundFingerprint(caller, target string, args any, id string) ([]byte, error) {
	afp, err := argsDigest(args)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte("ctoken.mcp-round.v1"))
	for _, part := range []string{caller, target, hex.EncodeToString(afp[:]), id} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return h.Sum(nil), nil
}

// ringSealer is the sealer of round results under one ring.
type ringSealer struct {
	ring any // a *ctoken.Keyring
	seal *recordSealer
}

// sealerOf returns the sealer of round results under ring, the codec's
// ring a state opened with, derived once per ring (a KeySource's swap
// derives the next ring's once), or false for no ring.
func (s *States) sealerOf(ring any) (*recordSealer, bool) {
	if rs := s.sealer.Load(); rs != nil && rs.ring == ring {
		return rs.seal, true
	}
	seal, ok := newSealer(ring, roundSealLabel)
	if !ok {
		return nil, false
	}
	s.sealer.Store(&ringSealer{ring: ring, seal: seal})
	return seal, true
}

// recorderOf returns the replay store of codec as a [replay.Recorder], or
// an error matching [ErrNoRecorder] and ctoken.ErrConfig.
func recorderOf(codec *ctoken.RequestStateCodec) (replay.Recorder, error) {
	store, _ := stateclaim.Store(codec).(replay.Store)
	if store == nil {
		return nil, fmt.Errorf("%w: %w: the codec is not single-use", ctoken.ErrConfig, ErrNoRecorder)
	}
	rec, ok := store.(replay.Recorder)
	if !ok {
		return nil, fmt.Errorf("%w: %w: its store (%T) is not a replay.Recorder", ctoken.ErrConfig, ErrNoRecorder, store)
	}
	return rec, nil
}
