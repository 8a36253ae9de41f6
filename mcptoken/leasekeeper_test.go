package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// countedRenewals is a memory store that counts the renewals it accepted,
// or refuses every one as lost when lose is set.
type countedRenewals struct {
	*replay.MemoryStore
	renewed atomic.Int32
	lose    bool
}

func (s *countedRenewals) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	if s.lose {
		return replay.ErrLeaseLost
	}
	err := s.MemoryStore.RenewLease(ctx, id, token, lease)
	if err == nil {
		s.renewed.Add(1)
	}
	return err
}

// An idempotent call keeps its lease while its tool runs, as rounds and
// tasks do: a retry during the run is told it is in progress however long
// the tool takes, and the tool's context ends once the lease cannot be
// kept, before a retry can take the key.
func TestIdempotentCallKeepsItsLease(t *testing.T) {
	args := []byte(`{"key":"k-1"}`)

	t.Run("a tool that outlives its lease runs once", func(t *testing.T) {
		store := &countedRenewals{MemoryStore: replay.NewMemoryStore(100)}
		var log bytes.Buffer
		// A renewal has a sixth of the Lease beyond its third to reach
		// the store: 500 ms here, enough on a loaded machine.
		i := testIdempotency(t, &log, func(c *IdempotencyConfig) { c.Store, c.Lease = store, 3*time.Second })
		var runs atomic.Int32
		started, release := make(chan struct{}), make(chan struct{})
		var lost <-chan struct{}
		run := func(ctx context.Context) ([]byte, error) {
			if runs.Add(1) == 1 {
				lost = ctx.Done()
				close(started)
				<-release // ignores its context, as a slow downstream call would
			}
			return []byte(`{"content":[]}`), nil
		}
		first := make(chan error, 1)
		go func() {
			_, err := i.Call(context.Background(), "alice", "pay", args, nil, run)
			first <- err
		}()
		<-started
		// Four renewals: more than the first lease has passed.
		for store.renewed.Load() < 4 {
			select {
			case <-lost:
				close(release)
				<-first // the log is written
				t.Fatalf("the lease was lost after %d renewals: %s", store.renewed.Load(), log.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
		if _, err := i.Call(context.Background(), "alice", "pay", args, nil, run); !errors.Is(err, ErrInProgress) {
			t.Fatalf("a retry during the run: %v; want ErrInProgress", err)
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if _, err := i.Call(context.Background(), "alice", "pay", args, nil, run); err != nil || runs.Load() != 1 {
			t.Fatalf("a retry after the run: %v; the tool ran %d times, want 1", err, runs.Load())
		}
	})

	t.Run("a lease the store ends cancels the tool", func(t *testing.T) {
		store := &countedRenewals{MemoryStore: replay.NewMemoryStore(100), lose: true}
		var log bytes.Buffer
		i := testIdempotency(t, &log, func(c *IdempotencyConfig) { c.Store, c.Lease = store, 300*time.Millisecond })
		var cause error
		_, err := i.Call(context.Background(), "alice", "pay", args, nil, func(ctx context.Context) ([]byte, error) {
			cause = waitCancelled(ctx)
			return nil, ctx.Err()
		})
		if !errors.Is(cause, errCallLeaseLost) || err == nil {
			t.Fatalf("the tool's context ended with %v, the call with %v; want the lost lease", cause, err)
		}
		if !strings.Contains(log.String(), "level=ERROR msg=\"test: the call's lease could not be kept while its tool ran") {
			t.Fatalf("log %q", log.String())
		}
	})

	t.Run("a stalled store cancels the tool while it still holds the key", func(t *testing.T) {
		store := &stalledRenewals{MemoryStore: replay.NewMemoryStore(100), now: time.Now(), stall: true}
		store.Now = store.clock // the store's clock stands still: its lease never ends
		var log bytes.Buffer
		i := testIdempotency(t, &log, func(c *IdempotencyConfig) { c.Store, c.Lease = store, 300*time.Millisecond })
		var retry error
		_, err := i.Call(context.Background(), "alice", "pay", args, nil, func(ctx context.Context) ([]byte, error) {
			cause := waitCancelled(ctx)
			_, retry = i.Call(context.Background(), "alice", "pay", args, nil, func(context.Context) ([]byte, error) {
				return nil, errors.New("ran twice")
			})
			return nil, cause
		})
		if !errors.Is(err, errCallLeaseLost) || !errors.Is(retry, ErrInProgress) {
			t.Fatalf("the call: %v; a retry once its tool was cancelled: %v; want the lost lease, then in progress", err, retry)
		}
	})

	t.Run("a round's lost hold cancels an idempotent tool inside it", func(t *testing.T) {
		roundStore := &stalledRenewals{MemoryStore: replay.NewMemoryStore(0), now: time.Now()}
		roundStore.Now = roundStore.clock
		s, _ := retryStates(t, roundStore, StatesConfig{})
		s.hold = 600 * time.Millisecond
		i := testIdempotency(t, &bytes.Buffer{}, nil)
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
		if err != nil {
			t.Fatal(err)
		}
		var cause error
		_, err = s.Answer(context.Background(), "alice", "tools/call", "deploy", args, wire, func(ctx context.Context, state string) ([]byte, error) {
			return i.Call(ctx, "alice", "deploy", args, nil, func(ctx context.Context) ([]byte, error) {
				roundStore.step(20 * time.Second) // the round's hold ends in its store
				cause = waitCancelled(ctx)
				return nil, cause
			})
		})
		if !errors.Is(cause, ErrRoundInterrupted) || !errors.Is(err, ErrRoundInterrupted) {
			t.Fatalf("the idempotent tool's context ended with %v, the round with %v; want ErrRoundInterrupted", cause, err)
		}
	})
}

// slowGrant is a memory store whose first AcquireRecord answer comes late
// (the store took the lease at once), and which counts the renewals it
// accepted and when the first was sent.
type slowGrant struct {
	*replay.MemoryStore
	delay        time.Duration
	mu           sync.Mutex
	acquired     time.Time
	firstRenewal time.Time
	renewed      atomic.Int32
}

func (s *slowGrant) AcquireRecord(ctx context.Context, id string, lease time.Duration, fp []byte) (replay.Record, error) {
	rec, err := s.MemoryStore.AcquireRecord(ctx, id, lease, fp)
	s.mu.Lock()
	first := s.acquired.IsZero()
	if first {
		s.acquired = time.Now()
	}
	s.mu.Unlock()
	if first {
		time.Sleep(s.delay)
	}
	return rec, err
}

func (s *slowGrant) RenewLease(ctx context.Context, id, token string, lease time.Duration) error {
	s.mu.Lock()
	if s.firstRenewal.IsZero() {
		s.firstRenewal = time.Now()
	}
	s.mu.Unlock()
	err := s.MemoryStore.RenewLease(ctx, id, token, lease)
	if err == nil {
		s.renewed.Add(1)
	}
	return err
}

// The lease keeper's first renewal is due a third of the Lease after the
// lease was taken, whenever the store's answer arrived; a cancel of the
// round or task that runs a call ends its tool's context but not its
// renewals, which go on while the tool winds down; and Window near Lease
// leaves the tool three quarters of the Lease.
func TestIdempotentLeaseKeptWhateverItsTiming(t *testing.T) {
	t.Run("a late grant is renewed before the lease ends", func(t *testing.T) {
		const lease = 3 * time.Second
		store := &slowGrant{MemoryStore: replay.NewMemoryStore(100), delay: lease * 7 / 10}
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Store, c.Lease = store, lease })
		_, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k-slow"}`), nil, func(ctx context.Context) ([]byte, error) {
			for store.renewed.Load() == 0 && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			return []byte(`{"content":[]}`), ctx.Err()
		})
		store.mu.Lock()
		defer store.mu.Unlock()
		if err != nil || store.firstRenewal.Sub(store.acquired) >= lease {
			t.Fatalf("call: %v; first renewal %v after the lease was taken; want it within the lease (%v)", err, store.firstRenewal.Sub(store.acquired), lease)
		}
	})

	t.Run("a grant too late to keep runs nothing and frees the key", func(t *testing.T) {
		const lease = 300 * time.Millisecond
		store := &slowGrant{MemoryStore: replay.NewMemoryStore(100), delay: lease * 9 / 10}
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Store, c.Lease = store, lease })
		runs := 0
		run := func(context.Context) ([]byte, error) { runs++; return []byte(`{"content":[]}`), nil }
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k-late"}`), nil, run); !errors.Is(err, ErrIdempotencyStore) || runs != 0 {
			t.Fatalf("a late grant: %v after %d runs; want ErrIdempotencyStore, no run", err, runs)
		}
		if _, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k-late"}`), nil, run); err != nil || runs != 1 {
			t.Fatalf("the retry: %v after %d runs; want the tool run once", err, runs)
		}
	})

	t.Run("a cancelled round's tool keeps its key while it winds down", func(t *testing.T) {
		store := &countedRenewals{MemoryStore: replay.NewMemoryStore(100)}
		// A renewal has a sixth of the Lease beyond its third to reach
		// the store: 500 ms here, enough on a loaded machine.
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Store, c.Lease = store, 3*time.Second })
		parent, cancel := context.WithCancel(detach(context.Background())) // a round's or a task's
		defer cancel()
		args := []byte(`{"key":"k-wind"}`)
		var retry error
		_, err := i.Call(parent, "alice", "pay", args, nil, func(ctx context.Context) ([]byte, error) {
			cancel()
			<-ctx.Done()
			// Winding down: the lease must still be renewed meanwhile
			// (30 s is a failsafe: a renewal is due every second).
			for n, failsafe := store.renewed.Load(), time.Now().Add(30*time.Second); store.renewed.Load() < n+3; {
				if time.Now().After(failsafe) {
					return nil, errors.New("no more renewals while the tool wound down")
				}
				time.Sleep(5 * time.Millisecond)
			}
			_, retry = i.Call(context.Background(), "alice", "pay", args, nil, func(context.Context) ([]byte, error) {
				return nil, errors.New("ran beside the first run")
			})
			return nil, fmt.Errorf("%w: undone", ErrNoEffect)
		})
		if !errors.Is(err, ErrNoEffect) || !errors.Is(retry, ErrInProgress) {
			t.Fatalf("the call: %v; a retry while it wound down: %v; want ErrNoEffect, then in progress", err, retry)
		}
	})

	t.Run("Window near Lease leaves the tool three quarters of the Lease", func(t *testing.T) {
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Lease, c.Window = time.Second, time.Second+time.Millisecond })
		var left time.Duration
		_, err := i.Call(context.Background(), "alice", "pay", []byte(`{"key":"k-w"}`), nil, func(ctx context.Context) ([]byte, error) {
			dl, _ := ctx.Deadline()
			left = time.Until(dl)
			return []byte(`{"content":[]}`), nil
		})
		if err != nil || left < 500*time.Millisecond {
			t.Fatalf("call: %v; the tool's context had %v left at its start; want about 750ms", err, left)
		}
	})

	t.Run("a tool that acted, then failed after its lost lease, is not run again", func(t *testing.T) {
		store := &stalledRenewals{MemoryStore: replay.NewMemoryStore(100), now: time.Now(), stall: true}
		store.Now = store.clock // the store keeps the lease: its clock stands still
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Store, c.Lease = store, 300*time.Millisecond })
		rules := testRules(func(*toolResult) bool { return false })
		var effects atomic.Int32
		args := []byte(`{"key":"k-acted"}`)
		_, err := rules.Call(context.Background(), i, "alice", "pay", args, nil, func(ctx context.Context) (*toolResult, error) {
			effects.Add(1) // the charge went through
			<-ctx.Done()   // then the receipt's step met the lost lease
			// A tool that may have acted says so with its own error,
			// not the context's end, which records nothing.
			return nil, errors.New("charged, but the receipt was not sent")
		})
		if err == nil {
			t.Fatal("the first call succeeded; want its failure")
		}
		store.mu.Lock()
		store.stall = false
		store.mu.Unlock()
		_, _ = rules.Call(context.Background(), i, "alice", "pay", args, nil, func(context.Context) (*toolResult, error) {
			effects.Add(1)
			return &toolResult{}, nil
		})
		if n := effects.Load(); n != 1 {
			t.Fatalf("one key, %d effects", n)
		}
	})
}

