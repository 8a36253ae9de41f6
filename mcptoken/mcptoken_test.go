package mcptoken

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

// sum is the lowercase hex SHA-256 of canonical JSON text written out by
// hand, so the wrapper is pinned independently of ctoken.ArgsFingerprint.
func sum(canonical string) string {
	s := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(s[:])
}

func TestWrapArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"writes fingerprint and state", wrapArgsWritesFingerprintAndState},
		{"takes absent arguments as empty object", wrapArgsTakesAbsentArgumentsAsEmptyObject},
		{"refuses state that is not UTF-8", wrapArgsRefusesStateThatIsNotUTF8},
		{"refuses arguments that are not JSON", wrapArgsRefusesArgumentsThatAreNotJSON},
		{"unwrap args returns state for the same arguments", unwrapArgsReturnsStateForTheSameArguments},
		{"unwrap args rejects other arguments and other spellings", unwrapArgsRejectsOtherArgumentsAndOtherSpellings},
	} {
		t.Run(tc.name, tc.test)
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"refuse state maps codec errors to codes", refuseStateMapsCodecErrorsToCodes},
		{"refuse cursor maps verify errors to codes", refuseCursorMapsVerifyErrorsToCodes},
		{"refuse state of nil is no token refusal", refuseStateOfNilIsNoTokenRefusal},
		{"known code accepts only ctoken codes", knownCodeAcceptsOnlyCtokenCodes},
		{"refuse state carries the busy hint", refuseStateCarriesTheBusyHint},
	} {
		t.Run(tc.name, tc.test)
	}
}

