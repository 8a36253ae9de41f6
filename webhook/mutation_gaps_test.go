package webhook

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
	"github.com/ctoken/ctoken/observe"
	"github.com/ctoken/ctoken/observe/observetest"
	"github.com/ctoken/ctoken/replay"
)

// slackHeaders signs body under Slack at ts, independently of the
// package's signer (which signs only Events API callbacks).
func slackHeaders(ts int64, body string) http.Header {
	h := http.Header{}
	h.Set(HeaderSlackTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSlackSignature, "v0="+hex.EncodeToString(standardMAC([]byte(slackSecret), "v0:"+strconv.FormatInt(ts, 10)+":"+body)))
	return h
}

// A Slack body is read as a JSON object after any JSON white space (space,
// tab, line feed, carriage return): its event_id is the delivery ID, and a
// broken object is refused. A body that is empty, only white space, or
// starts with anything else is not JSON and is identified by its signature.
func TestSlackEventIDIsReadAfterLeadingJSONWhiteSpace(t *testing.T) {
	const ts = 1531420618
	v := newVerifier(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}, Now: clocktest.At(time.Unix(ts, 0)).Now})
	const event = `{"type":"event_callback","event_id":"Ev01"}`
	for _, tc := range []struct {
		name, body string
		bySig      bool  // the ID is the signature, not Ev01
		want       error // nil: accepted
	}{
		{"no white space", event, false, nil},
		{"space", " " + event, false, nil},
		{"tab", "\t" + event, false, nil},
		{"line feed", "\n" + event, false, nil},
		{"carriage return", "\r" + event, false, nil},
		{"all four", " \t\n\r" + event, false, nil},
		{"broken object after white space", "\r\n\t " + `{"event_id":"Ev01"`, false, ErrMalformed},
		{"empty body", "", true, nil},
		{"only white space", " \t\r\n", true, nil},
		{"form body", "token=x&command=%2Fhello", true, nil},
		{"vertical tab is not JSON white space", "\v" + event, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := slackHeaders(ts, tc.body)
			d, err := v.Verify(h, []byte(tc.body))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				if Reason(err) != "JSON body malformed or its event_id not a string of 1 to 256 printable ASCII characters" {
					t.Fatalf("reason %q", Reason(err))
				}
				return
			}
			want := "Ev01"
			if tc.bySig {
				want = h.Get(HeaderSlackSignature)
			}
			if d.ID != want {
				t.Fatalf("ID %q, want %q", d.ID, want)
			}
		})
	}
}

// A timestamp of "0" is one digit, not a leading zero: it is well formed,
// so an authentic delivery signed at 0 is refused as too old (401), not
// as malformed (400).
func TestStandardWebhooksTimestampZeroIsWellFormed(t *testing.T) {
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clocktest.At(time.Unix(stdTS, 0)).Now})
	key, err := schemeStandard.parseSecret(stdSecret)
	if err != nil {
		t.Fatal(err)
	}
	h := stdHeaders(stdID, 0, signStandard(key, stdID, 0, []byte(stdBody)))
	if h.Get(HeaderStandardTimestamp) != "0" {
		t.Fatalf("test premise: timestamp %q", h.Get(HeaderStandardTimestamp))
	}
	if _, err := v.Verify(h, []byte(stdBody)); !errors.Is(err, ErrTimestamp) || Reason(err) != "timestamp too old" {
		t.Fatalf("Verify = %v (%q), want ErrTimestamp (timestamp too old)", err, Reason(err))
	}
}

// A v1 entry is the canonical standard base64 of exactly 32 bytes: 44
// characters holding 33 bytes (no padding) whose first 32 are the genuine
// MAC are not a signature, under Standard Webhooks and Svix.
func TestStandardWebhooksRefusesV1EntryOfThirtyThreeBytes(t *testing.T) {
	key, err := schemeStandard.parseSecret(stdSecret)
	if err != nil {
		t.Fatal(err)
	}
	long := "v1," + base64.StdEncoding.EncodeToString(append(standardMAC(key, stdID+"."+strconv.Itoa(stdTS)+"."+stdBody), 0))
	if len(long) != len(stdSig) {
		t.Fatalf("test premise: %d characters", len(long))
	}
	for _, scheme := range []Scheme{StandardWebhooks(), Svix()} {
		v := newVerifier(t, Config{Scheme: scheme, Secrets: []string{stdSecret}, Now: clocktest.At(time.Unix(stdTS, 0)).Now})
		p := v.p
		h := http.Header{}
		h.Set(p.idHeader, stdID)
		h.Set(p.tsHeader, strconv.Itoa(stdTS))
		h.Set(p.sigHeader, stdSig)
		if _, err := v.Verify(h, []byte(stdBody)); err != nil {
			t.Fatalf("%v: genuine delivery refused: %v", scheme, err)
		}
		h.Set(p.sigHeader, long)
		if _, err := v.Verify(h, []byte(stdBody)); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
			t.Fatalf("%v: 33-byte entry: %v (%q), want ErrSignature (signature header malformed)", scheme, err, Reason(err))
		}
	}
}

