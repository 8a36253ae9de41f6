package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ctoken/ctoken/replay"
)

// Status is what a store knows of its key space and servers, for an
// operator deciding how to bring it back (the ctoken-store command prints
// it). It holds no ID, token or key, and no password.
type Status struct {
	// Prefix and Horizon are the store's: Horizon is the Options.Horizon
	// of the store that asked, not necessarily the key space's.
	Prefix  string
	Horizon time.Duration
	// ProvisionedHorizon is the key space's own Horizon as far as it
	// knows: the one its newest "provisioned" ledger entry records
	// ([Store.Provision] and [Store.ReprovisionNeverUsed] write it). It is
	// zero when the ledger records none (the entry was trimmed, lost with
	// the data, or written by a version that did not record it).
	ProvisionedHorizon time.Duration
	// Open, Fenced and Missing count the shards by marker: open (or a
	// fence that has ended), fenced (a fence not yet ended, or a marker
	// holding a value the store does not know), missing (never
	// provisioned, or lost).
	Open, Fenced, Missing int
	// FencedUntil is when the last fence ends, by Redis's clock; zero when
	// no shard is fenced.
	FencedUntil time.Time
	// Lifetime is the longest lifetime any store of the key space has
	// recorded for its claims, leases and records ([Store.Lifetime]); zero
	// when none is recorded (no claim yet, or Redis lost the record with
	// the data) or the record cannot be decoded. A fence lasts this long from when it was raised.
	Lifetime time.Duration
	// ReopenSafeAt is, for a fenced key space, the instant from which
	// reopening it ([Store.Reopen]) accepts nothing twice: when the last
	// claim that could have been lost has expired. It is the later of
	// FencedUntil and, for each fenced shard whose raise time is known,
	// that time plus Lifetime (a record longer than the fence, written
	// after it was raised). Zero when no shard is fenced. Missing markers
	// are not counted: their fence starts at the next claim.
	ReopenSafeAt time.Time
	// Ledger is the key space's history, oldest first.
	Ledger []LedgerEntry
	// Servers is what each master shows now, one entry per master.
	Servers []ServerStatus
	// Refusal is the Reason [Open] refuses with, as the user Status runs
	// as, for a command this store's Options need that the user may not
	// run (it names the ACL rules to add; see docs/fleet-reference.md,
	// "The fleet's ACL"), whatever the markers say; empty when the user
	// may run every one. Status run as the applications' own user tells
	// whether they can serve.
	Refusal string
}

// ServerStatus is what one master shows now: its identity and what tells
// of loss (see docs/fleet.md, "When the store refuses").
type ServerStatus struct {
	// RunID is the server's run_id (INFO server): a new one means the
	// server restarted, or another server answers.
	RunID string
	// StartedAt is when the server started, by its clock (INFO server
	// uptime_in_seconds, to the second); zero when it does not say. A
	// server without persistence (AppendOnly "no", Save "") lost every
	// key at that start: a key space with no marker and no ledger on it
	// may have served before then, and its history is unknown.
	StartedAt time.Time
	// Role is "master", or what ROLE answered.
	Role string
	// AppendOnly, AppendFsync and Save are the persistence settings
	// (CONFIG GET); "" when the server refuses CONFIG GET.
	AppendOnly, AppendFsync, Save string
	// MaxmemoryPolicy and Maxmemory are the eviction settings; "" when
	// the server refuses CONFIG GET.
	MaxmemoryPolicy, Maxmemory string
	// EvictedKeys is INFO stats evicted_keys; Flushall, Flushdb and
	// Swapdb are how often each command ran (INFO commandstats): each
	// counts since the server started or CONFIG RESETSTAT.
	EvictedKeys, Flushall, Flushdb, Swapdb int64
}

