package webhook

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

// smallOrderSignature is an Ed25519 signature R || S with R = [S]B: it
// verifies on every message under a public key of small order, where the
// term [k]A vanishes (cofactored or not, since 8·A is the identity and A
// has order dividing 8, so under a key of order 4 about one seed in four
// gives a forgery for a given message).
func smallOrderSignature(t *testing.T, i int) []byte {
	t.Helper()
	L, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	seed := make([]byte, 32)
	seed[0], seed[1] = byte(i+1), 0x5a
	R := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	h := sha512.Sum512(seed)
	s := h[:32]
	s[0] &= 248
	s[31] &= 127
	s[31] |= 64
	le := make([]byte, 32)
	for j := range s {
		le[31-j] = s[j]
	}
	S := new(big.Int).Mod(new(big.Int).SetBytes(le), L).FillBytes(make([]byte, 32))
	for j := 0; j < 16; j++ {
		S[j], S[31-j] = S[31-j], S[j]
	}
	return append(append([]byte{}, R...), S...)
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("bad test key %q", s)
	}
	return b
}

// The eight points of order dividing 8 have these canonical encodings
// (identity; order 2; order 4 with both signs of x; order 8, two values of
// y with both signs of x). Encodings with y >= p (y + p < 2^255 for y <= 18)
// or a sign bit on x = 0 are their non-canonical variants; crypto/ed25519
// takes those too.
var (
	smallOrderKeys = map[string]string{
		"identity":              "0100000000000000000000000000000000000000000000000000000000000000",
		"order 2 (y=-1)":        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"order 4 (all zero)":    "0000000000000000000000000000000000000000000000000000000000000000",
		"order 4, x negative":   "0000000000000000000000000000000000000000000000000000000000000080",
		"order 8 a":             "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"order 8 a, x negative": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		"order 8 b":             "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
		"order 8 b, x negative": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
	}
	nonCanonicalKeys = map[string]string{
		"identity, x=0 signed": "0100000000000000000000000000000000000000000000000000000000000080",
		"order 2, x=0 signed":  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
		"y = p (0 + p)":        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"y = p + 1 (identity)": "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"y = p + 1, signed":    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
		"y = 2^255 - 1":        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	}
)

func TestEd25519VerifierRefusesSmallOrderKeys(t *testing.T) {
	for name, h := range smallOrderKeys {
		key := mustHex(t, h)
		if name == "identity" || name == "order 4 (all zero)" {
			// The reviewer's forgery: crypto/ed25519 itself accepts one of
			// 16 such signatures on a chosen message.
			forged := false
			for i := range 16 {
				forged = forged || ed25519.Verify(ed25519.PublicKey(key), []byte("msg_forged.1.{}"), smallOrderSignature(t, i))
			}
			if !forged {
				t.Fatalf("%s: no forgery verifies in crypto/ed25519; the test lost its point", name)
			}
		}
		secret := Ed25519PublicKeyPrefix + base64.StdEncoding.EncodeToString(key)
		_, err := NewVerifier(Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub, secret}})
		if !errors.Is(err, ErrSecretInvalid) || !errors.Is(err, errEdKeyOrder) && !errors.Is(err, errEdKeyEncode) {
			t.Errorf("%s: NewVerifier = %v, want ErrSecretInvalid for a small-order key", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "secret 2 of 2") {
			t.Errorf("%s: error %q does not name the position", name, err)
		}
	}
}

func TestEd25519VerifierRefusesNonCanonicalKeys(t *testing.T) {
	for name, h := range nonCanonicalKeys {
		secret := Ed25519PublicKeyPrefix + base64.StdEncoding.EncodeToString(mustHex(t, h))
		_, err := NewVerifier(Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{secret}})
		if !errors.Is(err, errEdKeyEncode) || !strings.Contains(err.Error(), "secret 1 of 1") {
			t.Errorf("%s: NewVerifier = %v, want the non-canonical refusal naming secret 1 of 1", name, err)
		}
	}
}

