package ctoken

import (
	"net/http"
	"strings"
	"testing"
)

func BenchmarkWebhookVerify(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	for _, scheme := range []struct {
		name   string
		scheme WebhookScheme
	}{{"sha256", WebhookHMACSHA256}, {"standard", WebhookStandard}} {
		b.Run(scheme.name+"/1KiB", func(b *testing.B) {
			cfg := WebhookConfig{Scheme: scheme.scheme, Secrets: []string{stdSecret}}
			v := newVerifier(b, cfg)
			h := http.Header{}
			if err := newSigner(b, cfg).Sign(h, "evt-1", body); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := v.Verify(h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
