package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// TestUnknownHistory pins a key space whose history is unknown (no marker,
// no ledger, no evidence either way): Provision fences it for one
// lifetime, and only the operator's statement (ProvisionNew) opens it.
func TestUnknownHistory(t *testing.T) {
	subtests(t, []subtest{
		{"provision fences it", provisionFencesAKeySpaceOfUnknownHistory},
		{"provision -new opens only its fence", provisionNewOpensAFenceForUnknownHistoryOnly},
		{"provision -new is recorded", provisionNewRecordsTheOperatorsStatement},
		{"restart, then the runbook", restartWithoutPersistenceThenProvisionAcceptsNothing},
		{"provision -new losing to a fence", provisionNewThatLosesToAFenceReportsIt},
	})
}

// Provision on a key space with no marker and no evidence either way
// fences every shard for one lifetime (the recorded one, else the
// Horizon) instead of opening it: it returns 0 and ErrFenced whose
// RetryAt is the fence's end, records it in the ledger, Status shows when
// reopening becomes safe, Open refuses until then, and Provision again
// refuses while it lasts, writing nothing.
func provisionFencesAKeySpaceOfUnknownHistory(t *testing.T) {
	t.Parallel()
	const horizon = time.Hour
	tests := []struct {
		name   string
		record string // <prefix>lifetime before Provision; "" none
		want   time.Duration
	}{
		{"no lifetime recorded: the Horizon", "", horizon},
		{"a recorded lifetime", "90000", 90 * time.Second},
		{"a recorded lifetime longer than the Horizon", "7200000", 2 * time.Hour},
		{"an unreadable lifetime record: the Horizon", "not-a-number", horizon},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := newServer(t).client()
			opts := Options{Prefix: "unknown:", Logger: quietLogger(), Horizon: horizon}
			s := closing(t, mustNew(t, c, opts))
			if tt.record != "" {
				must(t, c.Set(ctx, s.lifetimeKey(), tt.record, 0).Err())
			}
			before := time.Now()
			n, err := s.Provision(ctx)
			after := time.Now()
			at, ok := replay.RetryAt(err)
			if n != 0 || !errors.Is(err, ErrFenced) || Reason(err) != whyProvisionedFenced || !ok {
				t.Fatalf("Provision = %d, %v; want 0, ErrFenced (%q) with RetryAt", n, err, whyProvisionedFenced)
			}
			if at.Before(before.Add(tt.want-time.Second)) || at.After(after.Add(tt.want+time.Second)) {
				t.Fatalf("fenced until %v from %v; want one lifetime, %v", at, before, tt.want)
			}
			st := mustStatus(t, s)
			if st.Fenced != Shards || st.Open != 0 || !st.FencedUntil.Equal(at) || st.ReopenSafeAt.Before(at) {
				t.Fatalf("Status = %d fenced, %d open, until %v, safe from %v; want every shard fenced until %v", st.Fenced, st.Open, st.FencedUntil, st.ReopenSafeAt, at)
			}
			if len(st.Ledger) != 1 || st.Ledger[0].Kind != ledgerProvisioned || !strings.Contains(st.Ledger[0].Detail, "history unknown") || !strings.Contains(st.Ledger[0].Detail, tt.want.String()) {
				t.Fatalf("ledger = %+v; want one provisioned entry naming the unknown history and %v", st.Ledger, tt.want)
			}
			_, err = Open(ctx, c, opts)
			wantErr(t, err, ErrFenced, "Open while fenced")
			markers, _ := c.MGet(ctx, s.tags[:]...).Result()
			if n, err := s.Provision(ctx); n != 0 || !errors.Is(err, ErrFenced) {
				t.Fatalf("Provision again = %d, %v; want 0, ErrFenced", n, err)
			}
			again, _ := c.MGet(ctx, s.tags[:]...).Result()
			if ledger, _ := s.readLedger(ctx); len(ledger) != 1 || fmt.Sprint(again) != fmt.Sprint(markers) {
				t.Fatalf("a refused Provision wrote: ledger %+v", ledger)
			}
		})
	}
}

