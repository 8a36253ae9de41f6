package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// execCount counts (its note under a cmdHook) the EXECs the store sends, those
// Redis aborted (a nil reply), and the confirm scripts (EVALSHA or EVAL
// of either).
type execCount struct {
	mu                       sync.Mutex
	execs, aborted, confirms int
}

func (h *execCount) note(cmd redis.Cmder) {
	args := cmd.Args()
	name := strings.ToUpper(fmt.Sprint(args[0]))
	h.mu.Lock()
	defer h.mu.Unlock()
	switch name {
	case "EXEC":
		h.execs++
		if errors.Is(cmd.Err(), redis.Nil) {
			h.aborted++
		}
	case "EVALSHA", "EVAL":
		a := fmt.Sprint(args[1])
		if p, ok := args[1].(*string); ok {
			a = *p
		}
		switch a {
		case confirmLua.sha, confirmRecordLua.sha, confirmScript, confirmRecordScript:
			h.confirms++
		}
	}
}

func (h *execCount) get() (execs, aborted, confirms int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.execs, h.aborted, h.confirms
}

func (h *execCount) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.execs, h.aborted, h.confirms = 0, 0, 0
}

// heldCounts is how many connections s keeps, how many are free and how
// many hold a lease.
func heldCounts(s *Store) (owned, free, leases int) {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return s.held.owned, len(s.held.free), len(s.held.leases)
}

// keptStore is a store on a client of its own with poolSize connections
// (a quarter kept), its hook, and a second client for outside writes.
func keptStore(t *testing.T, poolSize int) (*Store, *redis.Client, *execCount) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true, PoolSize: poolSize})
	t.Cleanup(func() { c.Close() })
	h := new(execCount)
	c.AddHook(cmdHook{after: h.note})
	return provisioned(t, c, Options{Prefix: uniquePrefix(t, c)}), c, h
}

// waitAllIdle waits until every connection of c's pool is idle (the
// store gives its kept ones back in goroutines).
func waitAllIdle(t *testing.T, c *redis.Client) {
	t.Helper()
	waitFor(t, "every connection of the pool idle", func() bool {
		st := c.PoolStats()
		return st.TotalConns == st.IdleConns
	})
}

// errClass names what callers tell apart in an error: nil, the
// sentinels, and the reason.
func errClass(err error) string {
	if err == nil {
		return "nil"
	}
	var b strings.Builder
	for _, s := range []error{replay.ErrLeaseLost, ErrFenced, ErrClockSkew, ErrInvalidClaim, replay.ErrExpired, ErrNotDurable, ErrUnavailable} {
		if errors.Is(err, s) {
			fmt.Fprintf(&b, "%v;", s)
		}
	}
	return b.String() + Reason(err)
}

// A confirmation on the connection its acquisition kept (held.go) is
// one MULTI/EXEC, and everything the transaction cannot decide goes to
// the confirm script, with the script's answer.
func TestKeptConfirm(t *testing.T) {
	t.Run("confirms without a script", keptConfirmRunsNoScript)
	t.Run("aborted by a change of the entry, the script decides", keptConfirmAbortedByEntryChange)
	t.Run("a fence raised after the acquisition refuses as before", keptConfirmFenced)
	t.Run("a lease ended before the confirmation answers as the script", keptConfirmAfterLeaseEnd)
	t.Run("a lease never confirmed gives its connection back", keptLeaseNeverConfirmed)
	t.Run("a panicking handler gives its connection back", keptLeasePanickingHandler)
	t.Run("the client's own transactions are never aborted", keptConnsNeverAbortUserTransactions)
	t.Run("a clock fallen behind since the acquisition refuses as the script", keptConfirmClockBehind)
	t.Run("a dropped store gives its connections back", keptConnsOfADroppedStore)
	t.Run("a server refusing MULTI keeps no lease and overwrites no other holder", keptConfirmMultiRefused)
	t.Run("a refused command turns the kept path off", keptPathOffOnRefusal)
	t.Run("a pool under 4 keeps no connection", keptConnsNoneOnASmallPool)
	t.Run("stores sharing a client leave half its pool", keptConnsStoresShareAPool)
	t.Run("Close on a hung Redis returns at once", keptConnsCloseOnHungRedis)
	t.Run("the transaction writes the side key before the entry", keptConfirmSideKeyFirst)
}

