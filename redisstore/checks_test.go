package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// serverFunc answers the server checks with the given replies, keyed by
// command name or, for CONFIG and INFO, by the whole command ("CONFIG GET
// save", "INFO replication");
// what is not there gets the default of answerChecks, and every other
// command a first claim.
func serverFunc(replies map[string]*redis.Cmd) clientFunc {
	return func(ctx context.Context, args ...any) *redis.Cmd {
		name, _ := args[0].(string)
		if name == "CONFIG" || name == "INFO" {
			if c, ok := replies[strings.TrimSpace(fmt.Sprintln(args...))]; ok { // "CONFIG GET save", "INFO replication"
				return c
			}
		}
		if c, ok := replies[name]; ok {
			return c
		}
		return answerChecks(func(ctx context.Context, args ...any) *redis.Cmd {
			cmd := redis.NewCmd(ctx, args...)
			cmd.SetVal([]any{int64(1), int64(0)})
			return cmd
		})(ctx, args...)
	}
}

func reply(v any, err error) *redis.Cmd {
	cmd := redis.NewCmd(context.Background())
	cmd.SetVal(v)
	cmd.SetErr(err)
	return cmd
}

// aof answers appendonly yes with the given appendfsync.
func aof(fsync string) map[string]*redis.Cmd {
	return map[string]*redis.Cmd{
		"CONFIG GET appendonly":  reply([]any{"appendonly", "yes"}, nil),
		"CONFIG GET appendfsync": reply([]any{"appendfsync", fsync}, nil),
	}
}

// TestChecks pins the server checks at Open and at each recheck: what does
// not fit is refused, weakened persistence is refused and fenced, and each
// refusal names its risk and ends with its condition.
func TestChecks(t *testing.T) {
	subtests(t, []subtest{
		{"refuse what does not fit", serverChecksRefuseWhatDoesNotFit},
		{"acked refuses too few acks", ackedRefusesTooFewAcknowledgements},
		{"persistence that can roll back", openRefusesPersistenceThatCanRollBack},
		{"allow options report their risk", allowOptionsReportTheRiskTheyAccept},
		{"persistence weakened after open", persistenceWeakenedAfterOpenIsRefusedAndFenced},
		{"replicas durability does not cover", replicasDurabilityDoesNotCoverAreRefused},
		{"refusal ends with its condition", refusalForAConditionEndsWithIt},
		{"missing marker checks at once", missingMarkerChecksTheServerAtOnce},
		{"idle store checks by itself", idleStoreChecksByItself},
		{"close ends the watch", closeEndsTheWatch},
		{"a dropped store's watch ends", droppedStoresWatchEnds},
		{"a server reset before is warned of", serverResetBeforeIsWarnedOfOnce},
		{"a free ID is refused while the counters moved", freeIDIsRefusedWhileTheCountersMoved},
		{"a lease is confirmed while the counters moved", leaseIsConfirmedWhileTheCountersMoved},
		{"a finding during a check outlives it", findingDuringACheckOutlivesIt},
		{"a Cluster master no check has read refuses", clusterMasterNoCheckHasReadRefuses},
	})
}

// A store no call reaches still runs its checks every RecheckInterval
// (issue 66): evictions, and a CONFIG RESETSTAT after which the server
// ran more commands than before, while it is idle are fenced without a
// call.
func idleStoreChecksByItself(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(f *fakeServer)
	}{
		{"keys evicted", func(f *fakeServer) { f.evicted += 3 }},
		{"CONFIG RESETSTAT, then more commands than before", func(f *fakeServer) { f.resetStat(28); f.commands = 1 << 20 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			closing(t, mustOpen(t, f, Options{Logger: quietLogger(), RecheckInterval: 10 * time.Millisecond}))
			f.set(tt.change)
			waitFor(t, 10*time.Second, "the idle store to fence every shard", func() bool {
				fences, ledger := f.counts()
				return fences == Shards && ledger == 1
			})
		})
	}
}

// Close ends the store's watch, and a closed store runs no more checks.
func closeEndsTheWatch(t *testing.T) {
	f := newFake()
	s := mustOpen(t, f, Options{Logger: quietLogger(), RecheckInterval: 10 * time.Millisecond})
	s.Close()
	waitFor(t, 10*time.Second, "the watch to end", func() bool { return isClosed(s.watched) })
	f.set(func(f *fakeServer) { f.roles = 0 })
	s.lastCheck.Store(0)
	s.Claim(context.Background(), "after-close", time.Now().Add(time.Minute))
	s.cancels.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.roles != 0 {
		t.Fatalf("%d ROLE calls after Close; want no check", f.roles)
	}
}

// isClosed reports whether ch is closed (or holds a value).
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A Store dropped without Close (the test keeps no reference to it) is
// collected, and its watch ends.
func droppedStoresWatchEnds(t *testing.T) {
	watched := mustOpen(t, newFake(), Options{Logger: quietLogger(), RecheckInterval: 10 * time.Millisecond}).watched
	waitFor(t, 10*time.Second, "the watch of a dropped store to end", func() bool {
		runtime.GC()
		return isClosed(watched)
	})
}

// A server whose statistics were reset (cmdstat_config|resetstat in INFO
// commandstats) is one where a later reset may go unseen: the store says
// so in one Warn line, once, and says nothing on a server never reset.
func serverResetBeforeIsWarnedOfOnce(t *testing.T) {
	const line = "CONFIG RESETSTAT has run on this server"
	for _, tt := range []struct {
		name string
		want int // the lines: one on a server reset before
	}{{"reset before", 1}, {"never reset", 0}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.want == 1 {
				f.set(resetBefore)
			}
			var logs syncBuffer
			s := closing(t, mustOpen(t, f, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
			s.checkServer(context.Background())
			if n := strings.Count(logs.String(), line); n != tt.want {
				t.Fatalf("%d lines %q after two checks; want %d:\n%s", n, line, tt.want, logs.String())
			}
		})
	}
}

