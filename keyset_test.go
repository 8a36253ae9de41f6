package ctoken

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/ctoken/ctoken/observe"
)

// itemKey is the sort key of a keyset listing ordered by (Created, ID).
type itemKey struct {
	Created int64  `cbor:"1,keyasint"`
	ID      string `cbor:"2,keyasint"`
}

func keysetIssuer(t testing.TB, clock *testClock, session string, keys ...[]byte) *CursorIssuer {
	t.Helper()
	iss, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, keys[0], keys[1:]...), Session: []byte(session), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

func mustFingerprint(t testing.TB, args string) Fingerprint {
	t.Helper()
	fp, err := ArgsFingerprint([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// TestIssueKeysetIsIssueStateAtPageZero pins the wire: a keyset cursor is
// byte for byte the IssueState cursor of page 0, so the known-answer
// cursor vectors cover it and no new wire exists.
func TestIssueKeysetIsIssueStateAtPageZero(t *testing.T) {
	iss := keysetIssuer(t, newTestClock(), "fleet", fixedKey(1))
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "user:42", Args: mustFingerprint(t, `{"status":"open"}`)}
	k := itemKey{Created: 1_700_000_000, ID: "item-0042"}
	got, err := IssueKeyset(iss, scope, k)
	if err != nil {
		t.Fatal(err)
	}
	want, err := IssueState(iss, scope, 0, k)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("IssueKeyset %q, IssueState at page 0 %q", got, want)
	}
	back, p, err := VerifyState[itemKey](iss, got, scope)
	if err != nil || back != k || p.Page != 0 {
		t.Fatalf("VerifyState of a keyset cursor: %+v, page %d, %v", back, p.Page, err)
	}
}

func TestVerifyKeysetReturnsTheSortKey(t *testing.T) {
	iss := keysetIssuer(t, newTestClock(), "fleet", fixedKey(1))
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "user:42"}
	for _, k := range []itemKey{{}, {Created: -1, ID: ""}, {Created: 1 << 40, ID: "ü/" + strings.Repeat("x", 100)}} {
		c, err := IssueKeyset(iss, scope, k)
		if err != nil {
			t.Fatal(err)
		}
		got, err := VerifyKeyset[itemKey](iss, c, scope)
		if err != nil || got != k {
			t.Fatalf("%+v came back as %+v, %v", k, got, err)
		}
	}
}

func TestIssueKeysetRefusesWhatItCannotCarry(t *testing.T) {
	iss := keysetIssuer(t, newTestClock(), "fleet", fixedKey(1))
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "user:42"}
	for _, tc := range []struct {
		name string
		key  any
		want error
	}{
		{"state over MaxOpaqueStateBytes", strings.Repeat("x", MaxOpaqueStateBytes), ErrOpaqueStateTooLarge},
		{"not CBOR", make(chan int), ErrUnencodable},
	} {
		c, err := IssueKeyset(iss, scope, tc.key)
		if !errors.Is(err, tc.want) || reasonText(err) == "" || c != "" {
			t.Errorf("%s: %q, %v; want %v with a reason", tc.name, c, err, tc.want)
		}
	}
	var zero CursorIssuer
	if _, err := IssueKeyset(&zero, scope, 1); !errors.Is(err, ErrNoKey) {
		t.Errorf("zero issuer: %v, want ErrNoKey", err)
	}
	if _, err := VerifyKeyset[int](&zero, "x", scope); !errors.Is(err, ErrNoKey) {
		t.Errorf("zero issuer: %v, want ErrNoKey", err)
	}
}

