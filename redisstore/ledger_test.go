package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestParseLedgerEntry(t *testing.T) {
	for _, tc := range []struct {
		text string
		want LedgerEntry
	}{
		{"1700000000000 loss evicted_keys grew 3 -> 9", LedgerEntry{At: time.UnixMilli(1700000000000), Kind: "loss", Detail: "evicted_keys grew 3 -> 9"}},
		{"1700000000000 provisioned", LedgerEntry{At: time.UnixMilli(1700000000000), Kind: "provisioned"}},
		{"", LedgerEntry{Kind: "unreadable"}},
		{"x loss y", LedgerEntry{Kind: "unreadable", Detail: "x loss y"}},
		{"17", LedgerEntry{Kind: "unreadable", Detail: "17"}},
	} {
		t.Run(tc.text, func(t *testing.T) {
			if got := parseLedgerEntry(tc.text); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestLedger pins the provisioning ledger: the newest entries kept in order
// and the provisioned horizon read from them.
func TestLedger(t *testing.T) {
	subtests(t, []subtest{
		{"horizon is the newest recorded", provisionedHorizonIsTheNewestRecorded},
		{"keeps the newest entries in order", ledgerKeepsTheNewestEntriesInOrder},
	})
}

// The key space's horizon is the one its newest "provisioned" entry
// records; other entries, and provisioned entries that record none or an
// unreadable one, say nothing.
func provisionedHorizonIsTheNewestRecorded(t *testing.T) {
	at := time.UnixMilli(1700000000000)
	provisioned := func(detail string) LedgerEntry { return LedgerEntry{At: at, Kind: ledgerProvisioned, Detail: detail} }
	for _, tc := range []struct {
		name   string
		ledger []LedgerEntry
		want   time.Duration
	}{
		{"empty", nil, 0},
		{"one provisioned entry", []LedgerEntry{provisioned("opened 64 of 64 shards; horizon 25h0m0s")}, 25 * time.Hour},
		{"the newest of two wins", []LedgerEntry{provisioned("opened 64 of 64 shards; horizon 25h0m0s"), {At: at, Kind: ledgerLoss, Detail: "restart"},
			provisioned("ReprovisionNeverUsed opened 64 of 64 shards; horizon 10m0s")}, 10 * time.Minute},
		{"a loss or reopened entry naming a horizon says nothing", []LedgerEntry{{At: at, Kind: ledgerLoss, Detail: "x; horizon 1h0m0s"},
			{At: at, Kind: ledgerReopened, Detail: "y; horizon 2h0m0s"}}, 0},
		{"a provisioned entry without a horizon", []LedgerEntry{provisioned("opened 64 of 64 shards")}, 0},
		{"an unreadable horizon falls back to an older entry", []LedgerEntry{provisioned("opened 64 of 64 shards; horizon 3h0m0s"),
			provisioned("opened 64 of 64 shards; horizon soon")}, 3 * time.Hour},
		{"a negative horizon is not one", []LedgerEntry{provisioned("opened 64 of 64 shards; horizon -1h")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := provisionedHorizon(tc.ledger); got != tc.want {
				t.Errorf("provisionedHorizon = %v, want %v", got, tc.want)
			}
		})
	}
}

func ledgerKeepsTheNewestEntriesInOrder(t *testing.T) {
	s, _ := newTestStore(t)
	for i := range ledgerMax + 5 {
		must(t, s.note(context.Background(), ledgerLoss, fmt.Sprintf("entry %d\nsecond line", i)))
	}
	got := mustLedger(t, s)
	if len(got) != ledgerMax {
		t.Fatalf("%d entries, want %d", len(got), ledgerMax)
	}
	// Whatever Provision wrote is older than every note: the oldest kept
	// is the sixth note.
	if got[0].Detail != "entry 5 second line" || got[len(got)-1].Detail != fmt.Sprintf("entry %d second line", ledgerMax+4) {
		t.Errorf("kept %q .. %q", got[0].Detail, got[len(got)-1].Detail)
	}
	for _, e := range got {
		if e.Kind != ledgerLoss || time.Since(e.At) > time.Minute {
			t.Fatalf("entry %+v", e)
		}
	}
}
