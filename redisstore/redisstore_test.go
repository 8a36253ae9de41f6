package redisstore

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
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
	p := "ctoken-test:" + newToken()[:16] + ":"
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

// quietLogger drops the store's log lines (the tests count refusals
// through the errors themselves).
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// provisioned returns a Store on c with opts whose key space is provisioned
// (a new prefix, or one provisioned before), closed when the test ends.
func provisioned(t testing.TB, c Client, opts Options) *Store {
	t.Helper()
	s := closing(t, mustNew(t, c, opts))
	mustProvision(t, s)
	return s
}

// mustProvision is ProvisionNew, failing t when it refuses.
func mustProvision(t testing.TB, s *Store) {
	t.Helper()
	if _, err := s.ProvisionNew(context.Background()); err != nil {
		t.Fatalf("Provision: %v", err)
	}
}

// mustStatus is Status, failing t on an error.
func mustStatus(t testing.TB, s *Store) Status {
	t.Helper()
	st, err := s.Status(context.Background())
	must(t, err)
	return st
}

// mustLedger is s's ledger, failing t on an error.
func mustLedger(t testing.TB, s *Store) []LedgerEntry {
	t.Helper()
	l, err := s.readLedger(context.Background())
	must(t, err)
	return l
}

// must fails t when err is not nil.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustNew is New, failing t when it refuses.
func mustNew(t testing.TB, c Client, opts Options) *Store {
	t.Helper()
	s, err := New(c, opts)
	must(t, err)
	return s
}

// closing returns s, closed when the test ends.
func closing(t testing.TB, s *Store) *Store {
	t.Cleanup(func() { s.Close() })
	return s
}

// spawn runs f in a goroutine that wg waits for (sync.WaitGroup.Go, which
// the module's go 1.24 does not have).
func spawn(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}

// mustOpen is Open, failing t when it refuses.
func mustOpen(t testing.TB, c Client, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), c, opts)
	must(t, err)
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
	var bumps atomic.Int64 // the reset witness (readWitness): counted as a server counts it
	var code atomic.Pointer[string]
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
			case "persistence": // read where CONFIG GET cannot be
				cmd.SetVal("# Persistence\r\nrdb_saves:0\r\naof_enabled:0\r\n")
			case "errorstats":
				if info {
					return f(ctx, args...)
				}
				if c := code.Load(); c != nil {
					cmd.SetVal(fmt.Sprintf("# Errorstats\r\nerrorstat_%s:count=%d\r\n", *c, bumps.Load()))
				} else {
					cmd.SetVal("# Errorstats\r\n")
				}
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
		case "EVAL": // the lifetime record (lifetime.go): recorded as asked; every right there; the reset witness's bump
			switch src, _ := args[1].(string); src {
			case lifetimeScript:
				want, _ := args[4].(int64)
				cmd.SetVal(want)
			case rightsScript:
				cmd.SetVal([]any{})
			case witnessScript:
				msg, _ := args[3].(string)
				c := strings.Fields(msg)[0]
				code.Store(&c)
				bumps.Add(1)
				cmd.SetErr(replyError(msg))
			default:
				return f(ctx, args...)
			}
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

// subtest is one named case of a Test function's table.
type subtest struct {
	name string
	test func(*testing.T)
}

// subtests runs each case as a subtest of t.
func subtests(t *testing.T, tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, tc.test)
	}
}

// isMarkerKey reports whether key is a shard marker, <prefix>{NN}.
func isMarkerKey(key string) bool {
	n := len(key)
	return n >= 4 && key[n-4] == '{' && key[n-1] == '}' && key[n-3] >= '0' && key[n-3] <= '9' && key[n-2] >= '0' && key[n-2] <= '9'
}

// TestPrefix pins the key prefix: stores under different prefixes never
// share a key.
func TestPrefix(t *testing.T) {
	subtests(t, []subtest{
		{"zero options use the default", zeroOptionsUseDefaultPrefix},
		{"nested prefixes never share keys", nestedPrefixesNeverShareKeys},
	})
}

