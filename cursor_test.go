package ctoken

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/cursorwire"
	"github.com/ctoken/ctoken/internal/xaes"
	"github.com/ctoken/ctoken/observe"
	"github.com/fxamacker/cbor/v2"
)

var testScope = CursorScope{
	ToolID:   "search_issues",
	CallerID: "user:42",
	Args:     Fingerprint{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32},
}

func newTestIssuer(t testing.TB, cfg CursorConfig) *CursorIssuer {
	t.Helper()
	if cfg.Keys == nil {
		cfg.Keys = mustKeyring(t, fixedKey(1))
	}
	i, err := NewCursorIssuer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func mustIssue(t testing.TB, i *CursorIssuer, p CursorPayload) string {
	t.Helper()
	c, err := i.Issue(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCursorRoundTrip(t *testing.T) {
	clock := newTestClock()
	i := newTestIssuer(t, CursorConfig{Now: clock.Now})
	in := CursorPayload{CursorScope: testScope, Page: 7, State: []byte("offset=140"), IssuedAt: time.Unix(1, 0)}
	c := mustIssue(t, i, in)
	if len(c) > MaxCursorBytes {
		t.Fatalf("cursor is %d bytes", len(c))
	}
	got, err := i.Verify(c, testScope)
	if err != nil {
		t.Fatal(err)
	}
	if got.CursorScope != testScope || got.Page != 7 || string(got.State) != "offset=140" {
		t.Fatalf("payload = %+v", got)
	}
	if !got.IssuedAt.Equal(clock.Now()) {
		t.Fatalf("IssuedAt = %v, want the issuer's clock %v", got.IssuedAt, clock.Now())
	}
}

// TestCursorVerify pins CursorIssuer.Verify: what it accepts, and each way it refuses.
func TestCursorVerify(t *testing.T) {
	t.Run("without args binding", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		unbound := CursorScope{ToolID: "list", CallerID: "u"}
		c := mustIssue(t, i, CursorPayload{CursorScope: unbound})
		if _, err := i.Verify(c, unbound); err != nil {
			t.Fatalf("unbound cursor, unbound want: %v", err)
		}
		// From format version 2 the arguments are inside the MAC input: a
		// bound cursor verifies only against the same non-zero want.Args, and a
		// zero want.Args (a verifier that checks nothing) is refused.
		bound := mustIssue(t, i, CursorPayload{CursorScope: CursorScope{ToolID: "list", CallerID: "u", Args: testScope.Args}})
		if p, err := i.Verify(bound, CursorScope{ToolID: "list", CallerID: "u", Args: testScope.Args}); err != nil || p.Args != testScope.Args {
			t.Fatalf("bound cursor, bound want: %v %v", p.Args, err)
		}
		_, err := i.Verify(bound, unbound)
		wantErr(t, err, ErrCursorInvalid)
		// An unbound cursor never satisfies a non-zero want.Args.
		_, err = i.Verify(c, CursorScope{ToolID: "list", CallerID: "u", Args: testScope.Args})
		wantErr(t, err, ErrCursorInvalid)
	})

	t.Run("rejects wrong scope", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		c := mustIssue(t, i, CursorPayload{CursorScope: testScope})
		otherArgs := testScope.Args
		otherArgs[31] ^= 1
		cases := map[string]CursorScope{
			"tool":        {ToolID: "search_prs", CallerID: testScope.CallerID, Args: testScope.Args},
			"caller":      {ToolID: testScope.ToolID, CallerID: "user:43", Args: testScope.Args},
			"args":        {ToolID: testScope.ToolID, CallerID: testScope.CallerID, Args: otherArgs},
			"caller case": {ToolID: testScope.ToolID, CallerID: "USER:42"},
		}
		for name, want := range cases {
			t.Run(name, func(t *testing.T) {
				p, err := i.Verify(c, want)
				wantErr(t, err, ErrCursorInvalid)
				if !isZeroPayload(p) {
					t.Fatalf("rejected verify returned data: %+v", p)
				}
				if reasonText(err) == "" {
					t.Fatal("no reason for the log")
				}
			})
		}
	})

	t.Run("rejects every bit flip", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		c := mustIssue(t, i, CursorPayload{CursorScope: testScope, Page: 3, State: []byte{0xAA, 0xBB}})
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			t.Fatal(err)
		}
		for bit := 0; bit < len(raw)*8; bit++ {
			mut := bytes.Clone(raw)
			mut[bit/8] ^= 1 << (bit % 8)
			p, err := i.Verify(base64.RawURLEncoding.EncodeToString(mut), testScope)
			if err == nil {
				t.Fatalf("bit %d flipped: accepted", bit)
			}
			// A flip inside the session bytes parses as another session: it is
			// classified as expired, which is still a refusal.
			if !errors.Is(err, ErrCursorInvalid) && !errors.Is(err, ErrCursorExpired) {
				t.Fatalf("bit %d: unexpected error %v", bit, err)
			}
			if !isZeroPayload(p) {
				t.Fatalf("bit %d: rejected verify returned data", bit)
			}
		}
	})

	t.Run("rejects every truncation", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		c := mustIssue(t, i, CursorPayload{CursorScope: testScope, State: []byte("s")})
		for n := 0; n < len(c); n++ {
			_, err := i.Verify(c[:n], testScope)
			wantErr(t, err, ErrCursorInvalid)
		}
		// Extensions are refused too.
		for _, suffix := range []string{"A", "AA", "AAAA", "=", "."} {
			_, err := i.Verify(c+suffix, testScope)
			wantErr(t, err, ErrCursorInvalid)
		}
	})

	t.Run("rejects malformed text", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		c := mustIssue(t, i, CursorPayload{CursorScope: testScope})
		raw, _ := base64.RawURLEncoding.DecodeString(c)
		cases := map[string]string{
			"empty":            "",
			"padded":           base64.URLEncoding.EncodeToString(raw),
			"std alphabet":     base64.RawStdEncoding.EncodeToString(append(raw, 0xfb, 0xff)),
			"white space":      c[:10] + " " + c[10:],
			"not base64":       "!!!!",
			"only mac":         base64.RawURLEncoding.EncodeToString(raw[len(raw)-32:]),
			"oversize garbage": strings.Repeat("A", MaxCursorBytes+1),
		}
		for name, in := range cases {
			t.Run(name, func(t *testing.T) {
				_, err := i.Verify(in, testScope)
				wantErr(t, err, ErrCursorInvalid)
			})
		}
	})

	t.Run("rejects non-canonical base64", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		var c string
		// Find a cursor whose last character carries unused bits.
		for page := uint32(0); ; page++ {
			c = mustIssue(t, i, CursorPayload{CursorScope: testScope, Page: page})
			if len(c)%4 != 0 {
				break
			}
		}
		last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", c[len(c)-1])
		alt := c[:len(c)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|1])
		if alt == c {
			alt = c[:len(c)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|2])
		}
		a, _ := base64.RawURLEncoding.DecodeString(alt)
		b, _ := base64.RawURLEncoding.DecodeString(c)
		if !bytes.Equal(a, b) {
			t.Fatal("test setup: alternate spelling decodes differently under lax base64")
		}
		_, err := i.Verify(alt, testScope)
		wantErr(t, err, ErrCursorInvalid)
	})

	t.Run("refuses huge input without allocating", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		huge := strings.Repeat("A", 64<<20)
		var err error
		allocs := testing.AllocsPerRun(10, func() { _, err = i.Verify(huge, testScope) })
		wantErr(t, err, ErrCursorInvalid)
		if allocs != 0 {
			t.Fatalf("refusing a 64 MiB cursor allocated %v times", allocs)
		}
	})

	t.Run("rejects restarted server", func(t *testing.T) {
		kr := mustKeyring(t, fixedKey(1))
		before := newTestIssuer(t, CursorConfig{Keys: kr})
		c := mustIssue(t, before, CursorPayload{CursorScope: testScope})
		after := newTestIssuer(t, CursorConfig{Keys: kr}) // new random session
		if bytes.Equal(before.Session(), after.Session()) {
			t.Fatal("two issuers minted the same random session")
		}
		_, err := after.Verify(c, testScope)
		wantErr(t, err, ErrCursorExpired)
		if ErrorCode(err) != CodeCursorExpired {
			t.Fatalf("code = %d", ErrorCode(err))
		}
	})

	t.Run("classifies ephemeral restart as expired", func(t *testing.T) {
		// A restart with a fresh random key and session: the MAC cannot match,
		// but the cursor names another session, so the client is told to start
		// over rather than that it forged something.
		before := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, RandomKey())})
		c := mustIssue(t, before, CursorPayload{CursorScope: testScope})
		after := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, RandomKey())})
		p, err := after.Verify(c, testScope)
		wantErr(t, err, ErrCursorExpired)
		if !isZeroPayload(p) {
			t.Fatal("unauthenticated cursor returned data")
		}
		// The same forged body naming our own session stays invalid.
		same := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, RandomKey()), Session: before.Session()})
		_, err = same.Verify(c, testScope)
		wantErr(t, err, ErrCursorInvalid)
	})

	t.Run("rejects foreign session", func(t *testing.T) {
		kr := mustKeyring(t, fixedKey(1))
		a := newTestIssuer(t, CursorConfig{Keys: kr, Session: []byte("fleet-2026-11")})
		b := newTestIssuer(t, CursorConfig{Keys: kr, Session: []byte("fleet-2026-12")})
		_, err := b.Verify(mustIssue(t, a, CursorPayload{CursorScope: testScope}), testScope)
		wantErr(t, err, ErrCursorExpired)
	})

	t.Run("rejects issued in the future", func(t *testing.T) {
		kr := mustKeyring(t, fixedKey(1))
		session := []byte("s")
		verifierClock := newTestClock()
		verifier := newTestIssuer(t, CursorConfig{Keys: kr, Session: session, Now: verifierClock.Now})
		for _, c := range []struct {
			ahead time.Duration
			ok    bool
		}{{0, true}, {60 * time.Second, true}, {61 * time.Second, false}, {time.Hour, false}} {
			issuerClock := newTestClock()
			issuerClock.Advance(c.ahead)
			issuer := newTestIssuer(t, CursorConfig{Keys: kr, Session: session, Now: issuerClock.Now})
			_, err := verifier.Verify(mustIssue(t, issuer, CursorPayload{CursorScope: testScope}), testScope)
			if c.ok && err != nil {
				t.Fatalf("%v ahead: %v", c.ahead, err)
			}
			if !c.ok {
				wantErr(t, err, ErrCursorInvalid)
			}
		}
		// An issue time past time.Unix's range would wrap around to the
		// far past; with no age limit nothing else would refuse it.
		noTTL := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(vecNow), TTL: -1})
		for _, issued := range []int64{math.MaxInt64, math.MaxInt64 - 62135596800 + 1, vecNow.Unix() + 61} {
			_, err := noTTL.Verify(macTestBody(vecKey, vecSignedTestBody(1, issued, nil)), CursorScope{ToolID: "t", CallerID: "c"})
			wantErr(t, err, ErrCursorInvalid)
			if got := reasonText(err); got != "issued in the future" {
				t.Fatalf("issued at %d: reason %q, want issued in the future", issued, got)
			}
		}
	})

	// The longest TTL still bounds the age: a cursor older than
	// math.MaxInt64 nanoseconds (about 292 years) is expired, where a
	// Duration taken between the two instants would saturate and pass.
	t.Run("a TTL of math.MaxInt64 still bounds the age", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(vecNow), TTL: math.MaxInt64})
		scope := CursorScope{ToolID: "t", CallerID: "c"}
		maxAge := int64(time.Duration(math.MaxInt64) / time.Second)
		if _, err := i.Verify(macTestBody(vecKey, vecSignedTestBody(1, vecNow.Unix()-maxAge, nil)), scope); err != nil {
			t.Fatalf("issued %d s ago: %v", maxAge, err)
		}
		_, err := i.Verify(macTestBody(vecKey, vecSignedTestBody(1, vecNow.Unix()-maxAge-1, nil)), scope)
		wantErr(t, err, ErrCursorExpired)
	})

	// A cursor that decodes to exactly one MAC and no body has no layout's
	// prefix: refused as malformed before any MAC is computed, even when
	// that MAC is the authentic MAC of the empty body.
	t.Run("refuses a MAC without body as malformed", func(t *testing.T) {
		i := newTestIssuer(t, CursorConfig{})
		authentic := i.ring().macs[0].Sum(nil, nil)
		zero := make([]byte, macSize)
		for name, raw := range map[string][]byte{"authentic mac of empty body": authentic, "zero bytes": zero} {
			t.Run(name, func(t *testing.T) {
				p, err := i.Verify(b64.EncodeToString(raw), testScope)
				wantErr(t, err, ErrCursorInvalid)
				if got := reasonText(err); got != "malformed or non-canonical payload" {
					t.Fatalf("Reason = %q, want %q", got, "malformed or non-canonical payload")
				}
				if !isZeroPayload(p) {
					t.Fatal("payload returned with the error")
				}
			})
		}
	})
}

