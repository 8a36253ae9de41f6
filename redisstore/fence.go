package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
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
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % Shards)
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
// one it changes nothing and returns 0 (provisioned already, or fenced
// since). When some have and some do not — a partial loss, or a Provision
// that was interrupted — it changes nothing and returns an error matching
// [ErrConfig]: wait out the fence of the missing shards (one horizon; the
// store opens them by itself) or use a new prefix. It returns how many
// markers it wrote. Concurrent Provision calls on one new key space are
// safe (each marker is written with SET NX).
func (s *Store) Provision(ctx context.Context) (opened int, err error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	present := 0
	for _, m := range s.tags {
		_, err := s.call(ctx, "GET", m)
		switch {
		case errors.Is(err, errNil):
		case err != nil:
			return 0, err
		default:
			present++
		}
	}
	switch present {
	case Shards:
		return 0, nil
	case 0:
	default:
		return 0, refuse(ErrConfig, "key space partly provisioned: a shard may have lost data",
			fmt.Errorf("%d of %d shard markers present; wait out the fence or use a new prefix", present, Shards))
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
