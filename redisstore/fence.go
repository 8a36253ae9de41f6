package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// Provision opens a brand-new key space: it writes an "open" fence marker
// into every shard, so the store serves at once instead of fencing every
// shard for one horizon on first use. It is for a prefix that has never
// held claims, never for one that lost data: a store that finds a marker
// missing cannot tell a new key space from one whose data was lost, and
// Provision tells it "new". Run it once, when deploying a new prefix (or
// after upgrading from the key layout before fences; see CHANGELOG.md).
//
// Provision writes only when no shard has a marker. When every shard has
// one it changes nothing and returns 0: with a nil error when every shard
// is open (provisioned already), with an error matching [ErrFenced] when
// some are fenced (data lost, or claims were tried before Provision). When some have and some do not — a partial loss, or a Provision
// that was interrupted — it changes nothing and returns an error matching
// [ErrConfig]: wait out the fence of the missing shards (one horizon; the
// store opens them by itself) or use a new prefix; or, when the prefix
// never served a claim (claims were tried before Provision), see
// [Store.ReprovisionNeverUsed]. It returns how many
// markers it wrote. Concurrent Provision calls on one new key space are
// safe (each marker is written with SET NX).
func (s *Store) Provision(ctx context.Context) (opened int, err error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	present, fenced := 0, 0
	for _, m := range s.tags {
		v, err := s.call(ctx, "GET", m)
		switch {
		case errors.Is(err, errNil):
		case err != nil:
			return 0, err
		default:
			present++
			if str, _ := v.(string); str != "O" {
				fenced++
			}
		}
	}
	switch {
	case present == Shards && fenced > 0:
		return 0, refuse(ErrFenced, whyProvisionFenced, fmt.Errorf("%w: %d of %d shards fenced", ErrUnavailable, fenced, Shards))
	case present == Shards:
		return 0, nil
	case present == 0:
	default:
		return 0, refuse(ErrConfig, "key space partly provisioned: a shard may have lost data",
			fmt.Errorf("%d of %d shard markers present; wait out the fence, use a new prefix, or (only if this prefix never served a claim) ReprovisionNeverUsed", present, Shards))
	}
	for _, m := range s.tags {
		v, err := s.call(ctx, "SET", m, "O", "NX")
		switch {
		case errors.Is(err, errNil): // another Provision, or a fence, was first
		case err != nil:
			return opened, err
		case v == "OK":
			opened++
		}
	}
	return opened, nil
}

// ReprovisionNeverUsed opens a key space that is fenced only because
// claims were tried before [Store.Provision] was run: for development and
// first deploys, where waiting one horizon (or choosing a new prefix) is
// the alternative.
//
// DANGER: a key space whose data Redis lost looks the same as one that
// was never provisioned — fence markers written by the first claims after
// the loss, and no entries. Calling this after a restart without
// persistence, a FLUSHALL or FLUSHDB (before a CONFIG RESETSTAT or a
// restart hid it), eviction, or a failover to a replica that missed writes
// opens the key space at once, and every ID claimed before the loss and
// not yet expired is accepted a second time. Never call it after an
// incident, from automation, or on a prefix that served traffic; only an
// operator who knows the prefix never held a claim may.
//
// It refuses with [ErrConfig], changing nothing, when any evidence says the
// prefix served or data was lost: a shard marker that is open ("O": the
// prefix was provisioned, or a fence ran out), any entry under the prefix
// (a claim, lease or note; found with SCAN on every master), keys evicted
// (INFO stats evicted_keys) or FLUSHALL/FLUSHDB run (INFO commandstats)
// since the server started. Otherwise it opens every marker that is
// missing or fenced and returns how many it opened; TestReprovisionNeverUsed
// shows each case.
func (s *Store) ReprovisionNeverUsed(ctx context.Context) (opened int, err error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	for _, m := range s.tags {
		v, err := s.call(ctx, "GET", m)
		switch {
		case errors.Is(err, errNil):
		case err != nil:
			return 0, err
		default:
			if str, _ := v.(string); !strings.HasPrefix(str, "F") {
				return 0, refuse(ErrConfig, whyServed, errors.New("a shard marker is open: the prefix was provisioned or has served"))
			}
		}
	}
	masters, err := s.mastersErr(ctx)
	if err != nil {
		return 0, err
	}
	pattern := globEscape(s.prefix) + "{[0-9][0-9]}:*"
	for _, m := range masters {
		if err := s.lossEvidence(ctx, m); err != nil {
			return 0, err
		}
		var cursor any = "0"
		for {
			v, err := m.Do(ctx, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000).Result()
			if err != nil {
				return 0, s.wrapErr(ctx, err)
			}
			r, ok := v.([]any)
			if !ok || len(r) != 2 {
				return 0, fmt.Errorf("%w: unexpected reply to SCAN", ErrUnavailable)
			}
			if keys, _ := r[1].([]any); len(keys) > 0 {
				return 0, refuse(ErrConfig, whyServed, errors.New("the key space holds entries"))
			}
			cursor = r[0]
			if c, _ := cursor.(string); c == "0" {
				break
			}
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
	s.log.Warn("redisstore: ReprovisionNeverUsed opened a fenced key space; had it lost data, IDs claimed before the loss would be accepted again", "prefix", s.prefix, "opened", opened)
	return opened, nil
}

// whyProvisionFenced is Provision's refusal of a fenced key space.
const whyProvisionFenced = "key space fenced: it lost data, or claims were tried before Provision; wait out the fence, use a new prefix, or (only if this prefix never served a claim) ReprovisionNeverUsed"

// whyServed is ReprovisionNeverUsed's refusal.
const whyServed = "the key space shows it served claims or lost data: ReprovisionNeverUsed refuses; wait out the fence or use a new prefix"

// openNeverUsedScript opens KEYS[1] when it is missing or fenced: 1
// opened, 0 left as it was (open already).
const openNeverUsedScript = `local m = redis.call('GET', KEYS[1])
if m and string.sub(m, 1, 1) ~= 'F' then return 0 end
redis.call('SET', KEYS[1], 'O')
return 1`

// lossEvidence refuses when the master's counters show keys evicted or a
// flush since it started (or since CONFIG RESETSTAT).
func (s *Store) lossEvidence(ctx context.Context, m doer) error {
	for _, section := range []string{"stats", "commandstats"} {
		v, err := m.Do(ctx, "INFO", section).Result()
		if err != nil {
			return s.wrapErr(ctx, err)
		}
		text, _ := v.(string)
		for _, line := range strings.Split(text, "\n") {
			k, val, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch {
			case k == "evicted_keys" && val != "0":
				return refuse(ErrConfig, whyServed, errors.New("the server evicted keys"))
			case k == "cmdstat_flushall" || k == "cmdstat_flushdb":
				return refuse(ErrConfig, whyServed, fmt.Errorf("%s ran", strings.TrimPrefix(k, "cmdstat_")))
			}
		}
	}
	return nil
}

// globEscape escapes the characters SCAN's MATCH treats specially.
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
