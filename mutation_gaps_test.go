package ctoken

// Tests for behaviours a mutation run (scripts/mutation.sh, issue 21) showed
// no other test pinned. Each is named after the behaviour; the comment
// above it names the mutant it kills.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/jcs"
	"github.com/ctoken/ctoken/replay"
)

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
			c, err := NewRequestStateCodec(RequestStateSecurity{KeySource: sourceHoldingEmptyRing(), Mode: mode})
			wantErr(t, err, ErrNoKey)
			if c != nil {
				t.Fatal("a codec was returned with the error")
			}
		})
	}
}

// Kills cursor.go `n <= macSize` → `n < macSize`: a cursor that decodes to
// exactly one MAC and no body is refused as truncated, before any MAC is
// computed — even when that MAC is the authentic MAC of the empty body.
func TestCursorVerifyRefusesAMACWithoutBodyAsTruncated(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{})
	authentic := i.ring().macs[0].Sum(nil, nil)
	zero := make([]byte, macSize)
	for name, raw := range map[string][]byte{"authentic mac of empty body": authentic, "zero bytes": zero} {
		t.Run(name, func(t *testing.T) {
			p, err := i.Verify(b64.EncodeToString(raw), testScope)
			wantErr(t, err, ErrCursorInvalid)
			if got := Reason(err); got != "truncated" {
				t.Fatalf("Reason = %q, want %q", got, "truncated")
			}
			if !isZeroPayload(p) {
				t.Fatal("payload returned with the error")
			}
		})
	}
}

