package replaytest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// RenewStore is a replay store whose leases renew: what
// [RunRenewContract] checks.
type RenewStore interface {
	RecordStore
	replay.Renewer
}

// RunRenewContract runs the contract of [replay.Renewer] against a fresh
// store from newStore per test: a renewed lease outlives its first end and
// keeps its fingerprint and token; only the holder of a live lease renews,
// and a refused renewal changes nothing. Like [RunLeaseContract] it uses
// the real clock with short leases.
func RunRenewContract(t *testing.T, newStore func(t *testing.T) RenewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s RenewStore)
	}{
		{"RenewedLeaseOutlivesItsFirstEnd", renewedLeaseOutlivesItsFirstEnd},
		{"RenewedLeaseEndsAtItsNewEnd", renewedLeaseEndsAtItsNewEnd},
		{"RenewedLeaseKeepsItsFingerprintAndToken", renewedLeaseKeepsItsFingerprintAndToken},
		{"RenewOfAnEndedLeaseIsLost", renewOfAnEndedLeaseIsLost},
		{"RenewAfterTakeoverIsLost", renewAfterTakeoverIsLost},
		{"RenewAfterConfirmOrClaimIsLost", renewAfterConfirmOrClaimIsLost},
		{"RenewWithForeignTokenIsLost", renewWithForeignTokenIsLost},
		{"NonPositiveRenewalRefused", nonPositiveRenewalRefused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

func renew(t *testing.T, s RenewStore, id, token string, lease time.Duration) {
	t.Helper()
	if err := s.RenewLease(ctx(), id, token, lease); err != nil {
		t.Fatalf("RenewLease(%q): %v", id, err)
	}
}

func wantLost(t *testing.T, s RenewStore, id, token, why string) {
	t.Helper()
	if err := s.RenewLease(ctx(), id, token, time.Minute); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("RenewLease %s: %v, want ErrLeaseLost", why, err)
	}
}

func renewedLeaseOutlivesItsFirstEnd(t *testing.T, s RenewStore) {
	id, start, d := inTime(t, func(id string, d time.Duration) error {
		l := acquireRecord(t, s, id, d, []byte("fp"), replay.LeaseAcquired, nil, nil)
		if err := s.RenewLease(ctx(), id, l.Token, time.Minute); err != nil {
			return fmt.Errorf("RenewLease(%q) while its lease of %v runs: %v", id, d, err)
		}
		return nil
	})
	waitOut(start, d)
	r := acquireRecord(t, s, id, time.Minute, []byte("fp"), replay.LeaseBusy, []byte("fp"), nil)
	if r.Wait <= d {
		t.Fatalf("Wait = %v after a renewal to a minute, want over %v", r.Wait, d)
	}
}

func renewedLeaseEndsAtItsNewEnd(t *testing.T, s RenewStore) {
	l := acquireRecord(t, s, "a", time.Minute, []byte("fp"), replay.LeaseAcquired, nil, nil)
	renew(t, s, "a", l.Token, Lease)
	waitOut(time.Now(), Lease) // the store renewed before it answered
	acquireRecord(t, s, "a", time.Minute, []byte("fp"), replay.LeaseAcquired, nil, nil)
}

func renewedLeaseKeepsItsFingerprintAndToken(t *testing.T, s RenewStore) {
	fp := binary(32, 7)
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	renew(t, s, "a", l.Token, time.Minute)
	renew(t, s, "a", l.Token, 2*time.Minute)
	acquireRecord(t, s, "a", time.Minute, []byte("other"), replay.LeaseBusy, fp, nil)
	confirmRecord(t, s, "a", l.Token, hour(), fp, []byte("result"))
	acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseDone, fp, []byte("result"))
}

func renewOfAnEndedLeaseIsLost(t *testing.T, s RenewStore) {
	l := acquireRecord(t, s, "a", Lease, nil, replay.LeaseAcquired, nil, nil)
	waitOut(time.Now(), Lease) // the store took the lease before it answered
	wantLost(t, s, "a", l.Token, "after the lease ended, the ID free")
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseAcquired, nil, nil)
}

func renewAfterTakeoverIsLost(t *testing.T, s RenewStore) {
	l := acquireRecord(t, s, "a", Lease, nil, replay.LeaseAcquired, nil, nil)
	waitOut(time.Now(), Lease) // the store took the lease before it answered
	l2 := acquireRecord(t, s, "a", time.Minute, []byte("second"), replay.LeaseAcquired, nil, nil)
	wantLost(t, s, "a", l.Token, "after another holder took the ID")
	renew(t, s, "a", l2.Token, time.Minute)
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, []byte("second"), nil)
}

func renewAfterConfirmOrClaimIsLost(t *testing.T, s RenewStore) {
	l := acquireRecord(t, s, "a", time.Minute, []byte("fp"), replay.LeaseAcquired, nil, nil)
	confirmRecord(t, s, "a", l.Token, hour(), []byte("fp"), []byte("result"))
	wantLost(t, s, "a", l.Token, "after the holder confirmed")
	acquireRecord(t, s, "a", time.Minute, []byte("fp"), replay.LeaseDone, []byte("fp"), []byte("result"))
	if first, err := s.Claim(ctx(), "b", hour()); !first || err != nil {
		t.Fatalf("Claim = %v, %v", first, err)
	}
	wantLost(t, s, "b", l.Token, "of a claimed ID")
	wantLost(t, s, "never-leased", l.Token, "of an ID never leased")
}

func renewWithForeignTokenIsLost(t *testing.T, s RenewStore) {
	l := acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseAcquired, nil, nil)
	other := acquireRecord(t, s, "other", time.Minute, nil, replay.LeaseAcquired, nil, nil)
	for _, tok := range []string{"", "0", "not-a-token", "\x00\xff", other.Token} {
		wantLost(t, s, "a", tok, "with a token that is not the holder's")
	}
	renew(t, s, "a", l.Token, time.Minute)
}

func nonPositiveRenewalRefused(t *testing.T, s RenewStore) {
	id, _, d := inTime(t, func(id string, d time.Duration) error {
		l := acquireRecord(t, s, id, d, nil, replay.LeaseAcquired, nil, nil)
		for _, r := range []time.Duration{0, -time.Second} {
			if err := s.RenewLease(ctx(), id, l.Token, r); !errors.Is(err, replay.ErrExpired) {
				t.Fatalf("RenewLease(%v) = %v, want ErrExpired", r, err)
			}
		}
		if r, err := s.AcquireRecord(ctx(), id, time.Minute, nil); err != nil || r.State != replay.LeaseBusy {
			return fmt.Errorf("AcquireRecord(%q) after the refused renewals, its lease of %v running = %v, %v; want %v", id, d, r.State, err, replay.LeaseBusy)
		}
		return nil
	})
	waitOut(time.Now(), d) // the refused renewals left the lease as it was, taken before inTime returned
	acquireRecord(t, s, id, time.Minute, nil, replay.LeaseAcquired, nil, nil)
}