// A v1 entry of the right length that is not canonical base64 is skipped,
// not the end of the header: the genuine entry after it is still found.
func TestStandardWebhooksSkipsUndecodableV1EntryAndChecksTheNext(t *testing.T) {
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clocktest.At(time.Unix(stdTS, 0)).Now})
	for _, bad := range []string{
		"v1," + strings.Repeat("!", sigTextLen),          // not base64
		"v1," + strings.Repeat("A", sigTextLen-1) + "B",  // 33 bytes, no padding
		"v1," + strings.Repeat("A", sigTextLen-2) + "==", // 31 bytes
		"v1," + strings.Repeat("A", sigTextLen-2) + "B=", // non-zero trailing bits
	} {
		if len(bad) != len(stdSig) {
			t.Fatalf("test premise: %q is %d characters", bad, len(bad))
		}
		if _, err := v.Verify(stdHeaders(stdID, stdTS, bad+" "+stdSig), []byte(stdBody)); err != nil {
			t.Fatalf("%q then the genuine entry: %v", bad, err)
		}
	}
}

// Empty items in a Stripe-Signature header (a leading, doubled or
// trailing comma) are skipped like items of unknown keys.
func TestStripeSkipsEmptyHeaderItems(t *testing.T) {
	cfg := Config{Scheme: Stripe(), Secrets: []string{stripeSecret}, Now: newStepClock().Now}
	v := newVerifier(t, cfg)
	body := `{"id":"evt_1"}`
	sig := signed(t, newSigner(t, cfg), "evt_1", body).Get(HeaderStripeSignature)
	tItem, v1Item, ok := strings.Cut(sig, ",")
	if !ok {
		t.Fatalf("test premise: header %q", sig)
	}
	for _, hdr := range []string{
		"," + sig,
		tItem + ",," + v1Item,
		sig + ",",
		",," + tItem + ",,," + v1Item + ",,",
	} {
		h := http.Header{}
		h.Set(HeaderStripeSignature, hdr)
		if _, err := v.Verify(h, []byte(body)); err != nil {
			t.Fatalf("%q: %v", hdr, err)
		}
	}
}

// A Stripe-Signature header of exactly MaxSignatureHeaderBytes holding as
// many well-formed v1 items as fit (the genuine one last) and then one
// more, empty, v1 item is accepted: the header is not over the cap, every
// well-formed item is compared, and the item past them is skipped.
func TestStripeHeaderFullOfV1ItemsAtTheCapIsAccepted(t *testing.T) {
	cfg := Config{Scheme: Stripe(), Secrets: []string{stripeSecret}, Now: newStepClock().Now}
	v := newVerifier(t, cfg)
	body := `{"id":"evt_1"}`
	sig := signed(t, newSigner(t, cfg), "evt_1", body).Get(HeaderStripeSignature)
	tItem, v1Item, _ := strings.Cut(sig, ",")
	forged := ",v1=" + strings.Repeat("0", 2*32)
	hdr := tItem + strings.Repeat(forged, maxStripeV1-1) + "," + v1Item
	tail := ",v1=" + strings.Repeat("x", MaxSignatureHeaderBytes-len(hdr)-len(",v1="))
	hdr += tail
	if len(hdr) != MaxSignatureHeaderBytes || maxStripeV1 != 60 {
		t.Fatalf("test premise: %d bytes, maxStripeV1 %d", len(hdr), maxStripeV1)
	}
	h := http.Header{}
	h.Set(HeaderStripeSignature, hdr)
	if _, err := v.Verify(h, []byte(body)); err != nil {
		t.Fatalf("%d-byte header of %d v1 items and an empty one: %v", len(hdr), maxStripeV1, err)
	}
}

