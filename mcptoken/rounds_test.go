package mcptoken

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/internal/stateclaim"
	"github.com/ctoken/ctoken/replay"
)

// retryStates returns States that answer retries over a single-use codec
// (real time: the memory store keeps it) whose store is store.
func retryStates(t *testing.T, store replay.Store, cfg StatesConfig) (*States, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	cfg.AnswerRetries = true
	s, err := NewStates(codec(t, &clock{now: time.Now()}, store), cfg, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	return s, &log
}

// countedRound is a round that counts its runs and answers its state back.
type countedRound struct{ runs atomic.Int32 }

func (c *countedRound) round(_ context.Context, state string) ([]byte, error) {
	n := c.runs.Add(1)
	return []byte(`{"deployed":"` + state + `","run":` + string(rune('0'+n)) + `}`), nil
}

// refusalCode returns the code of the test integration's refusal err, or
// -1 when err is not one.
func refusalCode(err error) int {
	var re *refusedErr
	if !errors.As(err, &re) {
		return -1
	}
	return re.r.Code
}

// claimOnlyStore is a replay.Store that is not a replay.Recorder.
type claimOnlyStore struct{ replay.Store }

func TestAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"new states answer retries needs a recorder", newStatesAnswerRetriesNeedsARecorder},
		{"retry gets the recorded result without a second run", answerRetryGetsTheRecordedResultWithoutASecondRun},
		{"round outlives the client's cancellation", answerRoundOutlivesTheClientsCancellation},
		{"refuses anyone else and any change as open does", answerRefusesAnyoneElseAndAnyChangeAsOpenDoes},
		{"concurrent retry is busy", answerConcurrentRetryIsBusy},
		{"already used without a record is code 1026", answerAlreadyUsedWithoutARecordIsCode1026},
		{"store failure runs nothing", answerStoreFailureRunsNothing},
		{"refuses zero states and anonymous callers", answerRefusesZeroStatesAndAnonymousCallers},
		{"recording failure returns the outcome and never runs twice", answerRecordingFailureReturnsTheOutcomeAndNeverRunsTwice},
		{"records the result sealed", answerRecordsTheResultSealed},
		{"refuses a record that does not open", answerRefusesARecordThatDoesNotOpen},
		{"retry after a key rotation gets the recorded result", answerRetryAfterAKeyRotationGetsTheRecordedResult},
		{"busy carries a retry hint", answerBusyCarriesARetryHint},
		{"states sealer of derives once per ring", statesSealerOfDerivesOncePerRing},
		{"interrupted round is told so once its hold ends", answerInterruptedRoundIsToldSoOnceItsHoldEnds},
		{"round longer than its hold stays busy", answerRoundLongerThanItsHoldStaysBusy},
		{"round whose renewals stall is cancelled while still held", answerRoundWhoseRenewalsStallIsCancelledWhileStillHeld},
		{"round whose store clock steps forward is cancelled", answerRoundWhoseStoreClockStepsForwardIsCancelled},
		{"round with no effect is freed for its resend", answerRoundWithNoEffectIsFreedForItsResend},
	} {
		t.Run(tc.name, tc.test)
	}
}

// NewStates with AnswerRetries refuses, as a configuration error, a codec
// that is not single-use and one whose store cannot record; a Recorder is
// accepted.
func newStatesAnswerRetriesNeedsARecorder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store replay.Store
		ok    bool
	}{
		{"not single-use", nil, false},
		{"store without records", claimOnlyStore{replay.NewMemoryStore(0)}, false},
		{"memory store", replay.NewMemoryStore(0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			s, err := NewStates(codec(t, &clock{now: time.Now()}, tc.store), StatesConfig{AnswerRetries: true}, testIntegration(&log))
			if tc.ok {
				if err != nil || !s.AnswersRetries() {
					t.Fatalf("%v, answers retries %v", err, s.AnswersRetries())
				}
				return
			}
			if s != nil || !errors.Is(err, ErrNoRecorder) || !errors.Is(err, ctoken.ErrConfig) {
				t.Fatalf("%v, %v; want ErrNoRecorder and ErrConfig", s, err)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		var log bytes.Buffer
		s, err := NewStates(codec(t, &clock{now: time.Now()}, nil), StatesConfig{}, testIntegration(&log))
		if err != nil || s.AnswersRetries() {
			t.Fatalf("%v, answers retries %v", err, s.AnswersRetries())
		}
	})
}

// The case: the round ran, its response was lost, and the honest
// retry (same caller, tool, arguments and state) gets the first result,
// byte for byte, without a second run.
func answerRetryGetsTheRecordedResultWithoutASecondRun(t *testing.T) {
	s, log := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
	if err != nil {
		t.Fatal(err)
	}
	var c countedRound
	first, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		again, err := s.Answer(ctx, "alice", "tools/call", "deploy", []byte(`{ "target" : "prod" }`), wire, c.round)
		if err != nil || !bytes.Equal(again, first) {
			t.Fatalf("retry %d: %q, %v; want %q", i, again, err, first)
		}
	}
	if n := c.runs.Load(); n != 1 {
		t.Fatalf("the round ran %d times", n)
	}
	if !strings.Contains(log.String(), "answered with the recorded result") || strings.Contains(log.String(), wire) {
		t.Fatalf("log %q", log.String())
	}
}

// A client that goes away while its round runs (the loss its retry then
// recovers from) does not cut the round short: the round sees no
// cancellation, its result is recorded, and the retry is answered with it.
func answerRoundOutlivesTheClientsCancellation(t *testing.T) {
	s, _ := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
	args := []byte(`{"target":"prod"}`)
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var c countedRound
	var sawDeadline bool
	round := func(rctx context.Context, state string) ([]byte, error) {
		cancel() // the client disconnects mid-round
		_, sawDeadline = rctx.Deadline()
		if err := rctx.Err(); err != nil {
			return nil, err // a round that honours its context gives up
		}
		return c.round(rctx, state)
	}
	first, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round)
	if err != nil {
		t.Fatalf("the round was cut short by the client's cancellation: %v", err)
	}
	if !sawDeadline {
		t.Fatal("the round's context has no deadline: it could outlive the state's lease")
	}
	again, err := s.Answer(context.Background(), "alice", "tools/call", "deploy", args, wire, c.round)
	if err != nil || !bytes.Equal(again, first) || c.runs.Load() != 1 {
		t.Fatalf("retry: %q, %v, %d runs; want %q once", again, err, c.runs.Load(), first)
	}
}