// Status reads the shard markers, the ledger and what every master shows
// now, and whether its user may run every command the store needs
// (Refusal). It writes nothing and runs no other server check, so it
// answers also for a store that refuses. ctx bounds it (one minute when ctx has no
// deadline).
func (s *Store) Status(ctx context.Context) (Status, error) {
	ctx, cancel := adminDeadline(ctx)
	defer cancel()
	st := Status{Prefix: s.prefix, Horizon: s.horizon}
	ks, err := s.readKeySpace(ctx)
	if err != nil {
		return st, err
	}
	st.Open, st.Fenced, st.Missing, st.FencedUntil = ks.open, ks.fenced, ks.missing, ks.until
	// A record that cannot be decoded is shown as unknown (0), not as a
	// failed Status: the operator still sees the rest.
	if st.Lifetime, err = s.readLifetime(ctx); err != nil && !errors.Is(err, errBadLifetime) {
		return st, err
	}
	if st.ReopenSafeAt, err = s.reopenSafeAt(ctx, ks, st.Lifetime); err != nil {
		return st, err
	}
	if st.Ledger, err = s.readLedger(ctx); err != nil {
		return st, err
	}
	st.ProvisionedHorizon = provisionedHorizon(st.Ledger)
	masters, err := s.mastersErr(ctx)
	if err != nil {
		return st, err
	}
	for _, m := range masters {
		ss, err := s.serverStatus(ctx, m)
		if err != nil {
			return st, err
		}
		st.Servers = append(st.Servers, ss)
		cond, err := s.checkRights(ctx, doOn(ctx, m))
		if err != nil {
			return st, err
		}
		if cond != nil && st.Refusal == "" {
			st.Refusal = Reason(cond)
		}
	}
	return st, nil
}

// serverStatus reads one master's ServerStatus.
func (s *Store) serverStatus(ctx context.Context, m doer) (ServerStatus, error) {
	var ss ServerStatus
	do := doOn(ctx, m)
	v, err := do("INFO", "server")
	if err != nil {
		return ss, s.wrapErr(ctx, err)
	}
	ss.RunID = infoValue(v, "run_id")
	if up, err := strconv.ParseInt(infoValue(v, "uptime_in_seconds"), 10, 64); err == nil && up >= 0 {
		if t, err := do("TIME"); err == nil {
			if now, ok := parseTime(t); ok {
				ss.StartedAt = now.Add(-time.Duration(up) * time.Second).Truncate(time.Second)
			}
		}
	}
	c, _, err := s.readCounters(ctx, do)
	if err != nil {
		return ss, err
	}
	ss.EvictedKeys, ss.Flushall, ss.Flushdb, ss.Swapdb = c.evicted, c.flushall, c.flushdb, c.swapdb
	if v, err := m.Do(ctx, "ROLE").Result(); err == nil {
		ss.Role, _, _ = parseRole(v)
	} else if !isRefused(err) {
		return ss, s.wrapErr(ctx, err)
	}
	for _, c := range []struct {
		name string
		dst  *string
	}{{"appendonly", &ss.AppendOnly}, {"appendfsync", &ss.AppendFsync}, {"save", &ss.Save}, {"maxmemory-policy", &ss.MaxmemoryPolicy}, {"maxmemory", &ss.Maxmemory}} {
		v, _, err := s.configGet(ctx, do, c.name)
		if err != nil {
			return ss, err
		}
		*c.dst = v
	}
	return ss, nil
}

// maxAcceptLen bounds Reopen's acceptedBy and reason.
const maxAcceptLen = 200

