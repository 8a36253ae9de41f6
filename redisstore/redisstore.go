// Package redisstore is a [replay.Store] backed by Redis, for fleets of
// servers that must accept each single-use ID (one-time token, single-use
// request state, webhook delivery) exactly once across every instance.
//
// A claim is one atomic Redis command:
//
//	SET <prefix><id> 1 NX PXAT <until in unix milliseconds>
//
// Redis answers OK to exactly one of any number of concurrent claims of the
// same live key, and deletes the key itself at the absolute expiry, so the
// store needs no sweeper and every instance agrees on when an ID may be
// claimed again. PXAT needs Redis 6.2 or newer (or a compatible server).
//
// The store also implements [replay.Leaser], which the webhook middleware
// needs: acquiring, confirming and releasing a lease are each one Lua script
// (EVALSHA) on the one key <prefix><id>, so every operation of the store
// touches a single key and works unchanged on Redis Cluster. A lease is
// measured by Redis's clock (SET PX) and ends by itself, so a lease whose
// holder crashed, or whose acquisition timed out but was executed later,
// frees the ID after at most the lease duration.
//
// The store fails closed: when Redis is down, slow, or answers anything
// unexpected, Claim returns first == false and an error matching
// ErrUnavailable. Callers must treat every error as "refuse the request".
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "ctoken:replay:"

// DefaultTimeout bounds each claim when Options.Timeout is zero.
const DefaultTimeout = time.Second

// MaxIDBytes is the longest ID Claim accepts. Longer IDs are refused with
// ErrInvalidClaim before anything is sent to Redis.
const MaxIDBytes = 512

// Sentinel errors, usable with errors.Is. Every error Claim returns matches
// exactly one of them, and Claim always returns first == false with it.
var (
	// ErrUnavailable reports that the store could not decide whether the
	// claim was first: Redis unreachable, timed out, or answered with an
	// error or an unexpected reply. When the caller's context had ended by
	// the time the call returned, the error also matches the context's error
	// (context.DeadlineExceeded or context.Canceled); a client socket timeout
	// that fires just before the deadline matches only ErrUnavailable. The claim may or may not have been
	// recorded; the caller must refuse the request.
	ErrUnavailable = errors.New("redisstore: replay store unavailable")

	// ErrInvalidClaim reports a claim refused before reaching Redis: an empty
	// ID, an ID over MaxIDBytes, or an until that is not in the future (an
	// already expired single-use token must be refused as expired, and there
	// is nothing left to remember). Nothing is recorded.
	ErrInvalidClaim = errors.New("redisstore: invalid claim")
)

// Client is the part of a go-redis client the store uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient all satisfy it.
type Client interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to every ID to form the Redis key, so several
	// stores (or applications) can share one Redis without seeing each
	// other's claims. Empty means DefaultPrefix.
	Prefix string

	// Timeout bounds every Claim: the effective deadline is the earlier of
	// the caller's context deadline and now + Timeout. Zero means
	// DefaultTimeout; a negative value means only the caller's context
	// bounds the call (and, without one, the client's own timeouts).
	Timeout time.Duration

	// Now returns the current time, used to refuse an until that has already
	// passed. Nil means time.Now. The expiry itself is enforced by Redis's
	// clock, so keep the fleet's clocks and Redis's in sync (NTP): Redis
	// answers OK to a SET NX PXAT that is already past by its clock and
	// records nothing, so a claim whose until lies within the skew reports
	// first == true every time. Callers hold claims past their own
	// acceptance window by a margin (ctoken one-time tokens and single-use
	// request states: 60 s).
	Now func() time.Time
}

// Store is a [replay.Store] backed by Redis. It also implements the
// optional [replay.Releaser] (Release) and [replay.Leaser] (AcquireLease,
// ConfirmLease, ReleaseLease), which the webhook middleware uses to process
// each delivery exactly once. It is safe for concurrent use; its settings
// are fixed at construction.
type Store struct {
	client  Client
	prefix  string
	timeout time.Duration
	now     func() time.Time
}

var (
	_ replay.Store    = (*Store)(nil)
	_ replay.Releaser = (*Store)(nil)
)

