package ctoken

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// testPurpose is the purpose of newOneTime's issuers unless a test sets one.
const testPurpose = "agent-bootstrap"

var runClaims = map[string]string{"agent": "agt_42", "company": "co_7", "run": "run_2026_0001"}

func newOneTime(t testing.TB, cfg OneTimeConfig) *OneTimeIssuer {
	t.Helper()
	if cfg.Keys == nil {
		kr, err := NewKeyring(RandomKey())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Keys = kr
	}
	if cfg.Purpose == "" {
		cfg.Purpose = testPurpose
	}
	o, err := NewOneTimeIssuer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mint(t testing.TB, o *OneTimeIssuer, claims map[string]string) string {
	t.Helper()
	tok, err := o.Mint(claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestOneTimeToken pins a one-time token's life: mint, verify, redeem once.
func TestOneTimeToken(t *testing.T) {
	t.Run("redeems once then reports redeemed", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		tok := mint(t, o, runClaims)
		if _, err := o.Redeem(context.Background(), tok, runClaims); err != nil {
			t.Fatalf("first redeem: %v", err)
		}
		_, err := o.Redeem(context.Background(), tok, runClaims)
		if !errors.Is(err, ErrOneTimeRedeemed) || reasonText(err) != "already redeemed" {
			t.Fatalf("second redeem = %v, want ErrOneTimeRedeemed", err)
		}
		// Another token with the same claims is independent.
		if _, err := o.Redeem(context.Background(), mint(t, o, runClaims), runClaims); err != nil {
			t.Fatalf("second token: %v", err)
		}
	})

	t.Run("without claims", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		tok := mint(t, o, nil)
		if _, err := o.Redeem(context.Background(), tok, map[string]string{"run": "x"}); !errors.Is(err, ErrOneTimeClaims) {
			t.Fatalf("redeem with extra expected claim = %v, want ErrOneTimeClaims", err)
		}
		if _, err := o.Redeem(context.Background(), tok, map[string]string{}); err != nil {
			t.Fatalf("redeem with empty claims: %v", err)
		}
	})

	t.Run("expires after default TTL", func(t *testing.T) {
		clk := newStepClock()
		o := newOneTime(t, OneTimeConfig{Now: clk.Now})
		tok := mint(t, o, runClaims)
		clk.Advance(defaultOneTimeTTL)
		_, err := o.Redeem(context.Background(), tok, runClaims)
		if !errors.Is(err, ErrOneTimeExpired) {
			t.Fatalf("redeem at expiry = %v, want ErrOneTimeExpired", err)
		}
	})

	t.Run("redeemable just before expiry", func(t *testing.T) {
		clk := newStepClock()
		o := newOneTime(t, OneTimeConfig{Now: clk.Now, TTL: time.Minute})
		tok := mint(t, o, runClaims)
		clk.Advance(time.Minute - time.Second)
		if _, err := o.Redeem(context.Background(), tok, runClaims); err != nil {
			t.Fatalf("redeem a second before expiry: %v", err)
		}
	})

	t.Run("refused for other claims without being consumed", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		tok := mint(t, o, runClaims)
		for _, want := range []map[string]string{
			{"agent": "agt_42", "company": "co_7", "run": "run_2026_0002"},          // other run
			{"agent": "agt_42", "company": "co_7"},                                  // fewer claims
			{"agent": "agt_42", "company": "co_7", "run": "run_2026_0001", "x": ""}, // more claims
			{"agent": "agt_42", "company": "co_7", "Run": "run_2026_0001"},          // other name
			nil,
		} {
			_, err := o.Redeem(context.Background(), tok, want)
			if !errors.Is(err, ErrOneTimeClaims) || reasonText(err) != "claims mismatch" {
				t.Fatalf("redeem against %v = %v, want ErrOneTimeClaims", want, err)
			}
		}
		if _, err := o.Redeem(context.Background(), tok, runClaims); err != nil {
			t.Fatalf("token consumed by mismatched redeems: %v", err)
		}
	})

	t.Run("rejects forgeries", func(t *testing.T) {
		clk := newStepClock()
		o := newOneTime(t, OneTimeConfig{Now: clk.Now})
		other := newOneTime(t, OneTimeConfig{Now: clk.Now})
		tok := mint(t, o, runClaims)
		raw, err := base64.RawURLEncoding.DecodeString(tok[len(oneTimePrefix):])
		if err != nil {
			t.Fatal(err)
		}
		reencode := func(edit func([]byte) []byte) string {
			b := edit(append([]byte(nil), raw...))
			return oneTimePrefix + base64.RawURLEncoding.EncodeToString(b)
		}
		flip := func(i int) string {
			return reencode(func(b []byte) []byte { b[i] ^= 1; return b })
		}
		tests := []struct {
			name, token, reason string
		}{
			{"empty", "", "unknown format"},
			{"other key", mint(t, other, runClaims), "signed by a key not in the ring: retired or foreign"},
			{"other key under our key id", withKeyID(mint(t, other, runClaims), o.keys.ids[0]), "mac mismatch"},
			{"flipped version", flip(0), "unknown format"},
			{"flipped key id", flip(oneTimeKeyIDAt), "signed by a key not in the ring: retired or foreign"},
			{"flipped last byte of the key id", flip(oneTimeNonceAt - 1), "signed by a key not in the ring: retired or foreign"},
			{"flipped nonce", flip(oneTimeNonceAt), "mac mismatch"},
			{"flipped expiry", flip(oneTimeFixedLen - 1), "mac mismatch"},
			{"flipped claim", flip(oneTimeFixedLen + 2), "mac mismatch"},
			{"flipped mac", flip(len(raw) - 1), "mac mismatch"},
			{"truncated mac", reencode(func(b []byte) []byte { return b[:len(b)-1] }), "mac mismatch"},
			{"truncated to nothing", oneTimePrefix, "truncated"},
			{"truncated below fixed size", reencode(func(b []byte) []byte { return b[:oneTimeFixedLen] }), "truncated"},
			{"trailing byte", reencode(func(b []byte) []byte { return append(b, 0) }), "mac mismatch"},
			{"wrong prefix", "ot2." + tok[len(oneTimePrefix):], "unknown format"},
			{"no prefix", tok[len(oneTimePrefix):], "unknown format"},
			{"padded base64", tok + "=", "bad base64"},
			{"standard base64", oneTimePrefix + base64.RawStdEncoding.EncodeToString(append(raw, 0xfb, 0xff)), "bad base64"},
			{"oversize", oneTimePrefix + strings.Repeat("A", MaxOneTimeTokenBytes), "oversize"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := o.Redeem(context.Background(), tc.token, runClaims)
				if !errors.Is(err, ErrOneTimeInvalid) || reasonText(err) != tc.reason {
					t.Fatalf("err = %v (reason %q), want ErrOneTimeInvalid (%q)", err, reasonText(err), tc.reason)
				}
				if strings.Contains(err.Error(), tok) {
					t.Fatal("error text echoes the token")
				}
			})
		}
		if _, err := o.Redeem(context.Background(), tok, runClaims); err != nil {
			t.Fatalf("genuine token after forgeries: %v", err)
		}
	})

	t.Run("rejects authentic but malformed payloads", func(t *testing.T) {
		clk := newStepClock()
		o := newOneTime(t, OneTimeConfig{Now: clk.Now})
		now, later := clk.Now(), clk.Now().Add(time.Minute)
		tests := []struct {
			name    string
			payload []byte
			reason  string
		}{
			// Versions are refused before the MAC, even signed ones.
			{"version 1 (no purpose)", func() []byte { p := oneTimePayload(now, later); p[0] = 1; return p }(), "unknown format"},
			{"version 2 (no key id)", func() []byte { p := oneTimePayload(now, later); p[0] = 2; return p }(), "unknown format"},
			{"unknown version", func() []byte { p := oneTimePayload(now, later); p[0] = 4; return p }(), "unknown format"},
			{"no purpose field", oneTimePayload(now, later)[:oneTimeFixedLen], "malformed payload"},
			{"purpose length past end", append(oneTimePayload(now, later)[:oneTimeFixedLen], 20, 'a'), "malformed payload"},
			{"claim name length past end", append(oneTimePayload(now, later, "a", "1"), 0x7f, 'b'), "malformed payload"},
			{"value length past end", append(oneTimePayload(now, later, "a"), 0x10, 'v'), "malformed payload"},
			{"other purpose", oneTimePayloadFor("password-reset", now, later), "other purpose"},
			{"empty purpose", oneTimePayloadFor("", now, later), "other purpose"},
			{"unsorted claims", oneTimePayload(now, later, "b", "1", "a", "2"), "malformed payload"},
			{"duplicate claim", oneTimePayload(now, later, "a", "1", "a", "1"), "malformed payload"},
			{"name without value", oneTimePayload(now, later, "a"), "malformed payload"},
			{"length past end", append(oneTimePayload(now, later), 5, 'a'), "malformed payload"},
			{"non-minimal length", append(oneTimePayload(now, later), 0x81, 0x00, 'a', 0), "malformed payload"},
			{"issued in the future", oneTimePayload(now.Add(2*time.Minute), now.Add(5*time.Minute)), "issued in the future"},
			// time.Unix wraps these around to the far past.
			{"issued past time.Unix's range", oneTimePayload(time.Unix(math.MaxInt64, 0), later), "issued in the future"},
			{"issued at the top bit", oneTimePayload(time.Unix(math.MaxInt64-62135596800+1, 0), later), "issued in the future"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := o.Redeem(context.Background(), signOneTime(o, tc.payload), nil)
				if !errors.Is(err, ErrOneTimeInvalid) || reasonText(err) != tc.reason {
					t.Fatalf("err = %v (reason %q), want ErrOneTimeInvalid (%q)", err, reasonText(err), tc.reason)
				}
			})
		}
		// The hand-built encoding is the one Mint uses.
		if _, err := o.Redeem(context.Background(), signOneTime(o, oneTimePayload(now, later, "a", "1", "b", "")), map[string]string{"a": "1", "b": ""}); err != nil {
			t.Fatalf("well-formed hand-built token: %v", err)
		}
	})

	t.Run("verifies with previous key after rotation", func(t *testing.T) {
		oldKey, newKey := RandomKey(), RandomKey()
		oldRing, _ := NewKeyring(oldKey)
		rotated, _ := NewKeyring(newKey, oldKey)
		store := replay.NewMemoryStore(0)
		before := newOneTime(t, OneTimeConfig{Keys: oldRing, Replay: store})
		after := newOneTime(t, OneTimeConfig{Keys: rotated, Replay: store})
		tok := mint(t, before, runClaims)
		if _, err := after.Redeem(context.Background(), tok, runClaims); err != nil {
			t.Fatalf("redeem after rotation: %v", err)
		}
		// The shared store still enforces single use across both issuers.
		if _, err := before.Redeem(context.Background(), tok, runClaims); !errors.Is(err, ErrOneTimeRedeemed) {
			t.Fatalf("redeem on the other instance = %v, want ErrOneTimeRedeemed", err)
		}
	})

	t.Run("subkey is separate from other uses", func(t *testing.T) {
		key := RandomKey()
		kr, _ := NewKeyring(key)
		o := newOneTime(t, OneTimeConfig{Keys: kr})
		tok := mint(t, o, runClaims)
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, oneTimePrefix))
		if err != nil {
			t.Fatal(err)
		}
		payload, tag := raw[:len(raw)-32], raw[len(raw)-32:]
		mac := func(k []byte) []byte {
			m := hmac.New(sha256.New, k)
			m.Write(payload)
			return m.Sum(nil)
		}
		if !hmac.Equal(tag, mac(subkey(key, "ctoken.onetime hmac key"))) {
			t.Fatal("one-time subkey is not HKDF(key, \"ctoken.onetime hmac key\")")
		}
		if hmac.Equal(tag, mac(key)) {
			t.Fatal("one-time tokens use the raw key")
		}
	})

	// Issue 21 gap 7: another instance's clock may run up to 60 s ahead.
	t.Run("issued within clock skew is accepted", func(t *testing.T) {
		clk := newStepClock()
		kr := mustKeyring(t, RandomKey())
		here := newOneTime(t, OneTimeConfig{Keys: kr, Now: clk.Now})
		for _, tc := range []struct {
			ahead  time.Duration
			reason string // "" = accepted
		}{
			{30 * time.Second, ""},
			{60 * time.Second, ""},
			{61 * time.Second, "issued in the future"},
		} {
			ahead := newOneTime(t, OneTimeConfig{Keys: kr, Now: func() time.Time { return clk.Now().Add(tc.ahead) }})
			_, err := here.Redeem(context.Background(), mint(t, ahead, runClaims), runClaims)
			if tc.reason == "" && err != nil {
				t.Fatalf("token from a clock %v ahead refused: %v", tc.ahead, err)
			}
			if tc.reason != "" && (!errors.Is(err, ErrOneTimeInvalid) || reasonText(err) != tc.reason) {
				t.Fatalf("token from a clock %v ahead = %v, want ErrOneTimeInvalid (%s)", tc.ahead, err, tc.reason)
			}
		}
	})

	// Issue 21 gap 5: the cap is inclusive, at mint and at redeem.
	t.Run("at exactly max bytes is accepted and one more refused", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		var atCap string
		n := 0
		for ; n < MaxOneTimeTokenBytes; n++ {
			tok, err := o.Mint(map[string]string{"v": strings.Repeat("x", n)})
			if err != nil {
				break
			}
			atCap = tok
		}
		if len(atCap) != MaxOneTimeTokenBytes {
			t.Fatalf("largest token is %d bytes, want exactly %d", len(atCap), MaxOneTimeTokenBytes)
		}
		if _, err := o.Mint(map[string]string{"v": strings.Repeat("x", n)}); !errors.Is(err, ErrOneTimeTooLarge) {
			t.Fatalf("Mint one byte over = %v, want ErrOneTimeTooLarge", err)
		}
		if _, err := o.Redeem(context.Background(), atCap, map[string]string{"v": strings.Repeat("x", n-1)}); err != nil {
			t.Fatalf("token of exactly %d bytes refused: %v", MaxOneTimeTokenBytes, err)
		}
		over := atCap + "A"
		if _, err := o.Redeem(context.Background(), over, nil); !errors.Is(err, ErrOneTimeInvalid) || reasonText(err) != "oversize" {
			t.Fatalf("%d-byte token = %v (reason %q), want oversize", len(over), err, reasonText(err))
		}
		// At exactly the cap the length check passes and decoding decides.
		if _, err := o.Redeem(context.Background(), atCap[:len(atCap)-1]+"A", nil); reasonText(err) == "oversize" {
			t.Fatal("a token of exactly the cap was refused as oversize")
		}
	})
}