// timingStore is a MemoryStore that records, for each ConfirmLease and
// ReleaseLease call, when it came and its context's deadline; while
// failing is set ConfirmLease fails without asking the MemoryStore.
type timingStore struct {
	*replay.MemoryStore
	failing bool

	mu               sync.Mutex
	confirmAt        []time.Time
	confirmDeadlines []time.Time
	releaseDeadlines []time.Time
}

func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	return d
}

func (s *timingStore) ConfirmLease(ctx context.Context, id, token string, until time.Time) error {
	s.mu.Lock()
	s.confirmAt = append(s.confirmAt, time.Now())
	s.confirmDeadlines = append(s.confirmDeadlines, deadlineOf(ctx))
	failing := s.failing
	s.mu.Unlock()
	if failing {
		return errStoreDown
	}
	return s.MemoryStore.ConfirmLease(ctx, id, token, until)
}

func (s *timingStore) ReleaseLease(ctx context.Context, id, token string) error {
	s.mu.Lock()
	s.releaseDeadlines = append(s.releaseDeadlines, deadlineOf(ctx))
	s.mu.Unlock()
	return s.MemoryStore.ReleaseLease(ctx, id, token)
}

// newTimedLease is a lease of the given length on a fresh delivery, held
// in a timingStore (the real clock throughout: Confirm and Release measure
// their waits with it).
func newTimedLease(t *testing.T, lease time.Duration) (*timingStore, *Lease) {
	t.Helper()
	store := &timingStore{MemoryStore: replay.NewMemoryStore(0)}
	return store, acquireOne(t, store, lease)
}

// acquireOne verifies one signed delivery through a verifier on store
// (lease 0: the default) and returns the lease Acquire gives for it.
func acquireOne(t *testing.T, store replay.Store, lease time.Duration) *Lease {
	t.Helper()
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Replay: store, Namespace: "endpoint", Lease: lease}
	v := newVerifier(t, cfg)
	d, err := v.Verify(signed(t, newSigner(t, cfg), "evt-1", "x"), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := v.Acquire(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Confirm within the lease gives the store until the lease expires, and
// no longer.
func TestLeaseConfirmWaitsForTheStoreUntilTheLeaseExpires(t *testing.T) {
	store, l := newTimedLease(t, time.Minute)
	if err := l.Confirm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(store.confirmDeadlines) != 1 || !store.confirmDeadlines[0].Equal(l.Expires()) {
		t.Fatalf("ConfirmLease deadlines %v, want one: the lease's expiry %v", store.confirmDeadlines, l.Expires())
	}
}

// Confirm called after the lease expired gives the store a quarter of the
// lease from the call.
func TestLeaseConfirmAfterExpiryWaitsAQuarterLease(t *testing.T) {
	const lease = 40 * time.Millisecond
	store, l := newTimedLease(t, lease)
	time.Sleep(time.Until(l.Expires()) + 5*time.Millisecond)
	before := time.Now()
	if err := l.Confirm(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantQuarterLease(t, "ConfirmLease", store.confirmDeadlines, before, time.Now(), lease)
}

// Confirm retries a failing store with a wait that doubles from 10ms, so
// a store that is down is not hammered.
func TestLeaseConfirmBacksOffBetweenStoreRetries(t *testing.T) {
	// A 1 s lease: retries 10, 20, 40, 80, 160 and 320 ms apart fit (7
	// calls, the last 630 ms in); the next wait, 640 ms, would end past
	// the lease. At least 3 calls holds unless the machine stalls for
	// most of a second.
	store, l := newTimedLease(t, time.Second)
	store.failing = true
	if err := l.Confirm(context.Background()); !errors.Is(err, ErrReplayStore) || !errors.Is(err, errStoreDown) {
		t.Fatalf("Confirm = %v, want ErrReplayStore and the store's error", err)
	}
	at := store.confirmAt
	if len(at) < 3 || len(at) > 7 {
		t.Fatalf("ConfirmLease called %d times within a 1s lease, want 3 to 7 (10, 20, 40, 80, 160, 320ms apart)", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap, want := at[i].Sub(at[i-1]), 10*time.Millisecond<<(i-1); gap < want {
			t.Fatalf("retry %d came %v after the last, want at least %v", i, gap, want)
		}
	}
}

// Release gives the store a quarter of the lease.
func TestLeaseReleaseWaitsAQuarterLease(t *testing.T) {
	const lease = time.Minute
	store, l := newTimedLease(t, lease)
	before := time.Now()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantQuarterLease(t, "ReleaseLease", store.releaseDeadlines, before, time.Now(), lease)
}

// wantQuarterLease fails t unless the store's method was called once, with
// a deadline a quarter lease after a call made between before and after.
func wantQuarterLease(t *testing.T, method string, deadlines []time.Time, before, after time.Time, lease time.Duration) {
	t.Helper()
	if len(deadlines) != 1 {
		t.Fatalf("%s called %d times", method, len(deadlines))
	}
	if dl := deadlines[0]; dl.Before(before.Add(lease/4)) || dl.After(after.Add(lease/4)) {
		t.Fatalf("%s deadline %v after the call, want a quarter lease (%v)", method, dl.Sub(before), lease/4)
	}
}

// A delivery signed by several of the verifier's Ed25519 keys (a sender
// signing with both during a rotation) is reported as verified by the
// first of them in the verifier's order.
func TestEd25519ReportsTheFirstMatchingKey(t *testing.T) {
	clk := newStepClock()
	log := &observetest.Recorder{}
	s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv, edPriv2}, Now: clk.Now})
	h := signed(t, s, "msg_1", "{}")
	for _, tc := range []struct {
		pubs []string
		want observe.KeyPosition
	}{
		{[]string{edPub, edPub2}, observe.KeyPrimary},
		{[]string{edPub2, edPub}, observe.KeyPrimary},
		{[]string{edPub, edPub, edPub2}, observe.KeyPrimary},
	} {
		v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: tc.pubs, Now: clk.Now, Observer: log})
		if _, err := v.Verify(h, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if e := log.Only(t, "verify"); e != webhookEvent(observe.OutcomeVerified, observe.ReasonNone, tc.want) {
			t.Fatalf("keys %d: event %+v, want verified by %v", len(tc.pubs), e, tc.want)
		}
	}
}

