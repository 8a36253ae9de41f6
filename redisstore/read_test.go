package redisstore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// TestReadRecord pins what the Reader contract leaves to redisstore: one
// round trip of read commands, an answer from a Redis at maxmemory, and
// the refusal of a shard that lost data.
func TestReadRecord(t *testing.T) {
	t.Run("one pipeline of the read script and a GET", readIsOnePipelineOfReads)
	t.Run("answers at maxmemory with noeviction", readAnswersAtMaxmemory)
	t.Run("refuses a shard that lost its marker, writing nothing", readRefusesALostShard)
}

// seen records what a client sends: each command's name and first
// argument (the script's digest for EVALSHA), and how many pipelines: a
// go-redis hook.
type seen struct {
	mu        sync.Mutex
	cmds      []string
	pipelines int
}

func (s *seen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *seen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.add(false, cmd)
		return next(ctx, cmd)
	}
}

func (s *seen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.add(true, cmds...)
		return next(ctx, cmds)
	}
}

func (s *seen) add(pipeline bool, cmds ...redis.Cmder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pipeline {
		s.pipelines++
	}
	for _, c := range cmds {
		a := c.Args()
		name := strings.ToUpper(c.Name())
		if len(a) > 1 {
			if v, ok := a[1].(string); ok {
				name += " " + v
			}
		}
		s.cmds = append(s.cmds, name)
	}
}

func (s *seen) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmds, s.pipelines = nil, 0
}

func readIsOnePipelineOfReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := standaloneClient(t, redisAddr(t))
	var sn seen
	c.AddHook(&sn)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, newTestClient(t)), RecheckInterval: time.Hour})
	l := acquireRecord(t, s, "leased", []byte("fp"), replay.LeaseAcquired)
	d := acquireRecord(t, s, "done", []byte("fp"), replay.LeaseAcquired)
	must(t, s.ConfirmRecord(ctx, "done", d.Token, time.Now().Add(time.Hour), []byte("fp"), []byte("result")))
	for _, tc := range []struct {
		id   string
		want replay.LeaseState
	}{{"free", replay.LeaseFree}, {"leased", replay.LeaseBusy}, {"done", replay.LeaseDone}} {
		sn.reset()
		if r, err := s.ReadRecord(ctx, tc.id); err != nil || r.State != tc.want {
			t.Fatalf("ReadRecord(%q) = %+v, %v; want %v", tc.id, r, err, tc.want)
		}
		sn.mu.Lock()
		cmds, pipelines := sn.cmds, sn.pipelines
		sn.mu.Unlock()
		want := []string{"EVALSHA " + readRecordLua.sha, "GET " + sideKey(s.tags[shardOf(tc.id)], tc.id)}
		if len(cmds) == 4 && pipelines == 2 && cmds[0] == want[0] && cmds[1] == want[1] && strings.HasPrefix(cmds[2], "EVAL ") {
			// The server did not know the script (another test flushed
			// its scripts): the pipeline is sent again with EVAL.
			cmds, pipelines = cmds[2:], 1
			want[0] = "EVAL " + readRecordLua.src
		}
		if pipelines != 1 || len(cmds) != 2 || cmds[0] != want[0] || cmds[1] != want[1] {
			t.Fatalf("ReadRecord(%q) sent %q in %d pipelines; want %q in one", tc.id, cmds, pipelines, want)
		}
	}
	must(t, s.RenewLease(ctx, "leased", l.Token, time.Minute))
}

func readAnswersAtMaxmemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newServer(t, "--maxmemory-policy", "noeviction").client()
	s := provisioned(t, c, Options{Prefix: "full:"})
	fp, result := []byte("fp"), bytes.Repeat([]byte("r"), 1000)
	acquireRecord(t, s, "leased", fp, replay.LeaseAcquired)
	d := acquireRecord(t, s, "done", fp, replay.LeaseAcquired)
	must(t, s.ConfirmRecord(ctx, "done", d.Token, time.Now().Add(time.Hour), fp, result))
	// Full: every write command is refused with OOM from now on.
	must(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { c.ConfigSet(context.Background(), "maxmemory", "0") })
	if err := c.Set(ctx, "probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("SET on the full Redis: %v, want OOM", err)
	}
	if r, err := s.AcquireRecord(ctx, "new", time.Minute, fp); err == nil {
		t.Fatalf("AcquireRecord on the full Redis = %+v; want an error", r)
	}
	for _, tc := range []struct {
		id         string
		want       replay.LeaseState
		fp, result []byte
	}{
		{"new", replay.LeaseFree, nil, nil},
		{"leased", replay.LeaseBusy, fp, nil},
		{"done", replay.LeaseDone, fp, result},
	} {
		r, err := s.ReadRecord(ctx, tc.id)
		if err != nil || r.State != tc.want || !bytes.Equal(r.Fingerprint, tc.fp) || !bytes.Equal(r.Result, tc.result) {
			t.Fatalf("ReadRecord(%q) on the full Redis = %v %q (%d result bytes), %v; want %v", tc.id, r.State, r.Fingerprint, len(r.Result), err, tc.want)
		}
	}
	// The script not cached (a restart, SCRIPT FLUSH) is sent as EVAL,
	// which a full Redis runs too.
	must(t, c.ScriptFlush(ctx).Err())
	if r, err := s.ReadRecord(ctx, "done"); err != nil || r.State != replay.LeaseDone {
		t.Fatalf("ReadRecord on the full Redis without the script cached = %v, %v; want done", r.State, err)
	}
}

func readRefusesALostShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c := newTestStore(t)
	until := time.Now().Add(time.Minute)
	wantClaim(t, s, "a", until, true)
	marker := s.tags[shardOf("a")]
	must(t, c.Del(ctx, marker).Err())
	// A loss not fenced yet: refused, and the read raised no fence.
	r, err := s.ReadRecord(ctx, "a")
	if !errors.Is(err, ErrFenced) || !errors.Is(err, ErrUnavailable) || r.State != 0 {
		t.Fatalf("ReadRecord on a shard without its marker = %+v, %v; want ErrFenced", r, err)
	}
	if at, ok := replay.RetryAt(err); !ok || at.Before(until) {
		t.Fatalf("RetryAt = %v, %v; want after %v, when the claim made before the loss expires", at, ok, until)
	}
	wantNoKeys(t, c, "the marker after the read (a read writes nothing)", marker)
	// Fenced by the next write: still refused, until the fence's end.
	_, err = s.Claim(ctx, "a", time.Now().Add(time.Minute))
	wantErr(t, err, ErrFenced, "Claim on a shard without its marker")
	r, err = s.ReadRecord(ctx, "a")
	if !errors.Is(err, ErrFenced) || Reason(err) != whyFenced || r.State != 0 {
		t.Fatalf("ReadRecord on a fenced shard = %+v, %v; want ErrFenced (%q)", r, err, whyFenced)
	}
	// A marker value the store does not know refuses too.
	must(t, c.Set(ctx, marker, "?", 0).Err())
	if _, err := s.ReadRecord(ctx, "a"); !errors.Is(err, ErrUnavailable) || Reason(err) != whyBadMarker {
		t.Fatalf("ReadRecord under an unknown marker value: %v; want %q", err, whyBadMarker)
	}
	// A fence that has ended reads as open, without being opened.
	must(t, c.Set(ctx, marker, "F1", 0).Err())
	must(t, c.Del(ctx, marker+"f").Err())
	if r, err := s.ReadRecord(ctx, "a"); err != nil || r.State != replay.LeaseDone {
		t.Fatalf("ReadRecord after the fence ended = %+v, %v; want done", r, err)
	}
	if v, err := c.Get(ctx, marker).Result(); err != nil || v != "F1" {
		t.Fatalf("the marker after the read = %q, %v; want F1 as it was", v, err)
	}
}
