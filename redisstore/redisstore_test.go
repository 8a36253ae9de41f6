package redisstore

import (
	"context"
	"crypto/rand"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/redis/go-redis/v9"
)

// redisAddr returns the address of the test Redis server from
// CTOKEN_REDIS_ADDR (set by .ci/redis.sh). Without it the test is skipped,
// except under CI=true, where the Redis tests must run and its absence fails.
func redisAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("CTOKEN_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CTOKEN_REDIS_ADDR is not set but CI=true: the Redis tests must run in CI (use .ci/redis.sh)")
		}
		t.Skip("CTOKEN_REDIS_ADDR not set; run under .ci/redis.sh to test against a real redis-server")
	}
	return addr
}

// newTestClient connects to the test Redis and fails the test if it does
// not answer.
func newTestClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("test Redis at %s does not answer: %v", redisAddr(t), err)
	}
	return c
}

// uniquePrefix returns a key prefix no other test run uses, and deletes its
// keys when the test ends.
func uniquePrefix(t testing.TB, c *redis.Client) string {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	p := "ctoken-test:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, p+"*", 100).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return p
}

func newTestStore(t testing.TB) (*Store, *redis.Client) {
	t.Helper()
	c := newTestClient(t)
	return provisioned(t, c, Options{Prefix: uniquePrefix(t, c)}), c
}

// provisioned returns a Store on c with opts whose key space is provisioned
// (a new prefix, or one provisioned before), closed when the test ends.
// quietLogger drops the store's log lines (the tests count refusals
// through the errors themselves).
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func provisioned(t testing.TB, c Client, opts Options) *Store {
	t.Helper()
	s, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.ProvisionNew(context.Background()); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	return s
}

// answerChecks wraps a scripted client so that it answers the server checks
// of the store's first call (ROLE, INFO, CONFIG GET, TIME) like a lone primary
// with noeviction and the real clock, and its key-space check (GET of each
// shard marker) like a provisioned key space, and passes every other command
// to f. scriptedRunID is the run_id answerChecks gives.
const scriptedRunID = "0123456789abcdef0123456789abcdef01234567"

func answerChecks(f clientFunc) clientFunc { return answerChecksInfo(f, false) }

// answerChecksInfo is answerChecks; with info, INFO stats and INFO
// commandstats go to f (a test of the loss counters), else they answer a
// clean server.
func answerChecksInfo(f clientFunc, info bool) clientFunc {
	return func(ctx context.Context, args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		switch args[0] {
		case "ROLE":
			cmd.SetVal([]any{"master", int64(0), []any{}})
		case "CONFIG": // GET name: what a fresh redis-server --save "" answers
			name, _ := args[2].(string)
			value, ok := map[string]string{"maxmemory-policy": "noeviction", "appendonly": "no", "appendfsync": "everysec", "save": ""}[name]
			if !ok {
				return f(ctx, args...)
			}
			cmd.SetVal([]any{name, value})
		case "INFO": // replication: never had a replica; server: a fixed run_id
			switch section, _ := args[len(args)-1].(string); section {
			case "replication":
				cmd.SetVal("# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\nrepl_backlog_active:0\r\n")
			case "server":
				cmd.SetVal("# Server\r\nrun_id:" + scriptedRunID + "\r\n")
			case "stats":
				if info {
					return f(ctx, args...)
				}
				cmd.SetVal("# Stats\r\nevicted_keys:0\r\n")
			case "commandstats":
				if info {
					return f(ctx, args...)
				}
				cmd.SetVal("# Commandstats\r\ncmdstat_get:calls=1,usec=1\r\n")
			default:
				return f(ctx, args...)
			}
		case "GET": // a shard marker: open; no lifetime recorded
			key, _ := args[1].(string)
			switch {
			case strings.HasSuffix(key, "lifetime"):
				cmd.SetErr(redis.Nil)
			case !isMarkerKey(key):
				return f(ctx, args...)
			default:
				cmd.SetVal("O")
			}
		case "EVAL": // the lifetime record (lifetime.go): recorded as asked
			if src, _ := args[1].(string); src != lifetimeScript {
				return f(ctx, args...)
			}
			want, _ := args[4].(int64)
			cmd.SetVal(want)
		case "EXISTS": // the checks' count of the markers: all there
			if len(args) != Shards+1 {
				return f(ctx, args...)
			}
			cmd.SetVal(int64(Shards))
		case "HGET", "HSET", "HLEN": // <prefix>servers: empty
			if key, _ := args[1].(string); !strings.HasSuffix(key, "servers") {
				return f(ctx, args...)
			}
			switch args[0] {
			case "HGET":
				cmd.SetErr(redis.Nil)
			default:
				cmd.SetVal(int64(0))
			}
		case "TIME":
			now := time.Now()
			cmd.SetVal([]any{strconv.FormatInt(now.Unix(), 10), strconv.Itoa(now.Nanosecond() / 1000)})
		default:
			return f(ctx, args...)
		}
		return cmd
	}
}

