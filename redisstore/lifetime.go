package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A fence lasts as long as what it protects (issue 56). Each store knows
// the longest lifetime it has claimed for: an until's distance from
// Options.Now, or a lease. Before it sends the first claim, lease or
// record step whose lifetime is longer than the one it knows, it records
// the key space's lifetime, the larger of what <prefix>lifetime holds and
// lifetimeOf(the step's lifetime), with lifetimeScript: one round trip,
// only when the lifetime grows (once per store and lifetime in the common
// case). Every guarded script then takes the known lifetime as its bound
// (ARGV[3], the Horizon before issue 56): a step reaching past it by
// Redis's clock is refused ([ErrInvalidClaim]), and a fence raised by the
// script or by the checks ([Store.fenceAll]) lasts exactly that long. So
// every claim accepted before a loss has expired when its fence ends: the
// fence costs the key space's longest lifetime, not one Horizon. A store
// that has claimed nothing yet, and knows no record, fences with its
// Horizon (the checks' fence, [Store.fenceAll]); its first step records
// that step's lifetime before it is sent, so a fence the step's script
// raises lasts that lifetime. The Horizon bounds the lifetimes the store
// records for its own steps; a longer record of another application is
// learned whole (see learnLifetime).
//
// Stores of other applications on the key space learn the record at each
// server check (RecheckInterval) and fence for the longest lifetime any of
// them recorded; a store that raised a shorter fence than another store
// knows (it had not read the record yet, or a restart lost it) has it
// lengthened by that store's next guarded step on the shard, which reads
// when the fence was raised (the key <prefix>{NN}f, written with it) and
// fences until then plus its own lifetime: the longer wins.

// lifetimeKey is the key of the key space's recorded lifetime.
func (s *Store) lifetimeKey() string { return s.prefix + "lifetime" }

// lifetimeOf is the lifetime recorded for a step of lifetime d: a quarter
// more, plus MaxSkew (an instance's clock may be ahead of Redis's by that
// much and its untils reach that much further by Redis's clock), rounded
// up to a second, at most the Horizon. The headroom keeps later steps of
// the same work (an until measured a little later) from recording again.
func (s *Store) lifetimeOf(d time.Duration) time.Duration {
	l := d + d/4 + s.maxSkew
	if r := l % time.Second; r != 0 {
		l += time.Second - r
	}
	if l > s.horizon || l <= 0 {
		return s.horizon
	}
	return l
}

// boundFor returns the bound (ms, as text) to send with a guarded step of
// lifetime ms, after recording a longer lifetime when the step needs one.
// The common case is one atomic load.
func (s *Store) boundFor(ctx context.Context, ms int64) (*string, error) {
	if ms <= s.life.Load() {
		return s.boundArg.Load(), nil
	}
	want := s.lifetimeOf(time.Duration(ms) * time.Millisecond).Milliseconds()
	v, err := s.call(ctx, "EVAL", lifetimeScript, 1, s.lifetimeKey(), want)
	if err != nil {
		return nil, err
	}
	n, ok := v.(int64)
	if !ok || n < want {
		return nil, fmt.Errorf("%w: unexpected reply to the lifetime script", ErrUnavailable)
	}
	s.learnLifetime(n)
	return s.boundArg.Load(), nil
}

// learnLifetime raises the lifetime the store knows to ms, never lowers
// it. A record of another application may exceed this store's Horizon:
// it is learned whole (at most maxLifetimeMs, as parseLifetime reads it),
// so that this store's fences last until that application's claims have
// expired too (TestLifetime/record outlasting a shorter horizon fences);
// this store's own steps stay within its Horizon (untilMillis,
// leaseMillis), and the looser bound its scripts then check by Redis's
// clock is the length of the fence they raise, which still covers every
// step they accepted.
func (s *Store) learnLifetime(ms int64) {
	if ms > maxLifetimeMs {
		ms = maxLifetimeMs
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if ms <= s.life.Load() {
		return
	}
	arg := strconv.FormatInt(ms, 10)
	s.boundArg.Store(&arg)
	s.life.Store(ms)
}

// readLifetime reads the key space's recorded lifetime: 0 when none is
// recorded.
func (s *Store) readLifetime(ctx context.Context) (time.Duration, error) {
	v, err := s.call(ctx, "GET", s.lifetimeKey())
	switch {
	case errors.Is(err, errNil):
		return 0, nil
	case err != nil:
		return 0, err
	}
	l, ok := parseLifetime(v)
	if !ok {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, errBadLifetime)
	}
	return l, nil
}

// errBadLifetime is a lifetime record the store cannot decode.
var errBadLifetime = errors.New("the key space's lifetime record holds an unexpected value")