// aclStore is a store as an ACL user with rules added to +@all (on a
// server of its own, pool 8: two kept connections), the hook on its
// client, and an admin client.
func aclStore(t *testing.T, rules ...any) (*Store, *redis.Client, *execCount, *redis.Client) {
	t.Helper()
	srv := newServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { admin.Close() })
	args := append([]any{"ACL", "SETUSER", "app", "reset", "on", ">pw", "~*", "&*", "+@all"}, rules...)
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), Username: "app", Password: "pw", ContextTimeoutEnabled: true, PoolSize: 8})
	t.Cleanup(func() { c.Close() })
	h := new(execCount)
	c.AddHook(cmdHook{after: h.note})
	return provisioned(t, c, Options{Prefix: "acl:", Logger: quietLogger()}), c, h, admin
}

// renamedStore is a store on a server of its own where command is
// renamed away, and its client (pool 8).
func renamedStore(t *testing.T, command string) (*Store, *redis.Client) {
	t.Helper()
	srv := newServer(t, "--rename-command", command, "")
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true, PoolSize: 8})
	t.Cleanup(func() { c.Close() })
	return provisioned(t, c, Options{Prefix: "ren:", Logger: quietLogger()}), c
}

// everyConnOutOfTransactions takes every connection of c's pool at once
// and checks that each answers PING with PONG (one left inside MULTI
// answers QUEUED).
func everyConnOutOfTransactions(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	conns := make([]*redis.Conn, c.Options().PoolSize)
	for i := range conns {
		conns[i] = c.Conn()
		if v, err := conns[i].Ping(ctx).Result(); err != nil || v != "PONG" {
			t.Errorf("pool connection %d: PING = %q, %v; want PONG", i, v, err)
		}
	}
	for _, cn := range conns {
		cn.Close()
	}
}

// A server that refuses MULTI (an ACL, a renamed command) answers MULTI's
// refusal at the acquisition: no lease keeps its connection, the kept
// path turns off, and a confirmation after the lease ended, once another
// instance holds the ID, is the script's ErrLeaseLost with the other
// lease untouched (it never sends a write outside a transaction).
func keptConfirmMultiRefused(t *testing.T) {
	for _, how := range []string{"ACL -multi", "MULTI renamed"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			var s *Store
			var c *redis.Client
			if how == "ACL -multi" {
				s, c, _, _ = aclStore(t, "-multi")
			} else {
				s, c = renamedStore(t, "MULTI")
			}
			other, err := New(c, Options{Prefix: s.Prefix(), Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			a, err := s.AcquireLease(ctx, "id", 100*time.Millisecond)
			if err != nil || a.State != replay.LeaseAcquired {
				t.Fatal(a, err)
			}
			_, _, leases := heldCounts(s)
			off := s.held.off.Load()
			waitFor(t, "a's lease to end", func() bool { return c.Exists(ctx, s.key("id")).Val() == 0 })
			b, err := other.AcquireLease(ctx, "id", time.Minute)
			if err != nil || b.State != replay.LeaseAcquired {
				t.Fatal(b, err)
			}
			err = s.ConfirmLease(ctx, "id", a.Token, time.Now().Add(time.Hour))
			if v := c.Get(ctx, s.key("id")).Val(); !errors.Is(err, replay.ErrLeaseLost) || v != "L"+b.Token {
				t.Fatalf("a's late confirmation = %v, entry %q; want ErrLeaseLost and b's lease %q untouched", err, v, "L"+b.Token)
			}
			if leases != 0 || !off {
				t.Fatalf("%d leases kept, off %v after the acquisition; want none kept and the kept path off", leases, off)
			}
			waitAllIdle(t, c)
			everyConnOutOfTransactions(t, c)
		})
	}
}

