package mcptoken

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
)

// NewCursors refuses an issuer not made by ctoken.NewCursorIssuer.
func TestNewCursorsRefusesAKeylessIssuer(t *testing.T) {
	var log bytes.Buffer
	c, err := NewCursors(&ctoken.CursorIssuer{}, testIntegration(&log))
	if c != nil || !errors.Is(err, ctoken.ErrConfig) || !errors.Is(err, ctoken.ErrNoKey) || !strings.HasPrefix(err.Error(), "test: NewCursors") {
		t.Fatalf("%v, %v; want ErrConfig and ErrNoKey", c, err)
	}
}

// At run time, an issuer without a key (reachable only past NewCursors) is
// an internal error logged at Error, never an invalid cursor.
func TestCursorsTurnWithAKeylessIssuerIsAnInternalError(t *testing.T) {
	var log bytes.Buffer
	c := &Cursors{issuer: &ctoken.CursorIssuer{}, in: testIntegration(&log)}
	scope := ctoken.CursorScope{ToolID: ctoken.MCPTarget("tools/call", "search"), CallerID: "alice"}
	_, err := c.Turn(context.Background(), scope, "search", "AAAA")
	var re *refusedErr
	if !errors.As(err, &re) || !re.r.Internal || re.r.Code != 0 || re.r.StoreFailed || re.r.Message != "internal error" {
		t.Fatalf("%v (%+v); want an Internal refusal", err, re)
	}
	if got := log.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "has no key") || strings.Contains(got, "cursor rejected") {
		t.Fatalf("log %q", got)
	}
}

// RefuseCursor and RefuseState map ctoken.ErrNoKey to Internal, with code
// 0 and not StoreFailed.
func TestRefuseMapsNoKeyToInternal(t *testing.T) {
	_, cursorErr := (&ctoken.CursorIssuer{}).Verify("AAAA", ctoken.CursorScope{})
	_, stateErr := (&ctoken.RequestStateCodec{}).Decode("v1.AAAA.AAAA", "alice", "t")
	for name, r := range map[string]Refusal{"cursor": RefuseCursor(cursorErr), "state": RefuseState(stateErr)} {
		t.Run(name, func(t *testing.T) {
			if !r.Internal || r.StoreFailed || r.Code != 0 || r.Expired() || r.Message != "internal error" || r.Reason == "" {
				t.Fatalf("%+v", r)
			}
		})
	}
}