func isZeroPayload(p CursorPayload) bool {
	return p.CursorScope == (CursorScope{}) && p.Page == 0 && p.State == nil && p.IssuedAt.IsZero()
}

func TestCursorFleetSharesKeysAndSession(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	session := []byte("fleet-session")
	fleet := []*CursorIssuer{
		newTestIssuer(t, CursorConfig{Keys: kr, Session: session}),
		newTestIssuer(t, CursorConfig{Keys: kr, Session: session}),
		newTestIssuer(t, CursorConfig{Keys: kr, Session: session}),
	}
	for a := range fleet {
		c := mustIssue(t, fleet[a], CursorPayload{CursorScope: testScope, Page: uint32(a)})
		for b := range fleet {
			p, err := fleet[b].Verify(c, testScope)
			if err != nil || p.Page != uint32(a) {
				t.Fatalf("instance %d refused instance %d's cursor: %v", b, a, err)
			}
		}
	}
}

func TestCursorTTL(t *testing.T) {
	clock := newTestClock()
	i := newTestIssuer(t, CursorConfig{Now: clock.Now, TTL: time.Minute})
	c := mustIssue(t, i, CursorPayload{CursorScope: testScope})
	clock.Advance(time.Minute)
	if _, err := i.Verify(c, testScope); err != nil {
		t.Fatalf("at exactly TTL: %v", err)
	}
	clock.Advance(time.Second)
	_, err := i.Verify(c, testScope)
	wantErr(t, err, ErrCursorExpired)
}

func TestCursorDefaultTTL(t *testing.T) {
	clock := newTestClock()
	i := newTestIssuer(t, CursorConfig{Now: clock.Now})
	c := mustIssue(t, i, CursorPayload{CursorScope: testScope})
	clock.Advance(DefaultCursorTTL)
	if _, err := i.Verify(c, testScope); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	_, err := i.Verify(c, testScope)
	wantErr(t, err, ErrCursorExpired)
}

func TestCursorNegativeTTLMeansNoAgeLimit(t *testing.T) {
	clock := newTestClock()
	i := newTestIssuer(t, CursorConfig{Now: clock.Now, TTL: -1})
	c := mustIssue(t, i, CursorPayload{CursorScope: testScope})
	clock.Advance(10 * 365 * 24 * time.Hour)
	if _, err := i.Verify(c, testScope); err != nil {
		t.Fatal(err)
	}
}

