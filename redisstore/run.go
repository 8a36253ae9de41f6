package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// run runs one guarded script (claim, acquire, confirm) for id within one
// store deadline, after the server checks, and decodes its {code, value}
// reply. The guard's refusals become errors; code 1 (the script wrote the
// entry) also needs the Durability verdict.
func (s *Store) run(ctx context.Context, sc script, id string, args ...string) (code, val int64, err error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return 0, 0, err
	}
	marker, entry, shard := s.keys(id)
	cmd := make([]any, 0, 8+len(args))
	cmd = append(cmd, "EVALSHA", sc.sha, 2, marker, entry,
		strconv.FormatInt(s.now().UnixMilli(), 10), s.skewArg, s.horizonArg)
	for _, a := range args {
		cmd = append(cmd, a)
	}
	var v any
	var durErr error
	if s.dur.on() {
		v, err = s.pipeline(ctx, sc, marker, cmd)
		if err != nil && v != nil {
			durErr, err = err, nil
		}
	} else {
		v, err = s.eval(ctx, sc, cmd)
	}
	if err != nil {
		return 0, 0, err
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 2 {
		return 0, 0, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	code, ok1 := reply[0].(int64)
	val, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("%w: unexpected reply to a script", ErrUnavailable)
	}
	switch code {
	case -1:
		until := time.UnixMilli(val)
		s.emit(Event{Kind: EventFenceRaised, Shard: shard, Until: until})
		return code, val, refuse(ErrFenced, whyFenceRaised, fmt.Errorf("%w: shard %d fenced until %s", ErrUnavailable, shard, until.UTC().Format(time.RFC3339)))
	case -2:
		until := time.UnixMilli(val)
		s.emit(Event{Kind: EventFenced, Shard: shard, Until: until})
		return code, val, refuse(ErrFenced, whyFenced, fmt.Errorf("%w: shard %d fenced until %s", ErrUnavailable, shard, until.UTC().Format(time.RFC3339)))
	case -3:
		s.emit(Event{Kind: EventClockSkew, Shard: shard})
		return code, val, refuse(ErrClockSkew, whySkew, fmt.Errorf("%w: behind by %v", ErrUnavailable,
			(time.Duration(val)*time.Millisecond-time.Duration(s.now().UnixMilli())*time.Millisecond).Round(time.Millisecond)))
	case -4:
		return code, val, refuse(ErrUnavailable, whyBadMarker, nil)
	case -5:
		return code, val, refuse(ErrInvalidClaim, whyPastRedis, replay.ErrExpired)
	case -6:
		return code, val, refuse(ErrInvalidClaim, whyHorizon, nil)
	}
	if (code == 1 || (sc.sha == claimLua.sha && code == 2)) && durErr != nil {
		s.emit(Event{Kind: EventNotDurable, Shard: shard})
		return 0, 0, durErr
	}
	return code, val, nil
}

// eval runs an EVALSHA command of sc (see [command]) on the client, and
// its EVAL form (which also caches the script) only when the server does
// not know the script yet. ctx already carries the store's deadline.
func (s *Store) eval(ctx context.Context, sc script, cmd []any) (any, error) {
	v, err := s.call(ctx, cmd...)
	if err != nil && isNoScript(err) {
		v, err = s.call(ctx, asEval(sc, cmd)...)
	}
	if errors.Is(err, errNil) {
		return nil, fmt.Errorf("%w: unexpected nil reply to a script", ErrUnavailable)
	}
	return v, err
}
