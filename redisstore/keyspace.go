package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// Shards is the number of shards of a store's key space. Each shard is one
// Redis Cluster hash tag, <prefix>{NN}, holding a fence marker (the key
// <prefix>{NN}) and the entries of the IDs that hash to it
// (<prefix>{NN}:<id>), so one script reads a marker and an entry in one
// slot, also on Cluster. 64 spreads the load over the masters of a Cluster
// of up to a few dozen nodes, keeps Provision to 64 writes, and fences only
// the shards whose marker a partial loss took (one Cluster master's).
// It is part of the key layout: changing it is a compatibility break.
const Shards = 64

// shardOf is the shard of id: FNV-1a (32 bits) of id, modulo Shards. It is
// part of the key layout.
func shardOf(id string) int {
	h := uint32(2166136261) // FNV-1a, inline: hash/fnv would allocate
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % Shards)
}

// shardTags returns each shard's marker key, <prefix>{NN}.
func shardTags(prefix string) [Shards]string {
	var tags [Shards]string
	for i := range tags {
		n := strconv.Itoa(i)
		if i < 10 {
			n = "0" + n
		}
		tags[i] = prefix + "{" + n + "}"
	}
	return tags
}

// keys returns the marker key and the entry key of id.
func (s *Store) keys(id string) (marker, entry string, shard int) {
	shard = shardOf(id)
	marker = s.tags[shard]
	return marker, marker + ":" + id, shard
}

// key returns the entry key of id.
func (s *Store) key(id string) string {
	_, k, _ := s.keys(id)
	return k
}

// Provision brings a key space whose history is unknown into service
// safely: it is the deployment step after Redis lost a key space nobody
// watched (a restart without persistence while no application ran), and
// for a prefix an operator cannot vouch for. A key space with no shard
// marker and no other evidence either way is fenced for one lifetime:
// every shard gets a fence that ends when every claim that could have
// been lost has expired (the key space's recorded lifetime,
// [Store.Lifetime], or this store's Horizon when none is recorded, as
// after a restart without persistence), and the applications serve from
// then, unattended. Provision then returns 0 and an error matching
// [ErrFenced] whose RetryAt (see [replay.RetryAt]) is the fence's end and
// whose [Reason] says so; [Store.Status] shows it (ReopenSafeAt), and the
// ledger records a "provisioned" entry naming the fence. A brand-new
// prefix is opened at once by [Store.ProvisionNew] instead, on the
// operator's statement that it never held claims. It is a deployment
// step, run by an operator (ctoken-store provision), never at
// application start-up.
//
// It runs the server checks of [Open] first, and writes nothing when any
// evidence shows the prefix or the server had a previous life: an entry in
// the key space's ledger (provisioned, loss or reopened before), a fence
// marker, an entry under the prefix (found with SCAN on every master), or
// counters of the server showing loss since it started (INFO stats
// evicted_keys, or FLUSHALL, FLUSHDB or SWAPDB in INFO commandstats). Then
// it returns an error matching [ErrConfig] (or [ErrFenced] when markers are
// fenced) whose [Reason] names the way on: wait out the fence, use a new
// prefix, or have an operator accept the risk with [Store.Reopen]
// (ctoken-store reopen).
//
// When every shard is open already it changes nothing and returns 0, nil:
// running it again is safe.
func (s *Store) Provision(ctx context.Context) (opened int, err error) {
	return s.provision(ctx, false)
}

// ProvisionNew opens a brand-new key space at once: it is the operator's
// statement that the prefix never held claims on this server (a first
// deploy), which nothing in Redis can prove, since a key space whose data
// Redis lost looks exactly like one never provisioned. It writes an
// "open" marker into every shard (SET NX, so concurrent calls on one new
// key space are safe), records a "provisioned" ledger entry naming the
// statement, logs it, and returns how many markers it wrote; 0, nil when
// every shard is open already. It refuses exactly as [Store.Provision]
// does wherever anything shows a previous life, with one exception: a
// key space whose only history is the fence Provision wrote for unknown
// history (its one ledger entry, every shard still fenced, no entry under
// the prefix, no loss counted) is opened, so an operator who ran
// provision without -new on a first deploy states it and is done.
//
// Called after a loss nobody watched, it opens the key space at once and
// every ID claimed before the loss and not yet expired is accepted again:
// when in doubt, use Provision, which fences for one lifetime
// (ctoken-store provision -new is this call; without -new, Provision).
// Safe for concurrent use.
func (s *Store) ProvisionNew(ctx context.Context) (opened int, err error) {
	return s.provision(ctx, true)
}