// ProvisionNew on a key space Provision fenced for unknown history is the
// operator's statement that arrived late: it opens the key space when
// that fence is its only history, and refuses, writing nothing, when
// anything else shows a previous life.
func provisionNewOpensAFenceForUnknownHistoryOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		after  func(t *testing.T, s *Store, c *redis.Client) // after Provision's fence
		want   error                                         // nil: opened
		reason string
	}{
		{"the fence alone: opened", func(*testing.T, *Store, *redis.Client) {}, nil, ""},
		{"an entry under the prefix", func(t *testing.T, s *Store, c *redis.Client) {
			c.Set(context.Background(), s.tags[5]+":left", "1x", 0)
		}, ErrConfig, whyPreviousLife},
		{"a loss in the ledger", func(t *testing.T, s *Store, c *redis.Client) {
			must(t, s.note(context.Background(), ledgerLoss, "test: a loss"))
		}, ErrFenced, whyProvisionFenced},
		{"SWAPDB ran, swapped back", func(t *testing.T, s *Store, c *redis.Client) {
			c.Do(context.Background(), "SWAPDB", 0, 1)
			c.Do(context.Background(), "SWAPDB", 0, 1)
		}, ErrConfig, whyPreviousLife},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := newServer(t).client()
			opts := Options{Prefix: "late:", Logger: quietLogger(), Horizon: time.Hour}
			s := closing(t, mustNew(t, c, opts))
			_, err := s.Provision(ctx)
			wantErr(t, err, ErrFenced, "Provision")
			tt.after(t, s, c)
			markers, _ := c.MGet(ctx, s.tags[:]...).Result()
			ledger, _ := s.readLedger(ctx)
			n, err := s.ProvisionNew(ctx)
			if tt.want != nil {
				again, _ := c.MGet(ctx, s.tags[:]...).Result()
				ledgerAgain, _ := s.readLedger(ctx)
				if n != 0 || !errors.Is(err, tt.want) || Reason(err) != tt.reason || fmt.Sprint(again) != fmt.Sprint(markers) || len(ledgerAgain) != len(ledger) {
					t.Fatalf("ProvisionNew = %d, %v; want 0, %v (%q), nothing written", n, err, tt.want, tt.reason)
				}
				return
			}
			if n != Shards || err != nil {
				t.Fatalf("ProvisionNew = %d, %v; want %d, nil", n, err, Shards)
			}
			app := closing(t, mustOpen(t, c, opts))
			wantClaim(t, app, "x", time.Now().Add(time.Minute), true)
		})
	}
}

