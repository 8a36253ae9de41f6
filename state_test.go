package ctoken

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"bytes"
	"strconv"
	"unsafe"

	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/replay"
)

// refSubkey derives a subkey exactly as SPEC §4 states, independently of
// the package's own helpers.
func refSubkey(t testing.TB, key []byte, label string) []byte {
	t.Helper()
	k, err := hkdf.Key(sha256.New, key, make([]byte, 32), label, 32)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func refHMAC(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func refBindTag(t testing.TB, key []byte, material string) string {
	return hex.EncodeToString(refHMAC(refSubkey(t, key, "mcp.requestState bind-hmac key"), material))
}

func refSigned(t testing.TB, key []byte, payload string) string {
	mac := refHMAC(refSubkey(t, key, "mcp.requestState payload-hmac key"), payload)
	return "v1." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// refStateGCM is the hand-written AES-GCM (envelope_test.go) under the
// state's AES subkey.
func refStateGCM(t testing.TB, key []byte) *refGCM {
	return newRefGCM(t, refSubkey(t, key, "mcp.requestState aes-256-gcm key"))
}

func refEncrypted(t testing.TB, key []byte, nonce []byte, payload, bindTag string) string {
	sealed := append(append([]byte(nil), nonce...), refStateGCM(t, key).seal(nonce, []byte(payload), []byte(bindTag))...)
	return "v1e." + base64.RawURLEncoding.EncodeToString(sealed)
}

func newTestCodec(t testing.TB, sec RequestStateSecurity) *RequestStateCodec {
	t.Helper()
	c, err := NewRequestStateCodec(sec)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const testState = `{"step":2,"note":"a\"b\\c\n\u0001 é 😀 </script> & /"}`

func TestStateSignedMatchesReferenceEncoding(t *testing.T) {
	key := fixedKey(3)
	clock := newTestClock()
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, key), Now: clock.Now})
	got, err := c.Encode(testState, "alice", "ignored-for-BindSubject")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(testState) // the state as a JSON string
	js = []byte(strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(js)))
	exp := clock.Now().Add(5 * time.Minute).Unix()
	payload := fmt.Sprintf(`{"s":%s,"exp":%d,"b":"%s"}`, js, exp, refBindTag(t, key, "alice"))
	if want := refSigned(t, key, payload); got != want {
		t.Fatalf("signed state differs from the reference encoding\n got %s\nwant %s", got, want)
	}
}

func TestStateDecodesReferenceEncodings(t *testing.T) {
	key := fixedKey(3)
	clock := newTestClock()
	exp := clock.Now().Unix() + 60
	cases := []struct {
		name    string
		binding RequestStateBinding
		subject string
		tool    string
		// material the reference binds to
		material string
	}{
		{"subject", BindSubject, "alice", "tools/call\x00search", "alice"},
		{"subject and tool", BindSubjectAndTool, "alice", "tools/call\x00search", "alice\x00tools/call\x00search"},
		{"none", BindNone, "alice", "tools/call\x00search", ""},
		{"empty subject, subject and tool", BindSubjectAndTool, "", "tools/call\x00search", "\x00tools/call\x00search"},
		{"empty subject, subject", BindSubject, "", "tools/call\x00search", ""},
	}
	for _, tc := range cases {
		tag := refBindTag(t, key, tc.material)
		// Member order and white space of other encoders are accepted.
		payload := fmt.Sprintf(`{ "b": "%s", "exp": %d, "s": "x\u00e9\ud83d\ude00\/" }`, tag, exp)
		t.Run(tc.name+"/signed", func(t *testing.T) {
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Binding: tc.binding, Now: clock.Now})
			s, err := c.Decode(refSigned(t, key, payload), tc.subject, tc.tool)
			if err != nil || s != "xé😀/" {
				t.Fatalf("s=%q err=%v", s, err)
			}
		})
		t.Run(tc.name+"/encrypted", func(t *testing.T) {
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Mode: Encrypted, Binding: tc.binding, Now: clock.Now})
			nonce := []byte("twelve bytes")
			s, err := c.Decode(refEncrypted(t, key, nonce, payload, tag), tc.subject, tc.tool)
			if err != nil || s != "xé😀/" {
				t.Fatalf("s=%q err=%v", s, err)
			}
		})
	}
}

func TestStateEncryptedOpensWithReferenceGCM(t *testing.T) {
	key := fixedKey(4)
	clock := newTestClock()
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Mode: Encrypted, Binding: BindSubjectAndTool, Now: clock.Now})
	tool := MCPTarget("tools/call", "deploy")
	wire, err := c.Encode("secret plan", "bob", tool)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(wire, "v1e.") {
		t.Fatalf("prefix: %q", wire[:4])
	}
	if strings.Contains(wire, "secret") {
		t.Fatal("plaintext visible")
	}
	raw, err := base64.RawURLEncoding.DecodeString(wire[4:])
	if err != nil {
		t.Fatal(err)
	}
	tag := refBindTag(t, key, "bob\x00tools/call\x00deploy")
	pt, err := refStateGCM(t, key).open(raw[:12], raw[12:], []byte(tag))
	if err != nil {
		t.Fatalf("reference GCM cannot open the state: %v", err)
	}
	want := fmt.Sprintf(`{"s":"secret plan","exp":%d,"b":"%s"}`, clock.Now().Add(5*time.Minute).Unix(), tag)
	if string(pt) != want {
		t.Fatalf("payload\n got %s\nwant %s", pt, want)
	}
	// Fresh nonce every time.
	again, _ := c.Encode("secret plan", "bob", tool)
	if again == wire {
		t.Fatal("two encryptions are identical: nonce reuse")
	}
}

func TestStateRoundTripBothModes(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		for _, binding := range []RequestStateBinding{BindSubject, BindSubjectAndTool, BindNone} {
			t.Run(fmt.Sprint(mode, binding), func(t *testing.T) {
				c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(5)), Mode: mode, Binding: binding})
				for _, s := range []string{"", testState, strings.Repeat("z", 4000), "\x00\x7f\u2028"} {
					wire, err := c.Encode(s, "alice", "t1")
					if err != nil {
						t.Fatal(err)
					}
					got, err := c.Decode(wire, "alice", "t1")
					if err != nil || got != s {
						t.Fatalf("round trip of %q: got %q, %v", s, got, err)
					}
				}
			})
		}
	}
}

func TestStateBinding(t *testing.T) {
	cases := []struct {
		binding       RequestStateBinding
		subject, tool string
		ok            bool
	}{
		{BindSubject, "alice", "t1", true},
		{BindSubject, "alice", "t2", true}, // tool not bound
		{BindSubject, "mallory", "t1", false},
		{BindSubject, "", "t1", false},
		{BindSubjectAndTool, "alice", "t1", true},
		{BindSubjectAndTool, "alice", "t2", false},
		{BindSubjectAndTool, "mallory", "t1", false},
		{BindSubjectAndTool, "alice\x00t", "1", false}, // no ambiguity across the separator in practice: different material
		{BindSubjectAndTool, "", "t1", false},
		{BindNone, "mallory", "t2", true},
		{BindNone, "", "", true},
	}
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%d/%d/%q/%q", mode, tc.binding, tc.subject, tc.tool), func(t *testing.T) {
				c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(6)), Mode: mode, Binding: tc.binding})
				wire, err := c.Encode("state", "alice", "t1")
				if err != nil {
					t.Fatal(err)
				}
				s, err := c.Decode(wire, tc.subject, tc.tool)
				if tc.ok && (err != nil || s != "state") {
					t.Fatalf("refused: %v", err)
				}
				if !tc.ok {
					wantErr(t, err, ErrStateInvalid)
					if s != "" {
						t.Fatal("refused decode returned state")
					}
				}
			})
		}
	}
}

