package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/redis/go-redis/v9"
)

func TestDurabilityContract(t *testing.T) {
	t.Parallel()
	primary := newServer(t)
	replica := newReplica(t, primary)
	c := primary.client()
	var ev events
	provisionFirst(t, c, Options{Prefix: "durable:", Durability: Durability{Replicas: 1, Timeout: 100 * time.Millisecond}})
	s := closing(t, mustOpen(t, c, Options{Prefix: "durable:", Timeout: time.Second, Observer: ev.observe,
		Durability: Durability{Replicas: 1, Timeout: 100 * time.Millisecond}}))
	mustProvision(t, s)
	replaytest.RunDurabilityContract(t, s,
		func(t *testing.T) { replica.signal(syscall.SIGSTOP) },
		func(t *testing.T) { replica.signal(syscall.SIGCONT); waitReplicas(t, primary, 1) })
	if ev.count(replay.EventNotDurable) == 0 {
		t.Fatal("no not_durable event")
	}
}

// TestDurability pins the durability contract: a step is answered only once
// its write is on the replicas or the AOF the store was opened with.
func TestDurability(t *testing.T) {
	subtests(t, []subtest{
		{"steps with a stopped replica", stepsWithAStoppedReplicaAreNotDurable},
		{"resent acquire writes its lease again", resentAcquireWritesItsLeaseAgain},
		{"WAITAOF, replica stops fsyncing", wAITAOFClaimsOnceAndRefusesAReplicaThatStopsFsyncing},
		{"AOF switched off at run time", aOFSwitchedOffAtRunTimeIsRefusedBeforeTheRecheck},
		{"AOF probe failing after a fresh read", aOFProbeFailingAfterAFreshReadKeepsTheWait},
	})
}

// With Durability, every step that writes is answered only once the
// replicas acknowledged it: with the replica stopped, a claim, an
// acquisition, a renewal and both record steps fail with ErrNotDurable
// (the write may or may not hold after a failover), each with an event; a
// step that finds nothing of its own wrote nothing and is answered as
// usual. Once the replica is back, their retries are applied once.
func stepsWithAStoppedReplicaAreNotDurable(t *testing.T) {
	t.Parallel()
	primary := newServer(t)
	replica := newReplica(t, primary)
	var ev events
	// A timeout of 1 s: the first writes' WAIT must not run out on a
	// loaded machine (100 ms did, in a CI run beside other tests); each
	// call with the replica stopped waits it out.
	s := provisioned(t, primary.client(), Options{Prefix: "durable:", Observer: ev.observe, Timeout: 3 * time.Second,
		Durability: Durability{Replicas: 1, Timeout: time.Second}})
	ctx := context.Background()
	wantClaim(t, s, "up", time.Now().Add(time.Minute), true)
	l := acquireLease(t, s, "a", time.Minute, replay.LeaseAcquired)
	fp, result := []byte("fp"), []byte("result")
	up := acquireRecord(t, s, "rec", fp, replay.LeaseAcquired)
	replica.signal(syscall.SIGSTOP)
	defer replica.signal(syscall.SIGCONT)

	first, err := s.Claim(ctx, "down", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrUnavailable) || Reason(err) != whyNotDurable {
		t.Fatalf("claim with the replica stopped = %v, %v; want ErrNotDurable", first, err)
	}
	// The write stays on the primary: a resend is refused, never first.
	if first, err := s.Claim(ctx, "down", time.Now().Add(time.Minute)); first {
		t.Fatalf("resent claim = true, %v", err)
	}
	if l, err := s.AcquireLease(ctx, "lease", time.Minute); err == nil || l.State != 0 {
		t.Fatalf("acquire with the replica stopped = %+v, %v; want an error", l, err)
	}
	n := ev.count(replay.EventNotDurable)
	err = s.RenewLease(ctx, "a", l.Token, 2*time.Minute)
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrUnavailable) || Reason(err) != whyNotDurable {
		t.Fatalf("renewal with the replica stopped = %v; want ErrNotDurable", err)
	}
	wantErr(t, s.RenewLease(ctx, "a", newToken(), 2*time.Minute), replay.ErrLeaseLost, "renewal with another token, the replica stopped")
	if r, err := s.AcquireRecord(ctx, "rec-down", time.Minute, fp); !errors.Is(err, ErrNotDurable) || Reason(err) != whyNotDurable || r.State != 0 {
		t.Fatalf("AcquireRecord with the replica stopped = %+v, %v; want ErrNotDurable", r, err)
	}
	err = s.ConfirmRecord(ctx, "rec", up.Token, time.Now().Add(time.Hour), fp, result)
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ConfirmRecord with the replica stopped = %v; want ErrNotDurable", err)
	}
	if got := ev.count(replay.EventNotDurable) - n; got != 3 {
		t.Fatalf("%d not_durable events for the renewal and the record steps, want 3", got)
	}

	replica.signal(syscall.SIGCONT)
	waitReplicas(t, primary, 1)
	must(t, s.RenewLease(ctx, "a", l.Token, 2*time.Minute))
	must(t, s.ConfirmRecord(ctx, "rec", up.Token, time.Now().Add(time.Hour), fp, result))
	if d := acquireRecord(t, s, "rec", nil, replay.LeaseDone); !bytes.Equal(d.Result, result) {
		t.Fatalf("done = %+v", d)
	}
}