// waitChecks waits until no server check and no background release runs
// (everything s.cancels.wg counts): the fence and every other write of the
// checks started so far are done. It polls rather than calling
// s.cancels.wg.Wait: the store's watch may start a check (wg.Add from
// zero) at any tick while Wait runs, a misuse the race detector reports.
func waitChecks(t *testing.T, s *Store) {
	t.Helper()
	waitFor(t, 10*time.Second, "the server checks and background releases to end", func() bool {
		return !s.srv.running.Load() && len(s.cancels.sem) == 0
	})
}

// waitFor polls cond until it holds; limit is a failsafe, not a timing.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
	}
}

func serverChecksRefuseWhatDoesNotFit(t *testing.T) {
	noperm := redisError("NOPERM this user has no permissions to run the 'role' command")
	unknown := redisError("ERR unknown command 'CONFIG'")
	now := time.Now()
	rdb := map[string]*redis.Cmd{"CONFIG": reply(nil, unknown), "INFO persistence": reply("# Persistence\r\nrdb_saves:2\r\naof_enabled:0\r\n", nil)}
	aofInfo := map[string]*redis.Cmd{"CONFIG": reply(nil, unknown), "INFO persistence": reply("# Persistence\r\nrdb_saves:0\r\naof_enabled:1\r\n", nil)}
	both := Options{AllowEviction: true, AllowRollback: true}
	tests := []struct {
		name    string
		replies map[string]*redis.Cmd
		opts    Options
		want    error // nil: Open succeeds
	}{
		{"lone primary", nil, Options{}, nil},
		{"replica", map[string]*redis.Cmd{"ROLE": reply([]any{"slave", "127.0.0.1", int64(6379), "connected", int64(1)}, nil)}, Options{}, ErrConfig},
		{"sentinel", map[string]*redis.Cmd{"ROLE": reply([]any{"sentinel", []any{}}, nil)}, Options{}, ErrConfig},
		{"primary with replicas", map[string]*redis.Cmd{"ROLE": reply([]any{"master", int64(10), []any{[]any{"127.0.0.1", "6380", "10"}}}, nil)}, Options{}, ErrConfig},
		{"primary with replicas, async allowed", map[string]*redis.Cmd{"ROLE": reply([]any{"master", int64(10), []any{[]any{"127.0.0.1", "6380", "10"}}}, nil)}, Options{AllowAsyncReplicas: true}, nil},
		{"replica away (backlog, offset)", map[string]*redis.Cmd{"INFO replication": reply("# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:1234\r\nrepl_backlog_active:1\r\n", nil)}, Options{}, ErrConfig},
		{"offset without a backlog (AOF on Redis 7.2, Valkey)", map[string]*redis.Cmd{"INFO replication": reply("role:master\r\nmaster_repl_offset:7\r\nrepl_backlog_active:0\r\n", nil)}, Options{}, nil},
		{"replica away, async allowed", map[string]*redis.Cmd{"INFO replication": reply("role:master\r\nmaster_repl_offset:7\r\nrepl_backlog_active:1\r\n", nil)}, Options{AllowAsyncReplicas: true}, nil},
		{"never had a replica", map[string]*redis.Cmd{"INFO replication": reply("role:master\r\nmaster_repl_offset:0\r\nrepl_backlog_active:0\r\n", nil)}, Options{}, nil},
		// A right refused after the rights check passed (revoked since)
		// is ErrConfig; the next check names the ACL line.
		{"INFO forbidden", map[string]*redis.Cmd{"INFO": reply(nil, noperm)}, both, ErrConfig},
		{"INFO stats without evicted_keys", map[string]*redis.Cmd{"INFO stats": reply("# Stats\r\n", nil)}, both, ErrConfig},
		{"INFO fails", map[string]*redis.Cmd{"INFO": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		{"ROLE forbidden", map[string]*redis.Cmd{"ROLE": reply(nil, noperm)}, Options{}, ErrConfig},
		{"ROLE forbidden, async allowed", map[string]*redis.Cmd{"ROLE": reply(nil, noperm)}, Options{AllowAsyncReplicas: true}, ErrConfig},
		{"ROLE odd", map[string]*redis.Cmd{"ROLE": reply("master", nil)}, Options{}, ErrUnavailable},
		{"ROLE short", map[string]*redis.Cmd{"ROLE": reply([]any{"master"}, nil)}, Options{}, ErrUnavailable},
		{"ROLE fails", map[string]*redis.Cmd{"ROLE": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		// CONFIG renamed away or forbidden (managed services): the policy
		// is the risk AllowEviction accepts; persistence is judged from
		// INFO persistence, and what it cannot tell is the risk
		// AllowRollback accepts.
		{"CONFIG renamed away", map[string]*redis.Cmd{"CONFIG": reply(nil, unknown)}, Options{}, ErrConfig},
		{"CONFIG renamed away, eviction allowed", map[string]*redis.Cmd{"CONFIG": reply(nil, unknown)}, Options{AllowEviction: true}, ErrConfig},
		{"CONFIG renamed away, both allowed", map[string]*redis.Cmd{"CONFIG": reply(nil, unknown)}, both, nil},
		{"CONFIG forbidden, both allowed", map[string]*redis.Cmd{"CONFIG": reply(nil, noperm)}, both, nil},
		{"CONFIG renamed away, RDB saves in INFO", rdb, Options{AllowEviction: true}, ErrConfig},
		{"CONFIG renamed away, RDB saves in INFO, both allowed", rdb, both, nil},
		{"CONFIG renamed away, AOF in INFO", aofInfo, Options{AllowEviction: true}, ErrConfig},
		{"CONFIG renamed away, INFO persistence odd", map[string]*redis.Cmd{"CONFIG": reply(nil, unknown), "INFO persistence": reply("# Persistence\r\n", nil)}, Options{AllowEviction: true}, ErrConfig},
		{"CONFIG odd", map[string]*redis.Cmd{"CONFIG": reply(int64(1), nil)}, Options{}, ErrConfig},
		{"RESP3 map, evicting", map[string]*redis.Cmd{"CONFIG": reply(map[any]any{"maxmemory-policy": "allkeys-lru"}, nil)}, Options{}, ErrConfig},
		{"RESP3 map, noeviction", map[string]*redis.Cmd{"CONFIG": reply(map[any]any{"maxmemory-policy": "noeviction"}, nil)}, Options{AllowRollback: true}, nil},
		{"CONFIG fails", map[string]*redis.Cmd{"CONFIG": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		{"RDB snapshots", map[string]*redis.Cmd{"CONFIG GET save": reply([]any{"save", "3600 1 300 100"}, nil)}, Options{}, ErrConfig},
		{"RDB snapshots, rollback allowed", map[string]*redis.Cmd{"CONFIG GET save": reply([]any{"save", "3600 1"}, nil)}, Options{AllowRollback: true}, nil},
		{"AOF everysec", aof("everysec"), Options{}, ErrConfig},
		{"AOF no fsync", aof("no"), Options{}, ErrConfig},
		{"AOF everysec, rollback allowed", aof("everysec"), Options{AllowRollback: true}, nil},
		{"AOF always", aof("always"), Options{}, nil},
		{"AOF always, RDB snapshots too (AOF is what a restart loads)", map[string]*redis.Cmd{"CONFIG GET appendonly": reply([]any{"appendonly", "yes"}, nil), "CONFIG GET appendfsync": reply([]any{"appendfsync", "always"}, nil), "CONFIG GET save": reply([]any{"save", "3600 1"}, nil)}, Options{}, nil},
		{"appendonly odd", map[string]*redis.Cmd{"CONFIG GET appendonly": reply([]any{"appendonly", "maybe"}, nil)}, Options{}, ErrConfig},
		{"save forbidden", map[string]*redis.Cmd{"CONFIG GET save": reply(nil, noperm)}, Options{}, ErrConfig},
		{"save fails", map[string]*redis.Cmd{"CONFIG GET save": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		{"appendfsync fails", map[string]*redis.Cmd{"CONFIG GET appendonly": reply([]any{"appendonly", "yes"}, nil), "CONFIG GET appendfsync": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		// The rights check (rights.go): its own refusals.
		{"EVAL forbidden", map[string]*redis.Cmd{"EVAL": reply(nil, redisError("NOPERM this user has no permissions to run the 'eval' command"))}, Options{}, ErrConfig},
		{"EVAL renamed away", map[string]*redis.Cmd{"EVAL": reply(nil, redisError("ERR unknown command 'EVAL'"))}, Options{}, ErrConfig},
		{"Redis 6.2 (no redis.acl_check_cmd)", map[string]*redis.Cmd{"EVAL": reply(int64(-1), nil)}, Options{}, ErrConfig},
		{"a right missing", map[string]*redis.Cmd{"EVAL": reply([]any{int64(3)}, nil)}, Options{}, ErrConfig},
		{"a command renamed away", map[string]*redis.Cmd{"EVAL": reply([]any{int64(-3)}, nil)}, Options{}, ErrConfig},
		{"rights check odd", map[string]*redis.Cmd{"EVAL": reply([]any{int64(999)}, nil)}, Options{}, ErrUnavailable},
		{"TIME odd", map[string]*redis.Cmd{"TIME": reply([]any{"x", "y"}, nil)}, Options{}, ErrUnavailable},
		{"TIME short", map[string]*redis.Cmd{"TIME": reply([]any{"1"}, nil)}, Options{}, ErrUnavailable},
		{"TIME fails", map[string]*redis.Cmd{"TIME": reply(nil, errors.New("i/o timeout"))}, Options{}, ErrUnavailable},
		{"Redis two minutes ahead", map[string]*redis.Cmd{"TIME": reply([]any{strconv.FormatInt(now.Add(2*time.Minute).Unix(), 10), "0"}, nil)}, Options{}, ErrClockSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), serverFunc(tt.replies), tt.opts)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("Open: %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("Open = %v; want %v", err, tt.want)
			case errors.Is(tt.want, ErrConfig) && Reason(err) == "":
				t.Fatalf("ErrConfig without a reason: %v", err)
			}
		})
	}
}

// redisError is an error reply of the server, as go-redis returns one.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func ackedRefusesTooFewAcknowledgements(t *testing.T) {
	d := durability{Durability: Durability{Replicas: 2, LocalAOF: true, ReplicaAOF: 1}}
	tests := []struct {
		name          string
		wait, waitAOF *redis.Cmd
		want          error
	}{
		{"enough", reply(int64(2), nil), reply([]any{int64(1), int64(1)}, nil), nil},
		{"too few replicas", reply(int64(1), nil), reply([]any{int64(1), int64(1)}, nil), ErrNotDurable},
		{"no local fsync", reply(int64(2), nil), reply([]any{int64(0), int64(1)}, nil), ErrNotDurable},
		{"too few replica fsyncs", reply(int64(2), nil), reply([]any{int64(1), int64(0)}, nil), ErrNotDurable},
		{"WAIT error", reply(nil, errors.New("ERR")), nil, ErrUnavailable},
		{"WAIT odd", reply("OK", nil), nil, ErrUnavailable},
		{"WAITAOF error", reply(int64(2), nil), reply(nil, errors.New("ERR")), ErrUnavailable},
		{"WAITAOF short", reply(int64(2), nil), reply([]any{int64(1)}, nil), ErrUnavailable},
		{"WAITAOF odd", reply(int64(2), nil), reply([]any{"1", "1"}, nil), ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.acked(tt.wait, tt.waitAOF)
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("acked = %v; want %v", err, tt.want)
			}
		})
	}
}

// A real redis-server whose restart can bring back older data (RDB
// snapshots without AOF, AOF without fsync on every write) is refused at
// Open; one that brings back all of it or none of it is not.
func openRefusesPersistenceThatCanRollBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		opts Options
		want error // nil: Open succeeds
	}{
		{"no persistence", nil, Options{}, nil},
		{"RDB save points", []string{"--save", "3600 1 300 100 60 10000"}, Options{}, ErrConfig},
		{"RDB save points, rollback allowed", []string{"--save", "3600 1"}, Options{AllowRollback: true}, nil},
		{"AOF everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, Options{}, ErrConfig},
		{"AOF no", []string{"--appendonly", "yes", "--appendfsync", "no"}, Options{}, ErrConfig},
		{"AOF always", []string{"--appendonly", "yes", "--appendfsync", "always"}, Options{}, nil},
		{"AOF always and RDB save points", []string{"--appendonly", "yes", "--appendfsync", "always", "--save", "3600 1"}, Options{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, tt.args...)
			tt.opts.Logger = quietLogger()
			if tt.want == nil {
				provisionFirst(t, srv.client(), tt.opts)
			}
			_, err := Open(context.Background(), srv.client(), tt.opts)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("Open: %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("Open = %v; want %v", err, tt.want)
			case tt.want != nil && !strings.Contains(Reason(err), "AllowRollback"):
				t.Fatalf("refusal without the way out: %q", Reason(err))
			}
		})
	}
}

// awaitRecheckRefusal runs the periodic recheck at once (as if
// RecheckInterval had passed) and waits up to 10 s for a claim to be
// refused with ErrConfig, never first, after what changed on the server.
func awaitRecheckRefusal(t *testing.T, s *Store, what string) {
	t.Helper()
	s.lastCheck.Store(0)
	waitFor(t, 10*time.Second, "a claim refused with ErrConfig after "+what, func() bool {
		first, err := s.Claim(context.Background(), "after", time.Now().Add(time.Minute))
		if first && err != nil {
			t.Fatalf("claim after %s = first, %v", what, err)
		}
		return errors.Is(err, ErrConfig)
	})
}

// syncBuffer is a log destination safe for the store's background rechecks.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// recheckNow runs the periodic recheck at once and waits for it to end.
func recheckNow(t *testing.T, s *Store) {
	t.Helper()
	s.lastCheck.Store(0)
	// The claim that starts it is answered as before the recheck.
	if _, err := s.Claim(context.Background(), fmt.Sprintf("recheck-%d", time.Now().UnixNano()), time.Now().Add(time.Minute)); err != nil && !errors.Is(err, ErrConfig) {
		t.Fatalf("claim: %v", err)
	}
	// The recheck runs in the background.
	waitChecks(t, s)
}

// Each Allow* option keeps its check running: on a real redis-server with
// the risk it accepts, Open logs one Warn line naming the option and emits
// one replay.EventRiskAccepted; rechecks do not repeat it while the risk stays,
// and report it again once it comes back after going away.
func allowOptionsReportTheRiskTheyAccept(t *testing.T) {
	t.Parallel()
	tests := []struct {
		option     string
		args       []string
		opts       Options
		replica    bool
		clear, set []string // CONFIG SET that removes, then restores the risk
	}{
		{"AllowRollback", []string{"--save", "3600 1"}, Options{AllowRollback: true}, false, []string{"save", ""}, []string{"save", "3600 1"}},
		{"AllowEviction", []string{"--maxmemory-policy", "allkeys-lru"}, Options{AllowEviction: true}, false, []string{"maxmemory-policy", "noeviction"}, []string{"maxmemory-policy", "allkeys-lru"}},
		{"AllowAsyncReplicas", nil, Options{AllowAsyncReplicas: true}, true, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.option, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, tt.args...)
			if tt.replica {
				newReplica(t, srv)
			}
			var logs syncBuffer
			var ev events
			opts := tt.opts
			opts.Prefix = "allow:"
			opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			opts.Observer = ev.observe
			opts.RecheckInterval = time.Hour // the test runs the rechecks
			provisionFirst(t, srv.client(), opts)
			s := closing(t, mustOpen(t, srv.client(), opts))
			mustProvision(t, s)
			check := func(want int) {
				t.Helper()
				var got []replay.Event
				ev.mu.Lock()
				for _, e := range ev.all {
					if e.Kind == replay.EventRiskAccepted {
						got = append(got, e)
					}
				}
				ev.mu.Unlock()
				if len(got) != want {
					t.Fatalf("%d replay.EventRiskAccepted; want %d", len(got), want)
				}
				for _, e := range got {
					if e.Option != tt.option || e.Risk == "" || e.Shard != -1 {
						t.Fatalf("event %+v; want Option %s with a risk", e, tt.option)
					}
				}
				if n := strings.Count(logs.String(), `"level":"WARN","msg":"redisstore: the server has a risk an Allow* option accepts`); n != want {
					t.Fatalf("%d Warn lines; want %d:\n%s", n, want, logs.String())
				}
				if !strings.Contains(logs.String(), `"option":"`+tt.option+`"`) {
					t.Fatalf("log does not name %s:\n%s", tt.option, logs.String())
				}
			}
			check(1)
			recheckNow(t, s)
			recheckNow(t, s)
			check(1)
			if tt.clear == nil {
				return
			}
			c := srv.client()
			must(t, c.ConfigSet(context.Background(), tt.clear[0], tt.clear[1]).Err())
			recheckNow(t, s)
			check(1)
			must(t, c.ConfigSet(context.Background(), tt.set[0], tt.set[1]).Err())
			recheckNow(t, s)
			check(2)
		})
	}
}