// A context that ctoken ended itself (a lease it could not keep, a time
// limit of its own, a round's lost hold), and a tool that returned that
// end, as it is or wrapped: nothing is recorded and the key is released,
// so the retry runs the tool, never a replayed failure. The caller's own
// cancellation (a round's or a task's, which reaches the tool) is the
// tool's failure, recorded as ever.
func TestToolStoppedByServerRecordsNothing(t *testing.T) {
	rules := testRules(func(*toolResult) bool { return false })
	// tool is the first run of a tool that honours its context: it
	// returns the context's end, wrapped as a database driver wraps it;
	// the runs after it act once each.
	tool := func(effects *atomic.Int32) func(ctx context.Context) (*toolResult, error) {
		var runs atomic.Int32
		return func(ctx context.Context) (*toolResult, error) {
			if runs.Add(1) == 1 {
				<-ctx.Done()
				return nil, fmt.Errorf("insert: %w", ctx.Err())
			}
			return &toolResult{N: int(effects.Add(1))}, nil
		}
	}

	t.Run("a lease the store ends", func(t *testing.T) {
		store := &countedRenewals{MemoryStore: replay.NewMemoryStore(100), lose: true}
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Store, c.Lease = store, 300*time.Millisecond })
		var effects atomic.Int32
		run := tool(&effects)
		args := []byte(`{"key":"k-lost"}`)
		_, err := rules.Call(context.Background(), i, "alice", "pay", args, nil, run)
		if !errors.Is(err, ErrNoEffect) || !errors.Is(err, errCallLeaseLost) {
			t.Fatalf("the stopped call: %v; want ErrNoEffect (retry under the key) and the lost lease", err)
		}
		if d, ok := RetryAfter(err); !ok || d <= 0 {
			t.Fatalf("RetryAfter = %v, %v; want a hint", d, ok)
		}
		store.lose = false
		if res, err := rules.Call(context.Background(), i, "alice", "pay", args, nil, run); err != nil || res.N != 1 || effects.Load() != 1 {
			t.Fatalf("the retry: %+v, %v, %d effects; want the tool run once", res, err, effects.Load())
		}
	})

	t.Run("the call's time runs out", func(t *testing.T) {
		// Not renewed (Window barely over Lease): the tool has three
		// quarters of the Lease.
		i := testIdempotency(t, &bytes.Buffer{}, func(c *IdempotencyConfig) { c.Lease, c.Window = time.Second, time.Second+time.Millisecond })
		var effects atomic.Int32
		run := tool(&effects)
		args := []byte(`{"key":"k-late"}`)
		if _, err := rules.Call(context.Background(), i, "alice", "pay", args, nil, run); !errors.Is(err, ErrNoEffect) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the stopped call: %v; want ErrNoEffect", err)
		}
		if res, err := rules.Call(context.Background(), i, "alice", "pay", args, nil, run); err != nil || res.N != 1 {
			t.Fatalf("the retry: %+v, %v; want the tool run once", res, err)
		}
	})

	t.Run("a round's lost hold", func(t *testing.T) {
		roundStore := &stalledRenewals{MemoryStore: replay.NewMemoryStore(0), now: time.Now()}
		roundStore.Now = roundStore.clock
		s, _ := retryStates(t, roundStore, StatesConfig{})
		s.hold = 600 * time.Millisecond
		i := testIdempotency(t, &bytes.Buffer{}, nil)
		var effects atomic.Int32
		run := tool(&effects)
		args := []byte(`{"key":"k-round"}`)
		wire, err := s.Seal("alice", "tools/call", "deploy", args, "plan")
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Answer(context.Background(), "alice", "tools/call", "deploy", args, wire, func(ctx context.Context, state string) ([]byte, error) {
			go func() { <-time.After(50 * time.Millisecond); roundStore.step(20 * time.Second) }() // the round's hold ends in its store
			_, err := rules.Call(ctx, i, "alice", "deploy", args, nil, run)
			return nil, err
		})
		if !errors.Is(err, ErrRoundInterrupted) || !errors.Is(err, ErrNoEffect) {
			t.Fatalf("the round: %v; want its lost hold, nothing recorded under the call's key", err)
		}
		// The call started over (round one again) under the same key.
		if res, err := rules.Call(context.Background(), i, "alice", "deploy", args, nil, run); err != nil || res.N != 1 {
			t.Fatalf("the call started over: %+v, %v; want the tool run once", res, err)
		}
	})

	t.Run("the caller's cancel is the tool's failure", func(t *testing.T) {
		i := testIdempotency(t, &bytes.Buffer{}, nil)
		parent, cancel := context.WithCancel(detach(context.Background())) // a round's or a task's
		var effects atomic.Int32
		run := tool(&effects)
		args := []byte(`{"key":"k-caller"}`)
		go cancel()
		_, err := rules.Call(parent, i, "alice", "pay", args, nil, run)
		if errors.Is(err, ErrNoEffect) || err == nil || err.Error() != "replayed insert: context canceled" {
			t.Fatalf("the cancelled call: %v; want the tool's own failure, recorded", err)
		}
		if _, err := rules.Call(context.Background(), i, "alice", "pay", args, nil, run); err == nil || effects.Load() != 0 {
			t.Fatalf("the retry: %v, %d effects; want the recorded failure", err, effects.Load())
		}
	})
}
