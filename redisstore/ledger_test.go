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

func TestLedgerKeepsTheNewestEntriesInOrder(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	for i := range ledgerMax + 5 {
		if err := s.note(ctx, ledgerLoss, fmt.Sprintf("entry %d\nsecond line", i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.readLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
