package doccheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPackageDocsRouteAndLinkAnExample holds every published package of
// the repository to [RouteProblems]'s rule: a package doc whose first
// paragraph links the name most users start with, and which names an
// Example (its compiled happy path) that exists.
func TestPackageDocsRouteAndLinkAnExample(t *testing.T) {
	statSources(t)
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Package{}
	var dirs []string
	for _, p := range pkgs {
		byName[p.Name] = p
		dirs = append(dirs, p.Dir)
	}
	for _, want := range []string{".", "webhook", "idempotency", "replay", "redisstore", "pgstore", "sqlitestore", "otel", "mcp", "mcpgo"} {
		if !slices.Contains(dirs, want) {
			t.Fatalf("Packages found %v, not %s", dirs, want)
		}
	}
	for _, p := range pkgs {
		t.Run(p.Dir, func(t *testing.T) {
			for _, problem := range RouteProblems(p, byName) {
				t.Errorf("%s (package %s): %s", p.Dir, p.Name, problem)
			}
		})
	}
}

// TestRouteProblemsRefusesADocThatDoesNotRoute writes one package per case
// and pins each rejection of [RouteProblems], and the doc it accepts.
func TestRouteProblemsRefusesADocThatDoesNotRoute(t *testing.T) {
	const decls = "type Verifier struct{}\n\nfunc (*Verifier) Verify() {}\n\nfunc New() *Verifier { return nil }\n"
	const example = "package p_test\n\nfunc ExampleVerifier_Verify() {}\n"
	other := &Package{Dir: "q", Name: "q", Exported: map[string]bool{"Store": true}}
	for _, tc := range []struct {
		name, doc, want string // want "" means no problem
	}{
		{"accepted", "// Package p verifies. For most uses, start with [Verifier].\n//\n// See ExampleVerifier_Verify.\n", ""},
		{"accepted method link", "// Package p verifies with [Verifier.Verify].\n//\n// ExampleVerifier_Verify shows it.\n", ""},
		{"accepted other package's name", "// Package p wraps [q.Store].\n//\n// ExampleVerifier_Verify shows it.\n", ""},
		{"no doc", "", "no package doc comment"},
		{"first paragraph without a link", "// Package p verifies.\n//\n// Start with [Verifier]; see ExampleVerifier_Verify.\n", "the first paragraph links no name"},
		{"link to an undeclared name", "// Package p verifies. Start with [Checker].\n//\n// ExampleVerifier_Verify.\n", "the first paragraph links no name"},
		{"link to an unknown package", "// Package p wraps [r.Store].\n//\n// ExampleVerifier_Verify.\n", "the first paragraph links no name"},
		{"a Markdown link is not a doc link", "// Package p verifies. Start with [Verifier](http://x).\n//\n// ExampleVerifier_Verify.\n", "the first paragraph links no name"},
		{"no example named", "// Package p verifies. Start with [Verifier].\n//\n// For example, call Verify.\n", "the doc names no Example function"},
		{"a missing example named", "// Package p verifies. Start with [Verifier].\n//\n// See ExampleVerifier_Verify and Example_gone.\n", "the doc names Example_gone, which no _test.go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, src string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write("p.go", tc.doc+"package p\n\n"+decls)
			write("example_test.go", example)
			pkgs, err := Packages(dir)
			if err != nil || len(pkgs) != 1 {
				t.Fatalf("Packages = %v, %v; want one package", pkgs, err)
			}
			got := RouteProblems(pkgs[0], map[string]*Package{"q": other, "p": pkgs[0]})
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Fatalf("problems %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// TestPackagesSkipsMainToolsAndInternals pins which directories hold no
// published package: main packages, test-only directories, and the
// directories skippedDirs names.
func TestPackagesSkipsMainToolsAndInternals(t *testing.T) {
	dir := t.TempDir()
	for path, src := range map[string]string{
		"lib/lib.go":            "package lib\n",
		"cmd/tool/main.go":      "package lib\n",
		"internal/x/x.go":       "package x\n",
		"app/main.go":           "package main\n",
		"onlytests/a_test.go":   "package onlytests\n",
		".ci/tools/t.go":        "package tools\n",
		"lib/testdata/td/td.go": "package td\n",
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pkgs, err := Packages(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pkgs {
		got = append(got, p.Dir)
	}
	if !slices.Equal(got, []string{"lib"}) {
		t.Fatalf("Packages found %q, want [lib]", got)
	}
}
