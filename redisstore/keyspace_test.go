package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	all []replay.Event
}

func (e *events) observe(ev replay.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(k replay.EventKind) int {
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

// provisionFirst provisions the key space of opts on c, as the deployment
// step does before applications Open it (events and log lines dropped).
func provisionFirst(t testing.TB, c Client, opts Options) {
	t.Helper()
	opts.Observer, opts.Logger = nil, quietLogger()
	s := mustNew(t, c, opts)
	defer s.Close()
	mustProvision(t, s)
}

// TestForgetContract pins ctoken's contract for a store that forgets
// (FLUSHALL, a restart without persistence): nothing is accepted twice.
func TestForgetContract(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forget func(t *testing.T, srv *server)
	}{
		{"flushall", func(t *testing.T, srv *server) { must(t, srv.client().FlushAll(context.Background()).Err()) }},
		{"restart without persistence", func(t *testing.T, srv *server) { srv.restart(syscall.SIGKILL) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			c := srv.client()
			replaytest.RunForgetContract(t, func(t *testing.T) replaytest.Store {
				return provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Horizon: 2 * time.Second})
			}, func(t *testing.T) { tc.forget(t, srv) })
		})
	}
}

// TestFence pins the fence: after evidence of loss a shard or the key space
// refuses until the horizon has passed.
func TestFence(t *testing.T) {
	subtests(t, []subtest{
		{"every step on a lost shard raises it", everyStepOnALostShardRaisesTheFence},
		{"unknown marker value refuses", unknownMarkerValueRefuses},
		{"claims beyond the horizon refused", claimsBeyondTheHorizonAreRefused},
		{"open after an unwatched restart", openAfterAnUnwatchedRestartNamesIt},
	})
}

// The first step on a shard that lost its marker (a partial loss),
// whichever it is, raises the shard's fence and is refused with ErrFenced
// and RetryAt (one fence_raised event); the next is refused as fenced;
// neither writes nor extends an entry.
func everyStepOnALostShardRaisesTheFence(t *testing.T) {
	t.Parallel()
	fp, result := []byte("fp"), []byte("result")
	// held is an ID of the shard of "a", leased before the loss.
	held := "held"
	for i := 0; shardOf(held) != shardOf("a"); i++ {
		held = fmt.Sprint("held-", i)
	}
	steps := []struct {
		name string
		step func(ctx context.Context, s *Store, token string) error
	}{
		{"Claim", func(ctx context.Context, s *Store, _ string) error {
			_, err := s.Claim(ctx, "a", time.Now().Add(time.Minute))
			return err
		}},
		{"AcquireLease", func(ctx context.Context, s *Store, _ string) error {
			_, err := s.AcquireLease(ctx, "a", time.Minute)
			return err
		}},
		{"RenewLease", func(ctx context.Context, s *Store, token string) error {
			return s.RenewLease(ctx, held, token, time.Hour)
		}},
		{"AcquireRecord", func(ctx context.Context, s *Store, _ string) error {
			_, err := s.AcquireRecord(ctx, "a", time.Minute, fp)
			return err
		}},
		{"ConfirmRecord", func(ctx context.Context, s *Store, token string) error {
			return s.ConfirmRecord(ctx, held, token, time.Now().Add(time.Hour), fp, result)
		}},
	}
	for _, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newTestClient(t)
			var ev events
			s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Observer: ev.observe, Logger: quietLogger()})
			l := acquireRecord(t, s, held, fp, replay.LeaseAcquired)
			must(t, c.Del(ctx, s.tags[shardOf("a")]).Err())
			err := tc.step(ctx, s, l.Token)
			if !errors.Is(err, ErrFenced) || !errors.Is(err, ErrUnavailable) || Reason(err) != whyFenceRaised ||
				errors.Is(err, replay.ErrLeaseLost) {
				t.Fatalf("%s on a shard that lost its marker = %v; want ErrFenced (%q), not ErrLeaseLost", tc.name, err, whyFenceRaised)
			}
			if _, ok := replay.RetryAt(err); !ok {
				t.Fatalf("the refusal %v carries no RetryAt", err)
			}
			if strings.Contains(err.Error(), `"a"`) || strings.Contains(err.Error(), `"`+held+`"`) {
				t.Fatalf("the refusal echoes the ID: %v", err)
			}
			// The fence one step raised refuses every step, itself again.
			for _, other := range steps {
				if err := other.step(ctx, s, l.Token); !errors.Is(err, ErrFenced) || Reason(err) != whyFenced {
					t.Fatalf("%s while %s's fence stands = %v; want ErrFenced (%q)", other.name, tc.name, err, whyFenced)
				}
			}
			if r, f := ev.count(replay.EventFenceRaised), ev.count(replay.EventFenced); r != 1 || f != len(steps) {
				t.Fatalf("events: %d fence_raised, %d fenced; want 1 and %d", r, f, len(steps))
			}
			ev.mu.Lock()
			for _, e := range ev.all {
				if e.Store != "redisstore" || e.Table != "" || e.Shard != shardOf("a") || e.Until.IsZero() {
					t.Errorf("event %+v; want one of redisstore about the shard of \"a\" with the fence's end", e)
				}
			}
			ev.mu.Unlock()
			wantNoKeys(t, c, "entry left by the refused steps", s.key("a"))
			if v, err := c.Get(ctx, s.key(held)).Result(); err != nil || !strings.HasPrefix(v, "L") {
				t.Fatalf("the lease after the refusals = %q, %v; want it as it was", v, err)
			}
			if pttl, err := c.PTTL(ctx, s.key(held)).Result(); err != nil || pttl > time.Minute {
				t.Fatalf("PTTL of the lease after the refusals = %v, %v; want at most its minute", pttl, err)
			}
			if m, err := c.Get(ctx, s.tags[shardOf("a")]).Result(); err != nil || !strings.HasPrefix(m, "F") {
				t.Fatalf("marker after the refusals = %q, %v; want a fence", m, err)
			}
		})
	}
}