// parseLifetime decodes the lifetime record's value: a positive number
// of milliseconds, at most a year (no store's Horizon is longer in
// practice; a larger value is taken as corrupt rather than overflowing).
func parseLifetime(v any) (time.Duration, bool) {
	str, _ := v.(string)
	ms, err := strconv.ParseInt(str, 10, 64)
	if err != nil || ms <= 0 || ms > maxLifetimeMs {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// maxLifetimeMs bounds a decoded lifetime record: one year.
const maxLifetimeMs = int64(365 * 24 * time.Hour / time.Millisecond)

// learnRecordedLifetime learns the key space's recorded lifetime, for the
// server checks: another application's longer lifetime lengthens the
// fences this store raises. A record shorter than what the store knows
// (lost with the data, as in a restart without persistence) is written
// again, so that ctoken-store status shows it. A record that cannot be
// read teaches nothing; the store's own lifetime still bounds its fences.
func (s *Store) learnRecordedLifetime(ctx context.Context) {
	l, err := s.readLifetime(ctx)
	if err != nil {
		return
	}
	if l > 0 {
		s.learnLifetime(l.Milliseconds())
	}
	if own := s.life.Load(); own > l.Milliseconds() {
		if _, err := s.call(ctx, "EVAL", lifetimeScript, 1, s.lifetimeKey(), own); err != nil {
			s.log.Warn("redisstore: could not record the key space's lifetime again", "prefix", s.prefix, "error", err)
		}
	}
	s.lengthenFences(ctx)
}

// lengthenFences lengthens every running fence of the key space to when
// it was raised plus the lifetime this store knows, where that is later,
// at each server check: two applications on one prefix fence for the
// longest lifetime either knows. A loss met first by a store of the
// shorter lifetime is fenced for that lifetime (its script on a missing
// marker, or its check, whose baseline then consumes the evidence for
// every other store: issue 105), and the record of the longer one may be
// lost with the data (FLUSHALL, a restart without persistence) before
// the shorter one read it; the store that knows the longer lifetime, if
// it runs, lengthens those fences here, whether or not its own steps
// meet them, within one RecheckInterval of the loss. The markers are
// read in one pipeline; a shard is sent lengthenScript only when its
// fence, or this store's lifetime, changed since this store last judged
// it. A store that knows no lifetime (it has claimed nothing and read no
// record) has nothing to protect and lengthens nothing: its Horizon, what
// its own fences last, would hold others' fences for the Horizon. Best
// effort: a shard it cannot read or lengthen is judged again at the next
// check, and each guarded step lengthens its own shard's fence too.
func (s *Store) lengthenFences(ctx context.Context) {
	life := s.life.Load()
	if life <= 0 {
		return // no lifetime known: no claim of this store's to protect
	}
	markers, err := s.getMarkers(ctx)
	if err != nil {
		return
	}
	s.judgedMu.Lock()
	defer s.judgedMu.Unlock()
	bound := strconv.FormatInt(life, 10)
	for i, m := range markers {
		if m == nil || !strings.HasPrefix(*m, "F") {
			s.judged[i] = ""
			continue
		}
		if s.judged[i] == *m+" "+bound {
			continue
		}
		v, err := s.call(ctx, "EVAL", lengthenScript, 1, s.tags[i], "", "", bound)
		if err != nil {
			continue
		}
		switch f, ok := v.(int64); {
		case ok && f > 0:
			s.judged[i] = fmt.Sprintf("F%d %s", f, bound)
		case ok: // not fenced, or ended: nothing to lengthen until it changes
			s.judged[i] = *m + " " + bound
		}
	}
}

// lengthenScript lengthens the running fence of the marker KEYS[1] to
// when it was raised plus ARGV[3] (ms; ARGV[1] and ARGV[2] unused, as the
// guard's clock arguments), where that is later (lengthenLua), and
// returns the fence's end (ms); 0 when the shard is not fenced, or its
// fence has ended.
const lengthenScript = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('GET', KEYS[1])
local f = m and string.sub(m, 1, 1) == 'F' and tonumber(string.sub(m, 2))
if not f or now >= f then return 0 end
` + lengthenLua + `return f`

// Lifetime is the longest lifetime this store knows the key space's
// claims, leases and records to have (its own, and what the key space
// records for other stores, read at each server check): how long a fence
// it raises lasts. It is the Horizon until the store has claimed anything
// or read a record; a record longer than the Horizon (another
// application's) is learned whole. Safe for concurrent use.
func (s *Store) Lifetime() time.Duration {
	if ms := s.life.Load(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return s.horizon
}

// lifetimeScript records KEYS[1], the key space's lifetime, as ARGV[1]
// (ms) when it holds less or nothing, and returns what it holds after.
const lifetimeScript = `local v = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local w = tonumber(ARGV[1])
if w > v then
  redis.call('SET', KEYS[1], ARGV[1])
  return w
end
return v`
