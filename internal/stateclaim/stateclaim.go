// Package stateclaim gives the packages of the module outside the root
// package (mcptoken, and through it the MCP integrations) the one thing of a
// single-use ctoken.RequestStateCodec they need to answer the retry of a
// round: a state opened with every check of the codec made (authenticity,
// subject, tool, audience, expiry and the caller's own check) but not yet
// claimed, with the ID the codec claims it under, the last instant the
// codec still accepts it (plus replay.SkewMargin), the codec's replay
// store, and the codec's ring (to seal what is recorded under the ID). The caller then takes the ID itself, with a replay.Recorder lease,
// in the same ID space as the codec's own claim: a state the codec claimed
// is found done, and a state leased here is refused by the codec.
//
// The root package registers the opener when it is initialized, so no new
// exported name is added to it.
package stateclaim

import (
	"context"
	"errors"
	"time"
)

// Opened is a state that passed every check of its codec and is not yet
// claimed.
type Opened struct {
	// State is what the codec (and the caller's check) returned.
	State string
	// ID is the replay-store ID the codec claims the state under; it is
	// derived from the state's authenticator and carries no state text.
	ID string
	// Until is how long a claim of ID must last: the end of the state's
	// expiry second plus replay.SkewMargin.
	Until time.Time
	// Lease is Until less the codec's current time: how long a lease
	// taken now must run to last until Until by the codec's clock.
	Lease time.Duration
	// Store is the codec's replay store (a replay.Store), nil for a codec
	// that is not single-use. It is an any because this package, the
	// bottom layer, imports only the standard library.
	Store any
	// Keys is the ring the codec opened the state with (a
	// *ctoken.Keyring, primary first), for a single-use codec; nil
	// otherwise. The caller derives subkeys of its own from it through
	// internal/ringkey, under a label of its own, to seal what it records
	// under ID: the codec's keys, with no configuration of their own.
	Keys any
}

// ErrNotLinked reports a program in which the root package did not
// register its opener (it cannot happen in a program that has a codec).
var ErrNotLinked = errors.New("ctoken: request-state opener not registered")

var (
	opener  func(ctx context.Context, codec any, wire, subject, tool string, check func(string) (string, error)) (Opened, error)
	storeOf func(codec any) any
)

// Register sets the opener [Open] uses and the function [Store] asks. The
// root package calls it from its init.
func Register(open func(ctx context.Context, codec any, wire, subject, tool string, check func(string) (string, error)) (Opened, error), store func(codec any) any) {
	opener, storeOf = open, store
}

// Store returns the replay store of codec, a *ctoken.RequestStateCodec, as
// a replay.Store in an any: nil for a codec that is not single-use, a nil
// codec, or any other value.
func Store(codec any) any {
	if storeOf == nil {
		return nil
	}
	return storeOf(codec)
}

// Open opens wire with codec, a *ctoken.RequestStateCodec, as its
// DecodeCheckedContext does, but does not claim it: the caller must. Its
// errors are those of DecodeCheckedContext (never a store's: nothing is
// claimed).
func Open(ctx context.Context, codec any, wire, subject, tool string, check func(string) (string, error)) (Opened, error) {
	if opener == nil {
		return Opened{}, ErrNotLinked
	}
	return opener(ctx, codec, wire, subject, tool, check)
}