func TestCursorKeyRotation(t *testing.T) {
	oldKey, newKey := fixedKey(1), fixedKey(2)
	session := []byte("s")
	before := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, oldKey), Session: session})
	after := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, newKey, oldKey), Session: session})
	retired := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, newKey), Session: session})

	old := mustIssue(t, before, CursorPayload{CursorScope: testScope, Page: 1})
	if p, err := after.Verify(old, testScope); err != nil || p.Page != 1 {
		t.Fatalf("previous key no longer verifies: %v", err)
	}
	fresh := mustIssue(t, after, CursorPayload{CursorScope: testScope, Page: 2})
	if _, err := retired.Verify(fresh, testScope); err != nil {
		t.Fatalf("primary did not sign: %v", err)
	}
	_, err := before.Verify(fresh, testScope)
	wantErr(t, err, ErrCursorInvalid) // signed with the new key only
	_, err = retired.Verify(old, testScope)
	wantErr(t, err, ErrCursorInvalid) // old key dropped from the ring
}

func TestCursorIssueEnforcesCaps(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{})
	max := CursorPayload{CursorScope: CursorScope{ToolID: "t", CallerID: "c"}, State: make([]byte, MaxOpaqueStateBytes)}
	c, err := i.Issue(max)
	if err != nil || len(c) > MaxCursorBytes {
		t.Fatalf("state at the cap: len=%d err=%v", len(c), err)
	}
	max.State = make([]byte, MaxOpaqueStateBytes+1)
	_, err = i.Issue(max)
	wantErr(t, err, ErrOpaqueStateTooLarge)

}

// The scope costs a cursor nothing whatever its IDs: the full state fits
// beside a 1 KiB caller, a non-UTF-8 caller and a 100-byte tool, signed and
// sealed, and the caller's bytes appear nowhere in the token.
func TestCursorScopeCostsNoStateBudget(t *testing.T) {
	callers := map[string]string{
		"1 KiB":     strings.Repeat("alice.secret@example.com|", 41)[:1024],
		"not UTF-8": "user\xff\xc0\x80-alice.secret",
		"empty":     "",
	}
	for _, seal := range []bool{false, true} {
		i := newTestIssuer(t, CursorConfig{Seal: seal})
		if got := i.StateBudget(); got != MaxOpaqueStateBytes {
			t.Fatalf("seal=%v: StateBudget = %d, want %d", seal, got, MaxOpaqueStateBytes)
		}
		for name, caller := range callers {
			t.Run(fmt.Sprintf("seal=%v/%s", seal, name), func(t *testing.T) {
				scope := CursorScope{ToolID: strings.Repeat("t", 100), CallerID: caller, Args: testScope.Args}
				c, err := i.Issue(CursorPayload{CursorScope: scope, Page: math.MaxUint32, State: bytes.Repeat([]byte{7}, MaxOpaqueStateBytes)})
				if err != nil || len(c) > MaxCursorBytes {
					t.Fatalf("Issue: %d bytes, %v", len(c), err)
				}
				raw, _ := b64.DecodeString(c)
				if len(caller) >= 4 && bytes.Contains(raw, []byte(caller[:4])) {
					t.Fatalf("the token carries bytes of the caller ID")
				}
				p, err := i.Verify(c, scope)
				if err != nil || p.CallerID != caller || len(p.State) != MaxOpaqueStateBytes {
					t.Fatalf("Verify: %v", err)
				}
				for what, other := range map[string]CursorScope{
					"caller": {ToolID: scope.ToolID, CallerID: caller + "x", Args: scope.Args},
					"tool":   {ToolID: "t", CallerID: caller, Args: scope.Args},
					"args":   {ToolID: scope.ToolID, CallerID: caller, Args: Fingerprint{1}},
				} {
					_, err := i.Verify(c, other)
					wantErr(t, err, ErrCursorInvalid)
					if ErrorCode(err) != CodeCursorInvalid {
						t.Fatalf("other %s: code %d", what, ErrorCode(err))
					}
				}
			})
		}
	}
}

// A version 2 cursor carries nothing of its scope, not even a digest: the
// same page, state and time under any tool, caller and arguments give the
// same body (only the MAC differs), so cursors are not linkable by their
// scope and their length does not depend on it.
func TestCursorBodyDoesNotDependOnTheScope(t *testing.T) {
	clock := newTestClock()
	i := newTestIssuer(t, CursorConfig{Session: []byte("s"), Now: clock.Now})
	p := CursorPayload{Page: 4, State: []byte("after=42")}
	var body []byte
	for name, scope := range map[string]CursorScope{
		"tool only":        {ToolID: "search"},
		"alice":            {ToolID: "search", CallerID: "alice@example.com"},
		"alice, arguments": {ToolID: "search", CallerID: "alice@example.com", Args: testScope.Args},
		"bob":              {ToolID: "search", CallerID: "bob@example.com"},
		"1 KiB caller":     {ToolID: strings.Repeat("t", 100), CallerID: strings.Repeat("c", 1024), Args: testScope.Args},
	} {
		p.CursorScope = scope
		raw, err := b64.DecodeString(mustIssue(t, i, p))
		if err != nil {
			t.Fatal(err)
		}
		got := raw[:len(raw)-macSize]
		if body == nil {
			body = got
		} else if !bytes.Equal(got, body) {
			t.Fatalf("%s: body %x differs from %x", name, got, body)
		}
	}
}

func TestCursorFixedFieldsAreCompact(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{})
	c := mustIssue(t, i, CursorPayload{CursorScope: CursorScope{ToolID: "t", Args: testScope.Args}, Page: 1 << 20})
	raw, _ := base64.RawURLEncoding.DecodeString(c)
	// Map header, version, key id, a large page, issued-at and session
	// tag: the payload around the state (the scope costs nothing).
	if body := len(raw) - 32; body > 32 {
		t.Fatalf("fixed fields cost %d bytes, want at most 32", body)
	}
}

func TestCursorWireFormat(t *testing.T) {
	// The token is base64url(CBOR || HMAC-SHA256(HKDF(key, label), CBOR)),
	// recomputed here with the standard library alone.
	key := fixedKey(1)
	clock := newTestClock()
	i := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, key), Session: []byte{0xAB}, Now: clock.Now})
	c := mustIssue(t, i, CursorPayload{CursorScope: CursorScope{ToolID: "t", CallerID: "u"}, Page: 2, State: []byte{9}})
	raw, _ := base64.RawURLEncoding.DecodeString(c)
	body := raw[:len(raw)-32]
	// Format version 2: the scope is not in the token; the session is a
	// tag; the key is named by its id, HKDF(key, "ctoken.key-id")[:4].
	sess := sha256.Sum256([]byte("ctoken.cursor session tag\x00\xAB"))
	kid := subkey(key, "ctoken.key-id")[:4]
	want := []byte{
		0xA6,       // map(6)
		0x01, 0x02, // 1: version 2
		0x02, 0x44, kid[0], kid[1], kid[2], kid[3], // 2: key id, 4 bytes
		0x05, 0x02, // 5: page
		0x06, 0x1A, 0x65, 0x53, 0xF1, 0x00, // 6: issued-at 1700000000
		0x07, 0x48, // 7: session tag, 8 bytes
	}
	want = append(want, sess[:8]...)
	want = append(want, 0x08, 0x41, 0x09) // 8: state
	if !bytes.Equal(body, want) {
		t.Fatalf("CBOR body\n got %x\nwant %x", body, want)
	}
	// The MAC covers the body, then the scope: the label, each ID after
	// its length (uvarint), 0x00 for no arguments.
	mac := hmac.New(sha256.New, subkey(key, "ctoken.cursor hmac-sha256 key"))
	mac.Write(body)
	mac.Write([]byte("ctoken.scope\x00\x01t\x01u\x00"))
	if !hmac.Equal(mac.Sum(nil), raw[len(raw)-32:]) {
		t.Fatal("MAC is not HMAC-SHA256 under the derived cursor key")
	}
}

