package ctoken

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// boundedStore is a MemoryStore that refuses claims past its horizon, as
// redisstore does.
type boundedStore struct {
	replay.MemoryStore
	horizon time.Duration
}

func (b *boundedStore) Horizon() time.Duration { return b.horizon }

func (b *boundedStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if time.Until(until) > b.horizon {
		return false, errors.New("past the horizon")
	}
	return b.MemoryStore.Claim(ctx, id, until)
}

// TestSingleUseRefusesATTLPastTheStoresHorizon: a one-time issuer or a
// single-use state codec whose claims would reach past a bounded store's
// horizon is refused at construction (every redemption would fail);
// one whose claims fit is accepted and redeems.
func TestSingleUseRefusesATTLPastTheStoresHorizon(t *testing.T) {
	kr := mustKeyring(t, RandomKey())
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		horizon time.Duration
		refused bool
	}{
		{"fits", 5 * time.Minute, 5*time.Minute + time.Second + replay.SkewMargin, false},
		{"a second short", 5 * time.Minute, 5*time.Minute + replay.SkewMargin, true},
		{"default TTL, tiny horizon", 0, time.Minute, true},
		{"a day against an hour", 24 * time.Hour, time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &boundedStore{horizon: tc.horizon}
			o, err := NewOneTimeIssuer(OneTimeConfig{Keys: kr, Purpose: "agent-bootstrap", TTL: tc.ttl, Replay: store})
			if tc.refused {
				if !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "OneTimeConfig.Replay") {
					t.Fatalf("NewOneTimeIssuer = %v (reason %q); want ErrConfig naming OneTimeConfig.Replay", err, Reason(err))
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				tok, err := o.Mint(map[string]string{"run": "1"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := o.Redeem(context.Background(), tok, map[string]string{"run": "1"}); err != nil {
					t.Fatalf("Redeem with a fitting horizon: %v", err)
				}
			}
			c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: kr, TTL: tc.ttl, Replay: store})
			if tc.refused {
				if !errors.Is(err, ErrConfig) || !strings.Contains(Reason(err), "RequestStateSecurity.Replay") {
					t.Fatalf("NewRequestStateCodec = %v (reason %q); want ErrConfig naming RequestStateSecurity.Replay", err, Reason(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Encode("step-1", "tools/call\x00t", "alice")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.DecodeContext(context.Background(), s, "tools/call\x00t", "alice"); err != nil {
				t.Fatalf("Decode with a fitting horizon: %v", err)
			}
		})
	}
}