// ProvisionNew is the operator's statement that the prefix never held
// claims: it opens the key space at once, and the ledger and the log say
// who said so (the statement, not a proof).
func provisionNewRecordsTheOperatorsStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	var logs syncBuffer
	s := closing(t, mustNew(t, srv.client(), Options{Prefix: "new:", Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	if n, err := s.ProvisionNew(ctx); n != Shards || err != nil {
		t.Fatalf("ProvisionNew = %d, %v; want %d, nil", n, err, Shards)
	}
	ledger, err := s.readLedger(ctx)
	if err != nil || len(ledger) != 1 || !strings.Contains(ledger[0].Detail, "stated new by the operator") {
		t.Fatalf("ledger = %+v, %v; want the operator's statement", ledger, err)
	}
	if !strings.Contains(logs.String(), "operator's statement that the prefix never held claims") {
		t.Fatalf("log = %q; want the statement logged", logs.String())
	}
}

// The runbook after a restart without persistence while no application
// ran, followed literally: Status shows no marker and no ledger, and the
// server's start; Provision (without the operator's statement) fences the
// key space for its lifetime; a waiting application (a Store from New)
// retries every ID claimed before the restart with its own until and a
// fresh ID: 0 of the earlier IDs is accepted again, and it serves once one
// lifetime has passed since Provision. On redis-server and, when
// installed, valkey-server.
func restartWithoutPersistenceThenProvisionAcceptsNothing(t *testing.T) {
	t.Parallel()
	flavors := []struct{ name, bin string }{{"redis", redisBinary(t, "CTOKEN_REDIS_SERVER", "redis-server")}}
	if bin := valkeyBinary(); bin != "" && bin != flavors[0].bin { // not twice under CTOKEN_REDIS_FLAVOR=valkey
		flavors = append(flavors, struct{ name, bin string }{"valkey", bin})
	}
	const lifetime = 3 * time.Second // the Horizon: every claim's lifetime rounds up to it
	const n = 500
	for _, fl := range flavors {
		t.Run(fl.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := newServerBin(t, fl.bin)
			// MaxSkew a second: a claim's script may run long after the
			// instance stamped it on a loaded machine (100 ms failed a CI
			// run beside two CPU-bound processes as "clock behind").
			opts := Options{Prefix: "runbook:", Logger: quietLogger(), Horizon: lifetime, MaxSkew: time.Second}
			provisionFirst(t, srv.client(), opts)
			app := mustOpen(t, srv.client(), opts)
			untils := make(map[string]time.Time, n)
			for i := range n {
				id, until := fmt.Sprint("tok-", i), time.Now().Add(lifetime-opts.MaxSkew-100*time.Millisecond)
				wantClaim(t, app, id, until, true)
				untils[id] = until
			}
			if app.Lifetime() != lifetime {
				t.Fatalf("the key space's lifetime = %v; want %v", app.Lifetime(), lifetime)
			}
			app.Close() // no application runs at the restart
			srv.kill()
			must(t, srv.start())
			// The runbook: status, then provision.
			op := closing(t, mustNew(t, srv.client(), Options{Prefix: "runbook:", Logger: quietLogger(), Horizon: lifetime}))
			st := mustStatus(t, op)
			if st.Missing != Shards || len(st.Ledger) != 0 || len(st.Servers) != 1 || st.Servers[0].AppendOnly != "no" ||
				st.Servers[0].StartedAt.IsZero() || time.Since(st.Servers[0].StartedAt) > 10*time.Second {
				t.Fatalf("status after the restart = %+v; want every marker missing, no ledger, and the server's start seconds ago", st)
			}
			t0 := time.Now()
			_, err := op.Provision(ctx)
			end, ok := replay.RetryAt(err)
			if !errors.Is(err, ErrFenced) || !ok {
				t.Fatalf("Provision after the restart = %v; want ErrFenced for one lifetime", err)
			}
			if st, err = op.Status(ctx); err != nil || st.Fenced != Shards || st.ReopenSafeAt.Before(end) {
				t.Fatalf("status after Provision = %+v, %v; want every shard fenced, safe to reopen from %v", st, err, end)
			}
			waiting := closing(t, mustNew(t, srv.client(), opts))
			twice, refused, served, lastFenced := replayUntilServed(t, waiting, untils, func() string { return fmt.Sprint("fresh-", time.Now().UnixNano()) }, t0, lifetime+10*time.Second)
			t.Logf("%s: %d earlier IDs accepted twice (%d refusals of them while fenced); served %v after Provision, lifetime %v", fl.name, len(twice), refused, served.Round(time.Millisecond), lifetime)
			if len(twice) != 0 {
				t.Fatalf("%d of %d earlier IDs accepted twice; want 0", len(twice), n)
			}
			// Never before the lifetime (the safety property); after it,
			// no fresh claim begun past the fence's end refused, but for
			// the keySpaceRetry a Store from New keeps its refusal (a
			// loaded machine may be slow to serve, never early).
			if served < lifetime-100*time.Millisecond {
				t.Fatalf("served %v after Provision; want the key space's lifetime, %v", served, lifetime)
			}
			if !lastFenced.Before(end.Add(keySpaceRetry)) {
				t.Fatalf("a fresh claim begun %v after the fence's end was refused; want none past %v", lastFenced.Sub(end), keySpaceRetry)
			}
		})
	}
}

// replayUntilServed is the application that waits after an unwatched
// loss: from t0 it claims every ID of untils again with its own until
// (dropping each once it has expired: a caller refuses it before the
// store), then an ID from fresh, and again, until the fresh ID is first,
// at most limit after t0. It returns the earlier IDs that were first
// again (accepted twice), how many claims of them were refused with
// ErrFenced, when a fresh ID was first, since t0, and when the last
// fresh claim refused with ErrFenced began (before any fence's end, on
// the one clock of the host, or a fence refused past its end).
func replayUntilServed(t *testing.T, s *Store, untils map[string]time.Time, fresh func() string, t0 time.Time, limit time.Duration) (twice []string, refused int, served time.Duration, lastFenced time.Time) {
	t.Helper()
	ctx := context.Background()
	for served == 0 {
		if time.Since(t0) > limit {
			t.Fatalf("not served within %v of Provision", limit)
		}
		for id, until := range untils {
			if !time.Now().Before(until) {
				delete(untils, id)
				continue
			}
			first, err := s.Claim(ctx, id, until)
			switch {
			case first:
				twice = append(twice, id)
			case errors.Is(err, ErrFenced):
				refused++
			case err != nil && !errors.Is(err, ErrInvalidClaim):
				t.Fatalf("claim of an earlier ID: %v", err)
			}
		}
		began := time.Now()
		first, err := s.Claim(ctx, fresh(), began.Add(time.Second))
		switch {
		case first:
			served = time.Since(t0)
		case errors.Is(err, replay.ErrExpired):
			// The call outlasted the fresh ID's second on a loaded
			// machine: Redis refused it as expired; try another.
		case err != nil && !errors.Is(err, ErrFenced):
			t.Fatalf("fresh claim: %v", err)
		default:
			lastFenced = began
			time.Sleep(20 * time.Millisecond)
		}
	}
	return twice, refused, served, lastFenced
}

// provisionBeforeFirstOpen is a client hook that runs another operator's
// Provision just before the client's first SET of a shard marker: the
// race of two operators, one with -new, ordered.
type provisionBeforeFirstOpen struct {
	other *Store
	once  sync.Once
	err   error
}

func (h *provisionBeforeFirstOpen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *provisionBeforeFirstOpen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 4 && strings.EqualFold(fmt.Sprint(a[0]), "set") && fmt.Sprint(a[3]) == "NX" {
			h.once.Do(func() { _, h.err = h.other.Provision(ctx) })
		}
		return next(ctx, cmd)
	}
}