// signOneTime builds a token with o's primary key from an arbitrary payload,
// to test the decoder behind the MAC: it writes the primary's key id into
// the payload (when there is room for one) and signs.
func signOneTime(o *OneTimeIssuer, payload []byte) string {
	p := append([]byte(nil), payload...)
	if len(p) >= oneTimeNonceAt {
		copy(p[oneTimeKeyIDAt:], o.keys.ids[0][:])
	}
	raw := o.keys.macs[0].Sum(p, p)
	return oneTimePrefix + base64.RawURLEncoding.EncodeToString(raw)
}

// withKeyID returns token with its key id replaced by id (and its MAC
// left as it was).
func withKeyID(token string, id keyID) string {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, oneTimePrefix))
	if err != nil || len(raw) < oneTimeNonceAt {
		panic("withKeyID: not a one-time token")
	}
	copy(raw[oneTimeKeyIDAt:], id[:])
	return oneTimePrefix + base64.RawURLEncoding.EncodeToString(raw)
}

// oneTimePayload builds a payload for testPurpose by hand: the wire layout
// written out independently of Mint.
func oneTimePayload(issued, expires time.Time, claims ...string) []byte {
	return oneTimePayloadFor(testPurpose, issued, expires, claims...)
}

func oneTimePayloadFor(purpose string, issued, expires time.Time, claims ...string) []byte {
	p := make([]byte, oneTimeFixedLen)
	p[0] = oneTimeVersion
	// p[1:5], the key id, is written by signOneTime.
	binary.BigEndian.PutUint64(p[oneTimeTimesAt:], uint64(issued.Unix()))
	binary.BigEndian.PutUint64(p[oneTimeTimesAt+8:], uint64(expires.Unix()))
	p = binary.AppendUvarint(p, uint64(len(purpose)))
	p = append(p, purpose...)
	for _, c := range claims {
		p = binary.AppendUvarint(p, uint64(len(c)))
		p = append(p, c...)
	}
	return p
}

