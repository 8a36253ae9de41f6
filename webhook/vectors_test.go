package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// webhookVector is one row of a testdata/vectors/webhook*.json file.
type webhookVector struct {
	Name          string            `json:"name"`
	Source        string            `json:"source"`
	Scheme        string            `json:"scheme"`
	Secrets       []string          `json:"secrets"`
	SignerSecrets []string          `json:"signer_secrets"`
	NowUnix       int64             `json:"now_unix"`
	NowNanos      int64             `json:"now_nanos"`
	Headers       map[string]string `json:"headers"`
	Body          string            `json:"body"`
	Expect        string            `json:"expect"`
	Reason        string            `json:"reason"`
	ID            string            `json:"id"`
	Signs         bool              `json:"signs"`
}

var vectorSchemes = map[string]Scheme{
	"hmac-sha256":               HMACSHA256(),
	"cursor":                    Cursor(),
	"github":                    GitHub(),
	"standard-webhooks":         StandardWebhooks(),
	"standard-webhooks-ed25519": StandardWebhooksEd25519(),
	"svix":                      Svix(),
	"stripe":                    Stripe(),
	"slack":                     Slack(),
	"shopify":                   Shopify(),
}

var vectorExpect = map[string]error{
	"ok":        nil,
	"signature": ErrSignature,
	"timestamp": ErrTimestamp,
	"malformed": ErrMalformed,
	"too_large": ErrTooLarge,
}

// TestVectors runs every row of every webhook vector file: a new case or a
// new scheme adds rows (or a file), not test functions. Every scheme has
// rows, and every scheme that signs has a row its signer reproduces.
func TestVectors(t *testing.T) {
	files, err := filepath.Glob("../testdata/vectors/webhook*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no vector files")
	}
	seen, signed := map[string]bool{}, map[string]bool{}
	for _, name := range files {
		raw, err := os.ReadFile(name)
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
			t.Fatalf("%s: %v", name, err)
		}
		if len(file.Vectors) == 0 {
			t.Fatalf("%s: no vectors", name)
		}
		for _, vec := range file.Vectors {
			seen[vec.Scheme], signed[vec.Scheme] = true, signed[vec.Scheme] || vec.Signs
			t.Run(filepath.Base(name)+"/"+vec.Name, func(t *testing.T) { runVector(t, vec) })
		}
	}
	for name := range vectorSchemes {
		if !seen[name] || !signed[name] {
			t.Errorf("scheme %s: rows %v, a signed row %v", name, seen[name], signed[name])
		}
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
	now := func() time.Time { return time.Unix(vec.NowUnix, vec.NowNanos) }
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
		wantID := vec.ID
		if v.p.idHeader != "" {
			if wantID != "" && wantID != h.Get(v.p.idHeader) {
				t.Fatalf("row's id %q is not its ID header's", wantID)
			}
			wantID = h.Get(v.p.idHeader)
		}
		if wantID == "" || d.ID != wantID {
			t.Fatalf("delivery ID %q, want %q", d.ID, wantID)
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
	secrets := vec.Secrets[:1]
	if vec.SignerSecrets != nil {
		secrets = vec.SignerSecrets
	}
	s, err := NewSigner(Config{Scheme: scheme, Secrets: secrets, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	got := http.Header{}
	if err := s.Sign(got, d.ID, []byte(vec.Body)); err != nil {
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