// An Ed25519 signature header of exactly MaxSignatureHeaderBytes is
// parsed; one byte more is refused.
func TestEd25519SignatureHeaderAtCapAcceptedAndOneOverRefused(t *testing.T) {
	clk := newStepClock()
	s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
	v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
	h := signed(t, s, "msg_1", "{}")
	at := h.Get(HeaderStandardSignature) + strings.Repeat(" ", MaxSignatureHeaderBytes-len(h.Get(HeaderStandardSignature)))
	h.Set(HeaderStandardSignature, at)
	if _, err := v.Verify(h, []byte("{}")); err != nil {
		t.Fatalf("%d-byte signature header: %v", len(at), err)
	}
	h.Set(HeaderStandardSignature, at+" ")
	if _, err := v.Verify(h, []byte("{}")); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
		t.Fatalf("%d-byte signature header: %v", len(at)+1, err)
	}
}

// Only an entry of exactly "v1a," and the 88-character canonical base64 of
// 64 bytes is an Ed25519 signature: the genuine signature under another
// version tag, or with a character more, is not, and neither is an entry
// too short to hold a version. Each such entry is skipped, and a genuine
// entry after it is still found.
func TestEd25519OnlyReadsV1AEntriesOfTheExactLength(t *testing.T) {
	clk := newStepClock()
	s := newSigner(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
	v := newVerifier(t, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
	h := signed(t, s, "msg_1", "{}")
	genuine := h.Get(HeaderStandardSignature)
	sig, ok := strings.CutPrefix(genuine, "v1a,")
	if !ok || len(sig) != ed25519SigTextLen {
		t.Fatalf("test premise: %q", genuine)
	}
	for _, entry := range []string{
		"v1b," + sig,
		"v1," + sig + "A",
		"v1a," + sig + "A",
		"v1a," + sig + "=",
		"v1a," + sig[:len(sig)-1],
		"v1a," + strings.Repeat("!", ed25519SigTextLen),           // not base64
		"v1a," + strings.Repeat("A", ed25519SigTextLen),           // 66 bytes
		"v1a," + strings.Repeat("A", ed25519SigTextLen-3) + "B==", // non-zero trailing bits
		"v1",
		"v",
	} {
		h.Set(HeaderStandardSignature, entry)
		if _, err := v.Verify(h, []byte("{}")); !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
			t.Fatalf("%q: %v, want ErrSignature (signature header malformed)", entry, err)
		}
		h.Set(HeaderStandardSignature, entry+" "+genuine)
		if _, err := v.Verify(h, []byte("{}")); err != nil {
			t.Fatalf("%q then the genuine entry: %v", entry, err)
		}
	}
}

// A delivery signed by several of the verifier's HMAC secrets (a sender
// signing with both during a rotation) is reported as verified by the
// first of them in the verifier's order.
func TestHMACSchemesReportTheFirstMatchingSecret(t *testing.T) {
	clk := newStepClock()
	log := &observetest.Recorder{}
	s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret, stdSecret2}, Now: clk.Now})
	h := signed(t, s, "msg_1", "{}")
	for _, secrets := range [][]string{
		{stdSecret, stdSecret2},
		{stdSecret2, stdSecret},
		{stdSecret, stdSecret, stdSecret2},
	} {
		v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: secrets, Now: clk.Now, Observer: log})
		if _, err := v.Verify(h, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if e := log.Only(t, "verify"); e != webhookEvent(observe.OutcomeVerified, observe.ReasonNone, observe.KeyPrimary) {
			t.Fatalf("%d secrets: event %+v, want verified by the primary", len(secrets), e)
		}
	}
}