// New returns a Store that records claims through client. The client keeps
// its own connection settings; the Store adds the per-claim deadline of
// Options.Timeout and returns when it passes even if the client has not
// (go-redis ignores context deadlines on the socket unless the client's
// ContextTimeoutEnabled option is set, which is recommended). Without that
// option the abandoned call keeps its goroutine and pool connection until the
// client's own ReadTimeout ends it, so never combine it with ReadTimeout -1:
// a hung Redis would then pin a goroutine per timed-out claim, up to the pool
// size, for as long as it hangs.
//
// A client retry after a lost reply is safe for every method: a retried
// Claim reports the ID as taken (refused, never accepted twice), and a
// resent lease script finds its own lease or done entry. Retries only
// lengthen a call; the store's deadline still bounds it.
func New(client Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{client: client, prefix: opts.Prefix, timeout: opts.Timeout, now: opts.Now}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Prefix returns the key prefix the store writes under.
func (s *Store) Prefix() string { return s.prefix }

// Claim records id until the given time and reports whether this call was
// the first live claim of id, across every process sharing the Redis server
// and prefix. Exactly one of any number of concurrent claims of the same ID
// returns true. Once until has passed (by Redis's clock) the ID can be
// claimed again; an until past the last instant of int64 Unix milliseconds
// (year 292 million) is held until that instant.
//
// Claim fails closed: on any error it returns first == false and an error
// matching ErrUnavailable (Redis could not answer in time or answered
// unexpectedly) or ErrInvalidClaim (empty or oversize id, or until not in
// the future). Error text never contains id.
//
// A claim whose reply is lost may still have been recorded, and a client
// retry of it then reports first == false: the ID is consumed and refused,
// never accepted twice.
func (s *Store) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	ms, err := s.untilMillis(until)
	if err != nil {
		return false, err
	}
	v, err := s.do(ctx, "SET", s.prefix+id, "1", "NX", "PXAT", strconv.FormatInt(ms, 10))
	switch {
	case errors.Is(err, redis.Nil): // NX refused: the key is live, the ID was claimed
		return false, nil
	case err != nil:
		return false, err
	}
	if v, ok := v.(string); ok && v == "OK" {
		return true, nil
	}
	return false, fmt.Errorf("%w: unexpected reply to SET NX", ErrUnavailable)
}

// Release forgets the claim of id, so the next Claim of id is first again.
// It is for a caller that claimed id and then failed to act on it (a webhook
// handler that errored, so the sender's retry must be processed); one-time
// tokens must never be released. Releasing an ID that is not claimed is not
// an error. Release deletes the key whoever claimed it, so release only IDs
// you claimed, before their until. Errors match ErrUnavailable or, for an
// empty or oversize id, ErrInvalidClaim; the claim then stays in force.
func (s *Store) Release(ctx context.Context, id string) error {
	if id == "" || len(id) > MaxIDBytes {
		return fmt.Errorf("%w: empty or oversize id", ErrInvalidClaim)
	}
	v, err := s.do(ctx, "DEL", s.prefix+id)
	if err != nil {
		return err
	}
	if _, ok := v.(int64); !ok {
		return fmt.Errorf("%w: unexpected reply to DEL", ErrUnavailable)
	}
	return nil
}

// errNil is the reply of a command that found nothing (SET NX refused).
var errNil = redis.Nil

// do runs one command within the store's deadline (see [Store.call]).
func (s *Store) do(ctx context.Context, args ...any) (any, error) {
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.call(ctx, args...)
}

// deadline bounds ctx by the store's timeout.
func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return ctx, func() {}
}

// call runs one command. It returns when ctx is done even if the client is
// still waiting, so a hung Redis cannot hold the caller past it. Errors
// other than redis.Nil are wrapped in ErrUnavailable, together with the
// context error when the deadline or a cancellation ended the call.
func (s *Store) call(ctx context.Context, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	type result struct {
		val any
		err error
	}
	done := make(chan result, 1) // buffered: the sender never blocks
	go func() {
		v, err := s.client.Do(ctx, args...).Result()
		done <- result{v, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	switch {
	case r.err == nil:
		return r.val, nil
	case errors.Is(r.err, redis.Nil):
		return nil, r.err
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(r.err, ctxErr) {
		return nil, fmt.Errorf("%w: %w (%w)", ErrUnavailable, ctxErr, r.err)
	}
	return nil, fmt.Errorf("%w: %w", ErrUnavailable, r.err)
}
