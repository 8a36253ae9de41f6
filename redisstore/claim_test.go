package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// wantClaim is Claim failing the test on an error or on first other than
// want.
func wantClaim(t *testing.T, s *Store, id string, until time.Time, want bool) {
	t.Helper()
	if first, err := s.Claim(context.Background(), id, until); err != nil || first != want {
		t.Fatalf("Claim(%q) = %v, %v; want %v, nil", id, first, err, want)
	}
}

// wantRefused is Claim failing the test unless it is refused with an error
// matching every one of targets; it returns the error.
func wantRefused(t *testing.T, s *Store, id string, until time.Time, targets ...error) error {
	t.Helper()
	first, err := s.Claim(context.Background(), id, until)
	if first || err == nil {
		t.Fatalf("Claim(%q) = %v, %v; want refused", id, first, err)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("Claim(%q) = %v; want %v", id, err, target)
		}
	}
	return err
}

// wantClaimFails is Claim under ctx failing the test unless it is refused
// with ErrUnavailable matching cause.
func wantClaimFails(t *testing.T, ctx context.Context, s *Store, id string, cause error) {
	t.Helper()
	first, err := s.Claim(ctx, id, time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrUnavailable) || !errors.Is(err, cause) {
		t.Fatalf("Claim(%q) = %v, %v; want false, ErrUnavailable and %v", id, first, err, cause)
	}
}

// wantErr fails the test unless err matches target; what names the call.
func wantErr(t testing.TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s = %v; want %v", what, err, target)
	}
}

// TestClaim pins what Redis adds to the claim contract (TestStore:
// first once, refused after, racing claims): each entry state, expiry by
// Redis's clock and the keys and script it sends.
func TestClaim(t *testing.T) {
	subtests(t, []subtest{
		{"over each entry state", claimOverEachEntryState},
		{"stores absolute expiry", claimStoresAbsoluteExpiry},
		{"invalid arguments never reach redis", invalidArgumentsNeverReachRedis},
		{"accepts max length ID", claimAcceptsMaxLengthID},
		{"one guarded script, absolute expiry", claimSendsOneGuardedScriptWithAbsoluteExpiry},
		{"resent claim finds its own entry", resentClaimFindsItsOwnEntry},
	})
}

// The claim script writes with one SET NX and reads the entry only when
// that fails: each state an entry can be in gets its answer, and only a
// free ID (none, or a lease's cancel note) is taken. Real redis-server.
func claimOverEachEntryState(t *testing.T) {
	c := newServer(t).client()
	s := provisioned(t, c, Options{Prefix: "states:", Logger: quietLogger()})
	ctx := context.Background()
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	token := strings.Repeat("ab", tokenLen/4)
	tests := []struct {
		name  string
		entry string // "" for no entry
		first bool
	}{
		{"free", "", true},
		{"cancel note", "X" + token, true},
		{"leased", "L" + token, false},
		{"done", "D" + token, false},
		{"claimed by another store", "1" + "0123456789abcdef.1", false},
		{"claimed by a version without nonces", "1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "state-" + tt.name
			if tt.entry != "" {
				must(t, c.Set(ctx, s.key(id), tt.entry, time.Minute).Err())
			}
			wantClaim(t, s, id, until, tt.first)
			v, err := c.Get(ctx, s.key(id)).Result()
			must(t, err)
			switch {
			case tt.first && (!strings.HasPrefix(v, s.nonceBase) || !strings.HasPrefix(v, "1")):
				t.Fatalf("entry %q after a first claim; want \"1\" + the claim's nonce", v)
			case !tt.first && v != tt.entry:
				t.Fatalf("entry %q after a refused claim; want %q unchanged", v, tt.entry)
			}
			if tt.first {
				if got, err := c.Do(ctx, "PEXPIRETIME", s.key(id)).Int64(); err != nil || got != until.UnixMilli() {
					t.Fatalf("PEXPIRETIME = %v, %v; want until", got, err)
				}
			}
		})
	}
}

