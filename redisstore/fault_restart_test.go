//go:build fault

package redisstore

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"
	"time"
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

// TestRestartNeverAcceptsTwice redeems every token once, restarts Redis,
// and redeems every token again on every instance: none is accepted a
// second time. With AOF and appendfsync always nothing is lost, even on a
// crash, and every token is refused as redeemed (409); with RDB save points
// only (Redis's own default) a clean shutdown saves a snapshot, and so do
// they. Without persistence (on a crash and on a clean shutdown alike) and
// with RDB save points after a crash, every claim is lost — before the
// fence, every token was accepted again — and the store finds its fence
// markers gone and refuses every redemption (503, ErrFenced) for one
// horizon instead.
func TestRestartNeverAcceptsTwice(t *testing.T) {
	const perKind = 100
	tests := []struct {
		name   string
		args   []string
		stop   syscall.Signal
		fenced bool
	}{
		{"AOF always, crash", []string{"--appendonly", "yes", "--appendfsync", "always"}, syscall.SIGKILL, false},
		{"AOF always, clean shutdown", []string{"--appendonly", "yes", "--appendfsync", "always"}, syscall.SIGTERM, false},
		{"no persistence, crash", nil, syscall.SIGKILL, true},
		{"no persistence, clean shutdown", nil, syscall.SIGTERM, true},
		{"RDB save points only, crash", []string{"--save", "3600 1 300 100 60 10000"}, syscall.SIGKILL, true},
		{"RDB save points only, clean shutdown", []string{"--save", "3600 1 300 100 60 10000"}, syscall.SIGTERM, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envFleetKeys, fleetKey())
			t.Setenv(envFleetSession, "fleet-session-1")
			rp := startRedisProc(t, tt.args...)
			store := faultStore(t, standaloneClient(t, rp.addr()), 2*time.Second)
			var ins []*instance
			for i := range 3 {
				ins = append(ins, startInstance(t, "i"+string(rune('0'+i)), store, nil))
			}
			c := faultClient(t)
			toks := mintMany(t, c, ins, perKind)
			for i, s := range toks {
				if st := redeem(c, ins[(i+1)%3].srv.URL, s); st != http.StatusOK {
					t.Fatalf("first redeem of %s token %d: status %d, want 200", s.kind, i, st)
				}
			}

			rp.restart(tt.stop)

			if tt.fenced {
				// Let pooled connections to the previous server fail first,
				// then see the fence itself.
				var err error
				for range 50 {
					if _, err = store.Claim(context.Background(), "probe", time.Now().Add(time.Minute)); errors.Is(err, ErrFenced) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("claim after a lossy restart: %v, want ErrFenced", err)
				}
			}
			refused := 0
			for i, s := range toks {
				for j := range ins {
					if tt.fenced {
						if st := redeem(c, ins[(i+j)%3].srv.URL, s); st != http.StatusServiceUnavailable {
							t.Fatalf("%s token %d after a lossy restart: status %d, want 503 (fenced)", s.kind, i, st)
						}
						refused++
						continue
					}
					if st := redeemDecided(t, c, ins[(i+j)%3].srv.URL, s); st != http.StatusConflict {
						t.Fatalf("%s token %d after the restart: status %d, want 409", s.kind, i, st)
					}
				}
			}
			t.Logf("%s: 0 of %d redeemed tokens accepted again; %d redemptions refused by the fence", tt.name, len(toks), refused)
		})
	}
}
