package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RecheckInterval is how often a Store runs the server checks again, in
// the background of its calls, so that a replica attached (or an eviction
// policy set) after it started is found: from then on every call refuses
// with [ErrConfig].
const RecheckInterval = time.Minute

// ready runs the server checks once (Open runs them at construction; a
// Store from New before its first call), and again every RecheckInterval
// in the background. A failed check that is a misconfiguration is
// remembered and returned by every later call; one that is not (Redis
// unreachable, clock skew) is tried again next call.
func (s *Store) ready(ctx context.Context) error {
	if p := s.checkErr.Load(); p != nil {
		return *p
	}
	if s.checked.Load() {
		if last := s.lastCheck.Load(); time.Now().UnixMilli()-last > RecheckInterval.Milliseconds() &&
			s.lastCheck.CompareAndSwap(last, time.Now().UnixMilli()) {
			s.recheck()
		}
		return nil
	}
	select {
	case s.check <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	defer func() { <-s.check }()
	if s.checked.Load() {
		return nil
	}
	if p := s.checkErr.Load(); p != nil {
		return *p
	}
	err := s.checkServer(ctx)
	switch {
	case err == nil:
		s.lastCheck.Store(time.Now().UnixMilli())
		s.checked.Store(true)
	case errors.Is(err, ErrConfig):
		s.checkErr.Store(&err)
	}
	return err
}

// recheck runs the server checks in the background; a misconfiguration it
// finds makes every later call refuse.
func (s *Store) recheck() {
	if !s.cancels.start() {
		return
	}
	go func() {
		defer s.cancels.wg.Done()
		timeout := s.timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*timeout)
		defer cancel()
		if err := s.checkServer(ctx); errors.Is(err, ErrConfig) {
			s.checkErr.Store(&err)
			s.log.Error("redisstore: the server no longer fits the store's Options; every call refuses", "prefix", s.prefix, "reason", Reason(err))
		}
	}()
}