// A sub-millisecond until is rounded up, never down. (A whole millisecond
// is stored as it is: "over each entry state", its free ID.)
func claimStoresAbsoluteExpiry(t *testing.T) {
	s, c := newTestStore(t)
	until := time.Now().Add(90 * time.Second).Truncate(time.Millisecond)
	wantClaim(t, s, "abs2", until.Add(400*time.Microsecond), true)
	got, err := c.Do(context.Background(), "PEXPIRETIME", s.key("abs2")).Int64()
	must(t, err)
	if got != until.UnixMilli()+1 {
		t.Fatalf("PEXPIRETIME = %d, want %d (rounded up)", got, until.UnixMilli()+1)
	}
}

// Invalid arguments to every step are refused before a command is sent
// (the client counts them), matching the errors each case names, and no
// error echoes an oversize ID.
func invalidArgumentsNeverReachRedis(t *testing.T) {
	var sent atomic.Int32
	now := time.Now().Truncate(time.Millisecond)
	s := mustNew(t, clientFunc(func(ctx context.Context, args ...any) *redis.Cmd {
		sent.Add(1)
		return redis.NewCmd(ctx, args...)
	}), Options{Horizon: time.Hour, Now: func() time.Time { return now }})
	ctx, tok, until := context.Background(), "0123456789abcdef0123456789abcdef", now.Add(time.Minute)
	fp, result := []byte("fp"), []byte("result")
	long := strings.Repeat("x", MaxIDBytes+1)
	claim := func(id string, until time.Time) func() error {
		return func() error {
			first, err := s.Claim(ctx, id, until)
			if first {
				return errors.New("claimed first")
			}
			return err
		}
	}
	acquire := func(id string, d time.Duration) func() error {
		return func() error { _, err := s.AcquireLease(ctx, id, d); return err }
	}
	acquireRecord := func(id string, d time.Duration, fp []byte) func() error {
		return func() error { _, err := s.AcquireRecord(ctx, id, d, fp); return err }
	}
	confirmRecord := func(id, tok string, until time.Time, fp, result []byte) func() error {
		return func() error { return s.ConfirmRecord(ctx, id, tok, until, fp, result) }
	}
	invalid, expired, tooLarge, lost := []error{ErrInvalidClaim}, []error{ErrInvalidClaim, replay.ErrExpired}, []error{replay.ErrTooLarge, ErrInvalidClaim}, []error{replay.ErrLeaseLost}
	type step struct {
		name   string
		call   func() error
		want   []error // nil: err is nil
		not    error   // an error err must not match
		reason string  // Reason(err), when set
	}
	tests := []step{
		{"claim: empty id", claim("", until), invalid, nil, ""},
		{"claim: oversize id", claim(long, until), invalid, nil, ""},
		{"claim: until in the past", claim("id", now.Add(-time.Second)), invalid, nil, ""},
		{"claim: until is now", claim("id", now), invalid, nil, ""},
		{"claim: until within the current millisecond", claim("id", now.Add(-500*time.Microsecond)), invalid, nil, ""},
		{"claim: zero until", claim("id", time.Time{}), invalid, nil, ""},
		{"lease: acquire, lease 0", acquire("id", 0), expired, nil, ""},
		{"lease: renewal past the horizon", func() error { return s.RenewLease(ctx, "id", tok, DefaultHorizon+time.Second) }, invalid, nil, whyLeaseLong},
		{"lease: confirm in the past", func() error { return s.ConfirmLease(ctx, "id", tok, now.Add(-time.Second)) }, expired, nil, ""},
		{"lease: confirm with a foreign token", func() error { return s.ConfirmLease(ctx, "id", "forged", now.Add(time.Hour)) }, lost, nil, ""},
		{"lease: release with a foreign token", func() error { return s.ReleaseLease(ctx, "id", "forged") }, nil, nil, ""},
		{"record: fingerprint over the limit (acquire)", acquireRecord("id", time.Minute, make([]byte, replay.MaxFingerprintBytes+1)), tooLarge, nil, ""},
		{"record: fingerprint over the limit (confirm)", confirmRecord("id", tok, until, make([]byte, replay.MaxFingerprintBytes+1), result), tooLarge, nil, ""},
		{"record: empty result", confirmRecord("id", tok, until, fp, nil), tooLarge, nil, ""},
		{"record: result over the limit", confirmRecord("id", tok, until, fp, make([]byte, replay.MaxResultBytes+1)), tooLarge, nil, ""},
		{"record: empty id (acquire)", acquireRecord("", time.Minute, fp), invalid, nil, ""},
		{"record: oversize id (acquire)", acquireRecord(long, time.Minute, fp), invalid, nil, ""},
		{"record: empty id (confirm)", confirmRecord("", tok, until, fp, result), invalid, nil, ""},
		{"record: oversize id (confirm)", confirmRecord(long, tok, until, fp, result), invalid, nil, ""},
		{"record: lease not positive", acquireRecord("id", 0, fp), expired, nil, ""},
		{"record: lease under a millisecond", acquireRecord("id", time.Microsecond, fp), invalid, nil, ""},
		{"record: lease past the horizon", acquireRecord("id", 2*time.Hour, fp), invalid, nil, ""},
		{"record: until in the past", confirmRecord("id", tok, now.Add(-time.Second), fp, result), expired, nil, ""},
		{"record: until past the horizon", confirmRecord("id", tok, now.Add(2*time.Hour), fp, result), invalid, nil, ""},
		{"record: forged token", confirmRecord("id", "forged", until, fp, result), lost, nil, ""},
	}
	for _, id := range []string{"", long} {
		n := fmt.Sprintf(", id of %d bytes", len(id))
		tests = append(tests,
			step{"lease: acquire" + n, acquire(id, time.Minute), invalid, nil, ""},
			step{"lease: confirm" + n, func() error { return s.ConfirmLease(ctx, id, tok, now.Add(time.Hour)) }, invalid, nil, ""},
			step{"lease: release" + n, func() error { return s.ReleaseLease(ctx, id, tok) }, invalid, nil, ""},
			step{"lease: renew" + n, func() error { return s.RenewLease(ctx, id, tok, time.Minute) }, invalid, nil, ""},
			step{"claim: Release" + n, func() error { return s.Release(ctx, id) }, invalid, nil, ""})
	}
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond} {
		renew, notExpired := expired, error(nil)
		if d > 0 {
			renew, notExpired = invalid, replay.ErrExpired
		}
		tests = append(tests,
			step{fmt.Sprintf("lease: acquire, lease %v", d), acquire("id", d), invalid, nil, ""},
			step{fmt.Sprintf("lease: renew, lease %v", d), func() error { return s.RenewLease(ctx, "id", tok, d) }, renew, notExpired, ""})
	}
	for _, forged := range []string{"", "forged", strings.ToUpper(tok), tok + "0"} {
		tests = append(tests, step{fmt.Sprintf("lease: renew with the foreign token %q", forged), func() error { return s.RenewLease(ctx, "id", forged, time.Minute) }, lost, nil, ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if tt.want == nil && err != nil {
				t.Fatalf("err = %v; want nil", err)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Fatalf("err = %v; want it to match %v", err, w)
				}
			}
			if tt.not != nil && errors.Is(err, tt.not) {
				t.Fatalf("err = %v; want it not to match %v", err, tt.not)
			}
			if tt.reason != "" && Reason(err) != tt.reason {
				t.Fatalf("Reason = %q; want %q", Reason(err), tt.reason)
			}
			if strings.Contains(fmt.Sprint(err), long) {
				t.Fatal("the error echoes the id")
			}
		})
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d commands reached Redis", n)
	}
}