// TestProvision pins [Store.Provision]: it opens only a new key space and
// refuses on evidence of a previous life.
func TestProvision(t *testing.T) {
	subtests(t, []subtest{
		{"opens only a new key space", provisionOpensOnlyANewKeySpace},
		{"reprovision never used", reprovisionNeverUsed},
		{"reprovision refuses on evidence of loss", reprovisionNeverUsedRefusesOnEvidenceOfLoss},
		{"open refuses an unopened key space", openRefusesAKeySpaceWithoutAnOpenShard},
		{"store serves once provisioned", newStoreServesOnceItsKeySpaceIsProvisioned},
		{"refuses on evidence of a previous life", provisionRefusesOnEvidenceOfAPreviousLife},
	})
}

func provisionOpensOnlyANewKeySpace(t *testing.T) {
	c := newTestClient(t)
	prefix := uniquePrefix(t, c)
	s := mustNew(t, c, Options{Prefix: prefix})
	ctx := context.Background()
	if n, err := s.ProvisionNew(ctx); n != Shards || err != nil {
		t.Fatalf("Provision of a new key space = %d, %v; want %d, nil", n, err, Shards)
	}
	if n, err := s.ProvisionNew(ctx); n != 0 || err != nil {
		t.Fatalf("Provision again = %d, %v; want 0, nil", n, err)
	}
	wantClaim(t, s, "x", time.Now().Add(time.Minute), true)
	// One shard loses its marker (a partial loss): Provision refuses to
	// reopen it, and that shard alone is fenced.
	lostID, otherID := "x", ""
	for i := 0; otherID == ""; i++ {
		if id := fmt.Sprint("other-", i); shardOf(id) != shardOf(lostID) {
			otherID = id
		}
	}
	marker, _, _ := s.keys(lostID)
	must(t, c.Del(ctx, marker).Err())
	if n, err := s.ProvisionNew(ctx); n != 0 || !errors.Is(err, ErrConfig) {
		t.Fatalf("Provision with one marker missing = %d, %v; want 0, ErrConfig", n, err)
	}
	wantRefused(t, s, lostID, time.Now().Add(time.Minute), ErrFenced)
	wantClaim(t, s, otherID, time.Now().Add(time.Minute), true)
}