// TestStateAnonymousStateStaysBoundToItsTool pins the contract shared with
// the reference implementation: under BindSubjectAndTool an empty subject
// binds "\x00" + tool, so an anonymous state opens only for its own tool
// (and only for the empty subject).
func TestStateAnonymousStateStaysBoundToItsTool(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(6)), Mode: mode, Binding: BindSubjectAndTool})
		wire, err := c.Encode("anon", "", "t1")
		if err != nil {
			t.Fatal(err)
		}
		if s, err := c.Decode(wire, "", "t1"); err != nil || s != "anon" {
			t.Fatalf("mode %d: own tool: %q %v", mode, s, err)
		}
		for _, other := range []struct{ subject, tool string }{{"", "another tool"}, {"", ""}, {"alice", "t1"}} {
			s, err := c.Decode(wire, other.subject, other.tool)
			wantErr(t, err, ErrStateInvalid)
			if s != "" || reasonText(err) == "" {
				t.Fatalf("mode %d: %q/%q: state %q, reason %q", mode, other.subject, other.tool, s, reasonText(err))
			}
		}
	}
}

// TestStateEmptySubjectUnderBindSubjectIsUnbound pins the documented
// exception: under BindSubject the empty subject is the empty material, the
// same as BindNone's, so such a state opens for any tool and under BindNone.
func TestStateEmptySubjectUnderBindSubjectIsUnbound(t *testing.T) {
	kr := mustKeyring(t, fixedKey(6))
	c := newTestCodec(t, RequestStateSecurity{Keys: kr, Binding: BindSubject})
	none := newTestCodec(t, RequestStateSecurity{Keys: kr, Binding: BindNone})
	wire, err := c.Encode("anon", "", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := c.Decode(wire, "", "another tool"); err != nil || s != "anon" {
		t.Fatalf("empty subject: %q %v", s, err)
	}
	if s, err := none.Decode(wire, "mallory", "x"); err != nil || s != "anon" {
		t.Fatalf("BindNone: %q %v", s, err)
	}
	_, err = c.Decode(wire, "alice", "t1")
	wantErr(t, err, ErrStateInvalid)
}

func TestStateExpiry(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		clock := newTestClock()
		c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(7)), Mode: mode, TTL: time.Minute, Now: clock.Now})
		wire, _ := c.Encode("s", "alice", "")
		clock.Advance(time.Minute)
		if _, err := c.Decode(wire, "alice", ""); err != nil {
			t.Fatalf("at exp: %v", err)
		}
		clock.Advance(time.Second)
		s, err := c.Decode(wire, "alice", "")
		wantErr(t, err, ErrStateExpired)
		if s != "" {
			t.Fatal("expired decode returned state")
		}
		// Binding is checked before expiry: a foreign expired state is invalid.
		_, err = c.Decode(wire, "mallory", "")
		wantErr(t, err, ErrStateInvalid)
	}
}

func TestStateRejectsTamperAtEveryPosition(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(8)), Mode: mode})
		wire, _ := c.Encode(`{"a":1}`, "alice", "")
		for i := 0; i < len(wire); i++ {
			for _, r := range []byte{'A', 'e', '_', '.', '0'} {
				if wire[i] == r {
					continue
				}
				mut := wire[:i] + string(r) + wire[i+1:]
				s, err := c.Decode(mut, "alice", "")
				if err == nil || s != "" {
					t.Fatalf("mode %d: tamper at %d with %q accepted (%q)", mode, i, r, s)
				}
				wantErr(t, err, ErrStateInvalid)
			}
		}
		for n := 0; n < len(wire); n++ {
			_, err := c.Decode(wire[:n], "alice", "")
			wantErr(t, err, ErrStateInvalid)
		}
	}
}

func TestStateRejectsGarbage(t *testing.T) {
	key := fixedKey(9)
	clock := newTestClock()
	signed := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, key), Now: clock.Now})
	encrypted := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, key), Mode: Encrypted, Now: clock.Now})
	exp := clock.Now().Unix() + 60
	tag := refBindTag(t, key, "alice")
	// Payloads with a valid MAC that the strict parser must still refuse.
	badPayloads := []string{
		``,
		`[]`,
		`{"s":"x","exp":1}`,
		fmt.Sprintf(`{"s":"x","exp":%d,"b":"%s","extra":1}`, exp, tag),
		fmt.Sprintf(`{"s":"x","s":"y","exp":%d,"b":"%s"}`, exp, tag),
		fmt.Sprintf(`{"s":1,"exp":%d,"b":"%s"}`, exp, tag),
		fmt.Sprintf(`{"s":"x","exp":%d.5,"b":"%s"}`, exp, tag),
		fmt.Sprintf(`{"s":"x","exp":"%d","b":"%s"}`, exp, tag),
		fmt.Sprintf(`{"s":"x","exp":0%d,"b":"%s"}`, exp, tag),
		fmt.Sprintf(`{"s":"x","exp":%d,"b":"%s"} x`, exp, tag),
		fmt.Sprintf(`{"s":"\ud800","exp":%d,"b":"%s"}`, exp, tag),
		fmt.Sprintf("{\"s\":\"\xff\",\"exp\":%d,\"b\":\"%s\"}", exp, tag),
		fmt.Sprintf(`{"s":"x","exp":%d,"b":"%s",}`, exp, tag),
		fmt.Sprintf(`{"s":"x","exp":99999999999999999999,"b":"%s"}`, tag),
		fmt.Sprintf(`{"s":"x","exp":%d,"b":"%s"`, exp, tag),
	}
	for i, p := range badPayloads {
		_, err := signed.Decode(refSigned(t, key, p), "alice", "")
		wantErr(t, err, ErrStateInvalid)
		_, err = encrypted.Decode(refEncrypted(t, key, []byte("nonce-nonce!"), p, tag), "alice", "")
		if err == nil {
			t.Fatalf("payload %d accepted", i)
		}
		wantErr(t, err, ErrStateInvalid)
	}
	wire, _ := signed.Encode("x", "alice", "")
	garbage := []string{
		"", "v1", "v1.", "v1..", "v1.e30", "v1.e30.", "v2." + wire[3:], "V1." + wire[3:],
		"v1e.", "v1e.AAAA", "v1." + wire[3:] + ".x", strings.Replace(wire, ".", "..", 1),
		"v1." + base64.StdEncoding.EncodeToString([]byte(`{"s":"x"}`)) + "." + strings.Repeat("A", 43),
		"\x00\xff", strings.Repeat("v1.", 100),
	}
	for _, g := range garbage {
		for _, c := range []*RequestStateCodec{signed, encrypted} {
			s, err := c.Decode(g, "alice", "")
			wantErr(t, err, ErrStateInvalid)
			if s != "" {
				t.Fatal("garbage returned state")
			}
		}
	}
}

func TestStateModesDoNotCross(t *testing.T) {
	kr := mustKeyring(t, fixedKey(10))
	signed := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr})
	encrypted := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: Encrypted})
	s, _ := signed.Encode("x", "a", "")
	e, _ := encrypted.Encode("x", "a", "")
	_, err := encrypted.Decode(s, "a", "")
	wantErr(t, err, ErrStateInvalid)
	_, err = signed.Decode(e, "a", "")
	wantErr(t, err, ErrStateInvalid)
}

