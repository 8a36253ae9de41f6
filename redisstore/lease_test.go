package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/redis/go-redis/v9"
)

func TestLeaseContract(t *testing.T) {
	c := newTestClient(t)
	replaytest.RunLeaseContract(t, func(t *testing.T) replaytest.Store {
		return provisioned(t, c, Options{Prefix: uniquePrefix(t, c)})
	})
}

// replayingClient sends every command to Redis twice and answers with the
// second reply, as a client does that resends a command whose first reply
// was lost.
type replayingClient struct{ c *redis.Client }

func (r replayingClient) Do(ctx context.Context, args ...any) *redis.Cmd {
	r.c.Do(ctx, args...)
	return r.c.Do(ctx, args...)
}

// TestLease pins the lease steps (AcquireLease, ConfirmLease, ReleaseLease)
// against the test Redis.
func TestLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"resent after a lost reply", leaseStepsResentAfterLostReplyAnswerTheSame},
		{"acquire sees a claim as done", acquireLeaseSeesClaimAsDone},
		{"measured by redis, absolute expiry", leaseIsMeasuredByRedisAndConfirmUsesAbsoluteExpiry},
		{"one key scripts", leaseStepsSendOneKeyScripts},
		{"fail closed", leaseStepsFailClosed},
		{"invalid arguments without redis", leaseStepsRefuseInvalidArgumentsWithoutRedis},
	} {
		t.Run(tc.name, tc.test)
	}
}

func leaseStepsResentAfterLostReplyAnswerTheSame(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, replayingClient{c}, Options{Prefix: uniquePrefix(t, c)})
	ctx := context.Background()
	l, err := s.AcquireLease(ctx, "d", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatalf("resent acquire = %+v, %v; want acquired", l, err)
	}
	if err := s.ConfirmLease(ctx, "d", l.Token, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("resent confirm: %v", err)
	}
	if l2, err := s.AcquireLease(ctx, "d", time.Minute); err != nil || l2.State != replay.LeaseDone {
		t.Fatalf("after confirm = %+v, %v; want done", l2, err)
	}
	l3, err := s.AcquireLease(ctx, "e", time.Minute)
	if err != nil || l3.State != replay.LeaseAcquired {
		t.Fatal(l3, err)
	}
	if err := s.ReleaseLease(ctx, "e", l3.Token); err != nil {
		t.Fatalf("resent release: %v", err)
	}
	if l4, err := s.AcquireLease(ctx, "e", time.Minute); err != nil || l4.State != replay.LeaseAcquired {
		t.Fatalf("after release = %+v, %v; want acquired", l4, err)
	}
}

func acquireLeaseSeesClaimAsDone(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	if first, err := s.Claim(ctx, "tok", time.Now().Add(time.Hour)); !first || err != nil {
		t.Fatal(first, err)
	}
	if l, err := s.AcquireLease(ctx, "tok", time.Minute); err != nil || l.State != replay.LeaseDone {
		t.Fatalf("AcquireLease of a claimed id = %+v, %v; want done", l, err)
	}
}

func leaseIsMeasuredByRedisAndConfirmUsesAbsoluteExpiry(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	l, err := s.AcquireLease(ctx, "d", 30*time.Second)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatal(l, err)
	}
	pttl, err := c.PTTL(ctx, s.key("d")).Result()
	if err != nil || pttl <= 29*time.Second || pttl > 30*time.Second {
		t.Fatalf("lease PTTL = %v, %v; want about 30s", pttl, err)
	}
	until := time.Now().Add(90 * time.Second).Truncate(time.Millisecond)
	if err := s.ConfirmLease(ctx, "d", l.Token, until); err != nil {
		t.Fatal(err)
	}
	got, err := c.Do(ctx, "PEXPIRETIME", s.key("d")).Int64()
	if err != nil || got != until.UnixMilli() {
		t.Fatalf("PEXPIRETIME = %d, %v; want %d", got, err, until.UnixMilli())
	}
}

