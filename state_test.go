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
	"strings"
	"sync"
	"testing"
	"time"

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

// refStateGCM is the hand-written AES-GCM (gcm_ref_test.go) under the
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
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Now: clock.Now})
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
			if s != "" || Reason(err) == "" {
				t.Fatalf("mode %d: %q/%q: state %q, reason %q", mode, other.subject, other.tool, s, Reason(err))
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
		c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(7)), Mode: mode, TTL: time.Minute, Now: clock.Now})
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
		c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(8)), Mode: mode})
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
	signed := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Now: clock.Now})
	encrypted := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, key), Mode: Encrypted, Now: clock.Now})
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
	signed := newTestCodec(t, RequestStateSecurity{Keys: kr})
	encrypted := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: Encrypted})
	s, _ := signed.Encode("x", "a", "")
	e, _ := encrypted.Encode("x", "a", "")
	_, err := encrypted.Decode(s, "a", "")
	wantErr(t, err, ErrStateInvalid)
	_, err = signed.Decode(e, "a", "")
	wantErr(t, err, ErrStateInvalid)
}

func TestStateSizeCap(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(11)), MaxBytes: 300})
	_, err := c.Encode(strings.Repeat("a", 300), "alice", "")
	wantErr(t, err, ErrStateTooLarge)
	wire, err := c.Encode("small", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	big := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(11))})
	over, _ := big.Encode(strings.Repeat("a", 300), "alice", "")
	_, err = c.Decode(over, "alice", "")
	wantErr(t, err, ErrStateInvalid)
	if Reason(err) != "over MaxBytes" {
		t.Fatalf("reason = %q", Reason(err))
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

// TestNewRequestStateCodecRefusesNilKeys checks that a codec never picks
// a silent random key: nil Keys is ErrNoKey, in every mode.
func TestNewRequestStateCodecRefusesNilKeys(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c, err := NewRequestStateCodec(RequestStateSecurity{Mode: mode, Replay: replay.NewMemoryStore(0)})
		wantErr(t, err, ErrNoKey)
		if c != nil || Reason(err) != "RequestStateSecurity.Keys is nil" {
			t.Fatalf("mode %d: codec %v, reason %q", mode, c, Reason(err))
		}
	}
}

func TestStateEncodeRejectsInvalidUTF8(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(1))})
	w, err := c.Encode("\xff", "a", "")
	wantErr(t, err, ErrUnencodable)
	if w != "" || Reason(err) == "" {
		t.Fatalf("wire %q, reason %q", w, Reason(err))
	}
}

// TestNewRequestStateCodecRefusesInvalidConfig checks that a field that is
// neither zero (the default) nor valid is ErrConfig, with a reason naming
// it, and that zero means the default.
func TestNewRequestStateCodecRefusesInvalidConfig(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	for _, tc := range []struct {
		name   string
		sec    RequestStateSecurity
		reason string
	}{
		{"unknown mode", RequestStateSecurity{Keys: kr, Mode: 2}, "unknown RequestStateSecurity.Mode"},
		{"unknown binding", RequestStateSecurity{Keys: kr, Binding: 3}, "unknown RequestStateSecurity.Binding"},
		{"negative TTL", RequestStateSecurity{Keys: kr, TTL: -time.Nanosecond}, "negative RequestStateSecurity.TTL"},
		{"negative MaxBytes", RequestStateSecurity{Keys: kr, MaxBytes: -1}, "negative RequestStateSecurity.MaxBytes"},
		{"MaxBytes below an empty signed state", RequestStateSecurity{Keys: kr, MaxBytes: minStateWire(Signed) - 1}, "RequestStateSecurity.MaxBytes too small for any state"},
		{"MaxBytes below an empty encrypted state", RequestStateSecurity{Keys: kr, Mode: Encrypted, MaxBytes: minStateWire(Encrypted) - 1}, "RequestStateSecurity.MaxBytes too small for any state"},
		{"unknown mode without keys", RequestStateSecurity{Mode: 7}, "unknown RequestStateSecurity.Mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewRequestStateCodec(tc.sec)
			wantErr(t, err, ErrConfig)
			if c != nil || Reason(err) != tc.reason {
				t.Fatalf("codec %v, reason %q, want %q", c, Reason(err), tc.reason)
			}
		})
	}
	// Zero means the default; the smallest MaxBytes is exactly an empty state.
	clock := newTestClock()
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode, Now: clock.Now})
		if c.ttl != DefaultStateTTL || c.maxBytes != DefaultStateMaxBytes {
			t.Fatalf("mode %d: zero TTL/MaxBytes gave %v/%d", mode, c.ttl, c.maxBytes)
		}
		tight := newTestCodec(t, RequestStateSecurity{Keys: kr, Mode: mode, MaxBytes: minStateWire(mode), Now: clock.Now})
		w, err := tight.Encode("", "alice", "")
		if err != nil || len(w) != minStateWire(mode) {
			t.Fatalf("mode %d: empty state in the smallest MaxBytes: %d bytes, %v", mode, len(w), err)
		}
		_, err = tight.Encode("x", "alice", "")
		wantErr(t, err, ErrStateTooLarge)
	}
}