func TestStateSizeCap(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(11)), MaxBytes: 300})
	_, err := c.Encode(strings.Repeat("a", 300), "alice", "")
	wantErr(t, err, ErrStateTooLarge)
	wire, err := c.Encode("small", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	big := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(11))})
	over, _ := big.Encode(strings.Repeat("a", 300), "alice", "")
	_, err = c.Decode(over, "alice", "")
	wantErr(t, err, ErrStateInvalid)
	if reasonText(err) != "over MaxBytes" {
		t.Fatalf("reason = %q", reasonText(err))
	}
	if _, err := c.Decode(wire, "alice", ""); err != nil {
		t.Fatal(err)
	}
	huge := "v1." + strings.Repeat("A", 64<<20)
	allocs := testing.AllocsPerRun(5, func() { _, err = big.Decode(huge, "alice", "") })
	wantErr(t, err, ErrStateInvalid)
	if allocs != 0 {
		t.Fatalf("refusing a 64 MiB state allocated %v times", allocs)
	}
}

func TestStateKeyRotation(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		oldKey, newKey := fixedKey(12), fixedKey(13)
		before := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, oldKey), Mode: mode, Binding: BindSubjectAndTool})
		after := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, newKey, oldKey), Mode: mode, Binding: BindSubjectAndTool})
		retired := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, newKey), Mode: mode, Binding: BindSubjectAndTool})
		old, _ := before.Encode("old", "alice", "t")
		if s, err := after.Decode(old, "alice", "t"); err != nil || s != "old" {
			t.Fatalf("mode %d: previous key: %q %v", mode, s, err)
		}
		// Binding is checked under the key that verified, so a rotated ring
		// still refuses a foreign subject.
		_, err := after.Decode(old, "mallory", "t")
		wantErr(t, err, ErrStateInvalid)
		fresh, _ := after.Encode("new", "alice", "t")
		if s, err := retired.Decode(fresh, "alice", "t"); err != nil || s != "new" {
			t.Fatalf("mode %d: primary did not seal: %v", mode, err)
		}
		_, err = retired.Decode(old, "alice", "t")
		wantErr(t, err, ErrStateInvalid)
	}
}

func TestNewRequestStateCodec(t *testing.T) {
	// Checks that a codec never picks
	// a silent random key: nil Keys is ErrNoKey, in every mode.
	t.Run("refuses nil keys", func(t *testing.T) {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Mode: mode, Replay: replay.NewMemoryStore(0)})
			wantErr(t, err, ErrNoKey)
			if c != nil || reasonText(err) != "RequestStateSecurity.Keys is nil (set Keys, e.g. from KeyringFromEnv, or KeySource)" {
				t.Fatalf("mode %d: codec %v, reason %q", mode, c, reasonText(err))
			}
		}
	})

	// Checks that a field that is
	// neither zero (the default) nor valid is ErrConfig, with a reason naming
	// it, and that zero means the default.
	t.Run("refuses invalid config", func(t *testing.T) {
		kr := mustKeyring(t, fixedKey(1))
		for _, tc := range []struct {
			name   string
			sec    RequestStateSecurity
			reason string
		}{
			{"unknown mode", RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: 2}, "unknown RequestStateSecurity.Mode"},
			{"unknown binding", RequestStateSecurity{Keys: kr, Binding: BindNone + 1}, "unknown RequestStateSecurity.Binding"},
			// No binding is a default: the caller chooses (see RequestStateBinding).
			{"unset binding", RequestStateSecurity{Keys: kr}, "RequestStateSecurity.Binding is unset (choose BindSubjectAndTool, BindSubject or BindNone)"},
			{"unset binding, encrypted", RequestStateSecurity{Keys: kr, Mode: Encrypted}, "RequestStateSecurity.Binding is unset (choose BindSubjectAndTool, BindSubject or BindNone)"},
			{"negative TTL", RequestStateSecurity{Binding: BindSubject, Keys: kr, TTL: -time.Nanosecond}, "negative RequestStateSecurity.TTL"},
			{"negative MaxBytes", RequestStateSecurity{Binding: BindSubject, Keys: kr, MaxBytes: -1}, "negative RequestStateSecurity.MaxBytes"},
			{"MaxBytes below an empty signed state", RequestStateSecurity{Binding: BindSubject, Keys: kr, MaxBytes: minStateWire(Signed) - 1}, "RequestStateSecurity.MaxBytes too small for any state"},
			{"MaxBytes below an empty encrypted state", RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: Encrypted, MaxBytes: minStateWire(Encrypted) - 1}, "RequestStateSecurity.MaxBytes too small for any state"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, err := NewRequestStateCodec(tc.sec)
				wantErr(t, err, ErrConfig)
				if c != nil || reasonText(err) != tc.reason {
					t.Fatalf("codec %v, reason %q, want %q", c, reasonText(err), tc.reason)
				}
			})
		}
		// Zero means the default; the smallest MaxBytes is exactly an empty state.
		clock := newTestClock()
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode, Now: clock.Now})
			if c.ttl != defaultStateTTL || c.maxBytes != defaultStateMaxBytes {
				t.Fatalf("mode %d: zero TTL/MaxBytes gave %v/%d", mode, c.ttl, c.maxBytes)
			}
			tight := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode, MaxBytes: minStateWire(mode), Now: clock.Now})
			w, err := tight.Encode("", "alice", "")
			if err != nil || len(w) != minStateWire(mode) {
				t.Fatalf("mode %d: empty state in the smallest MaxBytes: %d bytes, %v", mode, len(w), err)
			}
			_, err = tight.Encode("x", "alice", "")
			wantErr(t, err, ErrStateTooLarge)
		}
	})

	// Checks that a config with several faults is refused with one error
	// naming every one (the user who fixes Binding does not meet the
	// missing keys next), matching each fault's sentinel.
	t.Run("names every fault at once", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			sec   RequestStateSecurity
			is    []error
			names []string
		}{
			{"all zero", RequestStateSecurity{}, []error{ErrNoKey, ErrConfig},
				[]string{"Keys is nil (set Keys", "Binding is unset (choose BindSubjectAndTool"}},
			{"unknown mode without keys", RequestStateSecurity{Binding: BindSubject, Mode: 7}, []error{ErrNoKey, ErrConfig},
				[]string{"Keys is nil", "unknown RequestStateSecurity.Mode"}},
			{"every field wrong", RequestStateSecurity{Keys: &Keyring{}, Mode: 9, Binding: BindNone + 1, Audience: "a\x00", TTL: -1, MaxBytes: -1},
				[]error{ErrNoKey, ErrConfig},
				[]string{"6 configuration faults", "Keys holds no key", "unknown RequestStateSecurity.Mode", "unknown RequestStateSecurity.Binding",
					"Audience contains a NUL", "negative RequestStateSecurity.TTL", "negative RequestStateSecurity.MaxBytes"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, err := NewRequestStateCodec(tc.sec)
				if c != nil || err == nil {
					t.Fatalf("codec %v, err %v", c, err)
				}
				for _, want := range tc.is {
					wantErr(t, err, want)
				}
				for _, name := range tc.names {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("error %q does not name %q", err, name)
					}
				}
				if r := Reason(err); r != observe.ReasonNone {
					t.Errorf("Reason = %q: a configuration error is not a refusal of an input", r)
				}
			})
		}
	})

	// Checks that a Keyring with no
	// key (its zero value) is refused like a missing key, in both modes, rather
	// than accepted by the constructor and panicking in Encode.
	t.Run("refuses empty keyring", func(t *testing.T) {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: &Keyring{}, Mode: mode})
			wantErr(t, err, ErrNoKey)
			if c != nil {
				t.Fatalf("mode %d: codec returned with the error", mode)
			}
		}
	})
}

