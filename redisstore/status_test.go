package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// TestStatus pins [Store.Status]: shards, ledger, server and the provisioned
// horizon (a Horizon other than the asker's, or none recorded:
// TestLedger/"horizon is the newest recorded" and cmd/ctoken-store's
// TestStatusShowsTheKeySpacesHorizonNotTheFlagsDefault).
func TestStatus(t *testing.T) {
	subtests(t, []subtest{
		{"shards, ledger and server", statusReportsShardsLedgerAndServer},
	})
}

// Status reports the shards by marker, the latest fence end, the ledger
// and what the server shows now, and writes nothing.
func statusReportsShardsLedgerAndServer(t *testing.T) {
	t.Parallel()
	c := newServer(t).client()
	ctx := context.Background()
	s := provisioned(t, c, Options{Prefix: "app:", Logger: quietLogger()})
	ends := []time.Time{time.Now().Add(time.Hour), time.Now().Add(2 * time.Hour), time.Now().Add(3 * time.Hour)}
	for i, end := range ends {
		c.Set(ctx, s.tags[i], fmt.Sprintf("F%d", end.UnixMilli()), 0)
	}
	c.Set(ctx, s.tags[3], "F1", 0) // a fence that ended: open
	c.Del(ctx, s.tags[4], s.tags[5])
	c.Do(ctx, "SWAPDB", 1, 2)
	before, _ := c.MGet(ctx, s.tags[:]...).Result()
	st := mustStatus(t, s)
	if st.Prefix != "app:" || st.Horizon != DefaultHorizon || st.ProvisionedHorizon != DefaultHorizon || st.Open != Shards-5 || st.Fenced != 3 || st.Missing != 2 {
		t.Fatalf("Status = %+v; want 59 open, 3 fenced, 2 missing", st)
	}
	if !st.FencedUntil.Equal(time.UnixMilli(ends[2].UnixMilli())) {
		t.Fatalf("FencedUntil = %v; want the latest fence end %v", st.FencedUntil, ends[2])
	}
	if len(st.Ledger) != 1 || st.Ledger[0].Kind != ledgerProvisioned {
		t.Fatalf("Ledger = %+v; want the provisioned entry", st.Ledger)
	}
	runID := c.InfoMap(ctx, "server").Item("Server", "run_id")
	if len(st.Servers) != 1 {
		t.Fatalf("Servers = %+v; want one", st.Servers)
	}
	got := st.Servers[0]
	if since := time.Since(got.StartedAt); since < 0 || since > time.Minute {
		t.Fatalf("StartedAt = %v; want the server's start, seconds ago", got.StartedAt)
	}
	got.StartedAt = time.Time{}
	want := ServerStatus{RunID: runID, Role: "master", AppendOnly: "no", AppendFsync: "everysec", Save: "",
		MaxmemoryPolicy: "noeviction", Maxmemory: "0", Swapdb: 1}
	if got != want {
		t.Fatalf("server = %+v; want %+v", got, want)
	}
	if after, _ := c.MGet(ctx, s.tags[:]...).Result(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("Status changed the markers")
	}
}

// TestReopen pins [Store.Reopen]: it names who accepted the risk and why,
// and refuses a server Open refuses.
func TestReopen(t *testing.T) {
	subtests(t, []subtest{
		{"refuses without who and why", reopenRefusesWithoutWhoAndWhy},
		{"opens and records who accepted", reopenOpensTheKeySpaceAndRecordsWhoAcceptedTheRisk},
		{"refuses a server open refuses", reopenRefusesAServerOpenRefuses},
	})
}

// Reopen refuses, before talking to Redis, without who accepts the risk
// and why, each one line of at most 200 bytes.
func reopenRefusesWithoutWhoAndWhy(t *testing.T) {
	s := mustNew(t, clientFunc(func(ctx context.Context, args ...any) *redis.Cmd {
		t.Errorf("Reopen sent %v", args)
		return redis.NewCmd(ctx, args...)
	}), Options{Logger: quietLogger()})
	tests := []struct{ name, by, why string }{
		{"no one", "", "INC-1"},
		{"blank", "  ", "INC-1"},
		{"no reason", "alice", ""},
		{"two lines", "alice", "INC-1\nand more"},
		{"a control character", "alice\x1b[2J", "INC-1"},
		{"too long", "alice", strings.Repeat("x", maxAcceptLen+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n, err := s.Reopen(context.Background(), tt.by, tt.why); n != 0 || !errors.Is(err, ErrConfig) || Reason(err) == "" {
				t.Fatalf("Reopen(%q, %q) = %d, %v; want 0, ErrConfig with a reason", tt.by, tt.why, n, err)
			}
		})
	}
}

