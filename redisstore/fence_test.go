package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
	"github.com/redis/go-redis/v9"
)

// events records a store's events.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) observe(ev Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(k EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

func TestForgetContractFlushAll(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	replaytest.RunForgetContract(t, func(t *testing.T) replaytest.Store {
		return provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Horizon: 2 * time.Second})
	}, func(t *testing.T) {
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestForgetContractRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	replaytest.RunForgetContract(t, func(t *testing.T) replaytest.Store {
		return provisioned(t, c, Options{Prefix: "forget-restart:", Horizon: 2 * time.Second})
	}, func(t *testing.T) { srv.restart(syscall.SIGKILL) })
}

func TestClaimRefusesWhileFencedThenServesAfterHorizon(t *testing.T) {
	t.Parallel()
	c := newTestClient(t)
	var ev events
	const horizon = 1500 * time.Millisecond
	s, err := New(c, Options{Prefix: uniquePrefix(t, c), Horizon: horizon, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Never provisioned: the first call of a shard finds no marker, fences
	// the shard and refuses; so does every call until the fence opens.
	start := time.Now()
	first, err := s.Claim(ctx, "a", time.Now().Add(time.Second))
	if first || !errors.Is(err, ErrFenced) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("first call on an unprovisioned key space = %v, %v; want ErrFenced", first, err)
	}
	if Reason(err) != whyFenceRaised {
		t.Fatalf("Reason = %q, want %q", Reason(err), whyFenceRaised)
	}
	if strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("error echoes the id: %v", err)
	}
	for _, call := range []func() error{
		func() error { _, err := s.Claim(ctx, "a", time.Now().Add(time.Second)); return err },
		func() error { _, err := s.AcquireLease(ctx, "a", time.Second); return err },
		func() error {
			return s.ConfirmLease(ctx, "a", "0123456789abcdef0123456789abcdef", time.Now().Add(time.Second))
		},
	} {
		if err := call(); !errors.Is(err, ErrFenced) || Reason(err) != whyFenced {
			if time.Since(start) < horizon-200*time.Millisecond {
				t.Fatalf("call while fenced = %v; want ErrFenced (%q)", err, whyFenced)
			}
		}
	}
	if n := ev.count(EventFenceRaised); n != 1 {
		t.Fatalf("%d fence_raised events, want 1", n)
	}
	if ev.count(EventFenced) == 0 {
		t.Fatal("no fenced event for the refusals")
	}
	// After one horizon by Redis's clock the shard opens by itself.
	time.Sleep(time.Until(start.Add(horizon + 100*time.Millisecond)))
	if first, err := s.Claim(ctx, "a", time.Now().Add(time.Second)); !first || err != nil {
		t.Fatalf("claim after the fence = %v, %v; want first", first, err)
	}
}

