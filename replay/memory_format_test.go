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