// isMarkerKey reports whether key is a shard marker, <prefix>{NN}.
func isMarkerKey(key string) bool {
	n := len(key)
	return n >= 4 && key[n-4] == '{' && key[n-1] == '}' && key[n-3] >= '0' && key[n-3] <= '9' && key[n-2] >= '0' && key[n-2] <= '9'
}

func TestClaimIsFirstOnceThenRefused(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	for i, want := range []bool{true, false, false} {
		first, err := s.Claim(ctx, "delivery-1", until)
		if err != nil {
			t.Fatalf("claim %d: %v", i+1, err)
		}
		if first != want {
			t.Fatalf("claim %d: first = %v, want %v", i+1, first, want)
		}
	}
	// Another ID is independent.
	if first, err := s.Claim(ctx, "delivery-2", until); err != nil || !first {
		t.Fatalf("other id: first = %v, err = %v; want true, nil", first, err)
	}
}

// The claim script writes with one SET NX and reads the entry only when
// that fails: each state an entry can be in gets its answer, and only a
// free ID (none, or a lease's cancel note) is taken. Real redis-server.
func TestClaimOverEachEntryState(t *testing.T) {
	srv := newServer(t)
	c := srv.client()
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
				if err := c.Set(ctx, s.key(id), tt.entry, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			first, err := s.Claim(ctx, id, until)
			if err != nil || first != tt.first {
				t.Fatalf("Claim = %v, %v; want %v", first, err, tt.first)
			}
			v, err := c.Get(ctx, s.key(id)).Result()
			if err != nil {
				t.Fatal(err)
			}
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

func TestClaimStoresAbsoluteExpiry(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	until := time.Now().Add(90 * time.Second).Truncate(time.Millisecond)
	if first, err := s.Claim(ctx, "abs", until); err != nil || !first {
		t.Fatalf("first = %v, err = %v", first, err)
	}
	got, err := c.Do(ctx, "PEXPIRETIME", s.key("abs")).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if got != until.UnixMilli() {
		t.Fatalf("PEXPIRETIME = %d, want until = %d", got, until.UnixMilli())
	}
	// A sub-millisecond until is rounded up, never down.
	until2 := until.Add(400 * time.Microsecond)
	if first, err := s.Claim(ctx, "abs2", until2); err != nil || !first {
		t.Fatalf("first = %v, err = %v", first, err)
	}
	got2, err := c.Do(ctx, "PEXPIRETIME", s.key("abs2")).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if got2 != until.UnixMilli()+1 {
		t.Fatalf("PEXPIRETIME = %d, want %d (rounded up)", got2, until.UnixMilli()+1)
	}
}

func TestClaimAfterExpiryIsFirstAgain(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	if first, err := s.Claim(ctx, "short", until); err != nil || !first {
		t.Fatalf("first claim: first = %v, err = %v", first, err)
	}
	if first, err := s.Claim(ctx, "short", until); err != nil || first {
		t.Fatalf("replay before expiry: first = %v, err = %v; want false, nil", first, err)
	}
	// Let the key's absolute expiry pass on Redis's clock (instead of
	// sleeping through a short until, which a loaded machine can overrun).
	if err := c.PExpireAt(ctx, s.key("short"), time.Now().Add(-time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	if first, err := s.Claim(ctx, "short", time.Now().Add(time.Minute)); err != nil || !first {
		t.Fatalf("claim after expiry: first = %v, err = %v; want true, nil", first, err)
	}
}

func TestPrefixIsolatesStores(t *testing.T) {
	c := newTestClient(t)
	a := provisioned(t, c, Options{Prefix: uniquePrefix(t, c)})
	b := provisioned(t, c, Options{Prefix: uniquePrefix(t, c)})
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	for _, s := range []*Store{a, b} {
		if first, err := s.Claim(ctx, "same-id", until); err != nil || !first {
			t.Fatalf("prefix %q: first = %v, err = %v; want true, nil", s.Prefix(), first, err)
		}
	}
	for _, s := range []*Store{a, b} {
		if first, err := s.Claim(ctx, "same-id", until); err != nil || first {
			t.Fatalf("prefix %q replay: first = %v, err = %v; want false, nil", s.Prefix(), first, err)
		}
	}
}

func TestZeroOptionsUseDefaultPrefix(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{})
	if s.Prefix() != DefaultPrefix {
		t.Fatalf("Prefix() = %q, want %q", s.Prefix(), DefaultPrefix)
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := "zero-options-" + hex.EncodeToString(b)
	t.Cleanup(func() { c.Del(context.Background(), s.key(id)) })
	if first, err := s.Claim(context.Background(), id, time.Now().Add(time.Minute)); err != nil || !first {
		t.Fatalf("first = %v, err = %v", first, err)
	}
	if !strings.HasPrefix(s.key(id), DefaultPrefix+"{") {
		t.Fatalf("key %q not under the default prefix", s.key(id))
	}
	if n, err := c.Exists(context.Background(), s.key(id)).Result(); err != nil || n != 1 {
		t.Fatalf("key %q not written under the default prefix (exists=%d, err=%v)", s.key(id), n, err)
	}
}

func TestConcurrentClaimsExactlyOneFirst(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	const ids, racers = 20, 16
	for i := range ids {
		id := "race-" + string(rune('a'+i))
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, racers)
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				first, err := s.Claim(ctx, id, until)
				if err != nil {
					errs <- err
					return
				}
				if first {
					wins.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("id %s: %v", id, err)
		}
		if n := wins.Load(); n != 1 {
			t.Fatalf("id %s: %d of %d concurrent claims were first, want exactly 1", id, n, racers)
		}
	}
}

// TestClaimRejectsInvalidClaims needs no Redis: invalid claims never reach
// the client, which here fails the test if called.
func TestClaimRejectsInvalidClaims(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := New(clientFunc(func(context.Context, ...any) *redis.Cmd {
		t.Error("invalid claim reached Redis")
		return redis.NewCmd(context.Background())
	}), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		id    string
		until time.Time
	}{
		{"empty id", "", now.Add(time.Minute)},
		{"oversize id", strings.Repeat("x", MaxIDBytes+1), now.Add(time.Minute)},
		{"until in the past", "id", now.Add(-time.Second)},
		{"until is now", "id", now},
		{"until within the current millisecond", "id", now.Add(-500 * time.Microsecond)},
		{"zero until", "id", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, err := s.Claim(context.Background(), tt.id, tt.until)
			if first || !errors.Is(err, ErrInvalidClaim) {
				t.Fatalf("first = %v, err = %v; want false, ErrInvalidClaim", first, err)
			}
			if tt.id != "" && strings.Contains(err.Error(), tt.id) && len(tt.id) > 2 {
				t.Fatalf("error text echoes the id: %q", err)
			}
		})
	}
}

func TestClaimAcceptsMaxLengthID(t *testing.T) {
	s, _ := newTestStore(t)
	first, err := s.Claim(context.Background(), strings.Repeat("y", MaxIDBytes), time.Now().Add(time.Minute))
	if err != nil || !first {
		t.Fatalf("first = %v, err = %v; want true, nil", first, err)
	}
}

func TestPastUntilLeavesNothingInRedis(t *testing.T) {
	s, c := newTestStore(t)
	first, err := s.Claim(context.Background(), "late", time.Now().Add(-time.Minute))
	if first || !errors.Is(err, ErrInvalidClaim) {
		t.Fatalf("first = %v, err = %v; want false, ErrInvalidClaim", first, err)
	}
	if n, err := c.Exists(context.Background(), s.key("late")).Result(); err != nil || n != 0 {
		t.Fatalf("past claim wrote a key (exists=%d, err=%v)", n, err)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentServer accepts connections and reads from them but never answers,
// like a Redis that has hung.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

func TestClaimFailsClosedWhenRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Claim(context.Background(), "id", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("first = %v, err = %v; want false, ErrUnavailable", first, err)
	}
	if strings.Contains(err.Error(), "\"id\"") {
		t.Fatalf("error text echoes the id: %q", err)
	}
}

func TestClaimFailsClosedWhenRedisSlow(t *testing.T) {
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
		s, err := New(c, Options{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		first, err := s.Claim(context.Background(), "id", time.Now().Add(time.Minute))
		if first || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first = %v, err = %v; want false, ErrUnavailable and DeadlineExceeded", first, err)
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		s, err := New(c, Options{Timeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		first, err := s.Claim(ctx, "id", time.Now().Add(time.Minute))
		if first || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first = %v, err = %v; want false, ErrUnavailable and DeadlineExceeded", first, err)
		}
	})
	t.Run("caller cancelled", func(t *testing.T) {
		s, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		first, err := s.Claim(ctx, "id", time.Now().Add(time.Minute))
		if first || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("first = %v, err = %v; want false, ErrUnavailable and Canceled", first, err)
		}
	})
}

// clientFunc adapts a function to Client, to script Redis replies.
type clientFunc func(ctx context.Context, args ...any) *redis.Cmd

func (f clientFunc) Do(ctx context.Context, args ...any) *redis.Cmd { return f(ctx, args...) }

func TestClaimFailsClosedOnUnexpectedReplies(t *testing.T) {
	tests := []struct {
		name string
		val  any
		err  error
	}{
		{"error reply", nil, errors.New("ERR invalid expire time in 'set' command")},
		{"readonly replica", nil, errors.New("READONLY You can't write against a read only replica.")},
		{"cross slot", nil, redis.ErrCrossSlot},
		{"queued", "QUEUED", nil},
		{"integer", int64(7), nil},
		{"negative integer", int64(-1), nil},
		{"empty string", "", nil},
		{"nil value", nil, nil},
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
			first, err := s.Claim(context.Background(), "id", time.Now().Add(time.Minute))
			if first || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("first = %v, err = %v; want false, ErrUnavailable", first, err)
			}
		})
	}
}