func zeroOptionsUseDefaultPrefix(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{})
	if s.Prefix() != DefaultPrefix {
		t.Fatalf("Prefix() = %q, want %q", s.Prefix(), DefaultPrefix)
	}
	id := "zero-options-" + newToken()[:16]
	t.Cleanup(func() { c.Del(context.Background(), s.key(id)) })
	wantClaim(t, s, id, time.Now().Add(time.Minute), true)
	if !strings.HasPrefix(s.key(id), DefaultPrefix+"{") {
		t.Fatalf("key %q not under the default prefix", s.key(id))
	}
	if n, err := c.Exists(context.Background(), s.key(id)).Result(); err != nil || n != 1 {
		t.Fatalf("key %q not written under the default prefix (exists=%d, err=%v)", s.key(id), n, err)
	}
}

// closedAddr returns a loopback address where every connection is dropped
// at once, like a server that is down. The port stays held until the test
// ends, so a server another test starts in parallel cannot take it.
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// freePort returns a loopback port nothing listened on a moment ago, for a
// server to start on, below the ephemeral range so that a restart on it
// does not find it taken by a client's connection (belowEphemeral); the
// caller retries when another process took it first.
func freePort(t testing.TB) string {
	t.Helper()
	p, err := belowEphemeral()
	must(t, err)
	return p
}

// silentServer accepts connections and reads from them but never answers,
// like a Redis that has hung.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
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

// clientFunc adapts a function to Client, to script Redis replies.
type clientFunc func(ctx context.Context, args ...any) *redis.Cmd

func (f clientFunc) Do(ctx context.Context, args ...any) *redis.Cmd { return f(ctx, args...) }

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
		must(t, err)
		return string(b)
	}
	t.Fatalf("argument %T: not a type the store sends", a)
	return ""
}

// TestNew pins [New]: a nil client and invalid options are refused at
// construction.
func TestNew(t *testing.T) {
	subtests(t, []subtest{
		{"names every fault at once", newNamesEveryFaultAtOnce},
	})
}

// newNamesEveryFaultAtOnce: invalid Options are refused with one
// ErrConfig whose Reason names each fault with its fix (the user who
// fixes Horizon does not meet MaxSkew next). A prefix holding a brace is
// among them: with braces refused, the first '{' of every key ends its
// prefix, so two stores whose prefixes nest never share a key.
func newNamesEveryFaultAtOnce(t *testing.T) {
	ok := clientFunc(func(ctx context.Context, args ...any) *redis.Cmd { return redis.NewCmd(ctx, args...) })
	for _, tc := range []struct {
		name   string
		client Client
		opts   Options
		names  []string
	}{
		{"nil client and a brace in Prefix", nil, Options{Prefix: "app{"},
			[]string{"2 configuration faults", "nil client (pass a *redis.Client", "Prefix holds '{' or '}': it could share keys with another prefix (choose a Prefix"}},
		{"every duration", ok, Options{Horizon: -1, MaxSkew: -1, RecheckInterval: -1},
			[]string{"3 configuration faults", "negative Horizon (set 0", "negative MaxSkew (set 0", "negative RecheckInterval (set 0"}},
		{"bounds and durability", ok, Options{Horizon: time.Microsecond, MaxSkew: replay.SkewMargin + time.Second,
			Durability: Durability{Replicas: -1, Timeout: -1}},
			[]string{"4 configuration faults", "Horizon under a millisecond (set", "MaxSkew over replay.SkewMargin", "negative Durability replica count (set", "negative Durability.Timeout (set"}},
		{"durability on a client without one connection", ok, Options{Timeout: time.Second, Durability: Durability{LocalAOF: true, Timeout: time.Second}},
			[]string{"2 configuration faults", "Durability needs a *redis.Client", "Durability.Timeout not shorter than Options.Timeout (lower"}},
		{"durability timeout alone, with a brace", ok, Options{Prefix: "}", Durability: Durability{Timeout: time.Second}},
			[]string{"2 configuration faults", "Prefix holds", "Durability.Timeout without anything to wait for (set"}},
		{"RecheckInterval under a millisecond", ok, Options{RecheckInterval: time.Microsecond}, []string{"RecheckInterval under a millisecond"}},
		{"negative replica AOF", ok, Options{Durability: Durability{ReplicaAOF: -1}}, []string{"negative Durability replica count"}},
		{"durability timeout under a millisecond", ok, Options{Durability: Durability{Replicas: 1, Timeout: time.Microsecond}}, []string{"Durability.Timeout under a millisecond"}},
		{"a replica to wait for on a client without one connection", ok, Options{Durability: Durability{Replicas: 1}}, []string{"Durability needs a *redis.Client"}},
		{"Prefix app{02}:", ok, Options{Prefix: "app{02}:"}, []string{"Prefix holds '{' or '}'"}},
		{"Prefix app}", ok, Options{Prefix: "app}"}, []string{"Prefix holds '{' or '}'"}},
		{"Prefix {", ok, Options{Prefix: "{"}, []string{"Prefix holds '{' or '}'"}},
		{"Prefix a{b}:", ok, Options{Prefix: "a{b}:"}, []string{"Prefix holds '{' or '}'"}},
		{"Prefix }{", ok, Options{Prefix: "}{"}, []string{"Prefix holds '{' or '}'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.client, tc.opts)
			if s != nil || !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, %v; want ErrConfig", s, err)
			}
			for _, name := range tc.names {
				if !strings.Contains(Reason(err), name) || !strings.Contains(err.Error(), name) {
					t.Errorf("error %q (Reason %q) does not name %q", err, Reason(err), name)
				}
			}
		})
	}
}