// TestVerifyKeysetRefusals is the table of every way a keyset cursor of an
// HTTP listing is refused, with the status CursorHTTPStatus gives it.
func TestVerifyKeysetRefusals(t *testing.T) {
	clock := newTestClock()
	key := fixedKey(1)
	iss := keysetIssuer(t, clock, "fleet", key)
	filter := mustFingerprint(t, `{"status":["open"]}`)
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "user:42", Args: filter}
	k := itemKey{Created: 1_700_000_000, ID: "item-0042"}
	good, err := IssueKeyset(iss, scope, k)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(t *testing.T, i *CursorIssuer, p CursorPayload) string {
		c, err := i.Issue(p)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	rawGood, err := b64.DecodeString(good)
	if err != nil {
		t.Fatal(err)
	}
	tampered := []byte(good)
	tampered[len(tampered)/2] ^= 'A' ^ 'B'
	if tampered[len(tampered)/2] == good[len(good)/2] {
		t.Fatal("not tampered")
	}
	for _, tc := range []struct {
		name    string
		cursor  func(t *testing.T) string
		want    CursorScope
		advance time.Duration
		err     error
		status  int
		reason  observe.RefusalReason
	}{
		{"empty", func(*testing.T) string { return "" }, scope, 0, ErrCursorInvalid, 400, observe.ReasonEmpty},
		{"another caller's", func(*testing.T) string { return good }, CursorScope{ToolID: scope.ToolID, CallerID: "user:43", Args: filter}, 0, ErrCursorInvalid, 400, observe.ReasonCursorWrongScope},
		{"another endpoint's", func(*testing.T) string { return good }, CursorScope{ToolID: "GET /v1/users", CallerID: scope.CallerID, Args: filter}, 0, ErrCursorInvalid, 400, observe.ReasonCursorWrongScope},
		{"changed filter", func(*testing.T) string { return good }, CursorScope{ToolID: scope.ToolID, CallerID: scope.CallerID, Args: mustFingerprint(t, `{"status":["closed"]}`)}, 0, ErrCursorInvalid, 400, observe.ReasonCursorWrongScope},
		// The body still decodes: a forgery and a wrong scope look the same.
		{"tampered", func(*testing.T) string { return string(tampered) }, scope, 0, ErrCursorInvalid, 400, observe.ReasonCursorWrongScope},
		{"truncated", func(*testing.T) string { return b64.EncodeToString(rawGood[:len(rawGood)-3]) }, scope, 0, ErrCursorInvalid, 400, observe.ReasonMACMismatch},
		{"truncated to the MAC", func(*testing.T) string { return good[:40] }, scope, 0, ErrCursorInvalid, 400, observe.ReasonTruncated},
		{"not base64url", func(*testing.T) string { return good[:10] + "+" + good[11:] }, scope, 0, ErrCursorInvalid, 400, observe.ReasonNotBase64URL},
		{"oversize", func(*testing.T) string { return strings.Repeat("A", MaxCursorBytes+1) }, scope, 0, ErrCursorInvalid, 400, observe.ReasonCursorOversize},
		{"forged with another key", func(t *testing.T) string {
			c, _ := IssueKeyset(keysetIssuer(t, clock, "fleet", fixedKey(2)), scope, k)
			return c
		}, scope, 0, ErrCursorInvalid, 400, observe.ReasonUnknownKey},
		{"a page cursor", func(t *testing.T) string {
			c, _ := IssueState(iss, scope, 3, k)
			return c
		}, scope, 0, ErrCursorInvalid, 400, observe.ReasonCursorStateType},
		{"another sort key type", func(t *testing.T) string {
			c, _ := IssueKeyset(iss, scope, "item-0042")
			return c
		}, scope, 0, ErrCursorInvalid, 400, observe.ReasonCursorStateType},
		{"no sort key", func(t *testing.T) string { return issue(t, iss, CursorPayload{CursorScope: scope}) }, scope, 0, ErrCursorInvalid, 400, observe.ReasonCursorStateType},
		{"expired", func(*testing.T) string { return good }, scope, DefaultCursorTTL + time.Second, ErrCursorExpired, 410, observe.ReasonOlderThanTTL},
		{"another session (a restart)", func(t *testing.T) string {
			c, _ := IssueKeyset(keysetIssuer(t, clock, "other", key), scope, k)
			return c
		}, scope, 0, ErrCursorExpired, 410, observe.ReasonOtherSession},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cursor(t)
			clock.Advance(tc.advance)
			defer clock.Advance(-tc.advance)
			got, err := VerifyKeyset[itemKey](iss, c, tc.want)
			if !errors.Is(err, tc.err) || Reason(err) != tc.reason {
				t.Fatalf("%v (reason %q), want %v with reason %q", err, reasonText(err), tc.err, tc.reason)
			}
			if got != (itemKey{}) {
				t.Fatalf("refused cursor returned %+v", got)
			}
			if s := CursorHTTPStatus(err); s != tc.status {
				t.Fatalf("CursorHTTPStatus = %d, want %d", s, tc.status)
			}
			if c != "" && strings.Contains(err.Error(), c) {
				t.Fatal("the error contains the cursor")
			}
		})
	}
	if got, err := VerifyKeyset[itemKey](iss, good, scope); err != nil || got != k {
		t.Fatalf("the good cursor after the table: %+v, %v", got, err)
	}
}