// TestOpen pins [Open]'s refusals on a real server: replicas without
// durability, WAITAOF without server support, and Redis down. (A replica
// and an evicting policy: TestChecks/"refuse what does not fit"; on a real
// server, TestReopen/"refuses a server open refuses" and TestChecks/"allow
// options report their risk".)
func TestOpen(t *testing.T) {
	subtests(t, []subtest{
		{"replicas without durability", openRefusesReplicasWithoutDurability},
		{"WAITAOF without server support", openRefusesWAITAOFWithoutServerSupport},
		{"redis down", openFailsWhenRedisIsDown},
	})
}

func openRefusesReplicasWithoutDurability(t *testing.T) {
	primary := newServer(t)
	newReplica(t, primary)
	c := primary.client()
	ctx := context.Background()
	if _, err := Open(ctx, c, Options{}); !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "replicas") {
		t.Fatalf("Open on a primary with a replica and no Durability = %v; want ErrConfig", err)
	}
	// Waiting for the local fsync alone does not survive a failover.
	if _, err := Open(ctx, c, Options{Durability: Durability{LocalAOF: true}}); !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "replicas") {
		t.Fatalf("Open on a primary with a replica and only LocalAOF = %v; want ErrConfig", err)
	}
	// A Store from New finds it at its first call, and keeps refusing.
	s := mustNew(t, c, Options{})
	for range 2 {
		wantRefused(t, s, "x", time.Now().Add(time.Minute), ErrConfig)
	}
	_, err := s.ProvisionNew(ctx)
	wantErr(t, err, ErrConfig, "Provision")
	for _, opts := range []Options{
		{AllowAsyncReplicas: true},
		{Durability: Durability{Replicas: 1}},
	} {
		provisionFirst(t, c, opts)
		mustOpen(t, c, opts)
	}
}

// Redis 7.0 has no WAITAOF (7.2 added it): a Durability asking for it is
// refused at construction, not at the first claim.
func openRefusesWAITAOFWithoutServerSupport(t *testing.T) {
	c := newServer(t, "--appendonly", "yes", "--appendfsync", "always").client()
	info := mustInfo(t, c, "server")
	has := versionAtLeast(info, 7, 2)
	if has {
		provisionFirst(t, c, Options{Durability: Durability{LocalAOF: true}})
	}
	for _, d := range []Durability{{LocalAOF: true}, {ReplicaAOF: 1}} {
		_, err := Open(context.Background(), c, Options{Durability: d})
		switch {
		case !has && (!errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "WAITAOF")):
			t.Fatalf("Open with %+v on a server without WAITAOF = %v; want ErrConfig", d, err)
		case has && d.LocalAOF && err != nil:
			t.Fatalf("Open with %+v on a server with WAITAOF and AOF = %v", d, err)
		}
	}
	if !has {
		t.Logf("refused on redis %s", serverVersion(info))
	}
}

func serverVersion(info string) string { return infoValue(info, "redis_version") }

func versionAtLeast(info string, major, minor int) bool {
	parts := strings.SplitN(serverVersion(info), ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(parts[1])
	return ma > major || ma == major && mi >= minor
}

func openFailsWhenRedisIsDown(t *testing.T) {
	c := newServer(t)
	cl := c.client()
	c.kill()
	if _, err := Open(context.Background(), cl, Options{}); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConfig) {
		t.Fatalf("Open with Redis down = %v; want ErrUnavailable", err)
	}
}