// Kills onetime.go `len(payload)+len(name)+len(value) > MaxOneTimeTokenBytes`
// with either `+` made `-`: Mint refuses a claim that cannot fit before
// copying it into the payload, so an oversize name or value costs no memory
// in proportion to its size.
func TestOneTimeMintRefusesOversizeClaimWithoutCopyingIt(t *testing.T) {
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

// Kills onetime.go `if o.obs != nil { start = time.Now() }` negated: the
// StoreLatency an observer is told on Redeem is how long the replay store
// took (at least its delay, far less than a minute), not the time since
// the zero time.
func TestOneTimeRedeemReportsTheStoresLatency(t *testing.T) {
	const delay = 2 * time.Millisecond
	var events []Event
	o := newOneTime(t, OneTimeConfig{
		Replay:   slowStore{delay: delay, inner: &replay.MemoryStore{}},
		Observer: ObserverFunc(func(e Event) { events = append(events, e) }),
	})
	tok := mint(t, o, nil)
	if _, err := o.Redeem(context.Background(), tok, nil); err != nil {
		t.Fatal(err)
	}
	_, err := o.Redeem(context.Background(), tok, nil)
	wantErr(t, err, ErrOneTimeRedeemed)
	checkStoreLatencies(t, events, delay, 2)
}

// checkStoreLatencies checks that events holds want events other than
// OutcomeIssued, each with a StoreLatency of at least delay and at most a
// minute.
func checkStoreLatencies(t *testing.T, events []Event, delay time.Duration, want int) {
	t.Helper()
	var n int
	for _, e := range events {
		if e.Outcome == OutcomeIssued {
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
			if Reason(err) != "malformed payload" {
				t.Fatalf("Reason = %q, want %q", Reason(err), "malformed payload")
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

// Kills state_once.go `if c.obs != nil { start = time.Now() }` negated: in
// single-use mode the StoreLatency an observer is told on Decode is how long
// the replay store took, not the time since the zero time.
func TestStateSingleUseDecodeReportsTheStoresLatency(t *testing.T) {
	const delay = 2 * time.Millisecond
	var events []Event
	c := newTestCodec(t, RequestStateSecurity{
		Keys:     mustKeyring(t, fixedKey(1)),
		Replay:   slowStore{delay: delay, inner: &replay.MemoryStore{}},
		Observer: ObserverFunc(func(e Event) { events = append(events, e) }),
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
}

// Kills state.go `cacheable := len(material) <= maxCachedMaterial` → `<`
// and `if int(sc.used) < len(sc.tags)` negated: the bind-tag cache (a
// performance measure: a tag costs as much as the AES-GCM open it guards)
// serves a repeated material of up to maxCachedMaterial bytes from the
// cache, and does not cache a longer one. A hit is seen by marking the
// cached copy of the tag: only a hit returns the mark.
func TestStateBindTagCacheServesRepeatedMaterialUpToTheLimit(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(1)), Binding: BindSubject})
	k := c.ring().bind[0]
	var sc stateScratch
	material := make([]byte, 0, 2*maxCachedMaterial)
	for _, n := range []int{1, maxCachedMaterial - 1, maxCachedMaterial} {
		subject := strings.Repeat("s", n)
		tag := c.cachedBindTag(nil, &sc, material, k, subject, "")
		var entry *tagEntry
		for i := range sc.tags[:sc.used] {
			if e := &sc.tags[i]; e.key == k && e.n == n {
				entry = e
			}
		}
		if entry == nil {
			t.Fatalf("material of %d bytes: tag not cached", n)
		}
		if string(entry.tag[:]) != string(tag) {
			t.Fatalf("material of %d bytes: cached tag differs from the one returned", n)
		}
		entry.tag[0] ^= 1
		if again := c.cachedBindTag(nil, &sc, material, k, subject, ""); again[0] == tag[0] {
			t.Fatalf("material of %d bytes: repeat not served from the cache", n)
		}
		entry.tag[0] ^= 1
	}
	long := strings.Repeat("s", maxCachedMaterial+1)
	if got, want := c.cachedBindTag(nil, &sc, material, k, long, ""), c.bindTag(nil, 0, long, ""); string(got) != string(want) {
		t.Fatal("tag of a long material differs from the uncached tag")
	}
	for i := range sc.tags[:sc.used] {
		if sc.tags[i].n > maxCachedMaterial {
			t.Fatalf("a material of %d bytes was cached", sc.tags[i].n)
		}
	}
}

// Kills state.go `if cap(sc.buf) < n` → `<=` in getScratch and
// `if cap(sc.buf) <= maxPooledScratch` negated in putScratch: Encode and
// Decode return their working memory to the pool and reuse it when it is
// large enough (a buffer of exactly the size needed included), so once warm
// each allocates only the string it returns. The decoding codec only ever
// decodes, so its pooled buffer has exactly the capacity Decode asks for.
func TestStateEncodeAndDecodeReuseTheirScratch(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	kr := mustKeyring(t, fixedKey(1))
	state := strings.Repeat("s", 300) // Decode's scratch is over the 512-byte minimum
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		t.Run("mode "+strconv.Itoa(int(mode)), func(t *testing.T) {
			enc := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode})
			dec := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode})
			w, err := enc.Encode(state, "sub", "tool")
			if err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(100, func() { _, _ = enc.Encode(state, "sub", "tool") }); n > 1 {
				t.Errorf("Encode allocates %v times, want 1 (the result)", n)
			}
			if n := testing.AllocsPerRun(100, func() { _, _ = dec.Decode(w, "sub", "tool") }); n > 1 {
				t.Errorf("Decode allocates %v times, want 1 (the result)", n)
			}
		})
	}
}

// Kills state.go `if cap(sc.buf) <= maxPooledScratch` → `<` and negated:
// a scratch buffer of exactly maxPooledScratch bytes is kept for reuse and a
// larger one is not, so a codec with a huge MaxBytes does not pin huge
// buffers. Decode asks for 3*len(wire) + len(subject)+1+len(tool) +
// bindTagLen bytes before it parses anything, so refusing a wire of the
// right length sizes the buffer exactly.
func TestStateScratchOfUpToMaxPooledIsReusedAndLargerIsNot(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	const subject, tool = "a", "b"
	matLen := len(subject) + 1 + len(tool)
	atLimit := (maxPooledScratch - matLen - bindTagLen) / 3
	if 3*atLimit+matLen+bindTagLen != maxPooledScratch {
		t.Fatal("test setup: no wire length sizes the scratch at exactly maxPooledScratch")
	}
	for _, tc := range []struct {
		name   string
		length int
		reused bool
	}{
		{"exactly maxPooledScratch", atLimit, true},
		{"over maxPooledScratch", atLimit + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(1)), MaxBytes: 1 << 20})
			wire := strings.Repeat("x", tc.length)
			var err error
			n := testing.AllocsPerRun(20, func() { _, err = c.Decode(wire, subject, tool) })
			wantErr(t, err, ErrStateInvalid)
			if tc.reused && n != 0 {
				t.Fatalf("refusing a %d-byte wire allocated %v times, want 0 (scratch reused)", tc.length, n)
			}
			if !tc.reused && n < 1 {
				t.Fatalf("refusing a %d-byte wire allocated %v times, want a fresh scratch each time", tc.length, n)
			}
		})
	}
}