// Reopen opens every fenced or missing shard, records who accepted the
// risk and why in the ledger, reports replay.EventRiskAccepted and one Warn line;
// a store that was running serves again without a restart, and Open
// serves. Run again, it changes nothing.
func reopenOpensTheKeySpaceAndRecordsWhoAcceptedTheRisk(t *testing.T) {
	t.Parallel()
	c := newServer(t).client()
	ctx := context.Background()
	running := provisioned(t, c, Options{Prefix: "app:", Logger: quietLogger()})
	end := time.Now().Add(time.Hour)
	setMarkers(t, c, running, func(i int) string {
		if i%2 == 0 {
			return ""
		}
		return fmt.Sprintf("F%d", end.UnixMilli())
	})
	wantRefused(t, running, "x", time.Now().Add(time.Minute), ErrFenced)
	_, err := Open(ctx, c, Options{Prefix: "app:", Logger: quietLogger()})
	wantErr(t, err, ErrFenced, "Open while fenced")
	var ev events
	var logs syncBuffer
	op := mustNew(t, c, Options{Prefix: "app:", Observer: ev.observe, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	n, err := op.Reopen(ctx, "alice (on call)", "INC-42: Redis restarted without persistence")
	if n != Shards || err != nil {
		t.Fatalf("Reopen = %d, %v; want %d, nil", n, err, Shards)
	}
	ledger, err := op.readLedger(ctx)
	if err != nil || len(ledger) != 2 {
		t.Fatalf("ledger = %+v, %v; want provisioned and reopened", ledger, err)
	}
	last := ledger[1]
	endText := time.UnixMilli(end.UnixMilli()).UTC().Format(time.RFC3339)
	for _, want := range []string{"alice (on call)", "INC-42", "opened 64 of 64", "32 until " + endText, "safe to reopen from " + endText, "missing: 32"} {
		if last.Kind != ledgerReopened || !strings.Contains(last.Detail, want) {
			t.Fatalf("ledger entry %+v; want a reopened entry naming %q", last, want)
		}
	}
	if ev.count(replay.EventRiskAccepted) != 1 || ev.all[0].Option != "Reopen" || ev.all[0].Risk != riskReopen || ev.all[0].Shard != -1 || ev.all[0].Store != "redisstore" {
		t.Fatalf("events %+v; want one replay.EventRiskAccepted for Reopen", ev.all)
	}
	if lines := strings.Split(strings.TrimSpace(logs.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "alice") {
		t.Fatalf("log %q; want one Warn line naming who accepted", logs.String())
	}
	wantClaim(t, running, "x", time.Now().Add(time.Minute), true)
	s := mustOpen(t, c, Options{Prefix: "app:", Logger: quietLogger()})
	s.Close()
	if n, err := op.Reopen(ctx, "alice", "again"); n != 0 || err != nil {
		t.Fatalf("Reopen of an open key space = %d, %v; want 0, nil", n, err)
	}
	if again, _ := op.readLedger(ctx); len(again) != 2 {
		t.Fatalf("Reopen of an open key space wrote to the ledger: %+v", again)
	}
}

// Reopen runs the server checks of Open first: a server Open refuses is
// refused, and nothing is written.
func reopenRefusesAServerOpenRefuses(t *testing.T) {
	t.Parallel()
	c := newServer(t, "--maxmemory-policy", "allkeys-lru").client()
	ctx := context.Background()
	s := mustNew(t, c, Options{Prefix: "app:", Logger: quietLogger()})
	if n, err := s.Reopen(ctx, "alice", "INC-43"); n != 0 || !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "maxmemory-policy") {
		t.Fatalf("Reopen on an evicting server = %d, %v; want 0, ErrConfig naming maxmemory-policy", n, err)
	}
	wantNoKeys(t, c, "the markers and ledger after a refused Reopen", append(s.tags[:], s.ledgerKey())...)
}