// claimUntilRefused claims fresh IDs until a claim is refused with
// ErrConfig (at most limit), and returns the IDs accepted.
func claimUntilRefused(t *testing.T, s *Store, tag string, limit time.Duration) []string {
	t.Helper()
	var accepted []string
	until := time.Now().Add(10 * time.Minute)
	for i, deadline := 0, time.Now().Add(limit); ; i++ {
		id := fmt.Sprintf("%s-%d", tag, i)
		first, err := s.Claim(context.Background(), id, until)
		switch {
		case errors.Is(err, ErrConfig):
			return accepted
		case errors.Is(err, ErrFenced):
			// A claim that passed the store's checks just before the
			// recheck remembered the drift runs after the recheck wrote
			// the fence: refused all the same.
			return accepted
		case errors.Is(err, ErrNotDurable):
			// The implied WAITAOF (durability.go) refuses each claim
			// once AOF is off, before the recheck does.
		case err != nil:
			t.Fatalf("claim: %v", err)
		case first:
			accepted = append(accepted, id)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ErrConfig within %v of weakening persistence (%d claims accepted)", limit, len(accepted))
		}
	}
}

// Persistence weakened after Open on a real redis-server is refused
// within about RecheckInterval (default 1 s) and fences the key space: a
// new store on the same server refuses every claim, and after AOF was
// switched off at run time and the server restarted with its own
// configuration (loading the AOF), none of the IDs claimed after the
// switch is accepted again.
func persistenceWeakenedAfterOpenIsRefusedAndFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		set     []string
		restart bool
	}{
		{"appendfsync everysec", []string{"appendfsync", "everysec"}, false},
		{"appendonly no, then a restart", []string{"appendonly", "no"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, "--appendonly", "yes", "--appendfsync", "always")
			c := srv.client()
			var ev events
			// Timeout 5 s: Provision against appendfsync always outlasts
			// the default 1 s on a loaded machine.
			s := provisioned(t, c, Options{Prefix: "drift:", Logger: quietLogger(), Observer: ev.observe, Timeout: 5 * time.Second})
			before := claimFresh(t, s, "before", 200)
			start := time.Now()
			must(t, c.ConfigSet(ctx, tt.set[0], tt.set[1]).Err())
			after := claimUntilRefused(t, s, "after", 5*time.Second)
			took := time.Since(start)
			t.Logf("refused %v after CONFIG SET %s %s; %d claims accepted meanwhile", took.Round(time.Millisecond), tt.set[0], tt.set[1], len(after))
			if took > 3*time.Second {
				t.Fatalf("refused only %v after the change; want about RecheckInterval (1 s)", took)
			}
			waitChecks(t, s) // the fence is written by the recheck
			if n := ev.count(replay.EventFenceRaised); n != Shards {
				t.Fatalf("%d replay.EventFenceRaised; want %d", n, Shards)
			}
			if tt.restart {
				waitRewrite(t, c)
				srv.kill()
				must(t, srv.start())
			} else if err := c.ConfigSet(ctx, tt.set[0], "always").Err(); err != nil {
				t.Fatal(err)
			}
			// The fences refuse at Open; a Store from New refuses each call.
			_, err := Open(ctx, srv.client(), Options{Prefix: "drift:", Logger: quietLogger()})
			wantErr(t, err, ErrFenced, "Open after the change was undone")
			s2 := closing(t, mustNew(t, srv.client(), Options{Prefix: "drift:", Logger: quietLogger()}))
			twice := 0
			for _, id := range append(before, after...) {
				first, err := s2.Claim(ctx, id, time.Now().Add(10*time.Minute))
				if first {
					twice++
				}
				if err != nil && !errors.Is(err, ErrFenced) {
					t.Fatalf("replay: %v", err)
				}
			}
			if twice != 0 {
				t.Fatalf("%d of %d IDs accepted twice", twice, len(before)+len(after))
			}
			_, err = s2.Claim(ctx, "new-after-fence", time.Now().Add(time.Minute))
			wantErr(t, err, ErrFenced, "claim of a new ID after the drift")
		})
	}
}