// Kills the arithmetic mutants of Encode's scratch estimate in state.go
// (matLen, payloadCap, sealedCap, wireCap) that make it too small, or (with
// len(state)/8 made len(state)*8) far too large: the
// estimate covers the bind material, the payload, the sealed payload and
// the wire text of a state without escapes, so an Encode that finds no
// pooled scratch allocates exactly its scratch, the scratch's buffer and
// the result, and
// a warm Encode or Decode of a state bound to a long subject and tool (too
// long for the bind-tag cache) allocates only its result (Decode's "s" is
// a one-byte string, which Go does not allocate).
func TestStateEncodeScratchEstimateCoversEveryRegion(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	kr := mustKeyring(t, fixedKey(1))
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		for _, size := range []int{0, 100, 1000, 4000, 12000} {
			t.Run(fmt.Sprintf("mode %d, cold Encode of %d bytes", mode, size), func(t *testing.T) {
				state := strings.Repeat("s", size)
				c := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode})
				if _, err := c.Encode(state, "sub", "tool"); err != nil {
					t.Fatal(err)
				}
				// Each measured Encode starts from an empty scratch pool
				// (the key's own pooled HMAC states stay warm).
				n := testing.AllocsPerRun(5, func() {
					for c.scratch.Get() != nil {
					}
					_, _ = c.Encode(state, "sub", "tool")
				})
				if n != 3 {
					t.Fatalf("Encode with an empty scratch pool allocated %v times, want 3 (scratch, buffer, result)", n)
				}
				// ... and in proportion to the state: under 6 bytes per
				// state byte plus 4 KiB (measured: 5.9 at 4000 bytes).
				b := bytesPerRun(5, func() {
					for c.scratch.Get() != nil {
					}
					_, _ = c.Encode(state, "sub", "tool")
				})
				if limit := uint64(6*size + 4096); b > limit {
					t.Fatalf("Encode with an empty scratch pool allocated %d bytes, want at most %d", b, limit)
				}
			})
		}
		t.Run(fmt.Sprintf("mode %d, long subject and tool", mode), func(t *testing.T) {
			c := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode, Binding: BindSubjectAndTool})
			subject, tool := strings.Repeat("u", 3000), strings.Repeat("t", 3000)
			w, err := c.Encode("s", subject, tool)
			if err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(50, func() { _, _ = c.Encode("s", subject, tool) }); n != 1 {
				t.Errorf("Encode allocated %v times, want 1 (the result)", n)
			}
			if n := testing.AllocsPerRun(50, func() { _, _ = c.Decode(w, subject, tool) }); n > 1 {
				t.Errorf("Decode allocated %v times, want 1 (the result)", n)
			}
		})
	}
}

// Kills state.go `!ok || len(macText) != b64.EncodedLen(macSize)` → `&&`:
// a signed state whose MAC text is not exactly 43 characters is refused as
// malformed framing, before anything is decoded.
func TestStateSignedMACTextOfWrongLengthIsMalformedFraming(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(1))})
	w, err := c.Encode("state", "sub", "")
	if err != nil {
		t.Fatal(err)
	}
	dot := strings.LastIndexByte(w, '.')
	body, macText := w[:dot], w[dot+1:]
	for name, wire := range map[string]string{
		"42 characters":       body + "." + macText[:42],
		"44 characters":       body + "." + macText + "A",
		"empty":               body + ".",
		"a second separator":  body + "." + macText[:21] + "." + macText[21:],
		"86 characters (two)": body + "." + macText + macText,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := c.Decode(wire, "sub", "")
			wantErr(t, err, ErrStateInvalid)
			if Reason(err) != "malformed framing" {
				t.Fatalf("Reason = %q, want %q", Reason(err), "malformed framing")
			}
			if s != "" {
				t.Fatalf("state %q returned with the error", s)
			}
		})
	}
}