// The client types the Client documentation names satisfy it.
var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = redis.UniversalClient(nil)
)

// Two stores whose prefixes nest ("<p>" and "<p>webhooks:") on one real
// redis-server never see each other's claims, releases or fence markers.
func nestedPrefixesNeverShareKeys(t *testing.T) {
	t.Parallel()
	c := newServer(t).client()
	ctx := context.Background()
	outer := provisioned(t, c, Options{Prefix: "app:", Logger: quietLogger()})
	inner := closing(t, mustNew(t, c, Options{Prefix: "app:webhooks:", Logger: quietLogger()}))
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
				wantClaim(t, s, id, until, true)
			}
		}
	})
	t.Run("releases", func(t *testing.T) {
		for _, id := range ids {
			must(t, outer.Release(ctx, id))
			must(t, outer.Release(ctx, "webhooks:"+id))
			wantClaim(t, inner, id, until, false)
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
			_, err := outer.Claim(ctx, id, until)
			wantErr(t, err, ErrFenced, "outer claim after losing its markers")
			wantClaim(t, inner, id, until, true)
		}
	})
	t.Run("every key has one owner", func(t *testing.T) {
		keys, err := c.Keys(ctx, "*").Result()
		must(t, err)
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

// belowEphemeral returns a loopback TCP port nothing listened on a moment
// ago, below the kernel's ephemeral range by more than 10000, so that the
// port and a Redis Cluster bus at port+10000 both lie outside it: a server
// restarted on its port cannot find it taken by the ephemeral port of an
// outgoing connection (the tests' clients open hundreds). Another process
// may still take the port before the server binds it; the caller retries a
// start that fails. (pgstore's and redisstore's tests each keep a copy:
// nested modules import no internal package of the root module.)
// CTOKEN_PORT_CLASS narrows the ports to one class ([portClass]).
func belowEphemeral() (string, error) {
	top := ephemeralLow() - 10000 // a Cluster bus listens at port+10000
	const bottom = 10000
	if top-bottom < 1000 {
		return "", errors.New("the ephemeral port range leaves no room below it")
	}
	class, of, err := portClass()
	if err != nil {
		return "", err
	}
	for range 100 {
		n := bottom + mathrand.IntN(top-bottom-of)
		n += class - n%of
		p := strconv.Itoa(n)
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return "", errors.New("no free port found in 100 tries")
}

// portClass reads CTOKEN_PORT_CLASS, "k/n": the ports belowEphemeral
// returns are then those whose remainder by n is k, so that suites run
// side by side (.ci/run: redisstore's on Redis and on Valkey beside
// pgstore's; .ci/fleet.sh's failures on Redis and on Valkey) never pick,
// or restart a server on, a port of another's. n divides 10000, so that
// a Cluster bus at port+10000 is of its port's class. Unset: 0/1, every
// port.
func portClass() (class, of int, err error) {
	v := os.Getenv("CTOKEN_PORT_CLASS")
	if v == "" {
		return 0, 1, nil
	}
	k, n, ok := strings.Cut(v, "/")
	class, err1 := strconv.Atoi(k)
	of, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || of < 1 || 10000%of != 0 || class < 0 || class >= of {
		return 0, 0, fmt.Errorf("CTOKEN_PORT_CLASS=%q: want k/n, n dividing 10000 and 0 <= k < n", v)
	}
	return class, of, nil
}

// ephemeralLow is the first port of Linux's ephemeral range, or its
// default where the range cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