func TestStateEncodeRejectsInvalidUTF8(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(1))})
	w, err := c.Encode("\xff", "a", "")
	wantErr(t, err, ErrUnencodable)
	if w != "" || reasonText(err) == "" {
		t.Fatalf("wire %q, reason %q", w, reasonText(err))
	}
}

// TestZeroRequestStateCodecRefusesEveryCall checks that a RequestStateCodec
// not made by NewRequestStateCodec (its zero value, or a nil pointer)
// refuses every call with ErrNoKey, not a misleading rejection of the
// input ("over MaxBytes"), and never panics.
func TestZeroRequestStateCodecRefusesEveryCall(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	wire, err := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr}).Encode("x", "alice", "t")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*RequestStateCodec{"zero value": {}, "nil pointer": nil} {
		calls := map[string]func() (string, error){
			"Encode":        func() (string, error) { return c.Encode("", "alice", "t") },
			"Decode":        func() (string, error) { return c.Decode(wire, "alice", "t") },
			"Decode empty":  func() (string, error) { return c.Decode("", "alice", "t") },
			"DecodeContext": func() (string, error) { return c.DecodeContext(context.Background(), wire, "alice", "t") },
			"EncodeJSON":    func() (string, error) { return EncodeJSON(c, func() {}, "alice", "t") },
			"DecodeJSON":    func() (string, error) { return DecodeJSON[string](c, wire, "alice", "t") },
			"DecodeJSONContext": func() (string, error) {
				return DecodeJSONContext[string](context.Background(), c, wire, "alice", "t")
			},
		}
		for call, f := range calls {
			s, err := f()
			wantErr(t, err, ErrNoKey)
			if s != "" || errors.Is(err, ErrStateInvalid) || reasonText(err) != "codec not made by NewRequestStateCodec" {
				t.Fatalf("%s %s: %q, %v (reason %q)", name, call, s, err, reasonText(err))
			}
		}
	}
}

func TestStateErrorsNeverContainTheToken(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(14))})
	other := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(15))})
	wire, _ := other.Encode("private", "alice", "")
	_, err := c.Decode(wire, "alice", "")
	if err == nil || strings.Contains(err.Error(), wire[4:20]) || strings.Contains(err.Error(), "alice") {
		t.Fatalf("error %q echoes its input", err)
	}
}

func TestStateTypedJSON(t *testing.T) {
	type step struct {
		Question string   `json:"q"`
		Answers  []string `json:"a"`
	}
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(16)), Mode: mode})
		in := step{Question: "which repo?", Answers: []string{"ctoken"}}
		wire, err := EncodeJSON(c, in, "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeJSON[step](c, wire, "alice", "")
		if err != nil || out.Question != in.Question || len(out.Answers) != 1 {
			t.Fatalf("got %+v, %v", out, err)
		}
		out, err = DecodeJSON[step](c, wire, "mallory", "")
		wantErr(t, err, ErrStateInvalid)
		if out.Question != "" {
			t.Fatal("failed decode returned data")
		}
		n, err := DecodeJSON[int](c, wire, "alice", "")
		wantErr(t, err, ErrStateInvalid)
		if n != 0 {
			t.Fatal("mistyped decode returned data")
		}
	}
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(16))})
	w, err := EncodeJSON(c, func() {}, "a", "")
	var unsupported *json.UnsupportedTypeError
	if !errors.Is(err, ErrUnencodable) || !errors.As(err, &unsupported) || w != "" || reasonText(err) == "" {
		t.Fatalf("unencodable value: %q, %v (reason %q)", w, err, reasonText(err))
	}
}

func TestMCPTarget(t *testing.T) {
	if got := MCPTarget("tools/call", "search"); got != "tools/call\x00search" {
		t.Fatalf("MCPTarget = %q", got)
	}
}

func TestStateConcurrentEncodeDecode(t *testing.T) {
	kr := mustKeyring(t, fixedKey(17), fixedKey(18))
	codecs := []*RequestStateCodec{
		newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr}),
		newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: Encrypted, Binding: BindSubjectAndTool}),
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := codecs[g%2]
			subject := fmt.Sprint("user", g)
			for n := 0; n < 200; n++ {
				want := fmt.Sprint(g, ":", n)
				wire, err := c.Encode(want, subject, "t")
				if err != nil {
					errs <- err
					return
				}
				if got, err := c.Decode(wire, subject, "t"); err != nil || got != want {
					errs <- fmt.Errorf("round trip: %q %v", got, err)
					return
				}
				if _, err := c.Decode(wire, "other", "t"); err == nil {
					errs <- fmt.Errorf("foreign subject accepted")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestStateRefuses(t *testing.T) {
	t.Run("subject with NUL under bind subject and tool", func(t *testing.T) {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(19)), Mode: mode, Binding: BindSubjectAndTool})
			// ("alice\x00tools/call", "deploy") and ("alice", "tools/call\x00deploy")
			// would share the material "alice\x00tools/call\x00deploy".
			_, err := c.Encode("x", "alice\x00tools/call", "deploy")
			wantErr(t, err, ErrUnencodable)
			wire, err := c.Encode("x", "alice", MCPTarget("tools/call", "deploy"))
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Decode(wire, "alice\x00tools/call", "deploy")
			wantErr(t, err, ErrStateInvalid)
			if s != "" {
				t.Fatal("refused decode returned state")
			}
			// The tool may contain NUL; only the subject may not.
			if s, err := c.Decode(wire, "alice", MCPTarget("tools/call", "deploy")); err != nil || s != "x" {
				t.Fatalf("MCPTarget tool refused: %v", err)
			}
		}
		// Other bindings do not use a separator and accept such subjects.
		c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(19))})
		wire, err := c.Encode("x", "a\x00b", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Decode(wire, "a\x00b", ""); err != nil {
			t.Fatal(err)
		}
	})

	// Checks that a NUL at position 0 of
	// the subject is refused under BindSubjectAndTool like one further in:
	// otherwise ("\x00", "a\x00b") and ("\x00\x00a", "b") share the material
	// "\x00\x00a\x00b" and so a bind tag.
	t.Run("subject starting with NUL", func(t *testing.T) {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(30)), Mode: mode, Binding: BindSubjectAndTool})
			for _, subject := range []string{"\x00", "\x00\x00a", "\x00alice"} {
				w, err := c.Encode("x", subject, "a\x00b")
				wantErr(t, err, ErrUnencodable)
				if w != "" || reasonText(err) == "" {
					t.Fatalf("mode %d: subject %q: wire %q, reason %q", mode, subject, w, reasonText(err))
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
				if s != "" || reasonText(err) != "subject contains NUL (ambiguous under BindSubjectAndTool)" {
					t.Fatalf("mode %d: %q/%q: %q, reason %q", mode, tc.subject, tc.tool, s, reasonText(err))
				}
			}
		}
	})

	// Checks that the MAC segment
	// must be exactly 43 base64url characters: 42 characters and a line feed
	// (which encoding/base64 skips) decode to 31 bytes, and for a MAC whose last
	// byte is zero (1 state in 256) the zero-filled 32nd byte would make it a
	// second accepted spelling.
	t.Run("MAC of 42 characters and line feed", func(t *testing.T) {
		clock := newTestClock()
		c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(31)), Now: clock.Now})
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
	})

	// Seals every prefix of a
	// valid payload with the right key, so the parser sees it: each is refused
	// as ErrStateInvalid, without a panic, in both modes.
	t.Run("truncated payloads behind a valid key", func(t *testing.T) {
		key := fixedKey(35)
		clock := newTestClock()
		signed := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, key), Now: clock.Now})
		encrypted := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, key), Mode: Encrypted, Now: clock.Now})
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
					if s != "" || reasonText(err) != "malformed payload" {
						t.Fatalf("payload truncated to %q: %q, reason %q", p, s, reasonText(err))
					}
				}
			}
			// The whole payload is accepted (the negative expiry aside).
			if _, err := signed.Decode(refSigned(t, key, full), "alice", ""); err != nil && !errors.Is(err, ErrStateExpired) {
				t.Fatalf("whole payload %q: %v", full, err)
			}
		}
	})
}

