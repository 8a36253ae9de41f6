//go:build fault

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// redeemDecided redeems s on the instance at base, retrying while the store
// cannot decide (503, e.g. a pooled connection to the previous server), and
// returns the first decided status (200, 409 or 400), or the undecided one
// when stop (if not nil) reports true after it.
func redeemDecided(t *testing.T, c *http.Client, base string, s single, stop func() bool) int {
	t.Helper()
	for range 50 {
		st := redeem(c, base, s)
		if st != http.StatusServiceUnavailable && st != 0 || stop != nil && stop() {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s token %s: no decision after 50 tries", s.kind, tokenDigest(s.tok))
	return 0
}

// fenceRecorder is the fleet's replay store with the last Claim error
// remembered, so a test redeeming one token at a time over HTTP can tell a
// fenced refusal (the store found its data lost) from a transient one.
type fenceRecorder struct {
	*Store
	mu   sync.Mutex
	last error
}

func (f *fenceRecorder) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	first, err := f.Store.Claim(ctx, id, until)
	f.mu.Lock()
	f.last = err
	f.mu.Unlock()
	return first, err
}

func (f *fenceRecorder) fenced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Is(f.last, ErrFenced)
}

var _ replay.Leaser = (*fenceRecorder)(nil)

// TestRestartNeverAcceptsTwice redeems every token once and has every
// webhook delivery processed once, restarts Redis, then sends every token
// and delivery again on every instance: none is accepted or processed a
// second time. With AOF and appendfsync always nothing is lost (409 and
// 200); without persistence every claim is lost and the store, finding
// its markers gone, refuses everything (503, ErrFenced) for one horizon.
// RDB save points are refused at Open; with AllowRollback a crash after a
// snapshot rolls back unseen (TestRollbackAcceptsTwiceWhenAllowed).
func TestRestartNeverAcceptsTwice(t *testing.T) {
	const perKind = 100
	const total = perKind * 2 // one-time tokens and single-use states
	const deliveries = 50
	tests := []struct {
		name string
		args []string
		stop syscall.Signal
		lost bool // the restart loses the claims (and the fence markers)
		rdb  bool // RDB save points: AllowRollback
	}{
		{"AOF always, crash", []string{"--appendonly", "yes", "--appendfsync", "always"}, syscall.SIGKILL, false, false},
		{"AOF always, clean shutdown", []string{"--appendonly", "yes", "--appendfsync", "always"}, syscall.SIGTERM, false, false},
		{"no persistence, crash", nil, syscall.SIGKILL, true, false},
		{"no persistence, clean shutdown", nil, syscall.SIGTERM, true, false},
		{"RDB save points only, crash before any snapshot", []string{"--save", "3600 1 300 100 60 10000"}, syscall.SIGKILL, true, true},
		{"RDB save points only, clean shutdown", []string{"--save", "3600 1 300 100 60 10000"}, syscall.SIGTERM, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envFleetKeys, fleetKey())
			t.Setenv(envFleetSession, "fleet-session-1")
			rp := newServer(t, tt.args...)
			store := &fenceRecorder{Store: faultStoreWith(t, standaloneClient(t, rp.addr()), Options{Timeout: 2 * time.Second, AllowRollback: tt.rdb})}
			var hooks acceptLog
			hook := hookEndpoint(t, store, 2*time.Second, 0, nil, hooks.add)
			var ins []*instance
			for i := range 3 {
				ins = append(ins, startInstance(t, "i"+string(rune('0'+i)), store, withHook(hook)))
			}
			c := faultClient(t)
			sender := newHookSender(t, c)
			toks := mintMany(t, c, ins, perKind)
			for i, s := range toks {
				if st := redeem(c, ins[(i+1)%3].srv.URL, s); st != http.StatusOK {
					t.Fatalf("first redeem of %s token %d: status %d, want 200", s.kind, i, st)
				}
			}
			ids := make([]string, deliveries)
			for i := range ids {
				ids[i] = fmt.Sprintf("msg_restart_%d", i)
				if code := sender.send(ins[i%3].srv.URL, ids[i]); code != http.StatusNoContent {
					t.Fatalf("first copy of delivery %d: status %d, want 204", i, code)
				}
			}

			rp.restart(tt.stop)

			accepted, fenced := 0, 0
			for i, s := range toks {
				for j := range ins {
					switch st := redeemDecided(t, c, ins[(i+j)%3].srv.URL, s, store.fenced); st {
					case http.StatusOK:
						accepted++
					case http.StatusServiceUnavailable, 0:
						fenced++
					case http.StatusConflict:
					default:
						t.Fatalf("redeem after restart: status %d, want 409 or a fenced 503", st)
					}
				}
			}
			dupes, refused := 0, 0
			for i, id := range ids {
				code := 0
				for range 2 {
					if code = sender.send(ins[(i+1)%3].srv.URL, id); code != http.StatusServiceUnavailable && code != 0 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				switch code {
				case http.StatusOK:
					dupes++
				case http.StatusServiceUnavailable:
					refused++
				default:
					t.Fatalf("delivery %d sent again after the restart: status %d, want 200 (duplicate) or 503 (fenced)", i, code)
				}
				if n := hooks.count(id); n != 1 {
					t.Fatalf("delivery %d processed %d times", i, n)
				}
			}
			t.Logf("%s: after the restart %d of %d token redeems accepted, %d refused as fenced; of %d deliveries sent again %d acknowledged as duplicates, %d refused, 0 processed again",
				tt.name, accepted, total*3, fenced, deliveries, dupes, refused)
			if accepted != 0 {
				t.Fatalf("%d redeems of used tokens accepted after the restart, want 0", accepted)
			}
			wantFenced, wantDupes := 0, deliveries
			if tt.lost {
				wantFenced, wantDupes = total*3, 0
			}
			if fenced != wantFenced || dupes != wantDupes {
				t.Fatalf("%d redeems refused as fenced and %d deliveries acknowledged as duplicates, want %d and %d", fenced, dupes, wantFenced, wantDupes)
			}
		})
	}
}

