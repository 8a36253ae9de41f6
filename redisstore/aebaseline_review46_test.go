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

// A server new to the key space (a failover, or a restart: a new run_id)
// that had evicted keys is evidence of loss for a store without
// AllowEviction. When a store of the same key space with AllowEviction
// checks the new server first, it writes the server's shared baseline
// with the evicted count it read (it had no baseline to keep the count
// from), and the store without AllowEviction then compares with it and
// finds nothing: the evictions are never fenced.
func TestAllowEvictionStoreDoesNotHideANewServersEvictions(t *testing.T) {
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var mu sync.Mutex
	servers := map[string]string{"an-older-run": baseline{}.encode(time.Now())} // history
	fences := 0
	inner := answerChecksInfo(func(ctx context.Context, args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		switch strings.ToUpper(fmt.Sprint(args[0])) {
		case "INFO":
			if section, _ := args[len(args)-1].(string); section == "stats" {
				cmd.SetVal("# Stats\r\nevicted_keys:7\r\n")
			} else {
				cmd.SetVal("# Commandstats\r\ncmdstat_get:calls=1,usec=1\r\n")
			}
		case "EVALSHA":
			cmd.SetVal(int64(1))
		case "EVAL":
			mu.Lock()
			fences++
			mu.Unlock()
			cmd.SetVal(time.Now().Add(time.Hour).UnixMilli())
		case "RPUSH", "LTRIM", "LPUSH", "LLEN":
			cmd.SetVal(int64(1))
		default:
			cmd.SetErr(fmt.Errorf("ERR unscripted %v", args))
		}
		return cmd
	}, true)
	f := func(ctx context.Context, args ...any) *redis.Cmd {
		name := strings.ToUpper(fmt.Sprint(args[0]))
		if len(args) < 2 {
			return inner(ctx, args...)
		}
		if key, _ := args[1].(string); (name == "HGET" || name == "HSET" || name == "HLEN") && strings.HasSuffix(key, "servers") {
			cmd := redis.NewCmd(ctx, args...)
			mu.Lock()
			defer mu.Unlock()
			switch name {
			case "HGET":
				if v, ok := servers[args[2].(string)]; ok {
					cmd.SetVal(v)
				} else {
					cmd.SetErr(redis.Nil)
				}
			case "HSET":
				servers[args[2].(string)] = args[3].(string)
				cmd.SetVal(int64(1))
			case "HLEN":
				cmd.SetVal(int64(len(servers)))
			}
			return cmd
		}
		return inner(ctx, args...)
	}
	for _, tt := range []struct {
		name  string
		first bool // a store with AllowEviction checks the new server first
	}{{"alone", false}, {"after a store with AllowEviction", true}} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			for k := range servers {
				if k != "an-older-run" {
					delete(servers, k)
				}
			}
			fences = 0
			mu.Unlock()
			client := func() *redis.Client {
				c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
				c.AddHook(&scriptHook{f: f})
				t.Cleanup(func() { c.Close() })
				return c
			}
			if tt.first {
				ae, err := New(client(), Options{Logger: quietLogger(), RecheckInterval: time.Hour, AllowEviction: true})
				if err != nil {
					t.Fatal(err)
				}
				ae.Claim(ctx, "x", until)
			}
			s, err := New(client(), Options{Logger: quietLogger(), RecheckInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			first, err := s.Claim(ctx, "y", until)
			s.cancels.wg.Wait()
			mu.Lock()
			n := fences
			mu.Unlock()
			if n == 0 {
				t.Errorf("store without AllowEviction: claim = %v, %v and no fence for the 7 keys the new server evicted", first, err)
			}
		})
	}
}
