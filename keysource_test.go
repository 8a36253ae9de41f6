package ctoken

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustSource(t testing.TB, kr *Keyring) *KeySource {
	t.Helper()
	s, err := NewKeySource(kr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeySourceSwapRefusesInvalidRingsAndKeepsTheCurrentOne(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	src := mustSource(t, kr)
	for _, tc := range []struct {
		name string
		ring *Keyring
		want error
	}{
		{"nil", nil, ErrNoKey},
		{"zero Keyring", &Keyring{}, ErrNoKey},
		{"short key", &Keyring{keys: [][]byte{make([]byte, MinKeyBytes-1)}}, ErrKeyTooShort},
		{"short previous key", &Keyring{keys: [][]byte{fixedKey(2), make([]byte, 4)}}, ErrKeyTooShort},
	} {
		err := src.Swap(tc.ring)
		wantErr(t, err, tc.want)
		if src.Keyring() != kr {
			t.Errorf("%s: a refused swap replaced the ring", tc.name)
		}
		if _, err := NewKeySource(tc.ring); !errors.Is(err, tc.want) {
			t.Errorf("%s: NewKeySource error %v, want %v", tc.name, err, tc.want)
		}
	}
	var zero *KeySource
	if zero.Keyring() != nil {
		t.Error("nil KeySource has a ring")
	}
}

func TestConfigsRefuseBothKeysAndKeySourceAndAnEmptySource(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	src := mustSource(t, kr)
	empty := &KeySource{}
	ctors := map[string]func(*Keyring, *KeySource) error{
		"cursor": func(k *Keyring, s *KeySource) error {
			_, err := NewCursorIssuer(CursorConfig{Keys: k, KeySource: s})
			return err
		},
		"state": func(k *Keyring, s *KeySource) error {
			_, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: k, KeySource: s})
			return err
		},
		"one-time": func(k *Keyring, s *KeySource) error {
			_, err := NewOneTimeIssuer(OneTimeConfig{Keys: k, KeySource: s, Purpose: "p"})
			return err
		},
	}
	for name, ctor := range ctors {
		wantErr(t, ctor(kr, src), ErrConfig)
		wantErr(t, ctor(nil, empty), ErrNoKey)
		wantErr(t, ctor(nil, nil), ErrNoKey)
		if err := ctor(nil, src); err != nil {
			t.Errorf("%s: KeySource alone: %v", name, err)
		}
		if Reason(ctor(kr, src)) == "" {
			t.Errorf("%s: no reason for both set", name)
		}
	}
}

// TestIssuersFollowKeySourceSwaps: after each swap every issuer signs with
// the new primary and verifies with exactly the new ring's keys.
func TestIssuersFollowKeySourceSwaps(t *testing.T) {
	a, b := fixedKey(1), fixedKey(2)
	src := mustSource(t, mustKeyring(t, a))
	ctx := context.Background()
	iss, err := NewCursorIssuer(CursorConfig{KeySource: src, Session: []byte("s")})
	if err != nil {
		t.Fatal(err)
	}
	ot, err := NewOneTimeIssuer(OneTimeConfig{KeySource: src, Purpose: "p"})
	if err != nil {
		t.Fatal(err)
	}
	scope := CursorScope{ToolID: "t"}
	curA, _ := iss.Issue(CursorPayload{CursorScope: scope})
	otA, _ := ot.Mint(nil)
	ringA := &iss.ring().macs[0]
	if &iss.ring().macs[0] != ringA {
		t.Fatal("subkeys re-derived without a swap")
	}

	if err := src.Swap(mustKeyring(t, b)); err != nil {
		t.Fatal(err)
	}
	if &iss.ring().macs[0] == ringA {
		t.Fatal("subkeys not re-derived after a swap")
	}
	_, err = iss.Verify(curA, scope)
	wantErr(t, err, ErrCursorInvalid)
	_, err = ot.Verify(otA)
	wantErr(t, err, ErrOneTimeInvalid)
	curB, _ := iss.Issue(CursorPayload{CursorScope: scope})
	onlyB, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, b), Session: []byte("s")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := onlyB.Verify(curB, scope); err != nil {
		t.Fatalf("a cursor issued after the swap is not signed by the new primary: %v", err)
	}

	if err := src.Swap(mustKeyring(t, b, a)); err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Verify(curA, scope); err != nil {
		t.Errorf("previous key no longer verifies: %v", err)
	}
	if _, err := ot.Redeem(ctx, otA, nil); err != nil {
		t.Errorf("one-time token of the previous key: %v", err)
	}
}

