package ctokenmcpgo

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// referenceVectors are request states made by the reference D
// implementation (Poita/mcp.d, source/mcp/server/request_state.d, with its
// clock frozen at Now), copied unchanged into testdata.
type referenceVectors struct {
	Now     int64    `json:"now"`
	Keys    []string `json:"keys"`
	Vectors []struct {
		Key     int    `json:"key"`
		Mode    string `json:"mode"`
		Binding string `json:"binding"`
		Subject string `json:"subject"`
		Tool    string `json:"tool"`
		State   string `json:"state"`
		Wire    string `json:"wire"`
	} `json:"vectors"`
}

// statePayload is the payload of a signed state.
type statePayload struct {
	S   string `json:"s"`
	Exp int64  `json:"exp"`
	B   string `json:"b"`
}

// signedPayload returns the payload of a signed state.
func signedPayload(t *testing.T, wire string) statePayload {
	t.Helper()
	parts := strings.Split(wire, ".")
	if len(parts) != 3 {
		t.Fatalf("not a signed state: %q", wire)
	}
	var p statePayload
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &p) != nil {
		t.Fatalf("payload of %q: %v", wire, err)
	}
	return p
}

// With UnboundArgs and a ctoken.BindSubjectAndTool codec, SecureRequestState
// seals what the reference D dispatch seals: the signed states it sends
// carry the same state, expiry and bind tag as the D-made tokens, and the
// D-made tokens (signed and encrypted) reach the handler as their
// plaintext, through a real client, for tools/call and prompts/get.
func TestUnboundArgsInteroperatesWithReferenceDispatch(t *testing.T) {
	b, err := os.ReadFile("testdata/mcpd-request-state.json")
	if err != nil {
		t.Fatal(err)
	}
	var rv referenceVectors
	if err := json.Unmarshal(b, &rv); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, v := range rv.Vectors {
		method, name, ok := strings.Cut(v.Tool, "\x00")
		if v.Binding != "subjectAndTool" || v.Subject == "" || v.State == "" || !ok ||
			(method != "tools/call" && method != "prompts/get") {
			continue // this integration always has a caller, and binds method and name
		}
		ran++
		key, err := hex.DecodeString(rv.Keys[v.Key])
		if err != nil {
			t.Fatal(err)
		}
		kr, err := ctoken.NewKeyring(key)
		if err != nil {
			t.Fatal(err)
		}
		mode := ctoken.Signed
		if v.Mode == "encrypted" {
			mode = ctoken.Encrypted
		}
		codec, err := ctoken.NewRequestStateCodec(ctoken.RequestStateSecurity{
			Keys: kr, Mode: mode, Binding: ctoken.BindSubjectAndTool, TTL: 300 * time.Second,
			Now: func() time.Time { return time.Unix(rv.Now, 0) },
		})
		if err != nil {
			t.Fatal(err)
		}
		states, err := NewStates(codec, &StateOptions{UnboundArgs: true})
		if err != nil {
			t.Fatal(err)
		}
		s := server.NewMCPServer("interop", "v0", SecureRequestState(states),
			server.WithToolCapabilities(false), server.WithPromptCapabilities(false))
		s.AddTool(mcp.NewTool(name), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Params.RequestState == "" {
				return server.NewInputRequestBuilder(v.State).Elicit("ok", mcp.ElicitationParams{Message: "?", RequestedSchema: confirmSchema}).ToolResult(), nil
			}
			return mcp.NewToolResultText(req.Params.RequestState), nil
		})
		s.AddPrompt(mcp.NewPrompt(name), func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			if req.Params.RequestState == "" {
				return server.NewInputRequestBuilder(v.State).Elicit("ok", mcp.ElicitationParams{Message: "?", RequestedSchema: confirmSchema}).PromptResult(), nil
			}
			return mcp.NewGetPromptResult("", []mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent(req.Params.RequestState))}), nil
		})
		p := inProcess(t, s, v.Subject, &elicitor{answer: true})
		p.wire.setSwap(func(string) string { return v.Wire })
		var got string
		if method == "tools/call" {
			res, err := p.call(name, nil)
			if err != nil || res.IsError {
				t.Fatalf("%s %s %q %q: %v %v", v.Mode, v.Tool, v.Subject, v.State, err, res)
			}
			got = text(res)
		} else {
			res, err := p.prompt(name, nil)
			if err != nil {
				t.Fatalf("%s %s %q %q: %v", v.Mode, v.Tool, v.Subject, v.State, err)
			}
			got = res.Messages[0].Content.(mcp.TextContent).Text
		}
		if got != v.State {
			t.Errorf("%s %q %q: the handler saw %q", v.Mode, v.Tool, v.Subject, got)
		}
		results, _ := p.wire.states()
		if mode == ctoken.Signed {
			// The JSON of the two payloads differs in key order and escaping;
			// their members (state, expiry and bind tag) must not.
			if len(results) != 1 || signedPayload(t, results[0]) != signedPayload(t, v.Wire) {
				t.Errorf("signed %q %q %q: sealed %q, the reference sealed %q", v.Tool, v.Subject, v.State, results, v.Wire)
			}
		}
	}
	if ran == 0 {
		t.Fatal("no reference vector applies")
	}
	t.Logf("%d reference vectors driven through a client", ran)
}
