package ctoken

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

// Edge cases of the request-state codec that mutation testing showed no
// other test noticing (issue 21): each test names the behaviour it pins.

// TestStateRefusesSubjectStartingWithNUL checks that a NUL at position 0 of
// the subject is refused under BindSubjectAndTool like one further in:
// otherwise ("\x00", "a\x00b") and ("\x00\x00a", "b") share the material
// "\x00\x00a\x00b" and so a bind tag.
func TestStateRefusesSubjectStartingWithNUL(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(30)), Mode: mode, Binding: BindSubjectAndTool})
		for _, subject := range []string{"\x00", "\x00\x00a", "\x00alice"} {
			w, err := c.Encode("x", subject, "a\x00b")
			wantErr(t, err, ErrUnencodable)
			if w != "" || Reason(err) == "" {
				t.Fatalf("mode %d: subject %q: wire %q, reason %q", mode, subject, w, Reason(err))
			}
		}
		// A state sealed for the tool "a\x00b" (an empty subject) or "b"
		// never opens for a NUL-led subject.
		for _, tc := range []struct{ sealSubject, sealTool, subject, tool string }{
			{"", "\x00a\x00b", "\x00", "a\x00b"},
			{"", "\x00\x00a\x00b", "\x00", "\x00a\x00b"},
			{"alice", "b", "\x00\x00a", "b"},
		} {
			w, err := c.Encode("x", tc.sealSubject, tc.sealTool)
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Decode(w, tc.subject, tc.tool)
			wantErr(t, err, ErrStateInvalid)
			if s != "" || Reason(err) != "subject contains NUL (ambiguous under BindSubjectAndTool)" {
				t.Fatalf("mode %d: %q/%q: %q, reason %q", mode, tc.subject, tc.tool, s, Reason(err))
			}
		}
	}
}

// TestStateRefusesMACOf42CharactersAndLineFeed checks that the MAC segment
// must be exactly 43 base64url characters: 42 characters and a line feed
// (which encoding/base64 skips) decode to 31 bytes, and for a MAC whose last
// byte is zero (1 state in 256) the zero-filled 32nd byte would make it a
// second accepted spelling.
func TestStateRefusesMACOf42CharactersAndLineFeed(t *testing.T) {
	clock := newTestClock()
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(31)), Now: clock.Now})
	var wire string
	for i := 0; ; i++ {
		w, err := c.Encode(fmt.Sprint("s-", i), "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		_, macText, _ := strings.Cut(w[len(signedPrefix):], ".")
		mac, err := base64.RawURLEncoding.DecodeString(macText)
		if err != nil || len(mac) != macSize {
			t.Fatalf("MAC segment %q", macText)
		}
		if mac[macSize-1] == 0 {
			wire = w
			break
		}
		if i > 1<<14 {
			t.Fatal("no MAC ending in a zero byte")
		}
	}
	if _, err := c.Decode(wire, "alice", ""); err != nil {
		t.Fatal(err)
	}
	short := wire[:len(wire)-1] // the last character holds only the zero byte's low bits
	for _, spelling := range []string{
		short + "\n",
		short[:len(short)-5] + "\n" + short[len(short)-5:],
		short + "\r",
		short,
	} {
		s, err := c.Decode(spelling, "alice", "")
		wantErr(t, err, ErrStateInvalid)
		if s != "" {
			t.Fatalf("second spelling %q accepted", spelling)
		}
	}
}

// TestStateSizeCapAtExactlyMaxBytesAndOneOver checks the cap at its edge,
// on both sides: a state whose wire is exactly MaxBytes is encoded and
// decoded; one byte over is ErrStateTooLarge at Encode and "over MaxBytes"
// at Decode.
func TestStateSizeCapAtExactlyMaxBytesAndOneOver(t *testing.T) {
	clock := newTestClock()
	kr := mustKeyring(t, fixedKey(32))
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		big := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode, Now: clock.Now})
		state := strings.Repeat("q", 200)
		wire, err := big.Encode(state, "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		exact := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode, MaxBytes: len(wire), Now: clock.Now})
		under := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode, MaxBytes: len(wire) - 1, Now: clock.Now})
		if s, err := exact.Decode(wire, "alice", ""); err != nil || s != state {
			t.Fatalf("mode %d: wire of exactly MaxBytes: %v", mode, err)
		}
		w, err := exact.Encode(state, "alice", "")
		if err != nil || len(w) != len(wire) {
			t.Fatalf("mode %d: encoding exactly MaxBytes: %d bytes, %v", mode, len(w), err)
		}
		s, err := under.Decode(wire, "alice", "")
		wantErr(t, err, ErrStateInvalid)
		if s != "" || Reason(err) != "over MaxBytes" {
			t.Fatalf("mode %d: one over: %q, reason %q", mode, s, Reason(err))
		}
		w, err = under.Encode(state, "alice", "")
		wantErr(t, err, ErrStateTooLarge)
		if w != "" {
			t.Fatalf("mode %d: one over encoded", mode)
		}
	}
}