// provision is Provision, or ProvisionNew when statedNew.
func (s *Store) provision(ctx context.Context, statedNew bool) (opened int, err error) {
	ctx, cancel := adminDeadline(ctx)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	ks, err := s.readKeySpace(ctx)
	if err != nil {
		return 0, err
	}
	switch {
	case ks.open == Shards:
		s.spaceOK.Store(true)
		return 0, nil
	case ks.fenced > 0 && statedNew && ks.fenced == Shards:
		// Provision may have fenced it for unknown history, and the
		// operator now states the prefix is new: that fence guards
		// nothing else when the ledger holds it alone.
		only, err := s.fencedForUnknownHistoryOnly(ctx)
		if err != nil {
			return 0, err
		}
		if !only {
			return 0, &refusal{sentinel: ErrFenced, why: whyProvisionFenced, retryAt: ks.until, cause: fmt.Errorf("%w: %s", ErrUnavailable, ks)}
		}
	case ks.fenced > 0:
		return 0, &refusal{sentinel: ErrFenced, why: whyProvisionFenced, retryAt: ks.until, cause: fmt.Errorf("%w: %s", ErrUnavailable, ks)}
	case ks.open > 0:
		return 0, refuse(ErrConfig, whyPartlyProvisioned, errors.New(ks.String()))
	default:
		if err := s.previousLife(ctx, whyPreviousLife); err != nil {
			return 0, err
		}
	}
	if !statedNew {
		return 0, s.fenceUnknown(ctx)
	}
	for _, m := range s.tags {
		if ks.fenced > 0 { // the fence of Provision for unknown history
			v, err := s.call(ctx, "EVAL", reopenScript, 1, m)
			if err != nil {
				return opened, err
			}
			if n, _ := v.(int64); n == 1 {
				opened++
			}
			continue
		}
		v, err := s.call(ctx, "SET", m, "O", "NX")
		switch {
		case errors.Is(err, errNil): // another Provision, or a fence, was first
		case err != nil:
			return opened, err
		case v == "OK":
			opened++
		}
	}
	// Another operator's Provision may have fenced shards between the read
	// and the writes above (its fence wins over SET NX and the reopen
	// script): then the key space is not open, and saying so is the
	// answer, not "provisioned".
	after, err := s.readKeySpace(ctx)
	if err != nil {
		return opened, err
	}
	if after.open != Shards {
		return opened, &refusal{sentinel: ErrFenced, why: whyProvisionFenced, retryAt: after.until, cause: fmt.Errorf("%w: %s", ErrUnavailable, after)}
	}
	if err := s.note(ctx, ledgerProvisioned, fmt.Sprintf("stated new by the operator (ProvisionNew: the prefix never held claims): opened %d of %d shards; horizon %s", opened, Shards, s.horizon)); err != nil {
		return opened, err
	}
	s.spaceOK.Store(true)
	s.log.Info("redisstore: key space provisioned open on the operator's statement that the prefix never held claims (ProvisionNew)", "prefix", s.prefix, "opened", opened, "horizon", s.horizon)
	return opened, nil
}