// The sealed text is byte for byte what both integrations have always
// sealed: {"a":<hex SHA-256 of the JCS arguments>,"s":<state>}.
func wrapArgsWritesFingerprintAndState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  any
		state string
		want  string
	}{
		{"raw text, keys reordered", json.RawMessage(` {"b":1, "a":[1,2]} `), "st",
			`{"a":"` + sum(`{"a":[1,2],"b":1}`) + `","s":"st"}`},
		{"bytes", []byte(`{"target":"prod"}`), "step 1",
			`{"a":"` + sum(`{"target":"prod"}`) + `","s":"step 1"}`},
		{"Go value", map[string]any{"n": 3}, `q"<`,
			`{"a":"` + sum(`{"n":3}`) + `","s":"q\"\u003c"}`},
		{"empty state", json.RawMessage(`{}`), "",
			`{"a":"` + sum(`{}`) + `","s":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WrapArgs(tc.args, tc.state)
			if err != nil || got != tc.want {
				t.Fatalf("WrapArgs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Absent arguments and {} are the same call: both integrations have always
// fingerprinted a missing or blank arguments member as {}.
func wrapArgsTakesAbsentArgumentsAsEmptyObject(t *testing.T) {
	want := `{"a":"` + sum(`{}`) + `","s":"s"}`
	for _, args := range []any{nil, []byte(nil), []byte(" \n"), json.RawMessage(nil), json.RawMessage("\t"), json.RawMessage("{}"), map[string]any{}} {
		got, err := WrapArgs(args, "s")
		if err != nil || got != want {
			t.Errorf("WrapArgs(%#v) = %q, %v; want %q", args, got, err, want)
		}
	}
	// null is an argument value, not an absence.
	if got, _ := WrapArgs(json.RawMessage("null"), "s"); got == want {
		t.Error("null arguments fingerprint as {}")
	}
}

// encoding/json would replace invalid bytes with U+FFFD and seal an altered
// state; WrapArgs refuses instead, as the codec does.
func wrapArgsRefusesStateThatIsNotUTF8(t *testing.T) {
	got, err := WrapArgs(nil, "step\xff1")
	if !errors.Is(err, ctoken.ErrUnencodable) || got != "" {
		t.Fatalf("WrapArgs = %q, %v; want ErrUnencodable", got, err)
	}
	if strings.Contains(err.Error(), "step") {
		t.Errorf("error %q echoes the state", err)
	}
}

func wrapArgsRefusesArgumentsThatAreNotJSON(t *testing.T) {
	for _, args := range []any{[]byte(`{"a":`), json.RawMessage(`{} {}`), func() {}} {
		if got, err := WrapArgs(args, "s"); err == nil || got != "" {
			t.Errorf("WrapArgs(%T) = %q, %v; want an error", args, got, err)
		}
	}
}

func unwrapArgsReturnsStateForTheSameArguments(t *testing.T) {
	sealed, err := WrapArgs([]byte(`{"q":"x","n":1}`), "page 2")
	if err != nil {
		t.Fatal(err)
	}
	// The same arguments in another key order and spacing, or as a Go value.
	for _, args := range []any{json.RawMessage(`{"n":1,"q":"x"}`), []byte(" {\"q\" : \"x\", \"n\": 1.0} "), map[string]any{"q": "x", "n": 1}} {
		got, err := UnwrapArgs(args, sealed)
		if err != nil || got != "page 2" {
			t.Errorf("UnwrapArgs(%v) = %q, %v", args, got, err)
		}
	}
	empty, _ := WrapArgs(nil, "s")
	if got, err := UnwrapArgs(json.RawMessage(" "), empty); err != nil || got != "s" {
		t.Errorf("blank arguments against a state sealed without arguments: %q, %v", got, err)
	}
}

// Every mismatch or malformation is ErrArgsMismatch with no state, and only
// the exact text WrapArgs writes is accepted (one spelling).
func unwrapArgsRejectsOtherArgumentsAndOtherSpellings(t *testing.T) {
	args := json.RawMessage(`{"target":"prod"}`)
	fp := sum(`{"target":"prod"}`)
	good := `{"a":"` + fp + `","s":"st"}`
	if got, err := UnwrapArgs(args, good); err != nil || got != "st" {
		t.Fatalf("the well-formed text does not open: %q, %v", got, err)
	}
	for _, tc := range []struct{ name, args, sealed string }{
		{"other arguments", `{"target":"staging"}`, good},
		{"arguments not JSON", `{"target":`, good},
		{"absent arguments", ``, good},
		{"empty text", `{"target":"prod"}`, ``},
		{"null", `{"target":"prod"}`, `null`},
		{"not JSON", `{"target":"prod"}`, `st`},
		{"plain JSON string", `{"target":"prod"}`, `"st"`},
		{"trailing value", `{"target":"prod"}`, good + `{}`},
		{"trailing space", `{"target":"prod"}`, good + ` `},
		{"unknown member", `{"target":"prod"}`, `{"a":"` + fp + `","s":"st","x":1}`},
		{"members reordered", `{"target":"prod"}`, `{"s":"st","a":"` + fp + `"}`},
		{"whitespace", `{"target":"prod"}`, `{"a": "` + fp + `","s":"st"}`},
		{"key in other case", `{"target":"prod"}`, `{"A":"` + fp + `","s":"st"}`},
		{"duplicate member", `{"target":"prod"}`, `{"a":"00","a":"` + fp + `","s":"st"}`},
		{"uppercase hex", `{"target":"prod"}`, `{"a":"` + strings.ToUpper(fp) + `","s":"st"}`},
		{"short fingerprint", `{"target":"prod"}`, `{"a":"` + fp[:62] + `","s":"st"}`},
		{"long fingerprint", `{"target":"prod"}`, `{"a":"` + fp + `00","s":"st"}`},
		{"not hex", `{"target":"prod"}`, `{"a":"` + strings.Repeat("zz", 32) + `","s":"st"}`},
		{"missing fingerprint", `{"target":"prod"}`, `{"s":"st"}`},
		{"other escaping", `{"target":"prod"}`, `{"a":"` + fp + `","s":"\u0073t"}`},
		{"fingerprint not a string", `{"target":"prod"}`, `{"a":1,"s":"st"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := UnwrapArgs(json.RawMessage(tc.args), tc.sealed)
			if !errors.Is(err, ErrArgsMismatch) || got != "" {
				t.Fatalf("UnwrapArgs = %q, %v; want ErrArgsMismatch and no state", got, err)
			}
		})
	}
}

// clock is a settable time source.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func codec(t testing.TB, c *clock, store replay.Store) *ctoken.RequestStateCodec {
	t.Helper()
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
		Keys: kr, Binding: ctoken.BindSubjectAndTool, TTL: time.Minute, Now: c.Now, Replay: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	return codec
}

// failingStore is a replay store that cannot answer.
type failingStore struct{}

var errStoreDown = errors.New("store down")

func (failingStore) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errStoreDown
}