// Kills state.go `n < gcmNonceSize+gcmTagSize` with `+` made `-`: an
// encrypted state too short to hold a GCM nonce and tag is refused as
// malformed framing before any key is tried, and one just long enough
// (an empty ciphertext) reaches decryption.
func TestStateEncryptedShorterThanNonceAndTagIsMalformedFraming(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(1)), Mode: Encrypted})
	for _, tc := range []struct {
		n      int
		reason string
	}{
		{1, "malformed framing"},
		{gcmNonceSize, "malformed framing"},
		{gcmNonceSize + gcmTagSize - 1, "malformed framing"},
		{gcmNonceSize + gcmTagSize, "decryption failed (tampered, other key, or other subject/tool)"},
	} {
		t.Run(strconv.Itoa(tc.n), func(t *testing.T) {
			wire := encryptedPrefix + b64.EncodeToString(make([]byte, tc.n))
			s, err := c.Decode(wire, "sub", "")
			wantErr(t, err, ErrStateInvalid)
			if Reason(err) != tc.reason {
				t.Fatalf("Reason = %q, want %q", Reason(err), tc.reason)
			}
			if s != "" {
				t.Fatalf("state %q returned with the error", s)
			}
		})
	}
}

// Kills the redact.go mutants that negate a nil or empty test in a
// description: the redacted %v form of each config and issuer says what is
// set (a key count, a session length, "set" or "nil") and never more.
func TestRedactedDescriptionsSayWhatIsSet(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	now := func() time.Time { return time.Unix(0, 0) }
	store := &replay.MemoryStore{}
	iss := newTestIssuer(t, CursorConfig{Keys: kr, Session: []byte("abc")})
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"cursor config, nothing set", CursorConfig{},
			"ctoken.CursorConfig{Keys: nil, TTL: 0s, Session: nil, Now: nil}"},
		{"cursor config, all set", CursorConfig{Keys: kr, TTL: time.Minute, Session: []byte("abc"), Now: now},
			"ctoken.CursorConfig{Keys: ctoken.Keyring(1 keys), TTL: 1m0s, Session: 3 bytes, Now: set}"},
		{"one-time config, nothing set", OneTimeConfig{},
			`ctoken.OneTimeConfig{Keys: nil, Purpose: "", TTL: 0s, Replay: nil, Now: nil}`},
		{"one-time config, all set", OneTimeConfig{Keys: kr, Purpose: "p", TTL: time.Minute, Replay: store, Now: now},
			`ctoken.OneTimeConfig{Keys: ctoken.Keyring(1 keys), Purpose: "p", TTL: 1m0s, Replay: set, Now: set}`},
		{"state security, nothing set", RequestStateSecurity{},
			"ctoken.RequestStateSecurity{Keys: nil, Mode: 0, Binding: 0, TTL: 0s, MaxBytes: 0, Now: nil, Replay: nil}"},
		{"state security, all set", RequestStateSecurity{Keys: kr, Mode: Encrypted, Binding: BindNone, TTL: time.Minute, MaxBytes: 4096, Now: now, Replay: store},
			"ctoken.RequestStateSecurity{Keys: ctoken.Keyring(1 keys), Mode: 1, Binding: 2, TTL: 1m0s, MaxBytes: 4096, Now: set, Replay: set}"},
		{"cursor issuer", *iss, "ctoken.CursorIssuer(1 keys, TTL 5m0s, session of 3 bytes)"},
		{"zero cursor issuer", CursorIssuer{}, "ctoken.CursorIssuer(no key)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprintf("%v", tc.v); got != tc.want {
				t.Fatalf("%%v = %s\nwant  %s", got, tc.want)
			}
		})
	}
}

// Kills observe.go `int(k) < len(kindNames)` and `int(o) < len(outcomeNames)`
// made `<=`: the first value past the last kind or outcome (and every later
// one) has the empty label, without panicking.
func TestKindAndOutcomeLabelsAreEmptyPastTheSet(t *testing.T) {
	kinds := TokenKinds()
	for k := kinds[len(kinds)-1] + 1; k != 0; k++ {
		if s := k.String(); s != "" {
			t.Fatalf("TokenKind(%d).String() = %q, want empty", k, s)
		}
	}
	outcomes := Outcomes()
	for o := outcomes[len(outcomes)-1] + 1; o != 0; o++ {
		if s := o.String(); s != "" {
			t.Fatalf("Outcome(%d).String() = %q, want empty", o, s)
		}
	}
	if KindExchange.String() != "exchange" || OutcomeStoreFailure.String() != "store_failure" {
		t.Fatal("the last kind or outcome lost its label")
	}
}