// The event id is read exactly wherever JSON white space stands around the
// members and values of the body (after a string, number, object or array
// value too): Stripe's "id" and Slack's "event_id".
func TestBodyEventIDIsReadExactlyAroundJSONWhiteSpace(t *testing.T) {
	clk := newStepClock()
	for _, tc := range []struct {
		scheme Scheme
		secret string
		id     string
	}{
		{Stripe(), stripeSecret, "evt_1"},
		{Slack(), slackSecret, "Ev01"},
	} {
		name := "id"
		if tc.scheme == Slack() {
			name = "event_id"
		}
		cfg := Config{Scheme: tc.scheme, Secrets: []string{tc.secret}, Now: clk.Now}
		s, v := newSigner(t, cfg), newVerifier(t, cfg)
		member := `"` + name + `":"` + tc.id + `"`
		for _, body := range []string{
			`{` + member + ` }`,
			`{ "` + name + `" : "` + tc.id + `" , "object" : "event" }`,
			`{"object":"event",` + member + "\n}",
			`{"data":{"x":[1,2]} ,` + member + `}`,
			`{"list":[1, 2]` + "\t" + `,` + member + `}`,
			`{"n":12345 ,` + member + `}`,
			`{"t":true` + "\r\n" + `,` + member + `}`,
			`{"s":"a\"b}" ,` + member + `,"z":null}`,
			`{"data":{"` + name + `":"other"} ,` + member + `}`,
		} {
			h := http.Header{}
			if err := s.Sign(h, tc.id, []byte(body)); err != nil {
				t.Fatalf("%v: Sign(%q) = %v", tc.scheme, body, err)
			}
			d, err := v.Verify(h, []byte(body))
			if err != nil || d.ID != tc.id {
				t.Fatalf("%v: Verify(%q) = ID %q, %v; want %q", tc.scheme, body, d.ID, err, tc.id)
			}
		}
	}
}

// A JSON string of the body is decoded as encoding/json decodes it: an
// ASCII string without escapes as it stands, and every other through
// encoding/json, which replaces each byte of invalid UTF-8 (0x80 and up
// included) with U+FFFD.
func TestJSONStringValueDecodesAsEncodingJSON(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`""`, ""},
		{`"evt_1"`, "evt_1"},
		{"\"\x7f\"", "\x7f"},
		{"\"\x80\"", "\uFFFD"},
		{"\"a\x80\"", "a\uFFFD"},
		{"\"\xff\xfe\"", "\uFFFD\uFFFD"},
		{"\"caf\xc3\xa9\"", "café"},
		{`"a\u0062\"c"`, `ab"c`},
	} {
		got, ok := jsonStringValue([]byte(tc.raw))
		if !ok || got != tc.want {
			t.Errorf("jsonStringValue(%q) = %q, %v; want %q", tc.raw, got, ok, tc.want)
		}
	}
}