// Errors from a real codec (and from UnwrapArgs) map to the codes and fixed
// messages the client sees; the reason is ctoken's log-safe reason.
func refuseStateMapsCodecErrorsToCodes(t *testing.T) {
	// The memory replay store keeps real time, so the codec's clock does too.
	c := &clock{now: time.Now()}
	plain := codec(t, c, nil)
	target := ctoken.MCPTarget("tools/call", "deploy")
	wire, err := plain.Encode("s", "alice", target)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(codec *ctoken.RequestStateCodec, wire, subject string) error {
		_, err := codec.DecodeContext(context.Background(), wire, subject, target)
		return err
	}
	_, mismatch := UnwrapArgs(nil, "x")

	for _, tc := range []struct {
		name        string
		err         func(t *testing.T) error
		code        int
		message     string
		reason      string
		storeFailed bool
	}{
		{"tampered", func(t *testing.T) error { return decode(plain, retail(wire), "alice") }, CodeStateInvalid, "invalid requestState", "mac mismatch", false},
		{"other caller", func(t *testing.T) error { return decode(plain, wire, "bob") }, CodeStateInvalid, "invalid requestState", "", false},
		{"expired", func(t *testing.T) error {
			later := &clock{now: c.now.Add(2 * time.Minute)}
			return decode(codec(t, later, nil), wire, "alice")
		}, CodeStateExpired, "expired requestState: call again without it", "past exp", false},
		{"replayed", func(t *testing.T) error {
			once := codec(t, c, replay.NewMemoryStore(16))
			w, err := once.Encode("s", "alice", target)
			if err != nil {
				t.Fatal(err)
			}
			if err := decode(once, w, "alice"); err != nil {
				t.Fatal(err)
			}
			return decode(once, w, "alice")
		}, CodeStateUsed, "requestState already used: its round ran and its result cannot be answered again; calling again without it starts the call over: check its effect first", "already used", false},
		{"used, no record", func(t *testing.T) error { return errUsedNoRecord }, CodeStateUsed, "requestState already used: its round ran and its result cannot be answered again; calling again without it starts the call over: check its effect first", errUsedNoRecord.Error(), false},
		{"busy", func(t *testing.T) error { return ErrStateBusy }, CodeStateBusy, "requestState busy: its round is still running; retry the same call later", "round still running", false},
		{"round interrupted", func(t *testing.T) error { return ErrRoundInterrupted }, CodeRoundInterrupted, msgInterrupted, "round interrupted before its result was recorded", false},
		{"other arguments", func(t *testing.T) error { return mismatch }, CodeStateInvalid, "invalid requestState", "arguments differ from the sealed call", false},
		{"store failed", func(t *testing.T) error {
			return decode(codec(t, c, failingStore{}), wire, "alice")
		}, 0, "request state store unavailable", "", true},
		{"unknown error", func(t *testing.T) error { return errStoreDown }, 0, "request state store unavailable", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			if err == nil {
				t.Fatal("no error to map")
			}
			r := RefuseState(err)
			if r.Code != tc.code || r.Message != tc.message || r.StoreFailed != tc.storeFailed {
				t.Fatalf("RefuseState(%v) = %+v", err, r)
			}
			if tc.reason != "" && r.Reason != tc.reason {
				t.Errorf("reason %q, want %q", r.Reason, tc.reason)
			}
			if !tc.storeFailed && r.Reason == "" {
				t.Error("a refused state has no reason to log")
			}
			if r.Expired() != (tc.code == CodeStateExpired) {
				t.Errorf("Expired() = %v", r.Expired())
			}
			if r.Busy() != (tc.code == CodeStateBusy) {
				t.Errorf("Busy() = %v", r.Busy())
			}
			if strings.Contains(r.Message, wire) || strings.Contains(r.Reason, wire) {
				t.Error("the refusal echoes the state")
			}
		})
	}
}