func TestCursorErrorsNeverContainTheToken(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{})
	other := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, fixedKey(2))})
	c := mustIssue(t, other, CursorPayload{CursorScope: testScope})
	for _, in := range []string{c, c[:20], c + "x", "secret-looking-token"} {
		_, err := i.Verify(in, testScope)
		if err == nil || strings.Contains(err.Error(), in) || strings.Contains(err.Error(), testScope.CallerID) {
			t.Fatalf("error %q echoes its input", err)
		}
	}
}

func TestNewCursorIssuer(t *testing.T) {
	t.Run("validates config", func(t *testing.T) {
		_, err := NewCursorIssuer(CursorConfig{})
		wantErr(t, err, ErrNoKey)
		if _, err := NewCursorIssuer(CursorConfig{Keys: mustKeyring(t, fixedKey(1)), Session: make([]byte, MaxSessionBytes+1)}); err == nil {
			t.Fatal("oversize session accepted")
		}
	})

	// Checks that a Keyring with no key
	// (its zero value) is refused like a nil one, rather than accepted by the
	// constructor and panicking in Issue.
	t.Run("refuses empty keyring", func(t *testing.T) {
		i, err := NewCursorIssuer(CursorConfig{Keys: &Keyring{}})
		wantErr(t, err, ErrNoKey)
		if i != nil {
			t.Fatal("issuer returned with the error")
		}
	})

	// An empty but non-nil Session (os.Getenv of an unset variable, converted)
	// must not silently become a random per-issuer session.
	t.Run("refuses empty non-nil session", func(t *testing.T) {
		kr := mustKeyring(t, fixedKey(1))
		for _, s := range [][]byte{{}, []byte("")} {
			if i, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: s}); !errors.Is(err, ErrConfig) || i != nil {
				t.Fatalf("empty session = %v, %v; want ErrConfig", i, err)
			}
		}
		if i, err := NewCursorIssuer(CursorConfig{Keys: kr}); err != nil || len(i.Session()) != sessionBytes {
			t.Fatalf("nil session = %v; want a random %d-byte session", err, sessionBytes)
		}
		// The error says what to set, not that nil would do: nil breaks
		// every cursor a client holds at each restart.
		_, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: []byte("")})
		for _, want := range []string{"set it to a short name", "CTOKEN_SESSION=", "every restart breaks the cursors"} {
			if !strings.Contains(reasonText(err), want) {
				t.Errorf("empty session error %q does not say %q", reasonText(err), want)
			}
		}
	})

	// Checks that a config with several faults is refused with one error
	// naming each, matching each fault's sentinel.
	t.Run("names every fault at once", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			cfg   CursorConfig
			names []string
		}{
			{"no keys, empty session", CursorConfig{Session: []byte("")}, []string{"2 configuration faults", "CursorConfig.Keys is nil or empty (set Keys", "CursorConfig.Session is empty"}},
			{"empty keyring, oversize session", CursorConfig{Keys: &Keyring{}, Session: make([]byte, MaxSessionBytes+1)}, []string{"CursorConfig.Keys is nil or empty", "longer than MaxSessionBytes"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				i, err := NewCursorIssuer(tc.cfg)
				wantErr(t, err, ErrNoKey)
				wantErr(t, err, ErrConfig)
				if i != nil {
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
}

func TestZeroCursorIssuer(t *testing.T) {
	// Checks that Issue on a
	// CursorIssuer not made by NewCursorIssuer reports ErrNoKey instead of
	// panicking on its missing key and clock.
	t.Run("issue refuses without panic", func(t *testing.T) {
		var zero CursorIssuer
		c, err := zero.Issue(CursorPayload{CursorScope: testScope})
		wantErr(t, err, ErrNoKey)
		if c != "" {
			t.Fatalf("cursor %q issued without a key", c)
		}
	})

	// Checks that a CursorIssuer
	// not made by NewCursorIssuer has no key and refuses every call with
	// ErrNoKey (not a misleading "truncated" or "other session"), rather than
	// panicking on its missing scratch pool.
	t.Run("verify refuses without panic", func(t *testing.T) {
		c, err := testPoolIssuer(t).Issue(CursorPayload{CursorScope: CursorScope{ToolID: "t", CallerID: "c"}})
		if err != nil {
			t.Fatal(err)
		}
		var zero CursorIssuer
		for _, tok := range []string{c, "AAAA", "", strings.Repeat("A", MaxCursorBytes+1)} {
			if p, err := zero.Verify(tok, CursorScope{ToolID: "t", CallerID: "c"}); !errors.Is(err, ErrNoKey) || reasonText(err) == "" || p.State != nil {
				t.Fatalf("zero.Verify = %v, %v; want ErrNoKey with a reason", p, err)
			}
		}
		if tok, err := zero.Issue(CursorPayload{}); !errors.Is(err, ErrNoKey) || tok != "" || reasonText(err) == "" {
			t.Fatalf("zero.Issue = %q, %v; want ErrNoKey with a reason", tok, err)
		}
	})
}

func TestCursorSessionIsACopy(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{Session: []byte("abc")})
	i.Session()[0] = 'x'
	if string(i.Session()) != "abc" {
		t.Fatal("Session exposes internal state")
	}
	if len(newTestIssuer(t, CursorConfig{}).Session()) != 8 {
		t.Fatal("random session is not 8 bytes")
	}
}

func TestErrorCode(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{ErrCursorExpired, CodeCursorExpired},
		{ErrCursorInvalid, CodeCursorInvalid},
		{errCursorScope, CodeCursorInvalid},
		{errCursorUnknownKey, CodeCursorInvalid},
		{errCursorAge, CodeCursorExpired},
		{ErrStateInvalid, 0},
		{errors.New("other"), 0},
	}
	for _, c := range cases {
		if got := ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

type pageState struct {
	Offset int    `cbor:"1,keyasint"`
	Filter string `cbor:"2,keyasint"`
}

func TestCursorTypedState(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{})
	c, err := IssueState(i, testScope, 4, pageState{Offset: 120, Filter: "open"})
	if err != nil {
		t.Fatal(err)
	}
	st, p, err := VerifyState[pageState](i, c, testScope)
	if err != nil || st != (pageState{Offset: 120, Filter: "open"}) || p.Page != 4 {
		t.Fatalf("state=%+v page=%d err=%v", st, p.Page, err)
	}
	// A different type does not silently decode.
	type other struct {
		Name []int `cbor:"9,keyasint"`
	}
	o, p, err := VerifyState[other](i, c, testScope)
	wantErr(t, err, ErrCursorInvalid)
	if o.Name != nil || !isZeroPayload(p) {
		t.Fatal("failed typed verify returned data")
	}
	// Scope is still enforced.
	_, _, err = VerifyState[pageState](i, c, CursorScope{ToolID: "x"})
	wantErr(t, err, ErrCursorInvalid)
	// Oversize typed state is refused at issue.
	_, err = IssueState(i, testScope, 0, make([]byte, MaxOpaqueStateBytes))
	wantErr(t, err, ErrOpaqueStateTooLarge)
}

func TestCursorConcurrentIssueAndVerify(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, fixedKey(1), fixedKey(2))})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scope := testScope
			scope.CallerID = strings.Repeat("x", g)
			for n := 0; n < 300; n++ {
				c, err := i.Issue(CursorPayload{CursorScope: scope, Page: uint32(n)})
				if err != nil {
					errs <- err
					return
				}
				p, err := i.Verify(c, scope)
				if err != nil || p.Page != uint32(n) {
					errs <- errors.Join(errors.New("round trip failed"), err)
					return
				}
				if _, err := i.Verify(c, testScope); g != 0 && err == nil {
					errs <- errors.New("foreign caller accepted")
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

// A cursor whose MAC fails but whose body names another session stays 1020
// for the client, yet its Reason names the MAC failure, distinct from an
// authentic cursor of another session, so alerting can count it.
func TestCursorOfAnotherKeyAndSessionHasUnknownKeyReason(t *testing.T) {
	before := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, RandomKey()), Session: []byte("old-session")})
	c := mustIssue(t, before, CursorPayload{CursorScope: testScope})
	after := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, RandomKey()), Session: []byte("new-session")})
	_, err := after.Verify(c, testScope)
	if !errors.Is(err, ErrCursorExpired) || ErrorCode(err) != CodeCursorExpired || Reason(err) != observe.ReasonUnknownKey {
		t.Fatalf("err = %v (code %d, reason %q), want 1020 with reason %q", err, ErrorCode(err), reasonText(err), observe.ReasonUnknownKey)
	}
	// An authentic cursor of another session has the other reason.
	sameKey := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, fixedKey(1)), Session: []byte("a")})
	otherSession := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, fixedKey(1)), Session: []byte("b")})
	_, err = otherSession.Verify(mustIssue(t, sameKey, CursorPayload{CursorScope: testScope}), testScope)
	if !errors.Is(err, ErrCursorExpired) || reasonText(err) != "other server session" {
		t.Fatalf("authentic other-session cursor = %v (reason %q)", err, reasonText(err))
	}
}

