package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/url"
	"strings"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// ErrFenced reports that the table is fenced because the server's history
// is unknown: the table's history record was written on another cluster
// (a logical replica switched to, another cluster's dump), or the server
// is now a primary on another timeline than the one the record was
// written on (a promoted standby), and the last record it received from
// the old primary does not name it a confirmed synchronous standby (see
// docs/pgstore-reference.md for what confirms one, quorum commit
// included), or it is on a timeline after a promotion and the table has
// no record at all; so claims acknowledged elsewhere may be missing from
// it. Claim, AcquireLease, ConfirmLease and transactional work refuse
// (the error also matches [ErrUnavailable]) until the fence has passed
// by the database's clock: [Options.Horizon] (or the longest lifetime the
// record shows, if longer) plus [replay.SkewMargin]; without a Horizon,
// until [Rearm] names its end (docs/pgstore-reference.md, "Unknown
// history").
var ErrFenced = errors.New("pgstore: fenced: the server's history is unknown (promoted from a standby that was not a confirmed synchronous one)")

// timelineSQL is the server's timeline: the first eight hex digits of the
// name of the WAL file being written (it fails in recovery, where claims
// fail anyway).
const timelineSQL = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`

// sysSQL is the server's system identifier: the cluster it belongs to
// (initdb chose it; a physical copy of the data directory, such as a
// standby, keeps it; a logical replica, a restore into another cluster
// or a pg_dump loaded elsewhere has another). Reading it reads the file
// pg_control: 6 to 25 µs (pgbench, a loaded machine).
const sysSQL = `(SELECT system_identifier FROM pg_control_system())`

// sessionSysSQL is sysSQL read once per session and kept in the session
// setting ctoken.system_identifier (a session never changes server; a
// RESET, DISCARD or the work's reset only makes the next statement read
// it again): under 1.5 µs where sysSQL costs 6 to 25, in every statement.
const sessionSysSQL = `coalesce(nullif(current_setting('ctoken.system_identifier', true), ''),
	set_config('ctoken.system_identifier', ` + sysSQL + `::text, false))`

// historyGuardSQL, in the statements' lookup of the marker row, makes the
// marker count only on the cluster and timeline its history record was
// written on (a record of an earlier version, without the cluster: only
// on its timeline; without a record, only on timeline 1, where
// [judgeHistory] accepts a table without one): on a promoted server or
// another cluster (a logical replica switched to, whose marker row came
// from the publisher), every claim, lease and record step finds no
// marker, and refuses, until a Store's check has judged the server's
// history and written a record for its cluster and timeline (and the
// fence, if its history is unknown). Without it a running Store would
// accept claims there until its next recheck.
// The record's text starts with its version, timeline and cluster
// ([history.encode] writes the fields in order), so the guard compares a
// prefix rather than parsing JSON.
const historyGuardSQL = `(starts_with(token, '{"v":1,"tl":' || ` + timelineSQL + ` || ',"sys":' || ` + sessionSysSQL + ` || ',')
	OR starts_with(token, '{"v":1,"tl":' || ` + timelineSQL + ` || ',"longest":') OR token = '' AND ` + timelineSQL + ` = 1)`

// freshRecordSQL is the first record of a table, written with its marker
// by [Migrate], [Schema] and [Rearm]: the timeline and cluster of the
// server that writes it, no standby and no lifetime yet (the text
// [history.encode] writes for it).
const freshRecordSQL = `'{"v":1,"tl":' || ` + timelineSQL + ` || ',"sys":' || ` + sysSQL + ` || ',"longest":0}'`

// maxFence bounds a fence (100 years): a claim held longer (or forever)
// keeps its table fenced that long.
const maxFence = 100 * 365 * 24 * time.Hour

// history is the record of the server's replication that Stores keep in
// the marker row's token column (JSON), written on the primary whenever
// it changes and replicated with everything else: a standby that is
// promoted reads in it the last state it received. [Migrate], [Schema]
// and [Rearm] write the first record, of the timeline the marker is
// written on. TL is the timeline it was written on, Sys the system
// identifier of the cluster (0 in a record of an earlier version, which
// is judged by its timeline alone and rewritten with it); Sync the physical
// standbys whose sync_state was "sync" or "quorum", Other every other
// standby then streaming; Potential how many of those were "potential"
// (under priority commit, a standby that takes the synchronous role when
// a synchronous one disconnects; under quorum commit, a listed standby
// still catching up, which joins the quorum once it streams); Quorum the number of standbys each
// commit waited for under quorum commit (synchronous_standby_names
// "ANY n (...)", 0 otherwise); Away how many standbys not streaming then
// could take a sync member's place ([away]); Longest the longest
// remaining lifetime of a
// live row seen on the primary, in seconds, rounded up by at most an
// eighth ([ceilLongest]; it only grows); Fence, when the record was written by a fence, says
// why.
type history struct {
	V         int      `json:"v"`
	TL        int64    `json:"tl"`
	Sys       int64    `json:"sys"`
	Longest   int64    `json:"longest"`
	Sync      []member `json:"sync,omitempty"`
	Other     []member `json:"other,omitempty"`
	Potential int      `json:"potential,omitempty"`
	Quorum    int      `json:"quorum,omitempty"`
	Away      int      `json:"away,omitempty"`
	Fence     string   `json:"fence,omitempty"`
}

// member is one standby of a record: the application_name its walsender
// reported, and the slot it streamed from ("" without one).
type member struct {
	App  string `json:"app"`
	Slot string `json:"slot,omitempty"`
}

// standby is one row of pg_stat_replication as readServer reads it:
// State is its sync_state ("sync", "quorum", "potential", "async"; NULL
// for a role without pg_read_all_stats).
type standby struct {
	App   *string `json:"app"`
	Slot  *string `json:"slot"`
	State *string `json:"state"`
}

// self is what a server knows of the name it streamed under as a standby
// (after a promotion these settings remain): its primary_slot_name, and
// the application_name of its primary_conninfo (when the role may read
// it), else its cluster_name, else "walreceiver", as the walreceiver
// chooses.
type self struct {
	slot, app string
}

// parseHistory decodes a record; ok is false for text that is not one
// (which a fence treats as no evidence).
func parseHistory(s string) (h history, ok bool) {
	if err := json.Unmarshal([]byte(s), &h); err != nil || h.V != 1 || h.TL <= 0 || h.Longest < 0 || h.Potential < 0 || h.Quorum < 0 || h.Away < 0 {
		return history{}, false
	}
	return h, true
}

// encode returns the record's text.
func (h history) encode() string {
	b, _ := json.Marshal(h) // strings, numbers and slices of them: cannot fail
	return string(b)
}

// names reports whether the record names the server me as a confirmed
// synchronous standby: one whose every acknowledged commit it received,
// for as long as the configuration the record saw stood. It must be a
// sync member of the record, unambiguously (by its slot when it streamed
// from one: slots are unique on a primary; else by its application name,
// with no other member of the record under that name), and no other
// standby of the record could have acknowledged a commit in its place:
// under priority commit no standby was "potential" (one would take the
// synchronous role, and acknowledge commits this one never received, the
// moment this one disconnected), and under quorum commit every quorum
// member was waited for by every commit (as many members as the quorum,
// "ANY 2 (a, b)" with both streaming; under "ANY 1 (a, b)" a commit
// acknowledged by b alone is missing from a, and a cannot show it was
// not) and no listed standby was "potential" (under quorum commit, one
// still catching up: it joins the quorum once it streams, and "ANY 2 (a,
// b, c)" with c catching up lets b and c acknowledge without a); and no
// standby away then could come back and do so ([away]).
func (h history) names(me self) bool {
	if h.Quorum > 0 && len(h.Sync) > h.Quorum || h.Potential > 0 || h.Away > 0 {
		return false
	}
	found := false
	for _, m := range h.Sync {
		switch {
		case m.Slot != "" && m.Slot == me.slot:
			return true
		case m.Slot == "" && me.slot == "" && m.App == me.app:
			found = true
		}
	}
	if !found {
		return false
	}
	n := 0
	for _, m := range append(append([]member(nil), h.Sync...), h.Other...) {
		if m.App == me.app {
			n++
		}
	}
	return n == 1
}

// syncConfig is a synchronous_standby_names as PostgreSQL parses it
// (syncrep_gram.y): priority commit (FIRST n, or n, or a bare list: FIRST
// 1) or quorum commit (ANY n) over a list of standby names, "*" matching
// any.
type syncConfig struct {
	quorum bool
	n      int
	names  []string // as written, without quotes
}

// parseSyncNames parses a synchronous_standby_names; ok is false for an
// empty value and for text it does not read as PostgreSQL would (a
// caller then counts no standby as confirmed).
func parseSyncNames(s string) (c syncConfig, ok bool) {
	type token struct {
		text        string
		num, quoted bool
		punct       byte
	}
	var toks []token
	isStart := func(b byte) bool { return b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b == '_' || b >= 0x80 }
	for i := 0; i < len(s); {
		b := s[i]
		switch {
		case b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v':
			i++
		case b == ',' || b == '(' || b == ')':
			toks = append(toks, token{punct: b})
			i++
		case b == '*':
			toks = append(toks, token{text: "*"})
			i++
		case b >= '0' && b <= '9':
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			toks = append(toks, token{text: s[i:j], num: true})
			i = j
		case isStart(b):
			j := i
			for j < len(s) && (isStart(s[j]) || s[j] >= '0' && s[j] <= '9' || s[j] == '$') {
				j++
			}
			toks = append(toks, token{text: s[i:j]})
			i = j
		case b == '"':
			var name strings.Builder
			j := i + 1
			for {
				if j == len(s) {
					return syncConfig{}, false // unterminated
				}
				if s[j] == '"' {
					if j+1 < len(s) && s[j+1] == '"' {
						name.WriteByte('"')
						j += 2
						continue
					}
					break
				}
				name.WriteByte(s[j])
				j++
			}
			if name.Len() == 0 {
				return syncConfig{}, false
			}
			toks = append(toks, token{text: name.String(), quoted: true})
			i = j + 1
		default:
			return syncConfig{}, false
		}
	}
	keyword := func(t token, k string) bool { return !t.quoted && t.punct == 0 && strings.EqualFold(t.text, k) }
	// list parses names separated by commas up to the end of toks.
	list := func(toks []token) ([]string, bool) {
		var names []string
		for i, t := range toks {
			if i%2 == 1 {
				if t.punct != ',' {
					return nil, false
				}
				continue
			}
			if t.punct != 0 || keyword(t, "any") || keyword(t, "first") {
				return nil, false
			}
			names = append(names, t.text)
		}
		return names, len(toks)%2 == 1
	}
	c.n = 1
	switch {
	case len(toks) == 0:
		return syncConfig{}, false
	case len(toks) >= 4 && (keyword(toks[0], "any") || keyword(toks[0], "first")) && toks[1].num && toks[2].punct == '(' && toks[len(toks)-1].punct == ')':
		c.quorum = keyword(toks[0], "any")
		c.n, ok = atoiSmall(toks[1].text)
		if !ok {
			return syncConfig{}, false
		}
		c.names, ok = list(toks[3 : len(toks)-1])
	case len(toks) >= 3 && toks[0].num && toks[1].punct == '(' && toks[len(toks)-1].punct == ')':
		c.n, ok = atoiSmall(toks[0].text)
		if !ok {
			return syncConfig{}, false
		}
		c.names, ok = list(toks[2 : len(toks)-1])
	default:
		c.names, ok = list(toks)
	}
	if !ok || c.n < 1 {
		return syncConfig{}, false
	}
	return c, true
}

// atoiSmall reads a count of standbys (digits only, at most 1 << 20).
func atoiSmall(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' || n > 1<<20 {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, s != ""
}

// foldASCII is name folded as PostgreSQL compares standby names
// (pg_strcasecmp: ASCII letters only; a name it folds further is then a
// different one here, which confirms no standby: the safe side).
func foldASCII(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// ceilLongest rounds seconds up for the record's Longest: to a whole
// second (at least 1), and above 8 s to a multiple of an eighth of the
// largest power of two at most that many seconds (600 s rounds to 640 s,
// a day's 86 400 s to 90 112 s), so at most an eighth more. The record is
// rewritten when Longest grows; the rounding keeps that to at most 8
// writes per doubling of the longest lifetime, while a fence (Longest +
// replay.SkewMargin) exceeds what it protects by at most an eighth (a
// power of two, as before, could nearly double it: a day's window became
// 131 072 s, 36.4 h). It is monotonic, so the record's max-merge of
// rounded values is the rounding of the max.
func ceilLongest(seconds float64) int64 {
	if seconds > maxFence.Seconds() || math.IsNaN(seconds) {
		return int64(maxFence / time.Second)
	}
	n := max(int64(math.Ceil(seconds)), 1)
	if n <= 8 {
		return n
	}
	p := int64(1) << (bits.Len64(uint64(n)) - 1) // the largest power of two <= n
	step := p / 8
	// At most the cap: rounding a lifetime just below it up past it would
	// make the rounding of a larger lifetime (the cap) smaller.
	return min((n+step-1)/step*step, int64(maxFence/time.Second))
}

// away counts the standbys that could take a sync member's place without
// streaming now, as far as the primary can see: each name the
// configuration lists under which no standby streams (a standby that
// reconnects under it takes part in commits at once), and, when it lists
// "*" (any name), each permanent physical slot no streaming standby uses
// (a standby that was stopped with its slot kept). A standby with no slot
// attached later under "*" is invisible here.
func away(cfg syncConfig, h history, slots int) int {
	n, star := 0, false
	seen := map[string]bool{}
	for _, name := range cfg.names {
		if name == "*" {
			star = true
			continue
		}
		f := foldASCII(name)
		if seen[f] {
			continue
		}
		seen[f] = true
		streams := false
		for _, m := range append(append([]member(nil), h.Sync...), h.Other...) {
			streams = streams || foldASCII(m.App) == f
		}
		if !streams {
			n++
		}
	}
	if star {
		used := 0
		for _, m := range append(append([]member(nil), h.Sync...), h.Other...) {
			if m.Slot != "" {
				used++
			}
		}
		n += max(0, slots-used)
	}
	return n
}

// verdict is what [judgeHistory] decides.
type verdict struct {
	write   string        // the record to write ("" when unchanged)
	fence   time.Duration // > 0: fence the table this long (with write)
	forever bool          // fence the table until Rearm names its end (with write)
	why     string        // why the fence
}

// fenced reports whether the verdict fences the table.
func (v verdict) fenced() bool { return v.fence > 0 || v.forever }

// judgeHistory decides, for a primary in state st, whether its history is
// known: the record it holds was written on its own cluster and timeline,
// or on its own cluster and the record names it a confirmed synchronous
// standby of the old primary. It returns the record to write, and the
// fence when the history is unknown: claims may be missing that any Store
// of the table made, for as long as any Store could hold one, which no
// copy of the record can show (it may be older than the fleet's: a
// standby that was away, another cluster's). So the fence lasts the
// horizon (the longest lifetime the Stores may use, [Options.Horizon]),
// or the longest lifetime seen if that is longer, plus
// [replay.SkewMargin]; without a horizon, until [Rearm] names its end.
func judgeHistory(st serverState, horizon time.Duration) verdict {
	if st.recovery || st.timeline <= 0 {
		return verdict{}
	}
	longest := int64(0)
	if st.longest > 0 {
		longest = ceilLongest(st.longest)
	}
	now := history{V: 1, TL: st.timeline, Sys: st.sys, Longest: longest}
	cfg, cfgOK := parseSyncNames(st.durable.SynchronousStandbyNames)
	for _, sb := range st.standbys {
		m := member{}
		if sb.App != nil {
			m.App = *sb.App
		}
		if sb.Slot != nil {
			m.Slot = *sb.Slot
		}
		state := ""
		if sb.State != nil {
			state = *sb.State
		}
		switch {
		case sb.App != nil && cfgOK && (state == "sync" || state == "quorum" && cfg.quorum):
			now.Sync = append(now.Sync, m)
		case state == "potential":
			now.Potential++
			now.Other = append(now.Other, m)
		default:
			// (A sync member of a configuration this code does not
			// read is no confirmed one: it goes with the others.)
			now.Other = append(now.Other, m)
		}
	}
	if len(now.Sync) > 0 {
		if cfg.quorum {
			now.Quorum = cfg.n
		}
		now.Away = away(cfg, now, st.durable.StandbySlots)
	}
	old, ok := parseHistory(st.record)
	var v verdict
	switch {
	case st.record == "" && st.timeline == 1:
		// No record (a table of an earlier version, or a marker
		// written by hand) on the timeline of initdb: no server of
		// this one's history was ever promoted.
	case st.record == "":
		// No record on a server that was promoted (or restored to a
		// point in time) at some instant: nothing shows that the
		// table's history began after it. Migrate, Schema and Rearm
		// write a record with the marker, so a table made on this
		// server has one.
		v.why = fmt.Sprintf("the server is primary on timeline %d, and the table has no history record", st.timeline)
	case !ok:
		v.why = "the table's history record is unreadable"
	case old.Sys != 0 && old.Sys != st.sys:
		v.why = fmt.Sprintf("the table's history record was written on another cluster (system identifier %d; this server's is %d): "+
			"a logical replica switched to, or a table restored from another cluster's dump, may lack the claims made there", old.Sys, st.sys)
	case old.TL != st.timeline && !old.names(st.self):
		v.why = fmt.Sprintf("the server is primary on timeline %d, and the last state it received (timeline %d) does not name it a synchronous standby", st.timeline, old.TL)
	}
	if ok {
		now.Longest = min(max(now.Longest, old.Longest), int64(maxFence/time.Second))
		if old.TL == st.timeline && (old.Sys == 0 || old.Sys == st.sys) {
			now.Fence = old.Fence
		}
	}
	if v.why != "" {
		now.Fence = v.why
		if horizon > 0 {
			v.fence = max(time.Duration(now.Longest)*time.Second, horizon) + replay.SkewMargin
			v.fence = min(v.fence, maxFence)
		} else {
			v.forever = true
		}
	}
	if w := now.encode(); w != st.record {
		v.write = w
	}
	return v
}

// keepHistory applies a verdict of [judgeHistory]: it writes the record
// (and the fence) only if the marker row still holds the record st read
// (another Store that wrote first decided already), and reports the fence
// the table has after it (if any). A refusal states its end
// ([fencedRefusal.RetryAt]) when it is known: the fence it wrote, or the
// one st read; not when writing the fence failed or another Store wrote
// first.
func (s *Store) keepHistory(ctx context.Context, st serverState, v verdict) (fenced error) {
	if v.write != "" {
		secs := v.fence.Seconds()
		n, err := call(s, ctx, func(ctx context.Context) (int64, error) {
			tag, err := s.pool.Exec(ctx, `UPDATE `+s.table+` SET token = $1,
	until = CASE WHEN $4 THEN 'infinity' WHEN $2::float8 > 0 THEN GREATEST(until, now() + $2::float8 * interval '1 second') ELSE until END
	WHERE key = `+markerSQL+` AND state = 'm' AND token = $3`, v.write, secs, st.record, v.forever)
			return tag.RowsAffected(), err
		})
		switch {
		case err != nil && v.fenced():
			// The fence could not be written: refuse until a recheck
			// writes it (a server that cannot be written refuses
			// claims anyway).
			return fencedError(time.Time{}, "%s; writing the fence failed", v.why)
		case err == nil && n == 1 && v.forever:
			s.log.Error("pgstore: the server's history is unknown: fencing the table until Rearm", "table", s.tableName(),
				"reason", v.why)
			return fencedError(time.Time{}, "%s; %s", v.why, s.untilRearm())
		case err == nil && n == 1 && v.fence > 0:
			s.log.Error("pgstore: the server's history is unknown: fencing the table", "table", s.tableName(),
				"reason", v.why, "fence", v.fence.String())
			// The fence ends v.fence after the statement's now(), which
			// the database read before it answered: by the instance's
			// clock, at most v.fence from now. GREATEST keeps a later
			// until (the one st read).
			end := s.checks.now().Add(v.fence)
			if st.fencedFor > 0 {
				end = later(end, st.readAt.Add(st.fencedFor))
			}
			return fencedError(end, "%s; fenced for %v", v.why, v.fence)
		case err == nil && n == 0:
			// Another Store changed the record first: the next check
			// reads what it wrote.
			if v.fenced() {
				return fencedError(time.Time{}, "%s", v.why)
			}
		}
	}
	if old, ok := parseHistory(st.record); ok && old.Fence != "" && st.fencedForever {
		return fencedError(time.Time{}, "%s; %s", old.Fence, s.untilRearm())
	}
	if old, ok := parseHistory(st.record); ok && old.Fence != "" && st.fencedFor > 0 {
		return fencedError(st.readAt.Add(st.fencedFor), "%s; %v left", old.Fence, st.fencedFor.Round(time.Second))
	}
	return nil
}

// tableName is the store's table as a message names it (unquoted).
func (s *Store) tableName() string { return strings.ReplaceAll(s.table, `"`, "") }

