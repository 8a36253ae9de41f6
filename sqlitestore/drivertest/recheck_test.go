package drivertest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// TestRecheckDuringClaims: the checker, repeating New's checks while
// claims commit, and reads on the pool beside them never take the store's
// own newer commits for an older copy of the database: every claim of a
// fresh ID is first, no ReadRecord fails, and the store serves on.
func TestRecheckDuringClaims(t *testing.T) {
	const (
		claimers = 8
		claims   = 300 // each claimer's: about a second on a disk
	)
	eachDriver(t, func(t *testing.T, d Driver) {
		db, _ := openMigrated(t, d)
		// A minute, not the 2 s default: at load, 8 claimers, 4 readers
		// and a checker every millisecond can keep a claim waiting for the
		// writer longer than that, and this test is not about timeouts.
		s := mustStore(t, db, sqlitestore.Options{RecheckInterval: time.Millisecond, SweepInterval: -1, Timeout: time.Minute})
		ctx := context.Background()
		until := time.Now().Add(time.Hour)
		errs := make(chan error, claimers+4)
		stop := make(chan struct{})
		var readers, wg sync.WaitGroup
		for range 4 {
			readers.Go(func() {
				for !isClosed(stop) {
					if _, err := s.ReadRecord(ctx, "0/0"); err != nil {
						errs <- fmt.Errorf("ReadRecord beside the commits: %w", err)
						return
					}
				}
			})
		}
		for c := range claimers {
			wg.Go(func() {
				for i := range claims {
					id := strconv.Itoa(c) + "/" + strconv.Itoa(i)
					first, err := s.Claim(ctx, id, until)
					if err != nil || !first {
						errs <- fmt.Errorf("Claim(%s) = %v, %v; want true, nil", id, first, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		readers.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if r, err := s.ReadRecord(ctx, "0/0"); err != nil || r.State != replay.LeaseDone {
			t.Fatalf("ReadRecord after the commits = %v, %v; want done", r.State, err)
		}
	})
}