// Every binding is checked before the round is taken: another caller,
// other arguments, another tool, a tampered state and an expired one are
// refused as Open refuses them (1023, 1022), before and after the round
// ran, and consume nothing.
func answerRefusesAnyoneElseAndAnyChangeAsOpenDoes(t *testing.T) {
	args := []byte(`{"target":"prod"}`)
	for _, ran := range []bool{false, true} {
		name := "before the round"
		if ran {
			name = "after the round"
		}
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			var log bytes.Buffer
			store := replay.NewMemoryStore(0)
			s, err := NewStates(codec(t, &clock{now: now}, store), StatesConfig{AnswerRetries: true}, testIntegration(&log))
			if err != nil {
				t.Fatal(err)
			}
			later, err := NewStates(codec(t, &clock{now: now.Add(2 * time.Minute)}, store), StatesConfig{AnswerRetries: true}, testIntegration(&log))
			if err != nil {
				t.Fatal(err)
			}
			// Servers that share the store (and, for the audience, the
			// key) but not the state's audience or key.
			otherAudience, err := NewStates(codecFor(t, &clock{now: now}, store, 0, "billing"), StatesConfig{AnswerRetries: true}, testIntegration(&log))
			if err != nil {
				t.Fatal(err)
			}
			otherKey, err := NewStates(codecFor(t, &clock{now: now}, store, 7, ""), StatesConfig{AnswerRetries: true}, testIntegration(&log))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			wire, _ := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
			var c countedRound
			var first []byte
			if ran {
				if first, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range []struct {
				name string
				st   *States
				who  string
				tool string
				args []byte
				wire string
				code int
			}{
				{"another caller", s, "bob", "deploy", args, wire, CodeStateInvalid},
				{"changed argument", s, "alice", "deploy", []byte(`{"target":"staging"}`), wire, CodeStateInvalid},
				{"another tool", s, "alice", "rollback", args, wire, CodeStateInvalid},
				{"tampered state", s, "alice", "deploy", args, wire[:len(wire)-2] + flip(wire[len(wire)-2]) + wire[len(wire)-1:], CodeStateInvalid},
				{"expired state", later, "alice", "deploy", args, wire, CodeStateExpired},
				{"another audience", otherAudience, "alice", "deploy", args, wire, CodeStateInvalid},
				{"another key", otherKey, "alice", "deploy", args, wire, CodeStateInvalid},
			} {
				t.Run(tc.name, func(t *testing.T) {
					out, err := tc.st.Answer(ctx, tc.who, "tools/call", tc.tool, tc.args, tc.wire, c.round)
					if out != nil || refusalCode(err) != tc.code {
						t.Fatalf("%q, %v; want code %d", out, err, tc.code)
					}
				})
			}
			out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
			if err != nil || (ran && !bytes.Equal(out, first)) {
				t.Fatalf("honest presentation after the refusals: %q, %v", out, err)
			}
			if n := c.runs.Load(); n != 1 {
				t.Fatalf("the round ran %d times", n)
			}
		})
	}
}

// codecFor is codec with the key of 32 bytes of key and audience.
func codecFor(t testing.TB, c *clock, store replay.Store, key byte, audience string) *ctoken.RequestStateCodec {
	t.Helper()
	kr, err := ctoken.NewKeyring(bytes.Repeat([]byte{key}, 32))
	if err != nil {
		t.Fatal(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: kr, Binding: ctoken.BindSubjectAndTool, TTL: time.Minute, Now: c.Now, Replay: store, Audience: audience,
	})
	if err != nil {
		t.Fatal(err)
	}
	return codec
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// A retry that overtakes the first attempt, while its round still runs, is
// busy (1027, retry later) and runs nothing; once the round is done, the
// retry gets its result.
func answerConcurrentRetryIsBusy(t *testing.T) {
	s, _ := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	wire, _ := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
	started, release := make(chan struct{}), make(chan struct{})
	var c countedRound
	slow := func(ctx context.Context, state string) ([]byte, error) {
		close(started)
		<-release
		return c.round(ctx, state)
	}
	var wg sync.WaitGroup
	var first []byte
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		first, firstErr = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, slow)
	}()
	<-started
	out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
	var re *refusedErr
	if out != nil || !errors.As(err, &re) || re.r.Code != CodeStateBusy || !re.r.Busy() {
		t.Fatalf("concurrent retry: %q, %v; want busy", out, err)
	}
	if re.r.RetryAfter <= 0 || re.r.RetryAfter > time.Second {
		t.Fatalf("concurrent retry: hint %v; want one in (0, 1s]", re.r.RetryAfter)
	}
	close(release)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	out, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
	if err != nil || !bytes.Equal(out, first) || c.runs.Load() != 1 {
		t.Fatalf("retry after the round: %q, %v, %d runs", out, err, c.runs.Load())
	}
}

