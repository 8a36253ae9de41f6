package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The ledger is what the key space's history says of itself: a Redis list
// at <prefix>ledger (no '{' follows the prefix, so no marker or entry of
// this or any other prefix shares its key), newest entry last, at most
// ledgerMax entries. Each entry is "<unix ms> <kind> <detail>", written by
// Provision and ProvisionNew, by a store that found evidence of loss and fenced the key
// space, and by an operator's Reopen. It is evidence for people and for the
// refusals of Provision and ReprovisionNeverUsed; the fence markers, not
// the ledger, keep claims safe (a ledger lost with the data is itself
// evidence: a marker that is missing).
const ledgerMax = 200

// Ledger entry kinds.
const (
	ledgerProvisioned = "provisioned" // Provision fenced a key space of unknown history, or ProvisionNew or ReprovisionNeverUsed opened one; detail says which
	ledgerLoss        = "loss"        // evidence of loss found; detail names it
	ledgerReopened    = "reopened"    // an operator reopened a fenced key space
)

// LedgerEntry is one event of a key space's history, as [Store.Status]
// reports it. It holds no ID, token or key.
type LedgerEntry struct {
	// At is when it was written, by the writer's clock.
	At time.Time
	// Kind is "provisioned", "loss" or "reopened".
	Kind string
	// Detail says what was found, or who accepted which risk.
	Detail string
}

// ledgerKey is the key of the ledger.
func (s *Store) ledgerKey() string { return s.prefix + "ledger" }

// note appends one entry to the ledger and trims it to ledgerMax. detail
// must hold no ID, token or key; a newline in it becomes a space.
func (s *Store) note(ctx context.Context, kind, detail string) error {
	entry := strconv.FormatInt(time.Now().UnixMilli(), 10) + " " + kind + " " + strings.ReplaceAll(detail, "\n", " ")
	if _, err := s.call(ctx, "RPUSH", s.ledgerKey(), entry); err != nil {
		return err
	}
	_, err := s.call(ctx, "LTRIM", s.ledgerKey(), -ledgerMax, -1)
	return err
}

// readLedger returns the ledger, oldest first. Entries it cannot parse are
// returned with Kind "unreadable" and the raw text as Detail.
func (s *Store) readLedger(ctx context.Context) ([]LedgerEntry, error) {
	v, err := s.call(ctx, "LRANGE", s.ledgerKey(), 0, -1)
	switch {
	case errors.Is(err, errNil):
		return nil, nil
	case err != nil:
		return nil, err
	}
	raw, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: unexpected reply to LRANGE", ErrUnavailable)
	}
	out := make([]LedgerEntry, 0, len(raw))
	for _, r := range raw {
		text, _ := r.(string)
		out = append(out, parseLedgerEntry(text))
	}
	return out, nil
}

// parseLedgerEntry reads "<unix ms> <kind> <detail>".
func parseLedgerEntry(text string) LedgerEntry {
	ms, rest, ok1 := strings.Cut(text, " ")
	kind, detail, _ := strings.Cut(rest, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok1 || err != nil || kind == "" {
		return LedgerEntry{Kind: "unreadable", Detail: text}
	}
	return LedgerEntry{At: time.UnixMilli(n), Kind: kind, Detail: detail}
}

// provisionedHorizon is the Horizon the newest "provisioned" entry of
// ledger records ("...; horizon 25h0m0s"), zero when none does.
func provisionedHorizon(ledger []LedgerEntry) time.Duration {
	for i := len(ledger) - 1; i >= 0; i-- {
		e := ledger[i]
		if e.Kind != ledgerProvisioned {
			continue
		}
		_, h, ok := strings.Cut(e.Detail, "; horizon ")
		if !ok {
			continue
		}
		if d, err := time.ParseDuration(h); err == nil && d > 0 {
			return d
		}
	}
	return 0
}
