package replaytest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// ReadStore is a replay store whose entries can be read without writing:
// what [RunReadContract] checks.
type ReadStore interface {
	RecordStore
	replay.Reader
}

// RunReadContract runs the contract of [replay.Reader] against a fresh
// store from newStore per test, in parallel: ReadRecord reports free,
// busy (with the holder's fingerprint and a Wait within its lease) or done
// (with the recorded fingerprint and result, or none for an entry of
// ConfirmLease or Claim) as AcquireRecord would find the ID, a lease that
// lapsed or an entry that expired reads free (the tests poll for it, so
// they never race the store's clock), and a read changes nothing: a free
// ID is acquired after it, and a lease read is still its holder's (a
// [replay.Renewer] renews it). Whether a read writes nothing to the
// backend is for each store's own tests.
func RunReadContract(t *testing.T, newStore func(t *testing.T) ReadStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ReadStore)
	}{
		{"AbsentIDReadsFreeAndIsAcquiredAfter", absentReadsFree},
		{"LiveLeaseReadsBusyAndStaysTheHolders", leaseReadsBusy},
		{"RecordedEntryReadsDoneWithItsRecord", recordReadsDone},
		{"ClaimedOrConfirmedWithoutRecordReadsDoneEmpty", claimAndLeaseReadDone},
		{"ReleasedLeaseReadsFree", releasedReadsFree},
		{"LapsedLeaseReadsFreeAndIsAcquiredAfter", lapsedReadsFree},
		{"ExpiredEntryReadsFree", expiredReadsFree},
		{"ReturnedSlicesAreCopies", readSlicesAreCopies},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// read calls ReadRecord and checks the state, the empty token and the
// record; wantFP and wantResult are ignored where the state has none.
func read(t *testing.T, s ReadStore, id string, want replay.LeaseState, wantFP, wantResult []byte) replay.Record {
	t.Helper()
	r, err := s.ReadRecord(ctx(), id)
	if err != nil {
		t.Fatalf("ReadRecord(%q): %v", id, err)
	}
	checkRead(t, id, r, want, wantFP, wantResult)
	return r
}

func checkRead(t *testing.T, id string, r replay.Record, want replay.LeaseState, wantFP, wantResult []byte) {
	t.Helper()
	if r.State != want {
		t.Fatalf("ReadRecord(%q) = %v, want %v", id, r.State, want)
	}
	if r.Token != "" {
		t.Fatalf("ReadRecord(%q) = %v with token %q, want none", id, r.State, r.Token)
	}
	if want == replay.LeaseFree {
		wantFP = nil
	}
	if want != replay.LeaseDone {
		wantResult = nil
	}
	if want != replay.LeaseBusy && r.Wait != 0 {
		t.Fatalf("ReadRecord(%q) = %v with Wait %v, want 0", id, r.State, r.Wait)
	}
	if !bytes.Equal(r.Fingerprint, wantFP) { //ctcheck:ok test fingerprints are made up by the contract, no secret
		t.Fatalf("ReadRecord(%q) = %v with fingerprint %x, want %x", id, r.State, r.Fingerprint, wantFP)
	}
	if !bytes.Equal(r.Result, wantResult) {
		t.Fatalf("ReadRecord(%q) = %v with a result of %d bytes, want %d bytes as recorded", id, r.State, len(r.Result), len(wantResult))
	}
}

// stillHeld checks that token still holds its live lease on id with
// fingerprint fp: a Renewer renews it, and AcquireRecord finds it busy.
func stillHeld(t *testing.T, s ReadStore, id, token string, fp []byte) {
	t.Helper()
	if r, ok := s.(replay.Renewer); ok {
		if err := r.RenewLease(ctx(), id, token, time.Minute); err != nil {
			t.Fatalf("RenewLease(%q) with the holder's token after a read: %v, want nil", id, err)
		}
	}
	acquireRecord(t, s, id, time.Minute, []byte("other"), replay.LeaseBusy, fp, nil)
}

func absentReadsFree(t *testing.T, s ReadStore) {
	read(t, s, "absent", replay.LeaseFree, nil, nil)
	read(t, s, "absent", replay.LeaseFree, nil, nil)
	acquireRecord(t, s, "absent", time.Minute, []byte("fp"), replay.LeaseAcquired, nil, nil)
	read(t, s, "absent", replay.LeaseBusy, []byte("fp"), nil)
}

func leaseReadsBusy(t *testing.T, s ReadStore) {
	fp := binary(32, 40)
	for _, tc := range []struct {
		id string
		fp []byte
	}{{"with-fingerprint", fp}, {"without-fingerprint", nil}} {
		l := acquireRecord(t, s, tc.id, time.Minute, tc.fp, replay.LeaseAcquired, nil, nil)
		for range 2 {
			r := read(t, s, tc.id, replay.LeaseBusy, tc.fp, nil)
			if r.Wait <= 0 || r.Wait > time.Minute {
				t.Fatalf("ReadRecord(%q) of a lease of a minute: Wait = %v, want within (0, 1m]", tc.id, r.Wait)
			}
		}
		stillHeld(t, s, tc.id, l.Token, tc.fp)
		// The holder's confirmation after the reads records as usual.
		confirmRecord(t, s, tc.id, l.Token, hour(), tc.fp, []byte("result"))
		read(t, s, tc.id, replay.LeaseDone, tc.fp, []byte("result"))
	}
	// A plain lease reads busy with an empty fingerprint.
	l := acquire(t, s, "plain", time.Minute, replay.LeaseAcquired)
	if r := read(t, s, "plain", replay.LeaseBusy, nil, nil); r.Wait <= 0 || r.Wait > time.Minute {
		t.Fatalf("ReadRecord of a plain lease of a minute: Wait = %v, want within (0, 1m]", r.Wait)
	}
	stillHeld(t, s, "plain", l.Token, nil)
}

func recordReadsDone(t *testing.T, s ReadStore) {
	for _, tc := range []struct {
		id         string
		fp, result []byte
	}{
		{"largest", binary(replay.MaxFingerprintBytes, 41), binary(replay.MaxResultBytes, 42)},
		{"zero", []byte{0}, []byte{0}},
		{"no-fingerprint", nil, []byte("{}")},
	} {
		l := acquireRecord(t, s, tc.id, time.Minute, tc.fp, replay.LeaseAcquired, nil, nil)
		confirmRecord(t, s, tc.id, l.Token, hour(), tc.fp, tc.result)
		read(t, s, tc.id, replay.LeaseDone, tc.fp, tc.result)
		read(t, s, tc.id, replay.LeaseDone, tc.fp, tc.result)
		// What AcquireRecord finds, unchanged by the reads.
		acquireRecord(t, s, tc.id, time.Minute, nil, replay.LeaseDone, tc.fp, tc.result)
	}
}

func claimAndLeaseReadDone(t *testing.T, s ReadStore) {
	if first, err := s.Claim(ctx(), "claimed", hour()); !first || err != nil {
		t.Fatalf("Claim = %v, %v; want true, nil", first, err)
	}
	read(t, s, "claimed", replay.LeaseDone, nil, nil)

	l := acquire(t, s, "leased", time.Minute, replay.LeaseAcquired)
	confirm(t, s, "leased", l.Token, hour())
	read(t, s, "leased", replay.LeaseDone, nil, nil)

	// A record lease confirmed without a record is done without one.
	r := acquireRecord(t, s, "record-then-lease", time.Minute, []byte("fp"), replay.LeaseAcquired, nil, nil)
	confirm(t, s, "record-then-lease", r.Token, hour())
	read(t, s, "record-then-lease", replay.LeaseDone, nil, nil)
}

func releasedReadsFree(t *testing.T, s ReadStore) {
	l := acquireRecord(t, s, "a", time.Minute, []byte("fp"), replay.LeaseAcquired, nil, nil)
	if err := s.ReleaseLease(ctx(), "a", l.Token); err != nil {
		t.Fatal(err)
	}
	read(t, s, "a", replay.LeaseFree, nil, nil)
	acquireRecord(t, s, "a", time.Minute, []byte("fp2"), replay.LeaseAcquired, nil, nil)
	read(t, s, "a", replay.LeaseBusy, []byte("fp2"), nil)
}

// readUntilFree polls ReadRecord of id until it reads free, checking that
// it reads only want before: the store's clock decides when, not the
// test's. It fails the test after a generous bound.
func readUntilFree(t *testing.T, s ReadStore, id string, want replay.LeaseState, wantFP, wantResult []byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := s.ReadRecord(ctx(), id)
		if err != nil {
			t.Fatalf("ReadRecord(%q): %v", id, err)
		}
		if r.State == replay.LeaseFree {
			checkRead(t, id, r, replay.LeaseFree, nil, nil)
			return
		}
		checkRead(t, id, r, want, wantFP, wantResult)
		if time.Now().After(deadline) {
			t.Fatalf("ReadRecord(%q) still reads %v 30s on", id, r.State)
		}
		time.Sleep(time.Millisecond)
	}
}