// An authentic state whose result cannot be answered again is "already
// used" (1026), never "invalid": the round failed or panicked; its result was too large
// to record (sealed), or empty; the codec claimed it without a record (a handler's own Open);
// with UnboundArgs, another call under the same state ran or runs it.
func answerAlreadyUsedWithoutARecordIsCode1026(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	errDeploy := errors.New("deploy failed")
	for _, tc := range []struct {
		name  string
		store *replay.MemoryStore
		cfg   StatesConfig
		// first uses the state once; second presents it again.
		first  func(s *States, wire string) error
		second []byte
	}{
		{"round failed", replay.NewMemoryStore(0), StatesConfig{}, func(s *States, wire string) error {
			_, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) ([]byte, error) { return nil, errDeploy })
			if !errors.Is(err, errDeploy) {
				return errors.New("the round's error was not returned unchanged")
			}
			return nil
		}, args},
		{"round panicked", replay.NewMemoryStore(0), StatesConfig{}, func(s *States, wire string) (err error) {
			// The panic goes on to the caller (an SDK's recovery, or the
			// process); the state is used, not left busy until it expires.
			defer func() {
				if recover() == nil {
					err = errors.New("the round's panic did not reach the caller")
				}
			}()
			_, _ = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) ([]byte, error) { panic("deploy panicked") })
			return nil
		}, args},
		{"result too large to record", replay.NewMemoryStore(0), StatesConfig{}, func(s *States, wire string) error {
			big := bytes.Repeat([]byte("x"), replay.MaxResultBytes+1)
			out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) ([]byte, error) { return big, nil })
			if err != nil || !bytes.Equal(out, big) {
				return errors.New("the fresh result was not returned")
			}
			return nil
		}, args},
		{"result over the sealable maximum", replay.NewMemoryStore(0), StatesConfig{}, func(s *States, wire string) error {
			// It fits in replay.MaxResultBytes, but not once sealed.
			big := bytes.Repeat([]byte("x"), maxRecordedResult+1)
			out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) ([]byte, error) { return big, nil })
			if err != nil || !bytes.Equal(out, big) {
				return errors.New("the fresh result was not returned")
			}
			return nil
		}, args},
		{"empty result", replay.NewMemoryStore(0), StatesConfig{}, func(s *States, wire string) error {
			out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) ([]byte, error) { return []byte{}, nil })
			if err != nil || len(out) != 0 {
				return errors.New("the fresh result was not returned")
			}
			return nil
		}, args},
		{"claimed by Open", replay.NewMemoryStore(0), StatesConfig{}, func(s *States, wire string) error {
			_, err := s.Open(ctx, "alice", "tools/call", "deploy", args, wire)
			return err
		}, args},
		{"another call ran it (UnboundArgs)", replay.NewMemoryStore(0), StatesConfig{UnboundArgs: true}, func(s *States, wire string) error {
			_, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, (&countedRound{}).round)
			return err
		}, []byte(`{"target":"staging"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, log := retryStates(t, tc.store, tc.cfg)
			wire, _ := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
			if err := tc.first(s, wire); err != nil {
				t.Fatal(err)
			}
			var c countedRound
			out, err := s.Answer(ctx, "alice", "tools/call", "deploy", tc.second, wire, c.round)
			if out != nil || refusalCode(err) != CodeStateUsed || c.runs.Load() != 0 {
				t.Fatalf("%q, %v, %d runs; want code 1026 and no run", out, err, c.runs.Load())
			}
			if !strings.Contains(log.String(), "already used") || strings.Contains(log.String(), wire) {
				t.Fatalf("log %q", log.String())
			}
		})
	}
	t.Run("another call runs it (UnboundArgs)", func(t *testing.T) {
		s, _ := retryStates(t, replay.NewMemoryStore(0), StatesConfig{UnboundArgs: true})
		wire, _ := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
		started, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) ([]byte, error) {
				close(started)
				<-release
				return []byte("{}"), nil
			})
		}()
		<-started
		_, err := s.Answer(ctx, "alice", "tools/call", "deploy", []byte(`{"target":"staging"}`), wire, (&countedRound{}).round)
		close(release)
		wg.Wait()
		if refusalCode(err) != CodeStateUsed {
			t.Fatalf("%v; want code 1026", err)
		}
	})
}

// downRecorder is a Recorder whose every call fails.
type downRecorder struct{ *replay.MemoryStore }

func (downRecorder) AcquireRecord(context.Context, string, time.Duration, []byte) (replay.Record, error) {
	return replay.Record{}, errStoreDown
}

// A store that cannot answer is StoreFailed, logged, runs nothing and
// consumes nothing.
func answerStoreFailureRunsNothing(t *testing.T) {
	mem := replay.NewMemoryStore(0)
	down, log := retryStates(t, downRecorder{mem}, StatesConfig{})
	ctx := context.Background()
	args := []byte(`{}`)
	wire, _ := down.Seal("alice", "tools/call", "deploy", args, "s")
	var c countedRound
	_, err := down.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
	var re *refusedErr
	if !errors.As(err, &re) || !re.r.StoreFailed || c.runs.Load() != 0 {
		t.Fatalf("%v, %d runs; want StoreFailed and no run", err, c.runs.Load())
	}
	if !strings.Contains(log.String(), "request state store failed") {
		t.Fatalf("log %q", log.String())
	}
	up, _ := retryStates(t, mem, StatesConfig{})
	if _, err := up.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round); err != nil || c.runs.Load() != 1 {
		t.Fatalf("after the outage: %v, %d runs", err, c.runs.Load())
	}
}

// Answer refuses rather than panics: States not made by NewStates, a nil
// round, and an empty caller (NoCaller, before the state is looked at). States that do
// not answer retries open (and claim) the state as Open does.
func answerRefusesZeroStatesAndAnonymousCallers(t *testing.T) {
	ctx := context.Background()
	var c countedRound
	if _, err := new(States).Answer(ctx, "alice", "tools/call", "deploy", nil, "v1.x", c.round); err == nil {
		t.Fatal("zero States answered")
	}
	var nilStates *States
	if _, err := nilStates.Answer(ctx, "alice", "tools/call", "deploy", nil, "v1.x", c.round); err == nil || nilStates.AnswersRetries() {
		t.Fatal("nil States answered")
	}
	s, _ := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
	wire, _ := s.Seal("alice", "tools/call", "deploy", nil, "s")
	if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", nil, wire, nil); err == nil {
		t.Fatal("nil round answered")
	}
	if _, err := s.Answer(ctx, "", "tools/call", "deploy", nil, wire, c.round); !errors.Is(err, errTestNoCaller) {
		t.Fatalf("anonymous: %v", err)
	}
	var log bytes.Buffer
	plain, err := NewStates(codec(t, &clock{now: time.Now()}, replay.NewMemoryStore(0)), StatesConfig{}, testIntegration(&log))
	if err != nil {
		t.Fatal(err)
	}
	wire, _ = plain.Seal("alice", "tools/call", "deploy", nil, "s")
	if _, err := plain.Answer(ctx, "alice", "tools/call", "deploy", nil, wire, c.round); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Answer(ctx, "alice", "tools/call", "deploy", nil, wire, c.round); refusalCode(err) != CodeStateUsed || c.runs.Load() != 1 {
		t.Fatalf("second presentation without AnswerRetries: %v, %d runs", err, c.runs.Load())
	}
}

// FuzzStatesAnswer: whatever the wire, caller and arguments, Answer never
// panics, refuses with NoCaller or a coded refusal, and runs or answers a
// round only for the sealed caller and arguments, always with the one
// result the round first returned.
func FuzzStatesAnswer(f *testing.F) {
	var log bytes.Buffer
	s, err := NewStates(codec(f, &clock{now: time.Now()}, replay.NewMemoryStore(0)), StatesConfig{AnswerRetries: true}, testIntegration(&log))
	if err != nil {
		f.Fatal(err)
	}
	const sealedArgs = `{"target":"prod"}`
	wire, err := s.Seal("alice", "tools/call", "deploy", []byte(sealedArgs), "step1")
	if err != nil {
		f.Fatal(err)
	}
	want, _ := ctoken.ArgsFingerprint([]byte(sealedArgs))
	f.Add(wire, "alice", sealedArgs)
	f.Add(wire, "alice", ` { "target" : "prod" } `)
	f.Add(wire, "bob", sealedArgs)
	f.Add(wire, "", sealedArgs)
	f.Add(retail(wire), "alice", sealedArgs)
	f.Add("v1e.", "alice", "")
	var runs atomic.Int32
	round := func(_ context.Context, state string) ([]byte, error) {
		if state != "step1" {
			return nil, errors.New("round ran with " + state)
		}
		runs.Add(1)
		return []byte(`{"ran":"step1"}`), nil
	}
	f.Fuzz(func(t *testing.T, wire, caller, args string) {
		log.Reset()
		out, err := s.Answer(context.Background(), caller, "tools/call", "deploy", []byte(args), wire, round)
		if err != nil {
			var re *refusedErr
			if out != nil || (err != errTestNoCaller && (!errors.As(err, &re) || !KnownCode(re.r.Code))) {
				t.Fatalf("refusal %q, %v is neither NoCaller nor a coded refusal", out, err)
			}
			return
		}
		fp, ferr := ctoken.ArgsFingerprint([]byte(args))
		if string(out) != `{"ran":"step1"}` || caller != "alice" || ferr != nil || fp != want || runs.Load() != 1 {
			t.Fatalf("answered %q for caller %q and arguments %q after %d runs", out, caller, args, runs.Load())
		}
	})
}

// BenchmarkStatesAnswer measures a round under AnswerRetries against its
// floor, the same round under plain single use, on a MemoryStore: "open"
// is Seal and Open of a single-use state (the claim); "first" is Seal and
// Answer (the lease, the round, the record); "retry" is Answer of a state
// whose round is recorded (the lookup and the fingerprint compare).
func BenchmarkStatesAnswer(b *testing.B) {
	ctx := context.Background()
	args := []byte(`{"target":"prod","replicas":3}`)
	result := bytes.Repeat([]byte("r"), 512)
	round := func(context.Context, string) ([]byte, error) { return result, nil }
	newStates := func(b *testing.B, answer bool) *States {
		var log bytes.Buffer
		s, err := NewStates(codec(b, &clock{now: time.Now()}, &replay.MemoryStore{Max: 1 << 22, MaxRecordBytes: 1 << 30}), StatesConfig{AnswerRetries: answer}, testIntegration(&log))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	// The codec signs, which is deterministic: each iteration seals a
	// state of its own.
	b.Run("open", func(b *testing.B) {
		s := newStates(b, false)
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			wire, err := s.Seal("alice", "tools/call", "deploy", args, "confirmed "+strconv.Itoa(n))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Open(ctx, "alice", "tools/call", "deploy", args, wire); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		s := newStates(b, true)
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			wire, err := s.Seal("alice", "tools/call", "deploy", args, "confirmed "+strconv.Itoa(n))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retry", func(b *testing.B) {
		s := newStates(b, true)
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); err != nil || len(out) != len(result) {
				b.Fatal(err)
			}
		}
	})
}

// confirmFailing is a Recorder whose confirmations fail: the store went
// away while the round ran.
type confirmFailing struct{ *replay.MemoryStore }

func (confirmFailing) ConfirmRecord(context.Context, string, string, time.Time, []byte, []byte) error {
	return errStoreDown
}

func (confirmFailing) ConfirmLease(context.Context, string, string, time.Time) error {
	return errStoreDown
}

// A round that ran but whose outcome the store could not record: its
// result (or error) is still returned, the failure is logged at Error,
// and the state stays busy (the lease lasts until the state expires), so
// the round never runs twice.
func answerRecordingFailureReturnsTheOutcomeAndNeverRunsTwice(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{}`)
	errDeploy := errors.New("deploy failed")
	for _, tc := range []struct {
		name    string
		round   func(context.Context, string) ([]byte, error)
		wantOut string
		wantErr error
	}{
		{"result not recorded", func(context.Context, string) ([]byte, error) { return []byte(`{"ok":1}`), nil }, `{"ok":1}`, nil},
		{"failure not recorded", func(context.Context, string) ([]byte, error) { return nil, errDeploy }, "", errDeploy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, log := retryStates(t, confirmFailing{replay.NewMemoryStore(0)}, StatesConfig{})
			wire, _ := s.Seal("alice", "tools/call", "deploy", args, "s")
			out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, tc.round)
			if string(out) != tc.wantOut || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("%q, %v; want %q, %v", out, err, tc.wantOut, tc.wantErr)
			}
			if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "stays busy until the round's hold ends") || strings.Contains(log.String(), wire) {
				t.Fatalf("log %q", log.String())
			}
			var c countedRound
			if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round); refusalCode(err) != CodeStateBusy || c.runs.Load() != 0 {
				t.Fatalf("retry: %v, %d runs; want busy and no run", err, c.runs.Load())
			}
		})
	}
}