func TestProvisionOpensOnlyANewKeySpace(t *testing.T) {
	c := newTestClient(t)
	prefix := uniquePrefix(t, c)
	s, err := New(c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, err := s.Provision(ctx); n != Shards || err != nil {
		t.Fatalf("Provision of a new key space = %d, %v; want %d, nil", n, err, Shards)
	}
	if n, err := s.Provision(ctx); n != 0 || err != nil {
		t.Fatalf("Provision again = %d, %v; want 0, nil", n, err)
	}
	if first, err := s.Claim(ctx, "x", time.Now().Add(time.Minute)); !first || err != nil {
		t.Fatalf("claim after Provision = %v, %v", first, err)
	}
	// One shard loses its marker (a partial loss): Provision refuses to
	// reopen it, and that shard alone is fenced.
	lostID, otherID := "x", ""
	for i := 0; otherID == ""; i++ {
		if id := fmt.Sprint("other-", i); shardOf(id) != shardOf(lostID) {
			otherID = id
		}
	}
	marker, _, _ := s.keys(lostID)
	if err := c.Del(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Provision(ctx); n != 0 || !errors.Is(err, ErrConfig) {
		t.Fatalf("Provision with one marker missing = %d, %v; want 0, ErrConfig", n, err)
	}
	if first, err := s.Claim(ctx, lostID, time.Now().Add(time.Minute)); first || !errors.Is(err, ErrFenced) {
		t.Fatalf("claim on the shard that lost its marker = %v, %v; want ErrFenced", first, err)
	}
	if first, err := s.Claim(ctx, otherID, time.Now().Add(time.Minute)); !first || err != nil {
		t.Fatalf("claim on another shard = %v, %v; want first", first, err)
	}
}

func TestUnknownMarkerValueRefuses(t *testing.T) {
	s, c := newTestStore(t)
	marker, _, _ := s.keys("m")
	if err := c.Set(context.Background(), marker, "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := s.Claim(context.Background(), "m", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrUnavailable) || Reason(err) != whyBadMarker {
		t.Fatalf("claim with a corrupt marker = %v, %v; want ErrUnavailable (%q)", first, err, whyBadMarker)
	}
}

func TestClaimsBeyondTheHorizonAreRefused(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Horizon: time.Hour})
	ctx := context.Background()
	far := time.Now().Add(time.Hour + time.Minute)
	if first, err := s.Claim(ctx, "far", far); first || !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyHorizon {
		t.Fatalf("claim past the horizon = %v, %v; want ErrInvalidClaim (%q)", first, err, whyHorizon)
	}
	if n, err := c.Exists(ctx, s.key("far")).Result(); n != 0 || err != nil {
		t.Fatalf("a refused claim wrote its key (%d, %v)", n, err)
	}
	if _, err := s.AcquireLease(ctx, "far", time.Hour+time.Second); !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyLeaseLong {
		t.Fatalf("lease past the horizon: %v", err)
	}
	l, err := s.AcquireLease(ctx, "far", time.Minute)
	if err != nil || l.State != replay.LeaseAcquired {
		t.Fatal(l, err)
	}
	if err := s.ConfirmLease(ctx, "far", l.Token, far); !errors.Is(err, ErrInvalidClaim) {
		t.Fatalf("confirm past the horizon: %v", err)
	}
	// The script checks the horizon by Redis's clock too: an instance
	// whose clock runs ahead cannot stretch it.
	ahead := provisioned(t, c, Options{Prefix: s.Prefix(), Horizon: time.Hour,
		Now: func() time.Time { return time.Now().Add(30 * time.Minute) }})
	if first, err := ahead.Claim(ctx, "far", time.Now().Add(80*time.Minute)); first || !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyHorizon {
		t.Fatalf("claim past Redis's horizon from an instance ahead = %v, %v; want ErrInvalidClaim", first, err)
	}
	if first, err := ahead.Claim(ctx, "near", time.Now().Add(40*time.Minute)); !first || err != nil {
		t.Fatalf("claim within the horizon from an instance ahead = %v, %v; want first", first, err)
	}
}

// ReprovisionNeverUsed opens a key space fenced only because claims came
// before Provision, and refuses (changing nothing) whenever the key space
// or the server shows it served claims or lost data. Each case runs on a
// fresh real redis-server.
func TestReprovisionNeverUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	until := func() time.Time { return time.Now().Add(time.Minute) }
	// fenceAll claims until every shard has been fenced by a claim.
	fenceAll := func(t *testing.T, s *Store) {
		t.Helper()
		for i := 0; i < 2000; i++ {
			s.Claim(ctx, fmt.Sprint("early-", i), until())
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, s *Store, c *redis.Client)
		want  error // nil: it opens
	}{
		{"claims before Provision", func(t *testing.T, s *Store, c *redis.Client) {
			_, err := s.Claim(ctx, "first", until())
			if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "Provision") {
				t.Fatalf("claim before Provision = %v; want ErrFenced naming Provision", err)
			}
			fenceAll(t, s)
			if _, err := s.Provision(ctx); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "ReprovisionNeverUsed") {
				t.Fatalf("Provision of a fenced key space = %v; want ErrFenced naming ReprovisionNeverUsed", err)
			}
		}, nil},
		{"one shard fenced, the rest never touched", func(t *testing.T, s *Store, c *redis.Client) {
			s.Claim(ctx, "first", until())
		}, nil},
		{"a shard open", func(t *testing.T, s *Store, c *redis.Client) {
			fenceAll(t, s)
			c.Set(ctx, s.tags[3], "O", 0)
		}, ErrConfig},
		{"an entry left (a partial loss)", func(t *testing.T, s *Store, c *redis.Client) {
			if _, err := s.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			if first, err := s.Claim(ctx, "kept", until()); !first || err != nil {
				t.Fatal(first, err)
			}
			for i, m := range s.tags {
				if i != shardOf("kept") {
					c.Del(ctx, m)
				}
			}
			c.Set(ctx, s.tags[shardOf("kept")], "F1", 0)
			fenceAll(t, s)
		}, ErrConfig},
		{"FLUSHALL after serving", func(t *testing.T, s *Store, c *redis.Client) {
			if _, err := s.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			s.Claim(ctx, "lost", until())
			c.FlushAll(ctx)
			fenceAll(t, s)
		}, ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			c := srv.client()
			s, err := Open(ctx, c, Options{Prefix: "app:", Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tt.setup(t, s, c)
			s.cancels.wg.Wait() // a check a missing marker started (it fences the key space) has ended
			markers := func() []any {
				v, err := c.MGet(ctx, s.tags[:]...).Result()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			before := fmt.Sprint(markers())
			n, err := s.ReprovisionNeverUsed(ctx)
			if tt.want != nil {
				if !errors.Is(err, tt.want) || Reason(err) == "" || n != 0 {
					t.Fatalf("ReprovisionNeverUsed = %d, %v; want 0, %v with a reason", n, err, tt.want)
				}
				if after := fmt.Sprint(markers()); after != before {
					t.Fatal("a refused ReprovisionNeverUsed changed the markers")
				}
				return
			}
			if err != nil || n != Shards {
				t.Fatalf("ReprovisionNeverUsed = %d, %v; want %d, nil", n, err, Shards)
			}
			if first, err := s.Claim(ctx, "after", until()); !first || err != nil {
				t.Fatalf("claim after ReprovisionNeverUsed = %v, %v; want first", first, err)
			}
			if n, err := s.ReprovisionNeverUsed(ctx); !errors.Is(err, ErrConfig) {
				t.Fatalf("ReprovisionNeverUsed of a key space that served = %d, %v; want ErrConfig", n, err)
			}
		})
	}
}