func TestStateBindTagCache(t *testing.T) {
	// Kills state_bind.go `cacheable := len(material) <= maxCachedMaterial` → `<`,
	// `if int(sc.used) < len(sc.tags)` negated, and `sc.next + 1` → `-` (the
	// slots fill 0, 3, 2, 1, and the lookup scans only the first sc.used of
	// them, so the second material is cached where no lookup finds it
	// until the cache is full): the bind-tag cache (a
	// performance measure: a tag costs as much as the AES-GCM open it guards)
	// serves a repeated material of up to maxCachedMaterial bytes from the
	// cache, and does not cache a longer one. A hit is seen by marking the
	// cached copy of the tag: only a hit returns the mark.
	t.Run("serves repeated material up to the limit", func(t *testing.T) {
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
	})

	// Encodes for many
	// subjects and tools, more than the per-scratch cache holds, interleaved,
	// from several goroutines, and checks that every state opens for its own
	// subject and tool only, in both modes.
	t.Run("never crosses subjects or tools", func(t *testing.T) {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			t.Run(fmt.Sprint(mode), func(t *testing.T) {
				kr, err := NewKeyring(RandomKey())
				if err != nil {
					t.Fatal(err)
				}
				c, err := NewRequestStateCodec(RequestStateSecurity{Keys: kr, Mode: mode, Binding: BindSubjectAndTool})
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				errs := make(chan error, 4)
				for g := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range 100 {
							subject := fmt.Sprintf("subject-%d", (g+i)%7)
							tool := fmt.Sprintf("tool-%d", i%3)
							state := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
							w, err := c.Encode(state, subject, tool)
							if err != nil {
								errs <- err
								return
							}
							if got, err := c.Decode(w, subject, tool); err != nil || got != state {
								errs <- fmt.Errorf("own subject/tool: %q, %v", got, err)
								return
							}
							if _, err := c.Decode(w, subject+"x", tool); !errors.Is(err, ErrStateInvalid) {
								errs <- fmt.Errorf("other subject: %v", err)
								return
							}
							if _, err := c.Decode(w, subject, tool+"x"); !errors.Is(err, ErrStateInvalid) {
								errs <- fmt.Errorf("other tool: %v", err)
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			})
		}
	})

	// Checks that a state sealed under a
	// previous key still opens after rotation, and that a tag cached for one
	// key is never used for another.
	t.Run("is per key", func(t *testing.T) {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			t.Run(fmt.Sprint(mode), func(t *testing.T) {
				oldKey, newKey := RandomKey(), RandomKey()
				oldRing, _ := NewKeyring(oldKey)
				rotated, _ := NewKeyring(newKey, oldKey)
				oldCodec, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: oldRing, Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: rotated, Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				for range 3 { // warm the cache with the new key's tag first
					w, err := c.Encode("new", "alice", "")
					if err != nil {
						t.Fatal(err)
					}
					if got, err := c.Decode(w, "alice", ""); err != nil || got != "new" {
						t.Fatalf("new key: %q, %v", got, err)
					}
					w, err = oldCodec.Encode("old", "alice", "")
					if err != nil {
						t.Fatal(err)
					}
					if got, err := c.Decode(w, "alice", ""); err != nil || got != "old" {
						t.Fatalf("previous key: %q, %v", got, err)
					}
					if _, err := c.Decode(w, "bob", ""); !errors.Is(err, ErrStateInvalid) {
						t.Fatalf("previous key, other subject: %v", err)
					}
				}
			})
		}
	})

	// Checks that the bind
	// tag cache keys on a copy of the material: a subject string whose bytes
	// are later reused for another subject (as zero-copy HTTP frameworks do)
	// must not make the first subject's state open for the second.
	t.Run("survives reused subject memory", func(t *testing.T) {
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			t.Run(fmt.Sprint(mode), func(t *testing.T) {
				c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(21)), Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				buf := []byte("alice")
				subject := unsafe.String(&buf[0], len(buf))
				w, err := c.Encode("for alice", subject, "")
				if err != nil {
					t.Fatal(err)
				}
				if got, err := c.Decode(w, subject, ""); err != nil || got != "for alice" {
					t.Fatalf("alice: %q, %v", got, err)
				}
				copy(buf, "mallo") // the same memory now reads "mallo"
				if _, err := c.Decode(w, subject, ""); !errors.Is(err, ErrStateInvalid) {
					t.Fatalf("alice's state opened for %q: %v", subject, err)
				}
			})
		}
	})
}

// TestStateScratch pins the pooled working memory of Encode and Decode.
func TestStateScratch(t *testing.T) {
	// Kills state_bind.go `if cap(sc.buf) < n` → `<=` in getScratch and
	// `if cap(sc.buf) <= maxPooledScratch` negated in putScratch: Encode and
	// Decode return their working memory to the pool and reuse it when it is
	// large enough (a buffer of exactly the size needed included), so once warm
	// each allocates only the string it returns. The decoding codec only ever
	// decodes, so its pooled buffer has exactly the capacity Decode asks for.
	t.Run("encode and decode reuse their scratch", func(t *testing.T) {
		if raceEnabled {
			t.Skip("the race detector makes sync.Pool drop items at random")
		}
		kr := mustKeyring(t, fixedKey(1))
		state := strings.Repeat("s", 300) // Decode's scratch is over the 512-byte minimum
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			t.Run("mode "+strconv.Itoa(int(mode)), func(t *testing.T) {
				enc := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode})
				dec := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode})
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
	})

	// Kills state_bind.go `if cap(sc.buf) <= maxPooledScratch` → `<` and negated:
	// a scratch buffer of exactly maxPooledScratch bytes is kept for reuse and a
	// larger one is not, so a codec with a huge MaxBytes does not pin huge
	// buffers. Decode asks for 3*len(wire) + len(subject)+1+len(tool) +
	// bindTagLen bytes before it parses anything, so refusing a wire of the
	// right length sizes the buffer exactly.
	t.Run("of up to max pooled is reused and larger is not", func(t *testing.T) {
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
				c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(1)), MaxBytes: 1 << 20})
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
	})

	// Kills the arithmetic mutants of Encode's scratch estimate in state_encode.go
	// (matLen, payloadCap, sealedCap, wireCap) that make it too small, or (with
	// len(state)/8 made len(state)*8) far too large: the
	// estimate covers the bind material, the payload, the sealed payload and
	// the wire text of a state without escapes, so an Encode that finds no
	// pooled scratch allocates exactly its scratch, the scratch's buffer and
	// the result, and
	// a warm Encode or Decode of a state bound to a long subject and tool (too
	// long for the bind-tag cache) allocates only its result (Decode's "s" is
	// a one-byte string, which Go does not allocate).
	t.Run("encode scratch estimate covers every region", func(t *testing.T) {
		if raceEnabled {
			t.Skip("the race detector makes sync.Pool drop items at random")
		}
		kr := mustKeyring(t, fixedKey(1))
		for _, mode := range []RequestStateMode{Signed, Encrypted} {
			for _, size := range []int{0, 100, 1000, 4000, 12000} {
				t.Run(fmt.Sprintf("mode %d, cold Encode of %d bytes", mode, size), func(t *testing.T) {
					state := strings.Repeat("s", size)
					c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode})
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
	})
}

// Kills state_decode.go `!ok || len(macText) != b64.EncodedLen(macSize)` → `&&`:
// a signed state whose MAC text is not exactly 43 characters is refused as
// malformed framing, before anything is decoded.
func TestStateSignedMACTextOfWrongLengthIsMalformedFraming(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(1))})
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
			if reasonText(err) != "malformed framing" {
				t.Fatalf("Reason = %q, want %q", reasonText(err), "malformed framing")
			}
			if s != "" {
				t.Fatalf("state %q returned with the error", s)
			}
		})
	}
}

