package redisstore

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// runBound is how much longer than its deadline a call may take to fail
// while Redis is paused: scheduling on a loaded 2-core machine under -race,
// twice pauseBound (pause_fault_test.go, measured there with nothing else
// running). A call the deadline does not end waits for the pause: forever.
const runBound = 3 * time.Second

// claimBeforeThePause makes one claim on s while Redis runs, so that the
// store has opened its connections before the pause. A claim with
// Durability waits 100 ms for the replica, which a loaded machine can
// miss (ErrNotDurable, nothing fenced): it tries again under a new key
// until one is first.
func claimBeforeThePause(t *testing.T, s *Store) {
	t.Helper()
	for i, deadline := 0, time.Now().Add(15*time.Second); ; i++ {
		first, err := s.Claim(context.Background(), fmt.Sprintf("before-%d", i), time.Now().Add(time.Minute))
		if first && err == nil {
			return
		}
		if !errors.Is(err, ErrNotDurable) || time.Now().After(deadline) {
			t.Fatalf("claim before the pause = %v, %v; want first", first, err)
		}
	}
}

// TestRun pins how a step runs against Redis: paused Redis fails closed on
// both paths and a cancelled claim returns at once, and only calls with a
// deadline run on the caller's goroutine.
func TestRun(t *testing.T) {
	subtests(t, []subtest{
		{"paused redis fails closed", pausedRedisFailsClaimsClosed},
		{"direct only with a deadline", directRunsOnlyCallsThatEndAtADeadlineOnTheCallersGoroutine},
	})
}

// pausedRedisFailsClaimsClosed pauses a primary (SIGSTOP) and claims
// with and without Durability. Under a context that cannot be cancelled
// (the call runs on the caller's goroutine and the client's socket
// deadline ends it) and under one that can (the call runs on a goroutine
// of its own and the store's deadline ends the wait), every claim fails
// closed with ErrUnavailable matching context.DeadlineExceeded within the
// store's timeout and runBound. A claim whose context is cancelled while
// it waits returns ErrUnavailable matching context.Canceled long before
// the store's own deadline.
func pausedRedisFailsClaimsClosed(t *testing.T) {
	t.Parallel()
	const timeout, longTimeout, cancelAfter = 200 * time.Millisecond, 20 * time.Second, 100 * time.Millisecond
	primary := newServer(t)
	newReplica(t, primary)
	c := primary.client()
	type store struct {
		name       string
		s, patient *Store // timeout and longTimeout
	}
	var stores []store
	for _, name := range []string{"plain", "durable"} {
		st := store{name: name}
		for _, to := range []struct {
			s       **Store
			timeout time.Duration
		}{{&st.s, timeout}, {&st.patient, longTimeout}} {
			opts := Options{Prefix: fmt.Sprintf("run-%s-%d:", name, to.timeout), Timeout: to.timeout, AllowAsyncReplicas: true}
			if name == "durable" {
				opts.AllowAsyncReplicas, opts.Durability = false, Durability{Replicas: 1, Timeout: 100 * time.Millisecond}
			}
			*to.s = provisioned(t, c, opts)
			claimBeforeThePause(t, *to.s)
		}
		stores = append(stores, st)
	}
	primary.signal(syscall.SIGSTOP)
	defer primary.signal(syscall.SIGCONT)
	ctxs := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"uncancellable context", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"cancellable context", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	}
	for _, st := range stores {
		for _, cc := range ctxs {
			t.Run(st.name+"/"+cc.name, func(t *testing.T) {
				ctx, cancel := cc.ctx()
				defer cancel()
				start := time.Now()
				wantClaimFails(t, ctx, st.s, "paused-"+cc.name, context.DeadlineExceeded)
				if took := time.Since(start); took > timeout+runBound {
					t.Fatalf("took %v, want at most %v", took, timeout+runBound)
				}
			})
		}
		t.Run(st.name+"/cancelled while it waits", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			timer := time.AfterFunc(cancelAfter, cancel)
			defer timer.Stop()
			start := time.Now()
			wantClaimFails(t, ctx, st.patient, "cancelled", context.Canceled)
			if took := time.Since(start); took > cancelAfter+runBound {
				t.Fatalf("took %v, want at most %v", took, cancelAfter+runBound)
			}
		})
	}
}

// directRunsOnlyCallsThatEndAtADeadlineOnTheCallersGoroutine checks
// which calls skip the goroutine of Store.call: those under a context that
// only a deadline ends (one that cannot be cancelled, or one from
// replay.WithDeadlineOnly), through a client that puts the deadline on
// its socket.
func directRunsOnlyCallsThatEndAtADeadlineOnTheCallersGoroutine(t *testing.T) {
	deadlineOnly, cancel := replay.WithDeadlineOnly(context.Background(), time.Now().Add(time.Minute))
	defer cancel()
	cancellable, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	timed, cancel3 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel3()
	underMarked, cancel4 := context.WithCancel(deadlineOnly)
	defer cancel4()
	ctxs := []struct {
		name   string
		ctx    context.Context
		direct bool // with a client that honours deadlines on the socket
	}{
		{"Background", context.Background(), true},
		{"WithoutCancel", context.WithoutCancel(cancellable), true},
		{"WithDeadlineOnly", deadlineOnly, true},
		{"cancellable", cancellable, false},
		{"WithTimeout", timed, false},
		{"cancellable under WithDeadlineOnly", underMarked, false},
	}
	for _, enabled := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: closedAddr(t), ContextTimeoutEnabled: enabled})
		defer c.Close()
		s := mustNew(t, c, Options{})
		for _, tc := range ctxs {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", tc.name, enabled), func(t *testing.T) {
				if got, want := s.direct(tc.ctx), tc.direct && enabled; got != want {
					t.Fatalf("direct = %v, want %v", got, want)
				}
			})
		}
	}
}
