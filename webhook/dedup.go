package webhook

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/replay"
)

// Dedup is how a [Verifier] tells a sender's retry of a delivery from a new
// delivery, for schemes whose delivery ID header is not signed ([HMACSHA256],
// [GitHub]). Every policy keeps exactly one store entry per delivery.
//
// Under a scheme that signs the ID ([StandardWebhooks]) deliveries are always
// told apart by their ID, which a sender keeps across retries and nobody
// else can change: only [DedupDefault] and [DedupID] are accepted there.
type Dedup uint8

const (
	// DedupDefault is the scheme's safe default: [DedupID] under a scheme
	// that signs the ID, [DedupSignature] otherwise.
	DedupDefault Dedup = iota
	// DedupSignature treats authentic deliveries with the same body (so,
	// under these schemes, the same signature) as one, by the SHA-256 of
	// the body: a redelivery the sender signs again after rotating its
	// secret is still the same delivery. A captured delivery replayed under
	// a fresh ID is refused, but two distinct deliveries with byte-identical
	// bodies are one: the second is acknowledged without running the
	// handler, and [Config.OnDuplicate] sees it. [Verifier.Verify] hashes
	// an accepted body once more for it (a refused one is not hashed).
	DedupSignature
	// DedupID treats deliveries with the same ID header as one. Distinct
	// deliveries are never merged, but the ID is not signed: anyone holding
	// a captured delivery can have it processed again by sending it under a
	// new ID. Use it only when the handler is idempotent on content or the
	// endpoint is otherwise protected against replay.
	DedupID
	// DedupIDAndSignature treats deliveries as one only when both the ID
	// and the body match: a retry (same ID, same body) is a duplicate,
	// distinct deliveries with equal bodies are not. Like [DedupID] it lets
	// a captured delivery be processed again under a new ID.
	DedupIDAndSignature
)

// String returns the policy's name: "default", "signature", "id" or
// "id+signature".
func (d Dedup) String() string {
	switch d {
	case DedupDefault:
		return "default"
	case DedupSignature:
		return "signature"
	case DedupID:
		return "id"
	case DedupIDAndSignature:
		return "id+signature"
	}
	return "invalid"
}

// DefaultLease is how long a delivery stays "in progress" in the store when
// [Config.Lease] is zero.
const DefaultLease = 60 * time.Second

// DefaultReplayMax is the capacity of the private [replay.MemoryStore] a
// [Verifier] uses when [Config.Replay] is nil: 2^20 deliveries, enough for
// 1 000 000 deliveries a day under the default [DefaultDedupWindow], in at
// most 96 MiB (80 bytes per retained delivery, measured by
// BenchmarkRetainedDeliveryBytes).
const DefaultReplayMax = 1 << 20

// idSigner is implemented by schemes whose signature covers the delivery
// ID, so the ID alone identifies a delivery across retries.
type idSigner interface{ signsID() bool }

func (s *standard) signsID() bool { return true }

// signsID reports whether scheme signs the delivery ID.
func signsID(scheme Scheme) bool {
	s, ok := scheme.(idSigner)
	return ok && s.signsID()
}

// resolveDedup validates cfg's policy for scheme and resolves the default.
func resolveDedup(scheme Scheme, d Dedup) (Dedup, error) {
	if d > DedupIDAndSignature {
		return 0, errDedupInvalid
	}
	if signsID(scheme) {
		if d != DedupDefault && d != DedupID {
			return 0, errDedupSignedID
		}
		return DedupID, nil
	}
	if d == DedupDefault {
		return DedupSignature, nil
	}
	return d, nil
}

// storeKeyPrefix starts every replay store key of a delivery.
const storeKeyPrefix = "webhook:"

// storeKey is the one replay store key of a verified delivery: the prefix
// and the unpadded base64url of the first 128 bits of the SHA-256 of the
// SHA-256 of [Config.Namespace], the scheme's name and the policy's
// material, so every key is 30 bytes whatever the ID's length, and
// deliveries of different endpoints or schemes sharing a store never
// collide.
func (p *params) storeKey(d *Delivery) string {
	h := sha256.New()
	h.Write(p.namespace[:]) // fixed size first: the encoding is unambiguous
	h.Write([]byte(p.scheme.String()))
	h.Write([]byte{0, byte(p.dedupBy)})
	switch p.dedupBy {
	case DedupID:
		h.Write([]byte(d.ID))
	case DedupSignature:
		h.Write(d.body[:])
	case DedupIDAndSignature:
		h.Write(d.body[:]) // fixed size first: the encoding is unambiguous
		h.Write([]byte(d.ID))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var out [len(storeKeyPrefix) + 22]byte
	copy(out[:], storeKeyPrefix)
	base64.RawURLEncoding.Encode(out[len(storeKeyPrefix):], sum[:16])
	return string(out[:])
}

// holdUntil is how long a processed delivery is remembered: the dedup
// window from now, and for a delivery with a signed timestamp at least
// until the timestamp check refuses it on every instance whose clock is
// within [replay.SkewMargin] of this one's.
// The durations are bounded by the Max constants, so the sums cannot
// overflow; time.Time.Add saturates on its own.
func (p *params) holdUntil(d *Delivery) time.Time {
	until := p.now().Add(p.dedup)
	if !d.Timestamp.IsZero() {
		if edge := d.Timestamp.Add(p.tolerance).Add(replay.SkewMargin); edge.After(until) {
			until = edge
		}
	}
	return until
}

// Outcomes of [Verifier.Acquire] that are not failures of the delivery
// (errors.Is).
var (
	// ErrDuplicate reports a delivery already processed (its store entry is
	// confirmed, or was claimed): acknowledge it without processing.
	// [StatusCode] maps it to 200.
	ErrDuplicate = errors.New("webhook: delivery already processed")
	// ErrInProgress reports a delivery whose processing holds a live lease,
	// here or on another instance: the sender must retry later, when it
	// will be found processed, or — if that attempt fails or its instance
	// died — free to process. [StatusCode] maps it to 503.
	ErrInProgress = errors.New("webhook: delivery in progress")
)

var (
	errDup              = reason.New(ErrDuplicate, "delivery already processed")
	errBusy             = reason.New(ErrInProgress, "delivery in progress under a live lease")
	errDedupInvalid     = reason.New(ErrConfig, "Dedup is not a defined policy")
	errDedupSignedID    = reason.New(ErrConfig, "Dedup has no effect: the scheme signs the delivery ID, which identifies a delivery")
	errNegLease         = reason.New(ErrConfig, "Lease is negative")
	errShortLease       = reason.New(ErrConfig, "Lease is under a millisecond")
	errStoreNoLease     = reason.New(ErrConfig, "Replay store does not implement replay.Leaser, which exactly-once processing needs")
	errStoreHorizon     = reason.New(ErrConfig, "DedupWindow (or Lease) reaches past the Replay store's horizon")
	errSignerLeaseOpts  = reason.New(ErrConfig, "Dedup, Lease, RetryAfter, OnDuplicate and OnLeaseError have no effect on a Signer")
	errLeaseNotAcquired = reason.New(ErrMalformed, "lease not from Verifier.Acquire")
)
