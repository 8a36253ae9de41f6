package ctoken

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/stateclaim"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

func singleUseCodec(t testing.TB, mode RequestStateMode, store replay.Store, clk *stepClock, keys *Keyring) *RequestStateCodec {
	t.Helper()
	c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: keys, Mode: mode, Replay: store, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var stateModes = []struct {
	name string
	mode RequestStateMode
}{{"signed", Signed}, {"encrypted", Encrypted}}

// TestStateSingleUse pins RequestStateSecurity.Replay: a single-use state decodes once.
func TestStateSingleUse(t *testing.T) {
	t.Run("decodes once", func(t *testing.T) {
		for _, m := range stateModes {
			t.Run(m.name, func(t *testing.T) {
				clk := newStepClock()
				c := singleUseCodec(t, m.mode, &replay.MemoryStore{Now: clk.Now}, clk, mustKeyring(t, fixedKey(20)))
				wire, err := c.Encode("step-2", "alice", "tool")
				if err != nil {
					t.Fatal(err)
				}
				if s, err := c.DecodeContext(context.Background(), wire, "alice", "tool"); err != nil || s != "step-2" {
					t.Fatalf("first decode = %q, %v", s, err)
				}
				s, err := c.Decode(wire, "alice", "tool")
				if !errors.Is(err, ErrStateReplayed) || s != "" || reasonText(err) != "already used" {
					t.Fatalf("second decode = %q, %v; want ErrStateReplayed", s, err)
				}
				if errors.Is(err, ErrStateInvalid) || errors.Is(err, ErrStateExpired) {
					t.Fatal("ErrStateReplayed also matches another sentinel")
				}
				// A later encoding of the same state is a new, separately usable state.
				clk.Advance(time.Second)
				again, err := c.Encode("step-2", "alice", "tool")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Decode(again, "alice", "tool"); err != nil {
					t.Fatalf("fresh encoding of the same state: %v", err)
				}
			})
		}
	})

	t.Run("identical encodings are one state", func(t *testing.T) {
		// Documented: Signed encoding is deterministic, so the same state, subject
		// and expiry second give one wire string, accepted once; Encrypted
		// encodings are distinct by their random nonce.
		for _, m := range stateModes {
			clk := newStepClock()
			c := singleUseCodec(t, m.mode, &replay.MemoryStore{Now: clk.Now}, clk, mustKeyring(t, fixedKey(20)))
			a, _ := c.Encode("same", "alice", "")
			b, _ := c.Encode("same", "alice", "")
			if _, err := c.Decode(a, "alice", ""); err != nil {
				t.Fatal(err)
			}
			_, err := c.Decode(b, "alice", "")
			if m.mode == Signed && (a != b || !errors.Is(err, ErrStateReplayed)) {
				t.Fatalf("signed: identical encodings differ or both accepted (err %v)", err)
			}
			if m.mode == Encrypted && (a == b || err != nil) {
				t.Fatalf("encrypted: second encoding refused: %v", err)
			}
		}
	})

	t.Run("refusals do not consume", func(t *testing.T) {
		for _, m := range stateModes {
			t.Run(m.name, func(t *testing.T) {
				clk := newStepClock()
				store := &replay.MemoryStore{Now: clk.Now}
				c := singleUseCodec(t, m.mode, store, clk, mustKeyring(t, fixedKey(20)))
				wire, err := c.Encode("s", "alice", "")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Decode(wire, "mallory", ""); !errors.Is(err, ErrStateInvalid) {
					t.Fatalf("decode as another subject = %v, want ErrStateInvalid", err)
				}
				if _, err := c.Decode(wire[:len(wire)-2], "alice", ""); !errors.Is(err, ErrStateInvalid) {
					t.Fatalf("decode of a truncated state = %v, want ErrStateInvalid", err)
				}
				if store.Len() != 0 {
					t.Fatal("a refused state was recorded")
				}
				if _, err := c.Decode(wire, "alice", ""); err != nil {
					t.Fatalf("state consumed by refused decodes: %v", err)
				}
			})
		}
	})

	t.Run("remembered until expiry", func(t *testing.T) {
		clk := newStepClock()
		store := &replay.MemoryStore{Now: clk.Now}
		c := singleUseCodec(t, Signed, store, clk, mustKeyring(t, fixedKey(20)))
		wire, err := c.Encode("s", "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Decode(wire, "alice", ""); err != nil {
			t.Fatal(err)
		}
		// The last instant Decode still accepts the state by its expiry.
		clk.Advance(defaultStateTTL + time.Second - time.Nanosecond)
		if _, err := c.Decode(wire, "alice", ""); !errors.Is(err, ErrStateReplayed) {
			t.Fatalf("replay at the expiry edge = %v, want ErrStateReplayed", err)
		}
		clk.Advance(time.Nanosecond)
		if _, err := c.Decode(wire, "alice", ""); !errors.Is(err, ErrStateExpired) {
			t.Fatalf("replay after expiry = %v, want ErrStateExpired", err)
		}
		// The store lets go of it once the clock-skew margin has passed too.
		clk.Advance(replay.SkewMargin)
		if store.Len() != 0 {
			t.Fatal("expired state still held by the store")
		}
		// An expired state is refused without being recorded.
		old, _ := c.Encode("s", "alice", "")
		clk.Advance(time.Hour)
		if _, err := c.Decode(old, "alice", ""); !errors.Is(err, ErrStateExpired) || store.Len() != 0 {
			t.Fatalf("expired decode = %v, store holds %d", err, store.Len())
		}
	})

	t.Run("fails closed on store error", func(t *testing.T) {
		clk := newStepClock()
		full := &replay.MemoryStore{Max: 1, Now: clk.Now}
		c := singleUseCodec(t, Encrypted, full, clk, mustKeyring(t, fixedKey(20)))
		first, _ := c.Encode("a", "alice", "")
		second, _ := c.Encode("b", "alice", "")
		if _, err := c.Decode(first, "alice", ""); err != nil {
			t.Fatal(err)
		}
		s, err := c.Decode(second, "alice", "")
		if !errors.Is(err, replay.ErrFull) || s != "" || errors.Is(err, ErrStateReplayed) {
			t.Fatalf("decode on a full store = %q, %v; want replay.ErrFull", s, err)
		}
		if reasonText(err) != "replay store failed" || errors.Is(err, ErrStateInvalid) || errors.Is(err, ErrStateExpired) {
			t.Fatalf("store failure %v: reason %q, or matches a state sentinel", err, reasonText(err))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		down := singleUseCodec(t, Signed, failingStore{}, clk, mustKeyring(t, fixedKey(20)))
		wire, _ := down.Encode("c", "alice", "")
		if s, err := down.DecodeContext(ctx, wire, "alice", ""); err == nil || s != "" || reasonText(err) != "replay store failed" {
			t.Fatalf("decode with the store down = %q, %v (reason %q)", s, err, reasonText(err))
		}
		s, err = singleUseCodec(t, Signed, replay.NewMemoryStore(0), clk, mustKeyring(t, fixedKey(20))).DecodeContext(ctx, wire, "alice", "")
		if !errors.Is(err, context.Canceled) || s != "" || reasonText(err) != "replay store failed" {
			t.Fatalf("decode with a cancelled context = %q, %v (reason %q)", s, err, reasonText(err))
		}
		// DecodeJSONContext hands its context to the store.
		v, err := DecodeJSONContext[string](ctx, singleUseCodec(t, Signed, replay.NewMemoryStore(0), clk, mustKeyring(t, fixedKey(20))), wire, "alice", "")
		if !errors.Is(err, context.Canceled) || v != "" || reasonText(err) != "replay store failed" {
			t.Fatalf("DecodeJSONContext with a cancelled context = %q, %v", v, err)
		}
	})

	t.Run("shared across instances and key rotation", func(t *testing.T) {
		clk := newStepClock()
		store := &replay.MemoryStore{Now: clk.Now}
		oldKey, newKey := RandomKey(), RandomKey()
		before, _ := NewKeyring(oldKey)
		after, _ := NewKeyring(newKey, oldKey)
		for _, m := range stateModes {
			a := singleUseCodec(t, m.mode, store, clk, before)
			b := singleUseCodec(t, m.mode, store, clk, after)
			wire, err := a.Encode("s", "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Decode(wire, "alice", ""); err != nil {
				t.Fatalf("%s: decode on the rotated instance: %v", m.name, err)
			}
			if _, err := a.Decode(wire, "alice", ""); !errors.Is(err, ErrStateReplayed) {
				t.Fatalf("%s: decode on the other instance = %v, want ErrStateReplayed", m.name, err)
			}
		}
	})

	t.Run("applies to DecodeJSON", func(t *testing.T) {
		clk := newStepClock()
		c := singleUseCodec(t, Signed, &replay.MemoryStore{Now: clk.Now}, clk, mustKeyring(t, fixedKey(20)))
		wire, err := EncodeJSON(c, map[string]int{"step": 2}, "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		if v, err := DecodeJSON[map[string]int](c, wire, "alice", ""); err != nil || v["step"] != 2 {
			t.Fatalf("first DecodeJSON = %v, %v", v, err)
		}
		if v, err := DecodeJSON[map[string]int](c, wire, "alice", ""); !errors.Is(err, ErrStateReplayed) || v != nil {
			t.Fatalf("second DecodeJSON = %v, %v; want ErrStateReplayed", v, err)
		}
	})

	t.Run("concurrent decode exactly one succeeds", func(t *testing.T) {
		for _, m := range stateModes {
			t.Run(m.name, func(t *testing.T) {
				clk := newStepClock()
				c := singleUseCodec(t, m.mode, &replay.MemoryStore{Now: clk.Now}, clk, mustKeyring(t, fixedKey(20)))
				const workers = 64
				for round := range 5 {
					wire, err := c.Encode(fmt.Sprint("once-", round), "alice", "")
					if err != nil {
						t.Fatal(err)
					}
					exactlyOnce(t, workers, func() error {
						_, err := c.DecodeContext(context.Background(), wire, "alice", "")
						return err
					}, ErrStateReplayed)
				}
			})
		}
	})

	// As for one-time tokens: with the store's clock ahead of the codec's (and
	// Redis answering "first" to a claim already past by its clock), a used
	// state must stay used until the codec itself sees it expire.
	t.Run("stays used under clock skew", func(t *testing.T) {
		for _, m := range stateModes {
			t.Run(m.name, func(t *testing.T) {
				clk := newStepClock()
				const skew = 30 * time.Second
				store := &aheadStore{clk: clk, ahead: skew}
				store.s = &replay.MemoryStore{Now: func() time.Time { return clk.Now().Add(skew) }}
				c := singleUseCodec(t, m.mode, store, clk, mustKeyring(t, fixedKey(20)))
				wire, err := c.Encode("s", "alice", "")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Decode(wire, "alice", ""); err != nil {
					t.Fatalf("first decode: %v", err)
				}
				clk.Advance(defaultStateTTL) // still accepted by its expiry
				if _, err := c.Decode(wire, "alice", ""); !errors.Is(err, ErrStateReplayed) {
					t.Fatalf("replay just before expiry, store clock %v ahead = %v, want ErrStateReplayed", skew, err)
				}
			})
		}
	})

	// Kills state_once.go `if c.obs != nil { start = time.Now() }` negated: in
	// single-use mode the StoreLatency an observer is told on Decode is how long
	// the replay store took, not the time since the zero time.
	t.Run("decode reports the store's latency", func(t *testing.T) {
		const delay = 2 * time.Millisecond
		var events []observe.Event
		c := newTestCodec(t, RequestStateSecurity{
			Keys:     mustKeyring(t, fixedKey(1)),
			Replay:   slowStore{delay: delay, inner: &replay.MemoryStore{}},
			Observer: observe.ObserverFunc(func(e observe.Event) { events = append(events, e) }),
			Binding:  BindSubject,
		})
		w, err := c.Encode("s", "sub", "tool")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Decode(w, "sub", "tool"); err != nil {
			t.Fatal(err)
		}
		_, err = c.Decode(w, "sub", "tool")
		wantErr(t, err, ErrStateReplayed)
		checkStoreLatencies(t, events, delay, 2)
	})

	// Pins the replay store key of a
	// single-use state: "state:s:" or "state:e:" by mode, then the lowercase hex
	// of the MAC (signed, 32 bytes) or of the GCM nonce and tag (encrypted, 28
	// bytes), so signed and encrypted codecs sharing one store never collide.
	t.Run("claim key names its mode", func(t *testing.T) {
		for _, tc := range []struct {
			mode   RequestStateMode
			prefix string
			idLen  int
		}{
			{Signed, "state:s:", 32},
			{Encrypted, "state:e:", 12 + 16},
		} {
			clk := newStepClock()
			store := &claimRecorder{MemoryStore: replay.MemoryStore{Now: clk.Now}}
			c := singleUseCodec(t, tc.mode, store, clk, mustKeyring(t, fixedKey(36)))
			wire, err := c.Encode("s", "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Decode(wire, "alice", ""); err != nil {
				t.Fatal(err)
			}
			if len(store.ids) != 1 {
				t.Fatalf("mode %d: %d claims, want 1", tc.mode, len(store.ids))
			}
			id, ok := strings.CutPrefix(store.ids[0], tc.prefix)
			raw, err := hex.DecodeString(id)
			if !ok || err != nil || len(raw) != tc.idLen || hex.EncodeToString(raw) != id {
				t.Fatalf("mode %d: claim key %q, want %q + lowercase hex of %d bytes", tc.mode, store.ids[0], tc.prefix, tc.idLen)
			}
		}
	})

	// Pins how long a
	// single-use state is held in the store: to the end of its expiry second
	// (exp + 1 s, the first instant Decode refuses it) plus the 60 s skew
	// margin, in both modes.
	t.Run("claim lasts until expiry plus margin", func(t *testing.T) {
		for _, m := range stateModes {
			clk := newStepClock()
			store := &claimRecorder{MemoryStore: replay.MemoryStore{Now: clk.Now}}
			c := singleUseCodec(t, m.mode, store, clk, mustKeyring(t, fixedKey(37)))
			wire, err := c.Encode("s", "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Decode(wire, "alice", ""); err != nil {
				t.Fatal(err)
			}
			exp := clk.Now().Add(defaultStateTTL).Unix()
			want := time.Unix(exp+1, 0).Add(60 * time.Second)
			if len(store.until) != 1 || !store.until[0].Equal(want) {
				t.Fatalf("%s: claims until %v, want [%v]", m.name, store.until, want)
			}
		}
	})
}

func TestStateIsReusableWithoutReplayStore(t *testing.T) {
	clk := newStepClock()
	c := singleUseCodec(t, Signed, nil, clk, mustKeyring(t, fixedKey(20)))
	wire, err := c.Encode("s", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Decode(wire, "alice", ""); err != nil {
			t.Fatalf("decode without single-use mode: %v", err)
		}
	}
}

// claimRecorder is a replay.Store that records the ID and expiry of every
// claim.
type claimRecorder struct {
	replay.MemoryStore
	ids   []string
	until []time.Time
}

func (r *claimRecorder) Claim(ctx context.Context, id string, until time.Time) (bool, error) {
	r.ids = append(r.ids, id)
	r.until = append(r.until, until)
	return r.MemoryStore.Claim(ctx, id, until)
}

// TestStateSingleUseNoBindingRefusalConsumes pins DecodeContext's and
// DecodeCheckedContext's rule: a state refused for its caller, tool,
// audience or (through the check) arguments is not claimed, and the right
// request opens it afterwards exactly once.
func TestStateSingleUseNoBindingRefusalConsumes(t *testing.T) {
	errArgs := errors.New("other arguments")
	argsCheck := func(want string) func(string) (string, error) {
		return func(s string) (string, error) {
			if s != want {
				return "", errArgs
			}
			return "app:" + s, nil
		}
	}
	kr := mustKeyring(t, fixedKey(21))
	for _, m := range stateModes {
		t.Run(m.name, func(t *testing.T) {
			clk := newStepClock()
			store := &replay.MemoryStore{Now: clk.Now}
			codec := func(aud string) *RequestStateCodec {
				return newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: m.mode, Binding: BindSubjectAndTool, Audience: aud, Replay: store, Now: clk.Now})
			}
			a, b := codec("server-a"), codec("server-b")
			wire, err := a.Encode("args-1", "alice", "preview_delete")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, r := range []struct {
				name          string
				c             *RequestStateCodec
				subject, tool string
				check         func(string) (string, error)
				also          error
			}{
				{"caller", a, "mallory", "preview_delete", argsCheck("args-1"), nil},
				{"tool", a, "alice", "delete_now", argsCheck("args-1"), nil},
				{"audience", b, "alice", "preview_delete", argsCheck("args-1"), nil},
				{"arguments", a, "alice", "preview_delete", argsCheck("args-2"), errArgs},
			} {
				s, err := r.c.DecodeCheckedContext(ctx, wire, r.subject, r.tool, r.check)
				if !errors.Is(err, ErrStateInvalid) || s != "" {
					t.Fatalf("%s: %q, %v; want ErrStateInvalid", r.name, s, err)
				}
				if r.also != nil && (!errors.Is(err, r.also) || reasonText(err) != "wrong arguments" || Reason(err) != observe.ReasonWrongArguments) {
					t.Fatalf("%s: %v (reason %q) does not carry the check's error", r.name, err, reasonText(err))
				}
				if store.Len() != 0 {
					t.Fatalf("%s: the refused state was claimed", r.name)
				}
			}
			if s, err := a.DecodeCheckedContext(ctx, wire, "alice", "preview_delete", argsCheck("args-1")); err != nil || s != "app:args-1" {
				t.Fatalf("right request after refusals: %q, %v", s, err)
			}
			if _, err := a.DecodeCheckedContext(ctx, wire, "alice", "preview_delete", argsCheck("args-1")); !errors.Is(err, ErrStateReplayed) {
				t.Fatalf("second right request: %v; want ErrStateReplayed", err)
			}
		})
	}
}

