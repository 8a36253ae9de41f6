package ctoken

import (
	"context"
	"encoding/hex"
	"errors"
	"time"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/internal/stateclaim"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// ErrStateReplayed reports an authentic, unexpired request state that a
// single-use codec ([RequestStateSecurity.Replay] set) has already accepted once.
var ErrStateReplayed = errors.New("ctoken: request state already used")

var (
	errStateReplayed = reject(ErrStateReplayed, "already used")
	// errStateStore wraps a replay store's failure; the error matches the
	// store's error, not a state sentinel: the state was not judged.
	errStateStore = errors.New("ctoken: request state")
)

// claimOnce records the state identified by id (its MAC for signed states,
// its GCM nonce and tag for encrypted ones — both fixed by the key holder,
// so a client cannot re-encode one state into a second accepted form) until
// the end of its expiry second, the last instant Decode accepts it, plus
// replay.SkewMargin for clock skew between instances and the store.
// When the codec has an observer, it also returns how long the store took.
func (c *RequestStateCodec) claimOnce(ctx context.Context, id []byte, exp int64) (time.Duration, error) {
	var start time.Time
	if c.obs != nil {
		start = time.Now()
	}
	first, err := c.replay.Claim(ctx, c.claimID(id), claimUntil(exp))
	var took time.Duration
	if c.obs != nil {
		took = max(time.Since(start), 1) // a store was called: never 0
	}
	if err != nil {
		return took, reason.Wrap(errStateStore, "replay store failed", err)
	}
	if !first {
		return took, errStateReplayed
	}
	return took, nil
}

// claimID is the replay-store ID of the state whose authenticator is id.
func (c *RequestStateCodec) claimID(id []byte) string {
	prefix := "state:s:"
	if c.mode == Encrypted {
		prefix = "state:e:"
	}
	return prefix + hex.EncodeToString(id)
}

// claimUntil is how long the claim of a state expiring at exp lasts: the
// end of its expiry second, plus replay.SkewMargin.
func claimUntil(exp int64) time.Time { return time.Unix(exp+1, 0).Add(replay.SkewMargin) }

func init() { stateclaim.Register(openUnclaimed, replayStoreOf) }

// replayStoreOf is the store function of package stateclaim.
func replayStoreOf(codec any) any {
	if c, _ := codec.(*RequestStateCodec); c != nil && c.replay != nil {
		return c.replay
	}
	return nil
}

// openUnclaimed is the opener of package stateclaim: decode with every
// check, without the claim of a single-use codec. It reports to the
// codec's observer like DecodeCheckedContext, with no store time: the
// store is the caller's to call.
func openUnclaimed(ctx context.Context, codec any, wire, subject, tool string, check func(string) (string, error)) (stateclaim.Opened, error) {
	c, _ := codec.(*RequestStateCodec)
	if c == nil {
		return stateclaim.Opened{}, errStateNoCodec
	}
	var o stateclaim.Opened
	s, key, _, err := c.decode(ctx, wire, subject, tool, check, &o)
	if err != errStateNoCodec && c.obs != nil {
		observeErr(c.obs, observe.KindRequestState, key, err, 0)
	}
	if err != nil {
		return stateclaim.Opened{}, err
	}
	o.State = s
	if !o.Until.IsZero() {
		o.Lease = o.Until.Sub(c.now())
	}
	if c.replay != nil {
		o.Store = c.replay
	}
	return o, nil
}