// doer is one master to check.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// checkServer checks every master: its role and replicas against the
// Durability setting, WAITAOF when asked for, maxmemory-policy, the
// persistence settings, and the clock.
func (s *Store) checkServer(ctx context.Context) error {
	var masters []doer
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			masters = append(masters, m)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return s.wrapErr(ctx, err)
		}
		if len(masters) == 0 {
			return fmt.Errorf("%w: the cluster reports no master", ErrUnavailable)
		}
	default:
		masters = []doer{s.client}
	}
	for _, m := range masters {
		if err := s.checkMaster(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) checkMaster(ctx context.Context, m doer) error {
	do := func(args ...any) (any, error) {
		type result struct {
			v   any
			err error
		}
		done := make(chan result, 1)
		go func() {
			v, err := m.Do(ctx, args...).Result()
			done <- result{v, err}
		}()
		select {
		case r := <-done:
			return r.v, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	// Role and replicas.
	v, err := do("ROLE")
	switch {
	case err != nil && isRefused(err):
		if !s.dur.on() && !s.opts.AllowAsyncReplicas {
			return refuse(ErrConfig, "cannot read ROLE to check for replicas; set Durability or AllowAsyncReplicas", fmt.Errorf("%w", err))
		}
	case err != nil:
		return s.wrapErr(ctx, err)
	default:
		role, replicas, ok := parseRole(v)
		if !ok {
			return fmt.Errorf("%w: unexpected reply to ROLE", ErrUnavailable)
		}
		if role != "master" {
			return refuse(ErrConfig, "client points at a Redis that is not a primary", fmt.Errorf("ROLE %s", role))
		}
		if replicas > 0 && s.dur.Replicas < 1 && s.dur.ReplicaAOF < 1 && !s.opts.AllowAsyncReplicas {
			return refuse(ErrConfig, "Redis has replicas but Durability waits for none (Replicas or ReplicaAOF): a failover could accept IDs twice; set Durability.Replicas or AllowAsyncReplicas",
				fmt.Errorf("%d replicas", replicas))
		}
	}
	// WAITAOF exists (Redis 7.2) and can do what is asked.
	if s.dur.waitAOF != nil {
		local := s.dur.waitAOF[1]
		if _, err := do("WAITAOF", local, "0", "0"); err != nil {
			msg := strings.ToLower(err.Error())
			switch {
			case strings.Contains(msg, "unknown command"):
				return refuse(ErrConfig, "Durability asks for WAITAOF, which needs Redis 7.2 or newer", err)
			case strings.HasPrefix(msg, "err"):
				return refuse(ErrConfig, "Durability asks for WAITAOF, which the server refuses", err)
			}
			return s.wrapErr(ctx, err)
		}
	}
	// Eviction.
	v, err = do("CONFIG", "GET", "maxmemory-policy")
	switch {
	case err != nil && isRefused(err):
		s.log.Warn("redisstore: cannot read maxmemory-policy (CONFIG GET refused); make sure it is noeviction", "prefix", s.prefix)
	case err != nil:
		return s.wrapErr(ctx, err)
	default:
		policy, ok := configValue(v, "maxmemory-policy")
		if !ok {
			s.log.Warn("redisstore: cannot read maxmemory-policy (unexpected CONFIG GET reply); make sure it is noeviction", "prefix", s.prefix)
		} else if policy != "noeviction" && !s.opts.AllowEviction {
			return refuse(ErrConfig, "maxmemory-policy is not noeviction: eviction could drop claims unnoticed; set it, or AllowEviction", fmt.Errorf("maxmemory-policy %s", policy))
		}
	}
	// Persistence.
	if err := s.checkPersistence(ctx, do); err != nil {
		return err
	}
	// Clock.
	v, err = do("TIME")
	if err != nil {
		return s.wrapErr(ctx, err)
	}
	redisNow, ok := parseTime(v)
	if !ok {
		return fmt.Errorf("%w: unexpected reply to TIME", ErrUnavailable)
	}
	if behind := redisNow.Sub(s.now()); behind > s.maxSkew {
		return refuse(ErrClockSkew, whySkew, fmt.Errorf("%w: behind by %v", ErrUnavailable, behind.Round(time.Millisecond)))
	}
	return nil
}

// checkPersistence refuses a master whose restart can bring back older
// data: the fence markers survive such a rollback while the newest claims
// do not, so the loss is not seen. A restart must bring back everything
// acknowledged (AOF with appendfsync always, or with Durability.LocalAOF,
// which waits for the fsync) or nothing (no AOF and no RDB snapshots: the
// markers are gone too, and the shard is fenced).
func (s *Store) checkPersistence(ctx context.Context, do func(args ...any) (any, error)) error {
	if s.opts.AllowRollback {
		return nil
	}
	// errUnread: CONFIG GET refused (managed services) or answered
	// unexpectedly; the store runs and says it could not check.
	errUnread := errors.New("unread")
	get := func(name string) (string, error) {
		v, err := do("CONFIG", "GET", name)
		switch {
		case err != nil && isRefused(err):
			return "", errUnread
		case err != nil:
			return "", s.wrapErr(ctx, err)
		}
		value, ok := configValue(v, name)
		if !ok {
			return "", errUnread
		}
		return value, nil
	}
	err := func() error {
		aof, err := get("appendonly")
		if err != nil {
			return err
		}
		switch aof {
		case "yes":
			if s.dur.LocalAOF {
				return nil // every write waits for WAITAOF's local fsync
			}
			fsync, err := get("appendfsync")
			if err == nil && fsync != "always" {
				err = refuse(ErrConfig, "AOF with appendfsync not always: a machine crash restarts Redis without the last claims and with the fence markers, so those IDs are accepted again; set appendfsync always, Durability.LocalAOF, or AllowRollback",
					fmt.Errorf("appendfsync %s", fsync))
			}
			return err
		case "no":
			save, err := get("save")
			if err == nil && strings.TrimSpace(save) != "" {
				err = refuse(ErrConfig, "RDB snapshots without AOF: a restart loads a snapshot with the fence markers and without the later claims, so those IDs are accepted again; turn snapshots off (save \"\"), use AOF with appendfsync always, or AllowRollback",
					fmt.Errorf("save %q", save))
			}
			return err
		}
		return errUnread
	}()
	if err == errUnread {
		s.log.Warn("redisstore: cannot read the persistence settings (CONFIG GET refused or unexpected); make sure a restart cannot bring back older data: AOF with appendfsync always, or no persistence", "prefix", s.prefix)
		return nil
	}
	return err
}

// isRefused reports a server error reply that refuses the command itself
// (unknown, renamed or forbidden), as opposed to a transport failure.
func isRefused(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "noperm") || strings.Contains(msg, "no permissions")
}

// parseRole reads ROLE: {"master", offset, {{ip, port, offset}, ...}}.
func parseRole(v any) (role string, replicas int, ok bool) {
	r, isSlice := v.([]any)
	if !isSlice || len(r) == 0 {
		return "", 0, false
	}
	role, ok = r[0].(string)
	if !ok {
		return "", 0, false
	}
	if role != "master" {
		return role, 0, true
	}
	if len(r) < 3 {
		return "", 0, false
	}
	reps, isSlice := r[2].([]any)
	if !isSlice {
		return "", 0, false
	}
	return role, len(reps), true
}

// configValue reads CONFIG GET's reply (a map in RESP3, a flat list in RESP2).
func configValue(v any, name string) (string, bool) {
	switch r := v.(type) {
	case map[any]any:
		s, ok := r[name].(string)
		return s, ok
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if k, _ := r[i].(string); k == name {
				s, ok := r[i+1].(string)
				return s, ok
			}
		}
	}
	return "", false
}

// parseTime reads TIME: {seconds, microseconds} as strings.
func parseTime(v any) (time.Time, bool) {
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return time.Time{}, false
	}
	var sec, usec int64
	for i, p := range []*int64{&sec, &usec} {
		s, ok := r[i].(string)
		if !ok {
			return time.Time{}, false
		}
		if _, err := fmt.Sscan(s, p); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(sec, usec*1000), true
}
