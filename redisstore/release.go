package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// maxPendingReleases bounds the background releases of one Store (see
// [Store.AcquireLease]).
const maxPendingReleases = 64

// cancels tracks the background releases of leases whose acquisition had
// an unknown outcome.
type cancels struct {
	sem    chan struct{}
	stop   chan struct{}
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (c *cancels) init() {
	c.sem = make(chan struct{}, maxPendingReleases)
	c.stop = make(chan struct{})
}

// start counts one more background goroutine, unless the store is closed.
func (c *cancels) start() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

func (c *cancels) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// unknownOutcome reports whether an acquire that returned err may have
// taken the lease: a transport failure or timeout, or a lease taken but not
// acknowledged by enough replicas. The guard's refusals and invalid
// arguments took nothing.
func unknownOutcome(err error) bool {
	switch {
	case errors.Is(err, ErrInvalidClaim), errors.Is(err, ErrFenced), errors.Is(err, ErrClockSkew), errors.Is(err, ErrConfig):
		return false
	}
	return errors.Is(err, ErrUnavailable)
}

// releaseLater releases token's lease on id, or leaves a cancel note, in
// the background: retried with backoff until Redis answers, until end (when
// the lease has ended anyway), or until the store is closed.
func (s *Store) releaseLater(id, token string, end time.Time) {
	select {
	case s.cancels.sem <- struct{}{}:
	default:
		s.emit(replay.Event{Kind: replay.EventLeaseAbandoned, Shard: shardOf(id)})
		return
	}
	if !s.cancels.start() {
		<-s.cancels.sem
		return
	}
	go func() {
		defer s.cancels.wg.Done()
		defer func() { <-s.cancels.sem }()
		key := s.key(id)
		backoff := 20 * time.Millisecond
		for {
			left := time.Until(end)
			if left < time.Millisecond {
				return // the lease, if taken, has ended
			}
			ctx, cancel := context.WithDeadline(context.Background(), end)
			ctx, cancel2 := s.deadline(ctx)
			v, err := s.eval(ctx, &cancelLua, command(cancelLua, []string{key}, token, strconv.FormatInt(left.Milliseconds(), 10)))
			cancel2()
			cancel()
			if err == nil {
				if _, ok := v.(int64); ok {
					s.emit(replay.Event{Kind: replay.EventLeaseReleased, Shard: shardOf(id)})
					return
				}
			}
			select {
			case <-s.cancels.stop:
				s.emit(replay.Event{Kind: replay.EventLeaseAbandoned, Shard: shardOf(id)})
				return
			case <-time.After(min(backoff, time.Until(end))):
			}
			if time.Until(end) < time.Millisecond {
				s.emit(replay.Event{Kind: replay.EventLeaseAbandoned, Shard: shardOf(id)})
				return
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}
