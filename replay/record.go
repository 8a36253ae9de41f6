package replay

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Recorder is an optional interface of a [Store] for work whose outcome is
// answered again to every retry, such as an idempotent HTTP API that
// replays its first response. It is a [Leaser] whose entries carry bytes:
// the fingerprint of the request that took the lease, kept from the
// acquisition until the entry expires, and the result, written by
// [Recorder.ConfirmRecord] in the same atomic step that ends the lease. A
// done entry is therefore never without its result, and a result is never
// recorded for a lease that was lost.
//
// Entries of [Recorder.AcquireRecord] share the ID space of
// [Leaser.AcquireLease] and [Store.Claim]: an ID leased or claimed without
// a record is reported busy or done with an empty Fingerprint and Result.
//
// Implementations are atomic per ID and safe for concurrent use. They
// refuse a fingerprint longer than [MaxFingerprintBytes], an empty result
// or one longer than [MaxResultBytes] with an error matching
// [ErrTooLarge] (an empty result matches it too: it could not be told
// from a missing one), before writing anything.
type Recorder interface {
	Leaser

	// AcquireRecord is [Leaser.AcquireLease] that also keeps fingerprint
	// with the lease. For [LeaseBusy] it returns the fingerprint of the
	// live lease, and for [LeaseDone] the fingerprint and result recorded
	// by [Recorder.ConfirmRecord], so the
	// caller can tell a retry of the same request (replay the result) from
	// a different request under the same ID (refuse it). The returned
	// slices are the caller's to keep.
	AcquireRecord(ctx context.Context, id string, lease time.Duration, fingerprint []byte) (Record, error)

	// ConfirmRecord is [Leaser.ConfirmLease] that stores fingerprint
	// (the one given to AcquireRecord) and result with the done entry in
	// the same atomic step, with the same outcomes: nil when the caller's
	// lease is live, or has ended with the ID still free, or this very
	// confirmation was already applied (a resend after a lost reply);
	// [ErrLeaseLost] when another holder has taken the ID meanwhile.
	ConfirmRecord(ctx context.Context, id, token string, until time.Time, fingerprint, result []byte) error
}

// Reader is an optional interface of a [Recorder] whose entries can be read
// without writing anything: a poll of work in progress (an MCP task's
// status) reads the entry instead of acquiring and releasing it, so it
// costs no write and is answered by a store too full to take a new entry.
// Every store of this repository implements it.
type Reader interface {
	// ReadRecord returns what AcquireRecord of id would find, without
	// taking, renewing or changing anything: [LeaseDone] with the
	// Fingerprint and Result recorded by [Recorder.ConfirmRecord] (both
	// empty for an entry confirmed with [Leaser.ConfirmLease] or claimed
	// with [Store.Claim]); [LeaseBusy] with the live lease's Fingerprint
	// and its Wait, by the store's clock; or [LeaseFree] for an ID that is
	// absent, released, expired, or whose lease has lapsed. The store
	// decides that a lease has lapsed by the clock AcquireRecord uses, so
	// a lease AcquireRecord would find lapsed reads free, and a live one
	// busy. Token is always empty, and the returned slices are the
	// caller's to keep. A store refuses a read when it would refuse
	// AcquireRecord because it cannot trust what it holds (a loss, a
	// fence), never because it is full.
	ReadRecord(ctx context.Context, id string) (Record, error)
}

// Record is the answer of [Recorder.AcquireRecord] and [Reader.ReadRecord].
type Record struct {
	// Lease is what the store found, as [Leaser.AcquireLease] reports it.
	Lease
	// Fingerprint is, for [LeaseBusy], the fingerprint given to the
	// AcquireRecord that holds the lease, and for [LeaseDone] the one given
	// to ConfirmRecord; empty for an entry taken without one, and for
	// [LeaseAcquired] and [LeaseFree].
	Fingerprint []byte
	// Result is, for [LeaseDone], the result given to
	// [Recorder.ConfirmRecord]; empty for an entry confirmed with
	// [Leaser.ConfirmLease] or claimed with [Store.Claim], and for the
	// other states.
	Result []byte
}

// MaxFingerprintBytes is the longest fingerprint a [Recorder] keeps: room
// for a SHA-512 digest and a short prefix.
const MaxFingerprintBytes = 80

// MaxResultBytes is the longest result a [Recorder] must accept: 1 MiB.
// A store may document a larger limit of its own.
const MaxResultBytes = 1 << 20

// ErrTooLarge reports a fingerprint or result over the limits of
// [Recorder], or a [MemoryStore] whose results would exceed its byte
// budget. Nothing was written.
var ErrTooLarge = errors.New("replay: record too large")

// CheckFingerprint returns nil for a fingerprint a [Recorder] keeps, and
// an error matching [ErrTooLarge] for one longer than
// [MaxFingerprintBytes]. Stores call it before sending anything.
func CheckFingerprint(fingerprint []byte) error {
	if len(fingerprint) > MaxFingerprintBytes {
		return fmt.Errorf("%w: fingerprint of %d bytes, over %d", ErrTooLarge, len(fingerprint), MaxFingerprintBytes)
	}
	return nil
}

// CheckRecord returns nil for a fingerprint and a result a [Recorder]
// records, and an error matching [ErrTooLarge] that names the limit for a
// fingerprint longer than [MaxFingerprintBytes] or a result that is empty
// or longer than [MaxResultBytes]. Stores call it before sending anything.
func CheckRecord(fingerprint, result []byte) error {
	switch {
	case len(result) == 0:
		return fmt.Errorf("%w: empty result", ErrTooLarge)
	case len(result) > MaxResultBytes:
		return fmt.Errorf("%w: result of %d bytes, over %d", ErrTooLarge, len(result), MaxResultBytes)
	}
	return CheckFingerprint(fingerprint)
}