// Every limit of a Config is inclusive: a Lease of exactly a millisecond
// or MaxLease, a Tolerance of MaxTolerance and a DedupWindow of
// MaxDedupWindow are accepted (one unit past each is refused, see
// TestNewVerifierRefusesOptionsWithoutEffect), and so is a namespace with
// '~' and space inside; DEL is refused.
func TestConfigLimitsAreInclusive(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"Lease of a millisecond", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: time.Millisecond}},
		{"Lease of MaxLease", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Lease: MaxLease}},
		{"Tolerance of MaxTolerance", Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Tolerance: MaxTolerance}},
		{"DedupWindow of MaxDedupWindow", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, DedupWindow: MaxDedupWindow}},
		{"namespace with ~ and space", Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Namespace: "a ~b"}},
	} {
		if _, err := NewVerifier(tc.cfg); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	cfg := Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}, Namespace: "a\x7fb"}
	if _, err := NewVerifier(cfg); !errors.Is(err, ErrConfig) || Reason(err) != Reason(errNamespaceText) {
		t.Errorf("namespace with DEL: %v, want %v", err, errNamespaceText)
	}
}

// A hex tag (Stripe v1, Slack v0) with one digit replaced by a character
// that is not a hex digit, or by another digit ('A' is 10), is refused, even
// where the digit replaced was a '0' (which a lax parser reading the bad
// character as 0 would accept).
func TestLowerHexTagsRefuseAnyNonHexDigit(t *testing.T) {
	clk := newStepClock()
	for _, tc := range []struct {
		scheme       Scheme
		secret, id   string
		body, header string
		prefix       string // before the hex in the header
	}{
		{Stripe(), stripeSecret, "evt_1", `{"id":"evt_1"}`, HeaderStripeSignature, ",v1="},
		{Slack(), slackSecret, "Ev01", `{"event_id":"Ev01"}`, HeaderSlackSignature, "v0="},
	} {
		cfg := Config{Scheme: tc.scheme, Secrets: []string{tc.secret}, Now: clk.Now}
		s, v := newSigner(t, cfg), newVerifier(t, cfg)
		tried := 0
		for n := 0; tried < 2 && n < 100; n++ {
			body := strings.Replace(tc.body, `"}`, `","n":`+strconv.Itoa(n)+`}`, 1)
			h := http.Header{}
			if err := s.Sign(h, tc.id, []byte(body)); err != nil {
				t.Fatal(err)
			}
			sig := h.Get(tc.header)
			start := strings.Index(sig, tc.prefix) + len(tc.prefix)
			hexText := sig[start : start+64]
			// A '0' in the high and then in the low nibble of a byte.
			k := strings.IndexByte(hexText, '0')
			if k < 0 || k%2 != tried {
				continue
			}
			tried++
			for _, c := range []byte{'g', 'G', '/', ':', '`', 'A', ' ', 0x80} {
				bad := sig[:start+k] + string([]byte{c}) + sig[start+k+1:]
				h.Set(tc.header, bad)
				if _, err := v.Verify(h, []byte(body)); err == nil {
					t.Fatalf("%v: %q accepted for %q", tc.scheme, bad, sig)
				}
			}
		}
		if tried < 2 {
			t.Fatalf("%v: no signature with a 0 in both nibble positions", tc.scheme)
		}
	}
}

// log/slog sees a configured Verifier or Signer as its scheme and its
// number of secrets, and a zero one as {zero: true}.
func TestLogValueDescribesSchemeAndSecretCount(t *testing.T) {
	render := func(v slog.Value) string {
		var b strings.Builder
		for _, a := range v.Resolve().Group() {
			b.WriteString(a.String() + ";")
		}
		return b.String()
	}
	cfg := Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret, stdSecret2}}
	for _, tc := range []struct {
		name string
		got  slog.Value
		want string
	}{
		{"verifier", newVerifier(t, cfg).LogValue(), "scheme=standard-webhooks;secrets=2;"},
		{"signer", newSigner(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}}).LogValue(), "scheme=slack;secrets=1;"},
		{"zero verifier", Verifier{}.LogValue(), "zero=true;"},
		{"zero signer", Signer{}.LogValue(), "zero=true;"},
	} {
		if got := render(tc.got); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