// TestRequestStateCodecFollowsKeySourceSwaps checks both modes, including
// the bind-tag cache: a state sealed after a swap must open with a fresh
// codec on the new ring alone (a tag cached for the old ring would not).
func TestRequestStateCodecFollowsKeySourceSwaps(t *testing.T) {
	a, b := fixedKey(1), fixedKey(2)
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		t.Run(map[RequestStateMode]string{Signed: "signed", Encrypted: "encrypted"}[mode], func(t *testing.T) {
			src := mustSource(t, mustKeyring(t, a))
			c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, KeySource: src, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, b), Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			sA, err := c.Encode("x", "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Decode(sA, "alice", ""); err != nil {
				t.Fatal(err)
			}
			if err := src.Swap(mustKeyring(t, b)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Decode(sA, "alice", ""); !errors.Is(err, ErrStateInvalid) {
				t.Fatalf("old-key state after the swap: %v", err)
			}
			sB, err := c.Encode("x", "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fresh.Decode(sB, "alice", ""); err != nil {
				t.Fatalf("state sealed after the swap does not open under the new key alone: %v", err)
			}
			if err := src.Swap(mustKeyring(t, b, a)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Decode(sA, "alice", ""); err != nil {
				t.Fatalf("previous key no longer opens: %v", err)
			}
		})
	}
}

// rotationCounts counts, by key position, the tokens verified (cursors,
// request states, one-time tokens) and the refusals, for the rotation test.
type rotationCounts struct {
	issued   atomic.Int64
	primary  atomic.Int64
	previous atomic.Int64 // "previous 1"
	other    atomic.Int64
	refused  atomic.Int64
}

func (c *rotationCounts) Observe(e Event) {
	switch {
	case e.Outcome == OutcomeIssued:
		c.issued.Add(1)
	case e.Outcome != OutcomeVerified:
		c.refused.Add(1)
	case e.Key == KeyPrimary:
		c.primary.Add(1)
	case e.Key == keyPosition(1):
		c.previous.Add(1)
	default:
		c.other.Add(1)
	}
}

