package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// replayingClient sends every command to Redis twice and answers with the
// second reply, as a client does that resends a command whose first reply
// was lost.
type replayingClient struct{ c *redis.Client }

func (r replayingClient) Do(ctx context.Context, args ...any) *redis.Cmd {
	r.c.Do(ctx, args...)
	return r.c.Do(ctx, args...)
}

// acquireLease is AcquireLease failing the test on an error or a state
// other than want.
func acquireLease(t *testing.T, s *Store, id string, d time.Duration, want replay.LeaseState) replay.Lease {
	t.Helper()
	l, err := s.AcquireLease(context.Background(), id, d)
	if err != nil || l.State != want {
		t.Fatalf("AcquireLease(%q) = %+v, %v; want %v", id, l, err, want)
	}
	return l
}

// TestLease pins the lease steps (AcquireLease, ConfirmLease, ReleaseLease)
// against the test Redis.
func TestLease(t *testing.T) {
	subtests(t, []subtest{
		{"resent after a lost reply", stepsResentAfterLostReplyAnswerTheSame},
		{"measured by redis, absolute expiry", leaseIsMeasuredByRedisAndConfirmUsesAbsoluteExpiry},
		{"one key scripts", leaseStepsSendOneKeyScripts},
		{"a foreign value under its keys is refused", leaseStepsRefuseAForeignValue},
		{"renew by redis's clock, entry kept", renewIsMeasuredByRedisAndKeepsTheEntry},
		{"renew refused by the guard", renewRefusedByTheGuardChangesNothing},
	})
}

// A client that resends every command after a lost reply gets the same
// answers from every step: each finds its own lease or entry.
func stepsResentAfterLostReplyAnswerTheSame(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, replayingClient{c}, Options{Prefix: uniquePrefix(t, c)})
	ctx := context.Background()
	l := acquireLease(t, s, "d", time.Minute, replay.LeaseAcquired)
	must(t, s.ConfirmLease(ctx, "d", l.Token, time.Now().Add(time.Hour)))
	acquireLease(t, s, "d", time.Minute, replay.LeaseDone)
	l3 := acquireLease(t, s, "e", time.Minute, replay.LeaseAcquired)
	must(t, s.ReleaseLease(ctx, "e", l3.Token))
	acquireLease(t, s, "e", time.Minute, replay.LeaseAcquired)
	l5 := acquireLease(t, s, "f", time.Minute, replay.LeaseAcquired)
	must(t, s.RenewLease(ctx, "f", l5.Token, 2*time.Minute))
	if pttl, err := c.PTTL(ctx, s.key("f")).Result(); err != nil || pttl <= time.Minute {
		t.Fatalf("PTTL after the resent renewal = %v, %v; want about 2 minutes", pttl, err)
	}
	// The record steps: the acquire finds its own lease, the confirm its
	// own record.
	fp, result := []byte("fp"), []byte("result")
	r := acquireRecord(t, s, "g", fp, replay.LeaseAcquired)
	must(t, s.ConfirmRecord(ctx, "g", r.Token, time.Now().Add(time.Hour), fp, result))
	if d := acquireRecord(t, s, "g", fp, replay.LeaseDone); !bytes.Equal(d.Result, result) {
		t.Fatalf("after the confirmation = %+v; want done with the result", d)
	}
}

func leaseIsMeasuredByRedisAndConfirmUsesAbsoluteExpiry(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	l := acquireLease(t, s, "d", 30*time.Second, replay.LeaseAcquired)
	pttl, err := c.PTTL(ctx, s.key("d")).Result()
	if err != nil || pttl <= 29*time.Second || pttl > 30*time.Second {
		t.Fatalf("lease PTTL = %v, %v; want about 30s", pttl, err)
	}
	until := time.Now().Add(90 * time.Second).Truncate(time.Millisecond)
	must(t, s.ConfirmLease(ctx, "d", l.Token, until))
	got, err := c.Do(ctx, "PEXPIRETIME", s.key("d")).Int64()
	if err != nil || got != until.UnixMilli() {
		t.Fatalf("PEXPIRETIME = %d, %v; want %d", got, err, until.UnixMilli())
	}
}