// Kills state_decode.go `n < gcmNonceSize+gcmTagSize` with `+` made `-`: an
// encrypted state too short to hold a GCM nonce and tag is refused as
// malformed framing before any key is tried, and one just long enough
// (an empty ciphertext) reaches decryption.
func TestStateEncryptedShorterThanNonceAndTagIsMalformedFraming(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(1)), Mode: Encrypted})
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
			if reasonText(err) != tc.reason {
				t.Fatalf("Reason = %q, want %q", reasonText(err), tc.reason)
			}
			if s != "" {
				t.Fatalf("state %q returned with the error", s)
			}
		})
	}
}

// TestEncodeRefusesHugeStateBeforeEncoding checks that a state too large
// for MaxBytes is refused up front.
func TestEncodeRefusesHugeStateBeforeEncoding(t *testing.T) {
	c, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(21)), MaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Encode(string(bytes.Repeat([]byte("a"), 1<<20)), "s", ""); !errors.Is(err, ErrStateTooLarge) {
		t.Fatalf("err = %v, want ErrStateTooLarge", err)
	}
	// Escapes make the payload grow beyond the estimate; still exact.
	quoted := string(bytes.Repeat([]byte{'"', 1}, 40))
	w, err := c.Encode(quoted, "s", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Decode(w, "s", ""); err != nil || got != quoted {
		t.Fatalf("Decode = %q, %v", got, err)
	}
}

// TestStateBindingSubjectWithNULIsNotAnotherSubject checks that, under
// BindSubject, a subject is never confused with a prefix of itself cut at
// a NUL byte, whichever is cached first.
func TestStateBindingSubjectWithNULIsNotAnotherSubject(t *testing.T) {
	c, err := NewRequestStateCodec(RequestStateSecurity{Keys: mustKeyring(t, fixedKey(21)), Binding: BindSubject})
	if err != nil {
		t.Fatal(err)
	}
	long, short := "a\x00b", "a"
	for _, order := range [][2]string{{long, short}, {short, long}} {
		w, err := c.Encode("x", order[0], "b")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Decode(w, order[0], "b"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Decode(w, order[1], "b"); !errors.Is(err, ErrStateInvalid) {
			t.Fatalf("state for %q opened for %q: %v", order[0], order[1], err)
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
		big := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode, Now: clock.Now})
		state := strings.Repeat("q", 200)
		wire, err := big.Encode(state, "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		exact := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode, MaxBytes: len(wire), Now: clock.Now})
		under := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: kr, Mode: mode, MaxBytes: len(wire) - 1, Now: clock.Now})
		if s, err := exact.Decode(wire, "alice", ""); err != nil || s != state {
			t.Fatalf("mode %d: wire of exactly MaxBytes: %v", mode, err)
		}
		w, err := exact.Encode(state, "alice", "")
		if err != nil || len(w) != len(wire) {
			t.Fatalf("mode %d: encoding exactly MaxBytes: %d bytes, %v", mode, len(w), err)
		}
		s, err := under.Decode(wire, "alice", "")
		wantErr(t, err, ErrStateInvalid)
		if s != "" || reasonText(err) != "over MaxBytes" {
			t.Fatalf("mode %d: one over: %q, reason %q", mode, s, reasonText(err))
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
			c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, key), Mode: mode, Now: clock.Now})
			wire, err := c.Encode(state, "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if s, err := c.Decode(wire, "alice", ""); err != nil || s != state {
				t.Fatalf("mode %d: round trip of %d escapes: %v", mode, len(state), err)
			}
			tag := vecBindTag(key, BindSubject, "alice", "")
			want := vecStatePayload(state, clock.Now().Add(defaultStateTTL).Unix(), tag)
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

// TestStateTamperedEncryptedReason pins the log reason of an encrypted
// state that does not open.
func TestStateTamperedEncryptedReason(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Binding: BindSubject, Keys: mustKeyring(t, fixedKey(38)), Mode: Encrypted})
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
	if s != "" || reasonText(err) != "decryption failed (tampered, other key, or other subject/tool)" {
		t.Fatalf("tampered encrypted state: %q, reason %q", s, reasonText(err))
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
		"nil keys": func() error { _, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject}); return err },
		"empty keyring": func() error {
			_, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: &Keyring{}})
			return err
		},
		"negative TTL": func() error {
			_, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: kr, TTL: -1})
			return err
		},
		"zero codec":           func() error { _, err := (&RequestStateCodec{}).Decode(wire, "alice", "t"); return err },
		"not UTF-8":            func() error { _, err := c.Encode("\xff", "alice", "t"); return err },
		"NUL subject":          func() error { _, err := c.Encode("x", "a\x00", "t"); return err },
		"too large":            func() error { _, err := c.Encode(strings.Repeat("x", defaultStateMaxBytes), "alice", "t"); return err },
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
		if err == nil || reasonText(err) == "" {
			t.Errorf("%s: error %v has no reason", name, err)
		}
	}
}

const hugeInput = 64 << 20

func TestDecodersRefuseHugeInputWithoutAllocating(t *testing.T) {
	huge := strings.Repeat("A", hugeInput)
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	signed := vecCodec(t, Signed, BindSubject, vecNow, vecKey)
	encrypted := vecCodec(t, Encrypted, BindSubject, vecNow, vecKey)
	hugeSigned := signedPrefix + huge + "." + strings.Repeat("A", 43)
	hugeEncrypted := encryptedPrefix + huge
	// The generic helpers may allocate their result variable up front (a
	// few bytes, whatever the input); the decoders themselves allocate
	// nothing at all.
	for _, tc := range []struct {
		name   string
		run    func() error
		want   error
		allocs int
	}{
		{"CursorIssuer.Verify", func() error { _, err := iss.Verify(huge, CursorScope{ToolID: "t"}); return err }, ErrCursorInvalid, 0},
		{"VerifyState", func() error {
			_, _, err := VerifyState[map[string]any](iss, huge, CursorScope{ToolID: "t"})
			return err
		}, ErrCursorInvalid, 1},
		{"RequestStateCodec.Decode signed", func() error { _, err := signed.Decode(hugeSigned, "alice", ""); return err }, ErrStateInvalid, 0},
		{"RequestStateCodec.Decode encrypted", func() error { _, err := encrypted.Decode(hugeEncrypted, "alice", ""); return err }, ErrStateInvalid, 0},
		{"DecodeJSON", func() error { _, err := DecodeJSON[map[string]any](signed, hugeSigned, "alice", ""); return err }, ErrStateInvalid, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if allocs := testing.AllocsPerRun(10, func() { _ = tc.run() }); allocs > float64(tc.allocs) {
				t.Errorf("%v allocations refusing a 64 MiB input, want at most %d", allocs, tc.allocs)
			}
			if n := bytesPerRun(10, func() { _ = tc.run() }); n > 64*uint64(tc.allocs) {
				t.Errorf("%d bytes allocated refusing a 64 MiB input, want at most %d", n, 64*tc.allocs)
			}
		})
	}
}