func claimAcceptsMaxLengthID(t *testing.T) {
	s, _ := newTestStore(t)
	wantClaim(t, s, strings.Repeat("y", MaxIDBytes), time.Now().Add(time.Minute), true)
}

func claimSendsOneGuardedScriptWithAbsoluteExpiry(t *testing.T) {
	until := time.UnixMilli(1_900_000_000_123)
	now := until.Add(-time.Hour)
	var got []any
	s := mustNew(t, answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
		got = args
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetVal([]any{int64(1), int64(0)})
		return cmd
	}), Options{Prefix: "p:", Now: func() time.Time { return now }})
	wantClaim(t, s, "the-id", until, true)
	tag := fmt.Sprintf("p:{%02d}", shardOf("the-id"))
	// The marker and the entry share one hash tag: one slot in Redis Cluster.
	// ARGV[3] is the bound and fence: the one-hour claim's lifetime
	// recorded before it (lifetime.go).
	want := []any{"EVALSHA", claimLua.sha, 2, tag, tag + ":the-id",
		strconv.FormatInt(now.UnixMilli(), 10), "60000", strconv.FormatInt(s.lifetimeOf(time.Hour).Milliseconds(), 10), "1900000000123"}
	// The arguments may be pointers (run builds the command without
	// allocating): compare what go-redis writes.
	text := make([]string, len(got))
	for i, a := range got {
		text[i] = argText(t, a)
	}
	if len(text) != len(want)+2 || fmt.Sprint(text[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("command = %v, want %v, a nonce and the loss counters", text, want)
	}
	if nonce := text[len(want)]; len(nonce) < 18 || !strings.HasPrefix(nonce, s.nonceBase) || !strings.HasPrefix(nonce, "1") {
		t.Fatalf("nonce %v; want \"1\", the store's base and a counter", nonce)
	}
	// The loss counters: none on a client whose master per key the store
	// cannot name (this one is not a *redis.Client).
	if counters := text[len(want)+1]; counters != "-" {
		t.Fatalf("loss counters %q; want \"-\"", counters)
	}
}