// fencedForUnknownHistoryOnly reports whether the key space's only
// history is the fence Provision wrote for unknown history: the ledger
// holds that one entry, no entry lives under the prefix, and no master
// shows loss since it started.
func (s *Store) fencedForUnknownHistoryOnly(ctx context.Context) (bool, error) {
	ledger, err := s.readLedger(ctx)
	if err != nil {
		return false, err
	}
	if len(ledger) != 1 || ledger[0].Kind != ledgerProvisioned || !strings.HasPrefix(ledger[0].Detail, unknownHistoryDetail) {
		return false, nil
	}
	masters, err := s.mastersErr(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range masters {
		if err := s.lossEvidence(ctx, m, whyPreviousLife); err != nil {
			return false, err
		}
		if err := s.scanEntries(ctx, m, whyPreviousLife); err != nil {
			return false, err
		}
	}
	return true, nil
}

// unknownHistoryDetail begins the ledger entry of Provision's fence for
// unknown history.
const unknownHistoryDetail = "history unknown"

// fenceUnknown fences every shard of a key space with no marker and no
// evidence either way for one lifetime (the recorded one, else the
// Horizon), records it in the ledger, logs it, and returns the refusal
// that says so (ErrFenced, RetryAt the fence's end).
func (s *Store) fenceUnknown(ctx context.Context) error {
	life, err := s.readLifetime(ctx)
	if err != nil && !errors.Is(err, errBadLifetime) {
		return err
	}
	// A record longer than this store's Horizon is another
	// application's lifetime: the fence covers it too.
	from := "the key space's recorded lifetime"
	if life <= 0 {
		life, from = s.horizon, "the Horizon: the key space records no lifetime"
	}
	arg := strconv.FormatInt(life.Milliseconds(), 10)
	var until time.Time
	for _, m := range s.tags {
		v, err := s.call(ctx, "EVAL", fenceScript, 1, m, arg)
		if err != nil {
			return err // the shards fenced so far stay fenced: a rerun refuses (ErrFenced) until they end
		}
		ms, ok := v.(int64)
		if !ok {
			return fmt.Errorf("%w: unexpected reply to the fence script", ErrUnavailable)
		}
		if t := time.UnixMilli(ms); t.After(until) {
			until = t
		}
	}
	at := until.UTC().Format(time.RFC3339)
	if err := s.note(ctx, ledgerProvisioned, fmt.Sprintf(unknownHistoryDetail+" (no shard marker, no ledger entry, no evidence either way): fenced %d of %d shards for %s (%s) until %s, serving from then; horizon %s", Shards, Shards, life, from, at, s.horizon)); err != nil {
		return err
	}
	if s.opts.Observer != nil {
		for i := range s.tags {
			s.observe(replay.Event{Kind: replay.EventFenceRaised, Shard: i, Until: until})
		}
	}
	s.log.Warn("redisstore: key space history unknown: provisioned fenced for one lifetime; it serves when every claim that could have been lost has expired (ProvisionNew opens a prefix that never held claims at once)", "prefix", s.prefix, "lifetime", life, "until", until)
	return &refusal{sentinel: ErrFenced, why: whyProvisionedFenced, retryAt: until,
		cause: fmt.Errorf("%w: every shard fenced for %s until %s", ErrUnavailable, life, at)}
}

// previousLife refuses, with reason why, when the ledger holds any entry,
// or a master shows loss since it started or holds an entry under the
// prefix.
func (s *Store) previousLife(ctx context.Context, why string) error {
	ledger, err := s.readLedger(ctx)
	if err != nil {
		return err
	}
	if len(ledger) > 0 {
		last := ledger[len(ledger)-1]
		return refuse(ErrConfig, why, fmt.Errorf("the key space's ledger holds %d entries, the last %q at %s", len(ledger), last.Kind, last.At.UTC().Format(time.RFC3339)))
	}
	masters, err := s.mastersErr(ctx)
	if err != nil {
		return err
	}
	for _, m := range masters {
		if err := s.lossEvidence(ctx, m, why); err != nil {
			return err
		}
		if err := s.scanEntries(ctx, m, why); err != nil {
			return err
		}
	}
	return nil
}

// scanEntries refuses, with reason why, when m holds an entry (a claim,
// lease or note) under the prefix.
func (s *Store) scanEntries(ctx context.Context, m doer, why string) error {
	pattern := globEscape(s.prefix) + "{[0-9][0-9]}:*"
	var cursor any = "0"
	for {
		v, err := m.Do(ctx, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000).Result()
		if err != nil {
			return s.wrapErr(ctx, err)
		}
		r, ok := v.([]any)
		if !ok || len(r) != 2 {
			return fmt.Errorf("%w: unexpected reply to SCAN", ErrUnavailable)
		}
		if keys, _ := r[1].([]any); len(keys) > 0 {
			return refuse(ErrConfig, why, errors.New("the key space holds entries"))
		}
		cursor = r[0]
		if c, _ := cursor.(string); c == "0" {
			return nil
		}
	}
}

// ReprovisionNeverUsed opens a key space that is fenced only because
// claims were tried before [Store.Provision] was run (by a version of the
// store that did not refuse them at [Open]): for development, where
// waiting one horizon (or choosing a new prefix) is the alternative.
//
// DANGER: a key space whose data Redis lost looks the same as one that
// was never provisioned. Calling this after a loss opens the key space at
// once, and every ID claimed before the loss and not yet expired is
// accepted a second time. Never call it after an incident or from
// automation; after a loss, an operator who accepts that risk uses
// [Store.Reopen] (ctoken-store reopen), which records who accepted it.
//
// It refuses with [ErrConfig], changing nothing, whenever any evidence of
// a previous life exists: an entry in the ledger (provisioned, loss or
// reopened), a shard marker that is open ("O": the prefix was provisioned,
// or a fence ran out), any entry under the prefix (found with SCAN on every
// master), keys evicted (INFO stats evicted_keys) or FLUSHALL, FLUSHDB or
// SWAPDB run (INFO commandstats) since the server started, and a server
// without persistence (appendonly no and save ""), whose restart looks
// exactly like a key space that was never provisioned. Each refusal's
// [Reason] names Reopen as the way. Otherwise it opens every marker that is
// missing or fenced, records a "provisioned" entry in the ledger, and
// returns how many it opened; TestProvision/reprovision never used shows each case.
func (s *Store) ReprovisionNeverUsed(ctx context.Context) (opened int, err error) {
	ctx, cancel := adminDeadline(ctx)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	ks, err := s.readKeySpace(ctx)
	if err != nil {
		return 0, err
	}
	if ks.markedOpen > 0 {
		return 0, refuse(ErrConfig, whyServed, errors.New("a shard marker is open: the prefix was provisioned or has served"))
	}
	if err := s.previousLife(ctx, whyServed); err != nil {
		return 0, err
	}
	masters, err := s.mastersErr(ctx)
	if err != nil {
		return 0, err
	}
	for _, m := range masters {
		if err := s.persistent(ctx, m); err != nil {
			return 0, err
		}
	}
	for _, m := range s.tags {
		v, err := s.call(ctx, "EVAL", openNeverUsedScript, 1, m)
		if err != nil {
			return opened, err
		}
		if n, _ := v.(int64); n == 1 {
			opened++
		}
	}
	if err := s.note(ctx, ledgerProvisioned, fmt.Sprintf("ReprovisionNeverUsed opened %d of %d shards; horizon %s", opened, Shards, s.horizon)); err != nil {
		return opened, err
	}
	s.spaceOK.Store(true)
	s.log.Warn("redisstore: ReprovisionNeverUsed opened a fenced key space; had it lost data, IDs claimed before the loss would be accepted again", "prefix", s.prefix, "opened", opened)
	return opened, nil
}

// persistent refuses a master without persistence (appendonly no and save
// ""), or whose persistence cannot be read: its restart empties the key
// space and leaves nothing that tells a loss from a key space never
// provisioned.
func (s *Store) persistent(ctx context.Context, m doer) error {
	get := func(name string) (string, error) {
		value, read, err := s.configGet(ctx, doOn(ctx, m), name)
		if err == nil && !read {
			err = refuse(ErrConfig, whyServed, fmt.Errorf("cannot read %s: a restart without persistence cannot be ruled out", name))
		}
		return value, err
	}
	aof, err := get("appendonly")
	if err != nil || aof == "yes" {
		return err
	}
	save, err := get("save")
	if err != nil {
		return err
	}
	if strings.TrimSpace(save) == "" {
		return refuse(ErrConfig, whyServed, errors.New("the server runs without persistence (appendonly no, save \"\"): its restart looks like a key space never provisioned"))
	}
	return nil
}

// restartHint says, for a key space with no marker on a server without
// persistence, that a restart of it loses every marker and when it last
// started: a restart looks exactly like a prefix never provisioned, and
// the operator must tell which (ctoken-store status). "" when the server
// persists, is a Cluster, or cannot say.
func (s *Store) restartHint(ctx context.Context) string {
	masters, err := s.mastersErr(ctx)
	if err != nil || len(masters) != 1 {
		return ""
	}
	m := masters[0]
	for name, want := range map[string]string{"appendonly": "no", "save": ""} {
		if value, read, err := s.configGet(ctx, doOn(ctx, m), name); err != nil || !read || strings.TrimSpace(value) != want {
			return ""
		}
	}
	v, err := m.Do(ctx, "INFO", "server").Result()
	if err != nil {
		return ""
	}
	up, err := strconv.ParseInt(infoValue(v, "uptime_in_seconds"), 10, 64)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("the server keeps no data across a restart and started %v ago: if this prefix served before, that restart lost it: `ctoken-store provision` fences it for one lifetime (never `provision -new` or `reopen`, which would accept its lost claims again)", (time.Duration(up) * time.Second).String())
}

// adminBound bounds an operator's call (Provision, ReprovisionNeverUsed,
// Status, Reopen) whose context has no deadline.
const adminBound = time.Minute

// adminDeadline bounds ctx by adminBound when it has no deadline: an
// operator's call reads every shard and may SCAN every master, more than
// one Options.Timeout allows.
func adminDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, adminBound)
}