func TestCursorHTTPStatusMapsErrors(t *testing.T) {
	_, argsErr := ArgsFingerprint([]byte(`{"a":`))
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 200},
		{"expired", errCursorAge, 410},
		{"other session", errCursorSession, 410},
		{"signed by a retired key", errCursorUnknownKey, 400},
		{"invalid", errCursorScope, 400},
		{"wrapped invalid", errors.Join(errors.New("listing"), errCursorSealed), 400},
		{"arguments that cannot be fingerprinted", argsErr, 400},
		{"keyset state of another type", errCursorStateType, 400},
		{"no key", errCursorNoKey, 500},
		{"cursor too large to issue", errCursorLarge, 500},
		{"state too large to issue (a sort key the client can page around)", errCursorStateLarge, 422},
		{"no tool", errCursorNoTool, 500},
		{"any other error", errors.New("database down"), 500},
	} {
		if got := CursorHTTPStatus(tc.err); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// FuzzVerifyKeyset puts the fuzzed bytes in the opaque state of an
// authentic cursor at the fuzzed page, so VerifyKeyset's typed decoder sees
// hostile CBOR. Only page 0 is accepted; an accepted key re-issues to a
// cursor that verifies to the same key.
func FuzzVerifyKeyset(f *testing.F) {
	iss := fuzzCursorIssuer(f)
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "c"}
	for _, b := range fuzzStateSeeds(f) {
		f.Add(b, uint32(0))
		f.Add(b, uint32(1))
	}
	k, err := stateEncMode.Marshal(itemKey{Created: 7, ID: "x"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(k, uint32(0))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, state []byte, page uint32) {
		cursor, err := iss.Issue(CursorPayload{CursorScope: scope, Page: page, State: state})
		if err != nil {
			if len(state) > MaxOpaqueStateBytes && errors.Is(err, ErrOpaqueStateTooLarge) {
				return
			}
			t.Fatalf("Issue: %v", err)
		}
		for _, check := range []func() (any, error){
			func() (any, error) { return VerifyKeyset[itemKey](iss, cursor, scope) },
			func() (any, error) { return VerifyKeyset[fuzzState](iss, cursor, scope) },
			func() (any, error) { return VerifyKeyset[any](iss, cursor, scope) },
		} {
			v, err := check()
			if err != nil {
				checkFuzzReasonError(t, err, ErrCursorInvalid)
				if v != nil && !reflect.ValueOf(v).IsZero() {
					t.Fatalf("refused cursor returned %+v", v)
				}
				continue
			}
			if page != 0 {
				t.Fatalf("a cursor of page %d verified as a keyset cursor", page)
			}
		}
		key, err := VerifyKeyset[fuzzState](iss, cursor, scope)
		if err != nil {
			return
		}
		again, err := IssueKeyset(iss, scope, key)
		if err != nil {
			t.Fatalf("IssueKeyset of an accepted key: %v", err)
		}
		back, err := VerifyKeyset[fuzzState](iss, again, scope)
		kb, _ := stateEncMode.Marshal(key)
		bb, _ := stateEncMode.Marshal(back)
		if err != nil || !bytes.Equal(kb, bb) {
			t.Fatalf("key %+v came back as %+v, %v", key, back, err)
		}
	})
}

