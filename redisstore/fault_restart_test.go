//go:build fault

package redisstore

import (
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

// TestRestartForgetsOnlyWhatPersistenceLoses redeems every token once,
// restarts Redis, and redeems every token again on every instance: the
// number accepted a second time is exactly the number of claims the
// configuration lost. With AOF and appendfsync always nothing is lost, even
// on a crash; without persistence every claim is forgotten, on a crash and
// on a clean shutdown alike; with RDB save points only (Redis's own default)
// a clean shutdown saves a snapshot but a crash loses every claim since the
// last one.
func TestRestartForgetsOnlyWhatPersistenceLoses(t *testing.T) {
	const perKind = 100
	const total = perKind * 2 // one-time tokens and single-use states
	tests := []struct {
		name          string
		args          []string
		stop          syscall.Signal
		wantForgotten int
	}{
		{"AOF always, crash", []string{"--appendonly", "yes", "--appendfsync", "always"}, syscall.SIGKILL, 0},
		{"AOF always, clean shutdown", []string{"--appendonly", "yes", "--appendfsync", "always"}, syscall.SIGTERM, 0},
		{"no persistence, crash", nil, syscall.SIGKILL, total},
		{"no persistence, clean shutdown", nil, syscall.SIGTERM, total},
		{"RDB save points only, crash", []string{"--save", "3600 1 300 100 60 10000"}, syscall.SIGKILL, total},
		{"RDB save points only, clean shutdown", []string{"--save", "3600 1 300 100 60 10000"}, syscall.SIGTERM, 0},
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

			forgotten := 0
			for i, s := range toks {
				accepted := 0
				for j := range ins {
					if st := redeemDecided(t, c, ins[(i+j)%3].srv.URL, s); st == http.StatusOK {
						accepted++
					} else if st != http.StatusConflict {
						t.Fatalf("redeem after restart: status %d, want 200 or 409", st)
					}
				}
				if accepted > 1 {
					t.Fatalf("%s token %d accepted %d times after the restart", s.kind, i, accepted)
				}
				forgotten += accepted
			}
			t.Logf("%s: %d of %d redeemed tokens accepted again after the restart", tt.name, forgotten, total)
			if forgotten != tt.wantForgotten {
				t.Fatalf("%d of %d redeemed tokens accepted again, want %d", forgotten, total, tt.wantForgotten)
			}
		})
	}
}