// roundRecord returns the store ID and the fingerprint the round of wire
// (sealed for alice, tools/call deploy, args) is recorded under.
func roundRecord(t *testing.T, s *States, wire string, args []byte) (stateclaim.Opened, []byte) {
	t.Helper()
	target := ctoken.MCPTarget("tools/call", "deploy")
	o, err := stateclaim.Open(context.Background(), s.codec, wire, "alice", target, func(plain string) (string, error) { return UnwrapArgs(args, plain) })
	if err != nil {
		t.Fatal(err)
	}
	fp, err := roundFingerprint("alice", target, args, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return o, fp
}

// rawRecord reads what store holds under id (done): its fingerprint and
// result, as the store holds them.
func rawRecord(t *testing.T, store replay.Recorder, id string) replay.Record {
	t.Helper()
	rec, err := store.AcquireRecord(context.Background(), id, time.Minute, make([]byte, sha256Size))
	if err != nil || rec.State != replay.LeaseDone {
		t.Fatalf("%+v, %v; want a done record", rec, err)
	}
	return rec
}

const sha256Size = 32

// plant records result under the ID and fingerprint of o and fp, as
// someone with write access to the store would.
func plant(t *testing.T, store replay.Recorder, o stateclaim.Opened, fp, result []byte) {
	t.Helper()
	ctx := context.Background()
	rec, err := store.AcquireRecord(ctx, o.ID, o.Lease, fp)
	if err != nil || rec.State != replay.LeaseAcquired {
		t.Fatalf("%+v, %v", rec, err)
	}
	if err := store.ConfirmRecord(ctx, o.ID, rec.Token, o.Until, fp, result); err != nil {
		t.Fatal(err)
	}
}

// The store never holds a round's result in clear: what it holds under the
// state's ID is sealed (no byte of the result shows through), and opens to
// the result the retry is answered with; a result of the largest sealable
// size is recorded and answered too.
func answerRecordsTheResultSealed(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	for _, tc := range []struct {
		name   string
		result []byte
		// shows is what must not show through the record.
		shows []byte
	}{
		{"a result", []byte(`{"deployed":"prod","token":"tok-4242-secret"}`), []byte("tok-4242-secret")},
		{"the largest sealable result", append([]byte(`{"s":"`), bytes.Repeat([]byte("k"), maxRecordedResult-8)...), bytes.Repeat([]byte("k"), 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := replay.NewMemoryStore(0)
			s, log := retryStates(t, store, StatesConfig{})
			wire, _ := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
			var runs atomic.Int32
			round := func(context.Context, string) ([]byte, error) { runs.Add(1); return tc.result, nil }
			if out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); err != nil || !bytes.Equal(out, tc.result) {
				t.Fatalf("%.40q, %v", out, err)
			}
			o, fp := roundRecord(t, s, wire, args)
			rec := rawRecord(t, store, o.ID)
			if !bytes.Equal(rec.Fingerprint, fp) || len(rec.Result) != len(tc.result)+recordOverhead || bytes.Contains(rec.Result, tc.shows) || bytes.Contains(rec.Result, []byte(`"deployed"`)) {
				t.Fatalf("the store holds %d bytes under fingerprint %x: %.80q", len(rec.Result), rec.Fingerprint, rec.Result)
			}
			again, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round)
			if err != nil || !bytes.Equal(again, tc.result) || runs.Load() != 1 {
				t.Fatalf("retry: %.40q, %v, %d runs", again, err, runs.Load())
			}
			if bytes.Contains(log.Bytes(), tc.shows) {
				t.Fatal("the log holds the result")
			}
		})
	}
}

// editing is a memory store whose records are edited in the store: every
// recorded result goes through edit on its way out.
type editing struct {
	*replay.MemoryStore
	edit func([]byte) []byte
}

func (e editing) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	rec, err := e.MemoryStore.AcquireRecord(ctx, id, lease, fp)
	if err == nil && rec.State == replay.LeaseDone && len(rec.Result) > 0 {
		rec.Result = e.edit(rec.Result)
	}
	return rec, err
}

