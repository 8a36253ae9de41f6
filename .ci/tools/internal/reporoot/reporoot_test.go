package reporoot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromFindsTheLibraryModulePastOtherModules(t *testing.T) {
	top := t.TempDir()
	write := func(rel, text string) string {
		t.Helper()
		p := filepath.Join(top, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Dir(p)
	}
	repo := write("repo/go.mod", "// the library\nmodule github.com/ctoken/ctoken\n\ngo 1.24\n")
	tools := write("repo/.ci/tools/go.mod", "module tools\n")
	other := write("elsewhere/go.mod", "module github.com/ctoken/ctoken/mcp\n")
	deep := filepath.Join(tools, "doccheck")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, want string
	}{
		{"the root itself", repo, repo},
		{"from the tools module, past its own go.mod", tools, repo},
		{"from a package of the tools module", deep, repo},
		{"no library go.mod above", other, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := From(tc.from)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), ModulePath) {
					t.Fatalf("From(%s) = %q, %v; want an error naming %s", tc.from, got, err, ModulePath)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("From(%s) = %q, %v; want %q", tc.from, got, err, tc.want)
			}
		})
	}
}

func TestFindFromThisPackageIsTheRepository(t *testing.T) {
	root, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".ci", "tools", "internal", "reporoot", "reporoot.go")); err != nil {
		t.Fatalf("Find() = %s, which does not hold this package: %v", root, err)
	}
}