// A resent acquire (go-redis retrying the script on another connection
// after a lost reply) finds its own lease. It must write it again: WAIT
// counts only the writes of the connection it runs on, so a resend that
// wrote nothing would have its WAIT answer at once while the lease had not
// reached the replica. Redis's count of changes since the last save
// (rdb_changes_since_last_save: writes only, scripts' included; a SET NX
// that finds the key writes nothing) shows the second write.
func resentAcquireWritesItsLeaseAgain(t *testing.T) {
	t.Parallel()
	primary := newServer(t)
	newReplica(t, primary)
	c := primary.client()
	s := provisioned(t, c, Options{Prefix: "resend:", Durability: Durability{Replicas: 1}, Logger: quietLogger()})
	ctx := context.Background()
	const token = "0123456789abcdef0123456789abcdef"
	sets := func() int64 {
		info := mustInfo(t, c, "persistence")
		n, err := strconv.ParseInt(infoValue(info, "rdb_changes_since_last_save"), 10, 64)
		wantErr(t, err, nil, "rdb_changes_since_last_save")
		return n
	}
	code, _, err := s.run(ctx, &acquireLua, "delivery-1", 5000, token, 0)
	if err != nil || code != 1 {
		t.Fatalf("first acquire = %d, %v; want acquired", code, err)
	}
	before := sets()
	code, _, err = s.run(ctx, &acquireLua, "delivery-1", 5000, token, 0)
	if err != nil || code != 1 {
		t.Fatalf("resent acquire = %d, %v; want acquired (its own lease)", code, err)
	}
	if after := sets(); after != before+1 {
		t.Fatalf("%d writes by the resent acquire, want 1: without a write WAIT has nothing to wait on", after-before)
	}
	if ttl := c.PTTL(ctx, s.key("delivery-1")).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("lease PTTL after the resend = %v; want its remaining time, at most 5s", ttl)
	}
	// Another token still finds the lease busy.
	acquireLease(t, s, "delivery-1", 5*time.Second, replay.LeaseBusy)
}

// WAITAOF end to end on a server that has it (Valkey 8, Redis 7.2+; on
// Redis 7.0 Open refuses, as TestOpen/WAITAOF without server support
// shows): LocalAOF is refused on appendfsync everysec (WAITAOF can
// acknowledge the local fsync before it ran there: redis/redis#13793),
// opens on always and claims once; with ReplicaAOF a replica that stops
// writing its AOF turns every claim into ErrNotDurable, never first.
func wAITAOFClaimsOnceAndRefusesAReplicaThatStopsFsyncing(t *testing.T) {
	t.Parallel()
	everysec := newServer(t, "--appendonly", "yes", "--appendfsync", "everysec")
	_, err := Open(context.Background(), everysec.client(), Options{Durability: Durability{LocalAOF: true}, Logger: quietLogger()})
	wantErr(t, err, ErrConfig, "Open with LocalAOF on appendfsync everysec")
	primary := newServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := primary.client()
	ctx := context.Background()
	info := mustInfo(t, c, "server")
	if !versionAtLeast(info, 7, 2) {
		if _, err := Open(ctx, c, Options{Durability: Durability{LocalAOF: true}, Logger: quietLogger()}); !errors.Is(err, ErrConfig) {
			t.Fatalf("Open with LocalAOF on %s = %v; want ErrConfig", serverVersion(info), err)
		}
		t.Logf("no WAITAOF on %s: refused at Open", serverVersion(info))
		return
	}
	until := time.Now().Add(time.Minute)
	local := provisioned(t, c, Options{Prefix: "aof-local:", Logger: quietLogger(), Durability: Durability{LocalAOF: true}})
	wantClaim(t, local, "a", until, true)
	wantClaim(t, local, "a", until, false)

	must(t, c.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	replica := newServer(t, "--replicaof", "127.0.0.1", primary.port, "--appendonly", "yes", "--appendfsync", "always")
	waitReplicas(t, primary, 1)
	s := provisioned(t, c, Options{Prefix: "aof-replica:", Logger: quietLogger(),
		Durability: Durability{Replicas: 1, LocalAOF: true, ReplicaAOF: 1, Timeout: 200 * time.Millisecond}})
	ok := false
	for deadline := time.Now().Add(5 * time.Second); !ok; time.Sleep(50 * time.Millisecond) {
		// The replica's first AOF rewrite after its sync may still run.
		first, err := s.Claim(ctx, fmt.Sprint("fsynced-", time.Now().UnixNano()), until)
		ok = first && err == nil
		if !ok && time.Now().After(deadline) {
			t.Fatalf("claim with a fsyncing replica = %v, %v; want first", first, err)
		}
	}
	must(t, replica.client().ConfigSet(ctx, "appendonly", "no").Err())
	for i := range 10 {
		wantRefused(t, s, fmt.Sprint("unfsynced-", i), until, ErrNotDurable)
	}
}

// AOF switched off at run time (CONFIG SET appendonly no) on a server
// that runs AOF with appendfsync always: on a server with WAITAOF (Valkey
// 8, Redis 7.2+) every write waits for its local fsync without
// Durability.LocalAOF, which the server refuses once AOF is off, so no
// claim after the switch is reported first (ErrNotDurable until the
// recheck refuses with ErrConfig), and a crash before the recheck, then a
// start with the configuration's AOF, accepts none of the IDs again. On
// Redis 7.0 the window of one RecheckInterval stays: the test measures it
// and skips the assertion that it is closed.
func aOFSwitchedOffAtRunTimeIsRefusedBeforeTheRecheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		recheck time.Duration // RecheckInterval; an hour: the crash comes first
		crash   bool          // kill -9 inside the window, before the recheck
	}{
		{"until the recheck refuses", 0, false},
		{"crash inside the recheck window", time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := newServer(t, "--appendonly", "yes", "--appendfsync", "always")
			c := srv.client()
			info := mustInfo(t, c, "server")
			closed := versionAtLeast(info, 7, 2)
			s := provisioned(t, c, Options{Prefix: "window:", Logger: quietLogger(), Timeout: 5 * time.Second, RecheckInterval: tt.recheck})
			before := claimFresh(t, s, "before", 200)
			if got := s.dur.implied.on.Load(); got != closed {
				t.Fatalf("implied local AOF wait on %s = %v; want %v", serverVersion(info), got, closed)
			}
			must(t, c.ConfigSet(ctx, "appendonly", "no").Err())
			var after, accepted []string
			notDurable := 0
			for i, deadline := 0, time.Now().Add(5*time.Second); ; i++ {
				id := fmt.Sprint("after-", i)
				first, err := s.Claim(ctx, id, time.Now().Add(10*time.Minute))
				after = append(after, id)
				switch {
				case errors.Is(err, ErrConfig), errors.Is(err, ErrFenced):
				case errors.Is(err, ErrNotDurable):
					notDurable++
				case err != nil:
					t.Fatalf("claim after the switch: %v", err)
				case first:
					accepted = append(accepted, id)
				}
				if err != nil && !errors.Is(err, ErrNotDurable) {
					break // refused by the recheck
				}
				if tt.crash && len(after) == 500 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no refusal within 5 s of AOF switched off (%d claims accepted)", len(accepted))
				}
			}
			if !tt.crash {
				waitChecks(t, s) // the fence, and its AOF rewrite
				waitRewrite(t, c)
			}
			srv.kill()
			twice := acceptedAgainAfterStart(t, srv, "window:", append(before, accepted...))
			t.Logf("%s: %d claims after the switch, %d reported first, %d ErrNotDurable; after kill -9 and restart %d of %d accepted twice",
				serverVersion(info), len(after), len(accepted), notDurable, twice, len(before)+len(accepted))
			if !closed {
				t.Skipf("redis %s has no WAITAOF (7.2 added it): AOF switched off at run time is found only by the recheck, a window of RecheckInterval; %d of %d accepted claims came back after the crash",
					serverVersion(info), twice, len(accepted))
			}
			if len(accepted) != 0 || twice != 0 {
				t.Fatalf("%d claims reported first after AOF was switched off, %d IDs accepted twice; want 0 and 0", len(accepted), twice)
			}
		})
	}
}