// Issue 21 gap 11: a session of exactly MaxSessionBytes works; one more
// byte is a configuration error.
func TestCursorSessionOfMaxSessionBytes(t *testing.T) {
	kr := mustKeyring(t, fixedKey(1))
	session := bytes.Repeat([]byte{'s'}, MaxSessionBytes)
	i := newTestIssuer(t, CursorConfig{Keys: kr, Session: session})
	if _, err := i.Verify(mustIssue(t, i, CursorPayload{CursorScope: testScope}), testScope); err != nil {
		t.Fatalf("cursor with a %d-byte session refused: %v", MaxSessionBytes, err)
	}
	_, err := NewCursorIssuer(CursorConfig{Keys: kr, Session: append(session, 's')})
	if !errors.Is(err, ErrConfig) || reasonText(err) == "" {
		t.Fatalf("%d-byte session = %v, want ErrConfig with a reason", MaxSessionBytes+1, err)
	}
}

// TestVerifyStateIsNotAliasedToScratch checks that the State Verify
// returns is the caller's own copy: later calls reuse the pooled scratch
// and must not change it.
func TestVerifyStateIsNotAliasedToScratch(t *testing.T) {
	iss := testPoolIssuer(t)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	a, err := iss.Issue(CursorPayload{CursorScope: scope, State: []byte("first state")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := iss.Issue(CursorPayload{CursorScope: scope, State: []byte("other thing")})
	if err != nil {
		t.Fatal(err)
	}
	pa, err := iss.Verify(a, scope)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := iss.Verify(b, scope); err != nil {
			t.Fatal(err)
		}
	}
	if string(pa.State) != "first state" {
		t.Fatalf("State changed to %q by later Verify calls", pa.State)
	}
}

// TestVerifyWithoutStateReturnsNilState checks the no-state case costs no
// copy and reads as nil.
func TestVerifyWithoutStateReturnsNilState(t *testing.T) {
	iss := testPoolIssuer(t)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	c, err := iss.Issue(CursorPayload{CursorScope: scope})
	if err != nil {
		t.Fatal(err)
	}
	p, err := iss.Verify(c, scope)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != nil {
		t.Fatalf("State = %q, want nil", p.State)
	}
}

func testPoolIssuer(t *testing.T) *CursorIssuer {
	t.Helper()
	kr, err := NewKeyring(RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	iss, err := NewCursorIssuer(CursorConfig{Keys: kr})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

// TestConcurrentCursorsKeepTheirOwnPayloads issues and verifies distinct
// cursors from many goroutines at once.
func TestConcurrentCursorsKeepTheirOwnPayloads(t *testing.T) {
	iss := testPoolIssuer(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				scope := CursorScope{ToolID: fmt.Sprintf("tool%d", g), CallerID: fmt.Sprintf("caller%d", i)}
				state := bytes.Repeat([]byte{byte(g), byte(i)}, 1+i%100)
				c, err := iss.Issue(CursorPayload{CursorScope: scope, Page: uint32(i), State: state})
				if err != nil {
					errs <- err
					return
				}
				p, err := iss.Verify(c, scope)
				if err != nil {
					errs <- err
					return
				}
				if p.Page != uint32(i) || !bytes.Equal(p.State, state) || p.ToolID != scope.ToolID || p.CallerID != scope.CallerID {
					errs <- fmt.Errorf("goroutine %d call %d: got %+v", g, i, p)
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
}

// TestVerifyStateRefusesHostileState puts hostile CBOR in the opaque state of
// an authentic cursor, where VerifyState's more permissive decoder reads it.
func TestVerifyStateRefusesHostileState(t *testing.T) {
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	u64 := func(major byte) []byte { return []byte{major<<5 | 27, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }
	for _, tc := range []struct {
		name  string
		state []byte
	}{
		{"nesting over 16 levels", bytes.Repeat([]byte{0x81}, 200)},
		{"indefinite nesting", append(bytes.Repeat([]byte{0x9f}, 100), bytes.Repeat([]byte{0xff}, 100)...)},
		{"array declaring 2^63 elements", u64(4)},
		{"map declaring 2^63 pairs", u64(5)},
		{"bytes declaring 2^63", u64(2)},
		{"duplicate map key", []byte{0xa2, 0x61, 0x6b, 0x01, 0x61, 0x6b, 0x02}},
		{"indefinite-length map", []byte{0xbf, 0x61, 0x6b, 0x01, 0xff}},
		{"invalid UTF-8 text", []byte{0x61, 0xff}},
		{"trailing bytes", []byte{0x01, 0x02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cursor, err := iss.Issue(CursorPayload{CursorScope: scope, State: tc.state})
			if err != nil {
				t.Fatal(err)
			}
			v, p, err := VerifyState[any](iss, cursor, scope)
			if !errors.Is(err, ErrCursorInvalid) || v != nil || p.State != nil {
				t.Errorf("VerifyState = %v, %+v, %v; want ErrCursorInvalid and zero values", v, p, err)
			}
			if n := bytesPerRun(5, func() { _, _, _ = VerifyState[any](iss, cursor, scope) }); n > 16<<10 {
				t.Errorf("%d bytes allocated refusing a %d-byte cursor", n, len(cursor))
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Hand-MACed signed bodies (the independent construction of
// cursor_vectors_test.go): what an issuer could never write, behind a
// valid MAC.

// vecSignedTestBody is the signed body { 1: 2, 2: vecKey's id, 5: page,
// 6: issued, 7: vecSession's tag, 8: state }.
func vecSignedTestBody(page uint32, issued int64, state []byte) []byte {
	return vecSignedBody(vecKeyID(vecKey), page, issued, vecSessionTag(vecSession), state)
}

// macTestBody signs body under key for the scope t / c, no arguments.
func macTestBody(key, body []byte) string {
	return vecSignCursor(key, body, vecScope("t", "c", nil))
}

// Issue 21 gap 11: an explicit empty state field (key 8 = h”) behind a
// valid MAC is a second spelling of "no state" and is refused.
func TestCursorRefusesExplicitEmptyStateField(t *testing.T) {
	i := vecIssuer(t, vecNow, vecSession, vecKey)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	good := vecSignedTestBody(1, vecNow.Unix(), nil)
	if _, err := i.Verify(macTestBody(vecKey, good), scope); err != nil {
		t.Fatalf("template body refused: %v", err)
	}
	empty := append(append([]byte{0xa6}, good[1:]...), 0x08, 0x40)
	_, err := i.Verify(macTestBody(vecKey, empty), scope)
	if !errors.Is(err, ErrCursorInvalid) || Reason(err).String() != "malformed or non-canonical payload" {
		t.Fatalf("empty state field = %v (reason %q), want a malformed-payload refusal", err, Reason(err))
	}
}

// Issue 21 gap 5: MaxCursorBytes is inclusive at verify, and the length
// check runs before base64. No cursor Issue writes, nor any Verify
// accepts, reaches MaxCursorBytes any more (the scope is not carried, the
// state is at most MaxOpaqueStateBytes: the longest is the signed cursor
// of the largest state, page and issue time, under 440 characters), so the
// cap is tested with text of exactly 512 and 513 characters: a signed body
// with a 321-byte state, MACed by hand, is exactly 512 characters. It
// passes the length check, base64 and the MAC, and is refused by the
// decoder for its state; one more character is refused by the length
// check, before anything else.
func TestCursorAtExactlyMaxBytesIsAcceptedAndOneMoreRefused(t *testing.T) {
	i := vecIssuer(t, vecNow, vecSession, vecKey)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	atCap := macTestBody(vecKey, vecSignedTestBody(0, vecNow.Unix(), bytes.Repeat([]byte{'s'}, 321)))
	if len(atCap) != MaxCursorBytes {
		t.Fatalf("hand-MACed cursor is %d characters, want %d", len(atCap), MaxCursorBytes)
	}
	if _, err := i.Verify(atCap, scope); !errors.Is(err, ErrCursorInvalid) || Reason(err).String() != "malformed or non-canonical payload" {
		t.Fatalf("cursor of exactly MaxCursorBytes = %v (reason %q), want past the cap, the base64 and the MAC, refused for its state", err, Reason(err))
	}
	for _, over := range []string{atCap + "A", atCap + "AA", strings.Repeat("!", MaxCursorBytes+1)} {
		if _, err := i.Verify(over, scope); !errors.Is(err, ErrCursorInvalid) || Reason(err).String() != "over MaxCursorBytes" {
			t.Fatalf("%d-byte cursor = %v (reason %q), want over MaxCursorBytes", len(over), err, Reason(err))
		}
	}
	// 512 characters that are not base64: refused by base64, not the cap.
	if _, err := i.Verify(strings.Repeat("!", MaxCursorBytes), scope); Reason(err).String() != "not base64url" {
		t.Fatalf("512 characters of non-base64 = %v, want not base64url", err)
	}
	// The longest cursors the issuers write stay under the cap.
	for _, seal := range []bool{false, true} {
		iss := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: bytes.Repeat([]byte{1}, MaxSessionBytes),
			Now: fixedClock(time.Unix(math.MinInt64/2, 0)), TTL: -1, Seal: seal})
		tok := mustIssue(t, iss, CursorPayload{CursorScope: scope, Page: math.MaxUint32, State: seqBytes(0, MaxOpaqueStateBytes)})
		if len(tok) >= MaxCursorBytes {
			t.Errorf("seal=%v: the longest cursor is %d characters", seal, len(tok))
		}
		if _, err := iss.Verify(tok, scope); err != nil {
			t.Errorf("seal=%v: %v", seal, err)
		}
	}
}

// Every error Issue, Verify and the typed helpers return carries a Reason.
func TestCursorEveryErrorHasAReason(t *testing.T) {
	now := vecNow
	i := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(now), TTL: time.Minute})
	sealed := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(now), Seal: true})
	old := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(now.Add(-time.Hour))})
	foreign := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey2), Session: vecSession, Now: fixedClock(now)})
	good := mustIssue(t, i, CursorPayload{CursorScope: testScope, State: []byte{0x01}})
	var errs []error
	add := func(_ any, err error) { errs = append(errs, err) }
	addS := func(_ string, err error) { errs = append(errs, err) }
	addS(i.Issue(CursorPayload{CursorScope: testScope, State: make([]byte, MaxOpaqueStateBytes+1)}))
	addS(i.Issue(CursorPayload{}))
	addS(IssueState(i, testScope, 0, func() {}))
	scope := vecScope(testScope.ToolID, testScope.CallerID, nil)
	for _, tok := range []string{"", "!!!", "AAAA", strings.Repeat("A", MaxCursorBytes+1), good[:len(good)-3] + "AAA", good[:8],
		mustIssue(t, old, CursorPayload{CursorScope: testScope}),
		mustIssue(t, foreign, CursorPayload{CursorScope: testScope}),
		mustIssue(t, sealed, CursorPayload{CursorScope: testScope})[:60],
		vecFormat1Token,
		vecSignCursor(vecKey, append(vecSignedTestBody(1, now.Unix(), nil), 0x00), scope),
		vecSignCursor(vecKey, vecSignedTestBody(1, now.Unix()+120, nil), scope),
		vecSignCursor(vecKey, vecSignedBody(vecKeyID(vecKey), 1, now.Unix(), vecSessionTag([]byte("other")), nil), scope),
	} {
		add(i.Verify(tok, testScope))
	}
	add(i.Verify(good, CursorScope{ToolID: "other", CallerID: testScope.CallerID}))
	add(i.Verify(good, CursorScope{CallerID: testScope.CallerID}))
	add(i.Verify(good, CursorScope{ToolID: testScope.ToolID, CallerID: testScope.CallerID, Args: Fingerprint{1}}))
	add(i.Verify(mustIssue(t, sealed, CursorPayload{CursorScope: testScope}), CursorScope{ToolID: "other"}))
	_, _, err := VerifyState[string](i, good, testScope)
	errs = append(errs, err)
	for n, err := range errs {
		if err == nil || reasonText(err) == "" {
			t.Errorf("error %d = %v has no reason", n, err)
		}
	}
}

// hostileCursorBodies are signed bodies the cursor decoder must refuse,
// each small enough to fit a cursor once MACed. The key id (raw[5:9]) is
// vecKey's wherever the prefix is intact.
func hostileCursorBodies() []struct {
	name string
	body []byte
} {
	now := vecNow.Unix()
	good := vecSignedTestBody(1, now, nil) // a5 01 02 02 44 <kid> 05 01 06 1a .. 07 48 <tag>
	prefix := good[1:9]                    // {1: 2, 2: kid} without the map head
	tail := good[9:]                       // 05 01 06 ... 07 48 ...
	with := func(n uint64, parts ...[]byte) []byte {
		b := cborHead(nil, 5, n)
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	nested := func(depth int, open, close byte) []byte {
		b := bytes.Repeat([]byte{open}, depth)
		if close != 0 {
			b = append(b, bytes.Repeat([]byte{close}, depth)...)
		}
		return b
	}
	repl := func(old, new []byte) []byte { return bytes.Replace(good, old, new, 1) }
	u64 := func(major byte) []byte { return []byte{major<<5 | 27, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }
	return []struct {
		name string
		body []byte
	}{
		{"empty map", []byte{0xa0}},
		{"not a map", []byte{0x80}},
		{"map without session", with(4, good[1:17])},
		{"deep nesting in state (300 arrays)", with(6, prefix, tail, []byte{0x08}, nested(300, 0x81, 0), []byte{0x80})},
		{"indefinite nesting in state (150 arrays)", with(6, prefix, tail, []byte{0x08}, nested(150, 0x9f, 0xff))},
		{"map declaring 2^63 pairs", append(u64(5), good[1:]...)},
		{"map declaring 2^32 pairs", append([]byte{0xba, 0xff, 0xff, 0xff, 0xff}, good[1:]...)},
		{"state declaring 2^63 bytes", with(6, prefix, tail, []byte{0x08}, u64(2))},
		{"session declaring 2^32 bytes", repl([]byte{0x07, 0x48}, []byte{0x07, 0x5a, 0xff, 0xff, 0xff, 0xff})},
		{"state array declaring 2^63 elements", with(6, prefix, tail, []byte{0x08}, u64(4))},
		{"state of MaxOpaqueStateBytes+1", vecSignedTestBody(1, now, seqBytes(0, MaxOpaqueStateBytes+1))},
		{"explicit empty state", with(6, prefix, tail, []byte{0x08, 0x40})},
		{"duplicate key", with(6, prefix, tail, []byte{0x05, 0x02})},
		{"duplicate key, same value", with(6, prefix, tail, []byte{0x01, 0x02})},
		{"indefinite-length map", append(append([]byte{0xbf}, good[1:]...), 0xff)},
		{"indefinite-length session", repl([]byte{0x07, 0x48}, []byte{0x07, 0x5f, 0x48})},
		{"tag on issued-at", repl([]byte{0x06, 0x1a}, []byte{0x06, 0xc1, 0x1a})},
		{"bignum page", repl([]byte{0x05, 0x01}, []byte{0x05, 0xc2, 0x41, 0x01})},
		{"self-described CBOR tag", append([]byte{0xd9, 0xd9, 0xf7}, good...)},
		{"embedded CBOR tag on state", with(6, prefix, tail, []byte{0x08, 0xd8, 0x18, 0x41, 0xa0})},
		{"unknown field 9", with(6, prefix, tail, []byte{0x09, 0x00})},
		{"removed field 3 (format 1's caller)", with(6, prefix, []byte{0x03, 0x61, 0x63}, tail)},
		{"text key", with(6, prefix, tail, []byte{0x61, 0x78, 0x00})},
		{"negative page", repl([]byte{0x05, 0x01}, []byte{0x05, 0x20})},
		{"page over uint32", repl([]byte{0x05, 0x01}, []byte{0x05, 0x1b, 0, 0, 0, 1, 0, 0, 0, 0})},
		{"float page", repl([]byte{0x05, 0x01}, []byte{0x05, 0xf9, 0x3c, 0x00})},
		{"text key id", repl([]byte{0x02, 0x44}, []byte{0x02, 0x64})},
		{"key id of 5 bytes", with(5, good[1:4], []byte{0x45}, good[5:9], []byte{0x00}, tail)},
		{"session tag of 7 bytes", vecSignedBody(vecKeyID(vecKey), 1, now, vecSessionTag(vecSession)[:7], nil)},
		{"session tag of 0 bytes", vecSignedBody(vecKeyID(vecKey), 1, now, []byte{}, nil)},
		{"version 0", repl([]byte{0x01, 0x02}, []byte{0x01, 0x00})},
		{"version 3 on a signed body", repl([]byte{0x01, 0x02}, []byte{0x01, 0x03})},
		{"non-minimal integer", repl([]byte{0x05, 0x01}, []byte{0x05, 0x18, 0x01})},
		{"non-minimal map head", append([]byte{0xb8, 0x05}, good[1:]...)},
		{"keys out of order", with(5, good[3:9], good[1:3], tail)},
		{"trailing byte", append(append([]byte(nil), good...), 0x00)},
		{"two maps", append(append([]byte(nil), good...), good...)},
		{"truncated", good[:len(good)-1]},
		{"break outside indefinite item", append([]byte{0xff}, good...)},
		{"reserved additional info", append([]byte{0x1c}, good...)},
	}
}

func TestVerifyRefusesHostileCBOR(t *testing.T) {
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	if _, err := iss.Verify(macTestBody(vecKey, vecSignedTestBody(1, vecNow.Unix(), nil)), scope); err != nil {
		t.Fatalf("the template body is refused: %v", err)
	}
	for _, h := range hostileCursorBodies() {
		t.Run(h.name, func(t *testing.T) {
			for _, signer := range []struct {
				name string
				key  []byte
			}{{"mac-valid", vecKey}, {"unauthenticated", vecKey2}} {
				cursor := macTestBody(signer.key, h.body)
				if len(cursor) > MaxCursorBytes {
					t.Fatalf("hostile cursor is %d bytes, over the cap", len(cursor))
				}
				p, err := iss.Verify(cursor, scope)
				if !errors.Is(err, ErrCursorInvalid) || Reason(err).String() == "" {
					t.Errorf("%s: error %v, want ErrCursorInvalid", signer.name, err)
				}
				if !isZeroPayload(p) {
					t.Errorf("%s: rejected cursor returned %+v", signer.name, p)
				}
				if n := bytesPerRun(5, func() { _, _ = iss.Verify(cursor, scope) }); n > 16<<10 {
					t.Errorf("%s: %d bytes allocated refusing a %d-byte cursor", signer.name, n, len(cursor))
				}
			}
		})
	}
}

// Sealed cursors of states of 0 to MaxOpaqueStateBytes bytes come in at
// most 5 lengths: the plaintext is padded to 64, 128, 192, 256 or 288
// bytes, so a cursor's length tells only its class.
func TestSealedCursorLengthClasses(t *testing.T) {
	iss := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(vecNow), Seal: true})
	lengths := map[int]int{}
	for n := 0; n <= MaxOpaqueStateBytes; n++ {
		first := 0
		for _, page := range []uint32{0, 23, 24, 255, 256, 1 << 20, math.MaxUint32} {
			tok := mustIssue(t, iss, CursorPayload{CursorScope: testScope, Page: page, State: seqBytes(0, n)})
			lengths[len(tok)]++
			// The page's CBOR head is 1 to 5 bytes; the length must not
			// tell which.
			if first == 0 {
				first = len(tok)
			} else if len(tok) != first {
				t.Fatalf("state of %d bytes: page %d gives %d characters, page 0 gives %d", n, page, len(tok), first)
			}
		}
	}
	if len(lengths) > 5 {
		t.Fatalf("%d lengths of sealed cursors: %v", len(lengths), lengths)
	}
	t.Logf("lengths of sealed cursors (characters: count): %v", lengths)
}

// Issue 21 gap 8: the other-session hint of an unknown key id needs an
// 8-byte session tag; a body naming an unknown key with an empty one is
// ErrCursorInvalid, with the same reason.
func TestCursorForgedWithEmptySessionIsInvalidNotExpired(t *testing.T) {
	i := vecIssuer(t, vecNow, vecSession, vecKey)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	kid := vecKeyID(vecKey2)
	for _, c := range []struct {
		tag  []byte
		want error
	}{{[]byte{}, ErrCursorInvalid}, {vecSessionTag(vecSession), ErrCursorInvalid}, {vecSessionTag([]byte("theirs")), ErrCursorExpired}} {
		tok := macTestBody(vecKey2, vecSignedBody(kid, 1, vecNow.Unix(), c.tag, nil))
		_, err := i.Verify(tok, scope)
		if !errors.Is(err, c.want) || Reason(err).String() != "signed by a key not in the ring: retired or foreign" {
			t.Errorf("unknown key, session tag %x: %v (reason %q), want %v", c.tag, err, Reason(err), c.want)
		}
	}
}

// TestCursorMaxRawLen pins the size bound StateBudget is computed from:
// maxRawLen(n) is exactly the decoded length of the longest cursor an
// issuer writes with an n-byte state (the largest page, a 9-byte issue
// time head), signed and sealed.
func TestCursorMaxRawLen(t *testing.T) {
	for _, seal := range []bool{false, true} {
		i := newTestIssuer(t, CursorConfig{Now: fixedClock(time.Unix(math.MinInt64/2, 0)), TTL: -1, Seal: seal})
		for _, n := range []int{0, 1, 50, 180, MaxOpaqueStateBytes} {
			t.Run(fmt.Sprintf("seal=%v/state=%d", seal, n), func(t *testing.T) {
				c := mustIssue(t, i, CursorPayload{CursorScope: testScope, Page: math.MaxUint32, State: seqBytes(1, n)})
				raw, err := b64.DecodeString(c)
				if err != nil {
					t.Fatal(err)
				}
				if got := i.maxRawLen(n); got != len(raw) {
					t.Fatalf("maxRawLen(%d) = %d, want %d, the decoded length of the longest cursor", n, got, len(raw))
				}
			})
		}
	}
}

// TestCursorVerifyLengthBoundaries pins where Verify's length checks fall:
// the reason of a cursor at each boundary, and that the observer is told
// of no key for a refusal before any MAC or AEAD ran.
func TestCursorVerifyLengthBoundaries(t *testing.T) {
	clock := newTestClock()
	rec := &recorder{}
	i := newTestIssuer(t, CursorConfig{Now: clock.Now, Observer: rec})
	kid := i.ring().ids[0][:]
	prefix := func(version byte, pairs byte) []byte {
		return append([]byte{0xa0 | pairs, cursorwire.KeyVersion, version, cursorwire.KeyKeyID, 0x40 | cursorwire.KeyIDSize}, kid...)
	}
	check := func(t *testing.T, raw []byte, want string) {
		t.Helper()
		rec.take()
		p, err := i.Verify(b64.EncodeToString(raw), testScope)
		if got := reasonText(err); got != want {
			t.Fatalf("%d-byte cursor: reason %q (%v), want %q", len(raw), got, err, want)
		}
		if !isZeroPayload(p) {
			t.Fatal("payload returned with the error")
		}
		if e := rec.only(t); e.Key != observe.KeyNone || e.Outcome != observe.OutcomeRefused {
			t.Fatalf("event %+v, want a refusal naming no key", e)
		}
	}
	t.Run("nine bytes naming no layout are malformed, not truncated", func(t *testing.T) {
		check(t, make([]byte, cursorwire.PrefixLen), "malformed or non-canonical payload")
	})
	t.Run("eight bytes are truncated", func(t *testing.T) {
		check(t, make([]byte, cursorwire.PrefixLen-1), "truncated")
	})
	t.Run("a signed prefix and a MAC without body is truncated", func(t *testing.T) {
		raw := append(prefix(cursorwire.Version, 5), make([]byte, macSize)...)
		check(t, raw, "truncated")
	})
	t.Run("a signed prefix, one body byte and a MAC is checked by the MAC", func(t *testing.T) {
		raw := append(append(prefix(cursorwire.Version, 5), 0), make([]byte, macSize)...)
		check(t, raw, "mac mismatch")
	})
	t.Run("a sealed prefix with a broken header is malformed", func(t *testing.T) {
		raw := append(prefix(cursorwire.VersionSealed, 4), make([]byte, 60)...)
		check(t, raw, "malformed or non-canonical payload")
	})
	hdr := cursorwire.AppendSealedHeader(nil, cursorwire.VersionSealed, kid, clock.Now().Unix(), i.sessTag[:])
	t.Run("a sealed header with one byte short of the AEAD overhead is truncated", func(t *testing.T) {
		raw := append(append([]byte(nil), hdr...), make([]byte, xaes.Overhead-1)...)
		check(t, raw, "truncated")
	})
	t.Run("a sealed cursor that does not open names no key", func(t *testing.T) {
		raw := append(append([]byte(nil), hdr...), make([]byte, xaes.Overhead+64)...)
		check(t, raw, "sealed cursor does not open (tampered, other key, or other scope)")
	})
	t.Run("an authentic sealed cursor of an empty plaintext is opened, then malformed", func(t *testing.T) {
		aad := appendScope(append([]byte(nil), hdr...), &testScope)
		raw := i.ring().aeads[0].Seal(append([]byte(nil), hdr...), nil, aad)
		if len(raw) != len(hdr)+xaes.Overhead {
			t.Fatalf("sealed length %d, want header and overhead %d", len(raw), len(hdr)+xaes.Overhead)
		}
		rec.take()
		_, err := i.Verify(b64.EncodeToString(raw), testScope)
		if got := reasonText(err); got != "malformed or non-canonical payload" {
			t.Fatalf("reason %q (%v), want the plaintext refused after opening", got, err)
		}
		if e := rec.only(t); e.Key != observe.KeyPrimary {
			t.Fatalf("event %+v, want the primary key named: the AEAD opened", e)
		}
	})
}

// TestEncodeStateKeepsTheEncodingError pins that a state which does not
// encode is refused with the encoder's own error as the cause, even when
// its type could hold a time.Time (the decode-back check runs only on a
// state that encoded).
func TestEncodeStateKeepsTheEncodingError(t *testing.T) {
	i := newTestIssuer(t, CursorConfig{})
	for name, state := range map[string]any{
		"a channel in an interface map": map[string]any{"c": make(chan int)},
		"a function in an any":          any(func() {}),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := IssueState(i, testScope, 1, state)
			wantErr(t, err, ErrUnencodable)
			var unsupported *cbor.UnsupportedTypeError
			if !errors.As(err, &unsupported) {
				t.Fatalf("error %v (%T cause), want the encoder's UnsupportedTypeError as the cause", err, errors.Unwrap(err))
			}
		})
	}
}

