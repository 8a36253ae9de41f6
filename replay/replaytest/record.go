package replaytest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// RecordStore is a replay store whose leases carry records: what
// [RunRecordContract] checks.
type RecordStore interface {
	replay.Store
	replay.Recorder
}

// RunRecordContract runs every contract test of [replay.Recorder] against a
// fresh store from newStore per test, in parallel; IDs need not be unique
// across calls of newStore. It uses the real clock with leases of [Lease],
// so it takes well under two seconds on a local store. Each store must hold
// a record of [replay.MaxResultBytes] beside a few small ones.
//
// Beyond what the Recorder documentation states, it pins two choices: an
// acquired lease is reported with an empty Fingerprint and Result (the
// caller knows its own), also when an earlier holder of the ID released
// or lost its lease; and a confirmation resent with the same token while
// the entry lives returns nil and keeps the first fingerprint and result
// (a resend with other bytes may be refused, but never changes them).
func RunRecordContract(t *testing.T, newStore func(t *testing.T) RecordStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s RecordStore)
	}{
		{"AcquireKeepsFingerprintAndBusyReportsIt", acquireKeepsFingerprint},
		{"ConfirmThenDoneReturnsRecordByteForByte", confirmThenDoneReturnsRecord},
		{"ConfirmResentWithSameTokenKeepsFirstRecord", confirmResentKeepsRecord},
		{"ConfirmAfterTakeoverIsLeaseLostAndKeepsTheOthersRecord", confirmRecordAfterTakeover},
		{"ConfirmAfterLeaseEndedWithIDFreeRecords", confirmRecordAfterLeaseEnded},
		{"ConfirmWithForeignTokenIsLeaseLost", confirmRecordWithForeignToken},
		{"ConfirmUntilNotAfterNowIsExpiredAndKeepsLease", confirmRecordExpired},
		{"ReleaseFreesAndNextAcquireHasEmptyRecord", releaseRecordFrees},
		{"TooLargeRefusedAndNothingWritten", tooLargeRefused},
		{"ClaimAndLeaseEntriesHaveEmptyRecord", claimAndLeaseEntriesHaveEmptyRecord},
		{"RecordedEntryExpiresAtUntil", recordedEntryExpires},
		{"ConcurrentAcquireRecordExactlyOneWins", concurrentAcquireRecordExactlyOne},
		{"ReturnedSlicesAreCopies", returnedSlicesAreCopies},
		{"NonPositiveLeaseRefused", nonPositiveRecordLeaseRefused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// acquireRecord calls AcquireRecord and checks the state, the token and,
// for busy and done, the reported record; wantFP and wantResult are
// ignored for acquired, whose record must be empty.
func acquireRecord(t *testing.T, s RecordStore, id string, lease time.Duration, fp []byte, want replay.LeaseState, wantFP, wantResult []byte) replay.Record {
	t.Helper()
	r, err := s.AcquireRecord(ctx(), id, lease, fp)
	if err != nil {
		t.Fatalf("AcquireRecord(%q): %v", id, err)
	}
	if r.State != want {
		t.Fatalf("AcquireRecord(%q) = %v, want %v", id, r.State, want)
	}
	if (r.Token != "") != (want == replay.LeaseAcquired) {
		t.Fatalf("AcquireRecord(%q) = %v with token %q", id, r.State, r.Token)
	}
	if want == replay.LeaseAcquired {
		wantFP, wantResult = nil, nil
	}
	if want != replay.LeaseDone {
		wantResult = nil
	}
	if !bytes.Equal(r.Fingerprint, wantFP) { //ctcheck:ok test fingerprints are made up by the contract, no secret
		t.Fatalf("AcquireRecord(%q) = %v with fingerprint %x, want %x", id, r.State, r.Fingerprint, wantFP)
	}
	if !bytes.Equal(r.Result, wantResult) {
		t.Fatalf("AcquireRecord(%q) = %v with a result of %d bytes, want %d bytes as recorded", id, r.State, len(r.Result), len(wantResult))
	}
	return r
}

func confirmRecord(t *testing.T, s RecordStore, id, token string, until time.Time, fp, result []byte) {
	t.Helper()
	if err := s.ConfirmRecord(ctx(), id, token, until, fp, result); err != nil {
		t.Fatalf("ConfirmRecord(%q): %v", id, err)
	}
}

// binary returns n bytes that include 0x00, 0xff and invalid UTF-8.
func binary(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	if n > 0 {
		b[0] = 0x00
		b[n-1] = 0xff
	}
	return b
}

func hour() time.Time { return time.Now().Add(time.Hour) }

func acquireKeepsFingerprint(t *testing.T, s RecordStore) {
	fp, other := binary(32, 1), binary(32, 2)
	acquireRecord(t, s, "a", 10*time.Second, fp, replay.LeaseAcquired, nil, nil)
	r := acquireRecord(t, s, "a", time.Minute, other, replay.LeaseBusy, fp, nil)
	if r.Wait <= 0 || r.Wait > 10*time.Second {
		t.Fatalf("Wait = %v, want within (0, 10s]: the holder's lease, not the asker's", r.Wait)
	}
	acquire(t, s, "a", time.Minute, replay.LeaseBusy)
	// A lease acquired with an empty fingerprint is busy with an empty one.
	acquireRecord(t, s, "b", time.Minute, nil, replay.LeaseAcquired, nil, nil)
	acquireRecord(t, s, "b", time.Minute, fp, replay.LeaseBusy, nil, nil)
}

func confirmThenDoneReturnsRecord(t *testing.T, s RecordStore) {
	for _, tc := range []struct {
		id          string
		fp, result  []byte
		description string
	}{
		{"largest", binary(replay.MaxFingerprintBytes, 3), binary(replay.MaxResultBytes, 4), "the largest fingerprint and result"},
		{"zero", []byte{0}, []byte{0}, "a single zero byte each"},
		{"no-fingerprint", nil, []byte("{}"), "no fingerprint"},
	} {
		l := acquireRecord(t, s, tc.id, time.Minute, tc.fp, replay.LeaseAcquired, nil, nil)
		confirmRecord(t, s, tc.id, l.Token, hour(), tc.fp, tc.result)
		acquireRecord(t, s, tc.id, time.Minute, binary(32, 5), replay.LeaseDone, tc.fp, tc.result)
		acquire(t, s, tc.id, time.Minute, replay.LeaseDone)
		if first, err := s.Claim(ctx(), tc.id, hour()); first || err != nil {
			t.Fatalf("%s: Claim of a recorded id = %v, %v; want false, nil", tc.description, first, err)
		}
		// Still there, unchanged, after the other calls.
		acquireRecord(t, s, tc.id, time.Minute, nil, replay.LeaseDone, tc.fp, tc.result)
	}
}

func confirmResentKeepsRecord(t *testing.T, s RecordStore) {
	fp, result := binary(32, 6), binary(1000, 7)
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	confirmRecord(t, s, "a", l.Token, hour(), fp, result)
	// The reply was lost; the holder sends the same confirmation again.
	confirmRecord(t, s, "a", l.Token, hour(), fp, result)
	acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseDone, fp, result)
	// A resend with other bytes never replaces the first record.
	_ = s.ConfirmRecord(ctx(), "a", l.Token, hour(), binary(32, 8), binary(10, 9))
	acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseDone, fp, result)
}