// A record that does not open is never answered, and its round never runs
// again: the retry is refused as already used (1026) and logged at Error,
// never with the state or the result. Edited in the store, moved from
// another state (with the fingerprint of the state it was moved to: the
// fingerprint is no secret), sealed under a key the codec's ring does not
// hold, sealed as an idempotent tool call's record under the codec's own
// key (the labels differ), or in clear, as before results were sealed.
func answerRefusesARecordThatDoesNotOpen(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	const result = `{"deployed":"prod","token":"tok-4242-secret"}`
	otherRing, err := ctoken.NewKeyring(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ownRing, err := ctoken.NewKeyring(make([]byte, 32)) // the codec's (codec)
	if err != nil {
		t.Fatal(err)
	}
	sealWith := func(ring *ctoken.Keyring, label string) func(o stateclaim.Opened, fp []byte) []byte {
		return func(o stateclaim.Opened, fp []byte) []byte {
			sealer, ok := newSealer(ring, label)
			if !ok {
				t.Fatal("no sealer")
			}
			rec, err := sealer.seal(o.ID, fp, []byte(result))
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}
	}
	for _, tc := range []struct {
		name string
		// edit changes every record on its way out of the store; nil
		// leaves them.
		edit func([]byte) []byte
		// planted, when set, is the record planted under the retried
		// state's ID and fingerprint, whose round never ran.
		planted func(o stateclaim.Opened, fp []byte) []byte
	}{
		{name: "a byte edited", edit: func(b []byte) []byte { b[len(b)/2] ^= 0x20; return b }},
		{name: "the key id edited", edit: func(b []byte) []byte { b[1] ^= 1; return b }},
		{name: "cut short", edit: func(b []byte) []byte { return b[:len(b)-1] }},
		{name: "another version", edit: func(b []byte) []byte { b[0] = recordSealVersion + 1; return b }},
		{name: "sealed under a key not in the ring", planted: sealWith(otherRing, roundSealLabel)},
		{name: "an idempotent call's record", planted: sealWith(ownRing, recordSealLabel)},
		{name: "in clear", planted: func(stateclaim.Opened, []byte) []byte { return []byte(result) }},
		{name: "moved from another state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := replay.NewMemoryStore(0)
			var store replay.Store = mem
			if tc.edit != nil {
				store = editing{mem, tc.edit}
			}
			s, log := retryStates(t, store, StatesConfig{})
			wire, _ := s.Seal("alice", "tools/call", "deploy", args, "confirmed")
			var runs atomic.Int32
			round := func(context.Context, string) ([]byte, error) { runs.Add(1); return []byte(result), nil }
			switch {
			case tc.planted != nil:
				o, fp := roundRecord(t, s, wire, args)
				plant(t, mem, o, fp, tc.planted(o, fp))
			case tc.edit == nil: // moved: another state's round ran, its record is copied
				other, _ := s.Seal("alice", "tools/call", "deploy", args, "confirmed, once more")
				if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, other, round); err != nil {
					t.Fatal(err)
				}
				from, _ := roundRecord(t, s, other, args)
				o, fp := roundRecord(t, s, wire, args)
				plant(t, mem, o, fp, rawRecord(t, mem, from.ID).Result)
				runs.Store(0)
			default: // edited: the round ran, its record is edited on its way out
				if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); err != nil {
					t.Fatal(err)
				}
				runs.Store(0)
			}
			log.Reset()
			for i := range 2 {
				out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round)
				if out != nil || refusalCode(err) != CodeStateUsed || runs.Load() != 0 {
					t.Fatalf("retry %d: %q, %v, %d runs; want code 1026 and no run", i, out, err, runs.Load())
				}
			}
			l := log.String()
			if !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "does not open") || strings.Contains(l, wire) || strings.Contains(l, "tok-4242") {
				t.Fatalf("log %q", l)
			}
		})
	}
}

// A rotation that keeps the previous key keeps answering: a round recorded
// under the previous primary is answered by an instance whose ring has a
// new primary, and by the same codec once its KeySource is swapped. Once
// the key leaves the ring, its states no longer open (1023), and neither
// would their records.
func answerRetryAfterAKeyRotationGetsTheRecordedResult(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	ring := func(keys ...[]byte) *ctoken.Keyring {
		kr, err := ctoken.NewKeyring(keys[0], keys[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	newStates := func(t *testing.T, sec ctoken.RequestStateSecurity, store replay.Store, log *bytes.Buffer) *States {
		sec.Binding, sec.TTL, sec.Replay = ctoken.BindSubjectAndTool, time.Minute, store
		codec, err := ctoken.NewRequestStateCodec(sec)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewStates(codec, StatesConfig{AnswerRetries: true}, testIntegration(log))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		// retrier returns the States that take the retry, after the round
		// ran on first.
		retrier func(t *testing.T, first *ctoken.KeySource, store replay.Store, log *bytes.Buffer, self *States) *States
		code    int // 0: answered
	}{
		{"another instance with the next ring", func(t *testing.T, _ *ctoken.KeySource, store replay.Store, log *bytes.Buffer, _ *States) *States {
			return newStates(t, ctoken.RequestStateSecurity{Keys: ring(k2, k1)}, store, log)
		}, 0},
		{"the key source swapped", func(t *testing.T, src *ctoken.KeySource, _ replay.Store, _ *bytes.Buffer, self *States) *States {
			if err := src.Swap(ring(k2, k1)); err != nil {
				t.Fatal(err)
			}
			return self
		}, 0},
		{"the previous key dropped", func(t *testing.T, src *ctoken.KeySource, _ replay.Store, _ *bytes.Buffer, self *States) *States {
			if err := src.Swap(ring(k2)); err != nil {
				t.Fatal(err)
			}
			return self
		}, CodeStateInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			store := replay.NewMemoryStore(0)
			src, err := ctoken.NewKeySource(ring(k1))
			if err != nil {
				t.Fatal(err)
			}
			first := newStates(t, ctoken.RequestStateSecurity{KeySource: src}, store, &log)
			wire, _ := first.Seal("alice", "tools/call", "deploy", args, "confirmed")
			var c countedRound
			want, err := first.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
			if err != nil {
				t.Fatal(err)
			}
			retrier := tc.retrier(t, src, store, &log, first)
			out, err := retrier.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
			switch {
			case tc.code == 0 && (err != nil || !bytes.Equal(out, want)):
				t.Fatalf("%q, %v; want %q", out, err, want)
			case tc.code != 0 && (out != nil || refusalCode(err) != tc.code):
				t.Fatalf("%q, %v; want code %d", out, err, tc.code)
			}
			if n := c.runs.Load(); n != 1 {
				t.Fatalf("the round ran %d times", n)
			}
		})
	}
	// Rounds recorded after a swap are sealed under the new primary (the
	// key id in the record names it), so they keep answering once the
	// previous key is dropped.
	t.Run("new rounds seal under the new primary", func(t *testing.T) {
		var log bytes.Buffer
		store := replay.NewMemoryStore(0)
		first, next := ring(k1), ring(k2, k1)
		src, err := ctoken.NewKeySource(first)
		if err != nil {
			t.Fatal(err)
		}
		s := newStates(t, ctoken.RequestStateSecurity{KeySource: src}, store, &log)
		var c countedRound
		round := func(kr *ctoken.Keyring, state string) (wire string, out []byte) {
			t.Helper()
			wire, _ = s.Seal("alice", "tools/call", "deploy", args, state)
			out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, c.round)
			if err != nil {
				t.Fatal(err)
			}
			o, _ := roundRecord(t, s, wire, args)
			if id := hex.EncodeToString(rawRecord(t, store, o.ID).Result[1:recordHeaderSize]); id != kr.KeyIDs()[0] {
				t.Fatalf("%s: sealed under key %s; want the primary %s", state, id, kr.KeyIDs()[0])
			}
			return wire, out
		}
		before, want := round(first, "before")
		if err := src.Swap(next); err != nil {
			t.Fatal(err)
		}
		after, wantAfter := round(next, "after")
		if out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, before, c.round); err != nil || !bytes.Equal(out, want) {
			t.Fatalf("before the swap: %q, %v", out, err)
		}
		if err := src.Swap(ring(k2)); err != nil {
			t.Fatal(err)
		}
		if out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, after, c.round); err != nil || !bytes.Equal(out, wantAfter) || c.runs.Load() != 2 {
			t.Fatalf("after the previous key was dropped: %q, %v, %d runs", out, err, c.runs.Load())
		}
	})
}