// A command only the kept path sends, refused at the acquisition (WATCH)
// or the confirmation (EXEC, answered EXECABORT … NOPERM), turns the kept
// path off at the first refusal: later calls pay no refused command, the
// free connections go back to the client's pool out of any transaction,
// and every call is answered.
func keptPathOffOnRefusal(t *testing.T) {
	for _, how := range []string{"ACL -exec", "ACL -watch", "WATCH renamed", "EXEC renamed"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			var s *Store
			var c *redis.Client
			h := new(execCount)
			switch how {
			case "ACL -exec":
				s, c, h, _ = aclStore(t, "-exec")
			case "ACL -watch":
				s, c, h, _ = aclStore(t, "-watch")
			case "WATCH renamed":
				s, c = renamedStore(t, "WATCH")
				c.AddHook(cmdHook{after: h.note})
			case "EXEC renamed":
				s, c = renamedStore(t, "EXEC")
				c.AddHook(cmdHook{after: h.note})
			}
			var scripts atomic.Int64
			c.AddHook(cmdHook{before: countAcquireScripts(&scripts)})
			// Two leases, both kept when the acquisition succeeds; one
			// released (its connection free, inside MULTI).
			x := acquireRecordFor(t, s, "x", time.Minute)
			y := acquireRecordFor(t, s, "y", time.Minute)
			if err := s.ReleaseLease(ctx, "x", x.Token); err != nil {
				t.Fatal(err)
			}
			if err := s.ConfirmRecord(ctx, "y", y.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")); err != nil {
				t.Fatal(err)
			}
			if !s.held.off.Load() {
				t.Fatal("the kept path is still on after a refusal")
			}
			h.reset()
			scripts.Store(0)
			for i := range 4 {
				id := fmt.Sprint("after-", i)
				l := acquireRecordFor(t, s, id, time.Minute)
				if err := s.ConfirmRecord(ctx, id, l.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")); err != nil {
					t.Fatal(err)
				}
			}
			if execs, _, confirms := h.get(); execs != 0 || confirms != 4 || scripts.Load() != 0 {
				t.Fatalf("4 records after the turn-off: %d EXEC, %d confirm scripts, %d acquire scripts; want the pipeline and the confirm script alone", execs, confirms, scripts.Load())
			}
			if owned, _, _ := heldCounts(s); owned != 0 {
				t.Fatalf("%d connections kept after the turn-off", owned)
			}
			waitAllIdle(t, c)
			everyConnOutOfTransactions(t, c)
		})
	}
}

// countAcquireScripts adds the acquire scripts among the commands a
// cmdHook shows it to n.
func countAcquireScripts(n *atomic.Int64) func(redis.Cmder) {
	return func(cmd redis.Cmder) {
		if a := cmd.Args(); len(a) > 1 {
			if p, ok := a[1].(*string); ok && (*p == acquireLua.sha || *p == acquireRecordLua.sha) {
				n.Add(1)
			}
		}
	}
}

// A client whose pool is under 4 connections lends the store none: its
// scripts and the user's own commands find the pool free.
func keptConnsNoneOnASmallPool(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true, PoolSize: 1, PoolTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c)})
	l, err := s.AcquireLease(ctx, "p", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatal(l, err)
	}
	if owned, _, _ := heldCounts(s); owned != 0 {
		t.Fatalf("%d connections kept of a pool of 1", owned)
	}
	if err := s.ConfirmLease(ctx, "p", l.Token, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "q", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Claim = %v", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the user's own PING = %v", err)
	}
}