func confirmRecordAfterTakeover(t *testing.T, s RecordStore) {
	fp1, fp2 := binary(32, 10), binary(32, 11)
	res1, res2 := binary(100, 12), binary(200, 13)
	l := acquireRecord(t, s, "a", Lease, fp1, replay.LeaseAcquired, nil, nil)
	start := time.Now() // the store took the lease before it answered
	waitOut(start, Lease)
	l2 := acquireRecord(t, s, "a", time.Minute, fp2, replay.LeaseAcquired, nil, nil)
	if l2.Token == l.Token {
		t.Fatal("two leases of one id got the same token")
	}
	if err := s.ConfirmRecord(ctx(), "a", l.Token, hour(), fp1, res1); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("ConfirmRecord after another holder took the id: %v, want ErrLeaseLost", err)
	}
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, fp2, nil)
	confirmRecord(t, s, "a", l2.Token, hour(), fp2, res2)
	// Once the other holder confirmed, the late confirmation is still lost
	// and does not overwrite the other holder's record.
	if err := s.ConfirmRecord(ctx(), "a", l.Token, hour(), fp1, res1); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("ConfirmRecord after another holder confirmed: %v, want ErrLeaseLost", err)
	}
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp2, res2)
}

func confirmRecordAfterLeaseEnded(t *testing.T, s RecordStore) {
	fp, result := binary(32, 14), binary(300, 15)
	l := acquireRecord(t, s, "a", Lease, fp, replay.LeaseAcquired, nil, nil)
	start := time.Now() // the store took the lease before it answered
	waitOut(start, Lease)
	confirmRecord(t, s, "a", l.Token, hour(), fp, result)
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp, result)
}