func unknownMarkerValueRefuses(t *testing.T) {
	s, c := newTestStore(t)
	marker, _, _ := s.keys("m")
	must(t, c.Set(context.Background(), marker, "garbage", 0).Err())
	first, err := s.Claim(context.Background(), "m", time.Now().Add(time.Minute))
	if first || !errors.Is(err, ErrUnavailable) || Reason(err) != whyBadMarker {
		t.Fatalf("claim with a corrupt marker = %v, %v; want ErrUnavailable (%q)", first, err, whyBadMarker)
	}
}

func claimsBeyondTheHorizonAreRefused(t *testing.T) {
	c := newTestClient(t)
	s := provisioned(t, c, Options{Prefix: uniquePrefix(t, c), Horizon: time.Hour})
	ctx := context.Background()
	far := time.Now().Add(time.Hour + time.Minute)
	if first, err := s.Claim(ctx, "far", far); first || !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyHorizon {
		t.Fatalf("claim past the horizon = %v, %v; want ErrInvalidClaim (%q)", first, err, whyHorizon)
	}
	wantNoKeys(t, c, "a refused claim wrote its key", s.key("far"))
	if _, err := s.AcquireLease(ctx, "far", time.Hour+time.Second); !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyLeaseLong {
		t.Fatalf("lease past the horizon: %v", err)
	}
	l := acquireLease(t, s, "far", time.Minute, replay.LeaseAcquired)
	wantErr(t, s.ConfirmLease(ctx, "far", l.Token, far), ErrInvalidClaim, "confirm past the horizon")
	// The script checks the horizon by Redis's clock too: an instance
	// whose clock runs ahead cannot stretch it.
	ahead := provisioned(t, c, Options{Prefix: s.Prefix(), Horizon: time.Hour,
		Now: func() time.Time { return time.Now().Add(30 * time.Minute) }})
	if first, err := ahead.Claim(ctx, "far", time.Now().Add(80*time.Minute)); first || !errors.Is(err, ErrInvalidClaim) || Reason(err) != whyHorizon {
		t.Fatalf("claim past Redis's horizon from an instance ahead = %v, %v; want ErrInvalidClaim", first, err)
	}
	wantClaim(t, ahead, "near", time.Now().Add(40*time.Minute), true)
}

