package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestAuthoritativeProxyNeverLetsOurModulesFallThrough: the packed files
// are served; a module path of ours that was not packed gets 403, which the
// go command does not fall through (it does on 404 and 410), so no later
// GOPROXY entry can supply a version of ours; every other path gets 404,
// so later entries serve third-party modules.
func TestAuthoritativeProxyNeverLetsOurModulesFallThrough(t *testing.T) {
	dir := t.TempDir()
	at := filepath.Join(dir, "github.com", "ctoken", "ctoken", "mcp", "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(at, "v0.1.0.mod"), []byte("module github.com/ctoken/ctoken/mcp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := authoritative(dir)
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/github.com/ctoken/ctoken/mcp/@v/v0.1.0.mod", http.StatusOK},
		{"/github.com/ctoken/ctoken/redisstore/@v/v0.1.0.mod", http.StatusForbidden},
		{"/github.com/ctoken/ctoken/@v/v0.1.0.zip", http.StatusForbidden},
		{"/github.com/ctoken/ctoken/mcp/@v/list", http.StatusForbidden},
		{"/github.com/ctoken/ctoken/mcp/@latest", http.StatusForbidden},
		{"/github.com/ctoken/ctoken/../ctoken/redisstore/@v/v0.1.0.mod", http.StatusForbidden},
		{"/github.com/ctoken/ctokenx/@v/v0.1.0.mod", http.StatusNotFound},
		{"/golang.org/x/mod/@v/v0.40.0.mod", http.StatusNotFound},
		{"/sumdb/sum.golang.org/supported", http.StatusNotFound},
	} {
		t.Run(tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://proxy"+tc.path, nil))
			if rec.Code != tc.code {
				t.Fatalf("%s: %d, want %d", tc.path, rec.Code, tc.code)
			}
		})
	}
}

func TestUnpackedControlMustFailOnTheMissingModule(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want bool
	}{
		{"go mod tidy: exit status 1\ngo: github.com/ctoken/ctoken/redisstore@v0.1.0: reading http://127.0.0.1:1/github.com/ctoken/ctoken/redisstore/@v/v0.1.0.mod: 403 Forbidden", true},
		{"go mod tidy: exit status 1\ngo: github.com/ctoken/ctoken/mcp@v0.1.0: reading http://127.0.0.1:1/github.com/ctoken/ctoken/mcp/@v/v0.1.0.mod: 403 Forbidden", false},
		{"go vet: exit status 1\ngithub.com/ctoken/ctoken/redisstore: undefined: x", false},
		{"", false},
	} {
		if got := unpackedRefusal(tc.msg); got != tc.want {
			t.Errorf("unpackedRefusal(%q) = %v, want %v", tc.msg, got, tc.want)
		}
	}
}
