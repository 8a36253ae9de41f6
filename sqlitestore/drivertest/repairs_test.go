package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// repairs follows a Store's repair after an I/O error through its
// Observer: the repair starts with replay.EventRefusing (its reason says the
// store rewrites the database) and ends with the next replay.EventServing.
type repairs struct {
	mu             sync.Mutex
	started, ended int
	changed        chan struct{}
}

func newRepairs() *repairs { return &repairs{changed: make(chan struct{}, 1)} }

func (r *repairs) observe(e replay.Event) {
	r.mu.Lock()
	switch {
	case e.Kind == replay.EventRefusing && e.Reason != nil && strings.Contains(e.Reason.Error(), "rewritten the database"):
		r.started++
	case e.Kind == replay.EventServing && r.ended < r.started:
		r.ended++
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// count is how many repairs started.
func (r *repairs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// wait returns once every repair started has ended: the store serves
// again. The bound is a safety net for a repair that never ends.
func (r *repairs) wait(t testing.TB) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		r.mu.Lock()
		done := r.ended == r.started
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatal("the store's repair after an I/O error did not end within 2 minutes")
		}
	}
}

// TestRepairUnfinishedAtTheStop: a repair after an I/O error that had not
// ended when the last store stopped (the sidecar's repair mark, as a
// crash leaves it) is run by the next New before the store serves, when
// the machine did not restart; after a restart (another boot id in the
// mark) New refuses with ErrForgotten, since the page cache that held the
// only good copy is gone, until Rearm. The claims made before are refused
// after the repair, and nothing is accepted while it runs.
func TestRepairUnfinishedAtTheStop(t *testing.T) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip("no boot id here (not Linux): a repair mark always refuses New")
	}
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			for _, tc := range []struct {
				name, mark string
				refused    bool
			}{
				{"the same boot: repaired, then served", strings.TrimSpace(string(boot)), false},
				{"another boot: refused until Rearm", "boot-before-the-crash", true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx := context.Background()
					db, path := openMigrated(t, d)
					s := mustStore(t, db, sqlitestore.Options{SweepInterval: -1})
					ids := idList("before-", 300)
					until := time.Now().Add(time.Hour)
					claimAll(t, s, ids, until)
					s.Close()
					setSidecarField(t, path, "repair", tc.mark)

					rep := newRepairs()
					s, err := sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1, Observer: rep.observe})
					if tc.refused {
						if !errors.Is(err, sqlitestore.ErrForgotten) {
							t.Fatalf("New after a restart with a repair unfinished = %v; want ErrForgotten", err)
						}
						if err := sqlitestore.Rearm(ctx, db, "", 0); err != nil {
							t.Fatal(err)
						}
						if s, err = sqlitestore.New(ctx, db, sqlitestore.Options{SweepInterval: -1}); err != nil {
							t.Fatalf("New after Rearm = %v", err)
						}
						defer s.Close()
					} else {
						if err != nil {
							t.Fatalf("New with a repair unfinished in this boot = %v; want a store that repairs", err)
						}
						defer s.Close()
						if rep.count() != 1 {
							t.Fatalf("%d repairs started by New; want 1", rep.count())
						}
						rep.wait(t)
					}
					for _, id := range ids {
						if first, err := s.Claim(ctx, id, until); first || err != nil {
							t.Fatalf("Claim(%s) after the repair = %v, %v; want not first", id, first, err)
						}
					}
					if first, err := s.Claim(ctx, "after", until); !first || err != nil {
						t.Fatalf("Claim of a fresh ID after the repair = %v, %v; want first", first, err)
					}
					if got := sidecarField(t, path, "repair"); got != nil {
						t.Fatalf("the sidecar's repair mark after the repair = %v; want none", got)
					}
				})
			}
		})
	}
}

// sidecarMap reads the default table's sidecar beside path.
func sidecarMap(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(sidecarOf(path))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// sidecarField returns a field of the default table's sidecar beside
// path, nil when it is absent.
func sidecarField(t *testing.T, path, field string) any {
	t.Helper()
	return sidecarMap(t, path)[field]
}

// setSidecarField sets a field of the default table's sidecar beside
// path, as a store would have written it.
func setSidecarField(t *testing.T, path, field string, v any) {
	t.Helper()
	m := sidecarMap(t, path)
	m[field] = v
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sidecarOf(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