func confirmRecordWithForeignToken(t *testing.T, s RecordStore) {
	fp := binary(32, 16)
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	other := acquireRecord(t, s, "other", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	for _, tok := range []string{"", "0", "not-a-token", "\x00\xff", other.Token} {
		if err := s.ConfirmRecord(ctx(), "a", tok, hour(), fp, []byte("x")); !errors.Is(err, replay.ErrLeaseLost) {
			t.Fatalf("ConfirmRecord with token %q: %v, want ErrLeaseLost", tok, err)
		}
	}
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, fp, nil)
	confirmRecord(t, s, "a", l.Token, hour(), fp, []byte("x"))
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp, []byte("x"))
}

func confirmRecordExpired(t *testing.T, s RecordStore) {
	fp, result := binary(32, 17), []byte("result")
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	for _, until := range []time.Time{time.Now().Add(-time.Second), {}} {
		if err := s.ConfirmRecord(ctx(), "a", l.Token, until, fp, result); !errors.Is(err, replay.ErrExpired) {
			t.Fatalf("ConfirmRecord until %v: %v, want ErrExpired", until, err)
		}
	}
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, fp, nil)
	confirmRecord(t, s, "a", l.Token, hour(), fp, result)
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp, result)
}

func releaseRecordFrees(t *testing.T, s RecordStore) {
	fp, fp2 := binary(32, 18), binary(32, 19)
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	if err := s.ReleaseLease(ctx(), "a", l.Token); err != nil {
		t.Fatal(err)
	}
	// Acquired reports an empty record, not the released holder's.
	l2 := acquireRecord(t, s, "a", time.Minute, fp2, replay.LeaseAcquired, nil, nil)
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, fp2, nil)
	// The first holder's late release and confirmation change nothing.
	if err := s.ReleaseLease(ctx(), "a", l.Token); err != nil {
		t.Fatal(err)
	}
	if err := s.ConfirmRecord(ctx(), "a", l.Token, hour(), fp, []byte("late")); !errors.Is(err, replay.ErrLeaseLost) {
		t.Fatalf("ConfirmRecord of a released lease after another holder took the id: %v, want ErrLeaseLost", err)
	}
	confirmRecord(t, s, "a", l2.Token, hour(), fp2, []byte("second"))
	// Releasing a confirmed lease keeps its record.
	if err := s.ReleaseLease(ctx(), "a", l2.Token); err != nil {
		t.Fatal(err)
	}
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp2, []byte("second"))
}

func tooLargeRefused(t *testing.T, s RecordStore) {
	fp, result := binary(32, 20), []byte("result")
	long := binary(replay.MaxFingerprintBytes+1, 21)
	if r, err := s.AcquireRecord(ctx(), "a", time.Minute, long); !errors.Is(err, replay.ErrTooLarge) || r.State != 0 || r.Token != "" {
		t.Fatalf("AcquireRecord with a fingerprint of %d bytes = %+v, %v; want ErrTooLarge and nothing", len(long), r.Lease, err)
	}
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	for _, tc := range []struct {
		name       string
		fp, result []byte
	}{
		{"fingerprint over the limit", long, result},
		{"nil result", fp, nil},
		{"empty result", fp, []byte{}},
		{"result over the limit", fp, binary(replay.MaxResultBytes+1, 22)},
	} {
		if err := s.ConfirmRecord(ctx(), "a", l.Token, hour(), tc.fp, tc.result); !errors.Is(err, replay.ErrTooLarge) {
			t.Fatalf("ConfirmRecord with %s: %v, want ErrTooLarge", tc.name, err)
		}
		// Nothing written: the lease is still live, with its fingerprint.
		acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, fp, nil)
	}
	confirmRecord(t, s, "a", l.Token, hour(), fp, result)
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp, result)
}