// Four stores (tokens, webhooks, idempotency, MCP) on one client of pool
// 4, each with a lease: together they keep at most half of the pool, and
// the user's commands find a connection.
func keptConnsStoresShareAPool(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true, PoolSize: 4, PoolTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	kept := 0
	for i := range 4 {
		s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c)})
		if l, err := s.AcquireLease(ctx, "x", time.Minute); err != nil || l.State != replay.LeaseAcquired {
			t.Fatalf("store %d: %+v, %v", i, l, err)
		}
		owned, _, _ := heldCounts(s)
		kept += owned
	}
	if kept > 2 {
		t.Fatalf("the stores keep %d connections of a pool of 4", kept)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the user's own PING = %v", err)
	}
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "share-a-pool")
		return nil
	}); err != nil {
		t.Fatalf("the user's own transaction = %v", err)
	}
}

// Close gives the kept connections back without waiting on the network:
// on a stopped Redis it returns at once, and the connections go back
// (or are closed) once it answers.
func keptConnsCloseOnHungRedis(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), PoolSize: 8, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { c.Close() })
	s := provisioned(t, c, Options{Prefix: "hung:", Logger: quietLogger()})
	for _, id := range []string{"a", "b"} {
		if l, err := s.AcquireLease(ctx, id, time.Minute); err != nil || l.State != replay.LeaseAcquired {
			t.Fatal(l, err)
		}
	}
	if owned, _, leases := heldCounts(s); owned != 2 || leases != 2 {
		t.Fatalf("kept %d, leases %d; want two", owned, leases)
	}
	srv.signal(syscall.SIGSTOP)
	start := time.Now()
	s.Close()
	took := time.Since(start)
	srv.signal(syscall.SIGCONT)
	if took > time.Second {
		t.Fatalf("Close on a stopped Redis took %v", took)
	}
	waitAllIdle(t, c)
	everyConnOutOfTransactions(t, c)
}

// A confirmation's transaction writes the side key before the entry, so
// that an EXEC that fails part-way never leaves a done entry without its
// record.
func keptConfirmSideKeyFirst(t *testing.T) {
	s, c, _ := keptStore(t, 8)
	var order []string
	var mu sync.Mutex
	c.AddHook(setOrder{&mu, &order})
	l := acquireRecordFor(t, s, "k", time.Minute)
	if err := s.ConfirmRecord(context.Background(), "k", l.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"TIME", sideKey(s.tags[shardOf("k")], "k"), s.key("k"), "EXEC"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("the confirmation's pipeline = %v; want %v", order, want)
	}
}

// setOrder is a go-redis hook recording, of the pipeline that ends a
// transaction, each command's name, or for a SET its key.
type setOrder struct {
	mu    *sync.Mutex
	order *[]string
}

func (h setOrder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h setOrder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h setOrder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		exec := false
		for _, c := range cmds {
			if exec {
				break // the waits and the probe after EXEC
			}
			a := c.Args()
			name := strings.ToUpper(fmt.Sprint(a[0]))
			exec = name == "EXEC"
			if name == "SET" {
				name = fmt.Sprint(a[1])
				if p, ok := a[1].(*string); ok {
					name = *p
				}
			}
			names = append(names, name)
		}
		if exec {
			h.mu.Lock()
			*h.order = names
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// The caller's clock falls 2 minutes behind Redis's between the
// acquisition and the confirmation: both paths answer ErrClockSkew and
// write nothing (the kept path sees the lag before it sends and leaves
// the answer to the script).
func keptConfirmClockBehind(t *testing.T) {
	ctx := context.Background()
	answers := map[bool]string{}
	for _, kept := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true, PoolSize: 8})
		t.Cleanup(func() { c.Close() })
		h := new(execCount)
		c.AddHook(cmdHook{after: h.note})
		var behind atomic.Int64
		now := func() time.Time { return time.Now().Add(-time.Duration(behind.Load())) }
		s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Now: now})
		l := acquireRecordFor(t, s, "k", time.Minute)
		if !kept {
			s.held.release(l.Token)
		}
		behind.Store(int64(2 * time.Minute))
		h.reset()
		err := s.ConfirmRecord(ctx, "k", l.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result"))
		answers[kept] = errClass(err)
		if !errors.Is(err, ErrClockSkew) {
			t.Fatalf("kept=%v: confirm from a clock 2 min behind = %v; want ErrClockSkew", kept, err)
		}
		if execs, _, confirms := h.get(); execs != 0 || confirms != 1 {
			t.Fatalf("kept=%v: %d EXEC, %d confirm scripts; want the script alone", kept, execs, confirms)
		}
		// A refusal consumes nothing: the lease is still there, unrecorded.
		behind.Store(0)
		if r, err := s.AcquireRecord(ctx, "k", time.Minute, []byte("fp")); err != nil || r.State != replay.LeaseBusy {
			t.Fatalf("kept=%v: the ID after the refused confirmation = %+v, %v; want still leased", kept, r, err)
		}
	}
	if answers[true] != answers[false] {
		t.Fatalf("kept: %s; script alone: %s; want the same answer", answers[true], answers[false])
	}
}