// claimFresh claims n fresh IDs, all of which must be first.
func claimFresh(t *testing.T, s *Store, tag string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", tag, i)
		wantClaim(t, s, ids[i], time.Now().Add(10*time.Minute), true)
	}
	return ids
}

// waitRewrite waits up to 10 s for the AOF rewrite the fence asked for.
func waitRewrite(t *testing.T, c *redis.Client) {
	t.Helper()
	waitFor(t, 10*time.Second, "the AOF rewrite to finish", func() bool {
		info, err := c.Info(context.Background(), "persistence").Result()
		return err == nil && strings.Contains(info, "aof_rewrites:1") && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			!strings.Contains(info, "aof_rewrite_scheduled:1")
	})
}

// Durability must cover every replica the primary has, including one
// whose link is down, on real redis-servers: two replicas and Replicas: 1
// are refused unless AllowFewerReplicas (which reports the risk);
// Replicas: 2 opens, and while one replica is cut every claim is refused
// (ErrNotDurable), so promoting that replica accepts no ID twice; a store
// without Durability opened while the only replica is away is refused.
func replicasDurabilityDoesNotCoverAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("two replicas", func(t *testing.T) {
		t.Parallel()
		primary := newServer(t)
		newReplica(t, primary)
		b := newServer(t, "--replicaof", "127.0.0.1", primary.port)
		waitReplicas(t, primary, 2)
		c := primary.client()
		_, err := Open(ctx, c, Options{Prefix: "two:", Logger: quietLogger(), Durability: Durability{Replicas: 1}})
		if !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "AllowFewerReplicas") {
			t.Fatalf("Open with Replicas: 1 of 2 = %v; want ErrConfig naming AllowFewerReplicas", err)
		}
		var ev events
		provisionFirst(t, c, Options{Prefix: "two:", Durability: Durability{Replicas: 1}, AllowFewerReplicas: true})
		s := mustOpen(t, c, Options{Prefix: "two:", Logger: quietLogger(), Observer: ev.observe, Durability: Durability{Replicas: 1}, AllowFewerReplicas: true})
		s.Close()
		if ev.count(replay.EventRiskAccepted) != 1 || ev.all[0].Option != "AllowFewerReplicas" {
			t.Fatalf("events %+v; want one replay.EventRiskAccepted for AllowFewerReplicas", ev.all)
		}
		// Claims acknowledged by both replicas (a WAIT of 10 s, which a
		// loaded machine's replica answers within), then B is cut: every
		// claim is refused, none reported first (a WAIT of 50 ms).
		durable := func(wait time.Duration) Options {
			return Options{Prefix: "two:", Logger: quietLogger(), Timeout: 30 * time.Second, Durability: Durability{Replicas: 2, Timeout: wait}}
		}
		s2 := provisioned(t, c, durable(10*time.Second))
		cut := closing(t, mustOpen(t, c, durable(50*time.Millisecond)))
		accepted := claimFresh(t, s2, "acked", 20)
		b.signal(syscall.SIGSTOP)
		for i := range 20 {
			wantRefused(t, cut, fmt.Sprint("cut-", i), time.Now().Add(time.Minute), ErrNotDurable)
		}
		// Promote B (the replica that was cut): every ID reported first is
		// refused there.
		b.signal(syscall.SIGCONT)
		primary.kill()
		must(t, b.client().Do(ctx, "REPLICAOF", "NO", "ONE").Err())
		s3 := closing(t, mustOpen(t, b.client(), Options{Prefix: "two:", Logger: quietLogger(), AllowAsyncReplicas: true}))
		for _, id := range accepted {
			wantClaim(t, s3, id, time.Now().Add(time.Minute), false)
		}
	})
	t.Run("replica away", func(t *testing.T) {
		t.Parallel()
		primary := newServer(t)
		r := newReplica(t, primary)
		r.kill()
		c := primary.client()
		waitFor(t, 5*time.Second, "the primary to stop reporting its killed replica", func() bool {
			v, err := c.Do(ctx, "ROLE").Result()
			must(t, err)
			_, n, ok := parseRole(v)
			if !ok {
				t.Fatalf("ROLE %v", v)
			}
			return n == 0
		})
		_, err := Open(ctx, c, Options{Prefix: "away:", Logger: quietLogger()})
		if !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "AllowAsyncReplicas") {
			t.Fatalf("Open without Durability while the replica is away = %v; want ErrConfig", err)
		}
		provisionFirst(t, c, Options{Prefix: "away:", Durability: Durability{Replicas: 1, Timeout: 50 * time.Millisecond}})
		mustOpen(t, c, Options{Prefix: "away:", Logger: quietLogger(), Durability: Durability{Replicas: 1, Timeout: 50 * time.Millisecond}})
	})
	t.Run("replica attached after Open", func(t *testing.T) {
		t.Parallel()
		primary := newServer(t)
		newReplica(t, primary)
		s := provisioned(t, primary.client(), Options{Prefix: "later2:", Logger: quietLogger(), Durability: Durability{Replicas: 1, Timeout: 50 * time.Millisecond}})
		newServer(t, "--replicaof", "127.0.0.1", primary.port)
		waitReplicas(t, primary, 2)
		awaitRecheckRefusal(t, s, "a second replica attached")
	})
}