// Each refusal of ReprovisionNeverUsed on a scripted server whose shards
// are all fenced (never provisioned): the server's counters show a loss,
// an entry exists, or Redis cannot answer; with none of these it opens
// every shard.
func TestReprovisionNeverUsedRefusesOnEvidenceOfLoss(t *testing.T) {
	tests := []struct {
		name        string
		stats, cmds string // INFO stats, INFO commandstats
		scanKeys    []any
		infoErr     error
		want        error // nil: opens every shard
	}{
		{"clean", "evicted_keys:0\r\n", "cmdstat_get:calls=3\r\n", nil, nil, nil},
		{"keys evicted", "evicted_keys:17\r\n", "", nil, nil, ErrConfig},
		{"FLUSHALL ran", "evicted_keys:0\r\n", "cmdstat_flushall:calls=1,usec=5\r\n", nil, nil, ErrConfig},
		{"FLUSHDB ran", "evicted_keys:0\r\n", "cmdstat_flushdb:calls=1,usec=5\r\n", nil, nil, ErrConfig},
		{"an entry left", "evicted_keys:0\r\n", "", []any{"app:{07}:x"}, nil, ErrConfig},
		{"INFO fails", "", "", nil, errors.New("i/o timeout"), ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets := 0
			c := answerChecksInfo(func(ctx context.Context, args ...any) *redis.Cmd {
				cmd := redis.NewCmd(ctx, args...)
				switch args[0] {
				case "GET":
					cmd.SetVal("F1900000000000")
				case "INFO":
					if tt.infoErr != nil {
						cmd.SetErr(tt.infoErr)
					} else if args[1] == "stats" {
						cmd.SetVal(tt.stats)
					} else {
						cmd.SetVal(tt.cmds)
					}
				case "SCAN":
					keys := tt.scanKeys
					if keys == nil {
						keys = []any{}
					}
					cmd.SetVal([]any{"0", keys})
				case "EVAL":
					sets++
					cmd.SetVal(int64(1))
				default:
					cmd.SetErr(fmt.Errorf("unexpected %v", args[0]))
				}
				return cmd
			}, true)
			s, err := New(c, Options{Prefix: "app:", Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			n, err := s.ReprovisionNeverUsed(context.Background())
			switch {
			case tt.want == nil && (err != nil || n != Shards || sets != Shards):
				t.Fatalf("ReprovisionNeverUsed = %d, %v (%d writes); want %d, nil", n, err, sets, Shards)
			case tt.want != nil && (!errors.Is(err, tt.want) || n != 0 || sets != 0):
				t.Fatalf("ReprovisionNeverUsed = %d, %v (%d writes); want 0, %v and no write", n, err, sets, tt.want)
			}
		})
	}
}