func leaseStepsSendOneKeyScripts(t *testing.T) {
	var calls [][]any
	reply := []any{int64(1), int64(0)}
	s := mustNew(t, answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
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
	ctx := context.Background()
	l := acquireLease(t, s, "id", time.Minute, replay.LeaseAcquired)
	must(t, s.RenewLease(ctx, "id", l.Token, time.Minute))
	must(t, s.ConfirmLease(ctx, "id", l.Token, time.Now().Add(time.Hour)))
	must(t, s.ReleaseLease(ctx, "id", l.Token))
	if len(calls) != 5 {
		t.Fatalf("%d commands, want 5 (EVALSHA, EVAL after NOSCRIPT, then EVALSHA for renew, confirm and release)", len(calls))
	}
	if argText(t, calls[2][1]) != renewLua.sha {
		t.Fatalf("the renewal sent %v, want the renew script", calls[2])
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
		if i == 4 {
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

// A key of another type (a hash) under an entry's or a shard marker's
// name: every lease step refuses it (WRONGTYPE: ErrUnavailable) and
// leaves it as it is. The steps read the marker and the entry with one
// MGET, which reads such a key as nil: a nil is read again with GET, so
// that a foreign entry is not overwritten and a foreign marker is not
// taken for a lost key space (no fence).
func leaseStepsRefuseAForeignValue(t *testing.T) {
	ctx := context.Background()
	const tok = "0123456789abcdef0123456789abcdef"
	steps := []struct {
		name string
		step func(s *Store, id string) error
	}{
		{"acquire", func(s *Store, id string) error { _, err := s.AcquireLease(ctx, id, time.Minute); return err }},
		{"confirm", func(s *Store, id string) error { return s.ConfirmLease(ctx, id, tok, time.Now().Add(time.Hour)) }},
		{"renew", func(s *Store, id string) error { return s.RenewLease(ctx, id, tok, time.Minute) }},
	}
	for _, st := range steps {
		for _, under := range []string{"entry", "marker"} {
			t.Run(st.name+" over a foreign "+under, func(t *testing.T) {
				s, c := newTestStore(t)
				id := "job-" + st.name
				marker, entry, _ := s.keys(id)
				key := entry
				if under == "marker" {
					key = marker
					must(t, c.Del(ctx, marker).Err())
				}
				must(t, c.HSet(ctx, key, "f", "v").Err())
				err := st.step(s, id)
				if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrFenced) {
					t.Fatalf("%s over a hash under the %s's name = %v; want ErrUnavailable (WRONGTYPE), not a fence", st.name, under, err)
				}
				if typ := c.Type(ctx, key).Val(); typ != "hash" {
					t.Fatalf("the %s is now a %s; want the hash left as it was", under, typ)
				}
			})
		}
	}
}

// A renewal sets the lease's end from Redis's clock (PX), whatever the
// instance's clock says, and writes the entry back as it was: a lease of
// AcquireRecord keeps its fingerprint. A renewal with a token that is
// not the live lease's (another holder's, a cancel note's, a done
// entry's) changes nothing.
func renewIsMeasuredByRedisAndKeepsTheEntry(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Now: func() time.Time { return time.Now().Add(-30 * time.Second) }})
	ctx := context.Background()
	r, err := s.AcquireRecord(ctx, "d", 10*time.Second, []byte("fp"))
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatal(r, err)
	}
	before, err := c.Get(ctx, s.key("d")).Result()
	must(t, err)
	must(t, s.RenewLease(ctx, "d", r.Token, 90*time.Second))
	pttl, err := c.PTTL(ctx, s.key("d")).Result()
	if err != nil || pttl <= 89*time.Second || pttl > 90*time.Second {
		t.Fatalf("PTTL after the renewal = %v, %v; want about 90s", pttl, err)
	}
	if after, err := c.Get(ctx, s.key("d")).Result(); err != nil || after != before {
		t.Fatalf("entry after the renewal = %q, %v; want %q", after, err, before)
	}
	wantErr(t, s.RenewLease(ctx, "d", newToken(), time.Hour), replay.ErrLeaseLost, "renewal with another token")
	if p, err := c.PTTL(ctx, s.key("d")).Result(); err != nil || p > pttl {
		t.Fatalf("PTTL after a refused renewal = %v, %v; want at most %v", p, err, pttl)
	}
	tok := newToken()
	must(t, c.Set(ctx, s.key("n"), "X"+tok, time.Minute).Err())
	wantErr(t, s.RenewLease(ctx, "n", tok, time.Hour), replay.ErrLeaseLost, "renewal of a cancel note")
	must(t, s.ConfirmRecord(ctx, "d", r.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")))
	done, err := c.Get(ctx, s.key("d")).Result()
	must(t, err)
	wantErr(t, s.RenewLease(ctx, "d", r.Token, time.Minute), replay.ErrLeaseLost, "renewal of a done entry")
	if after, err := c.Get(ctx, s.key("d")).Result(); err != nil || after != done {
		t.Fatalf("done entry after a refused renewal = %q, %v; want %q", after, err, done)
	}
}

// The guard refuses a renewal as it refuses an acquisition, leaving the
// lease as it was: one longer than the horizon, or from an instance whose
// clock lags Redis's by more than MaxSkew.
func renewRefusedByTheGuardChangesNothing(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Horizon: time.Hour})
	ctx := context.Background()
	l := acquireLease(t, s, "a", 10*time.Second, replay.LeaseAcquired)
	long := time.Hour + time.Second
	if _, err := s.AcquireLease(ctx, "b", long); !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyLeaseLong {
		t.Fatalf("AcquireLease past the horizon = %v; want ErrInvalidClaim (%q)", err, whyLeaseLong)
	}
	if err := s.RenewLease(ctx, "a", l.Token, long); !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyLeaseLong {
		t.Fatalf("renewal past the horizon = %v; want ErrInvalidClaim (%q), as AcquireLease", err, whyLeaseLong)
	}
	var ev events
	lag := closing(t, mustNew(t, c, Options{Prefix: s.Prefix(), Horizon: time.Hour, Observer: ev.observe,
		Now: func() time.Time { return time.Now().Add(-2 * time.Minute) }}))
	lag.checked.Store(true) // as if its clock had jumped back after the checks passed
	_, err := lag.AcquireLease(ctx, "b", time.Minute)
	wantErr(t, err, ErrClockSkew, "AcquireLease from a lagging instance")
	if err := lag.RenewLease(ctx, "a", l.Token, time.Minute); !errors.Is(err, ErrClockSkew) || Reason(err) != whySkew {
		t.Fatalf("renewal from a lagging instance = %v; want ErrClockSkew, as AcquireLease", err)
	}
	if ev.count(replay.EventClockSkew) != 2 {
		t.Fatalf("%d clock_skew events, want 2", ev.count(replay.EventClockSkew))
	}
	if pttl, err := c.PTTL(ctx, s.key("a")).Result(); err != nil || pttl > 10*time.Second {
		t.Fatalf("PTTL after the refused renewals = %v, %v; want at most 10s", pttl, err)
	}
}