// TestKeysetKeepsATimestampToTheNanosecond round-trips a sort key of a
// timestamp (with nanoseconds, in another zone) and an ID: the timestamp
// comes back equal, in UTC. CBOR's default encoding of a time.Time, whole
// Unix seconds, dropped the fraction, and a listing resumed from the
// truncated time served again every row of that second (or skipped them,
// descending).
func TestKeysetKeepsATimestampToTheNanosecond(t *testing.T) {
	iss := keysetIssuer(t, newTestClock(), "fleet", fixedKey(1))
	type key struct {
		Created time.Time
		ID      int64
	}
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "c"}
	zone := time.FixedZone("UTC+2", 2*60*60)
	for _, k := range []key{
		{Created: time.Date(2026, 11, 22, 12, 0, 0, 123456789, zone), ID: 7},
		{Created: time.Date(2026, 11, 22, 12, 0, 0, 1000, time.UTC), ID: 8}, // a microsecond, as PostgreSQL stores it
		{Created: time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC), ID: 9},
	} {
		c, err := IssueKeyset(iss, scope, k)
		if err != nil {
			t.Fatal(err)
		}
		got, err := VerifyKeyset[key](iss, c, scope)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Created.Equal(k.Created) || got.Created.Location() != time.UTC || got.ID != k.ID {
			t.Errorf("sort key %v came back as %v", k, got)
		}
	}
	// One spelling: the same instant in two zones is the same cursor.
	at := time.Date(2026, 11, 22, 12, 0, 0, 5, time.UTC)
	a, errA := IssueKeyset(iss, scope, key{Created: at})
	b, errB := IssueKeyset(iss, scope, key{Created: at.In(zone)})
	if err := errors.Join(errA, errB); err != nil || a != b {
		t.Errorf("one instant in two zones: %q, %q (%v)", a, b, err)
	}
}

// TestKeysetReadsATimestampIssuedAsUnixSeconds verifies a keyset cursor
// whose timestamp was encoded as before, as whole Unix seconds: it still
// decodes, to that second.
func TestKeysetReadsATimestampIssuedAsUnixSeconds(t *testing.T) {
	iss := keysetIssuer(t, newTestClock(), "fleet", fixedKey(1))
	type key struct {
		Created time.Time
		ID      int64
	}
	old, err := mustEncMode(cbor.CoreDetEncOptions()).Marshal(key{Created: time.Unix(1_763_800_000, 0), ID: 3})
	if err != nil {
		t.Fatal(err)
	}
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "c"}
	c, err := iss.Issue(CursorPayload{CursorScope: scope, State: old})
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyKeyset[key](iss, c, scope)
	if err != nil || !got.Created.Equal(time.Unix(1_763_800_000, 0)) || got.ID != 3 {
		t.Fatalf("VerifyKeyset = %v, %v", got, err)
	}
}