// untilRearm says how a fence without end is lifted.
func (s *Store) untilRearm() string {
	return fmt.Sprintf("fenced until an operator runs pgstore.Rearm(ctx, pool, %q, fence) with fence the longest lifetime "+
		"any Store of the table gives a claim, lease or record, plus replay.SkewMargin (set Options.Horizon for a fence that ends by itself)", s.tableName())
}

// fencedRefusal is a refusal of a fenced table: it matches [ErrFenced]
// and [ErrUnavailable] (errors.Is), and states when the fence ends, when
// that is known, for [replay.RetryAt] to find.
type fencedRefusal struct {
	msg string
	// end is when the fence ends by the instance's clock: the remaining
	// duration the database measured (by its clock) added to the
	// instance's time when it answered; zero when unknown.
	end time.Time
}

// fencedError returns a [fencedRefusal] ending at end (zero: unknown)
// with the message fmt.Errorf("%w: %w: "+format, ErrUnavailable,
// ErrFenced, args...) writes.
func fencedError(end time.Time, format string, args ...any) error {
	return &fencedRefusal{msg: ErrUnavailable.Error() + ": " + ErrFenced.Error() + ": " + fmt.Sprintf(format, args...), end: end}
}

func (e *fencedRefusal) Error() string   { return e.msg }
func (e *fencedRefusal) Unwrap() []error { return []error{ErrUnavailable, ErrFenced} }