func TestEd25519CheckAcceptsGeneratedKeys(t *testing.T) {
	for i := range 64 {
		seed := make([]byte, 32)
		seed[0], seed[31] = byte(i), byte(3*i+1)
		pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		if err := checkEd25519PublicKey(pub); err != nil {
			t.Fatalf("key %x of seed %d refused: %v", []byte(pub), i, err)
		}
	}
}

func TestNewVerifierRefusesSecretWithSurroundingSpace(t *testing.T) {
	std := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef01234567"))
	schemes := []struct {
		scheme Scheme
		secret string
		signer bool
	}{
		{HMACSHA256(), "hmac-shared-secret", false},
		{GitHub(), "hmac-shared-secret", false},
		{StandardWebhooks(), std, false},
		{Svix(), std, false},
		{Stripe(), "whsec_stripe_endpoint", false},
		{Slack(), "slack-signing-secret", false},
		{Shopify(), "shopify-secret", false},
		{StandardWebhooksEd25519(), edPub, false},
		{StandardWebhooksEd25519(), edPriv, true},
	}
	for _, sc := range schemes {
		for _, bad := range []string{sc.secret + "\n", " " + sc.secret, sc.secret + "\r\n", "\t" + sc.secret, sc.secret + "\u00a0"} {
			cfg := Config{Scheme: sc.scheme, Secrets: []string{sc.secret, bad}}
			var err error
			if sc.signer {
				_, err = NewSigner(cfg)
			} else {
				_, err = NewVerifier(cfg)
			}
			if !errors.Is(err, ErrSecretInvalid) || !errors.Is(err, errSecretSpace) || !strings.Contains(err.Error(), "secret 2 of 2") {
				t.Errorf("%s %q: err = %v, want the white space refusal naming secret 2 of 2", sc.scheme, bad, err)
			}
			if err != nil && strings.Contains(err.Error(), sc.secret) {
				t.Errorf("%s: error %q prints the secret", sc.scheme, err)
			}
		}
		if _, err := NewSigner(Config{Scheme: sc.scheme, Secrets: []string{sc.secret}}); sc.scheme != StandardWebhooksEd25519() && err != nil {
			t.Errorf("%s: the clean secret is refused: %v", sc.scheme, err)
		}
	}
}

// sendSigned signs body as delivery id with s and sends it through h,
// returning the status.
func sendSigned(t *testing.T, h http.Handler, s *Signer, id string, body []byte) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	if err := s.Sign(req.Header, id, body); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func TestVerifierAtMaxDurationsProcessesOnce(t *testing.T) {
	v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret},
		DedupWindow: MaxDedupWindow, Lease: MaxLease, Tolerance: MaxTolerance})
	s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	var ran atomic.Int32
	h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Add(1) }))
	for i := range 2 {
		if code := sendSigned(t, h, s, "msg_1", []byte(`{}`)); code != http.StatusOK {
			t.Fatalf("copy %d: status %d", i, code)
		}
	}
	if ran.Load() != 1 {
		t.Fatalf("handler ran %d times for one delivery at MaxDedupWindow", ran.Load())
	}
	hdr := http.Header{}
	if err := s.Sign(hdr, "msg_2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	d, err := v.Verify(hdr, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := v.Acquire(context.Background(), d); l == nil || err != nil {
		t.Fatalf("first Acquire at MaxLease = %v, %v", l, err)
	}
	if l, err := v.Acquire(context.Background(), d); l != nil || !errors.Is(err, ErrInProgress) {
		t.Fatalf("second Acquire at MaxLease = %v, %v; want ErrInProgress", l, err)
	}
}