// lossNoted reports whether the key space's ledger holds a loss entry.
func lossNoted(t *testing.T, s *Store) bool {
	t.Helper()
	l := mustLedger(t, s)
	for _, e := range l {
		if e.Kind == ledgerLoss {
			return true
		}
	}
	return false
}

// A server that stops fitting the Options after Open (an eviction policy
// without maxmemory, RDB snapshots, a replica Durability does not cover)
// is refused only while it does not fit, on a real redis-server: once
// the setting is undone the same Store serves again, and nothing is
// fenced (it lost nothing).
func refusalForAConditionEndsWithIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name      string
		set, undo [2]string
	}{
		{"eviction policy without maxmemory", [2]string{"maxmemory-policy", "allkeys-lru"}, [2]string{"maxmemory-policy", "noeviction"}},
		{"RDB snapshots", [2]string{"save", "60 1"}, [2]string{"save", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newServer(t).client()
			var ev events
			s := provisioned(t, c, Options{Prefix: "cond:", Logger: quietLogger(), Observer: ev.observe, RecheckInterval: time.Hour})
			must(t, c.ConfigSet(ctx, tt.set[0], tt.set[1]).Err())
			recheckNow(t, s)
			for i := range 3 {
				wantRefused(t, s, fmt.Sprint("while-", i), time.Now().Add(time.Minute), ErrConfig)
			}
			must(t, c.ConfigSet(ctx, tt.undo[0], tt.undo[1]).Err())
			recheckNow(t, s)
			wantClaim(t, s, "after", time.Now().Add(time.Minute), true)
			if n := ev.count(replay.EventFenceRaised); n != 0 {
				t.Fatalf("%d shards fenced for a condition", n)
			}
		})
	}
}

