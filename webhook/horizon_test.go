package webhook

import (
	"errors"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// boundedStore is a memory store that says it holds nothing past horizon.
type boundedStore struct {
	*replay.MemoryStore
	horizon time.Duration
}

func (b boundedStore) Horizon() time.Duration { return b.horizon }

// A store that refuses entries past its horizon would refuse every
// confirmation of a verifier whose DedupWindow (or Lease) reaches further,
// and every delivery would be processed again after its lease: refused at
// construction.
func TestNewVerifierRefusesDedupWindowPastTheStoresHorizon(t *testing.T) {
	tests := []struct {
		name    string
		horizon time.Duration
		dedup   time.Duration
		lease   time.Duration
		ok      bool
	}{
		{"default window fits the default horizon", 25 * time.Hour, 0, 0, true},
		{"window over the horizon", 25 * time.Hour, 4 * 24 * time.Hour, 0, false},
		{"window plus skew over the horizon", 24 * time.Hour, 24 * time.Hour, 0, false},
		{"lease over the horizon", 2 * time.Hour, time.Hour, 3 * time.Hour, false},
		{"short horizon, short window", 2 * time.Hour, time.Hour, time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewVerifier(Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Namespace: "ns",
				Replay: boundedStore{replay.NewMemoryStore(10), tt.horizon}, DedupWindow: tt.dedup, Lease: tt.lease})
			switch {
			case tt.ok && err != nil:
				t.Fatalf("NewVerifier: %v", err)
			case !tt.ok && (!errors.Is(err, ErrConfig) || err != errStoreHorizon):
				t.Fatalf("NewVerifier = %v; want %v", err, errStoreHorizon)
			}
		})
	}
}