func TestOneTimeMint(t *testing.T) {
	t.Run("refuses oversize claims", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		for _, claims := range []map[string]string{
			{"run": strings.Repeat("x", MaxOneTimeTokenBytes)},
			{"a": strings.Repeat("x", 700)},
		} {
			if _, err := o.Mint(claims); !errors.Is(err, ErrOneTimeTooLarge) || reasonText(err) == "" {
				t.Fatalf("Mint = %v, want ErrOneTimeTooLarge with a reason", err)
			}
		}
		tok := mint(t, o, map[string]string{"a": strings.Repeat("x", 600)})
		if len(tok) > MaxOneTimeTokenBytes {
			t.Fatalf("token of %d bytes", len(tok))
		}
	})

	// Kills onetime.go `len(payload)+len(name)+len(value) > MaxOneTimeTokenBytes`
	// with either `+` made `-`: Mint refuses a claim that cannot fit before
	// copying it into the payload, so an oversize name or value costs no memory
	// in proportion to its size.
	t.Run("refuses oversize claim without copying it", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		huge := strings.Repeat("x", 1<<20)
		for name, claims := range map[string]map[string]string{
			"huge name":  {huge: ""},
			"huge value": {"run": huge},
		} {
			t.Run(name, func(t *testing.T) {
				var err error
				got := bytesPerRun(20, func() { _, err = o.Mint(claims) })
				wantErr(t, err, ErrOneTimeTooLarge)
				if got > 64<<10 {
					t.Fatalf("refusing a 1 MiB claim allocated %d bytes", got)
				}
			})
		}
	})
}