// A Store dropped without Close is collected; its watch then returns
// the connections it kept to the client's pool, idle.
func keptConnsOfADroppedStore(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true, PoolSize: 8})
	t.Cleanup(func() { c.Close() })
	s, err := New(c, Options{Prefix: uniquePrefix(t, c), RecheckInterval: 10 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ProvisionNew(context.Background()); err != nil {
		t.Fatal(err)
	}
	acquireRecordFor(t, s, "held", time.Minute) // kept for its lease
	if st := c.PoolStats(); st.TotalConns == st.IdleConns {
		t.Fatalf("pool: %d connections, all idle; want the kept one out", st.TotalConns)
	}
	waitDropped(t, &s)
	waitAllIdle(t, c)
}

func keptConfirmRunsNoScript(t *testing.T) {
	s, c, h := keptStore(t, 8)
	ctx, cancel := context.WithCancel(context.Background()) // a cancellable context: the goroutine path
	defer cancel()
	for _, record := range []bool{true, false} {
		h.reset()
		id := fmt.Sprint("r-", record)
		until := time.Now().Add(time.Hour)
		var err error
		var token string
		if record {
			l := acquireRecord(t, s, id, []byte("fp"), replay.LeaseAcquired)
			token = l.Token
			err = s.ConfirmRecord(ctx, id, token, until, []byte("fp"), []byte("result"))
		} else {
			l, aerr := s.AcquireLease(ctx, id, time.Minute)
			if aerr != nil || l.State != replay.LeaseAcquired {
				t.Fatal(l, aerr)
			}
			token = l.Token
			err = s.ConfirmLease(ctx, id, token, until)
		}
		if err != nil {
			t.Fatalf("record=%v: confirm = %v", record, err)
		}
		if execs, aborted, confirms := h.get(); execs != 1 || aborted != 0 || confirms != 0 {
			t.Fatalf("record=%v: %d EXEC, %d aborted, %d confirm scripts; want one EXEC and no script", record, execs, aborted, confirms)
		}
		v, err := c.Get(ctx, s.key(id)).Result()
		if err != nil || !strings.HasPrefix(v, "D"+token) {
			t.Fatalf("record=%v: entry %q, %v; want done by the token", record, v, err)
		}
		at, err := c.PExpireTime(ctx, s.key(id)).Result()
		if want := time.Duration(until.UnixMilli()+1) * time.Millisecond; err != nil || (at != want && at != want-time.Millisecond) {
			t.Fatalf("record=%v: entry expires at %v, %v; want until (%v)", record, at, err, want)
		}
		if record {
			if d := acquireRecord(t, s, id, nil, replay.LeaseDone); string(d.Result) != "result" || string(d.Fingerprint) != "fp" {
				t.Fatalf("replay = %+v", d)
			}
		}
	}
	if owned, free, leases := heldCounts(s); owned != 1 || free != 1 || leases != 0 {
		t.Fatalf("kept %d, free %d, leases %d; want one connection, free", owned, free, leases)
	}
}

func keptConfirmAbortedByEntryChange(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		write func(cl *redis.Client, key, own string) error
		want  error
	}{
		{"rewritten with the same value", func(cl *redis.Client, key, own string) error {
			return cl.Set(ctx, key, own, time.Minute).Err()
		}, nil},
		{"taken by another lease", func(cl *redis.Client, key, _ string) error {
			return cl.Set(ctx, key, "L"+newToken(), time.Minute).Err()
		}, replay.ErrLeaseLost},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, cl, h := keptStore(t, 8)
			other := newTestClient(t)
			l := acquireRecord(t, s, "x", []byte("fp"), replay.LeaseAcquired)
			if _, _, leases := heldCounts(s); leases != 1 {
				t.Fatalf("%d leases kept; want the acquisition's", leases)
			}
			if err := c.write(other, s.key("x"), "L"+l.Token+"fp"); err != nil {
				t.Fatal(err)
			}
			before, _ := cl.Get(ctx, s.key("x")).Result()
			h.reset()
			err := s.ConfirmRecord(ctx, "x", l.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result"))
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("confirm = %v; want %v", err, c.want)
			}
			if execs, aborted, confirms := h.get(); execs != 1 || aborted != 1 || confirms == 0 {
				t.Fatalf("%d EXEC, %d aborted, %d confirm scripts; want the EXEC aborted and the script", execs, aborted, confirms)
			}
			after, _ := cl.Get(ctx, s.key("x")).Result()
			if c.want != nil && after != before {
				t.Fatalf("entry %q after a refused confirmation; want %q", after, before)
			}
			if c.want == nil && !strings.HasPrefix(after, "D"+l.Token) {
				t.Fatalf("entry %q; want done by the token", after)
			}
		})
	}
}

