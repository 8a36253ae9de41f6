package ctoken_test

import (
	"errors"
	"os"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/webhook"
)

// TestREADMESnippets runs the README's snippets as written (doccheck only
// compiles them): each works safely or fails at construction. The cursor
// snippet, run twice with the environment its shell lines set, makes two
// instances that accept each other's cursors; with CTOKEN_KEYS or
// CTOKEN_SESSION unset it fails at construction. The request-state snippet
// without keys or without its Binding, and the webhook snippet with its
// secret unset, fail at construction too.
func TestREADMESnippets(t *testing.T) {
	// The cursor snippet, verbatim but for returning what it builds.
	newInstance := func() (*ctoken.CursorIssuer, error) {
		keys, err := ctoken.KeyringFromEnv("CTOKEN_KEYS") // ErrNoKey when unset: never a silent random key
		if err != nil {
			return nil, err
		}
		return ctoken.NewCursorIssuer(ctoken.CursorConfig{
			Keys:    keys,
			Session: []byte(os.Getenv("CTOKEN_SESSION")), // unset: ErrConfig; never nil here (a random session per process: every restart breaks the cursors clients hold)
		})
	}
	scope := ctoken.CursorScope{ToolID: "search_issues", CallerID: "alice"}

	t.Run("cursors: a second instance accepts the first's cursor", func(t *testing.T) {
		t.Setenv("CTOKEN_KEYS", ctoken.EncodeKey(ctoken.RandomKey())+","+ctoken.EncodeKey(ctoken.RandomKey()))
		t.Setenv("CTOKEN_SESSION", "search-1")
		first, err := newInstance()
		if err != nil {
			t.Fatal(err)
		}
		second, err := newInstance()
		if err != nil {
			t.Fatal(err)
		}
		next, err := first.Issue(ctoken.CursorPayload{CursorScope: scope, Page: 1})
		if err != nil {
			t.Fatal(err)
		}
		if p, err := second.Verify(next, scope); err != nil || p.Page != 1 {
			t.Fatalf("second instance: page %d, %v", p.Page, err)
		}
	})
	t.Run("cursors: CTOKEN_KEYS unset fails at construction", func(t *testing.T) {
		t.Setenv("CTOKEN_KEYS", "")
		t.Setenv("CTOKEN_SESSION", "search-1")
		if _, err := newInstance(); !errors.Is(err, ctoken.ErrNoKey) {
			t.Fatalf("%v, want ErrNoKey", err)
		}
	})
	t.Run("cursors: CTOKEN_SESSION unset fails at construction", func(t *testing.T) {
		t.Setenv("CTOKEN_KEYS", ctoken.EncodeKey(ctoken.RandomKey()))
		t.Setenv("CTOKEN_SESSION", "")
		if _, err := newInstance(); !errors.Is(err, ctoken.ErrConfig) {
			t.Fatalf("%v, want ErrConfig", err)
		}
	})
	t.Run("request state: works, and fails at construction without keys or Binding", func(t *testing.T) {
		keys, err := ctoken.NewKeyring(ctoken.RandomKey())
		if err != nil {
			t.Fatal(err)
		}
		codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
			Keys: keys, Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool,
		})
		if err != nil {
			t.Fatal(err)
		}
		tool := ctoken.MCPTarget("tools/call", "deploy")
		wire, err := codec.Encode(`{"step":2}`, "alice", tool)
		if err != nil {
			t.Fatal(err)
		}
		if state, err := codec.Decode(wire, "alice", tool); err != nil || state != `{"step":2}` {
			t.Fatalf("%q, %v", state, err)
		}
		if _, err := codec.Decode(wire, "alice", ctoken.MCPTarget("tools/call", "delete")); !errors.Is(err, ctoken.ErrStateInvalid) {
			t.Fatalf("another tool: %v, want ErrStateInvalid", err)
		}
		if _, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Mode: ctoken.Encrypted, Binding: ctoken.BindSubjectAndTool}); !errors.Is(err, ctoken.ErrNoKey) {
			t.Fatalf("nil keys: %v, want ErrNoKey", err)
		}
		if _, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{Keys: keys, Mode: ctoken.Encrypted}); !errors.Is(err, ctoken.ErrConfig) {
			t.Fatalf("no Binding: %v, want ErrConfig", err)
		}
	})
	t.Run("webhooks: an unset secret fails at construction", func(t *testing.T) {
		t.Setenv("CURSOR_WEBHOOK_SECRET", "")
		if _, err := webhook.NewVerifier(webhook.Config{
			Scheme:  webhook.Cursor(),
			Secrets: []string{os.Getenv("CURSOR_WEBHOOK_SECRET")},
		}); !errors.Is(err, webhook.ErrSecretInvalid) {
			t.Fatalf("%v, want ErrSecretInvalid", err)
		}
	})
}