// scriptHook answers every command of a *redis.Client, single or
// pipelined, with f, so that a test scripts the replies of a client whose
// pipelines the store pins (the Durability waits need one). It never
// dials.
type scriptHook struct {
	f clientFunc
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.answer(ctx, cmd) }
}

func (h *scriptHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var first error
		for _, cmd := range cmds {
			if err := h.answer(ctx, cmd); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

func (h *scriptHook) answer(ctx context.Context, cmd redis.Cmder) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		err := fmt.Errorf("unscripted command type %T", cmd)
		cmd.SetErr(err)
		return err
	}
	v, err := h.f(ctx, cmd.Args()...).Result()
	if err != nil {
		c.SetErr(err)
		return err
	}
	c.SetVal(v)
	return nil
}

// acceptedAgainAfterStart starts srv again (loading the AOF of its command
// line), opens a Store on prefix and claims every ID again: it returns how
// many were accepted as first. A refusal other than a fence fails the test.
func acceptedAgainAfterStart(t *testing.T, srv *server, prefix string, ids []string) int {
	t.Helper()
	must(t, srv.start())
	s := mustNew(t, srv.client(), Options{Prefix: prefix, Logger: quietLogger(), Timeout: 5 * time.Second})
	defer s.Close()
	twice := 0
	for _, id := range ids {
		first, err := s.Claim(context.Background(), id, time.Now().Add(10*time.Minute))
		if first {
			twice++
		}
		if err != nil && !errors.Is(err, ErrFenced) {
			t.Fatalf("claim after the restart: %v", err)
		}
	}
	return twice
}