// TestIssueKeysetRefusesATimestampItCouldNotReadBack issues sort keys with
// times RFC 3339 cannot write (before year 0, after 9999), directly and
// by pointer: each is ErrUnencodable at issue, where
// it was a cursor that VerifyKeyset refused on the next page. A time
// within range, and a key type without a time, issue as before.
func TestIssueKeysetRefusesATimestampItCouldNotReadBack(t *testing.T) {
	iss := keysetIssuer(t, newTestClock(), "fleet", fixedKey(1))
	scope := CursorScope{ToolID: "GET /v1/items", CallerID: "c"}
	type key struct {
		Created time.Time
		ID      int64
	}
	type ptrKey struct{ Created *time.Time }
	far, before := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC)
	for name, issue := range map[string]func() (string, error){
		"after 9999":     func() (string, error) { return IssueKeyset(iss, scope, key{Created: far}) },
		"before year 0":  func() (string, error) { return IssueKeyset(iss, scope, key{Created: before}) },
		"by pointer":     func() (string, error) { return IssueKeyset(iss, scope, ptrKey{Created: &far}) },
		"IssueState too": func() (string, error) { return IssueState(iss, scope, 3, key{Created: far}) },
	} {
		if c, err := issue(); !errors.Is(err, ErrUnencodable) || Reason(err) != observe.ReasonCursorStateNotCBOR || c != "" {
			t.Errorf("%s: %q, %v", name, c, err)
		}
	}
	last := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
	c, err := IssueKeyset(iss, scope, key{Created: last, ID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := VerifyKeyset[key](iss, c, scope); err != nil || !got.Created.Equal(last) {
		t.Fatalf("the last instant of 9999: %v, %v", got, err)
	}
}

// A keyset cursor binds the caller inside its MAC: no byte of a 1 KiB
// or non-UTF-8 caller is in it, the full state fits beside it, signed and
// sealed, and another caller, tool, arguments or session is refused with
// today's codes.
func TestKeysetCursorBindsTheCallerWithoutCarryingIt(t *testing.T) {
	clock := newTestClock()
	type sortKey struct{ Blob []byte }
	// The typed state that encodes to exactly MaxOpaqueStateBytes: a map
	// head, the field name and a byte string head around the blob.
	blob := make([]byte, MaxOpaqueStateBytes-1-5-2)
	if b, err := encodeState(sortKey{blob}); err != nil || len(b) != MaxOpaqueStateBytes {
		t.Fatalf("test setup: state of %d bytes (%v)", len(b), err)
	}
	for _, seal := range []bool{false, true} {
		for name, caller := range map[string]string{
			"1 KiB":     strings.Repeat("alice.secret@example.com,", 41)[:1024],
			"not UTF-8": "alice.secret\xc0\x80@example.com",
		} {
			t.Run(fmt.Sprintf("seal=%v/%s", seal, name), func(t *testing.T) {
				iss := newTestIssuer(t, CursorConfig{Session: []byte("fleet"), Now: clock.Now, Seal: seal})
				scope := CursorScope{ToolID: "GET /v1/items", CallerID: caller, Args: mustFingerprint(t, `{"status":"open"}`)}
				c, err := IssueKeyset(iss, scope, sortKey{blob})
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := b64.DecodeString(c)
				if bytes.Contains(raw, []byte("secret")) || bytes.Contains(raw, []byte("/v1/items")) {
					t.Fatal("the cursor carries the caller or the tool")
				}
				if got, err := VerifyKeyset[sortKey](iss, c, scope); err != nil || !bytes.Equal(got.Blob, blob) {
					t.Fatalf("VerifyKeyset: %v", err)
				}
				for what, tc := range map[string]struct {
					iss   *CursorIssuer
					scope CursorScope
					code  int
				}{
					"caller":  {iss, CursorScope{ToolID: scope.ToolID, CallerID: caller[1:], Args: scope.Args}, CodeCursorInvalid},
					"tool":    {iss, CursorScope{ToolID: "GET /v1/users", CallerID: caller, Args: scope.Args}, CodeCursorInvalid},
					"args":    {iss, CursorScope{ToolID: scope.ToolID, CallerID: caller, Args: mustFingerprint(t, `{"status":"closed"}`)}, CodeCursorInvalid},
					"session": {newTestIssuer(t, CursorConfig{Session: []byte("other"), Now: clock.Now}), scope, CodeCursorExpired},
				} {
					if _, err := VerifyKeyset[sortKey](tc.iss, c, tc.scope); ErrorCode(err) != tc.code {
						t.Errorf("other %s: %v (code %d), want code %d", what, err, ErrorCode(err), tc.code)
					}
				}
			})
		}
	}
}