func TestOneTimeRedeem(t *testing.T) {
	t.Run("fails closed on store error", func(t *testing.T) {
		clk := newStepClock()
		full := &replay.MemoryStore{Max: 1, Now: clk.Now}
		o := newOneTime(t, OneTimeConfig{Replay: full, Now: clk.Now})
		if _, err := o.Redeem(context.Background(), mint(t, o, nil), nil); err != nil {
			t.Fatal(err)
		}
		clk.Advance(defaultOneTimeTTL / 2)
		tok := mint(t, o, nil)
		_, err := o.Redeem(context.Background(), tok, nil)
		if !errors.Is(err, replay.ErrFull) || errors.Is(err, ErrOneTimeRedeemed) || reasonText(err) != "replay store failed" {
			t.Fatalf("redeem on a full store = %v (reason %q), want replay.ErrFull, reason \"replay store failed\"", err, reasonText(err))
		}
		// Once the first token's entry expires (the skew margin after the
		// token) the store has room again, and tok still works: a store failure
		// does not consume it.
		clk.Advance(defaultOneTimeTTL/2 + replay.SkewMargin)
		if _, err := o.Redeem(context.Background(), tok, nil); err != nil {
			t.Fatalf("redeem after the store recovered: %v", err)
		}
	})

	t.Run("honours cancelled context", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		tok := mint(t, o, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := o.Redeem(ctx, tok, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("redeem with a cancelled context = %v, want context.Canceled", err)
		}
		if _, err := o.Redeem(context.Background(), tok, nil); err != nil {
			t.Fatalf("token consumed by the cancelled redeem: %v", err)
		}
	})

	t.Run("returns verified claims", func(t *testing.T) {
		o := newOneTime(t, OneTimeConfig{})
		got, err := o.Redeem(context.Background(), mint(t, o, runClaims), runClaims)
		if err != nil || !maps.Equal(got, runClaims) {
			t.Fatalf("Redeem = %v, %v; want %v", got, err, runClaims)
		}
		got, err = o.Redeem(context.Background(), mint(t, o, nil), nil)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Redeem of a claimless token = %#v, %v; want an empty non-nil map", got, err)
		}
	})

	// Kills onetime.go `if o.obs != nil { start = time.Now() }` negated: the
	// StoreLatency an observer is told on Redeem is how long the replay store
	// took (at least its delay, far less than a minute), not the time since
	// the zero time.
	t.Run("reports the store's latency", func(t *testing.T) {
		const delay = 2 * time.Millisecond
		var events []observe.Event
		o := newOneTime(t, OneTimeConfig{
			Replay:   slowStore{delay: delay, inner: &replay.MemoryStore{}},
			Observer: observe.ObserverFunc(func(e observe.Event) { events = append(events, e) }),
		})
		tok := mint(t, o, nil)
		if _, err := o.Redeem(context.Background(), tok, nil); err != nil {
			t.Fatal(err)
		}
		_, err := o.Redeem(context.Background(), tok, nil)
		wantErr(t, err, ErrOneTimeRedeemed)
		checkStoreLatencies(t, events, delay, 2)
	})
}