// keySpace is what the shard markers said when read together.
type keySpace struct {
	// open counts the shards that serve: marker "O" (markedOpen of them)
	// or a fence that has ended (the next call opens it).
	open, markedOpen int
	// fenced counts fences that have not ended, and markers holding a
	// value the store does not know; until is the latest fence end.
	fenced  int
	missing int
	until   time.Time
	// fenceEnds are the ends of the fences that have not ended, by shard
	// (zero for the others).
	fenceEnds [Shards]time.Time
}

// String summarizes ks for an error or a log line.
func (ks keySpace) String() string {
	s := fmt.Sprintf("%d of %d shards open, %d fenced, %d missing", ks.open, Shards, ks.fenced, ks.missing)
	if !ks.until.IsZero() {
		s += "; fenced until " + ks.until.UTC().Format(time.RFC3339)
	}
	return s
}

// pipeliner is a client that sends pipelines: *redis.Client,
// *redis.ClusterClient (which routes a pipeline of one slot to its master,
// and splits one of many slots per master), *redis.Ring and
// redis.UniversalClient.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// readKeySpace reads every shard marker and Redis's clock: in one pipeline
// when the client has them (on Cluster, go-redis sends one per master),
// else with one command per shard.
func (s *Store) readKeySpace(ctx context.Context) (keySpace, error) {
	var ks keySpace
	v, err := s.call(ctx, "TIME")
	if err != nil {
		return ks, err
	}
	now, ok := parseTime(v)
	if !ok {
		return ks, fmt.Errorf("%w: unexpected reply to TIME", ErrUnavailable)
	}
	values, err := s.getMarkers(ctx)
	if err != nil {
		return ks, err
	}
	for i, m := range values {
		switch {
		case m == nil:
			ks.missing++
		case *m == "O":
			ks.open++
			ks.markedOpen++
		default:
			ms, err := strconv.ParseInt(strings.TrimPrefix(*m, "F"), 10, 64)
			switch {
			case err != nil || !strings.HasPrefix(*m, "F"):
				ks.fenced++
			case ms <= now.UnixMilli():
				ks.open++
			default:
				ks.fenced++
				ks.fenceEnds[i] = time.UnixMilli(ms)
				if ks.fenceEnds[i].After(ks.until) {
					ks.until = ks.fenceEnds[i]
				}
			}
		}
	}
	return ks, nil
}