func keptConfirmFenced(t *testing.T) {
	ctx := context.Background()
	for _, kept := range []bool{true, false} {
		t.Run(fmt.Sprint("kept=", kept), func(t *testing.T) {
			s, cl, h := keptStore(t, 8)
			l := acquireRecord(t, s, "f", []byte("fp"), replay.LeaseAcquired)
			if !kept {
				s.held.release(l.Token)
			}
			if err := cl.Del(ctx, s.tags[shardOf("f")]).Err(); err != nil { // the shard's marker lost
				t.Fatal(err)
			}
			h.reset()
			err := s.ConfirmRecord(ctx, "f", l.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result"))
			if !errors.Is(err, ErrFenced) || Reason(err) != whyFenceRaised {
				t.Fatalf("confirm after the marker's loss = %v; want ErrFenced (%s)", err, whyFenceRaised)
			}
			if execs, aborted, _ := h.get(); kept && (execs != 1 || aborted != 1) {
				t.Fatalf("%d EXEC, %d aborted; want the EXEC aborted", execs, aborted)
			}
			if v, _ := cl.Get(ctx, s.key("f")).Result(); v != "L"+l.Token+"fp" {
				t.Fatalf("entry %q after the refusal; want the lease", v)
			}
		})
	}
}

// The lease ends before the confirmation: by a read that deletes the
// expired entry, unread (Redis's clock past it, the entry perhaps still
// there), or taken by another acquisition since. The kept connection's
// EXEC aborts (Redis 6.0.9 and later), and the answer is the script's:
// the same with the connection kept and without.
func keptConfirmAfterLeaseEnd(t *testing.T) {
	ctx := context.Background()
	for _, after := range []string{"read", "unread", "taken"} {
		t.Run(after, func(t *testing.T) {
			answers := map[bool]string{}
			for _, kept := range []bool{true, false} {
				s, cl, h := keptStore(t, 8)
				id := "e-" + after
				l := acquireRecordFor(t, s, id, 100*time.Millisecond)
				if !kept {
					s.held.release(l.Token)
				}
				end := heldEnd(t, s, cl, id)
				switch after {
				case "read":
					waitFor(t, "the lease's end", func() bool { return cl.Exists(ctx, s.key(id)).Val() == 0 })
				case "unread":
					waitFor(t, "Redis's clock past the lease", func() bool { return cl.Time(ctx).Val().UnixMilli() > end })
				case "taken":
					waitFor(t, "the lease's end", func() bool { return cl.Exists(ctx, s.key(id)).Val() == 0 })
					if r, err := s.AcquireRecord(ctx, id, time.Minute, []byte("other")); err != nil || r.State != replay.LeaseAcquired {
						t.Fatal(r, err)
					}
				}
				h.reset()
				err := s.ConfirmRecord(ctx, id, l.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result"))
				answers[kept] = errClass(err)
				if execs, aborted, confirms := h.get(); kept && (execs != 1 || aborted != 1 || confirms == 0) {
					t.Fatalf("kept: %d EXEC, %d aborted, %d confirm scripts; want the EXEC aborted and the script", execs, aborted, confirms)
				}
			}
			if answers[true] != answers[false] {
				t.Fatalf("kept: %s; script alone: %s; want the same answer", answers[true], answers[false])
			}
			if want := map[string]string{"read": "nil", "unread": "nil", "taken": errClass(replay.ErrLeaseLost)}[after]; answers[true] != want {
				t.Fatalf("answer %s; want %s", answers[true], want)
			}
		})
	}
}

// acquireRecordFor acquires id for lease with fingerprint "fp".
func acquireRecordFor(t *testing.T, s *Store, id string, lease time.Duration) replay.Record {
	t.Helper()
	r, err := s.AcquireRecord(context.Background(), id, lease, []byte("fp"))
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord(%s) = %+v, %v; want acquired", id, r, err)
	}
	return r
}

// heldEnd is the Redis time (ms) at which id's entry expires.
func heldEnd(t *testing.T, s *Store, cl *redis.Client, id string) int64 {
	t.Helper()
	at, err := cl.PExpireTime(context.Background(), s.key(id)).Result()
	if err != nil || at <= 0 {
		t.Fatalf("entry's expiry = %v, %v", at, err)
	}
	return at.Milliseconds()
}

// With every kept connection holding a lease, an acquisition takes the
// ordinary path; once a lease never confirmed has ended, the next one
// takes its connection back; at Close every connection is back in the
// client's pool, idle.
func keptLeaseNeverConfirmed(t *testing.T) {
	ctx := context.Background()
	s, cl, h := keptStore(t, 4) // one kept connection
	a := acquireRecordFor(t, s, "a", 100*time.Millisecond)
	if owned, free, leases := heldCounts(s); owned != 1 || free != 0 || leases != 1 {
		t.Fatalf("kept %d, free %d, leases %d; want one, holding a's lease", owned, free, leases)
	}
	b := acquireRecordFor(t, s, "b", time.Minute) // every kept connection busy: the ordinary path
	if owned, _, leases := heldCounts(s); owned != 1 || leases != 1 {
		t.Fatalf("kept %d, leases %d; want still one, a's", owned, leases)
	}
	h.reset()
	if err := s.ConfirmRecord(ctx, "b", b.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")); err != nil {
		t.Fatal(err)
	}
	if execs, _, confirms := h.get(); execs != 0 || confirms == 0 {
		t.Fatalf("%d EXEC, %d confirm scripts; want the script alone for a lease on no kept connection", execs, confirms)
	}
	s.held.mu.Lock()
	by := s.held.leases[a.Token].by
	s.held.mu.Unlock()
	waitFor(t, "a's lease to end", func() bool {
		return cl.Exists(ctx, s.key("a")).Val() == 0 && time.Now().After(by)
	})
	c := acquireRecordFor(t, s, "c", time.Minute)
	s.held.mu.Lock()
	_, aHeld := s.held.leases[a.Token]
	_, cHeld := s.held.leases[c.Token]
	s.held.mu.Unlock()
	if owned, _, _ := heldCounts(s); owned != 1 || aHeld || !cHeld {
		t.Fatalf("kept %d, a held %v, c held %v; want c on a's connection", owned, aHeld, cHeld)
	}
	// a confirms late, on the script: the ID is free, so it records.
	if err := s.ConfirmRecord(ctx, "a", a.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, "c", c.Token); err != nil {
		t.Fatal(err)
	}
	if owned, free, leases := heldCounts(s); owned != 1 || free != 1 || leases != 0 {
		t.Fatalf("after ReleaseLease: kept %d, free %d, leases %d; want one free", owned, free, leases)
	}
	if st := cl.PoolStats(); st.TotalConns-st.IdleConns != 1 {
		t.Fatalf("pool: %d connections, %d idle; want the kept one out", st.TotalConns, st.IdleConns)
	}
	s.Close()
	if owned, free, leases := heldCounts(s); owned != 0 || free != 0 || leases != 0 {
		t.Fatalf("after Close: kept %d, free %d, leases %d; want none", owned, free, leases)
	}
	waitAllIdle(t, cl) // Close gives them back in goroutines
}

// The idempotency middleware releases the lease of a handler that
// panics: its kept connection is free at once.
func keptLeasePanickingHandler(t *testing.T) {
	s, _, _ := keptStore(t, 8)
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{
		Store: s, Keys: keys,
		Caller: func(*http.Request) (string, error) { return "merchant-1", nil },
		Route:  func(*http.Request) string { return "POST /payments" },
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran = true
		if _, _, leases := heldCounts(s); leases != 1 {
			t.Errorf("%d leases kept while the handler runs; want its own", leases)
		}
		panic("handler")
	}))
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"a":1}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", `"panic-1"`)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic did not reach the caller")
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	if !ran {
		t.Fatal("the handler did not run")
	}
	if owned, free, leases := heldCounts(s); owned != 1 || free != 1 || leases != 0 {
		t.Fatalf("after the panic: kept %d, free %d, leases %d; want the connection free", owned, free, leases)
	}
}