// TestNewRequestStateCodecRefusesEmptyKeyring checks that a Keyring with no
// key (its zero value) is refused like a missing key, in both modes, rather
// than accepted by the constructor and panicking in Encode.
func TestNewRequestStateCodecRefusesEmptyKeyring(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		c, err := NewRequestStateCodec(RequestStateSecurity{Keys: &Keyring{}, Mode: mode})
		wantErr(t, err, ErrNoKey)
		if c != nil {
			t.Fatalf("mode %d: codec returned with the error", mode)
		}
	}
}

// TestZeroRequestStateCodecRefusesEveryCall checks that a RequestStateCodec
// not made by NewRequestStateCodec (its zero value, or a nil pointer)
// refuses every call with ErrNoKey, not a misleading rejection of the
// input ("over MaxBytes"), and never panics.
func TestZeroRequestStateCodecRefusesEveryCall(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	wire, err := newTestCodec(t, RequestStateSecurity{Keys: kr}).Encode("x", "alice", "t")
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
			if s != "" || errors.Is(err, ErrStateInvalid) || Reason(err) != "codec not made by NewRequestStateCodec" {
				t.Fatalf("%s %s: %q, %v (reason %q)", name, call, s, err, Reason(err))
			}
		}
	}
}

func TestStateErrorsNeverContainTheToken(t *testing.T) {
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(14))})
	other := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(15))})
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
		c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(16)), Mode: mode})
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
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(16))})
	w, err := EncodeJSON(c, func() {}, "a", "")
	var unsupported *json.UnsupportedTypeError
	if !errors.Is(err, ErrUnencodable) || !errors.As(err, &unsupported) || w != "" || Reason(err) == "" {
		t.Fatalf("unencodable value: %q, %v (reason %q)", w, err, Reason(err))
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
		newTestCodec(t, RequestStateSecurity{Keys: kr}),
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

func TestStateRefusesSubjectWithNULUnderBindSubjectAndTool(t *testing.T) {
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
	c := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, fixedKey(19))})
	wire, err := c.Encode("x", "a\x00b", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decode(wire, "a\x00b", ""); err != nil {
		t.Fatal(err)
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
		_, err := NewRequestStateCodec(RequestStateSecurity{Keys: kr, Audience: "a\x00b"})
		wantErr(t, err, ErrConfig)
		if Reason(err) != "RequestStateSecurity.Audience contains a NUL byte" {
			t.Fatalf("reason %q", Reason(err))
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
			if z.Binding() != BindSubject || z.Audience() != "" {
				t.Fatalf("%v %q", z.Binding(), z.Audience())
			}
		})
	}
}
