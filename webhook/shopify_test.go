package webhook

import (
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
)

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