// busyFor is a Recorder that finds every round running for the same call,
// its lease ending in wait (0: the store does not say).
type busyFor struct {
	*replay.MemoryStore
	wait time.Duration
}

func (b busyFor) AcquireRecord(_ context.Context, _ string, _ time.Duration, fp []byte) (replay.Record, error) {
	return replay.Record{Lease: replay.Lease{State: replay.LeaseBusy, Wait: b.wait}, Fingerprint: fp}, nil
}

// A presentation while the round runs is busy (1027) with the hint of
// when to retry: how long the round's lease still runs, at most a second,
// and a second when the store does not say. Nothing runs.
func answerBusyCarriesARetryHint(t *testing.T) {
	args := []byte(`{}`)
	for _, tc := range []struct {
		name string
		wait time.Duration
		want time.Duration
	}{
		{"the store does not say", 0, time.Second},
		{"the lease ends in 250ms", 250 * time.Millisecond, 250 * time.Millisecond},
		{"the lease ends in a nanosecond", time.Nanosecond, time.Nanosecond},
		{"the lease ends in a second", time.Second, time.Second},
		{"the lease ends in a minute", time.Minute, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := retryStates(t, busyFor{replay.NewMemoryStore(0), tc.wait}, StatesConfig{})
			wire, _ := s.Seal("alice", "tools/call", "deploy", args, "s")
			var c countedRound
			out, err := s.Answer(context.Background(), "alice", "tools/call", "deploy", args, wire, c.round)
			var re *refusedErr
			if out != nil || !errors.As(err, &re) || !re.r.Busy() || re.r.RetryAfter != tc.want || c.runs.Load() != 0 {
				t.Fatalf("%q, %v (%+v), %d runs; want busy with hint %v", out, err, re, c.runs.Load(), tc.want)
			}
		})
	}
}

// The sealer of round results is derived once per ring and refused for
// anything that is not a ring (Answer then refuses the state as Internal,
// before anything is taken).
func statesSealerOfDerivesOncePerRing(t *testing.T) {
	s, _ := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
	ring, err := ctoken.NewKeyring(bytes.Repeat([]byte{5}, 32))
	if err != nil {
		t.Fatal(err)
	}
	first, ok := s.sealerOf(ring)
	if again, ok2 := s.sealerOf(ring); !ok || !ok2 || again != first {
		t.Fatalf("%p, %v then %p, %v; want one sealer", first, ok, again, ok2)
	}
	other, err := ctoken.NewKeyring(bytes.Repeat([]byte{6}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if next, ok := s.sealerOf(other); !ok || next == first {
		t.Fatalf("another ring: %p, %v", next, ok)
	}
	for _, ring := range []any{nil, (*ctoken.Keyring)(nil), "a ring"} {
		if seal, ok := s.sealerOf(ring); ok || seal != nil {
			t.Fatalf("sealerOf(%T) = %v, %v; want none", ring, seal, ok)
		}
	}
	if r := RefuseState(errNoRoundKeys); !r.Internal || r.Code != 0 {
		t.Fatalf("RefuseState(errNoRoundKeys) = %+v; want Internal", r)
	}
}

// holderStore is a memory store on which the holder of the first lease
// taken stops, as its server does in a crash: from stop on, every write
// that carries its token (a renewal, a confirmation, a release) fails, as
// it never reaches the store, while other holders' calls go through.
type holderStore struct {
	*replay.MemoryStore
	mu     sync.Mutex
	holder string
	stop   atomic.Bool
}

func (h *holderStore) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	rec, err := h.MemoryStore.AcquireRecord(ctx, id, lease, fp)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil && rec.State == replay.LeaseAcquired && h.holder == "" {
		h.holder = rec.Token
	}
	return rec, err
}

func (h *holderStore) stopped(token string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stop.Load() && token == h.holder
}

func (h *holderStore) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if h.stopped(token) {
		return errStoreDown
	}
	return h.MemoryStore.RenewLease(ctx, id, token, lease)
}

func (h *holderStore) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	if h.stopped(token) {
		return errStoreDown
	}
	return h.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

func (h *holderStore) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	if h.stopped(token) {
		return errStoreDown
	}
	return h.MemoryStore.ConfirmLease(ctx, id, token, until)
}

// A round whose server stopped while it ran (it neither renews its hold nor
// records) is known within the hold, not when the state expires: the
// retries are busy until the hold ends, then every presentation is told
// that the round was interrupted (1029, no retry hint), and the round
// never runs again.
func answerInterruptedRoundIsToldSoOnceItsHoldEnds(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	store := &holderStore{MemoryStore: replay.NewMemoryStore(0)}
	s, log := retryStates(t, store, StatesConfig{})
	s.hold = 150 * time.Millisecond // the real clock's: short for the test
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
	if err != nil {
		t.Fatal(err)
	}
	var first countedRound
	_, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(ctx context.Context, state string) ([]byte, error) {
		store.stop.Store(true) // the server stops while the round runs
		return first.round(ctx, state)
	})
	if err != nil || first.runs.Load() != 1 {
		t.Fatalf("the first presentation: %v, %d runs", err, first.runs.Load())
	}
	var again countedRound
	var busy int
	deadline := time.Now().Add(30 * time.Second) // a failsafe: the hold ends in 150 ms
	for {
		_, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, again.round)
		if refusalCode(err) != CodeStateBusy || time.Now().After(deadline) {
			break
		}
		busy++
		time.Sleep(10 * time.Millisecond)
	}
	if refusalCode(err) != CodeRoundInterrupted {
		t.Fatalf("after %d busy answers: %v; want the refusal of ErrRoundInterrupted, code 1029", busy, err)
	}
	var re *refusedErr
	if errors.As(err, &re) && re.r.RetryAfter != 0 {
		t.Fatalf("the refusal carries a retry hint (%v); no retry settles it", re.r.RetryAfter)
	}
	if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, again.round); refusalCode(err) != CodeRoundInterrupted {
		t.Fatalf("the next presentation: %v; want code 1029 again (recorded)", err)
	}
	if again.runs.Load() != 0 {
		t.Fatalf("the round ran %d more times", again.runs.Load())
	}
	if !strings.Contains(log.String(), "began under a server that stopped") || strings.Contains(log.String(), wire) {
		t.Fatalf("log %q", log.String())
	}
}