// encoderPayload builds the request-state payload the way Encode writes it:
// {"s":<JCS string>,"exp":N,"b":"<64 hex characters>"}, no white space.
func encoderPayload(state string, exp int64) []byte {
	p := append([]byte(`{"s":`), jcs.AppendString(nil, state)...)
	p = append(p, `,"exp":`...)
	p = strconv.AppendInt(p, exp, 10)
	p = append(p, `,"b":"`...)
	p = append(p, strings.Repeat("0123456789abcdef", bindTagLen/16)...)
	return append(p, `"}`...)
}

// Kills state_payload.go mutants that make the fast path give up on the
// layout it exists for (each would only fall back to the full parser, so
// no Decode result changes, but every Decode would pay for the slow path):
// `pos: end + len(mid)` → `-`; `len(in)-p.pos != bindTagLen+2` with `+`,
// `-2` or a negated operand; `in[len(in)-2] != '"'` → `==`; `m == 0` →
// `!= 0`; `return s, i + 1, true` → `i - 1`; `high >= utf8.RuneSelf &&
// !utf8.Valid(s)` → `||`; `in[i+1] != '\\'` → `in[i-1]`; and `len(out) <
// len(in)` → `<=` (the scratch Decode hands over has capacity exactly
// len(payload) when the pooled buffer is just large enough).
func TestStatePayloadFastPathAcceptsEveryEncoderLayout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state string
		exp   int64
	}{
		{"empty state", "", 1700000000},
		{"one byte", "x", 1},
		{"two bytes", "ab", 1700000000},
		{"eight bytes", "abcdefgh", 1700000000},
		{"many words", strings.Repeat("opaque-cursor-", 9), 1700000000},
		{"quotes", `say "hi" to "them"`, 1700000000},
		{"backslashes", `C:\dir\file \\ share`, 1700000000},
		{"both escapes adjacent", `\"\\"`, 1700000000},
		{"two-byte UTF-8", "café", 1700000000},
		{"three- and four-byte UTF-8", "日本語 😀 after", 1700000000},
		{"negative exp", "x", -42},
		{"largest exp", "x", 1<<63 - 1},
		{"smallest exp", "x", -1 << 63},
		{"zero exp", "x", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := encoderPayload(tc.state, tc.exp)
			s, exp, b, ok := parseStatePayloadFast(in, make([]byte, 0, len(in)))
			if !ok {
				t.Fatalf("fast path gave up on %q", in)
			}
			if string(s) != tc.state || exp != tc.exp || string(b) != strings.Repeat("0123456789abcdef", bindTagLen/16) {
				t.Fatalf("fast path read (%q, %d, %q) from %q", s, exp, b, in)
			}
			// b aliases the input: the fast path copies only s.
			if &b[0] != &in[len(in)-2-bindTagLen] {
				t.Fatal("fast path copied b instead of aliasing the input")
			}
		})
	}
}

// Kills state_payload.go `len(out) < len(in)` → `>=` (the fast path would
// write past a scratch buffer shorter than the payload, or refuse every
// adequate one) and pins the refusal it guards: Decode hands a region clamped
// to the pooled buffer, which can be shorter than the payload.
func TestStatePayloadFastPathNeedsScratchAsLongAsThePayload(t *testing.T) {
	in := encoderPayload(strings.Repeat("a", 40), 1700000000)
	if _, _, _, ok := parseStatePayloadFast(in, make([]byte, 0, len(in)-1)); ok {
		t.Fatal("fast path accepted a scratch buffer one byte short of the payload")
	}
	// The full parser still reads it, growing the short buffer.
	s, exp, _, ok := parseStatePayload(in, make([]byte, 0, len(in)-1))
	if !ok || string(s) != strings.Repeat("a", 40) || exp != 1700000000 {
		t.Fatalf("parseStatePayload with short scratch: (%q, %d, %v)", s, exp, ok)
	}
	if _, _, _, ok := parseStatePayloadFast(in, make([]byte, 0, len(in))); !ok {
		t.Fatal("fast path refused a scratch buffer exactly as long as the payload")
	}
}