// TestStateOpenUnclaimedChecksEverythingAndClaimsNothing pins the opener
// package stateclaim hands to mcptoken: every check of DecodeCheckedContext
// (authenticity, caller, tool, expiry, the caller's check), then no claim;
// it reports the ID and deadline the codec's own claim uses, so a lease
// taken under that ID is what the codec's claim then finds.
func TestStateOpenUnclaimedChecksEverythingAndClaimsNothing(t *testing.T) {
	errArgs := errors.New("other arguments")
	ctx := context.Background()
	for _, m := range stateModes {
		t.Run(m.name, func(t *testing.T) {
			clk := newStepClock()
			store := &claimRecorder{MemoryStore: replay.MemoryStore{Now: clk.Now}}
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(22)), Mode: m.mode, Binding: BindSubjectAndTool, Replay: store, Now: clk.Now})
			wire, err := c.Encode("s", "alice", "deploy")
			if err != nil {
				t.Fatal(err)
			}
			last := "A"
			if wire[len(wire)-2] == 'A' {
				last = "B"
			}
			tampered := wire[:len(wire)-2] + last + wire[len(wire)-1:]
			for _, r := range []struct {
				name, wire, subject, tool string
				check                     func(string) (string, error)
				want                      error
			}{
				{"caller", wire, "mallory", "deploy", nil, ErrStateInvalid},
				{"tool", wire, "alice", "rollback", nil, ErrStateInvalid},
				{"tampered", tampered, "alice", "deploy", nil, ErrStateInvalid},
				{"check", wire, "alice", "deploy", func(string) (string, error) { return "", errArgs }, errArgs},
			} {
				t.Run(r.name, func(t *testing.T) {
					o, err := stateclaim.Open(ctx, c, r.wire, r.subject, r.tool, r.check)
					if !errors.Is(err, r.want) || o != (stateclaim.Opened{}) {
						t.Fatalf("%+v, %v; want %v", o, err, r.want)
					}
				})
			}
			for range 2 { // claims nothing: opens again
				o, err := stateclaim.Open(ctx, c, wire, "alice", "deploy", nil)
				if err != nil || o.State != "s" || o.Store != any(store) || o.ID == "" || strings.Contains(o.ID, wire) {
					t.Fatalf("%+v, %v", o, err)
				}
			}
			if len(store.ids) != 0 {
				t.Fatalf("claimed %v", store.ids)
			}
			o, _ := stateclaim.Open(ctx, c, wire, "alice", "deploy", nil)
			if _, err := c.DecodeContext(ctx, wire, "alice", "deploy"); err != nil {
				t.Fatal(err)
			}
			if o.Lease != o.Until.Sub(clk.Now()) || o.Lease <= replay.SkewMargin {
				t.Fatalf("lease %v to %v from %v", o.Lease, o.Until, clk.Now())
			}
			if len(store.ids) != 1 || store.ids[0] != o.ID || !store.until[0].Equal(o.Until) {
				t.Fatalf("the codec claimed %v until %v; the opener reported %q until %v", store.ids, store.until, o.ID, o.Until)
			}
			if stateclaim.Store(c) != any(store) {
				t.Fatal("Store does not report the codec's store")
			}
			clk.Advance(2 * time.Hour)
			if _, err := stateclaim.Open(ctx, c, wire, "alice", "deploy", nil); !errors.Is(err, ErrStateExpired) {
				t.Fatalf("expired: %v", err)
			}
		})
	}
	// The opener hands on the ring it opened the state with (mcptoken
	// seals round results under subkeys of it): the codec's Keys, or the
	// KeySource's ring current at the open, which after a swap still opens
	// a state of the previous primary. A codec that is not single-use
	// hands on nothing, as it claims nothing.
	for _, m := range stateModes {
		t.Run("ring, "+m.name, func(t *testing.T) {
			first := mustKeyring(t, fixedKey(24))
			next := mustKeyring(t, fixedKey(25), fixedKey(24))
			src, err := NewKeySource(first)
			if err != nil {
				t.Fatal(err)
			}
			store := replay.NewMemoryStore(0)
			static := newTestCodec(t, RequestStateSecurity{Keys: first, Mode: m.mode, Binding: BindSubjectAndTool, Replay: store})
			rotating := newTestCodec(t, RequestStateSecurity{KeySource: src, Mode: m.mode, Binding: BindSubjectAndTool, Replay: store})
			reusable := newTestCodec(t, RequestStateSecurity{Keys: first, Mode: m.mode, Binding: BindSubjectAndTool})
			open := func(c *RequestStateCodec) stateclaim.Opened {
				t.Helper()
				wire, err := c.Encode("s", "alice", "deploy")
				if err != nil {
					t.Fatal(err)
				}
				o, err := stateclaim.Open(ctx, c, wire, "alice", "deploy", nil)
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			if o := open(static); o.Keys != any(first) {
				t.Fatalf("static keys: %v", o.Keys)
			}
			if o := open(rotating); o.Keys != any(first) {
				t.Fatalf("key source: %v", o.Keys)
			}
			wire, err := rotating.Encode("s", "alice", "deploy")
			if err != nil {
				t.Fatal(err)
			}
			if err := src.Swap(next); err != nil {
				t.Fatal(err)
			}
			if o, err := stateclaim.Open(ctx, rotating, wire, "alice", "deploy", nil); err != nil || o.Keys != any(next) {
				t.Fatalf("after the swap: %v, %v", o.Keys, err)
			}
			if o := open(reusable); o.Keys != nil || o.ID != "" {
				t.Fatalf("not single-use: %+v", o)
			}
		})
	}
	t.Run("no codec", func(t *testing.T) {
		for _, codec := range []any{nil, (*RequestStateCodec)(nil), "codec", &RequestStateCodec{}} {
			if _, err := stateclaim.Open(ctx, codec, "v1.x", "alice", "deploy", nil); !errors.Is(err, ErrNoKey) {
				t.Fatalf("%T: %v; want ErrNoKey", codec, err)
			}
			if codec != nil && stateclaim.Store(codec) != nil {
				t.Fatalf("%T has a store", codec)
			}
		}
	})
	// The observer hears every unclaimed open as it hears Decode: a state
	// that opens is verified, one that does not is refused, and neither
	// reports a store latency (the store is the caller's to call).
	t.Run("observed", func(t *testing.T) {
		var events []observe.Event
		c := newTestCodec(t, RequestStateSecurity{
			Keys:     mustKeyring(t, fixedKey(23)),
			Binding:  BindSubjectAndTool,
			Replay:   replay.NewMemoryStore(0),
			Observer: observe.ObserverFunc(func(e observe.Event) { events = append(events, e) }),
		})
		wire, err := c.Encode("s", "alice", "deploy")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stateclaim.Open(ctx, c, wire, "alice", "deploy", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := stateclaim.Open(ctx, c, wire, "mallory", "deploy", nil); !errors.Is(err, ErrStateInvalid) {
			t.Fatalf("another caller: %v", err)
		}
		var outcomes []observe.Outcome
		for _, e := range events {
			if e.Kind != observe.KindRequestState || e.StoreLatency != 0 {
				t.Fatalf("event %+v", e)
			}
			outcomes = append(outcomes, e.Outcome)
		}
		if want := []observe.Outcome{observe.OutcomeIssued, observe.OutcomeVerified, observe.OutcomeRefused}; !slices.Equal(outcomes, want) {
			t.Fatalf("outcomes %v; want %v", outcomes, want)
		}
	})
}