func leaseStepsSendOneKeyScripts(t *testing.T) {
	var calls [][]any
	reply := []any{int64(1), int64(0)}
	s, err := New(answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
		calls = append(calls, args)
		cmd := redis.NewCmd(ctx, args...)
		switch {
		case len(calls) == 1:
			cmd.SetErr(errors.New("NOSCRIPT No matching script. Please use EVAL."))
		case args[0] == "EVAL" && len(calls) == 2:
			cmd.SetVal(reply)
		case args[1] == releaseLua.sha:
			cmd.SetVal(int64(1))
		default:
			cmd.SetVal([]any{int64(1), int64(0)})
		}
		return cmd
	}), Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := s.AcquireLease(ctx, "id", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatalf("acquire after NOSCRIPT = %+v, %v", l, err)
	}
	if err := s.ConfirmLease(ctx, "id", l.Token, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, "id", l.Token); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 4 {
		t.Fatalf("%d commands, want 4 (EVALSHA, EVAL after NOSCRIPT, EVALSHA, EVALSHA)", len(calls))
	}
	for i, c := range calls {
		want := "EVALSHA"
		if i == 1 {
			want = "EVAL"
		}
		// The shard's marker and the entry, under one hash tag: one slot
		// in Redis Cluster. A release touches only the entry.
		tag := fmt.Sprintf("p:{%02d}", shardOf("id"))
		keys := []any{2, tag, tag + ":id"}
		if i == 3 {
			keys = []any{1, tag + ":id"}
		}
		var got []string
		for _, a := range c[2 : 3+len(keys)-1] {
			got = append(got, argText(t, a))
		}
		if c[0] != want || fmt.Sprint(got) != fmt.Sprint(keys) {
			t.Fatalf("command %d = %v, want %s <script> %v ...", i, c, want, keys)
		}
	}
}

func leaseStepsFailClosed(t *testing.T) {
	tests := []struct {
		name string
		val  any
		err  error
	}{
		{"error reply", nil, errors.New("ERR something")},
		{"cross slot", nil, redis.ErrCrossSlot},
		{"nil", nil, redis.Nil},
		{"string", "OK", nil},
		{"short array", []any{int64(1)}, nil},
		{"unknown state", []any{int64(7), int64(0)}, nil},
		{"wrong types", []any{"1", "0"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
				cmd := redis.NewCmd(ctx, args...)
				cmd.SetVal(tt.val)
				cmd.SetErr(tt.err)
				return cmd
			}), Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if l, err := s.AcquireLease(ctx, "id", time.Minute); !errors.Is(err, ErrUnavailable) || l != (replay.Lease{}) {
				t.Fatalf("AcquireLease = %+v, %v; want nothing and ErrUnavailable", l, err)
			}
			tok := "0123456789abcdef0123456789abcdef"
			if err := s.ConfirmLease(ctx, "id", tok, time.Now().Add(time.Hour)); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("ConfirmLease = %v; want ErrUnavailable", err)
			}
			if _, isInt := tt.val.(int64); !isInt {
				if err := s.ReleaseLease(ctx, "id", tok); !errors.Is(err, ErrUnavailable) {
					t.Fatalf("ReleaseLease = %v; want ErrUnavailable", err)
				}
			}
		})
	}
}

func leaseStepsRefuseInvalidArgumentsWithoutRedis(t *testing.T) {
	var sent atomic.Int32
	s, err := New(clientFunc(func(ctx context.Context, args ...any) *redis.Cmd {
		sent.Add(1)
		return redis.NewCmd(ctx, args...)
	}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, tok := context.Background(), "0123456789abcdef0123456789abcdef"
	long := string(make([]byte, MaxIDBytes+1))
	for _, id := range []string{"", long} {
		if _, err := s.AcquireLease(ctx, id, time.Minute); !errors.Is(err, ErrInvalidClaim) {
			t.Errorf("AcquireLease(len %d): %v", len(id), err)
		}
		if err := s.ConfirmLease(ctx, id, tok, time.Now().Add(time.Hour)); !errors.Is(err, ErrInvalidClaim) {
			t.Errorf("ConfirmLease(len %d): %v", len(id), err)
		}
		if err := s.ReleaseLease(ctx, id, tok); !errors.Is(err, ErrInvalidClaim) {
			t.Errorf("ReleaseLease(len %d): %v", len(id), err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond} {
		if _, err := s.AcquireLease(ctx, "id", d); !errors.Is(err, ErrInvalidClaim) {
			t.Errorf("AcquireLease lease %v: %v", d, err)
		}
	}
	if _, err := s.AcquireLease(ctx, "id", 0); !errors.Is(err, replay.ErrExpired) {
		t.Errorf("AcquireLease lease 0: %v, want also replay.ErrExpired", err)
	}
	if err := s.ConfirmLease(ctx, "id", tok, time.Now().Add(-time.Second)); !errors.Is(err, ErrInvalidClaim) || !errors.Is(err, replay.ErrExpired) {
		t.Errorf("ConfirmLease in the past: %v", err)
	}
	if err := s.ConfirmLease(ctx, "id", "forged", time.Now().Add(time.Hour)); !errors.Is(err, replay.ErrLeaseLost) {
		t.Errorf("ConfirmLease with a foreign token: %v", err)
	}
	if err := s.ReleaseLease(ctx, "id", "forged"); err != nil {
		t.Errorf("ReleaseLease with a foreign token: %v", err)
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d commands reached Redis", n)
	}
}