// A claim that finds its shard's marker missing has the store check the
// server at once, not after RecheckInterval: after a FLUSHALL the whole
// key space is fenced and the loss noted by the next call, on a real
// redis-server (RecheckInterval one hour).
func missingMarkerChecksTheServerAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newServer(t).client()
	var ev events
	s := provisioned(t, c, Options{Prefix: "soon:", Logger: quietLogger(), Observer: ev.observe, RecheckInterval: time.Hour})
	wantClaim(t, s, "before", time.Now().Add(time.Minute), true)
	must(t, c.FlushAll(ctx).Err())
	wantRefused(t, s, "before", time.Now().Add(time.Minute), ErrFenced)
	s.Claim(ctx, "before", time.Now().Add(time.Minute)) // starts the check (its shard is fenced already)
	waitChecks(t, s)
	if n := ev.count(replay.EventFenceRaised); n != 1+Shards {
		t.Fatalf("%d replay.EventFenceRaised; want the claim's and one per shard (%d)", n, 1+Shards)
	}
	if !lossNoted(t, s) {
		t.Fatal("no loss entry in the ledger")
	}
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// A step that can take a free ID (a claim, a lease or record acquisition)
// whose script finds the server's loss counters moved since the store's
// last check (keys evicted while the store was idle, with the policy
// switched back to noeviction or still evicting; CONFIG RESETSTAT) is
// refused with whyCountersMoved, whatever the ID, until that check has
// run: it fences the key space, after which the fences refuse (or, while
// the policy still evicts, the check's ErrConfig). Real redis-server; no
// check runs between the change and the step (RecheckInterval one hour).
func freeIDIsRefusedWhileTheCountersMoved(t *testing.T) {
	steps := []struct {
		name string
		step func(s *Store, id string) error
	}{
		{"claim", func(s *Store, id string) error {
			first, err := s.Claim(context.Background(), id, time.Now().Add(time.Minute))
			if first {
				return errors.New("answered first")
			}
			return err
		}},
		{"lease acquisition", func(s *Store, id string) error {
			_, err := s.AcquireLease(context.Background(), id, time.Minute)
			return err
		}},
		{"record acquisition", func(s *Store, id string) error {
			_, err := s.AcquireRecord(context.Background(), id, time.Minute, []byte("fp"))
			return err
		}},
	}
	changes := []struct {
		name   string
		change func(t *testing.T, c *redis.Client)
		after  error // what a step is refused with once the check ran
	}{
		{"keys evicted while idle", func(t *testing.T, c *redis.Client) { evictKeys(t, c, true) }, ErrFenced},
		{"keys evicted, the policy still evicting", func(t *testing.T, c *redis.Client) { evictKeys(t, c, false) }, ErrConfig},
		{"CONFIG RESETSTAT", func(t *testing.T, c *redis.Client) {
			must(t, c.ConfigResetStat(context.Background()).Err())
		}, ErrFenced},
	}
	for _, ch := range changes {
		for _, st := range steps {
			t.Run(ch.name+", "+st.name, func(t *testing.T) {
				t.Parallel()
				c := newServer(t).client()
				s := provisioned(t, c, Options{Logger: quietLogger(), RecheckInterval: time.Hour})
				old := claimFresh(t, s, "old", 200)
				ch.change(t, c)
				err := st.step(s, "new-id")
				if Reason(err) != whyCountersMoved || !errors.Is(err, ErrUnavailable) {
					t.Fatalf("%s after the change = %v; want ErrUnavailable with Reason %q", st.name, err, whyCountersMoved)
				}
				// The refusal asked for a check: the next call starts it,
				// whatever that call is answered.
				st.step(s, "starts-the-check")
				waitChecks(t, s)
				for _, id := range []string{"new-id", old[0]} {
					wantErr(t, st.step(s, id), ch.after, st.name+" of "+id+" after the check")
				}
				if ch.after == ErrConfig && !lossNoted(t, s) {
					t.Fatal("the check fenced nothing; want the evictions fenced")
				}
			})
		}
	}
}

