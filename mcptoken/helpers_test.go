package mcptoken

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
)

// refusedErr is the error the test integration sends for a refusal.
type refusedErr struct{ r Refusal }

func (e *refusedErr) Error() string { return e.r.Message }

var errTestNoCaller = errors.New("test: no caller")

// testIntegration reports through a buffer the test reads.
func testIntegration(log *bytes.Buffer) *Integration {
	return &Integration{
		Name:     "test",
		Log:      slog.New(slog.NewTextHandler(log, nil)),
		NoCaller: func() error { return errTestNoCaller },
		Refused:  func(r Refusal) error { return &refusedErr{r} },
	}
}

func testCursors(t testing.TB, log *bytes.Buffer, c *clock) *Cursors {
	t.Helper()
	kr, err := ctoken.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: []byte("s1"), TTL: time.Minute, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := NewCursors(issuer, testIntegration(log))
	if err != nil {
		t.Fatal(err)
	}
	return cur
}
