//go:build fault

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// redeemDecided redeems s on the instance at base, retrying while the store
// cannot decide (503, e.g. a pooled connection to the previous server), and
// returns the first decided status (200, 409 or 400).
func redeemDecided(t *testing.T, c *http.Client, base string, s single) int {
	t.Helper()
	for range 50 {
		switch st := redeem(c, base, s); st {
		case http.StatusServiceUnavailable, 0:
			time.Sleep(20 * time.Millisecond)
		default:
			return st
		}
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
// webhook delivery processed once, restarts Redis, then redeems every token
// again on every instance and sends every delivery again: no token is
// accepted a second time and no delivery processed a second time. With AOF
// and appendfsync always nothing is lost, even on a crash: every token is
// refused as redeemed (409) and every delivery acknowledged as a duplicate
// (200). Without persistence (on a crash and on a clean shutdown alike),
// every claim is lost — before the fence, every token was accepted again,
// 200 of 200 — and the store finds its fence markers gone and refuses every
// redemption and every delivery (503, ErrFenced) for one horizon instead.
// RDB save points (Redis's own default) are refused at Open; with
// AllowRollback a clean shutdown saves a snapshot and loses nothing, and a
// crash before any snapshot loses the markers too and is fenced — but a
// crash after a snapshot rolls back unseen
// (TestRollbackAcceptsTwiceWhenAllowed).
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
					base := ins[(i+j)%3].srv.URL
					st := 0
					for try := 0; ; try++ {
						st = redeem(c, base, s)
						if st != http.StatusServiceUnavailable && st != 0 {
							break
						}
						if store.fenced() {
							fenced++
							break
						}
						if try == 50 {
							t.Fatalf("%s token %d: no decision after 50 tries", s.kind, i)
						}
						time.Sleep(20 * time.Millisecond) // a pooled connection to the stopped server
					}
					switch st {
					case http.StatusOK:
						accepted++
					case http.StatusConflict, http.StatusServiceUnavailable:
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
	if err := c.Save(ctx).Err(); err != nil { // the snapshot holds the markers
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	for i := range n {
		if first, err := s.Claim(ctx, fmt.Sprintf("rollback-%d", i), until); !first || err != nil {
			t.Fatalf("claim %d = %v, %v; want first", i, first, err)
		}
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

// fenceHorizon is the store horizon of the fence tests: short, so a test
// waits the fence out, and longer than every claim (ttl + directMargin).
const fenceHorizon = 3 * time.Second

// fenceCfg is the fence tests' workload: IDs living 2 s, held 0.5 s more.
var fenceCfg = wlConfig{workers: 24, ttl: 2 * time.Second, lease: time.Second, timeout: 2 * time.Second}

// TestStoreThatForgets runs issue 26's workload, on
// direct nodes (fenceCfg: lifetimes that fit a 3 s horizon), against one
// Redis without persistence, and makes Redis lose everything mid-load: a
// SIGKILL and restart, or FLUSHALL. Right after the loss every token is
// redeemed again and every delivery sent again, while the workers go on;
// the load runs until the fence has opened. No token is accepted twice and
// no delivery processed twice; the store reports the loss (EventFenceRaised)
// and refuses (ErrFenced) for at most one horizon from the first fenced
// refusal, and accepts new tokens again after that. (After the restart the
// clients also fail for up to a second on their own: go-redis's pool, after
// as many failed dials as its size, returns the last dial error until a
// background probe, once a second, connects again.)
func TestStoreThatForgets(t *testing.T) {
	tests := []struct {
		name    string
		disrupt func(t *testing.T, rp *server)
	}{
		{"restart without persistence", func(t *testing.T, rp *server) { rp.restart(syscall.SIGKILL) }},
		{"FLUSHALL", func(t *testing.T, rp *server) { mustDo(t, rp.addr(), "FLUSHALL") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rp := newServer(t)
			prefix := randomPrefix()
			var raised, fenced atomic.Int64
			var stores []*Store
			for range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := New(standaloneClient(t, rp.addr()), Options{
					Prefix: prefix, Timeout: 2 * time.Second, Horizon: fenceHorizon, Logger: quietLogger(),
					Observer: func(e Event) {
						switch e.Kind {
						case EventFenceRaised:
							raised.Add(1)
						case EventFenced:
							fenced.Add(1)
						}
					},
				})
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				if _, err := s.Provision(ctx); err != nil {
					cancel()
					t.Fatal(err)
				}
				cancel()
				stores = append(stores, s)
			}
			wl := newDirectWorkload(t, fenceCfg, stores)
			wl.start()
			time.Sleep(time.Second)
			m0 := wl.mark()
			before := time.Now()
			tt.disrupt(t, rp)
			lost := time.Now()
			for deadline := lost.Add(5 * time.Second); raised.Load() == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no fence raised within 5 s of the loss")
				}
			}
			raisedAt := time.Now()
			during := wl.recheck(0) // one pass, no retry: inside the fence
			inFence := time.Now()
			time.Sleep(time.Until(raisedAt.Add(fenceHorizon + 1500*time.Millisecond)))
			wl.stop()
			r := wl.recheck(5 * time.Second)
			first, last, back := wl.fenceWindow(before)
			t.Logf("%s: %d tokens accepted before the loss; Redis lost everything at +%v, fence raised %v later; recheck inside the fence took %v: %d of %d token redeems and delivery copies refused",
				tt.name, m0.accepts, lost.Sub(wl.began).Round(time.Millisecond), raisedAt.Sub(lost).Round(time.Millisecond),
				inFence.Sub(raisedAt).Round(time.Millisecond), during.undecided, 2*(during.tokens+during.deliveries))
			t.Logf("%s: fenced refusals from +%v to +%v after the loss, %v apart (horizon %v); service back (a token accepted) %v after the loss; %d fences raised, %d fenced refusals",
				tt.name, first.Sub(lost).Round(time.Millisecond), last.Sub(lost).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond),
				fenceHorizon, back.Sub(lost).Round(time.Millisecond), raised.Load(), fenced.Load())
			t.Logf("%s: %v", tt.name, r)
			logReasons(t, r)
			if r.acceptedTwice != 0 || r.processedTwice != 0 {
				t.Fatalf("%d tokens accepted twice, %d deliveries processed twice; want 0", r.acceptedTwice, r.processedTwice)
			}
			if raised.Load() == 0 || fenced.Load() == 0 {
				t.Fatalf("the store reported %d fences raised and %d fenced refusals, want both > 0", raised.Load(), fenced.Load())
			}
			if during.undecided == 0 {
				t.Fatal("the recheck inside the fence was never refused: it ran after the fence, or the loss was not seen")
			}
			if n := wl.refusedBefore(before); n != 0 {
				t.Fatalf("%d redeems refused before the loss", n)
			}
			if first.IsZero() {
				t.Fatal("no redeem refused as fenced")
			}
			if slack := fenceHorizon + time.Second; last.Sub(first) > slack {
				t.Fatalf("fenced refusals for %v, want within one horizon (%v, + 1 s for a loaded machine)", last.Sub(first), fenceHorizon)
			}
			if back.IsZero() {
				t.Fatal("no token accepted after the fence opened")
			}
		})
	}
}
