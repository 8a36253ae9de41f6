package replay_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
)

func TestMemoryStorePrintsNoRecordedBytes(t *testing.T) {
	ctx := context.Background()
	s := &replay.MemoryStore{}
	secretID, secretFP, secretBody := "idem:secret-store-id", []byte("FINGERPRINT-SECRET"), []byte("BODY-SECRET card 4242")
	l, err := s.AcquireRecord(ctx, secretID, time.Minute, secretFP)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ConfirmRecord(ctx, secretID, l.Token, time.Now().Add(time.Hour), secretFP, secretBody); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireRecord(ctx, "idem:leased-secret", time.Minute, []byte("LEASED-FP-SECRET")); err != nil {
		t.Fatal(err)
	}
	forbidden := []string{secretID, "leased-secret"}
	for _, b := range [][]byte{secretFP, secretBody, []byte("LEASED-FP-SECRET")} {
		forbidden = append(forbidden, string(b), hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
			base64.StdEncoding.EncodeToString(b), fmt.Sprint(b[:4]), fmt.Sprintf("%#v", b[:4])[len("[]byte{"):])
	}
	type holder struct{ Store *replay.MemoryStore }
	var printed []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		printed = append(printed, fmt.Sprintf(verb, s), fmt.Sprintf(verb, holder{s}), fmt.Sprintf(verb, []any{s}))
	}
	printed = append(printed, s.String(), fmt.Sprint(s), fmt.Sprintln(s))
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		slog.New(h(&buf)).Info("store", "store", s, slog.Any("any", s), slog.Group("g", "s", s))
		printed = append(printed, buf.String())
	}
	for i, p := range printed {
		if !strings.Contains(p, "replay.MemoryStore(") {
			t.Errorf("output %d %q does not describe the store", i, p)
		}
		for _, f := range forbidden {
			if strings.Contains(p, f) {
				t.Errorf("output %d %q holds %q", i, p, f)
			}
		}
	}
	if want := "replay.MemoryStore(2 live entries, 1 records of "; !strings.HasPrefix(s.String(), want) {
		t.Errorf("String() = %q, want the counts (%q...)", s.String(), want)
	}
	if got := fmt.Sprintf("%q", s); got != `"`+s.String()+`"` {
		t.Errorf("%%q = %s", got)
	}
	if got := fmt.Sprint((*replay.MemoryStore)(nil)); got != "replay.MemoryStore(nil)" {
		t.Errorf("nil store prints %q", got)
	}
}

// TestMemoryStoreHeldByValuePrintsNoRecordedBytes: a MemoryStore is usable
// as a value field (its zero value is ready), and printing a pointer to the
// struct that holds it goes through the store's fields, not its Format (a
// field's value has no pointer methods), which go vet does not flag. The
// state behind a pointer keeps IDs, tokens and recorded bytes out of it.
func TestMemoryStoreHeldByValuePrintsNoRecordedBytes(t *testing.T) {
	ctx := context.Background()
	type app struct{ Store replay.MemoryStore }
	a := &app{}
	secretID, secretFP, secretBody := "idem:secret-store-id", []byte("FINGERPRINT-SECRET"), []byte("BODY-SECRET card 4242")
	l, err := a.Store.AcquireRecord(ctx, secretID, time.Minute, secretFP)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Store.ConfirmRecord(ctx, secretID, l.Token, time.Now().Add(time.Hour), secretFP, secretBody); err != nil {
		t.Fatal(err)
	}
	forbidden := []string{secretID, string(secretFP), string(secretBody), "BODY-SECRET", fmt.Sprint(secretBody[:4]), fmt.Sprint(secretFP[:4])}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%d"} {
		var v any = a // through any: vet checks the verb against the type
		p := fmt.Sprintf(verb, v)
		for _, f := range forbidden {
			if strings.Contains(p, f) {
				t.Errorf("%s of a struct holding the store: %q holds %q", verb, p, f)
			}
		}
	}
	if first, err := a.Store.Claim(ctx, secretID, time.Now().Add(time.Hour)); first || err != nil {
		t.Fatalf("Claim of the recorded ID = %v, %v; want taken (the store still works)", first, err)
	}
}