func TestClaimSendsOneGuardedScriptWithAbsoluteExpiry(t *testing.T) {
	until := time.UnixMilli(1_900_000_000_123)
	now := until.Add(-time.Hour)
	var got []any
	s, err := New(answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
		got = args
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetVal([]any{int64(1), int64(0)})
		return cmd
	}), Options{Prefix: "p:", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Claim(context.Background(), "the-id", until)
	if err != nil || !first {
		t.Fatalf("first = %v, err = %v; want true, nil", first, err)
	}
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
	if len(text) != len(want)+1 || fmt.Sprint(text[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("command = %v, want %v and a nonce", text, want)
	}
	if nonce := text[len(want)]; len(nonce) < 18 || !strings.HasPrefix(nonce, s.nonceBase) || !strings.HasPrefix(nonce, "1") {
		t.Fatalf("nonce %v; want \"1\", the store's base and a counter", nonce)
	}
}

// argText is what go-redis writes for a command argument the store sends.
func argText(t *testing.T, a any) string {
	t.Helper()
	switch v := a.(type) {
	case string:
		return v
	case *string:
		return *v
	case int:
		return strconv.Itoa(v)
	case *int64:
		return strconv.FormatInt(*v, 10)
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Fatalf("argument %T: not a type the store sends", a)
	return ""
}

// A claim whose reply is lost and which the client resends (go-redis
// retries by default) is first, not refused as its own replay: the claim's
// nonce identifies its own entry, and EventClaimResent reports it. Other
// claims of the ID stay refused. Real redis-server.
func TestResentClaimFindsItsOwnEntry(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	real := srv.client()
	var ev events
	resend := clientFunc(func(ctx context.Context, args ...any) *redis.Cmd {
		if name, _ := args[0].(string); name == "EVALSHA" || name == "EVAL" {
			real.Do(ctx, args...) // this reply is lost
		}
		return real.Do(ctx, args...)
	})
	s := provisioned(t, real, Options{Prefix: "resend:", Logger: quietLogger()})
	r, err := New(resend, Options{Prefix: "resend:", Logger: quietLogger(), Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	for i := range 10 {
		id := fmt.Sprint("lost-reply-", i)
		if first, err := r.Claim(ctx, id, until); !first || err != nil {
			t.Fatalf("resent claim = %v, %v; want first", first, err)
		}
		for _, st := range []*Store{r, s} {
			if first, err := st.Claim(ctx, id, until); first || err != nil {
				t.Fatalf("replay after a resent claim = %v, %v; want taken", first, err)
			}
		}
	}
	if n := ev.count(EventClaimResent); n != 10 {
		t.Fatalf("%d EventClaimResent; want 10", n)
	}
}

func TestNewRejectsNilClient(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

func TestReleaseMakesNextClaimFirst(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	if first, err := s.Claim(ctx, "retry-me", until); err != nil || !first {
		t.Fatalf("claim: first = %v, err = %v", first, err)
	}
	if err := s.Release(ctx, "retry-me"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if first, err := s.Claim(ctx, "retry-me", until); err != nil || !first {
		t.Fatalf("claim after release: first = %v, err = %v; want true, nil", first, err)
	}
	if err := s.Release(ctx, "never-claimed"); err != nil {
		t.Fatalf("release of an unclaimed id: %v", err)
	}
}

func TestReleaseRejectsInvalidIDs(t *testing.T) {
	s, err := New(clientFunc(func(context.Context, ...any) *redis.Cmd {
		t.Error("invalid release reached Redis")
		return redis.NewCmd(context.Background())
	}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", strings.Repeat("z", MaxIDBytes+1)} {
		if err := s.Release(context.Background(), id); !errors.Is(err, ErrInvalidClaim) {
			t.Fatalf("Release(len %d) = %v, want ErrInvalidClaim", len(id), err)
		}
	}
}

func TestReleaseFailsWhenRedisDownOrOdd(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(context.Background(), "id"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Release with Redis down = %v, want ErrUnavailable", err)
	}
	odd, err := New(answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetVal("OK")
		return cmd
	}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := odd.Release(context.Background(), "id"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Release with a non-integer reply = %v, want ErrUnavailable", err)
	}
}

// With maxmemory-policy noeviction (the setting docs/fleet.md asks for), a
// full Redis refuses writes rather than evicting live claims, and the store
// turns the refusal into ErrUnavailable.
func TestClaimFailsClosedWhenRedisIsFull(t *testing.T) {
	srv := newServer(t, "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	s := provisioned(t, c, Options{})
	if first, err := s.Claim(ctx, "before", time.Now().Add(time.Minute)); err != nil || !first {
		t.Fatalf("claim with room: first = %v, err = %v", first, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	first, err := s.Claim(ctx, "after", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("claim on a full Redis: first = %v, err = %v; want false, ErrUnavailable", first, err)
	}
	if !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("claim on a full Redis failed for another reason: %v", err)
	}
	// The live claim was not evicted to make room.
	if first, err := s.Claim(ctx, "before", time.Now().Add(time.Minute)); first {
		t.Fatalf("replay of a live claim on a full Redis: first = true (err = %v)", err)
	}
}

// The client types the Client documentation names satisfy it.
var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = redis.UniversalClient(nil)
)

// A prefix holding a brace is refused: with braces refused, the first '{'
// of every key ends its prefix, so two stores whose prefixes nest never
// share a key.
func TestPrefixWithBracesIsRefused(t *testing.T) {
	for _, p := range []string{"app{02}:", "app}", "{", "a{b}:", "}{"} {
		t.Run(p, func(t *testing.T) {
			if _, err := New(clientFunc(nil), Options{Prefix: p}); !errors.Is(err, ErrConfig) || Reason(err) == "" {
				t.Fatalf("New(Prefix %q) = %v; want ErrConfig with a reason", p, err)
			}
		})
	}
}

// Two stores whose prefixes nest ("<p>" and "<p>webhooks:") on one real
// redis-server never see each other's claims, releases or fence markers.
func TestNestedPrefixesNeverShareKeys(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	ctx := context.Background()
	outer := provisioned(t, c, Options{Prefix: "app:", Logger: quietLogger()})
	inner, err := New(c, Options{Prefix: "app:webhooks:", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	t.Run("markers", func(t *testing.T) {
		if n, err := inner.ProvisionNew(ctx); err != nil || n != Shards {
			t.Fatalf("inner Provision after outer's = %d, %v; want %d markers of its own", n, err, Shards)
		}
	})
	until := time.Now().Add(time.Minute)
	// IDs chosen so that outer's entry keys look as much as possible like
	// inner's keys.
	ids := []string{"evt_1", "webhooks:evt_1", "webhooks:{02}:evt_1", "{02}:evt_1", "{02}"}
	t.Run("claims", func(t *testing.T) {
		for _, id := range ids {
			for _, s := range []*Store{outer, inner} {
				if first, err := s.Claim(ctx, id, until); !first || err != nil {
					t.Fatalf("%s claim %q = %v, %v; want first", s.Prefix(), id, first, err)
				}
			}
		}
	})
	t.Run("releases", func(t *testing.T) {
		for _, id := range ids {
			if err := outer.Release(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := outer.Release(ctx, "webhooks:"+id); err != nil {
				t.Fatal(err)
			}
			if first, err := inner.Claim(ctx, id, until); first || err != nil {
				t.Fatalf("inner replay of %q after outer's releases = %v, %v; want taken", id, first, err)
			}
		}
	})
	t.Run("fence", func(t *testing.T) {
		// Outer loses its markers (as after a loss of its keys only) and
		// fences itself; inner keeps serving.
		for _, m := range outer.tags {
			c.Del(ctx, m)
		}
		for i := range Shards {
			id := fmt.Sprintf("fence-%d", i)
			if _, err := outer.Claim(ctx, id, until); !errors.Is(err, ErrFenced) {
				t.Fatalf("outer claim after losing its markers = %v; want ErrFenced", err)
			}
			if first, err := inner.Claim(ctx, id, until); !first || err != nil {
				t.Fatalf("inner claim while outer is fenced = %v, %v; want first", first, err)
			}
		}
	})
	t.Run("every key has one owner", func(t *testing.T) {
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k == outer.serversKey() || k == inner.serversKey() || k == outer.ledgerKey() || k == inner.ledgerKey() ||
				k == outer.lifetimeKey() || k == inner.lifetimeKey() {
				continue // each store's metadata, at <prefix> + a lowercase word
			}
			p, _, ok := strings.Cut(k, "{")
			if !ok || (p != outer.Prefix() && p != inner.Prefix()) {
				t.Fatalf("key %q belongs to neither store", k)
			}
		}
	})
}

// TestRequestStateContract: no refusal (caller, tool, arguments, audience)
// consumes a single-use request state held in Redis; the right request
// opens it afterwards exactly once (replaytest.RunRequestStateContract).
func TestRequestStateContract(t *testing.T) {
	replaytest.RunRequestStateContract(t, func(t *testing.T) replay.Store {
		s, _ := newTestStore(t)
		return s
	})
}