// RetryAt returns when the fence ends by itself, by the instance's clock
// (the database's remaining duration from the instance's time of the
// read), or the zero time when unknown: see [replay.RetryAt].
func (e *fencedRefusal) RetryAt() time.Time { return e.end }

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// selfFrom is the name the server streamed under as a standby: see
// [self].
func selfFrom(slot, cluster string, conninfo *string) self {
	me := self{slot: slot, app: "walreceiver"}
	if cluster != "" {
		me.app = cluster
	}
	if conninfo != nil {
		if app, ok := conninfoApp(*conninfo); ok {
			me.app = app
		}
	}
	return me
}

// conninfoApp returns the application_name of a libpq connection string
// (key=value pairs, values optionally single-quoted with backslash
// escapes, or a postgres:// URI), and whether it has one.
func conninfoApp(s string) (string, bool) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		_, q, ok := strings.Cut(s, "?")
		if !ok {
			return "", false
		}
		v, err := url.ParseQuery(q)
		if err != nil || !v.Has("application_name") {
			return "", false
		}
		return v.Get("application_name"), true
	}
	app, found := "", false
	for i := 0; i < len(s); {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
		if i == len(s) {
			break
		}
		k := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' {
			i++
		}
		key := s[k:i]
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i == len(s) || s[i] != '=' {
			return "", false
		}
		i++
		for i < len(s) && s[i] == ' ' {
			i++
		}
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			if i == len(s) {
				return "", false // unterminated quote
			}
			i++
		} else {
			for ; i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
		}
		if key == "application_name" {
			app, found = val.String(), true
		}
	}
	return app, found
}