func TestNewOneTimeIssuer(t *testing.T) {
	t.Run("needs keys", func(t *testing.T) {
		if _, err := NewOneTimeIssuer(OneTimeConfig{}); !errors.Is(err, ErrNoKey) {
			t.Fatalf("NewOneTimeIssuer without keys = %v, want ErrNoKey", err)
		}
	})

	// Checks that a config with several faults is refused with one error
	// naming each, matching each fault's sentinel.
	t.Run("names every fault at once", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			cfg   OneTimeConfig
			names []string
		}{
			{"all zero", OneTimeConfig{}, []string{"2 configuration faults", "OneTimeConfig.Keys is nil or empty (set Keys", "OneTimeConfig.Purpose is empty"}},
			{"every field wrong", OneTimeConfig{Keys: &Keyring{}, Purpose: "a\n", TTL: -1}, []string{"3 configuration faults", "OneTimeConfig.Keys", "OneTimeConfig.Purpose", "OneTimeConfig.TTL is negative"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o, err := NewOneTimeIssuer(tc.cfg)
				wantErr(t, err, ErrNoKey)
				wantErr(t, err, ErrConfig)
				if o != nil {
					t.Fatal("issuer returned with the error")
				}
				for _, name := range tc.names {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("error %q does not name %q", err, name)
					}
				}
			})
		}
	})

	t.Run("refuses invalid config", func(t *testing.T) {
		kr := mustKeyring(t, RandomKey())
		for _, tc := range []struct {
			name string
			cfg  OneTimeConfig
			want error
		}{
			{"nil keys", OneTimeConfig{Purpose: "p"}, ErrNoKey},
			{"zero keyring", OneTimeConfig{Keys: &Keyring{}, Purpose: "p"}, ErrNoKey},
			{"empty purpose", OneTimeConfig{Keys: kr}, ErrConfig},
			{"purpose over the cap", OneTimeConfig{Keys: kr, Purpose: strings.Repeat("p", MaxOneTimePurposeBytes+1)}, ErrConfig},
			{"purpose not UTF-8", OneTimeConfig{Keys: kr, Purpose: "reset\xff"}, ErrConfig},
			{"purpose with a control character", OneTimeConfig{Keys: kr, Purpose: "reset\n"}, ErrConfig},
			{"purpose with DEL", OneTimeConfig{Keys: kr, Purpose: "reset\x7f"}, ErrConfig},
			{"purpose with a bidi override", OneTimeConfig{Keys: kr, Purpose: "reset\u202e"}, ErrConfig},
			{"negative TTL", OneTimeConfig{Keys: kr, Purpose: "p", TTL: -time.Second}, ErrConfig},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o, err := NewOneTimeIssuer(tc.cfg)
				if !errors.Is(err, tc.want) || o != nil || reasonText(err) == "" {
					t.Fatalf("NewOneTimeIssuer = %v, %v; want %v with a reason", o, err, tc.want)
				}
			})
		}
		for _, p := range []string{"p", strings.Repeat("p", MaxOneTimePurposeBytes), "réinitialisation du mot de passe"} {
			if _, err := NewOneTimeIssuer(OneTimeConfig{Keys: kr, Purpose: p}); err != nil {
				t.Fatalf("purpose %q refused: %v", p, err)
			}
		}
	})
}

func TestOneTimeConcurrentRedeemsExactlyOneSucceeds(t *testing.T) {
	o := newOneTime(t, OneTimeConfig{})
	const workers = 64
	for round := range 10 {
		tok := mint(t, o, runClaims)
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			exactlyOnce(t, workers, func() error { _, err := o.Redeem(context.Background(), tok, runClaims); return err }, ErrOneTimeRedeemed)
		})
	}
}

// FuzzOneTimeRedeem feeds arbitrary tokens to Redeem: it must never panic,
// must refuse every token it did not mint with ErrOneTimeInvalid, and must
// return a log-safe reason.
func FuzzOneTimeRedeem(f *testing.F) {
	o := newOneTime(f, OneTimeConfig{})
	f.Add(mint(f, o, runClaims))
	f.Add(mint(f, o, nil))
	f.Add("ot1.")
	f.Add("ot1.AAAA")
	f.Add(withKeyID(mint(f, o, nil), keyID{0xde, 0xad, 0xbe, 0xef})) // unknown key id
	f.Add(mint(f, newOneTime(f, OneTimeConfig{}), runClaims))        // another ring's key
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		_, err := o.Redeem(context.Background(), tok, runClaims)
		if err == nil || errors.Is(err, ErrOneTimeRedeemed) || errors.Is(err, ErrOneTimeClaims) {
			return // a seed minted above
		}
		if !errors.Is(err, ErrOneTimeInvalid) || reasonText(err) == "" {
			t.Fatalf("Redeem(%q) = %v", tok, err)
		}
	})
}

// FuzzDecodeOneTimePayload fuzzes the decoder behind the MAC: it must never
// panic, and whatever it accepts must re-encode to the same bytes (the
// encoding is canonical).
func FuzzDecodeOneTimePayload(f *testing.F) {
	now := time.Unix(1_700_000_000, 0)
	f.Add(oneTimePayload(now, now.Add(time.Minute), "agent", "a", "run", "r"))
	f.Add(oneTimePayload(now, now))
	f.Add([]byte{1})
	f.Add(append(oneTimePayload(now, now), 0x81, 0x00))
	f.Fuzz(func(t *testing.T, p []byte) {
		var tok oneTimeFields
		if !decodeOneTimePayload(&tok, p) {
			return
		}
		// Rebuild in sorted order as Mint does.
		re := append([]byte(nil), p[:oneTimeFixedLen]...)
		re = binary.AppendUvarint(re, uint64(len(tok.purpose)))
		re = append(re, tok.purpose...)
		for _, n := range slices.Sorted(maps.Keys(tok.claims)) {
			re = binary.AppendUvarint(re, uint64(len(n)))
			re = append(re, n...)
			re = binary.AppendUvarint(re, uint64(len(tok.claims[n])))
			re = append(re, tok.claims[n]...)
		}
		if string(re) != string(p) {
			t.Fatalf("payload %x decoded to %v, which re-encodes to %x", p, tok.claims, re)
		}
	})
}

// aheadStore models a shared store (Redis) whose clock runs ahead of the
// issuer's and that, like Redis's SET NX PXAT, answers "first" to a claim
// whose expiry is already past by its own clock, recording nothing.
type aheadStore struct {
	clk   *stepClock
	ahead time.Duration
	s     *replay.MemoryStore
}

func (a *aheadStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	if !until.After(a.clk.Now().Add(a.ahead)) {
		return true, nil
	}
	return a.s.Claim(ctx, id, until)
}