// A step on the caller's own lease (a renewal, a confirmation) is not
// held by a script's finding that the loss counters moved, which concerns
// only the steps that can take a free ID: after Redis restarts with
// everything it acknowledged (AOF, appendfsync always, SIGKILL), an
// acquisition is refused with whyCountersMoved (its counters are the old
// server's) until a check has read the new server, while the lease taken
// before the restart is renewed and confirmed at once. Held with the
// acquisitions, it stayed unconfirmed until that check, which under load
// outlasted a webhook delivery's lease: the delivery was processed again.
// Real redis-server; no check runs by the clock (RecheckInterval one
// hour): only the one the refusal asks for.
func leaseIsConfirmedWhileTheCountersMoved(t *testing.T) {
	srv := newServer(t, "--appendonly", "yes", "--appendfsync", "always")
	s := provisioned(t, srv.client(), Options{Logger: quietLogger(), RecheckInterval: time.Hour})
	ctx := context.Background()
	l := acquireLease(t, s, "processed", time.Minute, replay.LeaseAcquired)
	// A check after some traffic: its baseline counts more commands than
	// the restarted server will have run.
	claimFresh(t, s, "id", 100)
	s.checkSoon()
	wantClaim(t, s, "starts-the-check", time.Now().Add(time.Minute), true)
	waitChecks(t, s)

	srv.restart(syscall.SIGKILL)
	// The first calls may meet the connections the kill broke.
	waitFor(t, 10*time.Second, "AcquireLease after the restart to be refused with whyCountersMoved", func() bool {
		_, err := s.AcquireLease(ctx, "free", time.Minute)
		if err == nil {
			t.Fatalf("AcquireLease after the restart = nil; want it refused with Reason %q", whyCountersMoved)
		}
		return Reason(err) == whyCountersMoved
	})
	wantErr(t, s.RenewLease(ctx, "processed", l.Token, time.Minute), nil, "RenewLease of the lease taken before the restart")
	wantErr(t, s.ConfirmLease(ctx, "processed", l.Token, time.Now().Add(time.Minute)), nil, "ConfirmLease of the lease taken before the restart")
	// The check the refusal asked for finds nothing lost: every step is
	// served again, and the confirmation held.
	waitChecks(t, s)
	acquireLease(t, s, "processed", time.Minute, replay.LeaseDone)
	acquireLease(t, s, "free", time.Minute, replay.LeaseAcquired)
}

