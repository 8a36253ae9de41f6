package drivertest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/sqlitestore"
)

// TestRecheckDuringClaims: the checker, repeating New's checks while
// claims commit, never takes the store's own newer commits for an older
// copy of the database. Every claim of a fresh ID is first, and none is
// refused with ErrForgotten.
func TestRecheckDuringClaims(t *testing.T) {
	const (
		claimers = 8
		claims   = 300 // each claimer's: about a second on a disk
	)
	eachDriver(t, func(t *testing.T, d Driver) {
		db, _ := openMigrated(t, d)
		s := mustStore(t, db, sqlitestore.Options{RecheckInterval: time.Millisecond, SweepInterval: -1})
		ctx := context.Background()
		until := time.Now().Add(time.Hour)
		errs := make(chan error, claimers)
		var wg sync.WaitGroup
		for c := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range claims {
					id := strconv.Itoa(c) + "/" + strconv.Itoa(i)
					first, err := s.Claim(ctx, id, until)
					if err != nil || !first {
						errs <- fmt.Errorf("Claim(%s) = %v, %v; want true, nil", id, first, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