// ReprovisionNeverUsed opens a key space fenced only because claims came
// before Provision (by a store that did not refuse them at Open), and
// refuses (changing nothing) whenever the key space or the server shows a
// previous life: served claims, lost data, a restart of a server without
// persistence, a SWAPDB. Each case runs on a fresh real redis-server.
func reprovisionNeverUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	until := func() time.Time { return time.Now().Add(time.Minute) }
	// fenceAll claims, as a store before the key-space check of Open
	// would, until every shard has been fenced by a claim.
	fenceAll := func(t *testing.T, s *Store) {
		t.Helper()
		s.spaceOK.Store(true)
		for i := 0; i < 2000; i++ {
			s.Claim(ctx, fmt.Sprint("early-", i), until())
		}
	}
	persistent := []string{"--appendonly", "yes", "--appendfsync", "always"}
	tests := []struct {
		name  string
		args  []string // the server's; nil: no persistence
		setup func(t *testing.T, s *Store, srv *server, c *redis.Client)
		want  error // nil: it opens
	}{
		{"claims before Provision", persistent, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			fenceAll(t, s)
			if _, err := s.ProvisionNew(ctx); !errors.Is(err, ErrFenced) || !strings.Contains(Reason(err), "ctoken-store reopen") {
				t.Fatalf("Provision of a fenced key space = %v; want ErrFenced naming ctoken-store reopen", err)
			}
		}, nil},
		{"one shard fenced, the rest never touched", persistent, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			s.spaceOK.Store(true)
			s.Claim(ctx, "first", until())
		}, nil},
		{"a shard open", persistent, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			fenceAll(t, s)
			c.Set(ctx, s.tags[3], "O", 0)
		}, ErrConfig},
		{"an entry left (a partial loss)", persistent, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			mustProvision(t, s)
			wantClaim(t, s, "kept", until(), true)
			for i, m := range s.tags {
				if i != shardOf("kept") {
					c.Del(ctx, m)
				}
			}
			c.Del(ctx, s.ledgerKey())
			c.Set(ctx, s.tags[shardOf("kept")], "F1", 0)
			fenceAll(t, s)
		}, ErrConfig},
		{"the ledger holds an entry", persistent, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			must(t, s.note(ctx, ledgerLoss, "test: a loss was seen"))
			fenceAll(t, s)
		}, ErrConfig},
		{"FLUSHALL after serving", persistent, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			mustProvision(t, s)
			s.Claim(ctx, "lost", until())
			c.FlushAll(ctx)
			fenceAll(t, s)
		}, ErrConfig},
		{"SWAPDB after serving", persistent, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			mustProvision(t, s)
			s.Claim(ctx, "lost", until())
			must(t, c.Do(ctx, "SWAPDB", 0, 1).Err())
			fenceAll(t, s)
		}, ErrConfig},
		{"restart without persistence after serving", nil, func(t *testing.T, s *Store, srv *server, c *redis.Client) {
			mustProvision(t, s)
			s.Claim(ctx, "lost", until())
			srv.restart(syscall.SIGKILL)
			fenceAll(t, s)
		}, ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, tt.args...)
			c := srv.client()
			s := closing(t, mustNew(t, c, Options{Prefix: "app:", Logger: quietLogger(), Timeout: 5 * time.Second}))
			tt.setup(t, s, srv, c)
			waitChecks(t, s) // a check a missing marker started (it fences the key space) has ended
			markers := func() []any {
				v, err := c.MGet(ctx, s.tags[:]...).Result()
				must(t, err)
				return v
			}
			before := fmt.Sprint(markers())
			n, err := s.ReprovisionNeverUsed(ctx)
			if tt.want != nil {
				if !errors.Is(err, tt.want) || !strings.Contains(Reason(err), "ctoken-store reopen") || n != 0 {
					t.Fatalf("ReprovisionNeverUsed = %d, %v; want 0, %v naming ctoken-store reopen", n, err, tt.want)
				}
				if after := fmt.Sprint(markers()); after != before {
					t.Fatal("a refused ReprovisionNeverUsed changed the markers")
				}
				return
			}
			if err != nil || n != Shards {
				t.Fatalf("ReprovisionNeverUsed = %d, %v; want %d, nil", n, err, Shards)
			}
			wantClaim(t, s, "after", until(), true)
			if n, err := s.ReprovisionNeverUsed(ctx); !errors.Is(err, ErrConfig) {
				t.Fatalf("ReprovisionNeverUsed of a key space that served = %d, %v; want ErrConfig", n, err)
			}
		})
	}
}