// A script can find the counters moved after a running check read them,
// whether or not an earlier finding holds: that check read older counters
// than the finding, so it must not lift the refusal; the check the
// finding starts does.
func findingDuringACheckOutlivesIt(t *testing.T) {
	c := newServer(t).client()
	var s *Store
	var infos atomic.Int32 // INFO stats read since armed; -1: not armed
	infos.Store(-1)
	var during atomic.Pointer[error] // held() as the next check read the counters
	c.AddHook(cmdHook{after: func(cmd redis.Cmder) {
		n := infos.Load()
		if n < 0 || !strings.EqualFold(strings.TrimSpace(fmt.Sprintln(cmd.Args()...)), "INFO stats") || !infos.CompareAndSwap(n, n+1) {
			return
		}
		switch n + 1 {
		case 1:
			s.holdForCheck(refuse(ErrUnavailable, whyCountersMoved, nil))
		case 2:
			err := s.held()
			during.Store(&err)
		}
	}})
	s = provisioned(t, c, Options{Logger: quietLogger(), RecheckInterval: time.Hour})
	waitChecks(t, s)
	for _, tc := range []struct {
		name  string
		start func()
	}{
		{"no finding before", s.recheck},
		{"a finding before", func() { s.holdForCheck(refuse(ErrUnavailable, whyCountersMoved, nil)) }},
	} {
		during.Store(nil)
		infos.Store(0)
		tc.start()
		waitChecks(t, s)
		var got error = errors.New("no check ran after it")
		if p := during.Load(); p != nil {
			got = *p
		}
		if Reason(got) != whyCountersMoved {
			t.Fatalf("%s: as the check after the one the finding came during read the counters, held = %v; want Reason %q", tc.name, got, whyCountersMoved)
		}
		wantErr(t, s.held(), nil, tc.name+": held after the check the finding started")
		wantClaim(t, s, "after-"+tc.name, time.Now().Add(time.Minute), true)
	}
}

// evictKeys makes c's server evict keys with a lifetime while no store
// calls it (volatile-lru, maxmemory under what it uses, another
// application's write), then, with revert, switches the policy back to
// noeviction; without, the policy stays and maxmemory becomes 1 GiB
// (nothing more is evicted).
func evictKeys(t *testing.T, c *redis.Client, revert bool) {
	t.Helper()
	ctx := context.Background()
	used := infoInt(t, c, "memory", "used_memory")
	for _, kv := range [][2]string{{"maxmemory-policy", "volatile-lru"}, {"maxmemory", strconv.FormatInt(used-4096, 10)}} {
		must(t, c.ConfigSet(ctx, kv[0], kv[1]).Err())
	}
	c.Set(ctx, "other-application", strings.Repeat("x", 8192), 0) // may be refused (OOM) once nothing is left to evict
	after := [][2]string{{"maxmemory", "1073741824"}}
	if revert {
		after = [][2]string{{"maxmemory", "0"}, {"maxmemory-policy", "noeviction"}}
	}
	for _, kv := range after {
		must(t, c.ConfigSet(ctx, kv[0], kv[1]).Err())
	}
	if infoInt(t, c, "stats", "evicted_keys") == 0 {
		t.Fatal("nothing was evicted: the test did not test eviction")
	}
}

// On a Cluster, a step that can take a free ID on a master no check has
// read yet (a failover, a new node: the script has no counters to compare
// there) is refused with whyCountersMoved until a check has read it; the
// check then takes its counters and the step is answered. The Cluster is
// two lone redis-servers behind a ClusterClient whose slots all move from
// the first to the second (ClusterSlots), each holding the key space.
func clusterMasterNoCheckHasReadRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvA, srvB := newServer(t), newServer(t)
	opts := Options{Prefix: "unread:", Logger: quietLogger(), RecheckInterval: time.Hour}
	provisioned(t, srvB.client(), opts) // the second master holds the key space too
	var at atomic.Pointer[string]
	a, b := srvA.addr(), srvB.addr()
	at.Store(&a)
	c := redis.NewClusterClient(&redis.ClusterOptions{MaxRetries: -1, ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: *at.Load()}}}}, nil
	}})
	t.Cleanup(func() { c.Close() })
	s := provisioned(t, c, opts)
	until := func() time.Time { return time.Now().Add(time.Minute) }
	wantClaim(t, s, "before", until(), true)
	at.Store(&b)
	c.ReloadState(ctx)
	marker, _, _ := s.keys("moved")
	waitFor(t, 10*time.Second, "the client to route to the new master", func() bool {
		m, err := c.MasterForKey(ctx, marker)
		// go-redis names a loopback node by its port alone.
		return err == nil && strings.HasSuffix(m.Options().Addr, ":"+srvB.port)
	})
	if first, err := s.Claim(ctx, "moved", until()); first || Reason(err) != whyCountersMoved || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("claim on a master no check has read = %v, %v; want ErrUnavailable with Reason %q", first, err, whyCountersMoved)
	}
	s.Claim(ctx, "starts-the-check", until())
	waitChecks(t, s)
	wantClaim(t, s, "moved", until(), true)
}
