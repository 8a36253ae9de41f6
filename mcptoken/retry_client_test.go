package mcptoken

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var errRetryOutcome = errors.New("test: the outcome of the tool call is unknown")

// TestCallWithRetries pins the loop both MCP modules' CallTool run (their own tests
// drive it through the SDKs' clients): how each verdict ends or continues
// the call, what the error then matches, and that its text never holds
// the key.
func TestCallWithRetries(t *testing.T) {
	errBusy, errBad := errors.New("busy"), errors.New("bad request")
	const key = "k-3f9a"
	tests := []struct {
		name     string
		verdicts []RetryVerdict // one per failed attempt; past the end: success
		attempts int
		want     int   // attempts made
		wantErr  error // nil: success
		unknown  bool  // the error matches errRetryOutcome and RetryKey gives key
		plain    bool  // the attempt's own error, not wrapped
	}{
		{"first attempt answers", nil, 5, 1, nil, false, false},
		{"retried until it answers", []RetryVerdict{{Retry: true, Reached: true}, {Retry: true}}, 5, 3, nil, false, false},
		{"not worth another attempt: the error as it is", []RetryVerdict{{}}, 5, 1, errBad, false, true},
		{"attempts run out after one reached the server", []RetryVerdict{{Retry: true}, {Retry: true, Reached: true}, {Retry: true}}, 3, 3, errBusy, true, false},
		{"attempts run out, none reached it", []RetryVerdict{{Retry: true}, {Retry: true}}, 2, 2, errBusy, false, false},
		{"the session closed", []RetryVerdict{{Reached: true, Closed: true}}, 5, 1, errBusy, true, false},
		{"a first answer that may have run the tool, not worth another attempt", []RetryVerdict{{Reached: true}}, 5, 1, errBusy, true, false},
		{"an answer no retry settles after one reached the server", []RetryVerdict{{Retry: true, Reached: true}, {}}, 5, 2, errBusy, true, false},
		{"a session closed without reaching it after one did", []RetryVerdict{{Retry: true, Reached: true}, {Closed: true}}, 5, 2, errBusy, true, false},
		{"no bound on attempts: the time alone", []RetryVerdict{{Retry: true}, {Retry: true}, {Retry: true}, {Retry: true}, {Retry: true}, {Retry: true}, {Retry: true}}, 0, 8, nil, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			res, err := CallWithRetries(context.Background(), "test", errRetryOutcome, key, tc.attempts, time.Minute, func() (string, RetryVerdict, error) {
				n++
				if n > len(tc.verdicts) {
					return "result", RetryVerdict{}, nil
				}
				v := tc.verdicts[n-1]
				v.Hint = time.Millisecond // no backoff waits in the test
				if tc.plain {
					return "", v, errBad
				}
				return "", v, errBusy
			})
			if n != tc.want {
				t.Errorf("%d attempts; want %d", n, tc.want)
			}
			if tc.wantErr == nil {
				if err != nil || res != "result" {
					t.Fatalf("Call = %q, %v; want the result", res, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Call error %v; want one matching %v", err, tc.wantErr)
			}
			if tc.plain && err != errBad {
				t.Fatalf("Call error %#v; want the attempt's own error", err)
			}
			if got := errors.Is(err, errRetryOutcome); got != tc.unknown {
				t.Errorf("errors.Is(err, ErrOutcomeUnknown) = %v; want %v", got, tc.unknown)
			}
			if k, ok := RetryKey(err); ok != tc.unknown || ok && k != key {
				t.Errorf("RetryKey = %q, %v; want the key: %v", k, ok, tc.unknown)
			}
			if s := err.Error() + fmt.Sprintf("%#v", err); strings.Contains(s, key) {
				t.Errorf("the error's text holds the key: %s", s)
			}
		})
	}
	t.Run("a context ended before any attempt sends nothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := CallWithRetries(ctx, "test", errRetryOutcome, key, 5, time.Minute, func() (string, RetryVerdict, error) {
			t.Fatal("an attempt was made")
			return "", RetryVerdict{}, nil
		})
		if err != context.Canceled {
			t.Fatalf("Call = %v; want context.Canceled as it is", err)
		}
	})
	t.Run("a context that ends during an attempt leaves the outcome unknown", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := CallWithRetries(ctx, "test", errRetryOutcome, key, 5, time.Minute, func() (string, RetryVerdict, error) {
			cancel()
			return "", RetryVerdict{}, errBusy
		})
		if !errors.Is(err, errRetryOutcome) || !errors.Is(err, context.Canceled) || !errors.Is(err, errBusy) {
			t.Fatalf("Call = %v; want the outcome unknown, the context's error and the attempt's", err)
		}
	})
}