// TestMiddlewareReleasesDeliveryOnRetryStatus: a handler status that asks
// the sender to retry leaves the delivery unprocessed, so the retry runs
// the handler; any other status is the handler's decision, and the retry
// is acknowledged without running it.
func TestMiddlewareReleasesDeliveryOnRetryStatus(t *testing.T) {
	tests := []struct {
		status    int
		retryRuns bool
	}{
		{http.StatusRequestTimeout, true},
		{http.StatusLocked, true},
		{http.StatusTooEarly, true},
		{http.StatusTooManyRequests, true},
		{http.StatusInternalServerError, true},
		{http.StatusServiceUnavailable, true},
		{http.StatusBadRequest, false},
		{http.StatusNotFound, false},
		{http.StatusConflict, false},
		{http.StatusUnprocessableEntity, false},
		{http.StatusAccepted, false},
	}
	for _, tc := range tests {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			v := newVerifier(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
			s := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
			var calls atomic.Int32
			h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.WriteHeader(tc.status)
				}
			}))
			if code := sendSigned(t, h, s, "msg_retry", []byte(`{}`)); code != tc.status {
				t.Fatalf("first attempt: status %d, want the handler's %d", code, tc.status)
			}
			if code := sendSigned(t, h, s, "msg_retry", []byte(`{}`)); code != http.StatusOK {
				t.Fatalf("retry: status %d, want 200", code)
			}
			if ran := calls.Load() == 2; ran != tc.retryRuns {
				t.Fatalf("after %d the retry ran the handler: %v, want %v", tc.status, ran, tc.retryRuns)
			}
		})
	}
}

func TestNewVerifierRefusesBadNamespace(t *testing.T) {
	store := replay.NewMemoryStore(0)
	tests := []struct {
		name, ns string
		want     error
	}{
		{"missing with a Replay store", "", errNoNamespace},
		{"over MaxNamespaceBytes", strings.Repeat("n", MaxNamespaceBytes+1), errLongNamespace},
		{"trailing space", "orders ", errNamespaceText},
		{"leading space", " orders", errNamespaceText},
		{"newline", "orders\n", errNamespaceText},
		{"control byte", "ord\x00ers", errNamespaceText},
		{"non-ASCII", "ordérs", errNamespaceText},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(Config{Scheme: Stripe(), Secrets: []string{"whsec_endpoint_a"}, Replay: store, Namespace: tc.ns})
			if v != nil || !errors.Is(err, ErrConfig) || !errors.Is(err, tc.want) {
				t.Fatalf("NewVerifier = %v, %v; want %v", v, err, tc.want)
			}
		})
	}
	for _, ns := range []string{"", "orders", strings.Repeat("n", MaxNamespaceBytes), "billing / prod"} {
		if _, err := NewVerifier(Config{Scheme: Stripe(), Secrets: []string{"whsec_endpoint_a"}, Namespace: ns}); err != nil {
			t.Errorf("Namespace %q with the private store refused: %v", ns, err)
		}
	}
}

// endpoint is one webhook endpoint of the shared-store tests: a verifier
// (namespace ns, secret), its sender and a count of handler runs.
type endpoint struct {
	h    http.Handler
	s    *Signer
	runs *atomic.Int32
}

func newEndpoint(t *testing.T, store replay.Store, ns, secret string) endpoint {
	v := newVerifier(t, Config{Scheme: Stripe(), Secrets: []string{secret}, Replay: store, Namespace: ns})
	runs := new(atomic.Int32)
	return endpoint{
		h:    v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) })),
		s:    newSigner(t, Config{Scheme: Stripe(), Secrets: []string{secret}}),
		runs: runs,
	}
}

