package webhook

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

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
