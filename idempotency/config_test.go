package idempotency

import (
	"errors"
	"log/slog"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// boundedStore is a Recorder that holds nothing longer than horizon.
type boundedStore struct {
	replay.Recorder
	horizon time.Duration
}

func (b boundedStore) Horizon() time.Duration { return b.horizon }

func TestNewRefusesInvalidConfig(t *testing.T) {
	caller := func(*http.Request) (string, error) { return "a", nil }
	valid := func() Config { return Config{Store: newStore(), Caller: caller, Keys: testKeys} }
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"nil Store", func(c *Config) { c.Store = nil }},
		{"nil Caller", func(c *Config) { c.Caller = nil }},
		{"Header not a token", func(c *Config) { c.Header = "Idempotency Key" }},
		{"Header is the replayed header", func(c *Config) { c.Header = "idempotent-replayed" }},
		{"empty Methods", func(c *Config) { c.Methods = []string{} }},
		{"method not a token", func(c *Config) { c.Methods = []string{"PO ST"} }},
		{"empty method", func(c *Config) { c.Methods = []string{""} }},
		{"negative Window", func(c *Config) { c.Window = -time.Hour }},
		{"Window over MaxWindow", func(c *Config) { c.Window = MaxWindow + 1 }},
		{"Window not longer than Lease", func(c *Config) { c.Window, c.Lease = time.Minute, time.Minute }},
		{"Window over the store's Horizon", func(c *Config) { c.Store = boundedStore{newStore(), time.Hour} }},
		{"Window equal to the store's Horizon, leaving no room for the Lease", func(c *Config) {
			c.Store, c.Window, c.Lease = boundedStore{newStore(), time.Hour}, time.Hour, time.Minute
		}},
		{"negative Lease", func(c *Config) { c.Lease = -1 }},
		{"Lease under MinLease", func(c *Config) { c.Lease = time.Microsecond }},
		{"Lease over MaxLease", func(c *Config) { c.Lease = MaxLease + 1 }},
		{"negative RetryAfter", func(c *Config) { c.RetryAfter = -time.Second }},
		{"RetryAfter over MaxRetryAfter", func(c *Config) { c.RetryAfter = MaxRetryAfter + 1 }},
		{"Challenge with a line break", func(c *Config) { c.Challenge = "Bearer\r\nSet-Cookie: a=b" }},
		{"Challenge not ASCII", func(c *Config) { c.Challenge = "Bearer realm=\"caf\u00e9\"" }},
		{"negative MaxKeyBytes", func(c *Config) { c.MaxKeyBytes = -1 }},
		{"MaxKeyBytes over its limit", func(c *Config) { c.MaxKeyBytes = MaxKeyBytesLimit + 1 }},
		{"negative MaxRequestBytes", func(c *Config) { c.MaxRequestBytes = -1 }},
		{"MaxRequestBytes over its limit", func(c *Config) { c.MaxRequestBytes = MaxRequestBytesLimit + 1 }},
		{"negative MaxResponseBytes", func(c *Config) { c.MaxResponseBytes = -1 }},
		{"MaxResponseBytes over MaxStoredResponseBytes", func(c *Config) { c.MaxResponseBytes = MaxStoredResponseBytes + 1 }},
		{"ReplayHeaders with Set-Cookie", func(c *Config) { c.ReplayHeaders = []string{"set-cookie"} }},
		{"ReplayHeaders with Content-Length", func(c *Config) { c.ReplayHeaders = []string{"Content-Length"} }},
		{"ReplayHeaders with a hop-by-hop header", func(c *Config) { c.ReplayHeaders = []string{"Transfer-Encoding"} }},
		{"ReplayHeaders with WWW-Authenticate", func(c *Config) { c.ReplayHeaders = []string{"WWW-Authenticate"} }},
		{"ReplayHeaders with Proxy-Authenticate", func(c *Config) { c.ReplayHeaders = []string{"proxy-authenticate"} }},
		{"ReplayHeaders with Authentication-Info", func(c *Config) { c.ReplayHeaders = []string{"Authentication-Info"} }},
		{"ReplayHeaders with Proxy-Authentication-Info", func(c *Config) { c.ReplayHeaders = []string{"Proxy-Authentication-Info"} }},
		{"ReplayHeaders with Clear-Site-Data", func(c *Config) { c.ReplayHeaders = []string{"Clear-Site-Data"} }},
		{"ReplayHeaders with Set-Cookie2", func(c *Config) { c.ReplayHeaders = []string{"Set-Cookie2"} }},
		{"ReplayHeaders with Keep-Alive", func(c *Config) { c.ReplayHeaders = []string{"Keep-Alive"} }},
		{"ReplayHeaders with the replayed header", func(c *Config) { c.ReplayHeaders = []string{ReplayedHeader} }},
		{"ReplayHeaders with an invalid name", func(c *Config) { c.ReplayHeaders = []string{"X:Y"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.mod(&cfg)
			m, err := New(cfg)
			if !errors.Is(err, ErrConfig) || !errors.Is(err, ctoken.ErrConfig) || m != nil {
				t.Fatalf("New = %v, %v; want ErrConfig", m, err)
			}
		})
	}
}