func TestDecodersAllocateBoundedMemoryWithinTheCap(t *testing.T) {
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	p := CursorPayload{CursorScope: CursorScope{ToolID: "t", CallerID: "c", Args: Fingerprint{1}}, State: seqBytes(0, MaxOpaqueStateBytes)}
	cursor, err := iss.Issue(p)
	if err != nil {
		t.Fatal(err)
	}
	codecs := map[RequestStateMode]*RequestStateCodec{
		Signed:    vecCodec(t, Signed, BindSubject, vecNow, vecKey),
		Encrypted: vecCodec(t, Encrypted, BindSubject, vecNow, vecKey),
	}
	// The largest state that fits the default cap, in each mode.
	wires := map[RequestStateMode]string{}
	for mode, c := range codecs {
		lo, hi := 0, defaultStateMaxBytes
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if _, err := c.Encode(strings.Repeat("x", mid), "alice", ""); err == nil {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		w, err := c.Encode(strings.Repeat("x", lo), "alice", "")
		if err != nil || len(w) < defaultStateMaxBytes-8 {
			t.Fatalf("%v: largest state %d bytes, wire %d bytes: %v", mode, lo, len(w), err)
		}
		wires[mode] = w
	}

	// Bounds: a cursor is at most MaxCursorBytes, so its decode may cost a
	// small constant; a request state may cost a few copies of its capped
	// input (the base64 source and result, the parsed state string and its
	// growth) plus a constant. Measured at the time of writing: about 4.4x
	// the cap signed, 5.1x encrypted.
	const constant = 4 << 10
	for _, tc := range []struct {
		name  string
		run   func() error
		limit uint64
	}{
		{"CursorIssuer.Verify", func() error {
			_, err := iss.Verify(cursor, CursorScope{ToolID: "t", CallerID: "c", Args: Fingerprint{1}})
			return err
		}, constant},
		{"RequestStateCodec.Decode signed", func() error {
			_, err := codecs[Signed].Decode(wires[Signed], "alice", "")
			return err
		}, 6*defaultStateMaxBytes + constant},
		{"RequestStateCodec.Decode encrypted", func() error {
			_, err := codecs[Encrypted].Decode(wires[Encrypted], "alice", "")
			return err
		}, 6*defaultStateMaxBytes + constant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); err != nil {
				t.Fatal(err)
			}
			n := bytesPerRun(20, func() { _ = tc.run() })
			t.Logf("%d bytes per decode", n)
			if n > tc.limit {
				t.Errorf("%d bytes per decode, limit %d", n, tc.limit)
			}
		})
	}
}

