package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"
)

// webhookVector is one row of testdata/vectors/webhook.json.
type webhookVector struct {
	Name    string            `json:"name"`
	Scheme  string            `json:"scheme"`
	Secrets []string          `json:"secrets"`
	NowUnix int64             `json:"now_unix"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Expect  string            `json:"expect"`
	Reason  string            `json:"reason"`
	Signs   bool              `json:"signs"`
}

var vectorSchemes = map[string]Scheme{
	"hmac-sha256":       HMACSHA256(),
	"github":            GitHub(),
	"standard-webhooks": StandardWebhooks(),
}

var vectorExpect = map[string]error{
	"ok":        nil,
	"signature": ErrSignature,
	"timestamp": ErrTimestamp,
	"malformed": ErrMalformed,
	"too_large": ErrTooLarge,
}

// TestVectors runs every row of every webhook vector file: a new case or a
// new scheme adds rows, not test functions.
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile("../testdata/vectors/webhook.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Description string          `json:"description"`
		Vectors     []webhookVector `json:"vectors"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, vec := range file.Vectors {
		t.Run(vec.Name, func(t *testing.T) { runVector(t, vec) })
	}
}

func runVector(t *testing.T, vec webhookVector) {
	scheme, ok := vectorSchemes[vec.Scheme]
	if !ok {
		t.Fatalf("unknown scheme %q", vec.Scheme)
	}
	want, ok := vectorExpect[vec.Expect]
	if !ok {
		t.Fatalf("unknown expect %q", vec.Expect)
	}
	now := func() time.Time { return time.Unix(vec.NowUnix, 0) }
	v, err := NewVerifier(Config{Scheme: scheme, Secrets: vec.Secrets, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for k, val := range vec.Headers {
		h.Set(k, val)
	}
	d, err := v.Verify(h, []byte(vec.Body))
	if want == nil {
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if d.ID != h.Get(v.p.idHeader) {
			t.Fatalf("delivery ID %q, want %q", d.ID, h.Get(v.p.idHeader))
		}
	} else {
		if !errors.Is(err, want) {
			t.Fatalf("Verify = %v, want %v", err, want)
		}
		if got := Reason(err); got != vec.Reason {
			t.Fatalf("Reason = %q, want %q", got, vec.Reason)
		}
		if d != (Delivery{}) {
			t.Fatalf("refused delivery returned %+v", d)
		}
	}
	if !vec.Signs {
		return
	}
	s, err := NewSigner(Config{Scheme: scheme, Secrets: vec.Secrets[:1], Now: now})
	if err != nil {
		t.Fatal(err)
	}
	got := http.Header{}
	if err := s.Sign(got, h.Get(v.p.idHeader), []byte(vec.Body)); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(h) {
		t.Fatalf("signer set %v, want %v", got, h)
	}
	for k := range h {
		if got.Get(k) != h.Get(k) {
			t.Fatalf("signer's %s = %q, want %q", k, got.Get(k), h.Get(k))
		}
	}
}
