//go:build fault

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// A Sentinel failover is not a configuration change: the store recognises
// the new primary by its run_id, checks it as Open would, and never
// compares it with the old one. The primary runs AOF with appendfsync
// always; the replica Sentinel promotes runs without AOF (served), with
// AOF and appendfsync everysec (refused while it stays so, served once it
// is set to always, with no fence written), or with the primary's
// settings (served). The old primary rejoins as a replica Sentinel never
// promotes (replica-priority 0), so the promoted replica stays the
// primary. No ID claimed before the failover is accepted again,
// no fence is written, and a Store opened after the failover (an app
// restart) serves.
func TestSentinelFailoverToNewPersistence(t *testing.T) {
	tests := []struct {
		name    string
		replica []string // the replica's persistence
		refused bool     // refused until appendfsync always
	}{
		{"replica without AOF", []string{"--save", "", "--appendonly", "no"}, false},
		{"replica with appendfsync everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, true},
		{"replica with the primary's settings", []string{"--appendonly", "yes", "--appendfsync", "always"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			primary, replica := startPrimaryReplica(t, []string{"--appendonly", "yes", "--appendfsync", "always"}, tt.replica)
			sp := startSentinel(t, primary.addr(), 1)
			var ev events
			prefix := randomPrefix()
			opts := Options{Prefix: prefix, Timeout: 2 * time.Second, Logger: quietLogger(), Observer: ev.observe,
				Durability: Durability{Replicas: 1, Timeout: time.Second}}
			s := provisioned(t, sp.client(t), opts)
			old, _ := claimOld(t, s, 300)
			waitInSync(t, primary.addr(), 1)
			primary.stop(syscall.SIGKILL)
			newAddr := sp.waitFailover(t, primary.addr(), 15*time.Second)
			if newAddr != replica.addr() {
				t.Fatalf("sentinel promoted %s, want the replica %s", newAddr, replica.addr())
			}
			// The old primary rejoins at replica-priority 0: Sentinel never
			// promotes it back, so the replica it promoted stays the
			// primary the test judges. (A loaded machine can stall that
			// primary past the 1 s down-after: Sentinel then failed over
			// again, to the old primary without persistence, which the
			// store rightly served: in one CI run a claim was first while
			// the test took it for the everysec primary's.)
			rejoinAsReplica(t, primary, newAddr, "--replica-priority", "0")
			sp.waitNoCandidate(t, primary.addr())
			until := time.Now().Add(10 * time.Minute)
			twice := 0
			// claimUntil claims new IDs (and one old ID each round) until
			// want says stop, at most limit; it returns the last error.
			claimUntil := func(st *Store, tag string, limit time.Duration, want func(first bool, err error) bool) error {
				var last error
				for i, deadline := 0, time.Now().Add(limit); time.Now().Before(deadline); i++ {
					if first, _ := st.Claim(ctx, old[i%len(old)], until); first {
						twice++
					}
					first, err := st.Claim(ctx, fmt.Sprintf("%s-%d", tag, i), until)
					if want(first, err) {
						return nil
					}
					last = err
					time.Sleep(10 * time.Millisecond)
				}
				return fmt.Errorf("not within %v: last %v", limit, last)
			}
			served := func(first bool, err error) bool { return first && err == nil }
			if tt.refused {
				wantErr(t, claimUntil(s, "until-refused", 10*time.Second, func(_ bool, err error) bool { return errors.Is(err, ErrConfig) }), nil, "the promoted replica with appendfsync everysec was not refused")
				// Refused while it stays so: never first, and ErrConfig but
				// for a claim the store's Timeout cut short on a loaded
				// machine (ErrUnavailable: also a refusal); most say why.
				byConfig := 0
				for i := range 100 {
					first, err := s.Claim(ctx, fmt.Sprint("while-everysec-", i), until)
					if first || !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrConfig) {
						now, merr := sp.masterAddr()
						t.Fatalf("claim while the primary runs appendfsync everysec = %v, %v; want ErrConfig (the sentinel's primary: %s %v, %s promoted)",
							first, err, now, merr, newAddr)
					}
					if errors.Is(err, ErrConfig) {
						byConfig++
					}
					time.Sleep(20 * time.Millisecond)
				}
				if byConfig < 90 {
					t.Fatalf("%d of 100 claims while the primary runs appendfsync everysec were refused with ErrConfig; want at least 90 (the rest timed out)", byConfig)
				}
				mustDo(t, newAddr, "CONFIG", "SET", "appendfsync", "always")
			}
			start := time.Now()
			wantErr(t, claimUntil(s, "after", 10*time.Second, served), nil, "the store did not serve after the failover")
			t.Logf("%s: served %v after the failover (or the fix)", tt.name, time.Since(start).Round(time.Millisecond))
			// An app restart: a new client and Store.
			s2 := closing(t, mustOpen(t, sp.client(t), opts))
			wantErr(t, claimUntil(s2, "restarted", 5*time.Second, served), nil, "a Store opened after the failover does not serve")
			for _, st := range []*Store{s, s2} {
				for _, id := range old {
					if first, _ := st.Claim(ctx, id, until); first {
						twice++
					}
				}
			}
			if twice != 0 {
				t.Fatalf("%d IDs claimed before the failover accepted twice", twice)
			}
			if n := ev.count(replay.EventFenceRaised); n != 0 {
				t.Fatalf("%d shards fenced by a failover", n)
			}
			for _, m := range s.tags {
				if v, _ := adminDo(newAddr, "GET", m); v != "O" {
					t.Fatalf("marker %v after the failover; want open (O)", v)
				}
			}
			if lossNoted(t, s) {
				t.Fatal("the ledger notes a loss after a failover")
			}
		})
	}
}