// TestStateLongSubjectsDecodeRepeatedly checks subjects whose bind material
// is around and over the 128 bytes the bind-tag cache holds: each decodes
// twice (the second time past the cache), and a subject differing only in
// its last byte is refused twice.
func TestStateLongSubjectsDecodeRepeatedly(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		for _, binding := range []RequestStateBinding{BindSubject, BindSubjectAndTool} {
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(33)), Mode: mode, Binding: binding})
			for _, n := range []int{maxCachedMaterial - 1, maxCachedMaterial, maxCachedMaterial + 1, 200, 4096} {
				subject := strings.Repeat("s", n-1) + "1"
				other := strings.Repeat("s", n-1) + "2"
				wire, err := c.Encode("long", subject, "t")
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if s, err := c.Decode(wire, subject, "t"); err != nil || s != "long" {
						t.Fatalf("mode %d binding %d subject of %d bytes: %q, %v", mode, binding, n, s, err)
					}
					s, err := c.Decode(wire, other, "t")
					wantErr(t, err, ErrStateInvalid)
					if s != "" {
						t.Fatal("refused state returned")
					}
				}
			}
		}
	}
}

// TestStateHeavyWithEscapesRoundTrips checks states whose JSON escaping
// outgrows Encode's size estimate (every byte a control character written
// as \u00xx, six times its size), in both modes: the encrypted one opened
// by hand holds exactly the reference payload.
func TestStateHeavyWithEscapesRoundTrips(t *testing.T) {
	key := fixedKey(34)
	clock := newTestClock()
	for _, state := range []string{
		strings.Repeat("\x01", 2000),
		strings.Repeat("\"\\\x1f", 700),
		strings.Repeat("a\x00", 1000),
	} {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Mode: mode, Now: clock.Now})
			wire, err := c.Encode(state, "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if s, err := c.Decode(wire, "alice", ""); err != nil || s != state {
				t.Fatalf("mode %d: round trip of %d escapes: %v", mode, len(state), err)
			}
			tag := vecBindTag(key, BindSubject, "alice", "")
			want := vecStatePayload(state, clock.Now().Add(DefaultStateTTL).Unix(), tag)
			if mode == Signed {
				if ref := vecSignedWire(key, want); wire != ref {
					t.Fatalf("signed state with escapes differs from the reference")
				}
				continue
			}
			pt, _, err := vecOpenEncrypted(t, key, wire, tag)
			if err != nil || string(pt) != string(want) {
				t.Fatalf("encrypted state with escapes opens to %d bytes, %v; want the reference payload", len(pt), err)
			}
		}
	}
}

// TestStateRefusesTruncatedPayloadsBehindAValidKey seals every prefix of a
// valid payload with the right key, so the parser sees it: each is refused
// as ErrStateInvalid, without a panic, in both modes.
func TestStateRefusesTruncatedPayloadsBehindAValidKey(t *testing.T) {
	key := fixedKey(35)
	clock := newTestClock()
	signed := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Now: clock.Now})
	encrypted := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Mode: Encrypted, Now: clock.Now})
	tag := refBindTag(t, key, "alice")
	exp := clock.Now().Unix() + 60
	for _, full := range []string{
		fmt.Sprintf(`{"s":"a\u00e9\"b","exp":%d,"b":"%s"}`, exp, tag),
		fmt.Sprintf(`{"s":"x","exp":-%d,"b":"%s"}`, exp, tag),
		fmt.Sprintf(` { "b" : "%s" , "exp" : %d , "s" : "x" } `, tag, exp),
	} {
		// Every prefix that stops before the closing brace.
		for n := 0; n <= strings.LastIndexByte(full, '}'); n++ {
			p := full[:n]
			for _, tc := range []struct {
				c    *RequestStateCodec
				wire string
			}{
				{signed, refSigned(t, key, p)},
				{encrypted, refEncrypted(t, key, []byte("nonce-nonce!"), p, tag)},
			} {
				s, err := tc.c.Decode(tc.wire, "alice", "")
				wantErr(t, err, ErrStateInvalid)
				if s != "" || Reason(err) != "malformed payload" {
					t.Fatalf("payload truncated to %q: %q, reason %q", p, s, Reason(err))
				}
			}
		}
		// The whole payload is accepted (the negative expiry aside).
		if _, err := signed.Decode(refSigned(t, key, full), "alice", ""); err != nil && !errors.Is(err, ErrStateExpired) {
			t.Fatalf("whole payload %q: %v", full, err)
		}
	}
}

