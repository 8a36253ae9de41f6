package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctoken/ctoken"
)

func testApp(t *testing.T, w io.Writer) *app {
	t.Helper()
	kr, err := ctoken.NewKeyring(ctoken.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(kr, []byte("test-fleet"), demoLogger(w))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestDemo runs the whole example against a loopback server with bearer
// authentication and checks every step's outcome.
func TestDemo(t *testing.T) {
	var buf bytes.Buffer
	out := &syncWriter{w: &buf}
	if err := demo(context.Background(), testApp(t, out), out); err != nil {
		t.Fatalf("demo: %v\n%s", err, buf.String())
	}
	lines := strings.Split(buf.String(), "\n")
	outcome := map[string]string{} // step -> result line
	for i, l := range lines {
		if strings.HasPrefix(l, "      -> ") && i > 0 {
			outcome[strings.Join(strings.Fields(lines[i-1]), " ")] = strings.TrimPrefix(l, "      -> ")
		}
	}
	const invalidCursor = `tool error "invalid cursor (ctokenCode 1021)" (ctokenCode 1021)`
	// A refused state is a JSON-RPC error (-32603, which mcp-go's client
	// reports as "internal error"), not a tool result.
	const invalidState = `error: internal error: invalid requestState (ctokenCode 1023)`
	for step, want := range map[string]string{
		`alice search query "s", first page (Page 0, no cursor)`: `{"items":["red shoes","red socks","red scarf","red gloves","red boots"],"nextCursor":"(ctoken cursor, `,
		`alice search query "s", her cursor (Page 1)`:            `{"items":["green shoes","green socks","green scarf","green gloves","green boots"],"nextCursor"`,
		`bob search query "s", alice's cursor`:                   invalidCursor,
		`alice search query "hat", cursor of query "s"`:          invalidCursor,
		`alice search query "s", edited cursor`:                  invalidCursor,
		`alice deploy api v2 (her client answers and retries)`:   `{"plan":"roll api to v2 on 3 instances","status":"deployed"}`,
		`bob deploy web v9 (his client answers no)`:              `{"plan":"roll web to v9 on 3 instances","status":"cancelled"}`,
		`alice deploy web v9, her client edits the state`:        invalidState,
		`alice deploy web v9 with bob's state`:                   invalidState,
		`bob deploy db v9 with the state of web v9`:              invalidState,
		`dave deploy api v3`:                                     `tool error "input required: the client cannot answer this server's input requests: this request needs the elicitation capability, and the server saw no capability declaration from the client (MCP 2025-11-25): over stateless HTTP the server cannot see a declaration`,
	} {
		got, ok := outcome[step]
		if !ok {
			t.Errorf("step %q missing from output:\n%s", step, buf.String())
			continue
		}
		if !strings.HasPrefix(got, want) {
			t.Errorf("step %q: got %q, want prefix %q", step, got, want)
		}
	}
	if !strings.Contains(buf.String(), "(requestState on the wire: v1e.... of ") {
		t.Errorf("the state on the wire is not shown sealed:\n%s", buf.String())
	}
	// The server logs why it refused each token, and the client never sees
	// it; no token reaches the log.
	for _, reason := range []string{
		`cursor rejected tool="search" reason="forged or wrong scope (tool, caller or arguments)"`,
		`cursor rejected tool="search" reason="forged or wrong scope (tool, caller or arguments)"`,
		`request state rejected tool="deploy" reason="arguments differ from the sealed call"`,
		`request state rejected tool="deploy" reason="decryption failed`,
	} {
		if !strings.Contains(buf.String(), "  [server log] ctokenmcpgo: "+reason) {
			t.Errorf("log lacks %q", reason)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "[server log]") && strings.Contains(l, "v1e.") {
			t.Errorf("a token reached the log: %q", l)
		}
	}
}

func TestEndpointRequiresBearerToken(t *testing.T) {
	srv := httptest.NewServer(handler(testApp(t, io.Discard)))
	defer srv.Close()
	for _, token := range []string{"", "mallory-token"} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", token, resp.StatusCode)
		}
	}
}
