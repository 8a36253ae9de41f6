package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestSignerRejectsUnusableIDs(t *testing.T) {
	std := newSigner(t, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}})
	sha := newSigner(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}})
	for _, id := range []string{"", strings.Repeat("a", 257), "a\nb", "a b"} {
		for _, s := range []*Signer{std, sha} {
			if err := s.Sign(http.Header{}, id, nil); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Sign(id %q) = %v, want ErrMalformed", id, err)
			}
		}
	}
	if err := std.Sign(http.Header{}, "a.b", nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Standard Sign(id with dot) = %v, want ErrMalformed", err)
	}
	if err := sha.Sign(http.Header{}, "a.b", nil); err != nil {
		t.Fatalf("SHA256 Sign(id with dot) = %v", err)
	}
}

// A zero Signer (not from NewSigner) has no secret: Sign
// refuses instead of panicking.
func TestZeroSignerRefusesWithoutPanic(t *testing.T) {
	var zero Signer
	h := http.Header{}
	if err := zero.Sign(h, "evt-1", []byte("x")); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("Sign on a zero signer = %v, want ErrNoSecret", err)
	}
	if len(h) != 0 {
		t.Fatalf("zero signer set headers %v", h)
	}
}

func TestSignRefusesNilHeader(t *testing.T) {
	s := newSigner(t, Config{Scheme: HMACSHA256(), Secrets: []string{hmacSecret}})
	if err := s.Sign(nil, "evt-1", nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Sign(nil header) = %v, want ErrMalformed", err)
	}
}