// TestMayHoldTime pins which state types encodeState decodes back: those
// that can hold a time.Time, and any nested past depth 8 (a recursive
// type), counting every slice, pointer, map and struct level.
func TestMayHoldTime(t *testing.T) {
	nest := func(n int, wrap func(reflect.Type) reflect.Type) reflect.Type {
		typ := reflect.TypeFor[int]()
		for range n {
			typ = wrap(typ)
		}
		return typ
	}
	arrayOf := func(elem reflect.Type) reflect.Type { return reflect.ArrayOf(1, elem) }
	structOf := func(inner reflect.Type) reflect.Type {
		return reflect.StructOf([]reflect.StructField{{Name: "A", Type: inner}})
	}
	for _, tc := range []struct {
		name string
		typ  reflect.Type
		want bool
	}{
		{"int", reflect.TypeFor[int](), false},
		{"string", reflect.TypeFor[string](), false},
		{"time.Time", reflect.TypeFor[time.Time](), true},
		{"an interface", reflect.TypeFor[any](), true},
		{"a pointer to a time", reflect.TypeFor[*time.Time](), true},
		{"a map keyed by time", reflect.TypeFor[map[time.Time]int](), true},
		{"a map of times", reflect.TypeFor[map[int]time.Time](), true},
		{"a map of ints", reflect.TypeFor[map[string]int](), false},
		{"a struct with a time field", reflect.TypeFor[struct {
			N int
			T time.Time
		}](), true},
		{"a struct without one", reflect.TypeFor[struct{ N, M int }](), false},
		{"8 nested slices of int", nest(8, reflect.SliceOf), false},
		{"9 nested slices of int", nest(9, reflect.SliceOf), true},
		{"8 nested structs of int", nest(8, structOf), false},
		{"9 nested structs of int", nest(9, structOf), true},
		{"9 nested maps of int", nest(9, func(e reflect.Type) reflect.Type { return reflect.MapOf(reflect.TypeFor[string](), e) }), true},
		{"a map keyed by 7 nested arrays of int", reflect.MapOf(nest(7, arrayOf), reflect.TypeFor[int]()), false},
		{"a map keyed by 8 nested arrays of int", reflect.MapOf(nest(8, arrayOf), reflect.TypeFor[int]()), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayHoldTime(tc.typ, 0); got != tc.want {
				t.Fatalf("mayHoldTime(%v) = %v, want %v", tc.typ, got, tc.want)
			}
		})
	}
}

// TestCursorVerifyAllocatesOnlyTheState: a Verify that passes, signed or
// sealed, allocates once, the copy of the state it returns, and not at all
// for a cursor without state (docs/benchmarks.md).
func TestCursorVerifyAllocatesOnlyTheState(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	for _, seal := range []bool{false, true} {
		i := newTestIssuer(t, CursorConfig{Seal: seal})
		for _, state := range [][]byte{nil, bytes.Repeat([]byte{7}, 64)} {
			c, err := i.Issue(CursorPayload{CursorScope: testScope, Page: 3, State: state})
			if err != nil {
				t.Fatal(err)
			}
			want := 0.0
			if len(state) > 0 {
				want = 1
			}
			if n := testing.AllocsPerRun(100, func() {
				if _, err := i.Verify(c, testScope); err != nil {
					t.Fatal(err)
				}
			}); n != want {
				t.Errorf("seal %v, %d bytes of state: Verify allocates %v times, want %v", seal, len(state), n, want)
			}
		}
	}
}