// Kills state_payload.go `high >= utf8.RuneSelf` → `high > utf8.RuneSelf`:
// a state made only of 0x80 bytes (so every byte OR-ed together is exactly
// 0x80) is invalid UTF-8 and must be refused, by the fast path and by the
// parser as a whole.
func TestStatePayloadRefusesAStateOfBareContinuationBytes(t *testing.T) {
	for _, state := range []string{"\x80", "\x80\x80", strings.Repeat("\x80", 9)} {
		in := encoderPayload(state, 1700000000)
		if _, _, _, ok := parseStatePayloadFast(in, make([]byte, 0, len(in))); ok {
			t.Fatalf("fast path accepted invalid UTF-8 %q", state)
		}
		if _, _, _, ok := parseStatePayload(in, make([]byte, 0, len(in))); ok {
			t.Fatalf("parser accepted invalid UTF-8 %q", state)
		}
	}
}

// Kills state_payload.go `c < 0x20 || c == '\\'` in stringOrAlias → `c >=
// 0x20`, `c != '\\'` or `c <= 0x20`: a b string without escapes (spaces
// included) is returned as a slice of the input, without a copy, as its doc
// comment promises; one with an escape is unescaped.
func TestStringOrAliasAliasesAStringWithoutEscapes(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		alias    bool
	}{
		{`"plain"`, "plain", true},
		{`"with space"`, "with space", true},
		{`" "`, " ", true},
		{`"` + strings.Repeat("f", bindTagLen) + `"`, strings.Repeat("f", bindTagLen), true},
		{`"caf` + "\u00e9" + `"`, "caf\u00e9", true},
		{`"a\u0062"`, "ab", false},
		{`"a\\b"`, `a\b`, false},
	} {
		in := []byte(tc.in + ",")
		p := payloadParser{in: in}
		v, ok := p.stringOrAlias()
		if !ok || string(v) != tc.want || p.pos != len(tc.in) {
			t.Fatalf("%s: got (%q, %v) ending at %d", tc.in, v, ok, p.pos)
		}
		if aliased := &v[0] == &in[1]; aliased != tc.alias {
			t.Fatalf("%s: aliased = %v, want %v", tc.in, aliased, tc.alias)
		}
	}
	for _, bad := range []string{"\"a\x01b\"", "\"a\nb\"", "\"\xff\"", `"unterminated`} {
		p := payloadParser{in: []byte(bad)}
		if v, ok := p.stringOrAlias(); ok {
			t.Fatalf("%q accepted as %q", bad, v)
		}
	}
}

// Kills reload.go `len(b) > MaxKeyFileBytes` → `>=`: a key file of exactly
// MaxKeyFileBytes bytes (a key padded with white space, which ParseKeyring
// trims) is read and swapped in; one byte more is ErrKeyFileTooLarge and
// leaves the ring in place.
func TestKeyFileReloaderReadsAFileOfExactlyMaxKeyFileBytes(t *testing.T) {
	a, b := RandomKey(), RandomKey()
	pad := func(text string, n int) string { return text + strings.Repeat(" ", n-len(text)) }
	d := newSecretDir(t, keyText(a))
	src := mustSource(t, mustKeyring(t, a))
	r, err := NewKeyFileReloader(KeyFileReloaderConfig{Source: src, Path: d.path()})
	if err != nil {
		t.Fatal(err)
	}
	d.publish(pad(keyText(b), MaxKeyFileBytes))
	if swapped, err := r.Reload(); !swapped || err != nil {
		t.Fatalf("file of MaxKeyFileBytes: swapped %v, err %v", swapped, err)
	}
	if string(src.Keyring().keys[0]) != string(b) {
		t.Fatal("the key of a file of MaxKeyFileBytes is not in effect")
	}
	kr := src.Keyring()
	d.publish(pad(keyText(a), MaxKeyFileBytes+1))
	if swapped, err := r.Reload(); swapped || !errors.Is(err, ErrKeyFileTooLarge) {
		t.Fatalf("file of MaxKeyFileBytes+1: swapped %v, err %v", swapped, err)
	}
	if src.Keyring() != kr {
		t.Fatal("an oversize file replaced the ring")
	}
}