// Reopen opens every shard that is fenced or missing, at once: the way
// back to service after a loss, before the fences end by themselves (the
// key space's lifetime after the loss: [Status] ReopenSafeAt). It is an
// operator's decision (ctoken-store reopen), never automation's: before
// ReopenSafeAt every ID claimed before the loss and not yet expired is
// accepted again. acceptedBy (who decided) and reason (why) are required,
// one line each of at most 200 bytes, else it refuses with [ErrConfig];
// they are written to the key space's ledger, so they must name no ID,
// token or key.
//
// It runs the server checks of [Open] first and refuses a server Open
// would refuse. It writes a "reopened" ledger entry naming who, why, how
// many shards it opened, when the fences it cut short would have ended
// and from when reopening would have accepted nothing twice (Status
// ReopenSafeAt), reports [replay.EventRiskAccepted] (Option "Reopen") to the Observer and
// logs one Warn line. Running stores serve the reopened shards at their
// next call. It returns how many shards it opened; 0, with nothing
// written, when every shard was open.
func (s *Store) Reopen(ctx context.Context, acceptedBy, reason string) (opened int, err error) {
	for _, f := range []struct{ name, v string }{{"acceptedBy", acceptedBy}, {"reason", reason}} {
		if err := checkAccept(f.v); err != nil {
			return 0, refuse(ErrConfig, "Reopen needs who accepts the risk and why", fmt.Errorf("%s: %w", f.name, err))
		}
	}
	ctx, cancel := adminDeadline(ctx)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	ks, err := s.readKeySpace(ctx)
	if err != nil {
		return 0, err
	}
	if ks.markedOpen == Shards {
		s.spaceOK.Store(true)
		return 0, nil
	}
	for _, m := range s.tags {
		v, err := s.call(ctx, "EVAL", reopenScript, 1, m)
		if err != nil {
			return opened, err
		}
		if n, _ := v.(int64); n == 1 {
			opened++
		}
	}
	cut, safeFrom := "none", "-"
	if !ks.until.IsZero() {
		cut = fmt.Sprintf("%d until %s", ks.fenced, ks.until.UTC().Format(time.RFC3339))
		// When reopening would have accepted nothing twice (Status
		// ReopenSafeAt), for the ledger and the log: a record that cannot
		// be read leaves the fences' end.
		life, _ := s.readLifetime(ctx)
		safe, err := s.reopenSafeAt(ctx, ks, life)
		if err != nil {
			safe = ks.until
		}
		safeFrom = safe.UTC().Format(time.RFC3339)
	}
	detail := fmt.Sprintf("by %q because %q: opened %d of %d shards (fences cut short: %s; safe to reopen from %s; missing: %d)", acceptedBy, reason, opened, Shards, cut, safeFrom, ks.missing)
	if err := s.note(ctx, ledgerReopened, detail); err != nil {
		return opened, err
	}
	s.spaceOK.Store(true)
	if s.opts.Observer != nil {
		s.observe(replay.Event{Kind: replay.EventRiskAccepted, Shard: -1, Option: "Reopen", Risk: riskReopen})
	}
	s.log.Warn("redisstore: key space reopened by an operator; "+riskReopen, slog.String("event", replay.EventRiskAccepted.String()),
		slog.String("prefix", s.prefix), slog.Int("opened", opened), slog.String("fences_cut", cut), slog.String("safe_from", safeFrom), slog.Int("missing", ks.missing),
		slog.String("accepted_by", acceptedBy), slog.String("reason", reason))
	return opened, nil
}

// riskReopen is the Risk of Reopen's replay.EventRiskAccepted.
const riskReopen = "IDs claimed before the loss and not yet expired are accepted again"

// checkAccept refuses an empty, long or multi-line acceptedBy or reason.
func checkAccept(v string) error {
	switch {
	case strings.TrimSpace(v) == "":
		return errors.New("empty")
	case len(v) > maxAcceptLen:
		return fmt.Errorf("longer than %d bytes", maxAcceptLen)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return errors.New("not one line of text")
	}
	return nil
}

// reopenScript opens KEYS[1] unless it is open: 1 opened, 0 open already.
const reopenScript = `if redis.call('GET', KEYS[1]) == 'O' then return 0 end
redis.call('SET', KEYS[1], 'O')
return 1`

// reopenSafeAt is Status.ReopenSafeAt: for each fenced shard, the later
// of its fence's end and its raise time (<marker>f) plus life.
func (s *Store) reopenSafeAt(ctx context.Context, ks keySpace, life time.Duration) (time.Time, error) {
	safe := ks.until
	for i, end := range ks.fenceEnds {
		if end.IsZero() || life == 0 {
			continue
		}
		v, err := s.call(ctx, "GET", s.tags[i]+"f")
		switch {
		case errors.Is(err, errNil):
			continue
		case err != nil:
			return time.Time{}, err
		}
		str, _ := v.(string)
		ms, perr := strconv.ParseInt(str, 10, 64)
		if perr != nil {
			return time.Time{}, fmt.Errorf("%w: a fence's raise time holds an unexpected value", ErrUnavailable)
		}
		if at := time.UnixMilli(ms).Add(life); at.After(safe) {
			safe = at
		}
	}
	return safe, nil
}