// getMarkers returns each shard's marker, nil when it is missing.
func (s *Store) getMarkers(ctx context.Context) ([Shards]*string, error) {
	var out [Shards]*string
	set := func(i int, v any, err error) error {
		switch {
		case errors.Is(err, errNil):
		case err != nil:
			return s.wrapErr(ctx, err)
		default:
			str, ok := v.(string)
			if !ok {
				return fmt.Errorf("%w: unexpected reply to GET", ErrUnavailable)
			}
			out[i] = &str
		}
		return nil
	}
	p, ok := s.client.(pipeliner)
	if !ok {
		for i, m := range s.tags {
			v, err := s.call(ctx, "GET", m)
			if errors.Is(err, errNil) {
				continue
			}
			if err := set(i, v, err); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	done := make(chan error, 1)
	go func() {
		pipe := p.Pipeline()
		cmds := make([]*redis.Cmd, Shards)
		for i, m := range s.tags {
			cmds[i] = pipe.Do(ctx, "GET", m)
		}
		pipe.Exec(ctx) // each command carries its own error
		for i, c := range cmds {
			if err := set(i, c.Val(), c.Err()); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return out, err
	case <-ctx.Done():
		return [Shards]*string{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// checkKeySpace refuses a key space with no open shard: no marker at all
// (never provisioned, or Redis lost it) with [ErrConfig], fences with
// [ErrFenced]. Shards fenced or missing beside open ones are logged
// (Error when a marker is missing, else Warn) and reported to the
// Observer (replay.EventFenced, with Until zero for a missing marker).
func (s *Store) checkKeySpace(ctx context.Context) error {
	ks, err := s.readKeySpace(ctx)
	if err != nil {
		return err
	}
	switch {
	case ks.open == 0 && ks.fenced == 0:
		cause := errors.New("no shard marker")
		if ledger, err := s.readLedger(ctx); err == nil && len(ledger) > 0 {
			last := ledger[len(ledger)-1]
			cause = fmt.Errorf("no shard marker, but the ledger's last entry is %q at %s: Redis lost the key space", last.Kind, last.At.UTC().Format(time.RFC3339))
		} else if hint := s.restartHint(ctx); hint != "" {
			cause = errors.New("no shard marker; " + hint)
		}
		return refuse(ErrConfig, whyNotProvisioned, cause)
	case ks.open == 0:
		// The refusal carries the last fence's end (replay.RetryAt), so a
		// middleware's Retry-After tells when a Store from New may serve.
		return &refusal{sentinel: ErrFenced, why: whyKeySpaceFenced, retryAt: ks.until, cause: fmt.Errorf("%w: %s", ErrUnavailable, ks)}
	case ks.open == Shards:
		return nil
	}
	if s.opts.Observer != nil {
		for i := range s.tags {
			if !ks.fenceEnds[i].IsZero() {
				s.observe(replay.Event{Kind: replay.EventFenced, Shard: i, Until: ks.fenceEnds[i]})
			}
		}
	}
	if ks.missing > 0 {
		if s.opts.Observer != nil {
			values, _ := s.getMarkers(ctx)
			for i, v := range values {
				if v == nil {
					s.observe(replay.Event{Kind: replay.EventFenced, Shard: i})
				}
			}
		}
		s.log.Error("redisstore: shard markers missing: Redis lost part of the key space; those shards fence at their next claim (see ctoken-store status)", "prefix", s.prefix, "shards", ks.String())
		return nil
	}
	s.log.Warn("redisstore: some shards are fenced and refuse claims until their fence ends (see ctoken-store status)", "prefix", s.prefix, "shards", ks.String())
	return nil
}

// keySpaceRetry is how long a Store from New keeps the refusal of its
// key-space check before checking again.
const keySpaceRetry = 250 * time.Millisecond

// readySpace runs the server checks ([Store.ready]) and, until it passes
// once, the key-space check of [Open]: a Store from New refuses while the
// key space has no open shard, and checks again at most every
// keySpaceRetry, so provisioning while applications wait lets them serve.
func (s *Store) readySpace(ctx context.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if s.spaceOK.Load() {
		return nil
	}
	select {
	case s.spaceCheck <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	defer func() { <-s.spaceCheck }()
	if s.spaceOK.Load() {
		return nil
	}
	if s.spaceErr != nil && time.Since(s.spaceAt) < keySpaceRetry {
		return s.spaceErr
	}
	// The refusal is kept from when the check began, not from its reply:
	// Redis judged the fence before the reply came, so a slow reply never
	// keeps a fence that ended past keySpaceRetry after its end.
	began := time.Now()
	err := s.checkKeySpace(ctx)
	switch {
	case err == nil:
		s.spaceOK.Store(true)
		s.spaceErr = nil
	case errors.Is(err, ErrConfig) || errors.Is(err, ErrFenced):
		s.spaceErr, s.spaceAt = err, began
	}
	return err
}

// Fixed reasons of the key-space refusals. Each names the next step, with
// the ctoken-store command (redisstore/cmd/ctoken-store) that takes it.
const (
	whyNotProvisioned    = "no shard marker: the key space was never provisioned, or Redis lost it (its history is unknown): run `ctoken-store status`; then `ctoken-store provision`, which fences it for one lifetime and serves from then, or, for a prefix that never held claims, `ctoken-store provision -new`"
	whyProvisionedFenced = "history unknown: Provision fenced the key space for one lifetime (every claim that could have been lost expires by then); the applications serve from the fence's end by themselves; see `ctoken-store status`"
	whyKeySpaceFenced    = "key space fenced after a loss: every shard refuses until its fence ends; see `ctoken-store status`; to serve before then, an operator who accepts that IDs claimed before the loss are accepted again runs `ctoken-store reopen`"
	whyProvisionFenced   = "key space fenced: it lost data (or claims were tried before Provision); Provision refuses: see `ctoken-store status`; wait out the fence, use a new prefix, or accept the risk with `ctoken-store reopen`"
	whyPartlyProvisioned = "key space partly provisioned: a shard may have lost data, or a Provision was interrupted; Provision refuses: see `ctoken-store status`; wait out the fence, use a new prefix, or accept the risk with `ctoken-store reopen`"
	whyPreviousLife      = "the prefix or the server shows a previous life (ledger entries, entries, or keys evicted, flushed or swapped since the server started); Provision refuses: see `ctoken-store status`; use a new prefix, or accept the risk with `ctoken-store reopen`"
	whyServed            = "the key space or the server shows it served claims or may have lost data: ReprovisionNeverUsed refuses; see `ctoken-store status`; wait out the fence, use a new prefix, or accept the risk with `ctoken-store reopen`"
)

// openNeverUsedScript opens KEYS[1] when it is missing or fenced: 1
// opened, 0 left as it was (open already).
const openNeverUsedScript = `local m = redis.call('GET', KEYS[1])
if m and string.sub(m, 1, 1) ~= 'F' then return 0 end
redis.call('SET', KEYS[1], 'O')
return 1`

// lossEvidence refuses, with reason why, when the master's counters show
// keys evicted, or a FLUSHALL, FLUSHDB or SWAPDB, since it started (or
// since CONFIG RESETSTAT).
func (s *Store) lossEvidence(ctx context.Context, m doer, why string) error {
	c, ok, err := s.readCounters(ctx, doOn(ctx, m))
	switch {
	case err != nil:
		return err
	case !ok:
		return refuse(ErrConfig, why, errors.New("cannot read the server's loss counters (INFO stats and commandstats refused or unexpected)"))
	case c.evicted > 0:
		return refuse(ErrConfig, why, fmt.Errorf("the server evicted %d keys", c.evicted))
	}
	for _, r := range [...]struct {
		name  string
		calls int64
	}{{"FLUSHALL", c.flushall}, {"FLUSHDB", c.flushdb}, {"SWAPDB", c.swapdb}} {
		if r.calls > 0 {
			return refuse(ErrConfig, why, fmt.Errorf("%s ran since the server started", r.name))
		}
	}
	return nil
}

// globEscape escapes the characters SCAN's MATCH and ACL key patterns treat
// specially.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[]\\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