// clockedRenewals is a memory store on a clock that moves only when the
// round renews its hold, by half a hold before each renewal: after a few
// renewals the first hold has long ended by the store's clock, and only
// the renewals keep the round busy. No step races the real clock.
type clockedRenewals struct {
	*replay.MemoryStore
	hold     time.Duration
	mu       sync.Mutex
	now      time.Time
	renewals chan struct{}
}

func (c *clockedRenewals) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clockedRenewals) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(c.hold / 2)
	c.mu.Unlock()
	err := c.MemoryStore.RenewLease(ctx, id, token, lease)
	select {
	case c.renewals <- struct{}{}:
	default:
	}
	return err
}

// A round that runs longer than its hold is busy all along, never judged
// interrupted: its hold is renewed while it runs, and its result is
// recorded and answered.
func answerRoundLongerThanItsHoldStaysBusy(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	// Long enough that a renewal late by a loaded machine's scheduling is
	// still in time by this process's clock, which loses the hold on its
	// own after five sixths of it.
	const hold = 600 * time.Millisecond
	store := &clockedRenewals{MemoryStore: replay.NewMemoryStore(0), hold: hold, now: time.Now(), renewals: make(chan struct{})}
	store.Now = store.clock
	s, log := retryStates(t, store, StatesConfig{})
	s.hold = hold
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
	if err != nil {
		t.Fatal(err)
	}
	var first, again countedRound
	done := make(chan error, 1)
	go func() {
		_, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(ctx context.Context, state string) ([]byte, error) {
			for range 4 { // two holds by the store's clock
				select {
				case <-store.renewals:
				case <-time.After(30 * time.Second):
					return nil, errors.New("no renewal in 30 s")
				}
			}
			if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, again.round); refusalCode(err) != CodeStateBusy {
				return nil, errors.New("the retry during the round: " + err.Error())
			}
			return first.round(ctx, state)
		})
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, again.round)
	if err != nil || !strings.Contains(string(out), `"run":1`) || first.runs.Load() != 1 || again.runs.Load() != 0 {
		t.Fatalf("the retry after the round: %q, %v; %d and %d runs", out, err, first.runs.Load(), again.runs.Load())
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("log %q", log.String())
	}
}

// ctxRoundStore is a memory store that records the context of each step a
// round takes to record, release or renew its state, and fails or finds
// taken the mark that a round began, as told.
type ctxRoundStore struct {
	*replay.MemoryStore
	ctxSteps
	startErr   error         // the claim of the started mark fails with it
	startTaken bool          // the started mark is found claimed
	renewals   chan struct{} // told of each renewal, if anyone waits
}

func (s *ctxRoundStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if strings.HasSuffix(id, ".started") {
		switch {
		case s.startErr != nil:
			return false, s.startErr
		case s.startTaken:
			return false, nil
		}
	}
	return s.MemoryStore.Claim(ctx, id, until)
}

func (s *ctxRoundStore) ConfirmRecord(ctx context.Context, id, token string, until time.Time, fp, result []byte) error {
	s.record("ConfirmRecord", ctx)
	return s.MemoryStore.ConfirmRecord(ctx, id, token, until, fp, result)
}

func (s *ctxRoundStore) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	s.record("ConfirmLease", ctx)
	return s.MemoryStore.ConfirmLease(ctx, id, token, until)
}

func (s *ctxRoundStore) ReleaseLease(ctx context.Context, id, token string) error {
	s.record("ReleaseLease", ctx)
	return s.MemoryStore.ReleaseLease(ctx, id, token)
}

func (s *ctxRoundStore) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	s.record("RenewLease", ctx)
	err := s.MemoryStore.RenewLease(ctx, id, token, lease)
	select {
	case s.renewals <- struct{}{}:
	default:
	}
	return err
}

// TestRoundStoreStepsRunUnderADeadlineOnlyContext: the store steps that
// record a round's outcome (its result, its failure, its panic, its
// interruption), release its state or renew its hold run under a context
// that only its deadline ends (replay.WithDeadlineOnly), however the
// request's context ends (it is cancelled while the round runs), so that
// a store whose client enforces deadlines itself runs them on the caller's
// goroutine. Each deadline is the one meant: confirmTimeout after the step
// began, a third of the hold for a renewal.
func TestRoundStoreStepsRunUnderADeadlineOnlyContext(t *testing.T) {
	args := []byte(`{"target":"prod"}`)
	errDeploy := errors.New("deploy failed")
	// The renewal's case: renewed every second, each renewal under a
	// one-second deadline. A shorter hold (150 ms was here) gave a renewal
	// that the scheduler started late on a loaded machine a context that
	// had already ended when the store saw it.
	const hold = 3 * time.Second
	tests := []struct {
		name       string
		store      func(*ctxRoundStore)
		hold       time.Duration // zero: the default hold
		round      func(s *ctxRoundStore) ([]byte, error)
		wantErr    bool
		wantPanic  bool
		want       []string // the steps, renewals left out
		wantRenews bool     // at least one renewal
	}{
		{
			name:  "a result is recorded",
			round: func(*ctxRoundStore) ([]byte, error) { return []byte(`{"ok":1}`), nil },
			want:  []string{"ConfirmRecord"},
		},
		{
			name:    "a failed round is recorded as used",
			round:   func(*ctxRoundStore) ([]byte, error) { return nil, errDeploy },
			wantErr: true,
			want:    []string{"ConfirmLease"},
		},
		{
			name:  "an empty result is recorded as used",
			round: func(*ctxRoundStore) ([]byte, error) { return nil, nil },
			want:  []string{"ConfirmLease"},
		},
		{
			name:      "a panicked round is recorded as used",
			round:     func(*ctxRoundStore) ([]byte, error) { panic("deploy panicked") },
			wantPanic: true,
			want:      []string{"ConfirmLease"},
		},
		{
			name:    "a state whose start cannot be marked is released",
			store:   func(s *ctxRoundStore) { s.startErr = errStoreDown },
			round:   func(*ctxRoundStore) ([]byte, error) { return []byte(`{"ok":1}`), nil },
			wantErr: true,
			want:    []string{"ReleaseLease"},
		},
		{
			name:    "a round that began under a stopped server is recorded as interrupted",
			store:   func(s *ctxRoundStore) { s.startTaken = true },
			round:   func(*ctxRoundStore) ([]byte, error) { return []byte(`{"ok":1}`), nil },
			wantErr: true,
			want:    []string{"ConfirmRecord"},
		},
		{
			name: "the hold is renewed while the round runs",
			hold: hold,
			round: func(s *ctxRoundStore) ([]byte, error) {
				select { // not a race with the clock: a failsafe only
				case <-s.renewals:
				case <-time.After(30 * time.Second):
					return nil, errors.New("no renewal in 30 s")
				}
				return []byte(`{"ok":1}`), nil
			},
			want:       []string{"ConfirmRecord"},
			wantRenews: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Buffered: a renewal that comes before the round waits for it is kept
			// (the hold is on the real clock, so a stalled round can lose the
			// lease, and the renewals stop, after the first one).
			store := &ctxRoundStore{MemoryStore: replay.NewMemoryStore(0), renewals: make(chan struct{}, 1)}
			if tc.store != nil {
				tc.store(store)
			}
			s, _ := retryStates(t, store, StatesConfig{})
			if tc.hold != 0 {
				s.hold = tc.hold
			}
			wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			from := time.Now()
			panicked := func() (panicked bool) {
				defer func() { panicked = recover() != nil }()
				_, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(context.Context, string) ([]byte, error) {
					cancel() // the client goes away while the round runs
					return tc.round(store)
				})
				return false
			}()
			to := time.Now()
			if panicked != tc.wantPanic || !panicked && (err != nil) != tc.wantErr {
				t.Fatalf("Answer: %v, panicked %v", err, panicked)
			}
			var methods []string
			renews := 0
			for _, step := range store.list() {
				after := confirmTimeout
				if step.method == "RenewLease" {
					renews++
					after = s.hold / 3
				} else {
					methods = append(methods, step.method)
				}
				checkDeadlineOnly(t, step, from, to, after)
			}
			if strings.Join(methods, ",") != strings.Join(tc.want, ",") || tc.wantRenews && renews == 0 {
				t.Fatalf("store steps %+v; want %v, renewed: %v", store.list(), tc.want, tc.wantRenews)
			}
		})
	}
}