func (h *provisionBeforeFirstOpen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProvisionNew that loses the race to another operator's Provision (which
// fences the key space for unknown history between ProvisionNew's read
// and its writes) reports the fence (ErrFenced, its end), never "opened",
// and writes no statement of its own; the key space stays fenced.
func provisionNewThatLosesToAFenceReportsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t)
	other := closing(t, mustNew(t, srv.client(), Options{Prefix: "race:", Logger: quietLogger()}))
	c := srv.client()
	hook := &provisionBeforeFirstOpen{other: other}
	c.AddHook(hook)
	s := closing(t, mustNew(t, c, Options{Prefix: "race:", Logger: quietLogger()}))
	n, err := s.ProvisionNew(ctx)
	if !errors.Is(hook.err, ErrFenced) {
		t.Fatalf("the other operator's Provision = %v; want ErrFenced (unknown history)", hook.err)
	}
	if at, ok := replay.RetryAt(err); !errors.Is(err, ErrFenced) || !ok || at.IsZero() {
		t.Fatalf("ProvisionNew after the fence = %d, %v; want ErrFenced with its end", n, err)
	}
	ks, err := s.readKeySpace(ctx)
	if err != nil || ks.fenced != Shards {
		t.Fatalf("key space = %s, %v; want every shard fenced", ks, err)
	}
	ledger := mustLedger(t, s)
	for _, e := range ledger {
		if strings.Contains(e.Detail, "stated new by the operator") {
			t.Fatalf("ledger holds %q: the statement of a ProvisionNew that opened nothing", e.Detail)
		}
	}
}