// The reviewer's reproduction: Stripe sends the same event (evt_ ID) to two
// endpoints of one account, each with its own secret, whose verifiers share
// one store. Each must run its handler.
func TestVerifiersSharingStoreKeepEndpointsApart(t *testing.T) {
	store := replay.NewMemoryStore(0)
	a := newEndpoint(t, store, "billing", "whsec_endpoint_A_")
	b := newEndpoint(t, store, "analytics", "whsec_endpoint_B_")
	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	for _, ep := range []endpoint{a, b} {
		if code := sendSigned(t, ep.h, ep.s, "evt_1", body); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if a.runs.Load() != 1 || b.runs.Load() != 1 {
		t.Fatalf("handler runs: A %d, B %d; want 1 each", a.runs.Load(), b.runs.Load())
	}
}

// Instances of one endpoint (one Namespace) share deliveries: a copy sent
// to the second instance is a duplicate, even if the secrets differ during
// a rotation.
func TestVerifiersWithOneNamespaceShareDeliveries(t *testing.T) {
	store := replay.NewMemoryStore(0)
	first := newEndpoint(t, store, "billing", "whsec_old_secret")
	second := newEndpoint(t, store, "billing", "whsec_new_secret")
	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	sendSigned(t, first.h, first.s, "evt_1", body)
	if code := sendSigned(t, second.h, second.s, "evt_1", body); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if first.runs.Load()+second.runs.Load() != 1 {
		t.Fatalf("handler runs: %d and %d; want one in all", first.runs.Load(), second.runs.Load())
	}
}

// A sender that rotated its secret signs its redelivery with the new one:
// under the body-keyed policies it is the same delivery, and a different
// body is not.
func TestDedupByBodyTreatsRedeliveryUnderRotatedSecretAsDuplicate(t *testing.T) {
	for _, scheme := range []Scheme{HMACSHA256(), GitHub(), Shopify()} {
		for _, policy := range []Dedup{DedupDefault, DedupSignature, DedupIDAndSignature} {
			t.Run(scheme.String()+"/"+policy.String(), func(t *testing.T) {
				v := newVerifier(t, Config{Scheme: scheme, Secrets: []string{"new-secret-2026-11", "old-secret-2026-10"}, Dedup: policy})
				oldS := newSigner(t, Config{Scheme: scheme, Secrets: []string{"old-secret-2026-10"}})
				newS := newSigner(t, Config{Scheme: scheme, Secrets: []string{"new-secret-2026-11"}})
				var runs atomic.Int32
				h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) }))
				body := []byte(`{"order":1}`)
				for i, s := range []*Signer{oldS, newS} {
					if code := sendSigned(t, h, s, "delivery-1", body); code != http.StatusOK {
						t.Fatalf("copy %d: status %d", i, code)
					}
				}
				if runs.Load() != 1 {
					t.Fatalf("handler ran %d times for one delivery re-signed after rotation", runs.Load())
				}
				sendSigned(t, h, newS, "delivery-2", []byte(`{"order":2}`))
				if runs.Load() != 2 {
					t.Fatalf("a different body was taken for a duplicate")
				}
			})
		}
	}
}

// A Shopify tag is the base64 of exactly 32 bytes: 44 characters holding 33
// bytes whose first 32 are the genuine MAC are refused.
func TestShopifyRefusesTagOfWrongLength(t *testing.T) {
	cfg := Config{Scheme: Shopify(), Secrets: []string{"shopify-secret"}}
	v, s := newVerifier(t, cfg), newSigner(t, cfg)
	body := []byte(`{"id":1}`)
	h := http.Header{}
	if err := s.Sign(h, "delivery-1", body); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(h, body); err != nil {
		t.Fatalf("genuine delivery refused: %v", err)
	}
	tag, err := base64.StdEncoding.DecodeString(h.Get(HeaderShopifyHmac))
	if err != nil {
		t.Fatal(err)
	}
	long := base64.StdEncoding.EncodeToString(append(tag, 0))
	if len(long) != len(h.Get(HeaderShopifyHmac)) {
		t.Fatalf("test premise: %d characters", len(long))
	}
	h.Set(HeaderShopifyHmac, long)
	if _, err := v.Verify(h, body); !errors.Is(err, ErrSignature) {
		t.Fatalf("33-byte tag: err = %v, want ErrSignature", err)
	}
}
