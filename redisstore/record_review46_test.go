package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// The implied WAITAOF (durability.go) is documented as covering "every
// write" (SECURITY.md, docs/fleet.md): once AOF is switched off at run
// time, the server refuses WAITAOF and the write is refused before the
// recheck fences. A record's steps (AcquireRecord, ConfirmRecord) must be
// refused like a Claim; the recheck is held off (RecheckInterval one
// minute) so only the wait can refuse. Needs WAITAOF (Redis 7.2+, Valkey 8).
func TestRecordStepsWaitForTheImpliedAOFWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := srv.client()
	s := provisioned(t, c, Options{Prefix: "implied-rec:", Logger: quietLogger(), Timeout: 5 * time.Second, RecheckInterval: time.Minute})
	if s.dur.implied == nil || !s.dur.implied.on.Load() {
		t.Skip("the implied local AOF wait is off (no WAITAOF on this server)")
	}
	leased, err := s.AcquireRecord(ctx, "rec-1", time.Minute, []byte("fp"))
	if err != nil || leased.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord before the switch = %+v, %v", leased, err)
	}
	if err := c.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("Claim", func(t *testing.T) {
		if first, err := s.Claim(ctx, "claim-after", time.Now().Add(time.Minute)); !errors.Is(err, ErrNotDurable) {
			t.Fatalf("Claim after appendonly no = %v, %v; want ErrNotDurable", first, err)
		}
	})
	t.Run("ConfirmRecord", func(t *testing.T) {
		err := s.ConfirmRecord(ctx, "rec-1", leased.Token, time.Now().Add(time.Minute), []byte("fp"), []byte("result"))
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("ConfirmRecord after appendonly no = %v; want ErrNotDurable", err)
		}
	})
	t.Run("AcquireRecord", func(t *testing.T) {
		r, err := s.AcquireRecord(ctx, "rec-2", time.Minute, []byte("fp"))
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("AcquireRecord after appendonly no = %+v, %v; want ErrNotDurable", r.State, err)
		}
	})
}

// Under the ACL docs/fleet.md documents for the fleet's user (with the
// hash commands and EXISTS it recommends), an idempotency record is
// written and replayed: the confirm script's RENAME and PEXPIREAT run
// under the same ACL as the script's caller.
func TestRecordStepsRunUnderTheDocumentedACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	admin := srv.client()
	rules := []any{"ACL", "SETUSER", "fleetrec", "on", ">pw", "-@all", "+get", "+set", "+del", "+pttl", "+eval", "+evalsha",
		"+time", "+role", "+info", "+exists", "+hget", "+hset", "+hlen", "+hgetall", "+hdel", "+rpush", "+ltrim", "+rename", "+pexpireat", "~aclrec:*"}
	if err := admin.Do(ctx, rules...).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), Username: "fleetrec", Password: "pw"})
	t.Cleanup(func() { c.Close() })
	provisioned(t, admin, Options{Prefix: "aclrec:", Logger: quietLogger()})
	s, err := Open(ctx, c, Options{Prefix: "aclrec:", Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open under the ACL: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	r, err := s.AcquireRecord(ctx, "k", time.Minute, []byte("fp"))
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord under the ACL = %+v, %v", r, err)
	}
	if err := s.ConfirmRecord(ctx, "k", r.Token, time.Now().Add(time.Minute), []byte("fp"), []byte("result")); err != nil {
		t.Fatalf("ConfirmRecord under the documented ACL: %v", err)
	}
	got, err := s.AcquireRecord(ctx, "k", time.Minute, []byte("fp"))
	if err != nil || got.State != replay.LeaseDone || string(got.Result) != "result" {
		t.Fatalf("replay under the ACL = %+v, %v", got, err)
	}
	// Without +rename the confirm fails closed, and says why: the ACL,
	// not a staged record that expired.
	if err := admin.Do(ctx, "ACL", "SETUSER", "fleetrec", "-rename").Err(); err != nil {
		t.Fatal(err)
	}
	r, err = s.AcquireRecord(ctx, "k2", time.Minute, []byte("fp"))
	if err != nil || r.State != replay.LeaseAcquired {
		t.Fatalf("AcquireRecord under the ACL = %+v, %v", r, err)
	}
	err = s.ConfirmRecord(ctx, "k2", r.Token, time.Now().Add(time.Minute), []byte("fp"), []byte("result"))
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "expired") ||
		!(strings.Contains(strings.ToLower(err.Error()), "permission") || strings.Contains(err.Error(), "can't run this command")) {
		t.Fatalf("ConfirmRecord without +rename = %v; want ErrUnavailable naming the ACL", err)
	}
}

// TestConfirmRecordLeavesNoStagingKey's "fenced" case predates the
// key-space check (a Store from New on a key space never provisioned now
// refuses before anything is sent); the same check on a provisioned key
// space whose shard marker is lost: the confirm raises the fence, then
// finds it, and leaves no staging or side key.
func TestConfirmRecordOnALostShardLeavesNoStagingKey(t *testing.T) {
	ctx := context.Background()
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Logger: quietLogger()})
	marker := s.tags[shardOf("a")]
	if err := c.Del(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := s.ConfirmRecord(ctx, "a", newToken(), time.Now().Add(time.Hour), []byte("fp"), []byte("result"))
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("ConfirmRecord on a lost shard = %v; want ErrFenced", err)
		}
	}
	for _, k := range keysOf(t, c, s) {
		if strings.Contains(k, "}s:") || strings.Contains(k, "}r:") {
			t.Fatalf("key %q left beside the fence marker", k)
		}
	}
}
