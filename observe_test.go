package ctoken

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []observe.Event
}

func (r *recorder) Observe(e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// take returns and forgets the events so far.
func (r *recorder) take() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// only returns the one event recorded since the last call, failing
// unless there is exactly one.
func (r *recorder) only(t *testing.T) observe.Event {
	t.Helper()
	ev := r.take()
	if len(ev) != 1 {
		t.Fatalf("%d events, want 1: %+v", len(ev), ev)
	}
	return ev[0]
}

// sameEvent compares e with want, ignoring StoreLatency except for whether
// it is set.
func sameEvent(t *testing.T, name string, e, want observe.Event) {
	t.Helper()
	if (e.StoreLatency > 0) != (want.StoreLatency > 0) {
		t.Errorf("%s: StoreLatency = %v, want set: %v", name, e.StoreLatency, want.StoreLatency > 0)
	}
	e.StoreLatency, want.StoreLatency = 0, 0
	if e != want {
		t.Errorf("%s: event %+v, want %+v", name, e, want)
	}
}

func refused(k observe.TokenKind, r observe.RefusalReason, key observe.KeyPosition) observe.Event {
	return observe.Event{Kind: k, Outcome: observe.OutcomeRefused, Reason: r, Key: key}
}

func TestObserverSeesEvery(t *testing.T) {
	t.Run("cursor outcome", func(t *testing.T) {
		old, cur := fixedKey(1), fixedKey(2)
		clock := newTestClock()
		rec := &recorder{}
		iss, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, cur, old), Session: []byte("s1"), Now: clock.Now, TTL: time.Minute, Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		byOld, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, old), Session: []byte("s1"), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		otherSession, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, cur), Session: []byte("s2"), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		forgedOther, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, fixedKey(9)), Session: []byte("s2"), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		scope := CursorScope{ToolID: "t", CallerID: "c", Args: Fingerprint{1}}
		issue := func(i *CursorIssuer, p CursorPayload) string {
			t.Helper()
			c, err := i.Issue(p)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		good := issue(iss, CursorPayload{CursorScope: scope})
		sameEvent(t, "issue", rec.only(t), observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeIssued, Key: observe.KeyPrimary})
		_, err = iss.Issue(CursorPayload{CursorScope: scope, State: make([]byte, MaxOpaqueStateBytes+1)})
		sameEvent(t, "issue too large", rec.only(t), refused(observe.KindCursor, observe.ReasonOpaqueStateTooBig, observe.KeyNone))
		wantErr(t, err, ErrOpaqueStateTooLarge)

		// Bodies MACed with the scope after them, as Issue does, under the
		// primary key and naming it.
		macs, kid := iss.ring().macs, iss.ring().ids[0]
		signed := func(b []byte) string {
			return b64.EncodeToString(macs[0].Sum(append([]byte(nil), b...), appendScope(append([]byte(nil), b...), &scope)))
		}
		body := func(session []byte, issued time.Time) []byte {
			return cursorwire.AppendV2(nil, &cursorwire.BodyV2{Version: cursorwire.Version, KeyID: kid[:], Issued: issued.Unix(), Session: session})
		}
		tag := cursorSessionTag([]byte("s1"))
		// A format 1 body (tool and caller in clear), never issued any more.
		format1 := []byte{0xa6, 0x01, 0x01, 0x02, 0x61, 't', 0x03, 0x61, 'c', 0x05, 0x00, 0x06, 0x00, 0x07, 0x42, 's', '1'}

		// One character past the key id changed for another of the alphabet.
		tampered := []byte(good)
		tampered[20] = b64Alphabet[(strings.IndexByte(b64Alphabet, good[20])+1)%len(b64Alphabet)]
		rawGood, _ := b64.DecodeString(good)
		// The map head (a5, five pairs) made a4: not a layout.
		rawGood[0]--
		tamperedHead := b64.EncodeToString(rawGood)
		rawGood[0]++
		// The key id's last byte changed: no key of the ring has it.
		rawGood[cursorwire.PrefixLen-1] ^= 1
		otherKeyID := b64.EncodeToString(rawGood)
		cases := []struct {
			name   string
			cursor string
			want   Scope
			event  observe.Event
		}{
			{"verified by primary", good, scope, observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeVerified, Key: observe.KeyPrimary}},
			{"verified by previous 1", issue(byOld, CursorPayload{CursorScope: scope}), scope, observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeVerified, Key: observe.KeyAt(1)}},
			{"empty", "", scope, refused(observe.KindCursor, observe.ReasonEmpty, observe.KeyNone)},
			{"oversize", strings.Repeat("A", MaxCursorBytes+1), scope, refused(observe.KindCursor, observe.ReasonCursorOversize, observe.KeyNone)},
			{"not base64url", "!!!!", scope, refused(observe.KindCursor, observe.ReasonNotBase64URL, observe.KeyNone)},
			{"truncated", "AAAA", scope, refused(observe.KindCursor, observe.ReasonTruncated, observe.KeyNone)},
			// The body still decodes: a forgery and a wrong scope look the same.
			{"tampered", string(tampered), scope, refused(observe.KindCursor, observe.ReasonCursorWrongScope, observe.KeyNone)},
			{"tampered so that the layout is unknown", tamperedHead, scope, refused(observe.KindCursor, observe.ReasonCursorMalformed, observe.KeyNone)},
			{"key id altered", otherKeyID, scope, refused(observe.KindCursor, observe.ReasonUnknownKey, observe.KeyNone)},
			{"signed by a key not in the ring", issue(forgedOther, CursorPayload{CursorScope: scope}), scope, refused(observe.KindCursor, observe.ReasonUnknownKey, observe.KeyNone)},
			{"authentic, other session", issue(otherSession, CursorPayload{CursorScope: scope}), scope, refused(observe.KindCursor, observe.ReasonOtherSession, observe.KeyPrimary)},
			{"format 1", b64.EncodeToString(append(format1, make([]byte, macSize)...)), scope, refused(observe.KindCursor, observe.ReasonCursorMalformed, observe.KeyNone)},
			{"malformed under a valid MAC", signed(append(body(tag[:], clock.Now()), 0)), scope, refused(observe.KindCursor, observe.ReasonCursorMalformed, observe.KeyPrimary)},
			{"session tag not 8 bytes under a valid MAC", signed(body(tag[:7], clock.Now())), scope, refused(observe.KindCursor, observe.ReasonCursorMalformed, observe.KeyPrimary)},
			{"MAC of the body alone", b64.EncodeToString(macs[0].Sum(body(tag[:], clock.Now()), body(tag[:], clock.Now()))), scope, refused(observe.KindCursor, observe.ReasonCursorWrongScope, observe.KeyNone)},
			{"issued in the future", signed(body(tag[:], clock.Now().Add(time.Hour))), scope, refused(observe.KindCursor, observe.ReasonIssuedInFuture, observe.KeyPrimary)},
			// The scope is inside the MAC: no key matches.
			{"wrong tool", good, CursorScope{ToolID: "x", CallerID: "c"}, refused(observe.KindCursor, observe.ReasonCursorWrongScope, observe.KeyNone)},
			{"wrong caller", good, CursorScope{ToolID: "t", CallerID: "x"}, refused(observe.KindCursor, observe.ReasonCursorWrongScope, observe.KeyNone)},
			{"wrong arguments", good, CursorScope{ToolID: "t", CallerID: "c", Args: Fingerprint{2}}, refused(observe.KindCursor, observe.ReasonCursorWrongScope, observe.KeyNone)},
		}
		for _, tc := range cases {
			_, err := iss.Verify(tc.cursor, tc.want)
			e := rec.only(t)
			sameEvent(t, tc.name, e, tc.event)
			if tc.event.Outcome == observe.OutcomeVerified {
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
				}
			} else if Reason(err) != tc.event.Reason {
				t.Errorf("%s: reasonText(err) = %v, event %v", tc.name, reasonText(err), tc.event.Reason)
			}
		}
		clock.Advance(2 * time.Minute)
		_, err = iss.Verify(good, scope)
		sameEvent(t, "older than TTL", rec.only(t), refused(observe.KindCursor, observe.ReasonOlderThanTTL, observe.KeyPrimary))
		wantErr(t, err, ErrCursorExpired)
	})

	t.Run("request-state outcome", func(t *testing.T) {
		old, cur := fixedKey(1), fixedKey(2)
		clock := newTestClock()
		rec := &recorder{}
		store := &replay.MemoryStore{Now: clock.Now}
		codec := func(t *testing.T, mode RequestStateMode, kr *Keyring, st replay.Store, obs observe.Observer) *RequestStateCodec {
			t.Helper()
			c, err := NewRequestStateCodec(RequestStateSecurity{Keys: kr, Mode: mode, Now: clock.Now, Replay: st, Observer: obs, Binding: BindSubjectAndTool})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		signed := codec(t, Signed, mustKeyring(t, cur, old), nil, rec)
		sealed := codec(t, Encrypted, mustKeyring(t, cur, old), nil, rec)
		once := codec(t, Signed, mustKeyring(t, cur), store, rec)
		down := codec(t, Signed, mustKeyring(t, cur), failingStore{}, rec)
		oldSigned := codec(t, Signed, mustKeyring(t, old), nil, nil)
		oldSealed := codec(t, Encrypted, mustKeyring(t, old), nil, nil)
		enc := func(c *RequestStateCodec, state string) string {
			t.Helper()
			w, err := c.Encode(state, "alice", "tool")
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		s1 := enc(signed, "x")
		sameEvent(t, "encode", rec.only(t), observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeIssued, Key: observe.KeyPrimary})
		_, err := signed.Encode("\xff", "alice", "tool")
		sameEvent(t, "encode not UTF-8", rec.only(t), refused(observe.KindRequestState, observe.ReasonStateNotUTF8, observe.KeyNone))
		wantErr(t, err, ErrUnencodable)
		e1 := enc(sealed, "x")
		rec.take()
		o1 := enc(once, "x")
		d1 := enc(down, "x")
		rec.take()
		forged := s1[:len(s1)-2] + "AA"
		if forged == s1 {
			forged = s1[:len(s1)-2] + "BA"
		}
		type tc struct {
			name  string
			c     *RequestStateCodec
			wire  string
			tool  string
			event observe.Event
		}
		cases := []tc{
			{"signed, primary", signed, s1, "tool", observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeVerified, Key: observe.KeyPrimary}},
			{"signed, previous 1", signed, enc(oldSigned, "x"), "tool", observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeVerified, Key: observe.KeyAt(1)}},
			{"sealed, primary", sealed, e1, "tool", observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeVerified, Key: observe.KeyPrimary}},
			{"sealed, previous 1", sealed, enc(oldSealed, "x"), "tool", observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeVerified, Key: observe.KeyAt(1)}},
			{"empty", signed, "", "tool", refused(observe.KindRequestState, observe.ReasonEmpty, observe.KeyNone)},
			{"over MaxBytes", signed, strings.Repeat("v", defaultStateMaxBytes+1), "tool", refused(observe.KindRequestState, observe.ReasonStateOversize, observe.KeyNone)},
			{"other mode", signed, e1, "tool", refused(observe.KindRequestState, observe.ReasonUnknownPrefix, observe.KeyNone)},
			{"framing", signed, "v1.abc", "tool", refused(observe.KindRequestState, observe.ReasonFraming, observe.KeyNone)},
			{"mac mismatch", signed, forged, "tool", refused(observe.KindRequestState, observe.ReasonMACMismatch, observe.KeyNone)},
			{"wrong tool, signed", signed, s1, "other", refused(observe.KindRequestState, observe.ReasonWrongBinding, observe.KeyPrimary)},
			{"wrong tool, sealed", sealed, e1, "other", refused(observe.KindRequestState, observe.ReasonDecryption, observe.KeyNone)},
			{"single use, first", once, o1, "tool", observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeVerified, Key: observe.KeyPrimary, StoreLatency: 1}},
			{"single use, replayed", once, o1, "tool", observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeDuplicate, Reason: observe.ReasonAlreadyUsed, Key: observe.KeyPrimary, StoreLatency: 1}},
			{"store down", down, d1, "tool", observe.Event{Kind: observe.KindRequestState, Outcome: observe.OutcomeStoreFailure, Reason: observe.ReasonStoreFailed, Key: observe.KeyPrimary, StoreLatency: 1}},
		}
		for _, c := range cases {
			_, err := c.c.Decode(c.wire, "alice", c.tool)
			sameEvent(t, c.name, rec.only(t), c.event)
			if c.event.Outcome != observe.OutcomeVerified && Reason(err) != c.event.Reason {
				t.Errorf("%s: reasonText(%v) = %v", c.name, err, reasonText(err))
			}
		}
		clock.Advance(defaultStateTTL + 2*time.Second)
		_, err = signed.Decode(s1, "alice", "tool")
		sameEvent(t, "past exp", rec.only(t), refused(observe.KindRequestState, observe.ReasonPastExp, observe.KeyPrimary))
		wantErr(t, err, ErrStateExpired)
	})

	t.Run("one-time outcome", func(t *testing.T) {
		old, cur := fixedKey(1), fixedKey(2)
		clock := newTestClock()
		rec := &recorder{}
		mk := func(kr *Keyring, purpose string, st replay.Store, obs observe.Observer) *OneTimeIssuer {
			t.Helper()
			o, err := NewOneTimeIssuer(OneTimeConfig{Keys: kr, Purpose: purpose, Now: clock.Now, Replay: st, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		iss := mk(mustKeyring(t, cur, old), "p", nil, rec)
		down := mk(mustKeyring(t, cur), "p", failingStore{}, rec)
		byOld := mk(mustKeyring(t, old), "p", nil, nil)
		otherPurpose := mk(mustKeyring(t, cur), "q", nil, nil)
		mint := func(o *OneTimeIssuer, claims map[string]string) string {
			t.Helper()
			tok, err := o.Mint(claims)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		tok := mint(iss, nil)
		sameEvent(t, "mint", rec.only(t), observe.Event{Kind: observe.KindOneTime, Outcome: observe.OutcomeIssued, Key: observe.KeyPrimary})
		_, err := iss.Mint(map[string]string{"k": strings.Repeat("v", MaxOneTimeTokenBytes)})
		sameEvent(t, "mint too large", rec.only(t), refused(observe.KindOneTime, observe.ReasonClaimsTooLarge, observe.KeyNone))
		wantErr(t, err, ErrOneTimeTooLarge)
		prev := mint(byOld, map[string]string{"a": "1"})
		dtok := mint(down, nil)
		rec.take()
		ctx := context.Background()
		verify := func(tok string) error { _, err := iss.Verify(tok); return err }
		redeem := func(o *OneTimeIssuer, want map[string]string) func(string) error {
			return func(tok string) error { _, err := o.Redeem(ctx, tok, want); return err }
		}
		cases := []struct {
			name  string
			op    func(string) error
			tok   string
			event observe.Event
		}{
			{"verify, primary", verify, tok, observe.Event{Kind: observe.KindOneTime, Outcome: observe.OutcomeVerified, Key: observe.KeyPrimary}},
			{"verify, previous 1", verify, prev, observe.Event{Kind: observe.KindOneTime, Outcome: observe.OutcomeVerified, Key: observe.KeyAt(1)}},
			{"oversize", verify, strings.Repeat("a", MaxOneTimeTokenBytes+1), refused(observe.KindOneTime, observe.ReasonOneTimeOversize, observe.KeyNone)},
			{"format", verify, "xx", refused(observe.KindOneTime, observe.ReasonUnknownFormat, observe.KeyNone)},
			{"base64", verify, oneTimePrefix + "!!", refused(observe.KindOneTime, observe.ReasonBadBase64, observe.KeyNone)},
			{"truncated", verify, oneTimePrefix + "AAAA", refused(observe.KindOneTime, observe.ReasonTruncated, observe.KeyNone)},
			{"unknown key", verify, mint(mk(mustKeyring(t, fixedKey(7)), "p", nil, nil), nil), refused(observe.KindOneTime, observe.ReasonUnknownKey, observe.KeyNone)},
			{"mac mismatch", verify, withKeyID(mint(mk(mustKeyring(t, fixedKey(7)), "p", nil, nil), nil), iss.keys.ids[1]), refused(observe.KindOneTime, observe.ReasonMACMismatch, observe.KeyNone)},
			{"other purpose", verify, mint(otherPurpose, nil), refused(observe.KindOneTime, observe.ReasonOtherPurpose, observe.KeyPrimary)},
			{"claims mismatch", redeem(iss, map[string]string{"a": "2"}), prev, refused(observe.KindOneTime, observe.ReasonClaimsMismatch, observe.KeyAt(1))},
			{"redeem, previous 1", redeem(iss, map[string]string{"a": "1"}), prev, observe.Event{Kind: observe.KindOneTime, Outcome: observe.OutcomeVerified, Key: observe.KeyAt(1), StoreLatency: 1}},
			{"redeem again", redeem(iss, map[string]string{"a": "1"}), prev, observe.Event{Kind: observe.KindOneTime, Outcome: observe.OutcomeDuplicate, Reason: observe.ReasonAlreadyRedeemed, Key: observe.KeyAt(1), StoreLatency: 1}},
			{"store down", redeem(down, nil), dtok, observe.Event{Kind: observe.KindOneTime, Outcome: observe.OutcomeStoreFailure, Reason: observe.ReasonStoreFailed, Key: observe.KeyPrimary, StoreLatency: 1}},
		}
		for _, c := range cases {
			err := c.op(c.tok)
			sameEvent(t, c.name, rec.only(t), c.event)
			if c.event.Outcome != observe.OutcomeVerified && Reason(err) != c.event.Reason {
				t.Errorf("%s: reasonText(%v) = %v", c.name, err, reasonText(err))
			}
		}
		clock.Advance(defaultOneTimeTTL + time.Second)
		err = verify(tok)
		sameEvent(t, "expired", rec.only(t), refused(observe.KindOneTime, observe.ReasonExpired, observe.KeyPrimary))
		wantErr(t, err, ErrOneTimeExpired)
	})
}

// Scope is CursorScope, shortened for the table above.
type Scope = CursorScope

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// TestZeroValuesRefuseWithoutObserving: a zero issuer has no config,
// hence no observer; it refuses with ErrNoKey and nothing panics.
func TestZeroValuesRefuseWithoutObserving(t *testing.T) {
	var c CursorIssuer
	if _, err := c.Verify("x", CursorScope{}); err != errCursorNoKey {
		t.Fatal(err)
	}
	var s *RequestStateCodec
	if _, err := s.Decode("x", "", ""); err != errStateNoCodec {
		t.Fatal(err)
	}
	var o OneTimeIssuer
	if _, err := o.Redeem(context.Background(), "x", nil); err != errOneTimeNoKey {
		t.Fatal(err)
	}
}

// TestObserverAddsNoAllocation: a nil observer and a no-op one cost no
// allocation on cursor Issue (beyond the string) and Verify, accepted or
// refused.
func TestObserverAddsNoAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	kr := mustKeyring(t, fixedKey(2))
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	for _, obs := range []observe.Observer{nil, observe.ObserverFunc(func(observe.Event) {})} {
		iss, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: []byte("s"), Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		c, err := iss.Issue(CursorPayload{CursorScope: scope})
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { iss.Issue(CursorPayload{CursorScope: scope}) }); n > 1 {
			t.Errorf("observer %T: Issue allocates %v times", obs, n)
		}
		if n := testing.AllocsPerRun(100, func() { iss.Verify(c, scope) }); n != 0 {
			t.Errorf("observer %T: Verify allocates %v times", obs, n)
		}
		if n := testing.AllocsPerRun(100, func() { iss.Verify(c, CursorScope{ToolID: "x"}) }); n != 0 {
			t.Errorf("observer %T: a refused Verify allocates %v times", obs, n)
		}
	}
}

func TestObserversFansOutAndDropsNil(t *testing.T) {
	if observe.Multi() != nil || observe.Multi(nil, nil) != nil {
		t.Fatal("no observer must be nil (zero cost)")
	}
	a, b := &recorder{}, &recorder{}
	if observe.Multi(nil, a) != observe.Observer(a) {
		t.Error("a single observer is not returned as is")
	}
	e := observe.Event{Kind: observe.KindCursor, Outcome: observe.OutcomeVerified, Key: observe.KeyPrimary}
	observe.Multi(a, nil, b).Observe(e)
	if ea, eb := a.only(t), b.only(t); ea != e || eb != e {
		t.Errorf("events %+v %+v, want %+v", ea, eb, e)
	}
}