func lapsedReadsFree(t *testing.T, s ReadStore) {
	const lease = 10 * time.Millisecond
	fp := binary(32, 43)
	l := acquireRecord(t, s, "a", lease, fp, replay.LeaseAcquired, nil, nil)
	readUntilFree(t, s, "a", replay.LeaseBusy, fp, nil)
	// Free for ReadRecord is free for AcquireRecord: the lapse is judged
	// by one clock, and nothing took the ID meanwhile.
	l2 := acquireRecord(t, s, "a", time.Minute, []byte("second"), replay.LeaseAcquired, nil, nil)
	read(t, s, "a", replay.LeaseBusy, []byte("second"), nil)
	if r, ok := s.(replay.Renewer); ok {
		if err := r.RenewLease(ctx(), "a", l.Token, time.Minute); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("RenewLease with the lapsed lease's token: %v, want ErrLeaseLost", err)
		}
	}
	stillHeld(t, s, "a", l2.Token, []byte("second"))
}

func expiredReadsFree(t *testing.T, s ReadStore) {
	fp, result := binary(32, 44), []byte("result")
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	// Room for the confirmation on a loaded machine; ReadRecord is polled
	// until the store's clock has passed it.
	confirmRecord(t, s, "a", l.Token, time.Now().Add(time.Second), fp, result)
	readUntilFree(t, s, "a", replay.LeaseDone, fp, result)
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseAcquired, nil, nil)
}

func readSlicesAreCopies(t *testing.T, s ReadStore) {
	fp, result := binary(32, 45), binary(64, 46)
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	r := read(t, s, "a", replay.LeaseBusy, fp, nil)
	r.Fingerprint[1] ^= 0xff
	read(t, s, "a", replay.LeaseBusy, fp, nil)
	confirmRecord(t, s, "a", l.Token, hour(), fp, result)
	r = read(t, s, "a", replay.LeaseDone, fp, result)
	r.Fingerprint[1] ^= 0xff
	r.Result[1] ^= 0xff
	read(t, s, "a", replay.LeaseDone, fp, result)
}
