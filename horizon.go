package ctoken

import (
	"fmt"
	"time"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/replay"
)

// checkHorizon refuses a token lifetime whose single-use claims a bounded
// replay store would refuse: a claim is held until the end of the token's
// expiry second plus replay.SkewMargin, so TTL + 1 s + SkewMargin must fit
// in the store's [replay.Bounded] horizon. Otherwise every Mint or Encode
// would succeed and every redemption fail. field names the Config field.
func checkHorizon(store replay.Store, ttl time.Duration, field string) error {
	b, ok := store.(replay.Bounded)
	if !ok {
		return nil
	}
	if need := ttl + time.Second + replay.SkewMargin; need > b.Horizon() {
		return reason.Wrap(ErrConfig, field+": TTL + 1 s + replay.SkewMargin reaches past the replay store's horizon",
			fmt.Errorf("claims held for %v, horizon %v", need, b.Horizon()))
	}
	return nil
}