// TestCallWithRetriesKeepsTheKey: over every sequence of verdicts, a call
// that made an attempt which may have reached the server ends with the
// result or with an error that matches the outcome and gives the key; one
// that made none never does.
func TestCallWithRetriesKeepsTheKey(t *testing.T) {
	const key = "k-7c1e"
	errAttempt := errors.New("attempt failed")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		n := 1 + rng.IntN(6)
		verdicts := make([]RetryVerdict, n)
		for j := range verdicts {
			verdicts[j] = RetryVerdict{Retry: rng.IntN(3) > 0, Reached: rng.IntN(2) == 0, Closed: rng.IntN(6) == 0, Hint: time.Nanosecond}
		}
		succeed := rng.IntN(2) == 0
		attempts := rng.IntN(5)
		made, reached := 0, false
		res, err := CallWithRetries(context.Background(), "test", errRetryOutcome, key, attempts, time.Minute, func() (string, RetryVerdict, error) {
			made++
			if made > n {
				if succeed {
					return "result", RetryVerdict{}, nil
				}
				return "", RetryVerdict{Reached: true}, errAttempt
			}
			reached = reached || verdicts[made-1].Reached
			return "", verdicts[made-1], errAttempt
		})
		if made > n && !succeed {
			reached = true
		}
		k, ok := RetryKey(err)
		switch {
		case err == nil && res != "result":
			t.Fatalf("case %d: no error and no result", i)
		case err != nil && reached && (!errors.Is(err, errRetryOutcome) || !ok || k != key):
			t.Fatalf("case %d (%+v, %d attempts): %v after an attempt that may have reached the server; want the outcome unknown and the key", i, verdicts, attempts, err)
		case err != nil && !reached && (errors.Is(err, errRetryOutcome) || ok):
			t.Fatalf("case %d (%+v): %v; want no unknown outcome when no attempt reached the server", i, verdicts, err)
		}
	}
}

// TestRetryBackoff: each wait lies in the upper half of its step, the steps
// doubling from firstBackoff to at most maxBackoff.
func TestRetryBackoff(t *testing.T) {
	for n := 1; n <= 8; n++ {
		step := maxBackoff
		if n < 6 {
			step = min(firstBackoff<<(n-1), maxBackoff)
		}
		for range 100 {
			if d := backoff(n); d < step/2 || d > step {
				t.Fatalf("backoff(%d) = %v; want within [%v, %v]", n, d, step/2, step)
			}
		}
	}
}

// TestCallWithRetriesEndsWithTheTask: a call whose attempt drove a task to
// its end returns a failure whose effect is known, or a cancel, as it is,
// even after an earlier attempt may have reached the server (the key's
// retry found the same task); a failure whose effect is unknown carries
// the key, and its text names the check and the rerun, not a retry that
// would only find the failure again.
func TestCallWithRetriesEndsWithTheTask(t *testing.T) {
	const key = "k-task"
	lost := errors.New("502")
	known := &TaskFailure{Code: -32603, Message: "the tool failed"}
	unknown := &unknownFailure{&TaskFailure{Code: -32603, Message: "stopped", effect: effectUnknown}}
	for _, tc := range []struct {
		name    string
		end     error
		verdict RetryVerdict
		unknown bool
	}{
		{"a known failure", known, RetryVerdict{}, false},
		{"a cancel", ErrTaskCancelled, RetryVerdict{}, false},
		{"a failure whose effect is unknown", unknown, RetryVerdict{Reached: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			made := 0
			_, err := CallWithRetries(context.Background(), "test", errRetryOutcome, key, 5, time.Minute, func() (string, RetryVerdict, error) {
				made++
				if made == 1 {
					return "", RetryVerdict{Retry: true, Reached: true, Hint: time.Nanosecond}, lost
				}
				return "", tc.verdict, tc.end
			})
			k, ok := RetryKey(err)
			var f *TaskFailure
			switch {
			case !tc.unknown && (err != tc.end || ok):
				t.Fatalf("err = %v; want %v as it is", err, tc.end)
			case tc.unknown && (!ok || k != key || !errors.As(err, &f) || !errors.Is(err, errRetryOutcome) || !errors.Is(err, ErrOutcomeUnknown)):
				t.Fatalf("err = %v; want the task's failure with the key", err)
			case tc.unknown && (!strings.Contains(err.Error(), "AllowRerun") || !strings.Contains(err.Error(), "check where the tool acts") || strings.Contains(err.Error(), key)):
				t.Fatalf("err = %q; want the check and the rerun named, never the key", err)
			}
		})
	}
}

// A failure the server recorded settles the call, whatever an earlier
// attempt met: the caller is told it is the tool's recorded failure, never
// that the outcome is unknown, and gets no key to call again with.
func TestCallWithRetriesEndsWithTheRecordedFailure(t *testing.T) {
	served := errors.New("-32603 deploy crashed (ctokenCode 1030)")
	made := 0
	_, err := CallWithRetries(context.Background(), "test", errRetryOutcome, "k-rec", 5, time.Minute, func() (string, RetryVerdict, error) {
		made++
		if made == 1 {
			return "", RetryVerdict{Retry: true, Reached: true, Hint: time.Nanosecond}, errors.New("502")
		}
		return "", RetryVerdict{Reached: true, Recorded: true}, served
	})
	if _, ok := RetryKey(err); ok || made != 2 || !errors.Is(err, ErrToolFailed) || !errors.Is(err, served) || errors.Is(err, errRetryOutcome) {
		t.Fatalf("err = %v after %d attempts; want the recorded failure, no key", err, made)
	}
}