// TestStatePayloadParsersAgree checks the fast parser (the encoder's own
// layout) against the full one and the reference parser on near misses of
// that layout, and Decode's verdict on each behind a valid MAC: the fast
// parser accepts only what the full one accepts, with the same values.
func TestStatePayloadParsersAgree(t *testing.T) {
	key := fixedKey(36)
	clock := newTestClock()
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Now: clock.Now})
	tag := refBindTag(t, key, "alice")
	exp := strconv.FormatInt(clock.Now().Unix()+60, 10)
	canonical := `{"s":"x","exp":` + exp + `,"b":"` + tag + `"}`
	for _, tc := range []struct {
		name    string
		payload string
		ok      bool // Decode accepts it for alice
	}{
		{"canonical", canonical, true},
		{"separator = after s", `{"s"="x","exp":` + exp + `,"b":"` + tag + `"}`, false},
		{"separator = after exp", `{"s":"x","exp"=` + exp + `,"b":"` + tag + `"}`, false},
		{"separator = after b", `{"s":"x","exp":` + exp + `,"b"="` + tag + `"}`, false},
		{"semicolon for comma", `{"s":"x";"exp":` + exp + `,"b":"` + tag + `"}`, false},
		{"garbage for ,\"exp\":", `{"s":"x",XXXXXX` + exp + `,"b":"` + tag + `"}`, false},
		{"garbage for ,\"b\":\"", `{"s":"x","exp":` + exp + `,XXXXX` + tag + `"}`, false},
		{"missing closing quote of b", `{"s":"x","exp":` + exp + `,"b":"` + tag + `}`, false},
		{"missing closing brace", `{"s":"x","exp":` + exp + `,"b":"` + tag + `"`, false},
		{"other last byte", `{"s":"x","exp":` + exp + `,"b":"` + tag + `"]`, false},
		{"quote for brace", `{"s":"x","exp":` + exp + `,"b":"` + tag + `""`, false},
		{"trailing brace", canonical + `}`, false},
		{"tag one short", `{"s":"x","exp":` + exp + `,"b":"` + tag[:63] + `"}`, false},
		{"tag one long", `{"s":"x","exp":` + exp + `,"b":"` + tag + `0"}`, false},
		{"escaped tag character", `{"s":"x","exp":` + exp + `,"b":"` + tag[:63] + `\u00` + strconv.FormatInt(int64(tag[63]), 16) + `"}`, true},
		{"space before comma", `{"s":"x" ,"exp":` + exp + `,"b":"` + tag + `"}`, true},
		{"exp with leading zero", `{"s":"x","exp":0` + exp + `,"b":"` + tag + `"}`, false},
		{"exp truncated to a sign", `{"s":"x","exp":-,"b":"` + tag + `"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.payload)
			rs, rexp, rb, rok := parseStatePayloadRef(in)
			s, exp, b, ok := parseStatePayload(in, make([]byte, 0, len(in)))
			if ok != rok || ok && (string(s) != rs || exp != rexp || string(b) != string(rb)) {
				t.Fatalf("full parser %q %d %q %v, reference %q %d %q %v", s, exp, b, ok, rs, rexp, rb, rok)
			}
			fs, fexp, fb, fok := parseStatePayloadFast(in, make([]byte, 0, len(in)))
			if fok && (!rok || string(fs) != rs || fexp != rexp || string(fb) != string(rb)) {
				t.Fatalf("fast parser accepts %q %d %q; reference %q %d %q %v", fs, fexp, fb, rs, rexp, rb, rok)
			}
			got, err := c.Decode(refSigned(t, key, tc.payload), "alice", "")
			if tc.ok && (err != nil || got != "x") {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok {
				wantErr(t, err, ErrStateInvalid)
				if got != "" {
					t.Fatal("refused state returned")
				}
			}
		})
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

// TestStateSingleUseClaimKeyNamesItsMode pins the replay store key of a
// single-use state: "state:s:" or "state:e:" by mode, then the lowercase hex
// of the MAC (signed, 32 bytes) or of the GCM nonce and tag (encrypted, 28
// bytes), so signed and encrypted codecs sharing one store never collide.
func TestStateSingleUseClaimKeyNamesItsMode(t *testing.T) {
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
}

// TestStateSingleUseClaimLastsUntilExpiryPlusMargin pins how long a
// single-use state is held in the store: to the end of its expiry second
// (exp + 1 s, the first instant Decode refuses it) plus the 60 s skew
// margin, in both modes.
func TestStateSingleUseClaimLastsUntilExpiryPlusMargin(t *testing.T) {
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
		exp := clk.Now().Add(DefaultStateTTL).Unix()
		want := time.Unix(exp+1, 0).Add(60 * time.Second)
		if len(store.until) != 1 || !store.until[0].Equal(want) {
			t.Fatalf("%s: claims until %v, want [%v]", m.name, store.until, want)
		}
	}
}

// TestStateTamperedEncryptedReason pins the log reason of an encrypted
// state that does not open.
func TestStateTamperedEncryptedReason(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(38)), Mode: Encrypted})
	wire, err := c.Encode("s", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(wire)
	// Another base64url character, away from the last one (whose unused
	// bits must stay zero): the ciphertext changes, the framing stays valid.
	if b[len(b)-10] == 'A' {
		b[len(b)-10] = 'B'
	} else {
		b[len(b)-10] = 'A'
	}
	s, err := c.Decode(string(b), "alice", "")
	wantErr(t, err, ErrStateInvalid)
	if s != "" || Reason(err) != "decryption failed (tampered, other key, or other subject/tool)" {
		t.Fatalf("tampered encrypted state: %q, reason %q", s, Reason(err))
	}
}

// TestStateEveryErrorHasAReason checks that every error the request-state
// code returns, from the constructor, Encode, Decode, the JSON helpers and
// a failing replay store, carries a non-empty Reason.
func TestStateEveryErrorHasAReason(t *testing.T) {
	kr := mustKeyring(t, fixedKey(39))
	clk := newStepClock()
	c := newTestCodec(t, RequestStateSecurity{Keys: kr, Binding: BindSubjectAndTool, Now: clk.Now})
	wire, err := c.Encode(`"x"`, "alice", "t")
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	once := singleUseCodec(t, Signed, replay.NewMemoryStore(0), clk, kr)
	used, _ := once.Encode("s", "alice", "")
	_, _ = once.Decode(used, "alice", "")
	calls := map[string]func() error{
		"nil keys":             func() error { _, err := NewRequestStateCodec(RequestStateSecurity{}); return err },
		"empty keyring":        func() error { _, err := NewRequestStateCodec(RequestStateSecurity{Keys: &Keyring{}}); return err },
		"negative TTL":         func() error { _, err := NewRequestStateCodec(RequestStateSecurity{Keys: kr, TTL: -1}); return err },
		"zero codec":           func() error { _, err := (&RequestStateCodec{}).Decode(wire, "alice", "t"); return err },
		"not UTF-8":            func() error { _, err := c.Encode("\xff", "alice", "t"); return err },
		"NUL subject":          func() error { _, err := c.Encode("x", "a\x00", "t"); return err },
		"too large":            func() error { _, err := c.Encode(strings.Repeat("x", DefaultStateMaxBytes), "alice", "t"); return err },
		"unencodable JSON":     func() error { _, err := EncodeJSON(c, make(chan int), "alice", "t"); return err },
		"wrong tool":           func() error { _, err := c.Decode(wire, "alice", "u"); return err },
		"expired":              func() error { clk.Advance(time.Hour); _, err := c.Decode(wire, "alice", "t"); return err },
		"not JSON of T":        func() error { _, err := DecodeJSON[int](c, wire, "alice", "t"); return err },
		"replayed":             func() error { _, err := once.Decode(used, "alice", ""); return err },
		"store failed":         func() error { _, err := once.DecodeContext(canceled, used, "alice", ""); return err },
		"store failed in JSON": func() error { _, err := DecodeJSONContext[string](canceled, once, used, "alice", ""); return err },
	}
	for name, call := range calls {
		err := call()
		if err == nil || Reason(err) == "" {
			t.Errorf("%s: error %v has no reason", name, err)
		}
	}
}