func claimAndLeaseEntriesHaveEmptyRecord(t *testing.T, s RecordStore) {
	fp := binary(32, 23)
	if first, err := s.Claim(ctx(), "claimed", hour()); !first || err != nil {
		t.Fatalf("Claim = %v, %v; want true, nil", first, err)
	}
	acquireRecord(t, s, "claimed", time.Minute, fp, replay.LeaseDone, nil, nil)

	l := acquire(t, s, "leased", time.Minute, replay.LeaseAcquired)
	if r := acquireRecord(t, s, "leased", time.Minute, fp, replay.LeaseBusy, nil, nil); r.Wait <= 0 {
		t.Fatalf("busy lease reports Wait %v; want positive", r.Wait)
	}
	confirm(t, s, "leased", l.Token, hour())
	acquireRecord(t, s, "leased", time.Minute, fp, replay.LeaseDone, nil, nil)

	// A record lease confirmed without a record is done without one.
	r := acquireRecord(t, s, "record-then-lease", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	confirm(t, s, "record-then-lease", r.Token, hour())
	acquireRecord(t, s, "record-then-lease", time.Minute, fp, replay.LeaseDone, nil, nil)

	// A recorded ID is done for Claim and AcquireLease too.
	r = acquireRecord(t, s, "recorded", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	confirmRecord(t, s, "recorded", r.Token, hour(), fp, []byte("x"))
	if first, err := s.Claim(ctx(), "recorded", hour()); first || err != nil {
		t.Fatalf("Claim of a recorded id = %v, %v; want false, nil", first, err)
	}
	acquire(t, s, "recorded", time.Minute, replay.LeaseDone)
}

func recordedEntryExpires(t *testing.T, s RecordStore) {
	fp, result := binary(32, 24), []byte("result")
	l := acquireRecord(t, s, "a", time.Minute, fp, replay.LeaseAcquired, nil, nil)
	until := time.Now().Add(time.Second) // room for two calls on a loaded machine
	confirmRecord(t, s, "a", l.Token, until, fp, result)
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp, result)
	time.Sleep(time.Until(until.Add(50 * time.Millisecond)))
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseAcquired, nil, nil)
}

func concurrentAcquireRecordExactlyOne(t *testing.T, s RecordStore) {
	const copies = 32
	for round := range 10 {
		id := fmt.Sprint("race-", round)
		var (
			mu       sync.Mutex
			winners  [][]byte
			seen     [][]byte
			failures []error
			wg       sync.WaitGroup
		)
		start := make(chan struct{})
		for i := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fp := []byte(fmt.Sprint("fingerprint-", i))
				<-start
				r, err := s.AcquireRecord(ctx(), id, time.Minute, fp)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					failures = append(failures, err)
				case r.State == replay.LeaseAcquired:
					winners = append(winners, fp)
				case r.State == replay.LeaseBusy:
					seen = append(seen, r.Fingerprint)
				default:
					failures = append(failures, fmt.Errorf("state %v", r.State))
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("round %d: %v", round, failures)
		}
		if len(winners) != 1 || len(seen) != copies-1 {
			t.Fatalf("round %d: %d acquired, %d busy; want 1 and %d", round, len(winners), len(seen), copies-1)
		}
		for _, fp := range seen {
			if !bytes.Equal(fp, winners[0]) { //ctcheck:ok test fingerprints are made up by the contract, no secret
				t.Fatalf("round %d: busy reports fingerprint %q, the winner's is %q", round, fp, winners[0])
			}
		}
	}
}

func returnedSlicesAreCopies(t *testing.T, s RecordStore) {
	fp, result := binary(32, 25), binary(64, 26)
	in := bytes.Clone(fp)
	l := acquireRecord(t, s, "a", time.Minute, in, replay.LeaseAcquired, nil, nil)
	in[1] ^= 0xff // the caller reuses its buffer
	r := acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, fp, nil)
	r.Fingerprint[1] ^= 0xff
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseBusy, fp, nil)

	inFP, inResult := bytes.Clone(fp), bytes.Clone(result)
	confirmRecord(t, s, "a", l.Token, hour(), inFP, inResult)
	inFP[1] ^= 0xff
	inResult[1] ^= 0xff
	r = acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp, result)
	r.Fingerprint[1] ^= 0xff
	r.Result[1] ^= 0xff
	acquireRecord(t, s, "a", time.Minute, nil, replay.LeaseDone, fp, result)
}

func nonPositiveRecordLeaseRefused(t *testing.T, s RecordStore) {
	for _, d := range []time.Duration{0, -time.Second} {
		if r, err := s.AcquireRecord(ctx(), "a", d, []byte("fp")); err == nil || r.State != 0 || r.Token != "" {
			t.Fatalf("AcquireRecord with lease %v = %+v, %v; want an error and nothing", d, r.Lease, err)
		}
	}
	acquireRecord(t, s, "a", time.Minute, []byte("fp"), replay.LeaseAcquired, nil, nil)
}