// TestNewNamesEveryFaultAtOnce pins that a config with several faults is
// refused with one error naming each (the user who sets Store does not meet
// the missing Caller and Keys next), and that a field two checks depend on
// is named once.
func TestNewNamesEveryFaultAtOnce(t *testing.T) {
	caller := func(*http.Request) (string, error) { return "a", nil }
	for _, tc := range []struct {
		name  string
		cfg   Config
		count string
		names []string
	}{
		{"all zero", Config{}, "3 configuration faults", []string{"Store is nil (set a durable store", "Caller is nil (set a function", "Keys is nil or an empty keyring (set Keys"}},
		{"bad Lease and Wait", Config{Store: newStore(), Caller: caller, Keys: testKeys, Lease: -1, Wait: -1}, "2 configuration faults",
			[]string{"Lease is negative or outside its bounds", "Wait is negative or over MaxWait"}},
		{"every group", Config{Caller: caller, Keys: testKeys, Header: "a b", Methods: []string{}, Window: -1, RetryAfter: -1,
			Challenge: "\n", MaxKeyBytes: -1, MaxRequestBytes: -1, MaxResponseBytes: -1, ReplayHeaders: []string{"Set-Cookie"}},
			"10 configuration faults", []string{"Store is nil", "Header is not a valid header name", "Methods is empty", "Window is negative",
				"RetryAfter is negative", "Challenge holds", "MaxKeyBytes", "MaxRequestBytes", "MaxResponseBytes", "ReplayHeaders names"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.cfg)
			if !errors.Is(err, ErrConfig) || m != nil {
				t.Fatalf("New = %v, %v; want ErrConfig", m, err)
			}
			for _, want := range append([]string{tc.count}, tc.names...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

func TestNewResolvesDefaults(t *testing.T) {
	caller := func(*http.Request) (string, error) { return "a", nil }
	t.Run("zero fields take the documented defaults", func(t *testing.T) {
		p, err := newParams(Config{Store: newStore(), Caller: caller, Keys: testKeys})
		if err != nil {
			t.Fatal(err)
		}
		if p.header != DefaultHeader || p.window != DefaultWindow || p.lease != DefaultLease ||
			p.maxKey != DefaultMaxKeyBytes || p.maxRequest != DefaultMaxRequestBytes ||
			p.maxResponse != DefaultMaxResponseBytes || p.retryAfter != "5" || p.required || p.log != slog.Default() ||
			!slices.Equal(p.methods, []string{"POST", "PATCH"}) || !slices.Equal(p.replay, canonical(DefaultReplayHeaders())) {
			t.Fatalf("header %q window %v lease %v maxKey %d maxRequest %d maxResponse %d retryAfter %q methods %v replay %v",
				p.header, p.window, p.lease, p.maxKey, p.maxRequest, p.maxResponse, p.retryAfter, p.methods, p.replay)
		}
	})
	t.Run("set fields are kept, header names canonical and deduplicated", func(t *testing.T) {
		p, err := newParams(Config{
			Store: boundedStore{newStore(), 48*time.Hour + 10*time.Second}, Caller: caller, Keys: testKeys, Header: "x-idempotency-key",
			Window: 48 * time.Hour, Lease: 10 * time.Second, MaxKeyBytes: 64, MaxRequestBytes: 10,
			MaxResponseBytes: MaxStoredResponseBytes, RetryAfter: 1100 * time.Millisecond,
			Methods: []string{"PUT"}, ReplayHeaders: []string{"x-a", "X-A", "x-b"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if p.header != "X-Idempotency-Key" || p.window != 48*time.Hour || p.lease != 10*time.Second || p.maxKey != 64 ||
			p.maxRequest != 10 || p.maxResponse != MaxStoredResponseBytes || p.retryAfter != "2" ||
			!slices.Equal(p.methods, []string{"PUT"}) || !slices.Equal(p.replay, []string{"X-A", "X-B"}) {
			t.Fatalf("header %q window %v lease %v maxKey %d maxRequest %d maxResponse %d retryAfter %q methods %v replay %v",
				p.header, p.window, p.lease, p.maxKey, p.maxRequest, p.maxResponse, p.retryAfter, p.methods, p.replay)
		}
	})
	t.Run("bounds are inclusive", func(t *testing.T) {
		for _, cfg := range []Config{
			{Lease: MinLease}, {Lease: MaxLease, Window: MaxWindow}, {RetryAfter: MaxRetryAfter},
			{MaxKeyBytes: MaxKeyBytesLimit, MaxRequestBytes: MaxRequestBytesLimit, MaxResponseBytes: MaxStoredResponseBytes},
		} {
			cfg.Store, cfg.Caller, cfg.Keys = newStore(), caller, testKeys
			if _, err := New(cfg); err != nil {
				t.Errorf("New(%+v): %v", cfg, err)
			}
		}
	})
	t.Run("an empty ReplayHeaders stores no header", func(t *testing.T) {
		p, err := newParams(Config{Store: newStore(), Caller: caller, Keys: testKeys, ReplayHeaders: []string{}})
		if err != nil || len(p.replay) != 0 {
			t.Fatalf("replay %v, err %v", p.replay, err)
		}
	})
	t.Run("the largest stored response fits replay.MaxResultBytes", func(t *testing.T) {
		var hdr [][2]string
		for i := 0; i < maxStoredHeaders; i++ {
			hdr = append(hdr, [2]string{"X-Header-Name-" + string(rune('A'+i%26)), string(make([]byte, 0))})
		}
		big := MaxStoredHeaderBytes / maxStoredHeaders
		for i := range hdr {
			v := make([]byte, big-len(hdr[i][0]))
			for j := range v {
				v[j] = 'v'
			}
			hdr[i][1] = string(v)
		}
		b, err := EncodeResponse(Response{Status: 200, Header: hdr, Body: make([]byte, MaxStoredResponseBytes)})
		if err != nil || len(b) > replay.MaxResultBytes {
			t.Fatalf("%d bytes, err %v", len(b), err)
		}
		// Sealed, it grows by the header, nonce and tag, and still fits.
		s, _ := newSealer(testKeys)
		sealed, err := s.seal(StoreID("a", "r", "k"), make([]byte, FingerprintSize), Response{Status: 200, Header: hdr, Body: make([]byte, MaxStoredResponseBytes)})
		if err != nil || len(sealed) != len(b)+sealOverhead || len(sealed) > replay.MaxResultBytes {
			t.Fatalf("sealed: %d bytes (encoded %d), err %v", len(sealed), len(b), err)
		}
	})
}

func canonical(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return out
}