// A token stays unexpired on an instance whose clock is behind the store's
// for as long as the skew; its claim must outlive that window, else a
// redeemed token is redeemable again just before it expires.
func TestOneTimeRedeemedTokenStaysRedeemedUnderClockSkew(t *testing.T) {
	clk := newStepClock()
	const skew = 30 * time.Second
	store := &aheadStore{clk: clk, ahead: skew}
	store.s = &replay.MemoryStore{Now: func() time.Time { return clk.Now().Add(skew) }}
	o := newOneTime(t, OneTimeConfig{Now: clk.Now, TTL: time.Minute, Replay: store})
	tok := mint(t, o, runClaims)
	if _, err := o.Redeem(context.Background(), tok, runClaims); err != nil {
		t.Fatalf("first redeem: %v", err)
	}
	clk.Advance(time.Minute - time.Second) // still unexpired for the issuer
	if _, err := o.Redeem(context.Background(), tok, runClaims); !errors.Is(err, ErrOneTimeRedeemed) {
		t.Fatalf("second redeem just before expiry, store clock %v ahead = %v, want ErrOneTimeRedeemed", skew, err)
	}
}

// A zero OneTimeIssuer (not from NewOneTimeIssuer) has no key: it refuses to
// mint or redeem instead of panicking.
func TestZeroOneTimeIssuerRefusesWithoutPanic(t *testing.T) {
	var zero OneTimeIssuer
	if tok, err := zero.Mint(runClaims); !errors.Is(err, ErrNoKey) || tok != "" {
		t.Fatalf("Mint on a zero issuer = %q, %v; want ErrNoKey", tok, err)
	}
	tok := mint(t, newOneTime(t, OneTimeConfig{}), runClaims)
	for _, bad := range []string{tok, "", "ot1.AAAA"} {
		if got, err := zero.Redeem(context.Background(), bad, runClaims); !errors.Is(err, ErrNoKey) || got != nil || reasonText(err) == "" {
			t.Fatalf("Redeem on a zero issuer = %v, %v; want ErrNoKey with a reason", got, err)
		}
		if got, err := zero.Verify(bad); !errors.Is(err, ErrNoKey) || got.Claims != nil {
			t.Fatalf("Verify on a zero issuer = %v, %v; want ErrNoKey", got, err)
		}
	}
}

// Two issuers on one Keyring and one store (the documented pattern) never
// accept each other's tokens, and a refusal for the purpose does not burn
// the token.
func TestOneTimeIssuersOfDifferentPurposesRefuseEachOthersTokens(t *testing.T) {
	kr := mustKeyring(t, RandomKey())
	store := replay.NewMemoryStore(0)
	reset := newOneTime(t, OneTimeConfig{Keys: kr, Replay: store, Purpose: "password-reset"})
	admin := newOneTime(t, OneTimeConfig{Keys: kr, Replay: store, Purpose: "admin-bootstrap"})
	claims := map[string]string{"user": "u_1"}
	for _, pair := range [][2]*OneTimeIssuer{{reset, admin}, {admin, reset}} {
		minter, other := pair[0], pair[1]
		tok := mint(t, minter, claims)
		got, err := other.Redeem(context.Background(), tok, claims)
		if !errors.Is(err, ErrOneTimeInvalid) || reasonText(err) != "other purpose" || got != nil {
			t.Fatalf("%s redeemed a %s token: %v, %v", other.Purpose(), minter.Purpose(), got, err)
		}
		if _, err := other.Verify(tok); !errors.Is(err, ErrOneTimeInvalid) {
			t.Fatalf("%s verified a %s token: %v", other.Purpose(), minter.Purpose(), err)
		}
		if _, err := minter.Redeem(context.Background(), tok, claims); err != nil {
			t.Fatalf("token burnt by the other purpose's refusal: %v", err)
		}
	}
}

func TestOneTimeVerifyReadsClaimsWithoutConsuming(t *testing.T) {
	clk := newStepClock()
	o := newOneTime(t, OneTimeConfig{Now: clk.Now, TTL: time.Minute})
	tok := mint(t, o, runClaims)
	v, err := o.Verify(tok)
	if err != nil || !maps.Equal(v.Claims, runClaims) || v.Purpose != testPurpose ||
		!v.IssuedAt.Equal(clk.Now()) || !v.ExpiresAt.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
	if _, err := o.Redeem(context.Background(), tok, v.Claims); err != nil {
		t.Fatalf("redeem after Verify: %v", err)
	}
	clk.Advance(time.Minute)
	if v, err := o.Verify(tok); !errors.Is(err, ErrOneTimeExpired) || v.Claims != nil {
		t.Fatalf("Verify after expiry = %+v, %v; want ErrOneTimeExpired and nothing", v, err)
	}
}

// Verify allocates only what it returns: one string every claim name and
// value share, and the claims map. A token longer than the stack buffer
// verifies alike, and what one Verify returned is intact after the next.
func TestOneTimeVerifyAllocatesOnlyWhatItReturns(t *testing.T) {
	o := newOneTime(t, OneTimeConfig{Now: newStepClock().Now})
	long := map[string]string{"scope": strings.Repeat("s", 2*oneTimeStackBytes), "run": "run_1"}
	for _, tt := range []struct {
		name   string
		claims map[string]string
	}{{"usual size", runClaims}, {"past the stack buffer", long}, {"no claims", nil}} {
		t.Run(tt.name, func(t *testing.T) {
			tok := mint(t, o, tt.claims)
			v, err := o.Verify(tok)
			if err != nil || len(v.Claims) != len(tt.claims) || (len(tt.claims) > 0 && !maps.Equal(v.Claims, tt.claims)) {
				t.Fatalf("Verify = %+v, %v; want the claims %v", v, err, tt.claims)
			}
			if _, err := o.Verify(mint(t, o, map[string]string{"other": strings.Repeat("x", 100)})); err != nil {
				t.Fatal(err)
			}
			if len(tt.claims) > 0 && !maps.Equal(v.Claims, tt.claims) {
				t.Fatalf("claims changed by the next Verify: %v", v.Claims)
			}
			if raceEnabled || tt.name != "usual size" {
				return
			}
			if n := testing.AllocsPerRun(100, func() { _, _ = o.Verify(tok) }); n > 3 {
				t.Errorf("Verify allocates %v times; want at most 3 (the claims' text, the map and its group)", n)
			}
		})
	}
}