// TestDecodeRefusesHostilePayloads seals hostile payloads with the codec's
// own keys, so the payload parser rather than the MAC refuses them.
func TestDecodeRefusesHostilePayloads(t *testing.T) {
	tag := vecBindTag(vecKey, BindSubject, "alice", "")
	exp := "1767323345"
	for _, tc := range []struct {
		name    string
		payload string
		want    error
	}{
		{"duplicate member", `{"s":"a","s":"b","exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"unknown member", `{"s":"a","exp":` + exp + `,"b":"` + tag + `","x":1}`, ErrStateInvalid},
		{"missing exp", `{"s":"a","b":"` + tag + `"}`, ErrStateInvalid},
		{"state not a string", `{"s":{"a":1},"exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"deeply nested state", `{"s":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `,"exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp overflows int64", `{"s":"a","exp":9223372036854775808,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp with fraction", `{"s":"a","exp":` + exp + `.5,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp with exponent", `{"s":"a","exp":1e10,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp with leading zero", `{"s":"a","exp":0` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp as string", `{"s":"a","exp":"` + exp + `","b":"` + tag + `"}`, ErrStateInvalid},
		{"lone surrogate in state", `{"s":"\ud800","exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"invalid UTF-8 in state", "{\"s\":\"\xff\",\"exp\":" + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"trailing garbage", `{"s":"a","exp":` + exp + `,"b":"` + tag + `"}x`, ErrStateInvalid},
		{"array", `["a",` + exp + `,"` + tag + `"]`, ErrStateInvalid},
		{"other bind tag", `{"s":"a","exp":` + exp + `,"b":"` + vecBindTag(vecKey, BindSubject, "mallory", "") + `"}`, ErrStateInvalid},
		{"most negative exp", `{"s":"a","exp":-9223372036854775808,"b":"` + tag + `"}`, ErrStateExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []RequestStateMode{Signed, Encrypted} {
				wire := vecSignedWire(vecKey, []byte(tc.payload))
				if mode == Encrypted {
					wire = vecEncryptedWire(t, vecKey, seqBytes(9, gcmNonceSize), []byte(tc.payload), tag)
				}
				s, err := vecCodec(t, mode, BindSubject, vecNow, vecKey).Decode(wire, "alice", "")
				if !errors.Is(err, tc.want) || s != "" {
					t.Errorf("%s: Decode = %q, %v; want %v", modeNames[mode], s, err, tc.want)
				}
			}
		})
	}
}

// TestStateAudience pins RequestStateSecurity.Audience: a state opens only in
// a codec with the same audience, in both modes; a codec without an audience
// neither opens an audience-bound state nor has one opened elsewhere; and
// the wire keeps its length (the audience is bound, never carried).
func TestStateAudience(t *testing.T) {
	kr := mustKeyring(t, fixedKey(7))
	for _, m := range stateModes {
		for _, binding := range []RequestStateBinding{BindSubject, BindSubjectAndTool, BindNone} {
			t.Run(fmt.Sprintf("%s/%d", m.name, binding), func(t *testing.T) {
				codec := func(aud string) *RequestStateCodec {
					return newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: m.mode, Binding: binding, Audience: aud})
				}
				a, b, none := codec("billing.prod"), codec("billing.staging"), codec("")
				if a.Audience() != "billing.prod" || none.Audience() != "" || a.Binding() != binding {
					t.Fatalf("accessors: %q %q %v", a.Audience(), none.Audience(), a.Binding())
				}
				wireA, err := a.Encode("state", "alice", "t1")
				if err != nil {
					t.Fatal(err)
				}
				wireNone, err := none.Encode("state", "alice", "t1")
				if err != nil {
					t.Fatal(err)
				}
				if len(wireA) != len(wireNone) {
					t.Errorf("audience changed the wire length: %d, without %d", len(wireA), len(wireNone))
				}
				if s, err := a.Decode(wireA, "alice", "t1"); err != nil || s != "state" {
					t.Fatalf("own audience: %q, %v", s, err)
				}
				for name, tc := range map[string]struct {
					c    *RequestStateCodec
					wire string
				}{
					"other audience":                  {b, wireA},
					"no audience opens audience":      {none, wireA},
					"audience opens no-audience wire": {a, wireNone},
				} {
					s, err := tc.c.Decode(tc.wire, "alice", "t1")
					if !errors.Is(err, ErrStateInvalid) || s != "" {
						t.Errorf("%s: %q, %v; want ErrStateInvalid", name, s, err)
					}
				}
			})
		}
	}
	t.Run("NUL in audience is ErrConfig", func(t *testing.T) {
		// The first byte too: kills state.go `IndexByte(...) >= 0` → `> 0`.
		for _, audience := range []string{"a\x00b", "\x00ab", "ab\x00"} {
			_, err := NewRequestStateCodec(RequestStateSecurity{Binding: BindSubject, Keys: kr, Audience: audience})
			wantErr(t, err, ErrConfig)
			if reasonText(err) != "RequestStateSecurity.Audience contains a NUL byte" {
				t.Fatalf("audience %q: reason %q", audience, reasonText(err))
			}
		}
	})
	t.Run("KeySource binds the audience too", func(t *testing.T) {
		src, err := NewKeySource(kr)
		if err != nil {
			t.Fatal(err)
		}
		rot := newTestCodec(t, RequestStateSecurity{KeySource: src, Binding: BindSubjectAndTool, Audience: "a"})
		static := newTestCodec(t, RequestStateSecurity{Keys: kr, Binding: BindSubjectAndTool, Audience: "a"})
		other := newTestCodec(t, RequestStateSecurity{KeySource: src, Binding: BindSubjectAndTool, Audience: "b"})
		w, err := static.Encode("s", "alice", "t")
		if err != nil {
			t.Fatal(err)
		}
		if s, err := rot.Decode(w, "alice", "t"); err != nil || s != "s" {
			t.Fatalf("same audience through a KeySource: %q, %v", s, err)
		}
		if _, err := other.Decode(w, "alice", "t"); !errors.Is(err, ErrStateInvalid) {
			t.Fatalf("other audience through a KeySource: %v", err)
		}
	})
	t.Run("no allocation for the audience", func(t *testing.T) {
		// The bind material (audience, NUL, subject, NUL, tool) has room
		// reserved in the pooled scratch: an audience costs no allocation,
		// even for material too long for the tag cache.
		if raceEnabled {
			t.Skip("the race detector makes sync.Pool drop items at random")
		}
		for _, m := range stateModes {
			c := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: m.mode, Binding: BindSubjectAndTool, Audience: strings.Repeat("a", 200)})
			subject, tool := strings.Repeat("u", 300), strings.Repeat("t", 300)
			w, err := c.Encode("s", subject, tool)
			if err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(50, func() { _, _ = c.Encode("s", subject, tool) }); n != 1 {
				t.Errorf("%s: Encode allocated %v times, want 1 (the result)", m.name, n)
			}
			if n := testing.AllocsPerRun(50, func() { _, _ = c.Decode(w, subject, tool) }); n > 1 {
				t.Errorf("%s: Decode allocated %v times, want 1 (the result)", m.name, n)
			}
		}
	})
	t.Run("material is audience NUL binding material", func(t *testing.T) {
		c := newTestCodec(t, RequestStateSecurity{Keys: kr, Binding: BindSubjectAndTool, Audience: "aud"})
		want := hex.EncodeToString(vecHMAC(vecHKDF(fixedKey(7), stateAudienceBindLabel), []byte("aud\x00alice\x00t1")))
		if got := string(c.bindTag(nil, 0, "alice", "t1")); got != want {
			t.Fatalf("bind tag %s, want %s", got, want)
		}
	})
}

// TestStateCodecAccessors pins Binding, Audience and Ready, which wrappers
// ask instead of probing the codec.
func TestStateCodecAccessors(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(8)), Binding: BindSubjectAndTool, Audience: "x"})
	if c.Ready() != nil || c.Binding() != BindSubjectAndTool || c.Audience() != "x" {
		t.Fatalf("made codec: %v %v %q", c.Ready(), c.Binding(), c.Audience())
	}
	for name, z := range map[string]*RequestStateCodec{"zero value": {}, "nil pointer": nil} {
		t.Run(name, func(t *testing.T) {
			wantErr(t, z.Ready(), ErrNoKey)
			if z.Binding() != 0 || z.Audience() != "" {
				t.Fatalf("%v %q", z.Binding(), z.Audience())
			}
		})
	}
}

// TestStateSealCount pins the v1e. message budget: an Encrypted codec
// counts the states its primary key seals and reports
// observe.OutcomeRotateKey at the first threshold and at every doubling
// after it (the threshold is lowered here from 2^28 to 4); a KeySource
// swap that keeps the primary keeps its count, a new primary starts at 0,
// and a Signed codec counts nothing.
func TestStateSealCount(t *testing.T) {
	var got []uint64
	obs := observe.ObserverFunc(func(e observe.Event) {
		if e.Outcome == observe.OutcomeRotateKey {
			if e.Kind != observe.KindRequestState || e.Key != observe.KeyPrimary {
				t.Errorf("event %+v", e)
			}
			got = append(got, e.Seals)
		} else if e.Seals != 0 {
			t.Errorf("Seals %d on %v", e.Seals, e.Outcome)
		}
	})
	seal := func(c *RequestStateCodec, n int) {
		t.Helper()
		for range n {
			if _, err := c.Encode("s", "alice", "t"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("thresholds", func(t *testing.T) {
		got = nil
		c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(40)), Mode: Encrypted, Binding: BindSubject, Observer: obs})
		if c.sealWarn != sealWarnFloor || sealWarnFloor != 1<<28 {
			t.Fatalf("threshold %d, want 2^28", c.sealWarn)
		}
		c.sealWarn = 4
		seal(c, 33)
		if !slices.Equal(got, []uint64{4, 8, 16, 32}) {
			t.Fatalf("reported at %v, want [4 8 16 32]", got)
		}
	})
	t.Run("swap keeps the primary's count", func(t *testing.T) {
		got = nil
		a, b := mustKeyring(t, fixedKey(41)), mustKeyring(t, fixedKey(42))
		src, err := NewKeySource(a)
		if err != nil {
			t.Fatal(err)
		}
		c := newTestCodec(t, RequestStateSecurity{KeySource: src, Mode: Encrypted, Binding: BindSubject, Observer: obs})
		c.sealWarn = 4
		seal(c, 3)
		// The same primary with a previous key behind it: the count goes on.
		if err := src.Swap(mustKeyring(t, fixedKey(41), fixedKey(42))); err != nil {
			t.Fatal(err)
		}
		seal(c, 1)
		if !slices.Equal(got, []uint64{4}) {
			t.Fatalf("reported at %v, want [4]", got)
		}
		// A new primary starts at 0.
		if err := src.Swap(b); err != nil {
			t.Fatal(err)
		}
		seal(c, 3)
		if !slices.Equal(got, []uint64{4}) {
			t.Fatalf("reported at %v after a new primary's 3 seals, want [4]", got)
		}
		seal(c, 1)
		if !slices.Equal(got, []uint64{4, 4}) {
			t.Fatalf("reported at %v, want [4 4]", got)
		}
	})
	t.Run("signed counts nothing", func(t *testing.T) {
		got = nil
		c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(43)), Binding: BindSubject, Observer: obs})
		c.sealWarn = 1
		seal(c, 8)
		if len(got) != 0 {
			t.Fatalf("signed codec reported %v", got)
		}
	})
}