// TestRollbackAcceptsTwiceWhenAllowed shows what Open refuses RDB save
// points for (TestChecks/persistence that can roll back): a snapshot taken
// after provisioning, claims, a crash, and a restart from the snapshot
// bring the fence markers back without the claims, and with AllowRollback
// every one of those IDs is accepted again. Without AllowRollback the same
// server is refused.
func TestRollbackAcceptsTwiceWhenAllowed(t *testing.T) {
	const n = 200
	rp := newServer(t, "--save", "3600 1 300 100 60 10000")
	c := standaloneClient(t, rp.addr())
	s := faultStoreWith(t, c, Options{Timeout: 2 * time.Second, AllowRollback: true})
	ctx := context.Background()
	must(t, c.Save(ctx).Err()) // the snapshot holds the markers
	until := time.Now().Add(time.Minute)
	for i := range n {
		wantClaim(t, s, fmt.Sprintf("rollback-%d", i), until, true)
	}
	rp.restart(syscall.SIGKILL)
	again := 0
	for i := range n {
		for try := 0; ; try++ {
			first, err := s.Claim(ctx, fmt.Sprintf("rollback-%d", i), until)
			if err == nil {
				if first {
					again++
				}
				break
			}
			if errors.Is(err, ErrFenced) {
				t.Fatalf("claim %d after the rollback: %v; the markers were in the snapshot", i, err)
			}
			if try == 50 {
				t.Fatalf("claim %d after the restart: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond) // a pooled connection to the stopped server
		}
	}
	t.Logf("after a crash and a restart from an RDB snapshot: %d of %d claimed IDs accepted again", again, n)
	if again != n {
		t.Fatalf("%d of %d IDs accepted again; the snapshot predates every claim, want all", again, n)
	}
	if _, err := Open(ctx, c, Options{Prefix: s.Prefix(), Logger: quietLogger()}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Open without AllowRollback = %v; want ErrConfig", err)
	}
}