// A claim whose reply is lost and which the client resends (go-redis
// retries by default) is first, not refused as its own replay: the claim's
// nonce identifies its own entry, and replay.EventClaimResent reports it. Other
// claims of the ID stay refused. Real redis-server.
func resentClaimFindsItsOwnEntry(t *testing.T) {
	t.Parallel()
	real := newServer(t).client()
	var ev events
	resend := clientFunc(func(ctx context.Context, args ...any) *redis.Cmd {
		if name, _ := args[0].(string); name == "EVALSHA" || name == "EVAL" {
			real.Do(ctx, args...) // this reply is lost
		}
		return real.Do(ctx, args...)
	})
	s := provisioned(t, real, Options{Prefix: "resend:", Logger: quietLogger()})
	r := mustNew(t, resend, Options{Prefix: "resend:", Logger: quietLogger(), Observer: ev.observe})
	until := time.Now().Add(time.Minute)
	for i := range 10 {
		id := fmt.Sprint("lost-reply-", i)
		wantClaim(t, r, id, until, true)
		for _, st := range []*Store{r, s} {
			wantClaim(t, st, id, until, false)
		}
	}
	if n := ev.count(replay.EventClaimResent); n != 10 {
		t.Fatalf("%d replay.EventClaimResent; want 10", n)
	}
}

// TestClaimFailsClosed pins that [Store.Claim] refuses, never answers first,
// when Redis is down, slow, odd or full (and the lease steps, when odd).
func TestClaimFailsClosed(t *testing.T) {
	subtests(t, []subtest{
		{"redis down", claimFailsClosedWhenRedisDown},
		{"redis slow", claimFailsClosedWhenRedisSlow},
		{"unexpected replies", stepsFailClosedOnUnexpectedReplies},
		{"redis full", claimFailsClosedWhenRedisIsFull},
	})
}

func claimFailsClosedWhenRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	s := mustNew(t, c, Options{})
	err := wantRefused(t, s, "id", time.Now().Add(time.Minute), ErrUnavailable)
	if strings.Contains(err.Error(), "\"id\"") {
		t.Fatalf("error text echoes the id: %q", err)
	}
}