// Issue 21 gap 11: the empty claim name is a name like any other.
func TestOneTimeClaimNamedEmptySurvivesMintRedeem(t *testing.T) {
	o := newOneTime(t, OneTimeConfig{})
	claims := map[string]string{"": "anonymous", "run": ""}
	tok := mint(t, o, claims)
	if _, err := o.Redeem(context.Background(), tok, map[string]string{"run": ""}); !errors.Is(err, ErrOneTimeClaims) {
		t.Fatalf("redeem without the empty-named claim = %v, want ErrOneTimeClaims", err)
	}
	got, err := o.Redeem(context.Background(), tok, claims)
	if err != nil || !maps.Equal(got, claims) {
		t.Fatalf("Redeem = %v, %v; want %v", got, err, claims)
	}
}

// slowStore is a replay.Store that takes at least delay per Claim and then
// answers like inner.
type slowStore struct {
	delay time.Duration
	inner replay.Store
}

func (s slowStore) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	time.Sleep(s.delay)
	return s.inner.Claim(ctx, id, until)
}

// checkStoreLatencies checks that events holds want events other than
// observe.OutcomeIssued, each with a StoreLatency of at least delay and at most a
// minute.
func checkStoreLatencies(t *testing.T, events []observe.Event, delay time.Duration, want int) {
	t.Helper()
	var n int
	for _, e := range events {
		if e.Outcome == observe.OutcomeIssued {
			continue
		}
		n++
		if e.StoreLatency < delay || e.StoreLatency > time.Minute {
			t.Fatalf("%v: StoreLatency = %v, want between %v and a minute", e.Outcome, e.StoreLatency, delay)
		}
	}
	if n != want {
		t.Fatalf("%d events after the issue, want %d", n, want)
	}
}

// Kills onetime.go `n > uint64(len(b)-k)` with `-` made `+` in
// cutLengthPrefixed: an authentic payload whose purpose, claim name or
// claim value length runs exactly one byte past the end is malformed, and
// refusing it neither panics nor reads past the payload (into the MAC).
func TestOneTimeRefusesALengthOneBytePastTheEnd(t *testing.T) {
	clk := newStepClock()
	o := newOneTime(t, OneTimeConfig{Now: clk.Now})
	now, later := clk.Now(), clk.Now().Add(time.Minute)
	fixed := oneTimePayload(now, later)[:oneTimeFixedLen]
	purpose := append(append(append([]byte(nil), fixed...), byte(len(testPurpose)+1)), testPurpose...)
	for name, payload := range map[string][]byte{
		"purpose":     purpose,
		"claim name":  append(oneTimePayload(now, later), 2, 'n'),
		"claim value": append(oneTimePayload(now, later, "a"), 2, 'v'),
		"long value":  append(oneTimePayload(now, later, "a"), 5, 'v', 'v', 'v', 'v'),
	} {
		t.Run(name, func(t *testing.T) {
			tok := signOneTime(o, payload)
			v, err := o.Verify(tok)
			wantErr(t, err, ErrOneTimeInvalid)
			if reasonText(err) != "malformed payload" {
				t.Fatalf("Reason = %q, want %q", reasonText(err), "malformed payload")
			}
			if v.Claims != nil || v.Purpose != "" {
				t.Fatalf("Verify returned content with the error: %+v", v)
			}
			claims, err := o.Redeem(context.Background(), tok, nil)
			wantErr(t, err, ErrOneTimeInvalid)
			if claims != nil {
				t.Fatalf("Redeem returned claims with the error: %v", claims)
			}
		})
	}
}