func refuseCursorMapsVerifyErrorsToCodes(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	issuer := func(now func() time.Time) *ctoken.CursorIssuer {
		i, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, TTL: time.Minute, Session: []byte("s1"), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	scope := ctoken.CursorScope{ToolID: ctoken.MCPTarget("tools/call", "search"), CallerID: "alice"}
	cursor, err := issuer(c.Now).Issue(ctoken.CursorPayload{CursorScope: scope, Page: 1})
	if err != nil {
		t.Fatal(err)
	}
	later := func() time.Time { return c.now.Add(2 * time.Minute) }
	other := scope
	other.CallerID = "bob"

	for _, tc := range []struct {
		name    string
		err     error
		code    int
		message string
	}{
		{"expired", func() error { _, err := issuer(later).Verify(cursor, scope); return err }(), ctoken.CodeCursorExpired, "expired cursor: call again without a cursor"},
		{"other caller", func() error { _, err := issuer(c.Now).Verify(cursor, other); return err }(), ctoken.CodeCursorInvalid, "invalid cursor"},
		{"truncated", func() error { _, err := issuer(c.Now).Verify(cursor[:10], scope); return err }(), ctoken.CodeCursorInvalid, "invalid cursor"},
		{"unknown error", errors.New("boom"), ctoken.CodeCursorInvalid, "invalid cursor"},
		{"nil", nil, ctoken.CodeCursorInvalid, "invalid cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RefuseCursor(tc.err)
			if r.Code != tc.code || r.Message != tc.message || r.StoreFailed {
				t.Fatalf("RefuseCursor(%v) = %+v", tc.err, r)
			}
			if r.Expired() != (tc.code == ctoken.CodeCursorExpired) {
				t.Errorf("Expired() = %v", r.Expired())
			}
			want := ctoken.Reason(tc.err).String()
			if r.Internal {
				want = tc.err.Error()
			}
			if r.Reason != want {
				t.Errorf("reason %q, want %q", r.Reason, want)
			}
		})
	}
}

func refuseStateOfNilIsNoTokenRefusal(t *testing.T) {
	if r := RefuseState(nil); r.Code != 0 || !r.StoreFailed {
		t.Fatalf("RefuseState(nil) = %+v, want no code", r)
	}
}

func knownCodeAcceptsOnlyCtokenCodes(t *testing.T) {
	for code := -1; code < 2000; code++ {
		want := code >= 1020 && code <= 1029
		if KnownCode(code) != want {
			t.Errorf("KnownCode(%d) = %v", code, !want)
		}
	}
	if CodeStateExpired != 1022 || CodeStateInvalid != 1023 || CodeKeyReused != 1024 || CodeInProgress != 1025 || CodeStateUsed != 1026 || CodeStateBusy != 1027 || CodeOutcomeUnknown != 1028 || CodeRoundInterrupted != 1029 {
		t.Fatal("the state codes changed; clients depend on them")
	}
}

// FuzzUnwrapArgs: no input panics, and only the text WrapArgs writes for the
// same arguments opens.
func FuzzUnwrapArgs(f *testing.F) {
	w, _ := WrapArgs(json.RawMessage(`{"x":1}`), "st")
	f.Add(`{"x":1}`, w)
	f.Add(`{}`, `{"a":"","s":""}`)
	f.Add(``, `null`)
	f.Fuzz(func(t *testing.T, args, sealed string) {
		state, err := UnwrapArgs(json.RawMessage(args), sealed)
		if err != nil {
			if state != "" || !errors.Is(err, ErrArgsMismatch) {
				t.Fatalf("refusal returned %q, %v", state, err)
			}
			return
		}
		again, werr := WrapArgs(json.RawMessage(args), state)
		if werr != nil || again != sealed {
			t.Fatalf("opened %q, which WrapArgs writes as %q (%v)", sealed, again, werr)
		}
	})
}

// retail changes a token's last two characters to another pair that keeps
// the base64url framing valid ("AA", or "BA" when the token already ends in
// "AA"), so only the MAC can refuse it.
func retail(wire string) string {
	tail := "AA"
	if strings.HasSuffix(wire, tail) {
		tail = "BA"
	}
	return wire[:len(wire)-2] + tail
}

// A busy refusal carries the hint Answer attaches to ErrStateBusy, at
// most a second, and a second without one; no other refusal carries a
// hint.
func refuseStateCarriesTheBusyHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
	}{
		{"busy without a hint", ErrStateBusy, time.Second},
		{"busy", &stateBusyError{retryAfter: 250 * time.Millisecond}, 250 * time.Millisecond},
		{"busy, wrapped", fmt.Errorf("round: %w", &stateBusyError{retryAfter: 250 * time.Millisecond}), 250 * time.Millisecond},
		{"busy, a zero hint", &stateBusyError{}, time.Second},
		{"busy, a hint over a second", &stateBusyError{retryAfter: time.Minute}, time.Second},
		{"already used", ErrStateUsed, 0},
		{"invalid", ctoken.ErrStateInvalid, 0},
		{"store failed", errStoreDown, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := RefuseState(tc.err); r.RetryAfter != tc.want || r.Busy() != (tc.want != 0) {
				t.Fatalf("RefuseState(%v) = %+v; want RetryAfter %v", tc.err, r, tc.want)
			}
		})
	}
}