// A kept connection may carry a WATCH of an entry that has changed since
// (a lease released: its entry deleted). The client's own MULTI/EXEC
// never runs on it while the store keeps it, and after Close (which
// sends UNWATCH) none of the pool's connections aborts one. The control
// shows that a connection with such a WATCH aborts a transaction.
func keptConnsNeverAbortUserTransactions(t *testing.T) {
	ctx := context.Background()
	const pool = 4
	s, cl, _ := keptStore(t, pool)
	// Leave a dirty WATCH on the kept connection.
	l, err := s.AcquireLease(ctx, "w", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatal(l, err)
	}
	if err := s.ReleaseLease(ctx, "w", l.Token); err != nil {
		t.Fatal(err)
	}
	if _, free, _ := heldCounts(s); free != 1 {
		t.Fatalf("%d free kept connections; want the released lease's", free)
	}
	userKey := s.Prefix() + "user"
	userTx := func(c interface {
		TxPipelined(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error)
	}) error {
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, userKey)
			return nil
		})
		return err
	}
	// Every connection of the pool at once: pool-1 while the store keeps
	// one, pool after Close.
	allConns := func(n int) {
		conns := make([]*redis.Conn, n)
		for i := range conns {
			conns[i] = cl.Conn()
			if err := conns[i].Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range conns {
			if err := userTx(c); err != nil {
				t.Errorf("user transaction on pool connection %d: %v", i, err)
			}
			c.Close()
		}
	}
	allConns(pool - 1)
	for range 2 * pool {
		if err := userTx(cl); err != nil {
			t.Fatalf("user transaction: %v", err)
		}
	}
	s.Close()
	waitAllIdle(t, cl)
	allConns(pool)
	// The control: a WATCH dirtied on a connection aborts its transaction.
	c := cl.Conn()
	defer c.Close()
	if err := c.Do(ctx, "WATCH", userKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Incr(ctx, userKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := userTx(c); !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("control: transaction after a dirtied WATCH = %v; want aborted", err)
	}
	c.Do(ctx, "UNWATCH")
}