func claimFailsClosedWhenRedisSlow(t *testing.T) {
	addr := silentServer(t)
	// The client's own timeouts are far longer than the store's deadline, and
	// it ignores context deadlines: only the store can end the call early,
	// and the error says which deadline ended it.
	c := redis.NewClient(&redis.Options{
		Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		DialTimeout: time.Minute, MaxRetries: -1, Protocol: 2,
	})
	defer c.Close()

	t.Run("store timeout", func(t *testing.T) {
		s := mustNew(t, c, Options{Timeout: 100 * time.Millisecond})
		wantClaimFails(t, context.Background(), s, "id", context.DeadlineExceeded)
	})
	t.Run("caller deadline", func(t *testing.T) {
		s := mustNew(t, c, Options{Timeout: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		wantClaimFails(t, ctx, s, "id", context.DeadlineExceeded)
	})
	t.Run("caller cancelled", func(t *testing.T) {
		s := mustNew(t, c, Options{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		wantClaimFails(t, ctx, s, "id", context.Canceled)
	})
}

// Every step refuses with ErrUnavailable, never first nor acquired, on a
// reply it does not expect.
func stepsFailClosedOnUnexpectedReplies(t *testing.T) {
	tests := []struct {
		name string
		val  any
		err  error
	}{
		{"error reply", nil, errors.New("ERR invalid expire time in 'set' command")},
		{"another error reply", nil, errors.New("ERR something")},
		{"readonly replica", nil, errors.New("READONLY You can't write against a read only replica.")},
		{"cross slot", nil, redis.ErrCrossSlot},
		{"nil", nil, redis.Nil},
		{"nil value", nil, nil},
		{"queued", "QUEUED", nil},
		{"string", "OK", nil},
		{"empty string", "", nil},
		{"integer", int64(7), nil},
		{"negative integer", int64(-1), nil},
		{"short array", []any{int64(1)}, nil},
		{"unknown state", []any{int64(7), int64(0)}, nil},
		{"wrong types", []any{"1", "0"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
				cmd := redis.NewCmd(ctx, args...)
				cmd.SetVal(tt.val)
				cmd.SetErr(tt.err)
				return cmd
			}), Options{})
			ctx := context.Background()
			wantRefused(t, s, "id", time.Now().Add(time.Minute), ErrUnavailable)
			if l, err := s.AcquireLease(ctx, "id", time.Minute); !errors.Is(err, ErrUnavailable) || l != (replay.Lease{}) {
				t.Fatalf("AcquireLease = %+v, %v; want nothing and ErrUnavailable", l, err)
			}
			tok := "0123456789abcdef0123456789abcdef"
			wantErr(t, s.ConfirmLease(ctx, "id", tok, time.Now().Add(time.Hour)), ErrUnavailable, "ConfirmLease")
			if err := s.RenewLease(ctx, "id", tok, time.Minute); !errors.Is(err, ErrUnavailable) || errors.Is(err, replay.ErrLeaseLost) {
				t.Fatalf("RenewLease = %v; want ErrUnavailable", err)
			}
			if _, isInt := tt.val.(int64); !isInt {
				wantErr(t, s.ReleaseLease(ctx, "id", tok), ErrUnavailable, "ReleaseLease")
			}
		})
	}
}

// With maxmemory-policy noeviction (the setting docs/fleet.md asks for), a
// full Redis refuses writes rather than evicting live claims, and the store
// turns the refusal into ErrUnavailable.
func claimFailsClosedWhenRedisIsFull(t *testing.T) {
	srv := newServer(t, "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	s := provisioned(t, c, Options{})
	wantClaim(t, s, "before", time.Now().Add(time.Minute), true)
	must(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	err := wantRefused(t, s, "after", time.Now().Add(time.Minute), ErrUnavailable)
	if !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("claim on a full Redis failed for another reason: %v", err)
	}
	// The live claim was not evicted to make room.
	if first, err := s.Claim(ctx, "before", time.Now().Add(time.Minute)); first {
		t.Fatalf("replay of a live claim on a full Redis: first = true (err = %v)", err)
	}
}