// TestOneTimeKeyID pins the key id every token carries: the id of the key
// that signed it, read before the MAC to pick the one key to try.
func TestOneTimeKeyID(t *testing.T) {
	keyIDOf := func(t *testing.T, tok string) string {
		t.Helper()
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, oneTimePrefix))
		if err != nil || len(raw) < oneTimeNonceAt {
			t.Fatalf("not a one-time token: %v", err)
		}
		return fmt.Sprintf("%x", raw[oneTimeKeyIDAt:oneTimeNonceAt])
	}

	t.Run("is the primary's", func(t *testing.T) {
		kr := mustKeyring(t, fixedKey(1), fixedKey(2))
		o := newOneTime(t, OneTimeConfig{Keys: kr})
		if got, want := keyIDOf(t, mint(t, o, nil)), kr.KeyIDs()[0]; got != want {
			t.Fatalf("key id %s, want the primary's %s", got, want)
		}
	})

	t.Run("names the previous key after a KeySource swap", func(t *testing.T) {
		a, b := fixedKey(1), fixedKey(2)
		src := mustSource(t, mustKeyring(t, a))
		rec := &recorder{}
		o, err := NewOneTimeIssuer(OneTimeConfig{KeySource: src, Purpose: testPurpose, Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		tokA := mint(t, o, runClaims)
		if err := src.Swap(mustKeyring(t, b, a)); err != nil {
			t.Fatal(err)
		}
		tokB := mint(t, o, runClaims)
		if got, want := keyIDOf(t, tokB), src.Keyring().KeyIDs()[0]; got != want {
			t.Fatalf("after the swap the key id is %s, want the new primary's %s", got, want)
		}
		rec.take()
		if _, err := o.Verify(tokA); err != nil {
			t.Fatalf("token of the previous key: %v", err)
		}
		if e := rec.only(t); e.Key != observe.KeyAt(1) {
			t.Fatalf("event key %v, want previous 1", e.Key)
		}
		if err := src.Swap(mustKeyring(t, b)); err != nil {
			t.Fatal(err)
		}
		_, err = o.Redeem(context.Background(), tokA, runClaims)
		if !errors.Is(err, ErrOneTimeInvalid) || reasonText(err) != "signed by a key not in the ring: retired or foreign" {
			t.Fatalf("token of a retired key = %v (reason %q), want unknown key", err, reasonText(err))
		}
		if e := rec.only(t); e.Key != observe.KeyNone {
			t.Fatalf("event key %v, want none", e.Key)
		}
		if _, err := o.Redeem(context.Background(), tokB, runClaims); err != nil {
			t.Fatalf("token of the primary: %v", err)
		}
	})

	t.Run("a refusal for an unknown key consumes nothing", func(t *testing.T) {
		a, b := fixedKey(1), fixedKey(2)
		store := replay.NewMemoryStore(0)
		byA := newOneTime(t, OneTimeConfig{Keys: mustKeyring(t, a), Replay: store})
		onlyB := newOneTime(t, OneTimeConfig{Keys: mustKeyring(t, b), Replay: store})
		tok := mint(t, byA, runClaims)
		if _, err := onlyB.Redeem(context.Background(), tok, runClaims); reasonText(err) != "signed by a key not in the ring: retired or foreign" {
			t.Fatalf("Redeem under a ring without the key = %v", err)
		}
		if _, err := byA.Redeem(context.Background(), tok, runClaims); err != nil {
			t.Fatalf("token consumed by a refusal: %v", err)
		}
	})

	t.Run("a ring whose keys have no ids is refused", func(t *testing.T) {
		// Only NewKeyring makes a ring, and it names every key; a ring
		// built another way (inside the package) cannot sign a token
		// that names its key.
		_, err := NewOneTimeIssuer(OneTimeConfig{Keys: &Keyring{keys: [][]byte{fixedKey(1)}}, Purpose: testPurpose})
		wantErr(t, err, ErrNoKey)
	})

	t.Run("the last key of a ring of ten", func(t *testing.T) {
		keys := make([][]byte, 10)
		for i := range keys {
			keys[i] = fixedKey(byte(i + 1))
		}
		rec := &recorder{}
		o := newOneTime(t, OneTimeConfig{Keys: mustKeyring(t, keys[0], keys[1:]...), Observer: rec})
		tok := mint(t, newOneTime(t, OneTimeConfig{Keys: mustKeyring(t, keys[9])}), runClaims)
		rec.take()
		if _, err := o.Redeem(context.Background(), tok, runClaims); err != nil {
			t.Fatalf("token of the last key: %v", err)
		}
		if e := rec.only(t); e.Key != observe.KeyAt(9) {
			t.Fatalf("event key %v, want previous 9", e.Key)
		}
	})
}

// TestOneTimeRefusalsBeforeTheMACNameNoKey pins that a token refused
// before any MAC ran, for its layout or its key id, is reported to the
// observer with no key, whatever the ring holds.
func TestOneTimeRefusalsBeforeTheMACNameNoKey(t *testing.T) {
	clock := newTestClock()
	rec := &recorder{}
	o := newOneTime(t, OneTimeConfig{Keys: mustKeyring(t, fixedKey(1), fixedKey(2)), Now: clock.Now, Observer: rec})
	authentic := signOneTime(o, oneTimePayload(clock.Now(), clock.Now().Add(time.Minute), "run", "r1"))
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(authentic, oneTimePrefix))
	if err != nil {
		t.Fatal(err)
	}
	reencode := func(raw []byte) string { return oneTimePrefix + base64.RawURLEncoding.EncodeToString(raw) }
	for _, tc := range []struct {
		name, token, reason string
	}{
		{"other version byte", reencode(append([]byte{oneTimeVersion - 1}, raw[1:]...)), "unknown format"},
		{"truncated", reencode(raw[:oneTimeFixedLen+macSize-1]), "truncated"},
		{"unknown key id", withKeyID(authentic, keyID{0xde, 0xad, 0xbe, 0xef}), "signed by a key not in the ring: retired or foreign"},
		{"MAC mismatch", reencode(append(append([]byte(nil), raw[:len(raw)-1]...), raw[len(raw)-1]^1)), "mac mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.take()
			tok, err := o.Verify(tc.token)
			wantErr(t, err, ErrOneTimeInvalid)
			if got := reasonText(err); got != tc.reason {
				t.Fatalf("reason %q, want %q", got, tc.reason)
			}
			if tok.Claims != nil || tok.Purpose != "" {
				t.Fatalf("token %+v returned with the error", tok)
			}
			if e := rec.only(t); e.Key != observe.KeyNone || e.Outcome != observe.OutcomeRefused {
				t.Fatalf("event %+v, want a refusal naming no key", e)
			}
		})
	}
	t.Run("the authentic token names the primary key", func(t *testing.T) {
		rec.take()
		if _, err := o.Verify(authentic); err != nil {
			t.Fatal(err)
		}
		if e := rec.only(t); e.Key != observe.KeyPrimary || e.Outcome != observe.OutcomeVerified {
			t.Fatalf("event %+v, want verified by the primary key", e)
		}
	})
}
