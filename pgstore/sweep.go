package pgstore

import (
	"context"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// DefaultSweepInterval is how often a Store deletes expired rows when
// Options.SweepInterval is zero.
const DefaultSweepInterval = 30 * time.Second

// DefaultSweepBatch is how many expired rows one sweep statement deletes at
// most when Options.SweepBatch is zero.
const DefaultSweepBatch = 1000

// maxSweepBatches bounds one Sweep call, so a backlog is worked off over
// several intervals instead of in one long burst.
const maxSweepBatches = 100

func (s *Store) prepareSweep() {
	t := s.table
	// One batch: lock up to $1 expired rows that nobody else has locked
	// (another instance's sweeper, or a claim taking the row over), and
	// delete exactly those. Row locks only: claims of other keys never
	// wait, and a claim of a row being swept waits one short statement.
	s.sweep = `DELETE FROM ` + t + ` WHERE ctid = ANY (ARRAY(
  SELECT ctid FROM ` + t + ` WHERE until < now() AND state <> 'm' LIMIT $1 FOR UPDATE SKIP LOCKED
)) AND until < now() AND state <> 'm'`
}

// Sweep deletes expired rows in batches of Options.SweepBatch until a batch
// finds fewer (or after 100 batches), and returns how many it deleted.
// Each batch is one statement that locks only the rows it deletes (FOR
// UPDATE SKIP LOCKED on the until index), so sweepers of several instances
// never block each other or a claim of a live row, and nothing takes a
// table lock. An expired row is already free for every operation of the
// store; sweeping only reclaims its space. Each batch is bounded by the
// store's timeout; errors match ErrUnavailable.
//
// Every Store runs Sweep on its own goroutine every Options.SweepInterval
// (errors are retried at the next interval; each sweep is reported to
// Options.Observer as a [replay.EventSwept]) until Close.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for range maxSweepBatches {
		n, err := call(s, ctx, func(ctx context.Context) (int64, error) {
			tag, err := s.pool.Exec(ctx, s.sweep, s.sweepBatch)
			return tag.RowsAffected(), err
		})
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(s.sweepBatch) {
			break
		}
	}
	return total, nil
}

// sweeper runs Sweep every interval until ctx ends.
func (s *Store) sweeper(ctx context.Context, interval time.Duration) {
	defer s.sweeping.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			n, err := s.Sweep(ctx) // a failed sweep is retried at the next tick
			if ctx.Err() == nil {
				s.emit(replay.Event{Kind: replay.EventSwept, Deleted: n, Reason: err})
			}
		}
	}
}
