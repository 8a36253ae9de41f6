package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A claim whose probe read an evicting policy has the store check the
// server "at once"; but the check runs in the background of the next
// call, and that call's claim is answered before the check judges
// evicted_keys. When the policy was switched back to noeviction in
// between (the evictions already done), the next claim reads noeviction
// in its probe and is reported first before the fence: an evicted ID is
// accepted again.
func TestPolicyProbeRefusalHoldsUntilTheCheckJudgesEvictions(t *testing.T) {
	ctx := context.Background()
	until := func() time.Time { return time.Now().Add(time.Minute) }
	var mu sync.Mutex
	policy, evicted := "noeviction", 0
	hold := make(chan struct{})
	holding := false
	fences := 0
	inner := answerChecksInfo(func(ctx context.Context, args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		switch strings.ToUpper(fmt.Sprint(args[0])) {
		case "INFO":
			section, _ := args[len(args)-1].(string)
			mu.Lock()
			h, n := holding, evicted
			mu.Unlock()
			if section == "stats" {
				if h {
					<-hold // the check is slow: a few round trips on a real network
				}
				cmd.SetVal(fmt.Sprintf("# Stats\r\nevicted_keys:%d\r\n", n))
			} else {
				cmd.SetVal("# Commandstats\r\ncmdstat_get:calls=1,usec=1\r\n")
			}
		case "EVALSHA":
			cmd.SetVal(int64(1))
		case "EVAL": // the fence script: the check judged the evictions
			mu.Lock()
			fences++
			mu.Unlock()
			cmd.SetVal(time.Now().Add(time.Hour).UnixMilli())
		case "RPUSH", "LTRIM", "LPUSH", "HSET":
			cmd.SetVal(int64(1))
		default:
			cmd.SetErr(fmt.Errorf("ERR unscripted %v", args))
		}
		return cmd
	}, true)
	h := &scriptHook{f: func(ctx context.Context, args ...any) *redis.Cmd {
		if len(args) == 3 && args[0] == "CONFIG" && (args[2] == "maxmemory-policy" || args[2] == "maxmemory") {
			cmd := redis.NewCmd(ctx, args...)
			mu.Lock()
			defer mu.Unlock()
			if args[2] == "maxmemory" {
				cmd.SetVal([]any{"maxmemory", "1073741824"})
			} else {
				cmd.SetVal([]any{"maxmemory-policy", policy})
			}
			return cmd
		}
		return inner(ctx, args...)
	}}
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	c.AddHook(h)
	t.Cleanup(func() { c.Close() })
	s, err := New(c, Options{Logger: quietLogger(), RecheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := s.Claim(ctx, "a", until()); !first || err != nil {
		t.Fatalf("first claim = %v, %v", first, err)
	}
	mu.Lock()
	policy = "allkeys-lru"
	mu.Unlock()
	if first, err := s.Claim(ctx, "b", until()); first || Reason(err) != whyEvictionOn {
		t.Fatalf("claim while the policy evicts = %v, %v; want the probe's refusal", first, err)
	}
	// The operator reverts; 5 keys were evicted meanwhile.
	mu.Lock()
	policy, evicted, holding = "noeviction", 5, true
	mu.Unlock()
	first, err := s.Claim(ctx, "c", until())
	close(hold)
	s.cancels.wg.Wait()
	if first {
		t.Errorf("claim after the probe saw eviction, before the check judged evicted_keys = first (%v): an evicted ID is accepted twice", err)
	}
	mu.Lock()
	n := fences
	mu.Unlock()
	if n == 0 {
		t.Errorf("the check fenced nothing; want the evictions fenced")
	}
}
