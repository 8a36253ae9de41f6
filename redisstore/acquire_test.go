package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// TestAcquirePipeline pins the acquisition without Lua (acquire.go): it
// answers a free and a done ID alone, leaves every other answer to the
// script, and a refusal keeps nothing of what its SET took.
func TestAcquirePipeline(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"free and done answered without the script", acquirePipelineAnswersFreeAndDone},
		{"refused for a lagging clock keeps nothing", acquirePipelineSkewKeepsNothing},
		{"missing marker raises the fence and keeps nothing", acquirePipelineMissingMarkerKeepsNothing},
		{"another holder's lease is busy", acquirePipelineBusyGoesToTheScript},
		{"SET NX GET refused goes to the script", acquirePipelineWithoutSetNXGet},
	} {
		t.Run(tc.name, tc.test)
	}
}

// evalCounter counts the acquire scripts a client sends (EVALSHA or EVAL),
// alone or in pipelines, and the SET NX PX GET commands; with breakGet set rewrites the GET option of SET NX PX GET so that
// the server refuses the command as Redis 6.2 does (ERR syntax error).
type evalCounter struct {
	mu       sync.Mutex
	evals    int
	setGets  int
	breakGet bool
}

func (h *evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd)
		return next(ctx, cmd)
	}
}

func (h *evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.see(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *evalCounter) see(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := strings.ToUpper(cmd.Name())
	args := cmd.Args()
	switch {
	case (name == "EVALSHA" || name == "EVAL") && len(args) > 1 && isAcquireScript(args[1]):
		h.evals++
	case name == "SET" && len(args) > 0 && args[len(args)-1] == "GET":
		h.setGets++
		if h.breakGet {
			args[len(args)-1] = "GETX"
		}
	}
}

// isAcquireScript reports whether a is the digest or the source of an
// acquire script (a string, or a pointer to one).
func isAcquireScript(a any) bool {
	if p, ok := a.(*string); ok {
		a = *p
	}
	v, _ := a.(string)
	for _, sc := range []script{acquireLua, acquireRecordLua} {
		if v == sc.sha || v == sc.src {
			return true
		}
	}
	return false
}

func (h *evalCounter) counts() (evals, setGets int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.evals, h.setGets
}

func acquirePipelineAnswersFreeAndDone(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	h := &evalCounter{}
	c.AddHook(h)
	l, err := s.AcquireLease(ctx, "free", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatalf("AcquireLease of a free ID = %+v, %v; want acquired", l, err)
	}
	if err := s.ConfirmLease(ctx, "free", l.Token, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if l, err := s.AcquireLease(ctx, "free", time.Minute); err != nil || l.State != replay.LeaseDone {
		t.Fatalf("AcquireLease of a done ID = %+v, %v; want done", l, err)
	}
	r, err := s.AcquireRecord(ctx, "rec", time.Minute, []byte("fp"))
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord of a free ID = %+v, %v; want acquired", r, err)
	}
	if err := s.ConfirmRecord(ctx, "rec", r.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")); err != nil {
		t.Fatal(err)
	}
	got, err := s.AcquireRecord(ctx, "rec", time.Minute, []byte("fp"))
	if err != nil || got.State != replay.LeaseDone || string(got.Fingerprint) != "fp" || string(got.Result) != "result" {
		t.Fatalf("AcquireRecord of a done ID = %+v, %v; want done with its record", got, err)
	}
	if evals, setGets := h.counts(); evals != 0 || setGets != 4 {
		t.Fatalf("%d acquire scripts and %d SET NX GET sent; want none, and 4", evals, setGets)
	}
}

func acquirePipelineSkewKeepsNothing(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	lag, err := New(c, Options{Prefix: s.Prefix(), Logger: quietLogger(),
		Now: func() time.Time { return time.Now().Add(-2 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lag.Close() })
	lag.checked.Store(true) // as if its clock had jumped back after the checks passed
	if l, err := lag.AcquireLease(ctx, "a", time.Minute); !errors.Is(err, ErrClockSkew) || l.State != 0 {
		t.Fatalf("AcquireLease from a lagging instance = %+v, %v; want ErrClockSkew", l, err)
	}
	if r, err := lag.AcquireRecord(ctx, "b", time.Minute, []byte("fp")); !errors.Is(err, ErrClockSkew) || r.State != 0 {
		t.Fatalf("AcquireRecord from a lagging instance = %+v, %v; want ErrClockSkew", r, err)
	}
	if n, err := c.Exists(ctx, s.key("a"), s.key("b")).Result(); err != nil || n != 0 {
		t.Fatalf("entries left by the refused acquisitions: %d, %v; want none", n, err)
	}
	if l, err := s.AcquireLease(ctx, "a", time.Minute); err != nil || l.State != replay.LeaseAcquired {
		t.Fatalf("AcquireLease after the refusal = %+v, %v; want acquired", l, err)
	}
}

func acquirePipelineMissingMarkerKeepsNothing(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	if err := c.Del(ctx, s.tags[shardOf("lost")]).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, "lost", time.Minute)
	if !errors.Is(err, ErrFenced) || Reason(err) != whyFenceRaised || l.State != 0 {
		t.Fatalf("AcquireLease on a shard without its marker = %+v, %v; want ErrFenced (%q)", l, err, whyFenceRaised)
	}
	if n, err := c.Exists(ctx, s.key("lost")).Result(); err != nil || n != 0 {
		t.Fatalf("entry left by the refused acquisition: %d, %v; want none", n, err)
	}
	if m, err := c.Get(ctx, s.tags[shardOf("lost")]).Result(); err != nil || !strings.HasPrefix(m, "F") {
		t.Fatalf("marker after the refusal = %q, %v; want a fence", m, err)
	}
}

func acquirePipelineBusyGoesToTheScript(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	if _, err := s.AcquireRecord(ctx, "held", time.Minute, []byte("fp")); err != nil {
		t.Fatal(err)
	}
	h := &evalCounter{}
	c.AddHook(h)
	r, err := s.AcquireRecord(ctx, "held", time.Minute, []byte("fp"))
	if err != nil || r.State != replay.LeaseBusy || string(r.Fingerprint) != "fp" || r.Wait <= 50*time.Second || r.Wait > time.Minute {
		t.Fatalf("AcquireRecord of a leased ID = %+v, %v; want busy, its fingerprint, about a minute to wait", r, err)
	}
	if evals, _ := h.counts(); evals < 1 || evals > 2 {
		t.Fatalf("%d acquire scripts sent; want the one that answers busy (twice when the server did not know it yet: EVALSHA, then EVAL)", evals)
	}
}

func acquirePipelineWithoutSetNXGet(t *testing.T) {
	s, c := newTestStore(t)
	ctx := context.Background()
	h := &evalCounter{breakGet: true}
	c.AddHook(h)
	for _, id := range []string{"a", "b"} {
		if l, err := s.AcquireLease(ctx, id, time.Minute); err != nil || l.State != replay.LeaseAcquired {
			t.Fatalf("AcquireLease(%s) where SET NX GET is refused = %+v, %v; want acquired by the script", id, l, err)
		}
	}
	if evals, setGets := h.counts(); evals < 2 || evals > 3 || setGets != 1 || !s.noSetNXGet.Load() {
		t.Fatalf("%d acquire scripts, %d SET NX GET sent, noSetNXGet %v; want 2 (3 with the EVAL of a script the server did not know), 1 (the first refusal turns the pipeline off), true",
			evals, setGets, s.noSetNXGet.Load())
	}
}
