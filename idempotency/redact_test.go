package idempotency

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
)

func TestConfigAndMiddlewarePrintNoRecordedBytes(t *testing.T) {
	key := bytes.Repeat([]byte{0xc3}, 32)
	keys, err := ctoken.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	store := &replay.MemoryStore{}
	cfg := Config{Store: store, Keys: keys, Caller: func(*http.Request) (string, error) { return "alice", nil },
		Route: func(*http.Request) string { return "POST /payments" }, Logger: slog.New(slog.DiscardHandler)}
	mw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("RECORDED-BODY card 4242"))
	}))
	h.ServeHTTP(discard{}, req(http.MethodPost, "/payments", "alice", key1, `{"amount":"SECRET-AMOUNT"}`))
	id := StoreID("alice", "POST /payments", strings.Trim(key1, `"`))
	rec, err := store.AcquireRecord(context.Background(), id, time.Minute, nil)
	if err != nil || rec.State != replay.LeaseDone || len(rec.Result) == 0 {
		t.Fatalf("no record: %+v, %v", rec, err)
	}
	forbidden := []string{"RECORDED-BODY", "SECRET-AMOUNT", id, strings.Trim(key1, `"`),
		hex.EncodeToString(rec.Fingerprint), hex.EncodeToString(rec.Result[:16]), hex.EncodeToString(key), strings.ToUpper(hex.EncodeToString(key)),
		base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key), fmt.Sprint(rec.Result[:8])}
	type holder struct {
		C Config
		M *Middleware
	}
	var printed []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		for _, v := range []any{cfg, &cfg, mw, holder{cfg, mw}, []any{cfg, mw}} {
			printed = append(printed, fmt.Sprintf(verb, v))
		}
	}
	for _, v := range []any{cfg, &cfg, mw} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json: %v", err)
		}
		printed = append(printed, string(b))
	}
	for _, newHandler := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		slog.New(newHandler(&buf)).Info("config", "cfg", cfg, "mw", mw, slog.Any("ptr", &cfg))
		printed = append(printed, buf.String())
	}
	for i, p := range printed {
		if !strings.Contains(p, "idempotency.") {
			t.Errorf("output %d %q is not a description", i, p)
		}
		for _, f := range forbidden {
			if strings.Contains(p, f) {
				t.Errorf("output %d %q holds %q", i, p, f)
			}
		}
	}
	for _, want := range []string{"Store: *replay.MemoryStore", "Keys: ctoken.Keyring(1 keys)", "Caller: set", "Observer: nil", "Wait: 0s", "Transactional: false"} {
		if !strings.Contains(fmt.Sprint(cfg), want) {
			t.Errorf("%v lacks %q", cfg, want)
		}
	}
	// Every setting is described, the issue 45 ones included.
	if got := fmt.Sprint(Config{Wait: 2 * time.Second, Transactional: true}); !strings.Contains(got, "Wait: 2s, Transactional: true}") {
		t.Errorf("config with Wait and Transactional prints %q", got)
	}
	if got, want := fmt.Sprint(mw), "idempotency.Middleware(store *replay.MemoryStore, 1 keys, header Idempotency-Key, window 24h0m0s, lease 1m0s)"; got != want {
		t.Errorf("middleware prints %q, want %q", got, want)
	}
	for _, m := range []*Middleware{nil, {}} {
		if got := fmt.Sprintf("%+v", m); got != "idempotency.Middleware(not from New)" {
			t.Errorf("%#v prints %q", m, got)
		}
	}
	if got := fmt.Sprint(Config{}); !strings.Contains(got, "Store: nil, Keys: ctoken.Keyring(nil)") {
		t.Errorf("zero config prints %q", got)
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