// stalledRenewals is a memory store on a clock that moves only when told,
// whose renewals never reach it (each waits for its context to end), or
// are refused because the clock was stepped past the hold.
type stalledRenewals struct {
	*replay.MemoryStore
	mu    sync.Mutex
	now   time.Time
	stall bool
}

func (c *stalledRenewals) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stalledRenewals) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *stalledRenewals) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if c.stall {
		<-ctx.Done()
		return ctx.Err()
	}
	return c.MemoryStore.RenewLease(ctx, id, token, lease)
}

// waitCancelled runs as a round: it waits for its context to end (a
// failsafe of 30 s bounds the wait), and returns the context's cause.
func waitCancelled(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(30 * time.Second):
		return errors.New("the round's context did not end in 30 s")
	}
}

// A round whose renewals never reach the store loses its hold by this
// process's clock: its context ends, with ErrRoundInterrupted as its
// cause, while the store still holds the round (its clock has not moved),
// so no presentation can have been told that the round was interrupted
// while it could still act.
func answerRoundWhoseRenewalsStallIsCancelledWhileStillHeld(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	store := &stalledRenewals{MemoryStore: replay.NewMemoryStore(0), now: time.Now(), stall: true}
	store.Now = store.clock
	s, log := retryStates(t, store, StatesConfig{})
	s.hold = 150 * time.Millisecond
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
	if err != nil {
		t.Fatal(err)
	}
	var again countedRound
	_, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(ctx context.Context, state string) ([]byte, error) {
		if cause := waitCancelled(ctx); !errors.Is(cause, ErrRoundInterrupted) {
			return nil, fmt.Errorf("the round's context ended with %v; want ErrRoundInterrupted", cause)
		}
		if _, err := s.Answer(context.Background(), "alice", "tools/call", "deploy", args, wire, again.round); refusalCode(err) != CodeStateBusy {
			return nil, fmt.Errorf("a presentation once the round's context ended: %v; want busy (the store still holds it)", err)
		}
		return nil, errors.New("stopped: the hold was lost")
	})
	if err == nil || err.Error() != "stopped: the hold was lost" || again.runs.Load() != 0 {
		t.Fatalf("the round: %v; %d more runs", err, again.runs.Load())
	}
	if !strings.Contains(log.String(), "level=ERROR msg=\"test: request state: the round's hold was lost while it ran") {
		t.Fatalf("log %q", log.String())
	}
}

// A round whose store's clock steps past its hold is told so by its next
// renewal, which the store refuses: its context ends with
// ErrRoundInterrupted as its cause.
func answerRoundWhoseStoreClockStepsForwardIsCancelled(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	store := &stalledRenewals{MemoryStore: replay.NewMemoryStore(0), now: time.Now()}
	store.Now = store.clock
	s, log := retryStates(t, store, StatesConfig{})
	s.hold = 600 * time.Millisecond
	wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(ctx context.Context, state string) ([]byte, error) {
		store.step(20 * time.Second)
		return nil, waitCancelled(ctx)
	})
	if !errors.Is(err, ErrRoundInterrupted) {
		t.Fatalf("the round's context ended with %v; want ErrRoundInterrupted", err)
	}
	if !strings.Contains(log.String(), "hold was lost while it ran (the store ended it)") {
		t.Fatalf("log %q", log.String())
	}
}

// A round whose work says it had no effect (ErrNoEffect) is not used up:
// the same presentation runs it again, up to maxRoundRuns runs, and a
// rerun whose server stops is told interrupted as a first run is.
func answerRoundWithNoEffectIsFreedForItsResend(t *testing.T) {
	ctx := context.Background()
	args := []byte(`{"target":"prod"}`)
	flaky := func(fails int32, runs *atomic.Int32) func(context.Context, string) ([]byte, error) {
		return func(context.Context, string) ([]byte, error) {
			if runs.Add(1) <= fails {
				return nil, fmt.Errorf("%w: connection refused", ErrNoEffect)
			}
			return []byte(`{"deployed":true}`), nil
		}
	}
	t.Run("rerun until it acts, then answered from its record", func(t *testing.T) {
		s, _ := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		round := flaky(2, &runs)
		for i := 1; i <= 2; i++ {
			if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); !errors.Is(err, ErrNoEffect) {
				t.Fatalf("presentation %d: %v; want ErrNoEffect", i, err)
			}
		}
		for i := 3; i <= 4; i++ {
			if res, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); err != nil || string(res) != `{"deployed":true}` || runs.Load() != 3 {
				t.Fatalf("presentation %d: %s, %v after %d runs; want the result of run 3", i, res, err, runs.Load())
			}
		}
	})
	t.Run("at most maxRoundRuns runs", func(t *testing.T) {
		s, _ := retryStates(t, replay.NewMemoryStore(0), StatesConfig{})
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		round := flaky(1000, &runs)
		for range maxRoundRuns {
			s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round)
		}
		if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); refusalCode(err) != CodeStateUsed || runs.Load() != maxRoundRuns {
			t.Fatalf("after %d runs: %v; want code 1026", runs.Load(), err)
		}
	})
	t.Run("a rerun whose server stopped is interrupted", func(t *testing.T) {
		store := &holderStore{MemoryStore: replay.NewMemoryStore(0)}
		s, _ := retryStates(t, store, StatesConfig{})
		s.hold = 150 * time.Millisecond // the real clock's: short for the test
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		round := flaky(1, &runs)
		if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round); !errors.Is(err, ErrNoEffect) {
			t.Fatalf("the first run: %v; want ErrNoEffect", err)
		}
		store.mu.Lock()
		store.holder = "" // the rerun's holder is the one that stops
		store.mu.Unlock()
		if _, err := s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, func(ctx context.Context, state string) ([]byte, error) {
			store.stop.Store(true)
			return round(ctx, state)
		}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second) // a failsafe: the hold ends in 150 ms
		for {
			_, err = s.Answer(ctx, "alice", "tools/call", "deploy", args, wire, round)
			if refusalCode(err) != CodeStateBusy || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if refusalCode(err) != CodeRoundInterrupted || runs.Load() != 2 {
			t.Fatalf("%v after %d runs; want code 1029 after 2", err, runs.Load())
		}
	})
}