// TestRotationUnderLoadRefusesNoValidToken rotates key A to key B through
// the two-pass procedure while 8 goroutines issue and verify cursors,
// encrypted request states and one-time tokens without pause, each also
// verifying the cursor it issued one iteration before. It checks: no valid
// token is ever refused; every cursor is signed by the primary of the ring
// current while it was issued; the "previous 1" key-position count rises
// after the second pass and then stops rising (drained to zero), after
// which dropping A refuses nothing.
func TestRotationUnderLoadRefusesNoValidToken(t *testing.T) {
	a, b := RandomKey(), RandomKey()
	ringA := mustKeyring(t, a)
	src := mustSource(t, ringA)
	counts := &rotationCounts{}
	session := []byte("fleet-1")
	iss, err := NewCursorIssuer(CursorConfig{KeySource: src, Session: session, Observer: counts})
	if err != nil {
		t.Fatal(err)
	}
	codec, err := NewRequestStateCodec(RequestStateSecurity{KeySource: src, Mode: Encrypted, Binding: BindSubjectAndTool, Observer: counts})
	if err != nil {
		t.Fatal(err)
	}
	ot, err := NewOneTimeIssuer(OneTimeConfig{KeySource: src, Purpose: "rotation", Observer: counts})
	if err != nil {
		t.Fatal(err)
	}
	// Single-key verifiers: which key signed a cursor.
	signedBy := map[string]*CursorIssuer{}
	for name, k := range map[string][]byte{"A": a, "B": b} {
		if signedBy[name], err = NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, k), Session: session}); err != nil {
			t.Fatal(err)
		}
	}
	primaryName := func(kr *Keyring) string {
		if string(kr.keys[0]) == string(a) {
			return "A"
		}
		return "B"
	}

	const workers = 8
	var (
		iters     [workers]atomic.Int64
		stop      atomic.Bool
		wg        sync.WaitGroup
		failMu    sync.Mutex
		failures  []string
		wrongKey  atomic.Int64
		straddled atomic.Int64
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
		failMu.Unlock()
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scope := CursorScope{ToolID: "list", CallerID: fmt.Sprint("caller-", w)}
			held := ""
			for !stop.Load() {
				before := src.Keyring()
				cur, err := iss.Issue(CursorPayload{CursorScope: scope, Page: uint32(iters[w].Load())})
				after := src.Keyring()
				if err != nil {
					fail("issue: %v", err)
					continue
				}
				if before == after {
					if _, err := signedBy[primaryName(before)].Verify(cur, scope); err != nil {
						wrongKey.Add(1)
					}
				} else {
					straddled.Add(1)
					_, e1 := signedBy[primaryName(before)].Verify(cur, scope)
					_, e2 := signedBy[primaryName(after)].Verify(cur, scope)
					if e1 != nil && e2 != nil {
						wrongKey.Add(1)
					}
				}
				if _, err := iss.Verify(cur, scope); err != nil {
					fail("verify fresh cursor: %v", err)
				}
				if held != "" {
					if _, err := iss.Verify(held, scope); err != nil {
						fail("verify held cursor: %v", err)
					}
				}
				held = cur
				st, err := codec.Encode("step", scope.CallerID, "tool")
				if err != nil {
					fail("encode: %v", err)
				} else if _, err := codec.Decode(st, scope.CallerID, "tool"); err != nil {
					fail("decode: %v", err)
				}
				tok, err := ot.Mint(map[string]string{"w": scope.CallerID})
				if err != nil {
					fail("mint: %v", err)
				} else if _, err := ot.Verify(tok); err != nil {
					fail("one-time verify: %v", err)
				}
				iters[w].Add(1)
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	// advance waits until every worker has finished n more iterations.
	advance := func(n int64) {
		t.Helper()
		var base [workers]int64
		for i := range base {
			base[i] = iters[i].Load()
		}
		for i := range base {
			for iters[i].Load() < base[i]+n {
				if time.Now().After(deadline) {
					stop.Store(true)
					wg.Wait()
					t.Fatalf("workers stalled")
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	swap := func(kr *Keyring) {
		t.Helper()
		if err := src.Swap(kr); err != nil {
			t.Fatal(err)
		}
	}

	advance(50)
	prevBefore := counts.previous.Load()
	swap(mustKeyring(t, a, b)) // pass 1: B learnt as a previous key everywhere
	advance(50)
	prevPass1 := counts.previous.Load() - prevBefore
	swap(mustKeyring(t, b, a)) // pass 2: B signs, A still verifies
	mark := counts.previous.Load()
	advance(3) // every held token signed by A has been verified
	drainedAt := counts.previous.Load()
	advance(50)
	prevAfterDrain := counts.previous.Load() - drainedAt
	swap(mustKeyring(t, b)) // A dropped: nothing uses it any more
	advance(50)
	stop.Store(true)
	wg.Wait()

	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("rotation: %d tokens issued, %d verified by the primary, %d by previous 1 (%d in pass 1, %d after pass 2 while draining, %d once drained), %d by another position, %d refused; %d cursors issued across a swap",
		counts.issued.Load(), counts.primary.Load(), counts.previous.Load(), prevPass1, drainedAt-mark, prevAfterDrain, counts.other.Load(), counts.refused.Load(), straddled.Load())
	switch {
	case counts.refused.Load() != 0:
		t.Errorf("%d valid tokens refused during rotation", counts.refused.Load())
	case wrongKey.Load() != 0:
		t.Errorf("%d cursors not signed by the then-primary key", wrongKey.Load())
	case prevPass1 != 0:
		t.Errorf("pass 1: %d tokens verified by the not yet used key B", prevPass1)
	case drainedAt-mark == 0:
		t.Error("pass 2: the previous key A verified nothing (the drain was not observed)")
	case prevAfterDrain != 0:
		t.Errorf("the previous key A kept verifying %d tokens after the drain", prevAfterDrain)
	case counts.other.Load() != 0:
		t.Errorf("%d tokens verified by a position other than primary and previous 1", counts.other.Load())
	}
}

func TestKeySourceNeverPrintsAKey(t *testing.T) {
	key := fixedKey(0x41)
	src := mustSource(t, mustKeyring(t, key))
	var nilSrc *KeySource
	for _, got := range []string{fmt.Sprintf("%v", src), fmt.Sprintf("%+v", src), fmt.Sprintf("%#v", src), fmt.Sprintf("%x", src),
		fmt.Sprintf("%v", CursorConfig{KeySource: src}), fmt.Sprintf("%v", nilSrc)} {
		if strings.Contains(got, string(key)) || strings.Contains(got, EncodeKey(key)) || strings.Contains(got, fmt.Sprintf("%x", key)) {
			t.Errorf("printed %q", got)
		}
	}
	if got := fmt.Sprint(src); got != "ctoken.KeySource(1 keys)" {
		t.Errorf("got %q", got)
	}
	b, err := src.MarshalJSON()
	if err != nil || string(b) != `"ctoken.KeySource(1 keys)"` {
		t.Errorf("JSON %s %v", b, err)
	}
}

// sourceHoldingEmptyRing returns a KeySource whose current ring holds no key,
// as a Keyring not made by NewKeyring would be: Swap refuses such a ring,
// so only a test inside the package can build one.
func sourceHoldingEmptyRing() *KeySource {
	s := new(KeySource)
	s.cur.Store(&Keyring{})
	return s
}

// Kills cursor.go, onetime.go `len(r) != kr.Len() || len(r) == 0` → `&&`
// and state.go `n == 0 || len(k.bind) != n` → `&&` in the subkey derivation: a ring that yields no subkey is refused at
// construction rather than making an issuer that holds no key.
func TestConstructorsRefuseAKeySourceWhoseRingHoldsNoKey(t *testing.T) {
	t.Run("cursor", func(t *testing.T) {
		i, err := NewCursorIssuer(CursorConfig{KeySource: sourceHoldingEmptyRing()})
		wantErr(t, err, ErrNoKey)
		if i != nil {
			t.Fatal("an issuer was returned with the error")
		}
	})
	t.Run("onetime", func(t *testing.T) {
		o, err := NewOneTimeIssuer(OneTimeConfig{KeySource: sourceHoldingEmptyRing(), Purpose: "p"})
		wantErr(t, err, ErrNoKey)
		if o != nil {
			t.Fatal("an issuer was returned with the error")
		}
	})
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		t.Run("state mode "+strconv.Itoa(int(mode)), func(t *testing.T) {
			c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, KeySource: sourceHoldingEmptyRing(), Mode: mode})
			wantErr(t, err, ErrNoKey)
			if c != nil {
				t.Fatal("a codec was returned with the error")
			}
		})
	}
}