// Each refusal of ReprovisionNeverUsed on a scripted server with AOF whose
// shards are all fenced (never provisioned): the server's counters show a
// loss, an entry exists, the ledger holds an entry, the server has no
// persistence, or Redis cannot answer; with none of these it opens every
// shard.
func reprovisionNeverUsedRefusesOnEvidenceOfLoss(t *testing.T) {
	tests := []struct {
		name        string
		stats, cmds string // INFO stats, INFO commandstats
		scanKeys    []any
		ledger      []any
		noAOF       bool
		infoErr     error
		want        error // nil: opens every shard
	}{
		{"clean", "evicted_keys:0\r\n", "cmdstat_get:calls=3\r\n", nil, nil, false, nil, nil},
		{"keys evicted", "evicted_keys:17\r\n", "", nil, nil, false, nil, ErrConfig},
		{"FLUSHALL ran", "evicted_keys:0\r\n", "cmdstat_flushall:calls=1,usec=5\r\n", nil, nil, false, nil, ErrConfig},
		{"FLUSHDB ran", "evicted_keys:0\r\n", "cmdstat_flushdb:calls=1,usec=5\r\n", nil, nil, false, nil, ErrConfig},
		{"SWAPDB ran", "evicted_keys:0\r\n", "cmdstat_swapdb:calls=1,usec=5\r\n", nil, nil, false, nil, ErrConfig},
		{"an entry left", "evicted_keys:0\r\n", "", []any{"app:{07}:x"}, nil, false, nil, ErrConfig},
		{"the ledger holds an entry", "evicted_keys:0\r\n", "", nil, []any{"1700000000000 reopened by x"}, false, nil, ErrConfig},
		{"no persistence", "evicted_keys:0\r\n", "", nil, nil, true, nil, ErrConfig},
		{"INFO fails", "", "", nil, nil, false, errors.New("i/o timeout"), ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets := 0
			inner := answerChecksInfo(func(ctx context.Context, args ...any) *redis.Cmd {
				cmd := redis.NewCmd(ctx, args...)
				switch args[0] {
				case "INFO":
					if tt.infoErr != nil {
						cmd.SetErr(tt.infoErr)
					} else if args[1] == "stats" {
						cmd.SetVal(tt.stats)
					} else {
						cmd.SetVal(tt.cmds)
					}
				case "LRANGE": // never nil: an empty list
					cmd.SetVal(append([]any{}, tt.ledger...))
				case "SCAN":
					cmd.SetVal([]any{"0", append([]any{}, tt.scanKeys...)})
				case "EVAL":
					if args[1] == openNeverUsedScript { // not the fence a check raises
						sets++
					}
					cmd.SetVal(int64(1))
				case "RPUSH", "LTRIM":
					cmd.SetVal(int64(1))
				default:
					cmd.SetErr(fmt.Errorf("unexpected %v", args[0]))
				}
				return cmd
			}, true)
			c := clientFunc(func(ctx context.Context, args ...any) *redis.Cmd {
				cmd := redis.NewCmd(ctx, args...)
				switch name, _ := args[len(args)-1].(string); {
				case args[0] == "GET":
					cmd.SetVal("F1900000000000") // every shard fenced
				case args[0] == "CONFIG" && name == "appendonly" && !tt.noAOF:
					cmd.SetVal([]any{name, "yes"})
				case args[0] == "CONFIG" && name == "appendfsync":
					cmd.SetVal([]any{name, "always"})
				default:
					return inner(ctx, args...)
				}
				return cmd
			})
			s := mustNew(t, c, Options{Prefix: "app:", Logger: quietLogger()})
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

// setMarkers writes each shard's marker as mark(i) says: "" deletes it.
func setMarkers(t *testing.T, c *redis.Client, s *Store, mark func(i int) string) {
	t.Helper()
	ctx := context.Background()
	for i, m := range s.tags {
		if v := mark(i); v == "" {
			must(t, c.Del(ctx, m).Err())
		} else {
			must(t, c.Set(ctx, m, v, 0).Err())
		}
	}
}

// Open reads the shard markers after the server checks: with no open
// shard it refuses, naming the next step (ErrConfig when no marker is
// there, ErrFenced with the fence's end when fences are); with some shards
// open it serves, and logs and reports the others once.
func openRefusesAKeySpaceWithoutAnOpenShard(t *testing.T) {
	c := newTestClient(t)
	ctx := context.Background()
	later := time.Now().Add(time.Hour).UnixMilli()
	fence := fmt.Sprintf("F%d", later)
	untilText := time.UnixMilli(later).UTC().Format(time.RFC3339)
	tests := []struct {
		name   string
		mark   func(i int) string
		ledger bool
		want   error  // nil: Open serves
		reason string // wanted Reason
		text   string // in the error's text
		events int    // replay.EventFenced reported by an Open that serves
		log    string // the level of its one log line, "" for none
	}{
		{"never provisioned", func(int) string { return "" }, false, ErrConfig, whyNotProvisioned, "no shard marker", 0, ""},
		{"lost after provisioning", func(int) string { return "" }, true, ErrConfig, whyNotProvisioned, "ledger", 0, ""},
		{"every shard fenced", func(int) string { return fence }, false, ErrFenced, whyKeySpaceFenced, untilText, 0, ""},
		{"fenced and missing", func(i int) string { return map[bool]string{true: fence}[i%2 == 0] }, false, ErrFenced, whyKeySpaceFenced, "32 missing", 0, ""},
		{"every fence ended", func(int) string { return "F1" }, false, nil, "", "", 0, ""},
		{"every shard open", func(int) string { return "O" }, false, nil, "", "", 0, ""},
		{"some open, some fenced", func(i int) string { return map[bool]string{true: fence, false: "O"}[i < 3] }, false, nil, "", "", 3, "WARN"},
		{"some open, some missing", func(i int) string { return map[bool]string{true: "", false: "O"}[i < 2] }, false, nil, "", "", 2, "ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t, c)
			var ev events
			var logs syncBuffer
			opts := Options{Prefix: prefix, Observer: ev.observe, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			probe := mustNew(t, c, opts)
			setMarkers(t, c, probe, tt.mark)
			if tt.ledger {
				must(t, probe.note(ctx, ledgerProvisioned, "test"))
			}
			s, err := Open(ctx, c, opts)
			if tt.want != nil {
				if s != nil || !errors.Is(err, tt.want) || Reason(err) != tt.reason || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("Open = %v, %v; want %v with Reason %q and %q in the text", s, err, tt.want, tt.reason, tt.text)
				}
				if errors.Is(tt.want, ErrFenced) != errors.Is(err, ErrUnavailable) {
					t.Fatalf("Open = %v: only a fenced refusal matches ErrUnavailable", err)
				}
				return
			}
			wantErr(t, err, nil, "Open (it should serve)")
			defer s.Close()
			if n := ev.count(replay.EventFenced); n != tt.events {
				t.Fatalf("%d replay.EventFenced; want %d", n, tt.events)
			}
			if lines := strings.Count(logs.String(), "\n"); (tt.log == "") != (lines == 0) || lines > 1 || !strings.Contains(logs.String(), tt.log) {
				t.Fatalf("log %q; want one %s line", logs.String(), tt.log)
			}
		})
	}
}

// A Store from New checks the key space before its first call and refuses
// like Open, writing nothing (no fence); the refusal is not permanent: once
// an operator provisions the prefix, the waiting store serves.
func newStoreServesOnceItsKeySpaceIsProvisioned(t *testing.T) {
	c := newTestClient(t)
	ctx := context.Background()
	prefix := uniquePrefix(t, c)
	s := closing(t, mustNew(t, c, Options{Prefix: prefix, Logger: quietLogger()}))
	for range 3 {
		if first, err := s.Claim(ctx, "a", time.Now().Add(time.Minute)); first || !errors.Is(err, ErrConfig) || Reason(err) != whyNotProvisioned {
			t.Fatalf("claim before Provision = %v, %v; want ErrConfig (%q)", first, err, whyNotProvisioned)
		}
	}
	wantNoKeys(t, c, "the markers after a refused claim", s.tags[:]...)
	provisionFirst(t, c, Options{Prefix: prefix})
	waitFor(t, keySpaceRetry+2*time.Second, "a claim after Provision to be first", func() bool {
		first, err := s.Claim(ctx, "a", time.Now().Add(time.Minute))
		if !(first && err == nil) && !errors.Is(err, ErrConfig) {
			t.Fatalf("claim after Provision = %v, %v; want first, or ErrConfig until the store reads the key space again", first, err)
		}
		return first && err == nil
	})
}

// Provision opens a new key space once, records it in the ledger, and
// refuses (writing nothing) whenever the prefix or the server shows a
// previous life. Each case runs on a fresh real redis-server (the loss
// counters are the server's).
func provisionRefusesOnEvidenceOfAPreviousLife(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		setup  func(t *testing.T, s *Store, c *redis.Client)
		want   error // nil: it provisions
		reason string
	}{
		{"a new prefix", func(*testing.T, *Store, *redis.Client) {}, nil, ""},
		{"the ledger holds an entry", func(t *testing.T, s *Store, c *redis.Client) {
			must(t, s.note(ctx, ledgerLoss, "test: restart without persistence"))
		}, ErrConfig, whyPreviousLife},
		{"an entry under the prefix", func(t *testing.T, s *Store, c *redis.Client) {
			c.Set(ctx, s.tags[5]+":left", "1x", 0)
		}, ErrConfig, whyPreviousLife},
		{"a shard fenced", func(t *testing.T, s *Store, c *redis.Client) {
			c.Set(ctx, s.tags[9], fmt.Sprintf("F%d", time.Now().Add(time.Hour).UnixMilli()), 0)
		}, ErrFenced, whyProvisionFenced},
		{"FLUSHDB ran", func(t *testing.T, s *Store, c *redis.Client) { c.FlushDB(ctx) }, ErrConfig, whyPreviousLife},
		{"FLUSHALL ran", func(t *testing.T, s *Store, c *redis.Client) { c.FlushAll(ctx) }, ErrConfig, whyPreviousLife},
		{"SWAPDB ran", func(t *testing.T, s *Store, c *redis.Client) { c.Do(ctx, "SWAPDB", 0, 1) }, ErrConfig, whyPreviousLife},
		{"keys evicted", func(t *testing.T, s *Store, c *redis.Client) {
			for _, kv := range [][2]string{{"maxmemory-policy", "allkeys-random"}, {"maxmemory", "1"}} {
				must(t, c.ConfigSet(ctx, kv[0], kv[1]).Err())
			}
			c.Set(ctx, "other-app:a", "x", 0) // evicts what it can, then is refused
			for _, kv := range [][2]string{{"maxmemory", "0"}, {"maxmemory-policy", "noeviction"}} {
				must(t, c.ConfigSet(ctx, kv[0], kv[1]).Err())
			}
			c.Set(ctx, "other-app:b", "x", 0)
		}, ErrConfig, whyPreviousLife},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newServer(t).client()
			if tt.name == "keys evicted" {
				c.Set(ctx, "other-app:0", "x", 0) // something to evict
			}
			s := closing(t, mustNew(t, c, Options{Prefix: "app:", Logger: quietLogger(), Horizon: 2 * time.Hour}))
			tt.setup(t, s, c)
			before, _ := c.MGet(ctx, s.tags[:]...).Result()
			ledgerBefore, _ := s.readLedger(ctx)
			n, err := s.ProvisionNew(ctx)
			if tt.want != nil {
				if n != 0 || !errors.Is(err, tt.want) || Reason(err) != tt.reason || !strings.Contains(Reason(err), "ctoken-store") {
					t.Fatalf("Provision = %d, %v; want 0, %v (%q)", n, err, tt.want, tt.reason)
				}
				after, _ := c.MGet(ctx, s.tags[:]...).Result()
				ledgerAfter, _ := s.readLedger(ctx)
				if fmt.Sprint(after) != fmt.Sprint(before) || len(ledgerAfter) != len(ledgerBefore) {
					t.Fatal("a refused Provision wrote")
				}
				return
			}
			if n != Shards || err != nil {
				t.Fatalf("Provision = %d, %v; want %d, nil", n, err, Shards)
			}
			ledger, err := s.readLedger(ctx)
			if err != nil || len(ledger) != 1 || ledger[0].Kind != ledgerProvisioned || !strings.Contains(ledger[0].Detail, "horizon 2h0m0s") {
				t.Fatalf("ledger after Provision = %+v, %v; want one provisioned entry naming the horizon", ledger, err)
			}
			if n, err := s.ProvisionNew(ctx); n != 0 || err != nil {
				t.Fatalf("Provision again = %d, %v; want 0, nil", n, err)
			}
			if again, _ := s.readLedger(ctx); len(again) != 1 {
				t.Fatalf("Provision again wrote to the ledger: %+v", again)
			}
		})
	}
}

// A server without persistence that restarted while no store ran looks
// exactly like a prefix never provisioned: Open refuses, and its error
// says that this server loses every marker in a restart and when it last
// started, so the operator can tell a lost key space from a new one.
func openAfterAnUnwatchedRestartNamesIt(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := srv.client()
	opts := Options{Prefix: "pay:", Logger: quietLogger()}
	s := provisioned(t, c, opts)
	wantClaim(t, s, "before", time.Now().Add(time.Minute), true)
	s.Close()
	srv.restart(syscall.SIGKILL)
	_, err := Open(context.Background(), c, opts)
	if !errors.Is(err, ErrConfig) || Reason(err) != whyNotProvisioned || !strings.Contains(err.Error(), "keeps no data across a restart and started") ||
		!strings.Contains(err.Error(), "`ctoken-store provision` fences it") || strings.Contains(err.Error(), "then `ctoken-store reopen`") {
		t.Fatalf("Open after the restart = %v; want ErrConfig naming the restart", err)
	}
}
