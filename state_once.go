package ctoken

import (
	"context"
	"encoding/hex"
	"errors"
	"time"

	"github.com/ctoken/ctoken/internal/reason"
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
	prefix := "state:s:"
	if c.mode == Encrypted {
		prefix = "state:e:"
	}
	var start time.Time
	if c.obs != nil {
		start = time.Now()
	}
	first, err := c.replay.Claim(ctx, prefix+hex.EncodeToString(id), time.Unix(exp+1, 0).Add(replay.SkewMargin))
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
